//! `strata`: Strata's command-line interface (SPEC §9).
//!
//! Every verb runs on its own against the data directory (embedded default) or the backends
//! named by `STRATA_LOG`, `STRATA_DB`, `STRATA_HOT`, `STRATA_BLOB`. On the embedded default, a
//! verb first brings the projections up to the log's head, so what it prints reflects every event
//! appended before it.

mod bench;
mod bench_memory;
mod compact;
mod demo;
mod dev;
mod jsonl;
mod view;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_core::assembly::Provider;
use strata_ingest::{IngestOptions, Ingestor};
use strata_runtime::{auth, BackendOpts, Backends};

/// Strata: an event-sourced context manager for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "strata", version, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    backends: BackendOpts,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every service in one process behind one HTTP port.
    Dev {
        /// Address to listen on.
        #[arg(long, env = "STRATA_LISTEN", default_value = "127.0.0.1:7700")]
        listen: std::net::SocketAddr,
    },
    /// Publish a realistic coding-agent session and show what the next model call would see.
    Demo {
        #[command(flatten)]
        context: ContextArgs,
    },
    /// Import canonical JSONL events (`-` for standard input). Idempotent.
    Import {
        /// Files to import, in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Export a session's events as canonical JSONL.
    Export {
        session: String,
        #[arg(long, default_value = auth::DEV_TENANT)]
        tenant: String,
        /// Output file (`-` for standard output).
        #[arg(long, short, default_value = "-")]
        output: PathBuf,
    },
    /// Show what the next model call of a session would see, and why.
    Context {
        session: String,
        #[command(flatten)]
        context: ContextArgs,
    },
    /// Show a recorded assembly: every included segment and every omission.
    Inspect {
        assembly: String,
        #[arg(long, default_value = auth::DEV_TENANT)]
        tenant: String,
        /// Print the record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Measure ingest, projection and assembly on a scratch data directory.
    Bench {
        /// Small events appended for the ingest and projector figures.
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        /// Assemblies timed per session size.
        #[arg(long, default_value_t = 200)]
        assemblies: usize,
        /// Measure memory extraction and compaction instead.
        #[arg(long)]
        memory: bool,
    },
    /// Compact a session's branch now; prints the record and its check.
    Compact {
        session: String,
        #[arg(long, default_value = auth::DEV_TENANT)]
        tenant: String,
        #[arg(long, default_value = strata_core::MAIN_BRANCH)]
        branch: String,
        /// User turns kept verbatim after the cut.
        #[arg(long, default_value_t = 2)]
        keep_turns: usize,
        /// Print the record as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create an API key for a tenant and print it (shown once).
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long, default_value = "cli")]
        label: String,
    },
}

/// Options of a context request.
#[derive(Debug, Clone, clap::Args)]
struct ContextArgs {
    #[arg(long, default_value = auth::DEV_TENANT)]
    tenant: String,
    #[arg(long)]
    branch: Option<String>,
    #[arg(long)]
    participant: Option<String>,
    /// Payload format: openai or anthropic.
    #[arg(long, default_value = "openai")]
    provider: Provider,
    /// Token budget (default: the window minus reserved output).
    #[arg(long)]
    budget: Option<u64>,
    /// The request about to be sent, if not yet on the log.
    #[arg(long)]
    request: Option<String>,
    /// Print one JSON object: {"payload", "assembly"}.
    #[arg(long)]
    json: bool,
}

impl ContextArgs {
    fn request(&self) -> ContextRequest {
        ContextRequest {
            branch: self.branch.clone(),
            participant: self.participant.clone(),
            provider: Some(self.provider),
            budget: self.budget,
            request: self.request.clone(),
            verbatim_turns: None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server logs what it does; one-shot verbs only warn.
    strata_runtime::init_tracing(match cli.command {
        Command::Dev { .. } => "info",
        _ => "warn",
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The backends with the projections brought up to the log's head.
async fn open_current(opts: &BackendOpts, holder: &str) -> anyhow::Result<Backends> {
    let backends = Backends::open(opts, holder).await?;
    strata_projector::catch_up(&backends).await?;
    Ok(backends)
}

fn assembler(backends: &Backends) -> Assembler {
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    Assembler::new(backends.clone(), ingestor, AssemblerOptions::default())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let opts = &cli.backends;
    match cli.command {
        Command::Dev { listen } => dev::run(opts, listen).await,
        Command::Demo { context } => demo::run(opts, &context).await,
        Command::Import { files } => {
            let backends = open_current(opts, "strata import").await?;
            jsonl::import(&backends, &files).await
        }
        Command::Export {
            session,
            tenant,
            output,
        } => {
            let backends = open_current(opts, "strata export").await?;
            jsonl::export(&backends, &tenant, &session, &output).await
        }
        Command::Context { session, context } => {
            let backends = open_current(opts, "strata context").await?;
            let assembled = assembler(&backends)
                .context(&context.tenant, &session, &context.request())
                .await?;
            strata_projector::catch_up(&backends).await?;
            view::print_context(&assembled, context.json)
        }
        Command::Inspect {
            assembly,
            tenant,
            json,
        } => {
            let backends = open_current(opts, "strata inspect").await?;
            let record = backends
                .store
                .assembly(&tenant, &assembly)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!("assembly {assembly:?} not found for tenant {tenant:?}")
                })?;
            view::print_assembly_record(&record, json)
        }
        Command::Keys {
            command: KeysCommand::Create { tenant, label },
        } => {
            anyhow::ensure!(
                strata_core::event::is_tenant_id(&tenant),
                "invalid tenant {tenant:?}: use 1-64 characters of a-z, A-Z, 0-9, '-' or '_'"
            );
            let backends = Backends::open(opts, "strata keys").await?;
            let key = auth::create_key(backends.store.as_ref(), &tenant, &label).await?;
            println!("{key}");
            Ok(())
        }
        Command::Bench { memory: true, .. } => bench_memory::run().await,
        Command::Bench {
            events,
            assemblies,
            memory: false,
        } => bench::run(events, assemblies).await,
        Command::Compact {
            session,
            tenant,
            branch,
            keep_turns,
            json,
        } => {
            let backends = open_current(opts, "strata compact").await?;
            compact::run(&backends, &tenant, &session, &branch, keep_turns, json).await
        }
    }
}
