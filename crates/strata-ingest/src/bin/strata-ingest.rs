//! `strata-ingest`: the ingest service (HTTP `POST /v1/events`).

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use strata_ingest::{http, IngestOptions, Ingestor};
use strata_runtime::startup::Service;
use strata_runtime::BackendOpts;

/// Validates, deduplicates and sequences events, and appends them to the log.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    #[command(flatten)]
    backends: BackendOpts,
    /// Address to listen on.
    #[arg(long, env = "STRATA_LISTEN", default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Tool outputs larger than this many bytes are stored as artifacts.
    #[arg(long, env = "STRATA_ARTIFACT_THRESHOLD", default_value_t = strata_ingest::DEFAULT_ARTIFACT_THRESHOLD)]
    artifact_threshold: usize,
    /// The projector's consumer group (its offsets say how far the projections reach).
    #[arg(long, env = "STRATA_PROJECTOR_GROUP", default_value = strata_runtime::PROJECTOR_GROUP)]
    projector_group: String,
    /// After the hot state lost its data (Redis flushed or restarted), how long a tenant's
    /// batches wait before session heads are recovered from the log; must exceed the log's
    /// delivery timeout (see `IngestOptions::hot_loss_settle`).
    #[arg(long, env = "STRATA_HOT_LOSS_SETTLE_MS", default_value_t = strata_ingest::DEFAULT_HOT_LOSS_SETTLE.as_millis() as u64)]
    hot_loss_settle_ms: u64,
    /// Per tenant, the class of tool outputs that carry none, and per tool a least class:
    /// `{"acme": {"unlabelled": "restricted", "tools": {"vault.read": "restricted"}}}`.
    #[arg(long, env = "STRATA_PRIVACY_DEFAULTS", default_value = "", value_parser = strata_core::privacy::PrivacyDefaults::parse_per_tenant)]
    privacy_defaults: std::collections::BTreeMap<String, strata_core::privacy::PrivacyDefaults>,
    /// Most events one tenant may have in flight through this process (0: no limit); past it a
    /// batch is answered 429 with `Retry-After`. A batch alone always passes.
    #[arg(long, env = "STRATA_TENANT_MAX_EVENTS_IN_FLIGHT", default_value_t = strata_ingest::DEFAULT_MAX_TENANT_EVENTS_IN_FLIGHT)]
    tenant_max_events_in_flight: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    strata_runtime::init_tracing("info");
    let opts = Opts::parse();
    // The port answers at once: 503 until the backends are open (see strata_runtime::startup).
    let service = Service::bind(opts.listen, "strata-ingest").await?;
    let Some(backends) = service.open_backends(&opts.backends).await? else {
        return Ok(());
    };
    let admin = strata_runtime::admin::admin_routes(backends.clone());
    let ingestor = Arc::new(Ingestor::new(
        backends,
        IngestOptions {
            artifact_threshold: opts.artifact_threshold,
            projector_group: opts.projector_group,
            hot_loss_settle: std::time::Duration::from_millis(opts.hot_loss_settle_ms),
            privacy_defaults: opts.privacy_defaults,
            max_tenant_events_in_flight: opts.tenant_max_events_in_flight,
            ..IngestOptions::default()
        },
    ));
    let router = http::routes(ingestor).merge(admin);
    service
        .serve(router)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}
