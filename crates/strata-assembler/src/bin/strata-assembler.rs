//! `strata-assembler`: serves context bundles and the read API.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use strata_assembler::{http, Assembler, AssemblerOptions};
use strata_ingest::{IngestOptions, Ingestor};
use strata_runtime::{BackendOpts, Backends};

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
    strata_runtime::init_tracing("info");
    let opts = Opts::parse();
    let backends = Backends::open(&opts.backends, "strata-assembler").await?;
    let ingestor = Arc::new(Ingestor::new(
        backends.clone(),
        IngestOptions {
            projector_group: opts.projector_group.clone(),
            ..IngestOptions::default()
        },
    ));
    let assembler = Assembler::new(
        backends,
        ingestor,
        opts.policy.apply(AssemblerOptions {
            max_projection_wait: std::time::Duration::from_millis(opts.max_projection_wait_ms),
            projector_group: opts.projector_group,
            ..AssemblerOptions::default()
        }),
    );
    strata_runtime::serve(
        http::routes(assembler),
        opts.listen,
        strata_runtime::shutdown_signal(),
    )
    .await?;
    Ok(())
}
