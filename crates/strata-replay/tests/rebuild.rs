//! `rebuild` on the embedded default: an equal set, verified, switched atomically; resumed after a
//! crash; refused when the rebuilt set is corrupt; run while the live projector keeps serving.

mod common;

use std::str::FromStr;

use sqlx::{ConnectOptions, Connection};
use strata_replay::rebuild::{self, RebuildOptions};
use strata_replay::Error;
use strata_runtime::{current_store_file, Backends};

#[tokio::test]
async fn rebuild_verifies_switches_and_keeps_the_old_set() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 12, 120).await;
    let before = live.store.fingerprint().await.unwrap();
    let report = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions {
            batch_events: 300,
            ..RebuildOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    assert!(report.switched, "{report:?}");
    assert_eq!(report.file, "strata.gen-2.db");
    assert!(report.events >= 12 * 120);
    let v = report.verification.unwrap();
    assert!(v.ok());
    assert_eq!(v.sessions, 12);
    assert_eq!(current_store_file(dir.path()), "strata.gen-2.db");
    drop(live);

    // Readers now open the rebuilt set, which equals the old one.
    let reopened = Backends::open(&common::opts(dir.path()), "test")
        .await
        .unwrap();
    assert_eq!(reopened.store.fingerprint().await.unwrap(), before);
    drop(reopened);

    // The old set stays until dropped; the current one cannot be dropped.
    let gens = rebuild::generations(dir.path()).unwrap();
    assert_eq!(gens.len(), 2);
    assert!(gens[1].current && !gens[0].current);
    assert!(rebuild::drop_generation(dir.path(), "strata.gen-2.db").is_err());
    rebuild::drop_generation(dir.path(), "strata.db").unwrap();
    assert!(!dir.path().join("strata.db").exists());
}

#[tokio::test]
async fn rebuild_resumes_after_a_crash_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 8, 150).await;
    let options = RebuildOptions {
        batch_events: 200,
        ..RebuildOptions::default()
    };
    let first = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions {
            stop_after: Some(500),
            ..options.clone()
        },
        None,
    )
    .await
    .unwrap();
    assert!(first.stopped_early && !first.switched);
    assert_eq!(current_store_file(dir.path()), "strata.db");
    let second = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &options,
        None,
    )
    .await
    .unwrap();
    assert!(second.resumed);
    assert_eq!(second.file, first.file);
    // The second run read only what the first had not committed.
    let total: u64 = live.log.end_offsets().await.unwrap().iter().sum();
    assert_eq!(first.events + second.events, total);
    assert!(second.switched);
}

#[tokio::test]
async fn rebuild_refuses_to_switch_a_corrupt_set() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 6, 100).await;
    let first = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions {
            batch_events: 100,
            stop_after: Some(200),
            ..RebuildOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    // Corrupt what the interrupted rebuild committed.
    let path = dir.path().join(&first.file);
    let mut conn =
        sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    sqlx::query("UPDATE messages SET text = 'tampered' WHERE rowid = 1")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let err = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions::default(),
        None,
    )
    .await
    .unwrap_err();
    match err {
        Error::VerificationFailed(why) => {
            assert!(why.contains("table messages"), "{why}");
        }
        other => panic!("expected a verification failure, got {other}"),
    }
    assert_eq!(current_store_file(dir.path()), "strata.db");
    assert!(!dir.path().join(strata_runtime::STORE_POINTER).exists());
}

#[tokio::test]
async fn rebuild_runs_while_the_live_projector_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 4, 100).await;
    let projector = strata_projector::Projector::start(
        live.clone(),
        strata_projector::ProjectorOptions::default(),
    )
    .await
    .unwrap();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(projector.run(async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    }));
    // Appends keep coming while the rebuild runs.
    let writer = {
        let live = live.clone();
        tokio::spawn(async move {
            for round in 0..5 {
                let events =
                    strata_replay::workload::session(common::TENANT, &format!("late-{round}"), 60);
                common::ingest(&live, events).await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
    };
    let report = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions {
            batch_events: 150,
            ..RebuildOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    writer.await.unwrap();
    stop_tx.send(true).unwrap();
    running.await.unwrap().unwrap();
    assert!(report.switched);
    assert!(report.verification.unwrap().ok());
}

#[tokio::test]
async fn rebuild_passes_over_a_record_the_live_projector_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 6, 60).await;
    live.log
        .append(vec![strata_log::NewRecord {
            key: b"s-garbage".to_vec(),
            headers: vec![],
            value: b"\x00not an event".to_vec(),
            timestamp_ms: 0,
        }])
        .await
        .unwrap();
    common::ingest(
        &live,
        strata_replay::workload::sessions(common::TENANT, 2, 30)
            .into_iter()
            .map(|mut e| {
                e.event_id = format!("late-{}", e.event_id);
                e.session_id = format!("late-{}", e.session_id);
                e
            })
            .collect(),
    )
    .await;
    strata_projector::catch_up(&live).await.unwrap();
    assert_eq!(live.log.read_dead_letters(0, 10).await.unwrap().len(), 1);
    let report = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(report.undecodable, 1);
    assert!(report.verification.as_ref().unwrap().ok(), "{report:?}");
    assert!(report.switched);
}

/// `(rowid, key)` of every row of the tables whose insertion order readers may see.
async fn rows_in_order(path: &std::path::Path) -> Vec<(String, i64, String)> {
    let mut conn =
        sqlx::sqlite::SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .unwrap()
            .read_only(true)
            .connect()
            .await
            .unwrap();
    let mut out = Vec::new();
    for (table, key) in [
        ("events", "event_id"),
        ("messages", "event_id"),
        ("tool_calls", "tool_call_id || '/' || status"),
        ("branches", "branch_id"),
        ("session_folds", "session_id"),
    ] {
        let rows: Vec<(i64, String)> = sqlx::query_as(&format!(
            "SELECT rowid, session_id || '/' || {key} FROM {table} ORDER BY rowid"
        ))
        .fetch_all(&mut conn)
        .await
        .unwrap();
        out.extend(rows.into_iter().map(|(r, k)| (table.to_owned(), r, k)));
    }
    conn.close().await.unwrap();
    out
}

#[tokio::test]
async fn rebuild_writes_the_same_set_with_one_or_several_fold_workers() {
    let mut sets = Vec::new();
    for workers in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let live = common::populate(dir.path(), 10, 120).await;
        let report = rebuild::rebuild(
            dir.path(),
            live.log.as_ref(),
            live.store.as_ref(),
            &RebuildOptions {
                fold_workers: workers,
                batch_events: 500,
                ..RebuildOptions::default()
            },
            None,
        )
        .await
        .unwrap();
        assert!(report.switched && report.verification.as_ref().unwrap().ok());
        let fingerprint = live.store.fingerprint().await.unwrap();
        drop(live);
        sets.push((
            fingerprint,
            rows_in_order(&dir.path().join(&report.file)).await,
        ));
    }
    // Same content, and the same rows in the same insertion order.
    assert_eq!(sets[0].0, sets[1].0);
    assert!(!sets[0].1.is_empty());
    assert_eq!(sets[0].1, sets[1].1);
}

#[tokio::test]
async fn rebuild_starts_an_unsynced_set_over_after_a_restart_of_the_machine() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 6, 120).await;
    let first = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions {
            batch_events: 100,
            stop_after: Some(300),
            ..RebuildOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    assert!(first.stopped_early);
    // As if the machine had restarted since: another boot wrote the state.
    let state_path = dir.path().join(rebuild::STATE_FILE);
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state_path).unwrap()).unwrap();
    assert_eq!(state["unsynced"], true);
    state["boot_id"] = "an-earlier-boot".into();
    std::fs::write(&state_path, serde_json::to_vec(&state).unwrap()).unwrap();

    let second = rebuild::rebuild(
        dir.path(),
        live.log.as_ref(),
        live.store.as_ref(),
        &RebuildOptions::default(),
        None,
    )
    .await
    .unwrap();
    assert!(second.started_over && !second.resumed, "{second:?}");
    assert_eq!(second.file, first.file);
    // Everything was read again, from offset 0.
    let total: u64 = live.log.end_offsets().await.unwrap().iter().sum();
    assert_eq!(second.events, total);
    assert!(second.switched && second.verification.unwrap().ok());
}
