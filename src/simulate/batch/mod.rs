//! The one place episodes are played: a plan of jobs (task, persona, trial, seed) becomes played
//! episodes. Every verb that plays episodes goes through [`Batch::play`] — `ppol episodes`, a
//! run's baseline, candidate evaluation and its cascade, validation, `ppol eval` and `compare`
//! — so concurrency, the stop flag, the wall-clock deadline, the budget, the incremental sink
//! and progress have one implementation.
//!
//! - **Concurrency**: at most `concurrency` episodes in flight; jobs are started as earlier
//!   ones finish, so a plan of 10^5 jobs holds 10^5 small job records, not 10^5 futures (the
//!   world's own bounds — simulator processes, the LLM client's limits — apply inside).
//! - **Stop and deadline**: checked before each wait and every [`TICK`]; the batch returns at
//!   once with what finished (the episodes in flight are dropped, and not recorded).
//! - **Budget**: once the budget check says it is spent, jobs not yet started are recorded as
//!   failed with that reason (a rerun plays them again).
//! - **Sink** ([`SinkPaths`]): every finished episode is appended to a partial file as it
//!   finishes; a rerun of the same plan reuses them and plays only the rest; when the plan is
//!   complete the final file is written in plan order and the partial file removed.
//! - **Progress** ([`Progress`]): after every episode and every [`HEARTBEAT`] while waiting,
//!   with what is in flight and for how long, so no stage is silent.
//!
//! The seed of every job is the caller's (derived from the job, never from the order in which
//! episodes finish or which process plays them), so a batch gives the same episodes for any
//! concurrency and any executor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

// tokio's clock: the same as std's, but a test can pause and advance it
use tokio::time::Instant;

use futures::StreamExt;

use crate::persona::Persona;
use crate::simulate::episode::record::{episode_id, Episode, EpisodeStatus};
use crate::simulate::episode::EpisodeRunner;
use crate::{Error, Result};

mod plan;
mod sink;

pub use plan::{episode_seed, plan_episodes};
pub use sink::SinkPaths;

/// How often the stop flag and the deadline are checked while episodes are in flight.
pub const TICK: Duration = Duration::from_millis(100);

/// How often progress is reported while no episode finishes.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// One episode to play.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Task id.
    pub task_id: String,
    /// The persona (None: the plain simulator).
    pub persona: Option<Persona>,
    /// Trial (0-based).
    pub trial: u32,
    /// The episode's seed.
    pub seed: u64,
}

impl Job {
    /// The episode id (`<task>:<persona>:<trial>`).
    pub fn id(&self) -> String {
        episode_id(&self.task_id, self.persona.as_ref(), self.trial)
    }
}

/// Where a batch stands, for progress lines and bars.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// What is played (`baseline`, `episodes`, `eval: seed`).
    pub label: String,
    /// What is counted: `episodes`, or `tasks generated` ([`join_reporting`]).
    pub unit: &'static str,
    /// Episodes (units) finished (reused ones included).
    pub done: usize,
    /// Episodes (units) of the plan.
    pub total: usize,
    /// Finished episodes that failed.
    pub failed: usize,
    /// Episodes taken from an earlier, interrupted process.
    pub reused: usize,
    /// Episodes in flight.
    pub in_flight: usize,
    /// Seconds the longest-running episode in flight has run.
    pub longest_s: f64,
    /// Whether this is a heartbeat (nothing finished since the last report).
    pub heartbeat: bool,
}

impl Progress {
    /// One line: `baseline: 12/40 episodes (1 failed, 3 in flight, the longest for 42 s)`.
    pub fn line(&self) -> String {
        let mut extra = Vec::new();
        if self.reused > 0 {
            extra.push(format!("{} kept from an earlier run", self.reused));
        }
        if self.failed > 0 {
            extra.push(format!("{} failed", self.failed));
        }
        if self.in_flight > 0 && self.done < self.total {
            extra.push(format!(
                "{} in flight, the longest for {:.0} s",
                self.in_flight, self.longest_s
            ));
        }
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(" ({})", extra.join(", "))
        };
        format!(
            "{}: {}/{} {}{extra}",
            self.label, self.done, self.total, self.unit
        )
    }
}

/// Run `futures` all at once and return their outputs in order, reporting progress to
/// `progress` (counting `unit`) as each finishes and every [`HEARTBEAT`] while none does —
/// for long steps that are not episodes, such as generating a program's personas.
pub async fn join_reporting<F: std::future::Future>(
    label: &str,
    unit: &'static str,
    futures: Vec<F>,
    progress: Option<&(dyn Fn(&Progress) + Sync)>,
) -> Vec<F::Output> {
    let total = futures.len();
    let Some(report) = progress else {
        return futures::future::join_all(futures).await;
    };
    let started = Instant::now();
    let mut out: Vec<Option<F::Output>> = (0..total).map(|_| None).collect();
    let mut running: futures::stream::FuturesUnordered<_> = futures
        .into_iter()
        .enumerate()
        .map(|(i, f)| async move { (i, f.await) })
        .collect();
    let (mut done, mut last) = (0usize, Instant::now());
    let say = |done: usize, heartbeat: bool| {
        report(&Progress {
            label: label.to_string(),
            unit,
            done,
            total,
            failed: 0,
            reused: 0,
            in_flight: total - done,
            longest_s: started.elapsed().as_secs_f64(),
            heartbeat,
        })
    };
    say(0, false);
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            next = running.next() => match next {
                Some((i, x)) => {
                    out[i] = Some(x);
                    done += 1;
                    last = Instant::now();
                    say(done, false);
                }
                None => break,
            },
            _ = tick.tick() => {
                if last.elapsed() >= HEARTBEAT {
                    last = Instant::now();
                    say(done, true);
                }
            }
        }
    }
    out.into_iter().flatten().collect()
}

/// Why a batch stopped before its plan was played.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The stop flag was set (Ctrl-C, Python's `stop()`).
    Interrupted,
    /// The wall-clock deadline passed.
    Deadline,
    /// The test hook's episode limit was reached.
    Limit,
}

impl Stopped {
    /// `interrupted`, `the wall-clock deadline passed`, `paused (test hook)`.
    pub fn describe(&self) -> &'static str {
        match self {
            Stopped::Interrupted => "interrupted",
            Stopped::Deadline => "the wall-clock deadline passed",
            Stopped::Limit => "paused (test hook)",
        }
    }
}

/// What a batch played.
#[derive(Debug, Clone)]
pub struct Played {
    /// One entry per job in plan order; None for a job not played because the batch stopped.
    pub episodes: Vec<Option<Episode>>,
    /// Episodes taken from the partial file of an earlier process.
    pub reused: usize,
    /// Set when the batch stopped before the plan was played.
    pub stopped: Option<Stopped>,
    /// The partial file the finished episodes are kept in (with a sink).
    pub partial: Option<std::path::PathBuf>,
}

impl Played {
    /// Episodes finished.
    pub fn done(&self) -> usize {
        self.episodes.iter().filter(|e| e.is_some()).count()
    }

    /// Every episode in plan order, when the plan was played in full.
    pub fn complete(self) -> Option<Vec<Episode>> {
        if self.stopped.is_some() {
            return None;
        }
        self.episodes.into_iter().collect()
    }

    /// Every episode in plan order, or [`Error::Cancelled`] saying what stopped `what` (the
    /// deadline named by `deadline_key`) and what is kept.
    pub fn complete_or_cancelled(
        self,
        what: &str,
        deadline_key: &str,
        resume_hint: &str,
    ) -> Result<Vec<Episode>> {
        match self.stopped {
            None => Ok(self.episodes.into_iter().flatten().collect()),
            Some(why) => {
                let why = match why {
                    Stopped::Deadline => format!("{deadline_key} reached"),
                    other => other.describe().to_string(),
                };
                let kept = match &self.partial {
                    Some(p) => format!(" are kept in {}", p.display()),
                    None => " were played".into(),
                };
                Err(Error::Cancelled(format!(
                    "{why} during {what}: {} of {} episodes{kept}{resume_hint}",
                    self.done(),
                    self.episodes.len(),
                )))
            }
        }
    }
}

/// Who plays a batch: the runner, and the backend and domain its episodes record.
#[derive(Clone, Copy)]
pub struct Player<'a> {
    /// Plays one episode.
    pub runner: &'a dyn EpisodeRunner,
    /// The backend (`scripted`, the models, the external command): an earlier episode of a
    /// sink is reused only when it was played with the same.
    pub backend: &'a str,
    /// The domain recorded in an episode that was not played.
    pub domain: &'a str,
}

/// The budget check: the reason the budget is spent, or None.
pub type BudgetFn<'a> = &'a (dyn Fn() -> Option<String> + Sync);

/// A plan of jobs and how to play it (see the module documentation).
pub struct Batch<'a> {
    label: String,
    jobs: &'a [Job],
    concurrency: usize,
    stop: Option<&'a AtomicBool>,
    deadline: Option<std::time::Instant>,
    budget: Option<BudgetFn<'a>>,
    sink: Option<SinkPaths>,
    progress: Option<&'a (dyn Fn(&Progress) + Sync)>,
    limit: Option<usize>,
}

impl<'a> Batch<'a> {
    /// A batch of `jobs` named `label` in progress lines; every job at once unless
    /// [`Batch::concurrency`] says otherwise.
    pub fn new(label: impl Into<String>, jobs: &'a [Job]) -> Self {
        Batch {
            label: label.into(),
            jobs,
            concurrency: jobs.len().max(1),
            stop: None,
            deadline: None,
            budget: None,
            sink: None,
            progress: None,
            limit: None,
        }
    }

    /// At most `n` episodes in flight (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Stop when `flag` is set.
    pub fn stop(mut self, flag: &'a AtomicBool) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Stop at `deadline` (None: no deadline).
    pub fn deadline(mut self, deadline: Option<std::time::Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Record jobs not yet started as failed once `check` says the budget is spent.
    pub fn budget(mut self, check: BudgetFn<'a>) -> Self {
        self.budget = Some(check);
        self
    }

    /// Keep episodes as they finish, and reuse an earlier process's (see [`SinkPaths`]).
    pub fn sink(mut self, paths: SinkPaths) -> Self {
        self.sink = Some(paths);
        self
    }

    /// Report progress to `f`.
    pub fn progress(mut self, f: &'a (dyn Fn(&Progress) + Sync)) -> Self {
        self.progress = Some(f);
        self
    }

    /// Test hook: play at most `n` of the missing episodes, then stop ([`Stopped::Limit`]).
    pub fn limit(mut self, n: Option<usize>) -> Self {
        self.limit = n;
        self
    }

    /// Play the plan with `runner` of `world` (its backend decides which earlier episodes of a
    /// sink are reused; its domain is recorded in episodes not played). Errors: the sink's
    /// files only; a failed episode is data.
    pub async fn play(self, player: Player<'_>) -> Result<Played> {
        let Player {
            runner,
            backend,
            domain,
        } = player;
        let total = self.jobs.len();
        let (sink, reused) = match self.sink.clone() {
            Some(paths) => {
                let (s, r) = sink::Sink::open(paths, self.jobs, backend)?;
                (Some(s), r)
            }
            None => (None, HashMap::new()),
        };
        let mut episodes: Vec<Option<Episode>> = vec![None; total];
        let n_reused = reused.len();
        let mut failed = 0usize;
        for (i, e) in reused {
            episodes[i] = Some(e);
        }
        let mut done = n_reused;
        let todo: Vec<usize> = (0..total)
            .filter(|&i| episodes[i].is_none())
            .take(self.limit.unwrap_or(usize::MAX))
            .collect();
        let limited = self.limit.is_some_and(|n| n < total - n_reused);
        let started: Mutex<HashMap<usize, Instant>> = Mutex::new(HashMap::new());
        let report = |done: usize, failed: usize, heartbeat: bool| {
            if let Some(p) = self.progress {
                let (in_flight, longest_s) = {
                    let s = started.lock().unwrap_or_else(|e| e.into_inner());
                    let longest = s.values().map(|t| t.elapsed().as_secs_f64());
                    (s.len(), longest.fold(0.0, f64::max))
                };
                p(&Progress {
                    label: self.label.clone(),
                    unit: "episodes",
                    done,
                    total,
                    failed,
                    reused: n_reused,
                    in_flight,
                    longest_s,
                    heartbeat,
                });
            }
        };
        report(done, failed, false);
        let why_stop = || {
            if self.stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                Some(Stopped::Interrupted)
            } else if self
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
            {
                Some(Stopped::Deadline)
            } else {
                None
            }
        };
        let jobs = self.jobs;
        let budget = self.budget;
        let started_ref = &started;
        let mut stream = futures::stream::iter(todo)
            .map(|i| async move {
                let job = &jobs[i];
                let spent = budget.and_then(|b| b());
                let episode = match spent {
                    Some(why) => Episode::failed(
                        &job.task_id,
                        job.persona.as_ref(),
                        job.trial,
                        job.seed,
                        domain,
                        backend,
                        format!("not run: budget exhausted ({why})"),
                    ),
                    None => {
                        started_ref
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(i, Instant::now());
                        let e = runner
                            .run(&job.task_id, job.persona.as_ref(), job.trial, job.seed)
                            .await;
                        started_ref
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&i);
                        e
                    }
                };
                (i, episode)
            })
            .buffer_unordered(self.concurrency);
        let mut stopped = None;
        let mut last_report = Instant::now();
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some(why) = why_stop() {
                stopped = Some(why);
                break;
            }
            tokio::select! {
                next = stream.next() => match next {
                    Some((i, e)) => {
                        if let Some(s) = &sink {
                            s.push(&e)?;
                        }
                        if e.status == EpisodeStatus::Failed {
                            failed += 1;
                        }
                        episodes[i] = Some(e);
                        done += 1;
                        last_report = Instant::now();
                        report(done, failed, false);
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    if last_report.elapsed() >= HEARTBEAT {
                        last_report = Instant::now();
                        report(done, failed, true);
                    }
                }
            }
        }
        drop(stream);
        if stopped.is_none() && limited {
            stopped = Some(Stopped::Limit);
        }
        let partial = sink
            .as_ref()
            .and_then(|s| s.partial().map(|p| p.to_path_buf()));
        if stopped.is_none() {
            if let Some(s) = sink {
                s.finish(&episodes.iter().flatten().collect::<Vec<_>>())?;
            }
        }
        Ok(Played {
            episodes,
            reused: n_reused,
            stopped,
            partial,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    /// Plays every episode in `secs` (tokio time), failing those of task `bad`.
    struct Slow {
        secs: u64,
    }

    #[async_trait]
    impl EpisodeRunner for Slow {
        async fn run(&self, task: &str, p: Option<&Persona>, trial: u32, seed: u64) -> Episode {
            tokio::time::sleep(Duration::from_secs(self.secs)).await;
            let mut e = Episode::failed(task, p, trial, seed, "d", "b", String::new());
            if task != "bad" {
                e.status = EpisodeStatus::Ok;
                e.error = None;
            }
            e
        }
    }

    fn jobs(tasks: &[&str]) -> Vec<Job> {
        tasks
            .iter()
            .enumerate()
            .map(|(i, t)| Job {
                task_id: t.to_string(),
                persona: None,
                trial: 0,
                seed: i as u64,
            })
            .collect()
    }

    fn player(r: &Slow) -> Player<'_> {
        Player {
            runner: r,
            backend: "b",
            domain: "d",
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_episode_is_not_silent_and_results_keep_plan_order() {
        let seen = Mutex::new(Vec::<Progress>::new());
        let record = |p: &Progress| seen.lock().unwrap().push(p.clone());
        let plan = jobs(&["a", "b", "c"]);
        let played = Batch::new("test", &plan)
            .concurrency(2)
            .progress(&record)
            .play(player(&Slow { secs: 7 }))
            .await
            .unwrap();
        let ids: Vec<String> = played
            .episodes
            .iter()
            .flatten()
            .map(|e| e.id.clone())
            .collect();
        assert_eq!(ids, ["a:none:0", "b:none:0", "c:none:0"]);
        let seen = seen.into_inner().unwrap();
        let beats = seen.iter().filter(|p| p.heartbeat).count();
        // 14 s of waiting (two rounds of 7 s), a heartbeat every 2 s while nothing finishes
        assert!(beats >= 5, "{beats} heartbeats: {seen:?}");
        let first = seen.iter().find(|p| p.heartbeat).unwrap();
        assert_eq!((first.in_flight, first.done), (2, 0), "{first:?}");
        assert!(
            first.line().contains("2 in flight, the longest for"),
            "{}",
            first.line()
        );
        assert_eq!(seen.last().unwrap().done, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn stop_deadline_budget_and_limit() {
        let plan = jobs(&["a", "b", "c", "d"]);
        let runner = Slow { secs: 1 };
        // a spent budget: nothing is played, every job is recorded failed with the reason
        let spent = || Some("max_usd 1 reached".to_string());
        let played = Batch::new("t", &plan)
            .budget(&spent)
            .play(player(&runner))
            .await
            .unwrap();
        let e = played.episodes[0].as_ref().unwrap();
        assert_eq!(e.status, EpisodeStatus::Failed);
        assert!(e
            .error
            .as_deref()
            .unwrap()
            .contains("budget exhausted (max_usd 1"));
        // a stop flag already set: nothing starts
        let stop = AtomicBool::new(true);
        let played = Batch::new("t", &plan)
            .stop(&stop)
            .play(player(&runner))
            .await
            .unwrap();
        assert_eq!(
            (played.done(), played.stopped),
            (0, Some(Stopped::Interrupted))
        );
        // the test hook's limit: two played, then stopped
        let played = Batch::new("t", &plan)
            .limit(Some(2))
            .play(player(&runner))
            .await
            .unwrap();
        assert_eq!((played.done(), played.stopped), (2, Some(Stopped::Limit)));
        assert!(played.clone().complete().is_none());
        let e = played
            .complete_or_cancelled("the test", "x.deadline_s", "; rerun")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("paused (test hook) during the test: 2 of 4 episodes"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn the_sink_keeps_episodes_reuses_only_this_plans_and_replays_failures() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o.jsonl");
        let partial = dir.path().join("o.jsonl.partial");
        let plan = jobs(&["a", "bad", "c"]);
        let runner = Slow { secs: 0 };
        let played = Batch::new("t", &plan)
            .limit(Some(2))
            .sink(SinkPaths::beside(&out).unwrap())
            .play(player(&runner))
            .await
            .unwrap();
        assert_eq!(played.done(), 2);
        let text = std::fs::read_to_string(&partial).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        // a torn line and an episode of another plan (another seed) are not reused
        let mut other = Episode::failed("c", None, 0, 99, "d", "b", String::new());
        other.status = EpisodeStatus::Ok;
        std::fs::write(
            &partial,
            format!("{text}{}\n{{\"id\": \"tor", crate::io::to_json(&other)),
        )
        .unwrap();
        let played = Batch::new("t", &plan)
            .sink(SinkPaths::beside(&out).unwrap())
            .play(player(&runner))
            .await
            .unwrap();
        // "a" was kept; "bad" failed and is played again; "c" is played
        assert_eq!(played.reused, 1);
        assert!(!partial.exists());
        // the episode of the other plan was moved aside with the file, never discarded
        let aside = dir.path().join("o.jsonl.partial.1");
        let read = |p: &std::path::Path| {
            super::sink::read_partial(std::fs::File::open(p).unwrap(), p).unwrap()
        };
        assert!(read(&aside).iter().any(|e| e.seed == 99));
        assert_eq!(
            super::sink::what_differs(&[other.clone()], &plan, "b"),
            "other seeds (`--seed`)"
        );
        let written = crate::simulate::episode::record::load_episodes(&out).unwrap();
        let seeds: Vec<u64> = written.iter().map(|e| e.seed).collect();
        assert_eq!(seeds, [0, 1, 2]);
        // another backend's episodes are not this plan's
        std::fs::write(&partial, std::fs::read_to_string(&out).unwrap()).unwrap();
        let other_backend = Player {
            runner: &runner,
            backend: "other",
            domain: "d",
        };
        let played = Batch::new("t", &plan)
            .sink(SinkPaths::beside(&out).unwrap())
            .play(other_backend)
            .await
            .unwrap();
        assert_eq!(played.reused, 0);
        // its three finished episodes are another plan's: kept beside, in the next free name
        let aside = dir.path().join("o.jsonl.partial.2");
        assert_eq!(read(&aside).len(), 3);
        // a line that is not an episode names the file and line
        std::fs::write(&partial, "{\"id\": 3}\n").unwrap();
        let e = Batch::new("t", &plan)
            .sink(SinkPaths::beside(&out).unwrap())
            .play(player(&runner))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("o.jsonl.partial") && e.contains("line 1"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn join_reporting_keeps_order_and_beats_while_it_waits() {
        let seen = Mutex::new(Vec::<Progress>::new());
        let record = |p: &Progress| seen.lock().unwrap().push(p.clone());
        let futs: Vec<_> = [5u64, 1]
            .into_iter()
            .map(|s| async move {
                tokio::time::sleep(Duration::from_secs(s)).await;
                s
            })
            .collect();
        let out = join_reporting("gen", "tasks generated", futs, Some(&record)).await;
        assert_eq!(out, [5, 1]);
        let seen = seen.into_inner().unwrap();
        assert!(seen.iter().any(|p| p.heartbeat), "{seen:?}");
        assert_eq!(seen.last().unwrap().line(), "gen: 2/2 tasks generated");
    }
}
