//! `strata-compactor`: the compactor service.

use clap::Parser;
use strata_runtime::{BackendOpts, Backends};

/// Consumes the log in the compactor's consumer group.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    #[command(flatten)]
    backends: BackendOpts,
    /// Consumer group.
    #[arg(long, default_value = strata_compactor::DEFAULT_GROUP)]
    group: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    strata_runtime::init_tracing("info");
    let opts = Opts::parse();
    let backends = Backends::open(&opts.backends, "strata-compactor").await?;
    let (stats, by_type) =
        strata_compactor::run(&backends, &opts.group, strata_runtime::shutdown_signal()).await?;
    tracing::info!(events = stats.events, ?by_type, "stopped");
    Ok(())
}
