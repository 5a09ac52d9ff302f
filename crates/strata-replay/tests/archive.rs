//! The archive round-trips the log byte for byte, archives only what is new, and replay reads it.

mod common;

use strata_log::{EventLog, LogConsumer, LogRecord, NewRecord, Offsets, Position};
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

/// The live log with the records below `kept_from` per partition gone, as Kafka's retention
/// leaves a topic (reads below its low watermark return nothing). tansu 0.6.0, the broker the
/// suite runs, loses its storage task on `DeleteRecords`, so retention cannot be produced on it.
#[derive(Debug)]
struct Retained {
    log: std::sync::Arc<dyn EventLog>,
    kept_from: Vec<u64>,
}

#[async_trait::async_trait]
impl EventLog for Retained {
    fn partition_count(&self) -> u32 {
        self.log.partition_count()
    }
    async fn append(&self, records: Vec<NewRecord>) -> strata_log::Result<Vec<Position>> {
        self.log.append(records).await
    }
    async fn end_offsets(&self) -> strata_log::Result<Vec<u64>> {
        self.log.end_offsets().await
    }
    async fn read(&self, p: u32, from: u64, max: usize) -> strata_log::Result<Vec<LogRecord>> {
        if from < self.kept_from[p as usize] {
            return Ok(Vec::new());
        }
        self.log.read(p, from, max).await
    }
    async fn committed(&self, group: &str) -> strata_log::Result<Offsets> {
        self.log.committed(group).await
    }
    async fn subscribe(&self, group: &str) -> strata_log::Result<Box<dyn LogConsumer>> {
        self.log.subscribe(group).await
    }
    async fn ping(&self) -> strata_log::Result<()> {
        self.log.ping().await
    }
    async fn dead_letter(
        &self,
        record: &LogRecord,
        group: &str,
        reason: &str,
    ) -> strata_log::Result<Position> {
        self.log.dead_letter(record, group, reason).await
    }
    async fn read_dead_letters(&self, from: u64, max: usize) -> strata_log::Result<Vec<LogRecord>> {
        self.log.read_dead_letters(from, max).await
    }
}

/// Retention dropped the first half of every partition: a rebuild without the archive is
/// refused naming retention; with it, the dropped records come from the archive and the rebuilt
/// set equals the live one.
#[tokio::test]
async fn rebuild_reads_from_the_archive_what_retention_dropped() {
    use strata_replay::rebuild::{self, RebuildOptions};

    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 6, 90).await;
    archive::archive(live.log.as_ref(), &live.blobs, 70)
        .await
        .unwrap();
    let ends = live.log.end_offsets().await.unwrap();
    let log = Retained {
        log: live.log.clone(),
        kept_from: ends.iter().map(|e| e / 2).collect(),
    };

    let refused = rebuild::rebuild(
        dir.path(),
        &log,
        live.store.as_ref(),
        &RebuildOptions::default(),
        None,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("retention") && refused.contains("strata archive"),
        "{refused}"
    );

    let report = rebuild::rebuild(
        dir.path(),
        &log,
        live.store.as_ref(),
        &RebuildOptions {
            archive: Some(live.blobs.clone()),
            ..RebuildOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    assert!(report.switched && report.verification.as_ref().unwrap().ok());
    // At least what retention dropped (a file that holds the cut is read to its end).
    let dropped: u64 = ends.iter().map(|e| e / 2).sum();
    assert!(report.archived >= dropped, "{report:?}");
    assert_eq!(report.events, ends.iter().sum::<u64>());

    // Records neither the log nor the archive holds are a clear error, not a silent gap.
    let late = strata_replay::workload::session(common::TENANT, "late", 30);
    common::ingest(&live, late).await;
    strata_projector::catch_up(&live).await.unwrap();
    let err = rebuild::rebuild(
        dir.path(),
        &Retained {
            log: live.log.clone(),
            kept_from: live.log.end_offsets().await.unwrap(),
        },
        live.store.as_ref(),
        &RebuildOptions {
            archive: Some(live.blobs.clone()),
            ..RebuildOptions::default()
        },
        None,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("no archived file holds it"), "{err}");
}
