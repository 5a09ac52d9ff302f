//! `strata-memory`: the memory extractor service.

use clap::Parser;
use strata_runtime::admin::admin_routes;
use strata_runtime::startup::Service;
use strata_runtime::BackendOpts;

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
    /// Sessions whose context the extractor holds in memory (the least recently seen are
    /// evicted and read back from the projections when they come back).
    #[arg(long, env = "STRATA_MEMORY_MAX_SESSIONS", default_value_t = strata_memory::MemoryLimits::default().sessions)]
    max_sessions: usize,
    /// Memories held for supersession and conflicts over all projects (the least recently
    /// seen projects are evicted).
    #[arg(long, env = "STRATA_MEMORY_MAX_MEMORIES", default_value_t = strata_memory::MemoryLimits::default().memories)]
    max_memories: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = strata_runtime::telemetry::init_tracing("info");
    let opts = Opts::parse();
    // The port answers at once: /readyz 503 until the backends are open (see
    // strata_runtime::startup).
    let service = Service::bind(opts.admin_listen, "strata-memory").await?;
    let Some(backends) = service.open_backends(&opts.backends).await? else {
        return Ok(());
    };
    let worker = backends.clone();
    let group = opts.group.clone();
    let limits = strata_memory::MemoryLimits {
        sessions: opts.max_sessions,
        memories: opts.max_memories,
        ..Default::default()
    };
    let mut engine = strata_core::memory::MemoryEngine::with_limits(
        vec![Box::new(strata_core::memory::RuleExtractor)],
        limits,
    );
    let (stats, by_type) = service
        .run_worker(admin_routes(backends), |stop| async move {
            strata_memory::run_with(&worker, &group, &mut engine, stop).await
        })
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    tracing::info!(events = stats.events, ?by_type, "stopped");
    Ok(())
}
