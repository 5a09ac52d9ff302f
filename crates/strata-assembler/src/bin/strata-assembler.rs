//! `strata-assembler`: serves context bundles, the read API and explicit compactions
//! (`POST /v1/sessions/{id}/compact`: the record is appended through this process's ingest and
//! answered once the projector has it, as under `strata dev`).

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use strata_assembler::{http, Assembler, AssemblerOptions};
use strata_ingest::{IngestOptions, Ingestor};
use strata_runtime::startup::Service;
use strata_runtime::BackendOpts;

/// Compiles the next model call's context and explains it.
#[derive(Debug, Parser)]
#[command(version)]
struct Opts {
    #[command(flatten)]
    backends: BackendOpts,
    /// Address to listen on.
    #[arg(long, env = "STRATA_LISTEN", default_value = "127.0.0.1:7701")]
    listen: SocketAddr,
    /// Longest wait, in milliseconds, for the projections to reach the session's head before
    /// assembling from what is projected (the assembly then says `projection_complete: false`).
    #[arg(long, env = "STRATA_MAX_PROJECTION_WAIT_MS", default_value_t = 5000)]
    max_projection_wait_ms: u64,
    /// The projector's consumer group (its offsets say how far the projections reach).
    #[arg(long, env = "STRATA_PROJECTOR_GROUP", default_value = strata_runtime::PROJECTOR_GROUP)]
    projector_group: String,
    #[command(flatten)]
    policy: strata_assembler::PolicyOpts,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = strata_runtime::telemetry::init_tracing("info");
    let opts = Opts::parse();
    let admin_key = strata_runtime::auth::admin_key(&opts.backends)?;
    // The port answers at once: 503 until the backends are open (see strata_runtime::startup).
    let service = Service::bind(opts.listen, "strata-assembler").await?;
    let Some(backends) = service.open_backends(&opts.backends).await? else {
        return Ok(());
    };
    let ingestor = Arc::new(Ingestor::new(
        backends.clone(),
        IngestOptions {
            projector_group: opts.projector_group.clone(),
            ..IngestOptions::default()
        },
    ));
    // Forgets a crash cut short are finished in the background, beside the API.
    tokio::spawn(strata_assembler::forgets::finish_pending(backends.clone()));
    let compaction = strata_compactor::http::routes(backends.clone(), ingestor.clone());
    let assembler = Assembler::new(
        backends,
        ingestor,
        opts.policy.apply(AssemblerOptions {
            max_projection_wait: std::time::Duration::from_millis(opts.max_projection_wait_ms),
            projector_group: opts.projector_group,
            admin_key,
            ..AssemblerOptions::default()
        }),
    );
    // `/readyz` stays 503 until the first context costs what the rest do.
    assembler.warm().await;
    service
        .serve(http::routes(assembler).merge(compaction))
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
}
