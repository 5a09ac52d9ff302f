//! The memory extractor as a service: it writes memories back to the log, the projector
//! projects them, and replaying the log from offset 0 into fresh projections reproduces them.

use std::time::Duration;

use serde_json::{json, Value};
use strata_core::memory::Memory;
use strata_core::payload::Payload;
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

fn session(session: &str, project: &str) -> Vec<Value> {
    let mut v = Vec::new();
    let mut push = |ty: &str, ts: &str, payload: Value| {
        let i = v.len();
        v.push(
            json!({"event_id": format!("{session}-e{i}"), "tenant_id": "t", "session_id": session,
            "timestamp": ts, "type": ty, "payload": payload}),
        );
    };
    push(
        "SessionStarted",
        "2026-06-03T10:00:00Z",
        json!({"model": {"provider": "openai", "model": "m"},
        "context_window_tokens": 8000, "reserved_output_tokens": 1000, "project_id": project}),
    );
    push(
        "UserPromptSubmitted",
        "2026-06-03T10:00:01Z",
        json!({"message_id": "u1", "text": "Where is order 42?"}),
    );
    push(
        "ModelResponseReceived",
        "2026-06-03T10:00:02Z",
        json!({"message_id": "a1",
        "text": "I think it shipped already.",
        "tool_calls": [{"tool_call_id": "c1", "name": "crm.get_order", "args": {"id": 42}}]}),
    );
    push(
        "ToolCallFinished",
        "2026-06-03T10:00:03Z",
        json!({"tool_call_id": "c1",
        "output": "{\"order_id\": \"42\", \"status\": \"pending\"}"}),
    );
    push(
        "ModelResponseReceived",
        "2026-06-03T11:00:02Z",
        json!({"message_id": "a2", "text": "",
        "tool_calls": [{"tool_call_id": "c2", "name": "crm.get_order", "args": {"id": 42}}]}),
    );
    push(
        "ToolCallFinished",
        "2026-06-03T11:00:03Z",
        json!({"tool_call_id": "c2",
        "output": "{\"order_id\": \"42\", \"status\": \"shipped\"}"}),
    );
    push(
        "ModelResponseReceived",
        "2026-06-03T11:00:04Z",
        json!({"message_id": "a3", "text": "",
        "tool_calls": [{"tool_call_id": "c3", "name": "erp.fetch_order", "args": {"order": "42"}}]}),
    );
    push(
        "ToolCallFinished",
        "2026-06-03T11:00:05Z",
        json!({"tool_call_id": "c3",
        "output": "{\"order_id\": \"42\", \"status\": \"cancelled\"}"}),
    );
    v
}

async fn memories(backends: &Backends, session: &str) -> (Vec<Memory>, Vec<(String, String)>) {
    let events = backends
        .store
        .events("t", session, 0, 10_000)
        .await
        .unwrap();
    let mut mems = Vec::new();
    let mut sups = Vec::new();
    for v in events {
        let e = Event::from_json(v, None).unwrap();
        match &e.payload {
            Payload::MemoryRecorded(p) => mems.push(Memory::from_payload(p).unwrap()),
            Payload::MemorySuperseded(p) => {
                sups.push((p.memory_id.clone(), p.superseded_by.clone()))
            }
            _ => {}
        }
    }
    (mems, sups)
}

#[tokio::test]
async fn memories_are_written_back_projected_and_replayable() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    ingestor
        .ingest_json(&Publisher::Operator, session("s1", "alpha"))
        .await
        .unwrap();
    ingestor
        .ingest_json(&Publisher::Operator, session("s2", "beta"))
        .await
        .unwrap();
    let stop = tokio::time::sleep(Duration::from_millis(1500));
    let (_, by_type) = strata_memory::run(&backends, strata_memory::DEFAULT_GROUP, stop)
        .await
        .unwrap();
    assert!(
        by_type.get("appended").copied().unwrap_or(0) >= 8,
        "{by_type:?}"
    );
    strata_projector::catch_up(&backends).await.unwrap();

    let (mems, sups) = memories(&backends, "s1").await;
    let by_call = |id: &str| {
        mems.iter()
            .find(|m| m.tool_call_id.as_deref() == Some(id))
            .unwrap()
    };
    let (old, new, other) = (by_call("c1"), by_call("c2"), by_call("c3"));
    // Supersession: the same query later replaces the earlier value, linked both ways.
    assert_eq!(new.supersedes, vec![old.memory_id.clone()]);
    assert!(sups.contains(&(old.memory_id.clone(), new.memory_id.clone())));
    assert!(new.text.contains("shipped") && old.text.contains("pending"));
    // Conflict: another source disagrees; both kept, linked, each with its sources.
    assert_eq!(other.conflicts_with, vec![new.memory_id.clone()]);
    assert!(!sups
        .iter()
        .any(|(m, _)| m == &new.memory_id || m == &other.memory_id));
    assert_eq!(other.source_refs, vec!["s1-e6", "s1-e7"]);
    // The guess stays a session-scoped hypothesis.
    let guess = mems.iter().find(|m| m.kind == "hypothesis").unwrap();
    assert_eq!(guess.scope, strata_core::memory::Scope::Session);
    // Projects are kept apart: s2's identical call did not supersede s1's.
    let (mems2, _) = memories(&backends, "s2").await;
    assert!(mems2.iter().all(|m| m.project_id == "beta"));
    assert!(mems2.iter().all(|m| m
        .supersedes
        .iter()
        .chain(&m.conflicts_with)
        .all(|id| mems2.iter().any(|x| &x.memory_id == id))));

    // A second run does not record anything twice (it learns its own events from the log).
    let stop = tokio::time::sleep(Duration::from_millis(700));
    let (_, again) = strata_memory::run(&backends, strata_memory::DEFAULT_GROUP, stop)
        .await
        .unwrap();
    assert_eq!(again.get("appended"), None, "{again:?}");

    // Replay from offset 0 into fresh projections: the same memories, byte for byte.
    let a = backends.store.fingerprint().await.unwrap();
    drop(ingestor);
    drop(backends);
    let fresh = BackendOpts {
        db_url: Some(format!("sqlite://{}/fresh.db", dir.path().display())),
        ..opts.clone()
    };
    let replayed = Backends::open(&fresh, "test-replay").await.unwrap();
    strata_projector::catch_up(&replayed).await.unwrap();
    let b = replayed.store.fingerprint().await.unwrap();
    assert_eq!(a.get("memories"), b.get("memories"));
    assert!(a["memories"].0 >= 8);
}

#[tokio::test]
async fn a_restarted_extractor_rebuilds_its_state_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let mut events = session("s1", "alpha");
    let later = events.split_off(4); // the second crm.get_order comes after the restart
    ingestor
        .ingest_json(&Publisher::Operator, events)
        .await
        .unwrap();
    let stop = tokio::time::sleep(Duration::from_millis(600));
    strata_memory::run(&backends, strata_memory::DEFAULT_GROUP, stop)
        .await
        .unwrap();
    ingestor
        .ingest_json(&Publisher::Operator, later)
        .await
        .unwrap();
    // A new process: a fresh engine, which must still know the first observation.
    let stop = tokio::time::sleep(Duration::from_millis(600));
    let (stats, _) = strata_memory::run(&backends, strata_memory::DEFAULT_GROUP, stop)
        .await
        .unwrap();
    assert!(
        stats.events >= 4,
        "only what came after is counted: {stats:?}"
    );
    strata_projector::catch_up(&backends).await.unwrap();
    let (mems, sups) = memories(&backends, "s1").await;
    let first = mems
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c1"))
        .unwrap();
    let second = mems
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("c2"))
        .unwrap();
    assert_eq!(second.supersedes, vec![first.memory_id.clone()]);
    assert!(sups.contains(&(first.memory_id.clone(), second.memory_id.clone())));
    // Nothing was recorded twice.
    let mut ids: Vec<&str> = mems.iter().map(|m| m.memory_id.as_str()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
}

#[tokio::test]
async fn sessions_evicted_under_the_limits_are_restored_from_the_projections() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    // Two sessions of one partition stepping in turn: with one session held, each step of
    // one evicts the other, between every call and its result.
    let partition = backends.log.partition_for_key(b"s1");
    let other = (2..)
        .map(|i| format!("s{i}"))
        .find(|s| backends.log.partition_for_key(s.as_bytes()) == partition)
        .unwrap();
    let (a, b) = (session("s1", "alpha"), session(&other, "beta"));
    let interleaved: Vec<Value> = a.into_iter().zip(b).flat_map(|(x, y)| [x, y]).collect();
    ingestor
        .ingest_json(&Publisher::Operator, interleaved)
        .await
        .unwrap();
    strata_projector::catch_up(&backends).await.unwrap();

    let limits = strata_memory::MemoryLimits {
        sessions: 1,
        ..Default::default()
    };
    let mut engine = strata_core::memory::MemoryEngine::with_limits(
        vec![Box::new(strata_core::memory::RuleExtractor)],
        limits,
    );
    let (_, by_type) =
        strata_memory::catch_up_with(&backends, strata_memory::DEFAULT_GROUP, &mut engine)
            .await
            .unwrap();
    assert!(engine.evictions().0 >= 6, "{:?}", engine.evictions());
    assert!(
        by_type.get("restored").copied().unwrap_or(0) >= 6,
        "{by_type:?}"
    );
    strata_projector::catch_up(&backends).await.unwrap();

    for (s, project) in [("s1", "alpha"), (other.as_str(), "beta")] {
        // What an engine holding everything derives from the same events.
        let mut whole = strata_core::memory::MemoryEngine::default();
        let mut want: Vec<String> = Vec::new();
        for v in backends.store.events("t", s, 0, 10_000).await.unwrap() {
            let e = Event::from_json(v, None).unwrap();
            if !e.is_derived() {
                want.extend(whole.observe(&e).into_iter().map(|d| d.event_id));
            }
        }
        let (mems, sups) = memories(&backends, s).await;
        assert!(mems.iter().all(|m| m.project_id == project), "{mems:?}");
        let mut got: Vec<String> = mems
            .iter()
            .map(|m| format!("mrec_{}", &m.memory_id[4..]))
            .collect();
        got.extend(sups.iter().map(|(old, new)| {
            let digest = strata_core::sha256_hex(format!("{old}\n{new}").as_bytes());
            format!("msup_{}", &digest[..24])
        }));
        got.sort();
        want.sort();
        assert_eq!(got, want, "session {s}");
        assert!(
            !sups.is_empty(),
            "the repeated call superseded the first in {s}"
        );
    }
}
