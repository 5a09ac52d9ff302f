//! A 150+ event coding-agent session run through ingest, the memory extractor, the compactor,
//! the projector and the assembler: after each compaction the assembled context still holds the
//! goal, the hard constraints, every modified file, the unresolved error and the next step, and
//! no tool pair is split. Replaying the log from offset 0 into fresh projections reproduces the
//! same memories and compactions.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_compactor::scenario::{self, coding_session};
use strata_compactor::{CompactorOptions, Planner};
use strata_core::assembly::OmissionReason;
use strata_core::memory::MemoryEngine;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

const TURNS: usize = 30;

/// Tool pairs in an OpenAI-style payload are never split: every tool message answers a call of
/// the assistant message before it, and every call is answered.
fn assert_no_split_pair(payload: &Value) {
    let messages = payload["messages"].as_array().unwrap();
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        match m["role"].as_str().unwrap() {
            "assistant" => {
                assert!(open.is_empty(), "calls without results: {open:?}");
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    open.push(c["id"].as_str().unwrap().to_owned());
                }
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap();
                let pos = open
                    .iter()
                    .position(|x| x == id)
                    .expect("result has its call");
                open.remove(pos);
            }
            _ => assert!(open.is_empty(), "calls without results: {open:?}"),
        }
    }
    assert!(open.is_empty(), "calls without results: {open:?}");
}

#[tokio::test]
async fn a_long_coding_session_survives_repeated_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let assembler = Assembler::new(
        backends.clone(),
        ingestor.clone(),
        AssemblerOptions {
            record_assemblies: false,
            ..AssemblerOptions::default()
        },
    );
    let events = coding_session("t", "s", TURNS);
    assert!(events.len() >= 150, "{} events", events.len());
    // Deliver the session turn by turn, as an agent would.
    let mut chunks: Vec<Vec<Value>> = Vec::new();
    for e in events {
        if e["type"] == "UserPromptSubmitted" || chunks.is_empty() {
            chunks.push(Vec::new());
        }
        chunks.last_mut().unwrap().push(e);
    }
    let mut engine = MemoryEngine::default();
    let mut planner = Planner::new(CompactorOptions {
        threshold: 0.4,
        keep_turns: 2,
        ..CompactorOptions::default()
    });
    let mut compactions = 0u64;
    let mut checked = 0;
    let mut modified: Vec<String> = Vec::new();
    for chunk in chunks {
        for e in &chunk {
            if let Some(p) = e["payload"]["path"].as_str() {
                if e["type"] == "FileWritten" || e["type"] == "DiffApplied" {
                    modified.push(p.to_owned());
                }
            }
        }
        ingestor
            .ingest_json(&Publisher::Operator, chunk)
            .await
            .unwrap();
        let (m, c) = tokio::join!(
            strata_memory::run_with(
                &backends,
                strata_memory::DEFAULT_GROUP,
                &mut engine,
                tokio::time::sleep(Duration::from_millis(250))
            ),
            strata_compactor::run_with(
                &backends,
                strata_compactor::DEFAULT_GROUP,
                &mut planner,
                tokio::time::sleep(Duration::from_millis(250))
            ),
        );
        m.unwrap();
        let (_, by_type) = c.unwrap();
        assert_eq!(
            by_type.get("failed"),
            None,
            "no compaction of this session fails"
        );
        strata_projector::catch_up(&backends).await.unwrap();
        let new = by_type.get("compactions").copied().unwrap_or(0);
        if new == 0 {
            continue;
        }
        compactions += new;
        let a = assembler
            .context("t", "s", &ContextRequest::default())
            .await
            .unwrap();
        let text = a.payload.to_string();
        assert!(a
            .assembly
            .included
            .iter()
            .any(|s| s.kind == "compaction_summary"));
        assert!(a.assembly.omitted.contains_key(&OmissionReason::Compacted));
        assert!(text.contains(scenario::GOAL), "goal");
        for c in scenario::CONSTRAINTS {
            assert!(text.contains(c), "constraint {c}");
        }
        for f in &modified {
            assert!(text.contains(f.as_str()), "modified file {f}");
        }
        // The unresolved error of the moment: the last failing test run.
        assert!(text.contains("FAILED") || text.contains(scenario::UNRESOLVED_ERROR));
        assert!(
            text.contains("Next steps") || text.contains("Plan"),
            "next step"
        );
        assert_no_split_pair(&a.payload);
        checked += 1;
    }
    assert!(compactions >= 2, "{compactions} compactions");
    assert!(checked >= 2);

    // The end of the session: the unresolved error and the stated next step are in the context,
    // the older raw tool outputs are cut or left out, and the context is far smaller
    // than a transcript replay.
    let a = assembler
        .context("t", "s", &ContextRequest::default())
        .await
        .unwrap();
    let text = a.payload.to_string();
    assert!(
        text.contains(scenario::UNRESOLVED_ERROR),
        "unresolved error"
    );
    assert!(text.contains(scenario::NEXT_STEP), "next step");
    for f in scenario::modified_files(TURNS) {
        assert!(text.contains(&f), "modified file {f}");
    }
    // Old raw outputs do not all go as written: a re-run's older output goes as a pointer to
    // the newer one, and what the target has no room for is cut.
    assert!(
        [OmissionReason::Superseded, OmissionReason::Budget]
            .iter()
            .any(|r| a.assembly.omitted.contains_key(r)),
        "{:?}",
        a.assembly.omitted
    );
    assert_no_split_pair(&a.payload);
    assert!(
        a.assembly.context_tokens * 3 < a.assembly.transcript_tokens,
        "{} vs {}",
        a.assembly.context_tokens,
        a.assembly.transcript_tokens
    );

    // Invariant 8: the raw events stay readable after compaction.
    let stored = backends.store.events("t", "s", 0, 100_000).await.unwrap();
    assert!(stored.iter().any(|e| e["event_id"] == "s-00001"));

    // Replay from offset 0 into fresh projections: the same memories and compactions.
    let before = backends.store.fingerprint().await.unwrap();
    drop(assembler);
    drop(ingestor);
    drop(backends);
    let fresh = BackendOpts {
        db_url: Some(format!("sqlite://{}/fresh.db", dir.path().display())),
        ..opts.clone()
    };
    let replayed = Backends::open(&fresh, "test-replay").await.unwrap();
    strata_projector::catch_up(&replayed).await.unwrap();
    let after = replayed.store.fingerprint().await.unwrap();
    for table in ["memories", "compactions", "events", "session_folds"] {
        assert_eq!(before.get(table), after.get(table), "{table}");
    }
    assert!(after["compactions"].0 >= 2);
}

/// A record on the log that no longer reads back (an assembly recorded with an empty
/// participant before ingest held built events to the id rules) is left out of what compaction
/// reads, instead of failing every compaction of the session from then on.
#[tokio::test]
async fn a_stored_event_that_no_longer_parses_does_not_stop_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let events = coding_session("t", "s", 8);
    ingestor
        .ingest_json(&Publisher::Operator, events)
        .await
        .unwrap();
    // Straight onto the log, as an older ingest would have let it through.
    let mut bad = strata_core::Event::from_json(
        serde_json::json!({"event_id": "old-record", "tenant_id": "t", "session_id": "s",
            "timestamp": "2026-06-03T12:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": "m-old", "text": "an old record"}}),
        None,
    )
    .unwrap();
    bad.participant_id = Some(String::new());
    bad.seq = Some(10_000);
    let record = strata_log::NewRecord {
        key: b"s".to_vec(),
        headers: vec![],
        value: backends.codec.avro().encode(&bad).unwrap(),
        timestamp_ms: 0,
    };
    backends.log.append(vec![record]).await.unwrap();
    strata_projector::catch_up(&backends).await.unwrap();

    let read = strata_compactor::session_events(&backends, "t", "s")
        .await
        .expect("the session reads, the bad record left out");
    assert!(read.iter().all(|e| e.event_id != "old-record"));
    assert!(read.len() >= 8 * 4, "{} events", read.len());
    let compacted = strata_compactor::compact_session(&backends, &ingestor, "t", "s", "main", 2)
        .await
        .expect("compaction goes on");
    assert!(compacted.is_some());
}

/// A forked branch is compacted over its own history: the parent's events up to the fork point
/// and the branch's own, never what the parent did after the fork. The record names the branch,
/// the branch's assemblies apply it and the parent's do not.
#[tokio::test]
async fn a_forked_branch_is_compacted_over_its_own_history() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let assembler = Assembler::new(
        backends.clone(),
        ingestor.clone(),
        AssemblerOptions {
            record_assemblies: false,
            ..AssemblerOptions::default()
        },
    );
    let main = coding_session("t", "s", 12);
    // The fork starts after turn 7's closing answer; main goes on without it.
    let fork_at = main
        .iter()
        .position(|e| e["payload"]["message_id"] == "u8")
        .unwrap()
        - 1;
    let fork_point = main[fork_at]["event_id"].as_str().unwrap().to_owned();
    let after_fork: Vec<String> = main[fork_at + 1..]
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_owned())
        .collect();
    ingestor
        .ingest_json(&Publisher::Operator, main)
        .await
        .unwrap();
    let alt = |i: usize, ty: &str, payload: Value| {
        serde_json::json!({"event_id": format!("alt-{i}"), "tenant_id": "t", "session_id": "s",
            "branch_id": if ty == "BranchForked" { "main" } else { "alt" },
            "timestamp": "2026-06-03T12:00:00Z", "type": ty, "payload": payload})
    };
    let mut fork = vec![alt(
        0,
        "BranchForked",
        serde_json::json!({"new_branch_id": "alt", "from_event_id": fork_point}),
    )];
    for t in 0..3 {
        let i = 1 + t * 2;
        fork.push(alt(
            i,
            "UserPromptSubmitted",
            serde_json::json!({"message_id": format!("alt-u{t}"),
                "text": format!("ALT-ONLY request {t}: try the other lexer design.")}),
        ));
        fork.push(alt(
            i + 1,
            "ModelResponseReceived",
            serde_json::json!({"message_id": format!("alt-a{t}"),
                "text": format!("ALT-ONLY answer {t}: the other design keeps parser::parse.")}),
        ));
    }
    ingestor
        .ingest_json(&Publisher::Operator, fork)
        .await
        .unwrap();
    strata_projector::catch_up(&backends).await.unwrap();

    let record = strata_compactor::compact_session(&backends, &ingestor, "t", "s", "alt", 1)
        .await
        .unwrap()
        .expect("the fork's history has turns to compact");
    strata_projector::catch_up(&backends).await.unwrap();
    assert_eq!(record.branch_id, "alt");
    assert!(record.succeeded(), "{:?}", record.check.failures);
    let sources = &record.provenance.source_event_ids;
    assert!(
        sources.iter().any(|id| id == "s-00001"),
        "the parent's early events"
    );
    assert!(
        sources.iter().any(|id| id == "alt-1"),
        "the fork's own first turn"
    );
    for id in &after_fork {
        assert!(!sources.contains(id), "{id}: the parent after the fork");
    }
    assert!(record.first_kept_event_id.starts_with("alt-"));

    let branch_context = assembler
        .context(
            "t",
            "s",
            &ContextRequest {
                branch: Some("alt".into()),
                ..ContextRequest::default()
            },
        )
        .await
        .unwrap();
    assert!(branch_context
        .assembly
        .included
        .iter()
        .any(|s| s.kind == "compaction_summary"));
    let text = branch_context.payload.to_string();
    assert!(text.contains("ALT-ONLY request 2"), "the kept turn");
    assert!(!text.contains("Step 10 done"), "the parent after the fork");
    let main_context = assembler
        .context("t", "s", &ContextRequest::default())
        .await
        .unwrap();
    assert!(!main_context
        .assembly
        .included
        .iter()
        .any(|s| s.kind == "compaction_summary"));

    // Nothing new since: nothing to compact. The same cut for main is another compaction.
    let again = strata_compactor::compact_session(&backends, &ingestor, "t", "s", "alt", 1)
        .await
        .unwrap();
    assert!(again.is_none(), "{again:?}");
    let on_main = strata_compactor::compact_session(&backends, &ingestor, "t", "s", "main", 1)
        .await
        .unwrap()
        .expect("main compacts too");
    assert_eq!(on_main.branch_id, "main");
    assert_ne!(on_main.compaction_id, record.compaction_id);

    let unknown = strata_compactor::compact_session(&backends, &ingestor, "t", "s", "nope", 1)
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, strata_compactor::Error::NotFound(_)),
        "{unknown}"
    );
}

/// An explicit compaction reads a bounded part of the session: from the branch's latest
/// compaction's cut on, at most so many events. A history longer than that is compacted a part
/// at a time, each record going on from the one before, none summarising an event twice or
/// skipping one; and the result reads the same as the whole history compacted at once would
/// cover.
#[tokio::test]
async fn an_explicit_compaction_reads_a_bounded_part_and_goes_on_from_its_last_cut() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    ingestor
        .ingest_json(&Publisher::Operator, coding_session("t", "s", 24))
        .await
        .unwrap();
    strata_projector::catch_up(&backends).await.unwrap();
    let total = strata_compactor::session_events(&backends, "t", "s")
        .await
        .unwrap()
        .len() as u64;
    const MAX: usize = 40;
    let mut records = Vec::new();
    while let Some(r) =
        strata_compactor::compact_session_within(&backends, &ingestor, "t", "s", "main", 1, MAX)
            .await
            .unwrap()
    {
        strata_projector::catch_up(&backends).await.unwrap();
        assert!(r.succeeded(), "{:?}", r.check.failures);
        records.push(r);
        assert!(records.len() < 50, "compaction does not converge");
    }
    assert!(records.len() >= 3, "{} records", records.len());
    for pair in records.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        // Each part starts where the one before left off, and reads no further than the bound.
        assert_eq!(
            b.provenance.previous_compaction_id.as_deref(),
            Some(a.compaction_id.as_str())
        );
        assert_eq!(b.first_seq, records[0].first_seq);
        let first_new = b.provenance.source_event_ids.first().unwrap();
        assert_eq!(first_new, &a.first_kept_event_id);
        assert!(
            b.last_seq < a.first_kept_seq + MAX as u64,
            "{} {}",
            b.last_seq,
            a.first_kept_seq
        );
    }
    let summarised: Vec<&String> = records
        .iter()
        .flat_map(|r| &r.provenance.source_event_ids)
        .collect();
    let distinct: std::collections::BTreeSet<&String> = summarised.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        summarised.len(),
        "an event summarised twice"
    );
    // The last record keeps only the newest turn: the history up to it is summarised.
    let last = records.last().unwrap();
    assert!(
        last.first_kept_seq + 40 > total,
        "{} of {total}",
        last.first_kept_seq
    );
}
