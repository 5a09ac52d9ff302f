//! `strata import`: trajectories in any format `strata-import` reads, appended through ingest.
//!
//! Every file is converted twice: first to check every event of every file (nothing is
//! appended when one is refused, and every problem found is listed with its file and line),
//! then to ingest in batches, with progress on a terminal. Memory stays bounded by a batch
//! whatever the file's size.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use strata_core::Event;
use strata_import::{Format, ImportOptions, Report, Source};
use strata_ingest::{IngestError, IngestOptions, Ingestor, Publisher};
use strata_runtime::{auth, Backends};

/// Events per ingest batch.
const BATCH: usize = 1000;
/// Problems listed before the rest are only counted.
const MAX_PROBLEMS: usize = 50;

/// Options of `strata import`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ImportArgs {
    /// Files to import, in order (`-` for standard input).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Format of the files: auto (detected from each file's content), canonical, claude-code,
    /// codex, openai-chat, openai-responses, swe-agent or mini-swe-agent.
    #[arg(long, default_value = "auto")]
    format: String,
    /// Tenant of the imported events (canonical events that name their own keep it).
    #[arg(long, default_value = auth::DEV_TENANT)]
    tenant: String,
    /// Session id of each file's (main) session, instead of the source's own or the file name.
    #[arg(long)]
    session: Option<String>,
    /// Time of the first record of formats without a clock (OpenAI message lists, SWE-agent
    /// trajectories), RFC 3339; later records follow a second apart [default: the file's
    /// modification time].
    #[arg(long)]
    base_time: Option<chrono::DateTime<chrono::Utc>>,
    /// Context window of the imported sessions, instead of the one known for their model.
    #[arg(long)]
    context_window: Option<u32>,
    /// Print what each file gave as JSON.
    #[arg(long)]
    json: bool,
}

/// A file with its format, and the spooled copy of standard input.
struct Input {
    source: Source,
    format: Format,
    _spool: Option<tempfile::TempPath>,
}

/// Standard input is read twice like any file: it is spooled to a temporary file first.
fn open_inputs(args: &ImportArgs) -> anyhow::Result<Vec<Input>> {
    let forced: Option<Format> = match args.format.as_str() {
        "auto" => None,
        f => Some(f.parse().map_err(|e: String| anyhow::anyhow!(e))?),
    };
    let mut inputs = Vec::new();
    for path in &args.files {
        let (source, spool) = if path.as_os_str() == "-" {
            let mut file = tempfile::NamedTempFile::new().context("cannot spool standard input")?;
            std::io::copy(&mut std::io::stdin().lock(), &mut file)
                .context("cannot read standard input")?;
            let spool = file.into_temp_path();
            let mut source = Source::new(spool.to_path_buf());
            source.name = "<stdin>".into();
            (source, Some(spool))
        } else {
            (Source::new(path), None)
        };
        let format = match forced {
            Some(f) => f,
            None => strata_import::detect(&source)?,
        };
        inputs.push(Input {
            source,
            format,
            _spool: spool,
        });
    }
    Ok(inputs)
}

fn import_options(args: &ImportArgs) -> anyhow::Result<ImportOptions> {
    anyhow::ensure!(
        strata_core::event::is_tenant_id(&args.tenant),
        "invalid tenant {:?}: use 1-64 characters of a-z, A-Z, 0-9, '-' or '_'",
        args.tenant
    );
    let mut options = ImportOptions::new(args.tenant.clone());
    options.session = args.session.clone();
    options.base_time = args.base_time;
    options.context_window = args.context_window;
    Ok(options)
}

/// Checks every event of every file; lists every problem found.
fn check_all(inputs: &[Input], options: &ImportOptions) -> anyhow::Result<Vec<Report>> {
    let mut problems: Vec<String> = Vec::new();
    let mut reports = Vec::new();
    let progress = std::io::stderr().is_terminal();
    let mut checked_events = 0u64;
    for (i, input) in inputs.iter().enumerate() {
        let mut n = 0u64;
        let name = &input.source.name;
        let mut check = |e: Event| {
            n += 1;
            if progress && n.is_multiple_of(10_000) {
                eprint!("\rchecking {name}: {n} event(s)");
                let _ = std::io::stderr().flush();
            }
            Event::from_json(e.to_json(), None)
                .map(drop)
                .map_err(|invalid| format!("event {n} would be invalid: {invalid}"))
        };
        let (report, errors) = strata_import::check(
            &input.source,
            input.format,
            options,
            &mut check,
            MAX_PROBLEMS,
        );
        problems.extend(errors.iter().map(ToString::to_string));
        match report {
            Ok(r) => {
                checked_events += r.event_count();
                reports.push(r);
            }
            Err(e) => problems.push(e.to_string()),
        }
        if progress {
            eprint!(
                "\rchecked {}/{} file(s), {checked_events} event(s)",
                i + 1,
                inputs.len()
            );
            let _ = std::io::stderr().flush();
        }
    }
    if progress {
        eprintln!();
    }
    if problems.is_empty() {
        return Ok(reports);
    }
    let shown = problems
        .iter()
        .take(MAX_PROBLEMS)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n  ");
    anyhow::bail!(
        "nothing imported: {} problem(s) found\n  {shown}{}",
        problems.len(),
        if problems.len() > MAX_PROBLEMS {
            "\n  …"
        } else {
            ""
        }
    )
}

/// Ingests the events of a checked file in batches; returns (accepted, duplicates).
struct Appender<'a> {
    ingestor: &'a Ingestor,
    batch: Vec<(Event, Option<u64>)>,
    done: u64,
    total: u64,
    accepted: u64,
    duplicates: u64,
    progress: bool,
}

impl Appender<'_> {
    async fn flush(&mut self) -> anyhow::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let n = batch.len() as u64;
        let done = self.done;
        let outcomes = self
            .ingestor
            .ingest(&Publisher::Operator, batch)
            .await
            .map_err(|e| match e {
                IngestError::Conflict { .. } => anyhow::anyhow!(
                    "{e}; events before this batch (the first {done}) were imported"
                ),
                e => anyhow::anyhow!("{e}; the first {done} events were imported"),
            })?;
        for o in &outcomes {
            if o.status == "duplicate" {
                self.duplicates += 1;
            } else {
                self.accepted += 1;
            }
        }
        self.done += n;
        if self.progress {
            eprint!("\rimported {}/{} events", self.done, self.total);
            let _ = std::io::stderr().flush();
        }
        Ok(())
    }
}

pub(crate) async fn import(
    backends: &Backends,
    wait: std::time::Duration,
    args: &ImportArgs,
) -> anyhow::Result<()> {
    let inputs = open_inputs(args)?;
    let options = import_options(args)?;
    let reports = check_all(&inputs, &options)?;
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let total: u64 = reports.iter().map(Report::event_count).sum();
    let mut appender = Appender {
        ingestor: &ingestor,
        batch: Vec::with_capacity(BATCH),
        done: 0,
        total,
        accepted: 0,
        duplicates: 0,
        progress: std::io::stderr().is_terminal() && total > BATCH as u64,
    };
    let mut per_file = Vec::new();
    for (input, report) in inputs.iter().zip(&reports) {
        let before = (appender.accepted, appender.duplicates);
        // The conversion is synchronous; the batches it fills are ingested between records.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Event>(BATCH);
        let source = input.source.clone();
        let (format, opts) = (input.format, options.clone());
        let convert = tokio::task::spawn_blocking(move || {
            strata_import::convert(&source, format, &opts, &mut |e| {
                tx.blocking_send(e)
                    .map_err(|_| "the import stopped".to_owned())
            })
        });
        while let Some(event) = rx.recv().await {
            appender.batch.push((event, None));
            if appender.batch.len() >= BATCH {
                appender.flush().await?;
            }
        }
        appender.flush().await?;
        convert
            .await
            .context("the conversion thread failed")?
            .with_context(|| format!("{} changed after it was checked", input.source.name))?;
        per_file.push((
            input,
            report,
            appender.accepted - before.0,
            appender.duplicates - before.1,
        ));
    }
    if appender.progress {
        eprintln!();
    }
    strata_projector::bring_current(backends, wait).await?;
    print_summary(&per_file, args.json, appender.accepted, appender.duplicates)
}

fn print_summary(
    files: &[(&Input, &Report, u64, u64)],
    json: bool,
    accepted: u64,
    duplicates: u64,
) -> anyhow::Result<()> {
    if json {
        let files: Vec<_> = files
            .iter()
            .map(|(input, report, accepted, duplicates)| {
                serde_json::json!({
                    "file": input.source.name,
                    "format": input.format,
                    "accepted": accepted,
                    "duplicates": duplicates,
                    "report": report,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "accepted": accepted, "duplicates": duplicates, "files": files,
            }))?
        );
        return Ok(());
    }
    for (input, report, accepted, duplicates) in files {
        println!(
            "{} ({}): {} session(s), {} event(s): {accepted} new, {duplicates} duplicate(s)",
            input.source.name,
            input.format,
            report.sessions.len(),
            report.event_count(),
        );
        println!("  {}", session_list(&report.sessions));
        if report.orphan_results > 0 || report.calls_without_result > 0 {
            println!(
                "  {} result(s) without their call (kept, marked orphans), {} call(s) without a \
                 result",
                report.orphan_results, report.calls_without_result
            );
        }
        if !report.unmapped.is_empty() {
            let kinds: Vec<String> = report
                .unmapped
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect();
            println!("  not mapped: {}", kinds.join(", "));
        }
    }
    println!("imported {accepted} event(s), {duplicates} duplicate(s) skipped");
    Ok(())
}

/// Most session ids a file's line of the human output names.
const SESSIONS_SHOWN: usize = 20;

/// `sessions: a, b, …`, so that the next command (`strata context a`) can be typed.
fn session_list(sessions: &[String]) -> String {
    let shown: Vec<&str> = sessions
        .iter()
        .take(SESSIONS_SHOWN)
        .map(String::as_str)
        .collect();
    let more = sessions.len().saturating_sub(SESSIONS_SHOWN);
    let tail = if more > 0 {
        format!(" and {more} more (strata sessions lists them)")
    } else {
        String::new()
    };
    format!("sessions: {}{tail}", shown.join(", "))
}
