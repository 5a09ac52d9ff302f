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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    strata_runtime::init_tracing("info");
    let opts = Opts::parse();
    let backends = Backends::open(&opts.backends, "strata-assembler").await?;
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let assembler = Assembler::new(backends, ingestor, AssemblerOptions::default());
    strata_runtime::serve(
        http::routes(assembler),
        opts.listen,
        strata_runtime::shutdown_signal(),
    )
    .await?;
    Ok(())
}
