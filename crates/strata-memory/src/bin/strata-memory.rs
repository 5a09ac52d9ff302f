//! `strata-memory`: the memory extractor service.

use clap::Parser;
use strata_runtime::{BackendOpts, Backends};

/// Consumes the log in the memory extractor's consumer group.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    #[command(flatten)]
    backends: BackendOpts,
    /// Address of the admin endpoints (/healthz, /readyz, /metrics).
    #[arg(long, env = "STRATA_ADMIN_LISTEN", default_value = "127.0.0.1:7703")]
    admin_listen: std::net::SocketAddr,
    /// Consumer group.
    #[arg(long, env = "STRATA_MEMORY_GROUP", default_value = strata_memory::DEFAULT_GROUP)]
    group: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    strata_runtime::init_tracing("info");
    let opts = Opts::parse();
    let backends = Backends::open(&opts.backends, "strata-memory").await?;
    let worker = backends.clone();
    let group = opts.group.clone();
    let (stats, by_type) =
        strata_runtime::admin::run_worker(backends, opts.admin_listen, |stop| async move {
            strata_memory::run(&worker, &group, stop).await
        })
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    tracing::info!(events = stats.events, ?by_type, "stopped");
    Ok(())
}
