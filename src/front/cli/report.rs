//! `ppol report RUN_DIR [-o OUT.html]`

use std::path::PathBuf;

use clap::Args;

/// Arguments of `ppol report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The run directory (holds log.jsonl).
    pub run_dir: PathBuf,
    /// Output HTML file (default RUN_DIR/report.html).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Run `ppol report`: write the self-contained HTML report and print its path.
pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let path = crate::front::ops::report(&args.run_dir, args.output.as_deref())?;
    println!("{}", path.display());
    Ok(())
}
