//! `strata import` and `strata export`: canonical JSONL (one event per line).

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use strata_core::Event;
use strata_ingest::{IngestError, IngestOptions, Ingestor, Publisher};
use strata_runtime::Backends;

/// Events per ingest batch.
const BATCH: usize = 1000;

/// Reads every line of every file, validates all of them, and only then ingests, in order:
/// a file with a bad line imports nothing and reports every bad line.
pub(crate) async fn import(
    backends: &Backends,
    wait: std::time::Duration,
    files: &[PathBuf],
) -> anyhow::Result<()> {
    let mut events: Vec<(Event, Option<u64>)> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for file in files {
        let name = file.display().to_string();
        let reader: Box<dyn BufRead> = if file == Path::new("-") {
            Box::new(BufReader::new(std::io::stdin()))
        } else {
            Box::new(BufReader::new(
                std::fs::File::open(file).with_context(|| format!("cannot open {name}"))?,
            ))
        };
        for (n, line) in reader.lines().enumerate() {
            let line = line.with_context(|| format!("cannot read {name}"))?;
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{name}:{}: not valid JSON: {e}", n + 1));
                    continue;
                }
            };
            match Event::from_json(value, None) {
                Ok(e) => events.push((e, None)),
                Err(e) => {
                    for f in e.0 {
                        problems.push(format!("{name}:{}: {}: {}", n + 1, f.field, f.message));
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        let shown = problems
            .iter()
            .take(50)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ");
        anyhow::bail!(
            "nothing imported: {} problem(s) found\n  {shown}{}",
            problems.len(),
            if problems.len() > 50 { "\n  …" } else { "" }
        );
    }

    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let total = events.len();
    let progress = std::io::stderr().is_terminal() && total > BATCH;
    let (mut accepted, mut duplicates) = (0usize, 0usize);
    let mut done = 0usize;
    let mut iter = events.into_iter();
    loop {
        let batch: Vec<_> = iter.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            break;
        }
        let n = batch.len();
        let outcomes = ingestor
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
                duplicates += 1;
            } else {
                accepted += 1;
            }
        }
        done += n;
        if progress {
            eprint!("\rimported {done}/{total} events");
        }
    }
    if progress {
        eprintln!();
    }
    strata_projector::bring_current(backends, wait).await?;
    println!("imported {accepted} event(s), {duplicates} duplicate(s) skipped");
    Ok(())
}

/// Puts an offloaded tool output back inline, so an export carries the raw bytes and another
/// data directory that imports it stores the same artifact again (under the same hash: a
/// re-import gives the same events).
async fn with_inline_output(
    backends: &Backends,
    tenant: &str,
    mut event: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    if event.get("type").and_then(serde_json::Value::as_str) != Some("ToolCallFinished") {
        return Ok(event);
    }
    let Some(payload) = event.get_mut("payload").and_then(|p| p.as_object_mut()) else {
        return Ok(event);
    };
    let Some(sha) = payload
        .get("output_sha256")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
    else {
        return Ok(event);
    };
    if payload.get("output").is_some() || payload.get("output_ref").is_none() {
        return Ok(event);
    }
    let bytes = backends
        .blobs
        .get_artifact(tenant, &sha)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!("artifact {sha} of an exported event is missing from the blob store")
        })?;
    let output = String::from_utf8(bytes.to_vec())
        .map_err(|_| anyhow::anyhow!("artifact {sha} is not UTF-8 text"))?;
    for field in [
        "output_ref",
        "output_preview",
        "output_sha256",
        "output_bytes",
        "output_tokens",
    ] {
        payload.shift_remove(field);
    }
    payload.insert("output".into(), output.into());
    Ok(event)
}

/// Writes a session's events, in seq order, as canonical JSONL, with offloaded tool outputs put
/// back inline.
pub(crate) async fn export(
    backends: &Backends,
    tenant: &str,
    session: &str,
    output: &Path,
) -> anyhow::Result<()> {
    if backends
        .store
        .session_fold(tenant, session)
        .await?
        .is_none()
    {
        anyhow::bail!("session {session:?} not found for tenant {tenant:?}");
    }
    let mut out: Box<dyn Write> = if output == Path::new("-") {
        Box::new(std::io::BufWriter::new(std::io::stdout().lock()))
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(output)
                .with_context(|| format!("cannot create {}", output.display()))?,
        ))
    };
    let mut after = 0u64;
    loop {
        let events = backends.store.events(tenant, session, after, 5000).await?;
        let Some(last) = events.last() else { break };
        after = last
            .get("seq")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(u64::MAX);
        for e in &events {
            let e = with_inline_output(backends, tenant, e.clone()).await?;
            serde_json::to_writer(&mut out, &e)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}
