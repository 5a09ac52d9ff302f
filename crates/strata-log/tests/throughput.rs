//! Throughput of the file log: appends of ~200-byte events in batches, then a full rebuild.
//!
//! Timing-dependent, so ignored by default. Run it with
//! `cargo test -p strata-log --release --test throughput -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use strata_log::file::FileLog;
use strata_log::{EventLog, FileLogOptions, FsyncPolicy, NewRecord};

const EVENTS: usize = 200_000;
const BATCH: usize = 500;
/// The target of SPEC §3 for appends and rebuilds.
const TARGET_PER_SEC: f64 = 50_000.0;

fn event(i: usize) -> NewRecord {
    NewRecord {
        key: format!("session-{}", i % 64).into_bytes(),
        headers: vec![
            ("type".to_owned(), b"message.appended".to_vec()),
            ("schema".to_owned(), b"7".to_vec()),
        ],
        value: vec![b'x'; 140],
        timestamp_ms: 1_700_000_000_000 + i as i64,
    }
}

async fn run(fsync: FsyncPolicy) {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(
        tmp.path(),
        FileLogOptions {
            partitions: 8,
            fsync,
            segment_bytes: 8 << 20,
        },
    )
    .await
    .unwrap();

    let started = Instant::now();
    for start in (0..EVENTS).step_by(BATCH) {
        let batch: Vec<NewRecord> = (start..start + BATCH).map(event).collect();
        log.append(batch).await.unwrap();
    }
    let append_rate = EVENTS as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut read = 0;
    for partition in 0..log.partition_count() {
        let mut from = 0;
        loop {
            let records = log.read(partition, from, 1000).await.unwrap();
            let Some(last) = records.last() else { break };
            from = last.offset + 1;
            read += records.len();
        }
    }
    assert_eq!(read, EVENTS);
    let read_rate = EVENTS as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut consumer = log.subscribe("bench").await.unwrap();
    let mut polled = 0;
    while polled < EVENTS {
        polled += consumer
            .poll(1000, Duration::from_secs(1))
            .await
            .unwrap()
            .records
            .len();
    }
    let poll_rate = EVENTS as f64 / started.elapsed().as_secs_f64();

    drop(log);
    let started = Instant::now();
    let log = FileLog::open(tmp.path(), FileLogOptions::default())
        .await
        .unwrap();
    let reopen = started.elapsed();
    assert_eq!(
        log.end_offsets().await.unwrap().iter().sum::<u64>(),
        EVENTS as u64
    );

    println!(
        "{fsync:?}: append {append_rate:.0}/s, read {read_rate:.0}/s, poll {poll_rate:.0}/s, \
         reopen {reopen:?}"
    );
    assert!(append_rate >= TARGET_PER_SEC, "append {append_rate:.0}/s");
    assert!(read_rate >= TARGET_PER_SEC, "read {read_rate:.0}/s");
    assert!(poll_rate >= TARGET_PER_SEC, "poll {poll_rate:.0}/s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing-dependent; run with --release -- --ignored"]
async fn throughput_never() {
    run(FsyncPolicy::Never).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing-dependent; run with --release -- --ignored"]
async fn throughput_interval() {
    run(FsyncPolicy::Interval(Duration::from_millis(100))).await;
}
