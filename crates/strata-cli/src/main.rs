//! `strata`: Strata's command-line interface.
//!
//! Every verb runs on its own against the data directory (embedded default) or the backends
//! named by `STRATA_LOG`, `STRATA_DB`, `STRATA_HOT`, `STRATA_BLOB`. A verb first brings the
//! projections up to the log's head, so what it prints reflects every event appended before it:
//! on the embedded default it projects itself; on a shared log (Kafka) it waits for the projector
//! services (`--projection-wait-secs`) rather than join their consumer group.

mod bench;
mod bench_distributed;
mod bench_memory;
mod bench_policies;
mod bench_replay;
mod bench_scale;
mod bench_scenarios;
mod compact;
mod curve_svg;
mod demo;
mod dev;
mod eval;
mod forget;
mod import;
mod jsonl;
mod replay;
mod retention;
mod view;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

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
    /// On a shared log (Kafka), how long a verb waits for the projector services to reach the
    /// end of the log before it gives up. (On the embedded default, verbs project themselves.)
    #[arg(
        long,
        global = true,
        env = "STRATA_PROJECTION_WAIT_SECS",
        default_value_t = 60
    )]
    projection_wait_secs: u64,
    #[command(flatten)]
    policy: strata_assembler::PolicyOpts,
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
        /// Per tenant, the class of tool outputs that carry none, and per tool a least class:
        /// `{"dev": {"unlabelled": "restricted", "tools": {"vault.read": "restricted"}}}`.
        #[arg(long, env = "STRATA_PRIVACY_DEFAULTS", default_value = "", value_parser = strata_core::privacy::PrivacyDefaults::parse_per_tenant)]
        privacy_defaults: std::collections::BTreeMap<String, strata_core::privacy::PrivacyDefaults>,
    },
    /// Publish a realistic coding-agent session and show what the next model call would see.
    Demo {
        #[command(flatten)]
        context: ContextArgs,
    },
    /// Import trajectories: canonical JSONL, or the formats agent harnesses write (Claude Code,
    /// Codex, OpenAI chat and Responses items, SWE-agent, mini-swe-agent). Idempotent.
    Import(import::ImportArgs),
    /// List the sessions: id, tenant, events, head seq, last event time, model.
    Sessions {
        /// Only this tenant's sessions [default: every tenant's].
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object per session and line.
        #[arg(long)]
        json: bool,
    },
    /// Export a session's events as canonical JSONL.
    Export {
        session: String,
        /// Tenant of the session [default: on the embedded default, the only tenant that has
        /// the session; else dev].
        #[arg(long)]
        tenant: Option<String>,
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
        /// Tenant of the assembly [default: on the embedded default, the only tenant that has
        /// it; else dev].
        #[arg(long)]
        tenant: Option<String>,
        /// Print the record as JSON.
        #[arg(long)]
        json: bool,
        /// Answer for one record (event id, tool call id or artifact ref): why it was included,
        /// or why not.
        #[arg(long, value_name = "REF")]
        why_not: Option<String>,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Replay recorded sessions into a scratch projection set, optionally under another assembly
    /// policy, and report every model call point. Never writes to the live log or projections.
    Replay(replay::ReplayArgs),
    /// Copy what is new on the log into Avro files in blob storage, with a manifest.
    Archive {
        /// Most records per file.
        #[arg(long, default_value_t = 50_000)]
        max_records: usize,
        /// Print a JSON summary (one line per pass with --follow).
        #[arg(long)]
        json: bool,
        /// Run as the archiver service: a pass every `--interval-secs` until SIGTERM/SIGINT,
        /// failed passes retried at the next one. Run one archiver per log.
        #[arg(long)]
        follow: bool,
        /// Seconds between passes with --follow.
        #[arg(long, default_value_t = 60, requires = "follow")]
        interval_secs: u64,
    },
    /// Score the context at every model call point of recorded sessions against the response
    /// the model really gave (evidence recall) and its cost against transcript replay, beside
    /// the baselines (last-N observations, newest-message truncation, the floor). Never writes.
    Eval(eval::EvalArgs),
    /// Rebuild the projections from the log into a new set, verify it and switch readers to it.
    Rebuild(replay::RebuildArgs),
    /// Measure ingest, projection and assembly on a scratch data directory.
    Bench {
        #[command(subcommand)]
        what: Option<BenchWhat>,
        /// Small events appended for the ingest and projector figures.
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        /// Assemblies timed per session size.
        #[arg(long, default_value_t = 200)]
        assemblies: usize,
    },
    /// Forget a session for real: its data key destroyed (every copy of its events on the log
    /// unreadable), its projections, hot state and artifacts deleted, an audit entry written;
    /// or every session of a tenant (--whole-tenant). Needs a sealed log from the session's first
    /// event (the default for a new deployment).
    Forget(forget::ForgetArgs),
    /// Forget the sessions idle for more than --idle-days (their newest event older), per
    /// tenant, as `strata forget` does; `--dry-run` lists them. Run it on a schedule.
    Retention(retention::RetentionArgs),
    /// Show whether this deployment seals its log, or change it on purpose (`on` / `off`):
    /// sealing is the deployment's, recorded in its key store, not a flag of each process.
    Seal {
        /// `on` or `off`; absent, the recorded setting is shown.
        #[arg(value_enum, conflicts_with = "migrate")]
        set: Option<strata_runtime::SealMode>,
        /// Seal the events already on the log in the clear, in place (embedded file log; no
        /// service may run on the data directory meanwhile), and turn sealing on: every
        /// session becomes forgettable. Safe to interrupt and run again.
        #[arg(long)]
        migrate: bool,
    },
    /// Compact a session's branch now; prints the record and its check.
    Compact {
        session: String,
        /// Tenant of the session [default: on the embedded default, the only tenant that has
        /// the session; else dev].
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, default_value = strata_core::MAIN_BRANCH)]
        branch: String,
        /// User turns kept verbatim after the cut (when they hold more than a quarter of the
        /// session's budget, the cut falls inside them, after the newest steps that fit).
        #[arg(long, default_value_t = 2)]
        keep_turns: usize,
        /// Print the record as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum BenchWhat {
    /// Assembly latency with the full policy set (participants, branches, subagents, privacy,
    /// artifacts) next to a plain session of the same size, instead.
    Policies {
        /// Session sizes, in events.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        sizes: Vec<u64>,
    },
    /// Memory extraction and compaction figures instead.
    Memory,
    /// Kafka, PostgreSQL and Redis against their raw baselines (servers from flags or
    /// `scripts/services.sh env`) instead.
    Distributed(bench_distributed::Servers),
    /// Projector scale-out on Kafka + PostgreSQL instead: events/s with one and two
    /// `strata-projector` processes in one group, and how long partitions take to move when one
    /// dies (SIGTERM, SIGKILL).
    Scale(bench_scale::ScaleArgs),
    /// Rebuild and replay figures (with and without a policy change) instead.
    Replay {
        /// Events in all.
        #[arg(long, default_value_t = 200_000)]
        events: u64,
        /// Sessions they are spread over.
        #[arg(long, default_value_t = 200)]
        sessions: usize,
        /// Also rebuild from Kafka (into SQLite and into PostgreSQL), with the servers from
        /// `scripts/services.sh env`.
        #[command(flatten)]
        servers: bench_replay::KafkaServers,
    },
    /// The scenario suite (`tests/scenarios`) instead: transcript replay against assembled context,
    /// and whether every must-keep fact held (exit status 1 when one did not).
    Scenarios {
        /// Directory of `<name>.jsonl` + `<name>.expect.json` pairs [default: ./tests/scenarios,
        /// else the repository's].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print a JSON array, one object per scenario.
        #[arg(long)]
        json: bool,
        /// Assemble under this policy where a scenario names none (default: the current one).
        #[arg(long)]
        policy: Option<String>,
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
        /// Refuse the key after this long: `90d`, `12h`, `30m` or `45s`.
        #[arg(long, value_parser = parse_lifetime)]
        expires_in: Option<chrono::Duration>,
    },
    /// List the keys (their ids, never the keys), of one tenant or all.
    List {
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object per key, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by its id (`strata keys list`): refused from now on, and never registered
    /// again (a `strata dev` restart replaces a revoked dev key with a new one).
    Revoke { key_id: String },
}

/// A key lifetime: a whole number and a unit, `d`, `h`, `m` or `s`.
fn parse_lifetime(s: &str) -> Result<chrono::Duration, String> {
    let bad = || format!("{s:?}: expected a whole number and a unit, like 90d, 12h, 30m or 45s");
    let (n, unit) = s.trim().split_at(s.trim().len().saturating_sub(1));
    let n: i64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "d" => n.checked_mul(86_400),
        "h" => n.checked_mul(3_600),
        "m" => n.checked_mul(60),
        "s" => Some(n),
        _ => None,
    }
    .filter(|s| *s > 0 && *s <= 100 * 365 * 86_400)
    .ok_or_else(bad)?;
    Ok(chrono::Duration::seconds(secs))
}

/// Options of a context request.
#[derive(Debug, Clone, clap::Args)]
struct ContextArgs {
    /// Tenant of the session [default: on the embedded default, the only tenant that has the
    /// session; else dev].
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    branch: Option<String>,
    #[arg(long)]
    participant: Option<String>,
    /// Payload format: openai (chat completions), openai-responses (the Responses API) or
    /// anthropic [default: the provider the session started with, else openai].
    #[arg(long)]
    provider: Option<Provider>,
    /// Token budget (default: the window minus reserved output).
    #[arg(long)]
    budget: Option<u64>,
    /// The request about to be sent, if not yet on the log.
    #[arg(long)]
    request: Option<String>,
    /// Print one JSON object: {"payload", "assembly"}.
    #[arg(long)]
    json: bool,
    /// Assembly policy version (default: the current one).
    #[arg(long)]
    policy: Option<String>,
    /// An artifact needed byte for byte (artifact ref or tool call id); repeatable. Rehydrated
    /// only when selection, privacy, provider and the byte budget allow.
    #[arg(long)]
    rehydrate: Vec<String>,
    /// Record the full per-candidate trace with the assembly (default: the compact record).
    #[arg(long)]
    trace: bool,
    /// Answer for one record (event id, tool call id or artifact ref) instead of printing the
    /// context: why it is included, or why not.
    #[arg(long, value_name = "REF")]
    why_not: Option<String>,
}

impl ContextArgs {
    fn request(&self) -> ContextRequest {
        ContextRequest {
            branch: self.branch.clone(),
            participant: self.participant.clone(),
            provider: self.provider,
            budget: self.budget,
            request: self.request.clone(),
            verbatim_turns: None,
            policy: self.policy.clone(),
            rehydrate: self.rehydrate.clone(),
            trace: self.trace,
            // `--target-tokens` is the deployment-wide policy setting (PolicyOpts).
            target_tokens: None,
        }
    }
}

async fn keys(opts: &BackendOpts, command: KeysCommand) -> anyhow::Result<()> {
    let backends = Backends::open(opts, "strata keys").await?;
    let store = backends.store.as_ref();
    match command {
        KeysCommand::Create {
            tenant,
            label,
            expires_in,
        } => {
            anyhow::ensure!(
                strata_core::event::is_tenant_id(&tenant),
                "invalid tenant {tenant:?}: use 1-64 characters of a-z, A-Z, 0-9, '-' or '_'"
            );
            let expires_at = expires_in.map(|d| {
                (chrono::Utc::now() + d)
                    .format("%Y-%m-%dT%H:%M:%SZ")
                    .to_string()
            });
            let key =
                auth::create_expiring_key(store, &tenant, &label, expires_at.as_deref()).await?;
            println!("{key}");
        }
        KeysCommand::List { tenant, json } => {
            let now = strata_store::now_utc();
            for k in store.api_keys(tenant.as_deref()).await? {
                if json {
                    println!("{}", serde_json::to_string(&k)?);
                    continue;
                }
                let state = match (&k.revoked_at, &k.expires_at) {
                    (Some(at), _) => format!("revoked {at}"),
                    (None, Some(at)) if !k.is_live_at(&now) => format!("expired {at}"),
                    (None, Some(at)) => format!("expires {at}"),
                    (None, None) => "live".to_owned(),
                };
                println!(
                    "{}  {}  {}  created {}  {state}",
                    k.key_id, k.tenant_id, k.label, k.created_at
                );
            }
        }
        KeysCommand::Revoke { key_id } => {
            let revoked = store
                .revoke_api_key(&key_id, &strata_store::now_utc())
                .await?;
            anyhow::ensure!(
                revoked,
                "no live key has id {key_id:?} (see `strata keys list`)"
            );
            println!("revoked {key_id}");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server logs what it does; one-shot verbs only warn.
    let _telemetry = strata_runtime::telemetry::init_tracing(match cli.command {
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
async fn open_current(
    opts: &BackendOpts,
    wait: Duration,
    holder: &str,
) -> anyhow::Result<Backends> {
    let backends = Backends::open(opts, holder).await?;
    strata_projector::bring_current(&backends, wait).await?;
    Ok(backends)
}

/// On the embedded default no memory extractor runs beside a verb: brings the memories up to the
/// log's end, as the services of `strata dev` would have, and projects what that appended. On a
/// shared log the memory extractor service does this.
async fn bring_memories_current(backends: &Backends, wait: Duration) -> anyhow::Result<()> {
    if backends.log.is_embedded() {
        strata_memory::catch_up(backends).await?;
        strata_projector::bring_current(backends, wait).await?;
    }
    Ok(())
}

/// What a verb names that belongs to a tenant.
#[derive(Debug, Clone, Copy)]
enum Owner<'a> {
    Session(&'a str),
    Assembly(&'a str),
}

/// The tenant a verb works on: `--tenant`; else, on the embedded default, the only tenant that
/// has what the verb names (several: the verb asks which); else `dev`.
async fn tenant_of(
    backends: &Backends,
    given: Option<String>,
    owner: Owner<'_>,
) -> anyhow::Result<String> {
    if let Some(t) = given {
        return Ok(t);
    }
    if !backends.log.is_embedded() {
        return Ok(auth::DEV_TENANT.to_owned());
    }
    let mut having = Vec::new();
    for tenant in backends.store.tenants().await? {
        let has = match owner {
            Owner::Session(s) => backends.store.session_fold(&tenant, s).await?.is_some(),
            Owner::Assembly(a) => backends.store.assembly(&tenant, a).await?.is_some(),
        };
        if has {
            having.push(tenant);
        }
    }
    match having.as_slice() {
        [] => Ok(auth::DEV_TENANT.to_owned()),
        [one] => Ok(one.clone()),
        several => {
            let (what, id) = match owner {
                Owner::Session(s) => ("session", s),
                Owner::Assembly(a) => ("assembly", a),
            };
            anyhow::bail!(
                "{what} {id:?} exists for tenants {}: say which with --tenant",
                several
                    .iter()
                    .map(|t| format!("{t:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    }
}

fn assembler(backends: &Backends, policy: &strata_assembler::PolicyOpts) -> Assembler {
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    Assembler::new(
        backends.clone(),
        ingestor,
        policy.apply(AssemblerOptions::default()),
    )
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let opts = &cli.backends;
    let wait = Duration::from_secs(cli.projection_wait_secs);
    match cli.command {
        Command::Dev {
            listen,
            privacy_defaults,
        } => dev::run(opts, &cli.policy, listen, privacy_defaults).await,
        Command::Demo { context } => demo::run(opts, &cli.policy, wait, &context).await,
        Command::Import(args) => {
            let backends = open_current(opts, wait, "strata import").await?;
            import::import(&backends, wait, &args).await
        }
        Command::Sessions { tenant, json } => {
            let backends = open_current(opts, wait, "strata sessions").await?;
            view::print_sessions(&backends, tenant, json).await
        }
        Command::Export {
            session,
            tenant,
            output,
        } => {
            let backends = open_current(opts, wait, "strata export").await?;
            let tenant = tenant_of(&backends, tenant, Owner::Session(&session)).await?;
            jsonl::export(&backends, &tenant, &session, &output).await
        }
        Command::Context { session, context } => {
            let backends = open_current(opts, wait, "strata context").await?;
            bring_memories_current(&backends, wait).await?;
            let tenant =
                tenant_of(&backends, context.tenant.clone(), Owner::Session(&session)).await?;
            let assembled = assembler(&backends, &cli.policy)
                .context(&tenant, &session, &context.request())
                .await?;
            strata_projector::bring_current(&backends, wait).await?;
            match &context.why_not {
                Some(reference) => {
                    view::print_why_not(
                        &backends,
                        &tenant,
                        &assembled.assembly,
                        reference,
                        context.json,
                    )
                    .await
                }
                None => view::print_context(&assembled, context.json),
            }
        }
        Command::Inspect {
            assembly,
            tenant,
            json,
            why_not,
        } => {
            let backends = open_current(opts, wait, "strata inspect").await?;
            let tenant = tenant_of(&backends, tenant, Owner::Assembly(&assembly)).await?;
            let record = backends
                .store
                .assembly(&tenant, &assembly)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!("assembly {assembly:?} not found for tenant {tenant:?}")
                })?;
            match why_not {
                Some(reference) => {
                    let a: strata_core::assembly::ContextAssembly = serde_json::from_value(record)
                        .map_err(|e| anyhow::anyhow!("assembly {assembly:?} is unreadable: {e}"))?;
                    view::print_why_not(&backends, &tenant, &a, &reference, json).await
                }
                None => view::print_assembly_record(&record, json),
            }
        }
        Command::Keys { command } => keys(opts, command).await,
        Command::Replay(args) => replay::replay(opts, &args).await,
        Command::Rebuild(args) => replay::rebuild(opts, &args, wait).await,
        Command::Eval(args) => eval::run(opts, &cli.policy, &args).await,
        Command::Archive {
            max_records,
            json,
            follow,
            interval_secs,
        } => {
            let every = follow.then(|| Duration::from_secs(interval_secs.max(1)));
            replay::archive(opts, max_records, json, every).await
        }
        Command::Bench {
            what: Some(BenchWhat::Memory),
            ..
        } => bench_memory::run().await,
        Command::Bench {
            what: Some(BenchWhat::Policies { sizes }),
            assemblies,
            ..
        } => bench_policies::run(&sizes, assemblies).await,
        Command::Bench {
            what:
                Some(BenchWhat::Replay {
                    events,
                    sessions,
                    servers,
                }),
            ..
        } => bench_replay::run(events, sessions, &servers).await,
        Command::Bench {
            what: Some(BenchWhat::Scenarios { dir, json, policy }),
            ..
        } => bench_scenarios::run(dir.as_deref(), json, policy.as_deref()).await,
        Command::Bench {
            what: Some(BenchWhat::Distributed(servers)),
            ..
        } => bench_distributed::run(servers).await,
        Command::Bench {
            what: Some(BenchWhat::Scale(args)),
            ..
        } => bench_scale::run(args).await,
        Command::Bench {
            what: None,
            events,
            assemblies,
        } => bench::run(events, assemblies).await,
        Command::Seal { migrate: true, .. } => seal_migrate(opts).await,
        Command::Seal { set, .. } => seal(opts, set).await,
        Command::Retention(args) => {
            let backends = open_current(opts, wait, "strata retention").await?;
            retention::run(&backends, &args).await
        }
        Command::Forget(args) => {
            let backends = open_current(opts, wait, "strata forget").await?;
            let tenant = match &args.session {
                Some(session) => {
                    Some(tenant_of(&backends, args.tenant.clone(), Owner::Session(session)).await?)
                }
                None => None,
            };
            forget::run(&backends, tenant, &args).await
        }
        Command::Compact {
            session,
            tenant,
            branch,
            keep_turns,
            json,
        } => {
            let backends = open_current(opts, wait, "strata compact").await?;
            let tenant = tenant_of(&backends, tenant, Owner::Session(&session)).await?;
            compact::run(&backends, &tenant, &session, &branch, keep_turns, json).await
        }
    }
}

/// `strata seal --migrate`: every plain event on the log sealed in place, with progress.
async fn seal_migrate(opts: &BackendOpts) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let report = strata_runtime::migrate::migrate(opts, |p| {
        if p.done == p.of || p.done % 16 == 0 {
            eprintln!(
                "segment {}/{}: {} event(s) sealed so far ({})",
                p.done,
                p.of,
                p.so_far.sealed,
                p.segment.path.display()
            );
        }
    })
    .await?;
    println!(
        "sealed {} event(s) of {} session(s) in place ({} of {} segment(s) rewritten; {} \
         already sealed, {} record(s) that are no event left as they were) and {} of {} \
         artifact(s) in {:.1}s; sealing is on, and every session can be forgotten",
        report.sealed,
        report.sessions,
        report.rewritten,
        report.segments,
        report.already_sealed,
        report.not_events,
        report.artifacts_sealed,
        report.artifacts,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `strata seal [on|off]`: the deployment's sealing setting, shown or changed.
async fn seal(opts: &BackendOpts, set: Option<strata_runtime::SealMode>) -> anyhow::Result<()> {
    let Some(mode) = set else {
        match strata_runtime::recorded_sealing(opts).await? {
            Some(s) => println!(
                "sealing {} (recorded {})",
                if s.on { "on" } else { "off" },
                s.recorded_at
            ),
            None => println!(
                "no sealing setting recorded yet: the first service to start records it (on for \
                 a new deployment)"
            ),
        }
        return Ok(());
    };
    let on = mode == strata_runtime::SealMode::On;
    let recorded = strata_runtime::set_sealing(opts, on).await?;
    println!(
        "sealing {} (recorded {}); every service follows it from its next start",
        if recorded.on { "on" } else { "off" },
        recorded.recorded_at
    );
    if on {
        eprintln!(
            "note: events already on the log in the clear stay so, and their sessions cannot be \
             forgotten (new sessions can), until `strata seal --migrate` seals them"
        );
    } else {
        eprintln!(
            "note: new sessions will be on the log in the clear and cannot be forgotten; sealed \
             events stay readable while the master key is there"
        );
    }
    Ok(())
}
