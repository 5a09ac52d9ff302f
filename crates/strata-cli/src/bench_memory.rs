//! `strata bench memory`: memory extraction throughput, compaction time for a 10,000-event
//! session, and the token reduction of the 157-event coding session's context with and without
//! compaction, against transcript replay.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_compactor::scenario::coding_session;
use strata_compactor::{CompactorOptions, Planner};
use strata_core::compaction::{compact, CutRule, DeterministicSummarizer};
use strata_core::memory::MemoryEngine;
use strata_core::tokens::O200k;
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

fn events(session: &str, turns: usize) -> anyhow::Result<Vec<Event>> {
    coding_session("bench", session, turns)
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            v["seq"] = serde_json::json!(i as u64 + 1);
            Event::from_json(v, None).map_err(anyhow::Error::from)
        })
        .collect()
}

pub(crate) async fn run() -> anyhow::Result<()> {
    println!("strata bench memory (release build recommended)");
    println!();
    println!("{:<60} {:>14}", "measure", "result");

    // Extraction: the pure engine over a 10,000-event session, then the service end to end.
    let big = events("big", 2000)?;
    let started = Instant::now();
    let mut engine = MemoryEngine::default();
    let mut derived = 0usize;
    for e in &big {
        derived += engine.observe(e).len();
    }
    let t = started.elapsed();
    println!(
        "{:<60} {:>10.0} ev/s",
        format!(
            "memory extraction, engine only ({} events, {derived} derived)",
            big.len()
        ),
        big.len() as f64 / t.as_secs_f64()
    );

    // Compaction of a 10,000-event session: one compaction of everything but the last turns.
    let started = Instant::now();
    let record = compact(
        &big,
        None,
        CutRule::turns(2),
        &DeterministicSummarizer,
        &O200k,
    )
    .ok_or_else(|| anyhow::anyhow!("nothing to compact"))?;
    let t = started.elapsed();
    println!(
        "{:<60} {:>11.1} ms",
        format!(
            "compaction of a {}-event session ({}, {} → {} tokens)",
            big.len(),
            record.status,
            record.tokens_before,
            record.tokens_after
        ),
        t.as_secs_f64() * 1000.0
    );
    let started = Instant::now();
    let mut planner = Planner::new(CompactorOptions::default());
    let mut n = 0;
    for e in &big {
        n += usize::from(planner.observe(e).is_some());
    }
    let t = started.elapsed();
    println!(
        "{:<60} {:>11.1} ms",
        format!("threshold planner over the same session ({n} compactions)"),
        t.as_secs_f64() * 1000.0
    );

    // The 157-event coding session end to end, with and without compaction.
    for compacting in [false, true] {
        let dir = tempfile::tempdir()?;
        let opts = BackendOpts {
            fsync: FsyncPolicy::Never,
            ..BackendOpts::embedded(dir.path())
        };
        let backends = Backends::open(&opts, "strata bench").await?;
        let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
        let session = coding_session("bench", "s", 30);
        let count = session.len();
        ingestor.ingest_json(&Publisher::Operator, session).await?;
        let mut engine = MemoryEngine::default();
        let (_, by_type) = strata_memory::run_with(
            &backends,
            strata_memory::DEFAULT_GROUP,
            &mut engine,
            tokio::time::sleep(Duration::from_millis(600)),
        )
        .await?;
        let mut compactions = 0;
        if compacting {
            let mut planner = Planner::new(CompactorOptions {
                threshold: 0.4,
                keep_turns: 2,
                ..CompactorOptions::default()
            });
            let (_, c) = strata_compactor::run_with(
                &backends,
                strata_compactor::DEFAULT_GROUP,
                &mut planner,
                tokio::time::sleep(Duration::from_millis(600)),
            )
            .await?;
            compactions = c.get("compactions").copied().unwrap_or(0);
        }
        strata_projector::catch_up(&backends).await?;
        let assembler = Assembler::new(
            backends.clone(),
            ingestor.clone(),
            AssemblerOptions {
                record_assemblies: false,
                ..AssemblerOptions::default()
            },
        );
        let a = assembler
            .context("bench", "s", &ContextRequest::default())
            .await?;
        let ctx = a.assembly.context_tokens;
        let transcript = a.assembly.transcript_tokens;
        println!(
            "{:<60} {:>14}",
            format!(
                "{count}-event coding session, {} ({} memories)",
                if compacting {
                    format!("{compactions} compactions")
                } else {
                    "no compaction".to_owned()
                },
                by_type.get("appended").copied().unwrap_or(0)
            ),
            format!(
                "{ctx} / {transcript} tok ({:.1}% fewer)",
                100.0 * (1.0 - ctx as f64 / transcript.max(1) as f64)
            )
        );
    }
    Ok(())
}
