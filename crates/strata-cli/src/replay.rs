//! `strata replay` and `strata rebuild`: thin verbs over `strata-replay`.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use strata_core::Event;
use strata_log::{EventLog, FileLogOptions};
use strata_replay::rebuild::{self, RebuildOptions};
use strata_replay::replay::{ReplayOptions, ReplaySource, Selection};
use strata_replay::Progress;
use strata_runtime::{BackendOpts, Backends, DataDirLock};
use strata_store::postgres::generations::PgGenerations;

/// Options of `strata replay`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ReplayArgs {
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only these sessions (repeatable).
    #[arg(long = "session")]
    sessions: Vec<String>,
    /// Only sessions with an event at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only sessions with an event before this time (RFC 3339).
    #[arg(long)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// Replay the events of a JSONL file instead of the log.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Replay the log archive in blob storage (`strata archive`) instead of the log.
    #[arg(long, conflicts_with = "events")]
    from_archive: bool,
    /// Assembly policy version to compare with the recorded one (e.g. strata.assembly/3-tight).
    #[arg(long)]
    policy: Option<String>,
    /// Token budget of every assembly (default: the recorded one, or the window).
    #[arg(long)]
    budget: Option<u64>,
    /// Write every call point's report as JSON lines to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

/// Options of `strata rebuild`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RebuildArgs {
    /// Delete an old projection set (a name listed by `--list`: a file of the data directory, or
    /// a PostgreSQL schema) instead of rebuilding.
    #[arg(long, value_name = "OLD")]
    drop: Option<String>,
    /// List the projection sets and exit.
    #[arg(long)]
    list: bool,
    /// Rebuild and verify, but do not switch readers.
    #[arg(long)]
    no_switch: bool,
    /// Events per store transaction.
    #[arg(long, default_value_t = strata_replay::rebuild::RebuildOptions::default().batch_events)]
    batch: usize,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn progress_line(p: Progress) {
    let sessions = if p.total_sessions > 0 {
        format!("sessions {}/{}  ", p.sessions, p.total_sessions)
    } else {
        format!("sessions {}  ", p.sessions)
    };
    eprint!(
        "\r{sessions}events {}/{}  {:.0} ev/s  ETA {:.0}s   ",
        p.events, p.total_events, p.events_per_sec, p.eta_secs
    );
    let _ = std::io::stderr().flush();
}

/// The log alone (never the projection store), with the data directory locked when it lives
/// there.
pub(crate) async fn open_log(
    opts: &BackendOpts,
    holder: &str,
) -> anyhow::Result<(Arc<dyn EventLog>, Option<DataDirLock>)> {
    let lock = if opts.log_url().starts_with("file://") {
        Some(DataDirLock::acquire(&opts.data_dir, holder)?)
    } else {
        None
    };
    let log = strata_log::open(
        &opts.log_url(),
        FileLogOptions {
            partitions: opts.partitions,
            fsync: opts.fsync,
            ..FileLogOptions::default()
        },
    )
    .await?;
    Ok((log, lock))
}

fn read_jsonl(path: &PathBuf) -> anyhow::Result<Vec<Event>> {
    let name = path.display().to_string();
    let reader =
        BufReader::new(std::fs::File::open(path).with_context(|| format!("cannot open {name}"))?);
    let mut out = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {name}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(&line)
            .with_context(|| format!("{name}:{}: not valid JSON", n + 1))?;
        let event = Event::from_json(value, None).map_err(|e| {
            anyhow::anyhow!(
                "{name}:{}: {}",
                n + 1,
                e.0.iter()
                    .map(|f| format!("{}: {}", f.field, f.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        out.push(event);
    }
    Ok(out)
}

pub(crate) async fn replay(opts: &BackendOpts, args: &ReplayArgs) -> anyhow::Result<()> {
    let policy = args
        .policy
        .as_deref()
        .map(crate::eval::policy_by_version)
        .transpose()?;
    let codec = match &args.events {
        Some(_) => strata_keys::RecordCodec::plain(),
        None => strata_runtime::open_record_codec(opts).await?,
    };
    let options = ReplayOptions {
        selection: Selection {
            tenant: args.tenant.clone(),
            sessions: args.sessions.clone(),
            since: args.since,
            until: args.until,
        },
        policy,
        budget: args.budget,
        scratch_dir: None,
        // Offloaded outputs, for the quality columns' history (a file's are inline).
        blobs: match &args.events {
            Some(_) => None,
            None => Some(strata_runtime::blobs_with_keys(
                strata_blob::BlobStore::open(&opts.blob_url())?,
                &codec,
            )),
        },
        codec,
    };
    let mut sink = progress_line;
    let progress: Option<&mut (dyn FnMut(Progress) + Send)> =
        if std::io::stderr().is_terminal() && !args.json {
            Some(&mut sink)
        } else {
            None
        };
    let report = match &args.events {
        Some(file) => {
            let events = read_jsonl(file)?;
            strata_replay::replay(ReplaySource::Events(events), &options, progress).await?
        }
        None if args.from_archive => {
            let blobs = strata_blob::BlobStore::open(&opts.blob_url())?;
            let mut events = Vec::new();
            for r in strata_replay::archive::read_all(&blobs).await? {
                events.push(options.codec.decode(&r.value).await.with_context(|| {
                    format!(
                        "archived record p{} o{} does not decode",
                        r.partition, r.offset
                    )
                })?);
            }
            strata_replay::replay(ReplaySource::Events(events), &options, progress).await?
        }
        None => {
            let (log, _lock) = open_log(opts, "strata replay").await?;
            strata_replay::replay(ReplaySource::Log(log.as_ref()), &options, progress).await?
        }
    };
    if std::io::stderr().is_terminal() && !args.json {
        eprintln!();
    }
    if let Some(path) = &args.report {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        );
        for p in &report.points {
            serde_json::to_writer(&mut out, p)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "replayed {} sessions, {} events in {:.2}s ({:.0} ev/s); {} model call points ({} skipped)",
        report.sessions,
        report.events,
        report.elapsed_secs,
        report.events_per_sec,
        report.call_points,
        report.skipped_points
    );
    print!(
        "{}",
        crate::eval::retired_lines(&report.retired_policy_points)
    );
    match (&report.candidate_policy, report.candidate_tokens) {
        (Some(cand), Some(tokens)) => {
            let diff = tokens as i64 - report.recorded_tokens as i64;
            println!(
                "tokens: {} under {} (recorded), {} under {} ({:+}, {:+.1}%)",
                report.recorded_tokens,
                report.recorded_policy,
                tokens,
                cand,
                diff,
                100.0 * diff as f64 / (report.recorded_tokens.max(1)) as f64
            );
            let mut changed: Vec<_> = report.points.iter().filter(|p| p.token_diff != 0).collect();
            changed.sort_by_key(|p| p.token_diff);
            println!(
                "{} call points changed; the largest differences:",
                changed.len()
            );
            for p in changed.iter().take(5) {
                println!(
                    "  {}/{} seq {} ({}): {} → {} tokens ({:+}), {} segment(s) dropped, {} added",
                    p.tenant_id,
                    p.session_id,
                    p.seq,
                    p.kind,
                    p.recorded.context_tokens,
                    p.candidate.as_ref().map(|c| c.context_tokens).unwrap_or(0),
                    p.token_diff,
                    p.dropped.len(),
                    p.added.len()
                );
                for d in p.dropped.iter().take(3) {
                    println!(
                        "      - {} [{}] {} tokens: {}",
                        d.kind, d.tier, d.tokens, d.reason
                    );
                }
            }
        }
        _ => println!(
            "tokens: {} under {} (recorded)",
            report.recorded_tokens, report.recorded_policy
        ),
    }
    print_quality(&report);
    if let Some(path) = &args.report {
        println!("call points written to {}", path.display());
    }
    Ok(())
}

/// The quality columns: evidence recall of each policy, beside the baselines.
fn print_quality(report: &strata_replay::ReplayReport) {
    let q = &report.recorded_quality;
    if q.points == 0 {
        return;
    }
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let mut line = format!(
        "evidence recall at {} recorded responses ({} references): {} under {} (recorded)",
        q.points,
        q.evidence,
        pct(q.recall(&q.strata)),
        report.recorded_policy
    );
    if let (Some(c), Some(policy)) = (&report.candidate_quality, &report.candidate_policy) {
        line.push_str(&format!(", {} under {policy}", pct(c.recall(&c.strata))));
    }
    println!("{line}");
    println!(
        "  baselines: transcript {} tokens; last-{} observations {} fewer, recall {}; \
         truncation at the recorded size, recall {}; floor {} fewer, recall {}",
        q.transcript.tokens,
        strata_eval::DEFAULT_LAST_N,
        pct(q.reduction(&q.last_n)),
        pct(q.recall(&q.last_n)),
        pct(q.recall(&q.truncated)),
        pct(q.reduction(&q.floor)),
        pct(q.recall(&q.floor)),
    );
}

/// Where `strata rebuild` writes: the data directory's embedded sets, or a PostgreSQL database's.
enum RebuildTarget {
    Embedded,
    Postgres(String),
}

impl RebuildTarget {
    fn of(opts: &BackendOpts) -> anyhow::Result<Self> {
        match &opts.db_url {
            None => Ok(Self::Embedded),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Self::Postgres(url.clone()))
            }
            Some(_) => anyhow::bail!(
                "strata rebuild writes the embedded default's projection sets (no --db-url) or a \
                 PostgreSQL database's (--db-url postgres://…); an explicit sqlite:// store has \
                 no sets to switch between"
            ),
        }
    }
}

pub(crate) async fn rebuild(
    opts: &BackendOpts,
    args: &RebuildArgs,
    wait: std::time::Duration,
) -> anyhow::Result<()> {
    let target = RebuildTarget::of(opts)?;
    if args.list || args.drop.is_some() {
        return match &target {
            RebuildTarget::Embedded => list_or_drop_embedded(opts, args),
            RebuildTarget::Postgres(url) => list_or_drop_postgres(url, args).await,
        };
    }
    // The live set, caught up, is what the rebuilt one is verified against: an embedded set is
    // brought up to the log here (this process holds the data directory); a shared one is
    // written by the projector services, which this waits for instead of joining their group.
    let backends = Backends::open(opts, "strata rebuild").await?;
    match target {
        RebuildTarget::Embedded => {
            strata_projector::catch_up(&backends).await?;
        }
        RebuildTarget::Postgres(_) => strata_projector::bring_current(&backends, wait).await?,
    }
    let mut sink = progress_line;
    let progress: Option<&mut (dyn FnMut(Progress) + Send)> =
        if std::io::stderr().is_terminal() && !args.json {
            Some(&mut sink)
        } else {
            None
        };
    let options = RebuildOptions {
        batch_events: args.batch.max(1),
        switch: !args.no_switch,
        // Only read when the log no longer holds a record (retention).
        archive: Some(backends.blobs.clone()),
        codec: backends.codec.clone(),
        ..RebuildOptions::default()
    };
    let (log, live) = (backends.log.as_ref(), backends.store.as_ref());
    let result = match &target {
        RebuildTarget::Embedded => {
            rebuild::rebuild(&opts.data_dir, log, live, &options, progress).await
        }
        RebuildTarget::Postgres(url) => {
            rebuild::rebuild_postgres(url, log, live, &options, progress).await
        }
    };
    if std::io::stderr().is_terminal() && !args.json {
        eprintln!();
    }
    let report = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let v = report.verification.as_ref();
    println!(
        "rebuilt {} from the log{}: {} events in {:.2}s ({:.0} ev/s), {} duplicates skipped",
        report.file,
        if report.resumed {
            " (resumed)"
        } else if report.started_over {
            " (started over: the machine restarted during the interrupted, unsynced run)"
        } else {
            ""
        },
        report.events,
        report.fold_secs,
        report.events_per_sec,
        report.duplicates
    );
    if report.archived > 0 {
        println!(
            "{} records the log no longer holds were read from the archive",
            report.archived
        );
    }
    if let Some(v) = v {
        println!(
            "verified against {} in {:.2}s: {} tables, {} sessions equal",
            report.previous,
            report.verify_secs,
            v.tables.len(),
            v.sessions
        );
    }
    if report.switched {
        let restart = match target {
            RebuildTarget::Embedded => {
                " (a running `strata dev` picks the new set up when restarted)"
            }
            RebuildTarget::Postgres(_) => "; running services follow at their next query",
        };
        println!(
            "readers switched to {}; {} kept until `strata rebuild --drop {}`{restart}",
            report.file, report.previous, report.previous
        );
        if report.switch_hold_secs > 0.0 {
            println!(
                "the live projector's batches were held {:.3}s for the switch",
                report.switch_hold_secs
            );
        }
    } else {
        println!("readers not switched (--no-switch); run again to switch");
    }
    Ok(())
}

fn list_or_drop_embedded(opts: &BackendOpts, args: &RebuildArgs) -> anyhow::Result<()> {
    let _lock = DataDirLock::acquire(&opts.data_dir, "strata rebuild")?;
    if let Some(old) = &args.drop {
        rebuild::drop_generation(&opts.data_dir, old)?;
        println!("dropped {old}");
        return Ok(());
    }
    let gens = rebuild::generations(&opts.data_dir)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&gens)?);
        return Ok(());
    }
    for g in gens {
        print_generation(&g.file, g.current, g.in_progress);
    }
    Ok(())
}

async fn list_or_drop_postgres(url: &str, args: &RebuildArgs) -> anyhow::Result<()> {
    let gens = PgGenerations::connect(url).await?;
    if let Some(old) = &args.drop {
        gens.drop_generation(old).await?;
        println!("dropped {old}");
        return Ok(());
    }
    let list = gens.list().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    for g in list {
        print_generation(&g.schema, g.current, g.in_progress);
    }
    Ok(())
}

fn print_generation(name: &str, current: bool, in_progress: bool) {
    println!(
        "{name}{}{}",
        if current { "  (current)" } else { "" },
        if in_progress {
            "  (rebuild in progress)"
        } else {
            ""
        }
    );
}

/// `strata archive`: copies what is new on the log into the archive in blob storage.
pub(crate) async fn archive(
    opts: &BackendOpts,
    max_records: usize,
    json: bool,
    follow: Option<std::time::Duration>,
) -> anyhow::Result<()> {
    let (log, _lock) = open_log(opts, "strata archive").await?;
    let blobs = strata_blob::BlobStore::open(&opts.blob_url())?;
    let shutdown = strata_runtime::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let report = strata_replay::archive::archive(log.as_ref(), &blobs, max_records).await;
        let report = match (report, follow) {
            (Ok(report), _) => report,
            (Err(e), None) => return Err(e.into()),
            // As a service, an outage is waited out: the next pass starts where the manifest
            // says the archive ends, so nothing is copied twice or skipped.
            (Err(e), Some(_)) => {
                tracing::warn!(error = %e, "archive pass failed; retrying at the next one");
                strata_replay::archive::ArchiveReport::default()
            }
        };
        if json {
            println!("{}", serde_json::to_string(&report)?);
        } else if follow.is_none() || report.records > 0 {
            println!(
                "archived {} records in {} files to {}; archive ends at {:?}",
                report.records,
                report.files,
                blobs.name(),
                report.ends
            );
        }
        let Some(every) = follow else {
            return Ok(());
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = &mut shutdown => return Ok(()),
        }
    }
}
