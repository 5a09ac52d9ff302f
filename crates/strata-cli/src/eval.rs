//! `strata eval`: a thin verb over `strata_replay::eval`. Sessions come from files in any
//! importable format (converted in memory, never appended), the archive, or the live log.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context as _;
use strata_core::assembly::AssemblyPolicy;
use strata_core::Event;
use strata_eval::{KindCounts, SideTotals, Totals};
use strata_import::{Format, ImportOptions, Source};
use strata_replay::eval::{EvalOptions, EvalReport, Evaluator};
use strata_replay::replay::{ReplaySource, Selection};
use strata_replay::Progress;
use strata_runtime::BackendOpts;

use crate::replay::{open_log, progress_line};

/// Options of `strata eval`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EvalArgs {
    /// Trajectory files to evaluate (any format `strata import` reads); none: the live log.
    files: Vec<PathBuf>,
    /// Format of the files (default: detected from each file's content).
    #[arg(long, default_value = "auto")]
    format: String,
    /// Only this tenant (and the tenant of events converted from files).
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
    /// Evaluate the log archive in blob storage (`strata archive`) instead of the log.
    #[arg(long, conflicts_with = "files")]
    from_archive: bool,
    /// Assemble under this policy instead of each point's recorded one.
    #[arg(long)]
    policy: Option<String>,
    /// Token budget of every assembly (default: the recorded one, or the window).
    #[arg(long)]
    budget: Option<u64>,
    /// N of the last-N-observations baseline.
    #[arg(long, default_value_t = strata_eval::DEFAULT_LAST_N)]
    last_n: usize,
    /// Compare at equal size: aim every point at this baseline's size there (`last-N`, e.g.
    /// `last-5`; it becomes the baseline reported beside the policy).
    #[arg(long, value_name = "BASELINE", value_parser = parse_baseline)]
    at_size_of: Option<usize>,
    /// Newest messages of a branch read per call point (the assembler reads 256); the
    /// baselines always see the whole session.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    window: u32,
    /// Write every call point's score (with the references the context missed and where they
    /// were last seen) as JSON lines to this file.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Print the figures as one JSON object.
    #[arg(long)]
    json: bool,
    /// Leave out the per-session rows (totals only).
    #[arg(long)]
    totals_only: bool,
    /// The cost/recall curve: evaluate once under the policy's own sizes and once aiming at each
    /// of these context sizes (tokens, comma-separated), and print one row per target.
    #[arg(long, value_delimiter = ',', value_name = "TOKENS")]
    targets: Vec<u64>,
    /// With `--targets`: also draw the curve, beside the baselines scored in the same runs, as
    /// an SVG picture in this file.
    #[arg(long, requires = "targets", value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// `last-N` (or `lastN`) as N.
fn parse_baseline(s: &str) -> Result<usize, String> {
    s.strip_prefix("last-")
        .or_else(|| s.strip_prefix("last"))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("unknown baseline {s:?}: expected last-N, e.g. last-5"))
}

/// The policy `--policy` names; a retired or unknown version is an error that lists the
/// selectable ones.
pub(crate) fn policy_by_version(v: &str) -> anyhow::Result<AssemblyPolicy> {
    Ok(AssemblyPolicy::requested(v)?)
}

pub(crate) async fn run(
    opts: &BackendOpts,
    policy: &strata_assembler::PolicyOpts,
    args: &EvalArgs,
) -> anyhow::Result<()> {
    let options = EvalOptions {
        selection: Selection {
            tenant: args.tenant.clone(),
            sessions: args.sessions.clone(),
            since: args.since,
            until: args.until,
        },
        policy: args.policy.as_deref().map(policy_by_version).transpose()?,
        budget: args.budget,
        // `--target-tokens` (the deployment's setting) aims every point, as it aims every
        // request that names none; `--targets` draws the curve instead.
        target_tokens: policy.target_tokens,
        rehydrate_max_bytes: policy.rehydrate_max_bytes,
        confidential_providers: policy.confidential_providers.clone(),
        last_n: args.at_size_of.unwrap_or(args.last_n),
        at_baseline_size: args.at_size_of.is_some(),
        window: args.window,
        keep_points: args.report.is_some(),
        ..EvalOptions::default()
    };
    let show_progress = std::io::stderr().is_terminal() && !args.json;
    if !args.targets.is_empty() {
        return curve(opts, args, options, show_progress).await;
    }
    let report = evaluate(opts, args, &options, show_progress).await?;
    if let Some(path) = &args.report {
        write_points(path, &report)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary_json(&report))?);
        return Ok(());
    }
    print!("{}", table(&report, options.last_n, !args.totals_only));
    if let Some(path) = &args.report {
        println!("call points written to {}", path.display());
    }
    Ok(())
}

/// The cost/recall curve: one evaluation per target, the policy's own sizes first.
async fn curve(
    opts: &BackendOpts,
    args: &EvalArgs,
    options: EvalOptions,
    show_progress: bool,
) -> anyhow::Result<()> {
    let mut rows: Vec<(Option<u64>, EvalReport)> = Vec::new();
    for target in std::iter::once(None).chain(args.targets.iter().copied().map(Some)) {
        if show_progress {
            eprintln!(
                "target {}:",
                target.map_or("the policy's own".to_owned(), |t| t.to_string())
            );
        }
        let options = EvalOptions {
            target_tokens: target,
            ..options.clone()
        };
        rows.push((target, evaluate(opts, args, &options, show_progress).await?));
    }
    if let Some(path) = &args.svg {
        let totals: Vec<(Option<u64>, &strata_eval::Totals)> = rows
            .iter()
            .map(|(target, r)| (*target, &r.totals))
            .collect();
        let policy = rows.first().map_or("", |(_, r)| r.policy.as_str());
        let svg = crate::curve_svg::render(&totals, policy, options.last_n);
        std::fs::write(path, svg)
            .with_context(|| format!("writing the curve to {}", path.display()))?;
        eprintln!("curve drawn in {}", path.display());
    }
    if args.json {
        let curve: Vec<serde_json::Value> = rows
            .iter()
            .map(|(target, r)| {
                serde_json::json!({"target_tokens": target, "policy": r.policy,
                    "totals": totals_json(&r.totals)})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "curve": curve }))?
        );
        return Ok(());
    }
    print!("{}", curve_table(&rows));
    Ok(())
}

fn curve_table(rows: &[(Option<u64>, EvalReport)]) -> String {
    let mut out = String::new();
    let Some((_, first)) = rows.first() else {
        return out;
    };
    let t = &first.totals;
    out.push_str(&format!(
        "Cost/recall curve, policy {} ({} call points; transcript replay {} tokens/point; \
         last-{} observations {} fewer, recall {}):\n",
        first.policy,
        t.points,
        t.transcript.tokens / t.points.max(1),
        strata_eval::DEFAULT_LAST_N,
        pct(t.reduction(&t.last_n)),
        pct(t.recall(&t.last_n)),
    ));
    out.push_str(&format!(
        "{:<16} {:>14} {:>22} {:>16}\n",
        "target", "tokens/point", "fewer than transcript", "evidence recall"
    ));
    for (target, r) in rows {
        let t = &r.totals;
        out.push_str(&format!(
            "{:<16} {:>14} {:>22} {:>16}\n",
            target.map_or("policy's own".to_owned(), |n| n.to_string()),
            t.strata.tokens / t.points.max(1),
            pct(t.reduction(&t.strata)),
            pct(t.recall(&t.strata)),
        ));
    }
    out
}

/// One evaluation of the sessions `args` names, under `options`.
async fn evaluate(
    opts: &BackendOpts,
    args: &EvalArgs,
    options: &EvalOptions,
    show_progress: bool,
) -> anyhow::Result<EvalReport> {
    let mut sink = progress_line;
    let progress: Option<&mut (dyn FnMut(Progress) + Send)> =
        show_progress.then_some(&mut sink as &mut (dyn FnMut(Progress) + Send));
    let report = if !args.files.is_empty() {
        eval_files(args, options, show_progress).await?
    } else if args.from_archive {
        let codec = strata_runtime::open_record_codec(opts).await?;
        let blobs = strata_runtime::blobs_with_keys(
            strata_blob::BlobStore::open(&opts.blob_url())?,
            &codec,
        );
        let events = archived_events(&blobs, &codec).await?;
        strata_replay::eval(
            ReplaySource::Events(events),
            "archive",
            Some(&blobs),
            options,
            progress,
        )
        .await?
    } else {
        let (log, _lock) = open_log(opts, "strata eval").await?;
        let codec = strata_runtime::open_record_codec(opts).await?;
        let blobs = strata_runtime::blobs_with_keys(
            strata_blob::BlobStore::open(&opts.blob_url())?,
            &codec,
        );
        let options = EvalOptions {
            codec,
            ..options.clone()
        };
        strata_replay::eval(
            ReplaySource::Log(log.as_ref()),
            "log",
            Some(&blobs),
            &options,
            progress,
        )
        .await?
    };
    if show_progress {
        eprintln!();
    }
    Ok(report)
}

async fn archived_events(
    blobs: &strata_blob::BlobStore,
    codec: &strata_keys::RecordCodec,
) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::new();
    for r in strata_replay::archive::read_all(blobs).await? {
        events.push(codec.decode(&r.value).await.with_context(|| {
            format!(
                "archived record p{} o{} does not decode",
                r.partition, r.offset
            )
        })?);
    }
    Ok(events)
}

/// Converts each file and evaluates its sessions, one file at a time.
async fn eval_files(
    args: &EvalArgs,
    options: &EvalOptions,
    show_progress: bool,
) -> anyhow::Result<EvalReport> {
    let forced: Option<Format> = match args.format.as_str() {
        "auto" => None,
        f => Some(f.parse().map_err(|e: String| anyhow::anyhow!(e))?),
    };
    let import = ImportOptions::new(
        args.tenant
            .clone()
            .unwrap_or_else(|| strata_runtime::auth::DEV_TENANT.to_owned()),
    );
    let mut evaluator = Evaluator::new(options.clone(), None).await?;
    let started = std::time::Instant::now();
    for (i, path) in args.files.iter().enumerate() {
        // A measurement goes on past a file it cannot read, and says so at the end.
        let source = Source::new(path);
        let format = match forced.map_or_else(|| strata_import::detect(&source), Ok) {
            Ok(f) => f,
            Err(e) => {
                evaluator.unreadable(e.to_string());
                continue;
            }
        };
        let mut events: Vec<Event> = Vec::new();
        let converted = strata_import::convert(&source, format, &import, &mut |e| {
            events.push(e);
            Ok(())
        });
        if let Err(e) = converted {
            evaluator.unreadable(e.to_string());
            continue;
        }
        for session in by_session(events) {
            if !selected(&options.selection, &session) {
                continue;
            }
            evaluator.session(format.as_str(), session).await?;
        }
        if show_progress {
            eprint!(
                "\rfiles {}/{}  {:.0}s   ",
                i + 1,
                args.files.len(),
                started.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
    }
    Ok(evaluator.finish())
}

/// Events grouped by session, sessions in the order of their first event.
fn by_session(events: Vec<Event>) -> Vec<Vec<Event>> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut groups: std::collections::HashMap<(String, String), Vec<Event>> =
        std::collections::HashMap::new();
    for e in events {
        let key = (e.tenant_id.clone(), e.session_id.clone());
        groups
            .entry(key.clone())
            .or_insert_with(|| {
                order.push(key);
                Vec::new()
            })
            .push(e);
    }
    order
        .into_iter()
        .filter_map(|k| groups.remove(&k))
        .collect()
}

fn selected(selection: &Selection, session: &[Event]) -> bool {
    let Some(first) = session.first() else {
        return false;
    };
    (selection.sessions.is_empty() || selection.sessions.contains(&first.session_id))
        && session.iter().any(|e| {
            selection.since.is_none_or(|s| e.timestamp >= s)
                && selection.until.is_none_or(|u| e.timestamp < u)
        })
}

fn write_points(path: &PathBuf, report: &EvalReport) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
    );
    for p in &report.points {
        serde_json::to_writer(&mut out, p)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// The figures of one set of totals, as the JSON summary has them.
fn totals_json(t: &Totals) -> serde_json::Value {
    let side = |s: &SideTotals| {
        serde_json::json!({
            "tokens": s.tokens,
            "reduction": t.reduction(s),
            "recall": t.recall(s),
        })
    };
    serde_json::json!({
        "points": t.points,
        "evidence": t.evidence,
        "complete_points": t.complete_points,
        "larger_than_transcript": t.larger_than_transcript,
        "strata": side(&t.strata),
        "transcript": side(&t.transcript),
        "last_n": side(&t.last_n),
        "truncated": side(&t.truncated),
        "floor": side(&t.floor),
        "recall_by_kind": t.by_kind.iter().map(|(k, c)| {
            (k.as_str().to_owned(), kind_json(c))
        }).collect::<serde_json::Map<_, _>>(),
        "recall_without_words": kind_json(&t.without_words()),
    })
}

/// Evidence of some kinds and each context's recall of it.
fn kind_json(c: &KindCounts) -> serde_json::Value {
    serde_json::json!({
        "evidence": c.evidence,
        "strata": c.recall(c.strata),
        "last_n": c.recall(c.last_n),
        "truncated": c.recall(c.truncated),
        "floor": c.recall(c.floor),
    })
}

fn summary_json(report: &EvalReport) -> serde_json::Value {
    serde_json::json!({
        "policy": report.policy,
        "sessions": report.sessions.len(),
        "events": report.events,
        "skipped_points": report.skipped_points,
        "repeated_points": report.repeated_points,
        "retired_policy_points": report.retired_policy_points,
        "elapsed_secs": report.elapsed_secs,
        "unreadable": report.unreadable,
        "totals": totals_json(&report.totals),
        "groups": report.groups.iter()
            .map(|(g, t)| (g.clone(), totals_json(t)))
            .collect::<serde_json::Map<_, _>>(),
        "per_session": report.sessions.iter().map(|s| serde_json::json!({
            "tenant_id": s.tenant_id,
            "session_id": s.session_id,
            "group": s.group,
            "events": s.events,
            "totals": totals_json(&s.totals),
        })).collect::<Vec<_>>(),
    })
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn row(label: &str, t: &Totals) -> String {
    format!(
        "{label:<34} {:>6} {:>7} {:>11} {:>7} {:>7} {:>11} {:>7} {:>7} {:>7} {:>7} {:>7}\n",
        t.points,
        t.evidence,
        t.strata.tokens,
        pct(t.reduction(&t.strata)),
        pct(t.recall(&t.strata)),
        t.transcript.tokens,
        pct(t.reduction(&t.last_n)),
        pct(t.recall(&t.last_n)),
        pct(t.recall(&t.truncated)),
        pct(t.reduction(&t.floor)),
        pct(t.recall(&t.floor)),
    )
}

/// A line per retired policy version the recorded assemblies named, with how many call points
/// were replayed under policy 8 in its place; empty when none.
pub(crate) fn retired_lines(points: &std::collections::BTreeMap<String, u64>) -> String {
    let mut out = String::new();
    for (version, n) in points {
        if let Some(note) = strata_core::assembly::retired_replay_note(version) {
            out.push_str(&format!("{n} call point(s) {note}\n"));
        }
    }
    out
}

/// The text report: a row per session (when asked), per group, and overall.
fn table(report: &EvalReport, last_n: usize, sessions: bool) -> String {
    let mut out = format!(
        "policy {}; tokens are summed over call points; reduction is against transcript replay \
         at the same points; recall is the share of the evidence (references of the recorded \
         response found in earlier events) the context holds\n\n",
        report.policy
    );
    let retired = retired_lines(&report.retired_policy_points);
    if !retired.is_empty() {
        out.push_str(&retired);
        out.push('\n');
    }
    out.push_str(&format!(
        "{:<34} {:>6} {:>7} {:>11} {:>7} {:>7} {:>11} {:>15} {:>7} {:>15}\n",
        "",
        "",
        "",
        "strata",
        "",
        "",
        "transcript",
        format!("last-{last_n} obs"),
        "trunc.",
        "floor"
    ));
    out.push_str(&format!(
        "{:<34} {:>6} {:>7} {:>11} {:>7} {:>7} {:>11} {:>7} {:>7} {:>7} {:>7} {:>7}\n",
        "session",
        "points",
        "evid.",
        "tokens",
        "reduc.",
        "recall",
        "tokens",
        "reduc.",
        "recall",
        "recall",
        "reduc.",
        "recall"
    ));
    if sessions {
        for s in &report.sessions {
            let label = crate::view::truncate_label(&s.session_id, 34);
            out.push_str(&row(&label, &s.totals));
        }
        out.push('\n');
    }
    for (group, t) in &report.groups {
        let sessions = report.sessions.iter().filter(|s| s.group == *group).count();
        out.push_str(&row(&format!("[{group}] {sessions} sessions"), t));
    }
    out.push_str(&row("all", &report.totals));
    out.push_str(&format!(
        "\n{} sessions, {} events, {} call points ({} skipped: no state; {} repeated responses \
         not scored: a harness's copy of one already answered), {:.1}s; the policy's context \
         held all the evidence at {} of {} points and was larger than the transcript (with the \
         task state and memories it carried) at {}\n",
        report.sessions.len(),
        report.events,
        report.totals.points,
        report.skipped_points,
        report.repeated_points,
        report.elapsed_secs,
        report.totals.complete_points,
        report.totals.points,
        report.totals.larger_than_transcript,
    ));
    let code = report.totals.without_words();
    out.push_str(&format!(
        "recall without plain words used as code ({} of the {} references; the rest are \
         words such as `split` or `details`, as often vocabulary as a name read earlier): \
         strata {}, last-{last_n} obs {}, trunc. {}, floor {}\n",
        code.evidence,
        report.totals.evidence,
        pct(code.recall(code.strata)),
        pct(code.recall(code.last_n)),
        pct(code.recall(code.truncated)),
        pct(code.recall(code.floor)),
    ));
    if !report.unreadable.is_empty() {
        out.push_str(&format!(
            "{} source(s) could not be read and are left out:\n",
            report.unreadable.len()
        ));
        for why in &report.unreadable {
            out.push_str(&format!("  {why}\n"));
        }
    }
    out
}
