//! The compactor holds a bounded number of sessions: one evicted and seen again is restored
//! from the projections (its latest compaction, its budget and its events since the cut) and
//! compacts exactly as if it had been held throughout.

use std::time::Duration;

use serde_json::Value;
use strata_compactor::scenario::coding_session;
use strata_compactor::{CompactorOptions, Planner, PlannerLimits};
use strata_core::payload::Payload;
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::{BackendOpts, Backends};

const TURNS: usize = 30;

fn options() -> CompactorOptions {
    CompactorOptions {
        threshold: 0.4,
        ..CompactorOptions::default()
    }
}

/// The compactions of a session, in log order, by id.
async fn compactions(backends: &Backends, session: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for v in backends
        .store
        .events("t", session, 0, 10_000)
        .await
        .unwrap()
    {
        if let Payload::CompactionCompleted(p) = Event::from_json(v, None).unwrap().payload {
            ids.push(p.compaction_id);
        }
    }
    ids
}

#[tokio::test]
async fn an_evicted_session_is_restored_and_compacts_as_if_it_had_been_held() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    // Two sessions of one partition stepping in turn, with one session held: every event of
    // one evicts the other.
    let partition = backends.log.partition_for_key(b"s1");
    let other = (2..)
        .map(|i| format!("s{i}"))
        .find(|s| backends.log.partition_for_key(s.as_bytes()) == partition)
        .unwrap();
    let (a, b) = (
        coding_session("t", "s1", TURNS),
        coding_session("t", &other, TURNS),
    );
    // What a planner holding everything compacts, each session alone.
    let mut want = Vec::new();
    for events in [&a, &b] {
        let mut planner = Planner::new(options());
        let ids: Vec<String> = events
            .iter()
            .map(|v| Event::from_json(v.clone(), None).unwrap())
            .enumerate()
            .filter_map(|(i, mut e)| {
                e.seq = Some(i as u64 + 1);
                planner.observe(&e)
            })
            .map(|r| r.compaction_id)
            .collect();
        assert!(ids.len() >= 2, "{} compactions", ids.len());
        want.push(ids);
    }
    let interleaved: Vec<Value> = a.into_iter().zip(b).flat_map(|(x, y)| [x, y]).collect();
    ingestor
        .ingest_json(&Publisher::Operator, interleaved)
        .await
        .unwrap();

    // The projector runs beside the compactor, as in production: the records the compactor
    // appends reach the projections while it goes on.
    let projector = Projector::start(backends.clone(), ProjectorOptions::default())
        .await
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let projecting = tokio::spawn(projector.run(async {
        let _ = stopped.await;
    }));
    let mut planner = Planner::new(options()).with_limits(PlannerLimits {
        sessions: 1,
        ..PlannerLimits::default()
    });
    let (_, by_type) =
        strata_compactor::catch_up_with(&backends, strata_compactor::DEFAULT_GROUP, &mut planner)
            .await
            .unwrap();
    assert!(planner.evicted() > 100, "{} evictions", planner.evicted());
    assert!(
        by_type.get("restored").copied().unwrap_or(0) > 100,
        "{by_type:?}"
    );
    assert_eq!(by_type.get("failed"), None);
    strata_projector::wait_for_projector(
        &backends,
        strata_projector::DEFAULT_GROUP,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    stop.send(()).unwrap();
    projecting.await.unwrap().unwrap();

    assert_eq!(compactions(&backends, "s1").await, want[0]);
    assert_eq!(compactions(&backends, &other).await, want[1]);
}
