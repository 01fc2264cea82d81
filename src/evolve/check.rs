//! The one check of a run's settings, refused before a run creates or pays for anything:
//! [`check_config`] (called by `ppol evolve`, `ppol resume` and the front ends).

use crate::evolve::config::RunConfig;
use crate::evolve::evaluate::program_metric_names;
use crate::evolve::mutation::dispatch::Mutator;
use crate::{Error, Result};

/// The one check of a run's settings, before it creates or pays for anything, in order: every
/// section's values ([`RunConfig::validate`], each section's own `validate`), what only a run
/// can check (the archive's metrics, below, and the mutation settings, [`Mutator::check`]),
/// then the files and directories it reads ([`RunConfig::check_inputs`]). `run::evolve` and
/// `run::resume` call it; the front ends call it (as `evolve::run::check_config`) before they
/// start a run, so a bad setting is exit 2 / `ConfigError` at once.
pub fn check_config(cfg: &RunConfig) -> Result<()> {
    cfg.validate()?;
    check_metric_names(cfg)?;
    Mutator::check(&cfg.mutation, &cfg.archive, !cfg.offline())?;
    cfg.check_inputs()
}

/// The archive ranks and bins programs by metrics they carry: `fitness_metric` and every
/// descriptor must be one of them, or the first evaluation would fail after being paid for.
fn check_metric_names(cfg: &RunConfig) -> Result<()> {
    let known = program_metric_names(cfg.fitness.select_by);
    let check = |key: &str, name: &str| -> Result<()> {
        if known.iter().any(|k| k == name) {
            Ok(())
        } else {
            Err(Error::config(
                key,
                format!(
                    "unknown metric '{name}' (programs carry: {})",
                    known.join(", ")
                ),
            ))
        }
    };
    check("archive.fitness_metric", &cfg.archive.fitness_metric)?;
    for d in &cfg.archive.feature_dimensions {
        check("archive.feature_dimensions", d)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_archive_metrics_are_named_before_anything_runs() {
        let mut cfg = RunConfig::default();
        assert!(check_metric_names(&cfg).is_ok());
        cfg.archive.fitness_metric = "human_likeness".into();
        assert!(check_metric_names(&cfg).is_ok());
        cfg.archive.fitness_metric = "score".into();
        let e = check_metric_names(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("archive.fitness_metric") && e.contains("'score'"),
            "{e}"
        );
        cfg.archive.fitness_metric = "combined".into();
        cfg.archive.feature_dimensions = vec!["coverage".into(), "dice".into()];
        let e = check_metric_names(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("archive.feature_dimensions") && e.contains("'dice'"),
            "{e}"
        );
    }
}
