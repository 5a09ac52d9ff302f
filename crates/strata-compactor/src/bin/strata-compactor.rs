//! `strata-compactor`: the compactor service.

use clap::Parser;
use strata_runtime::admin::admin_routes;
use strata_runtime::startup::Service;
use strata_runtime::BackendOpts;

/// Consumes the log in the compactor's consumer group.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    #[command(flatten)]
    backends: BackendOpts,
    /// Address of the admin endpoints (/healthz, /readyz, /metrics).
    #[arg(long, env = "STRATA_ADMIN_LISTEN", default_value = "127.0.0.1:7704")]
    admin_listen: std::net::SocketAddr,
    /// Consumer group.
    #[arg(long, env = "STRATA_COMPACTOR_GROUP", default_value = strata_compactor::DEFAULT_GROUP)]
    group: String,
    /// Compact when a session's uncompacted tokens exceed this fraction of its budget.
    #[arg(long, env = "STRATA_COMPACT_THRESHOLD", default_value_t = 0.6)]
    threshold: f64,
    /// User turns kept verbatim after a compaction's cut.
    #[arg(long, env = "STRATA_COMPACT_KEEP_TURNS", default_value_t = 2)]
    keep_turns: usize,
    /// When the kept turns hold more than this fraction of the budget (a long turn of tool
    /// use), the cut moves into the turn and keeps its newest steps that fit.
    #[arg(long, env = "STRATA_COMPACT_KEEP_FRACTION", default_value_t = 0.25)]
    keep_fraction: f64,
    /// Sessions whose uncompacted events the compactor holds in memory (the least recently
    /// seen are evicted and read back from the projections when they come back).
    #[arg(long, env = "STRATA_COMPACTOR_MAX_SESSIONS", default_value_t = strata_compactor::PlannerLimits::default().sessions)]
    max_sessions: usize,
    /// Approximate MiB of events held over all sessions.
    #[arg(long, env = "STRATA_COMPACTOR_MAX_HELD_MIB", default_value_t = strata_compactor::PlannerLimits::default().event_bytes >> 20)]
    max_held_mib: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = strata_runtime::telemetry::init_tracing("info");
    let opts = Opts::parse();
    // The port answers at once: /readyz 503 until the backends are open (see
    // strata_runtime::startup).
    let service = Service::bind(opts.admin_listen, "strata-compactor").await?;
    let Some(backends) = service.open_backends(&opts.backends).await? else {
        return Ok(());
    };
    let worker = backends.clone();
    let group = opts.group.clone();
    let mut planner = strata_compactor::Planner::new(strata_compactor::CompactorOptions {
        threshold: opts.threshold,
        keep_turns: opts.keep_turns,
        keep_fraction: opts.keep_fraction,
    })
    .with_limits(strata_compactor::PlannerLimits {
        sessions: opts.max_sessions,
        event_bytes: opts.max_held_mib << 20,
        ..Default::default()
    });
    let (stats, by_type) = service
        .run_worker(admin_routes(backends), |stop| async move {
            strata_compactor::run_with(&worker, &group, &mut planner, stop).await
        })
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    tracing::info!(events = stats.events, ?by_type, "stopped");
    Ok(())
}
