//! `strata-projector`: folds the log into the projections.

use clap::Parser;
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::admin::admin_routes_with_health;
use strata_runtime::startup::Service;
use strata_runtime::BackendOpts;

/// Consumes the log in the projector group and writes the projections.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    #[command(flatten)]
    backends: BackendOpts,
    /// Address of the admin endpoints (/healthz, /readyz, /metrics).
    #[arg(long, env = "STRATA_ADMIN_LISTEN", default_value = "127.0.0.1:7702")]
    admin_listen: std::net::SocketAddr,
    /// Consumer group.
    #[arg(long, env = "STRATA_PROJECTOR_GROUP", default_value = strata_projector::DEFAULT_GROUP)]
    group: String,
    /// Most records per transaction.
    #[arg(long, env = "STRATA_PROJECTOR_BATCH_SIZE", default_value_t = 2000)]
    batch_size: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = strata_runtime::telemetry::init_tracing("info");
    let opts = Opts::parse();
    // The port answers at once: /readyz 503 until the backends are open (see
    // strata_runtime::startup).
    let service = Service::bind(opts.admin_listen, "strata-projector").await?;
    let Some(backends) = service.open_backends(&opts.backends).await? else {
        return Ok(());
    };
    let projector = Projector::start(
        backends.clone(),
        ProjectorOptions {
            group: opts.group,
            batch_size: opts.batch_size,
            ..ProjectorOptions::default()
        },
    )
    .await?;
    // /readyz fails while the projector's batches keep failing (a backend outage).
    let admin = admin_routes_with_health(backends, projector.health());
    service
        .run_worker(admin, |stop| projector.run(stop))
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}
