//! The memory extractor consumes the log in its own group, keeps its offsets, and stops cleanly.

use std::time::Duration;

use serde_json::json;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

#[tokio::test]
async fn consumes_commits_and_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let events = |from: usize, to: usize| {
        (from..to)
            .map(|i| {
                json!({"event_id": format!("e{i}"), "tenant_id": "t", "session_id": format!("s{}", i % 3),
                    "timestamp": "2026-06-03T10:00:00Z", "type": "FileRead", "payload": {"path": "a"}})
            })
            .collect::<Vec<_>>()
    };
    ingestor
        .ingest_json(&Publisher::Operator, events(0, 12))
        .await
        .unwrap();
    let stop = tokio::time::sleep(Duration::from_millis(500));
    let (stats, by_type) = strata_memory::run(&backends, strata_memory::DEFAULT_GROUP, stop)
        .await
        .unwrap();
    assert_eq!(stats.events, 12);
    assert_eq!(by_type.get("FileRead"), Some(&12));
    let committed = backends
        .log
        .committed(strata_memory::DEFAULT_GROUP)
        .await
        .unwrap();
    let end = backends.log.end_offsets().await.unwrap();
    for (p, e) in end.iter().enumerate() {
        assert_eq!(committed.get(&(p as u32)).copied().unwrap_or(0), *e);
    }
    // A restart consumes only what came after.
    ingestor
        .ingest_json(&Publisher::Operator, events(12, 15))
        .await
        .unwrap();
    let stop = tokio::time::sleep(Duration::from_millis(500));
    let (stats, _) = strata_memory::run(&backends, strata_memory::DEFAULT_GROUP, stop)
        .await
        .unwrap();
    assert_eq!(stats.events, 3);
}

#[tokio::test]
async fn catch_up_stops_at_the_log_end_with_its_own_memories_consumed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    // An empty log: nothing to do, returns at once.
    let (stats, _) = strata_memory::catch_up(&backends).await.unwrap();
    assert_eq!(stats.events, 0);
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let mut events = vec![
        json!({"event_id": "m1", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:00Z", "type": "ModelResponseReceived",
        "payload": {"message_id": "a1", "text": "reading",
            "tool_calls": [{"tool_call_id": "c1", "name": "read_file", "args": {"path": "a.rs"}}]}}),
    ];
    events.push(
        json!({"event_id": "r1", "tenant_id": "t", "session_id": "s",
        "timestamp": "2026-06-03T10:00:01Z", "type": "ToolCallFinished",
        "payload": {"tool_call_id": "c1", "output": "fn main() {}\n"}}),
    );
    ingestor
        .ingest_json(&Publisher::Operator, events)
        .await
        .unwrap();
    let (stats, by_type) = strata_memory::catch_up(&backends).await.unwrap();
    // The two events, then the memory it appended (read back and learned, not extracted).
    assert_eq!(by_type.get("appended"), Some(&1));
    assert_eq!(stats.events, 3);
    let committed = backends
        .log
        .committed(strata_memory::DEFAULT_GROUP)
        .await
        .unwrap();
    let end = backends.log.end_offsets().await.unwrap();
    for (p, e) in end.iter().enumerate() {
        assert_eq!(committed.get(&(p as u32)).copied().unwrap_or(0), *e);
    }
    // Caught up already: a second run consumes nothing and appends nothing.
    let (stats, by_type) = strata_memory::catch_up(&backends).await.unwrap();
    assert_eq!(stats.events, 0);
    assert_eq!(by_type.get("appended"), None);
}
