//! The archive round-trips the log byte for byte, archives only what is new, and replay reads it.

mod common;

use strata_replay::archive;
use strata_replay::replay::{replay, ReplayOptions, ReplaySource};

#[tokio::test]
async fn archive_round_trips_the_log_and_feeds_replay() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 6, 90).await;
    let first = archive::archive(live.log.as_ref(), &live.blobs, 100)
        .await
        .unwrap();
    let total: u64 = live.log.end_offsets().await.unwrap().iter().sum();
    assert_eq!(first.records, total);
    assert!(first.files > 4, "several files per partition: {first:?}");

    // More events: only they are archived by the next pass.
    common::ingest(
        &live,
        strata_replay::workload::session(common::TENANT, "late", 40),
    )
    .await;
    let second = archive::archive(live.log.as_ref(), &live.blobs, 100)
        .await
        .unwrap();
    let total: u64 = live.log.end_offsets().await.unwrap().iter().sum();
    assert_eq!(first.records + second.records, total);
    assert_eq!(
        live.log.committed(archive::ARCHIVER_GROUP).await.unwrap(),
        second.ends
    );

    // Byte for byte what the log holds.
    let archived = archive::read_all(&live.blobs).await.unwrap();
    let mut on_log = Vec::new();
    for (p, end) in live.log.end_offsets().await.unwrap().iter().enumerate() {
        on_log.extend(live.log.read(p as u32, 0, *end as usize).await.unwrap());
    }
    assert_eq!(archived.len(), on_log.len());
    assert_eq!(archived, on_log);

    // Replay from the archive equals replay from the log.
    let codec = strata_codec::AvroCodec::new();
    let events = archived
        .iter()
        .map(|r| codec.decode(&r.value).unwrap())
        .collect();
    let from_archive = replay(
        ReplaySource::Events(events),
        &ReplayOptions::default(),
        None,
    )
    .await
    .unwrap();
    let from_log = replay(
        ReplaySource::Log(live.log.as_ref()),
        &ReplayOptions::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(from_archive.sessions, from_log.sessions);
    assert_eq!(from_archive.call_points, from_log.call_points);
    assert_eq!(from_archive.recorded_tokens, from_log.recorded_tokens);
}
