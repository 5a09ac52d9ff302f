//! `strata-ingest`: the ingest service (HTTP `POST /v1/events`).

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use strata_ingest::{http, inbound, IngestOptions, Ingestor};
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
    /// Tenants whose inbound topics (`<topic>.inbound.<tenant>`) this process relays to the log:
    /// platforms that produce straight to Kafka write there (comma-separated; none by default).
    #[arg(long, env = "STRATA_INBOUND_TENANTS", value_delimiter = ',')]
    inbound_tenants: Vec<String>,
    /// The relay's consumer group on the inbound topics.
    #[arg(long, env = "STRATA_INBOUND_GROUP", default_value = strata_ingest::inbound::DEFAULT_GROUP)]
    inbound_group: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = strata_runtime::telemetry::init_tracing("info");
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
            projector_group: opts.projector_group.clone(),
            hot_loss_settle: std::time::Duration::from_millis(opts.hot_loss_settle_ms),
            privacy_defaults: opts.privacy_defaults.clone(),
            max_tenant_events_in_flight: opts.tenant_max_events_in_flight,
            ..IngestOptions::default()
        },
    ));
    let relays = start_relays(&opts, &ingestor, &service).await?;
    let router = http::routes(ingestor).merge(admin);
    let served = service.serve(router);
    tokio::pin!(served);
    let mut relays = relays;
    // A relay that stops on its own failed: the process exits so that it is restarted.
    tokio::select! {
        served = &mut served => served.map_err(|e| anyhow::anyhow!(e))?,
        Some(stopped) = relays.join_next() => {
            stopped??;
            anyhow::bail!("an inbound relay stopped before the service was asked to");
        }
    }
    while let Some(stopped) = relays.join_next().await {
        stopped??;
    }
    Ok(())
}

/// Starts a relay of each `--inbound-tenants` tenant's inbound topic; they stop with `service`.
async fn start_relays(
    opts: &Opts,
    ingestor: &Arc<Ingestor>,
    service: &Service,
) -> anyhow::Result<tokio::task::JoinSet<Result<inbound::InboundStats, inbound::InboundError>>> {
    let mut relays = tokio::task::JoinSet::new();
    let log_url = opts.backends.log_url();
    for tenant in opts.inbound_tenants.iter().filter(|t| !t.is_empty()) {
        let log = inbound::open_inbound(&log_url, tenant, opts.backends.log_options()).await?;
        let (ingestor, tenant, group) =
            (ingestor.clone(), tenant.clone(), opts.inbound_group.clone());
        let stop = service.stopping();
        relays.spawn(async move {
            inbound::relay(&ingestor, log.as_ref(), &tenant, &group, stop).await
        });
    }
    Ok(relays)
}
