//! The plan of `ppol episodes` (and `ppol_rs.episodes()`): every selected task with each of
//! the personas meant for it, `trials` times, each job seeded from what it is.

use std::collections::HashMap;

use super::Job;
use crate::persona::Persona;
use crate::rng::derive_seed;
use crate::{limits, Error, Result};

/// The seed of an episode of `ppol episodes`: derived from the root seed and the job itself
/// (task, persona id, trial), never from its place in the plan, so the same episode gets the
/// same seed whatever else is played beside it, and a rerun with more tasks reuses it.
pub fn episode_seed(root: u64, task_id: &str, persona: Option<&Persona>, trial: u32) -> u64 {
    let persona = persona.map_or("none", |p| p.persona_id.as_str());
    derive_seed(
        root,
        &format!("episode\u{1f}{task_id}\u{1f}{persona}\u{1f}{trial}"),
    )
}

/// The jobs of a plan, in order: every task with each of the personas meant for it (a persona
/// without `task_id` fits every task; no personas: the plain simulator), `trials` times.
/// Refused: more than [`limits::MAX_EPISODES`] jobs (counted before any is made), no (task,
/// persona) pair at all, and a persona id given twice for one task (its episodes would share
/// an id and a seed).
pub fn plan_episodes(
    task_ids: &[String],
    personas: Option<&[Persona]>,
    trials: u32,
    root_seed: u64,
) -> Result<Vec<Job>> {
    limits::check("trials", trials, 1, limits::MAX_TRIALS)?;
    let fits = |p: &&Persona, t: &str| p.task_id.as_deref().is_none_or(|id| id == t);
    let pairs: u128 = task_ids
        .iter()
        .map(|t| match personas {
            None => 1,
            Some(all) => all.iter().filter(|p| fits(p, t)).count() as u128,
        })
        .sum();
    let planned = pairs * u128::from(trials);
    if planned > limits::MAX_EPISODES as u128 {
        return Err(Error::config(
            "tasks × personas × trials",
            format!(
                "{pairs} (task, persona) pairs × {trials} trials = {planned} episodes, more than \
                 {} (ppol's limit of one request); play fewer trials, personas or tasks at once",
                limits::MAX_EPISODES
            ),
        ));
    }
    if planned == 0 {
        return Err(Error::config(
            "personas",
            "no (task, persona) pairs: do the personas' task_id values match the selected tasks?",
        ));
    }
    let mut jobs = Vec::with_capacity(planned as usize);
    for t in task_ids {
        let ps: Vec<Option<&Persona>> = match personas {
            None => vec![None],
            Some(all) => all.iter().filter(|p| fits(p, t)).map(Some).collect(),
        };
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for p in ps {
            if let Some(p) = p {
                if seen.insert(p.persona_id.as_str(), ()).is_some() {
                    return Err(Error::config(
                        "personas",
                        format!(
                            "persona id '{}' is given twice for task '{t}': persona ids must be \
                             unique per task (an episode's id and seed are made from it)",
                            crate::io::printable(&p.persona_id)
                        ),
                    ));
                }
            }
            for k in 0..trials {
                jobs.push(Job {
                    task_id: t.clone(),
                    persona: p.cloned(),
                    trial: k,
                    seed: episode_seed(root_seed, t, p, k),
                });
            }
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn persona(id: &str, task: Option<&str>) -> Persona {
        Persona {
            task_id: task.map(str::to_string),
            persona_id: id.into(),
            description: String::new(),
            axis_placement: Default::default(),
            text: format!("{id} text"),
            reasoning: None,
            source: None,
        }
    }

    #[test]
    fn a_job_seed_does_not_depend_on_the_rest_of_the_plan() {
        let one = plan_episodes(&["b".into()], None, 2, 7).unwrap();
        let two = plan_episodes(&["a".into(), "b".into()], None, 2, 7).unwrap();
        assert_eq!(one[..], two[2..]);
        assert_ne!(one[0].seed, one[1].seed);
        assert_ne!(
            plan_episodes(&["b".into()], None, 1, 8).unwrap()[0].seed,
            one[0].seed
        );
    }

    #[test]
    fn personas_pair_with_their_tasks_and_ids_must_be_unique_per_task() {
        let ps = [persona("p", Some("a")), persona("q", None)];
        let jobs = plan_episodes(&["a".into(), "b".into()], Some(&ps), 1, 0).unwrap();
        let ids: Vec<String> = jobs.iter().map(Job::id).collect();
        assert_eq!(ids, ["a:p:0", "a:q:0", "b:q:0"]);
        let dup = [persona("p", Some("a")), persona("p", None)];
        let e = plan_episodes(&["a".into()], Some(&dup), 1, 0).unwrap_err();
        assert!(e.to_string().contains("given twice for task 'a'"), "{e}");
        // the same id on different tasks is fine
        let ok = [persona("p", Some("a")), persona("p", Some("b"))];
        assert_eq!(
            plan_episodes(&["a".into(), "b".into()], Some(&ok), 1, 0)
                .unwrap()
                .len(),
            2
        );
        let none = [persona("p", Some("z"))];
        assert!(plan_episodes(&["a".into()], Some(&none), 1, 0).is_err());
    }

    #[test]
    fn plans_over_the_limit_are_refused_before_they_are_made() {
        let tasks: Vec<String> = (0..200).map(|i| i.to_string()).collect();
        let e = plan_episodes(&tasks, None, 1000, 0).unwrap_err();
        assert!(e.to_string().contains("200000 episodes"), "{e}");
    }
}
