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
