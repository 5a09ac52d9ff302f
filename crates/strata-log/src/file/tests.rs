use std::collections::BTreeMap;
use std::time::Instant;

use super::*;

fn options(partitions: u32, fsync: FsyncPolicy) -> FileLogOptions {
    FileLogOptions {
        partitions,
        fsync,
        segment_bytes: 64 << 20,
    }
}

fn record(key: &str, seq: u64) -> NewRecord {
    NewRecord {
        key: key.as_bytes().to_vec(),
        headers: vec![
            ("type".to_owned(), b"note".to_vec()),
            ("seq".to_owned(), seq.to_string().into_bytes()),
        ],
        value: format!("value-{seq}-{}", "x".repeat((seq % 50) as usize)).into_bytes(),
        timestamp_ms: 1_700_000_000_000 + seq as i64,
    }
}

fn seq_of(record: &LogRecord) -> u64 {
    let seq = record.header("seq").expect("seq header");
    std::str::from_utf8(seq).unwrap().parse().unwrap()
}

/// The record as it should read back from `position`.
fn expected(record: &NewRecord, position: Position) -> LogRecord {
    LogRecord {
        partition: position.partition,
        offset: position.offset,
        timestamp_ms: record.timestamp_ms,
        key: record.key.clone(),
        headers: record.headers.clone(),
        value: record.value.clone(),
    }
}

/// A key that lands on `partition` of `count`.
fn key_for(partition: u32, count: u32) -> String {
    (0..)
        .map(|i| format!("key-{i}"))
        .find(|k| partition_for(k.as_bytes(), count) == partition)
        .unwrap()
}

async fn read_all(log: &FileLog, partition: u32) -> Vec<LogRecord> {
    let mut out = Vec::new();
    loop {
        let batch = log.read(partition, out.len() as u64, 37).await.unwrap();
        if batch.is_empty() {
            return out;
        }
        out.extend(batch);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn segment_files(dir: &Path, partition: u32) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        fs::read_dir(dir.join("partitions").join(format!("{partition:04}")))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
    files.sort();
    files
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).unwrap().len()
}

fn truncate(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn flip_byte(path: &Path, at: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at as usize] ^= 0xff;
    fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn append_and_read_round_trip_across_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(tmp.path(), options(4, FsyncPolicy::Always))
        .await
        .unwrap();
    assert_eq!(log.partition_count(), 4);
    assert_eq!(log.end_offsets().await.unwrap(), vec![0; 4]);

    let keys: Vec<String> = (0..10).map(|i| format!("session-{i}")).collect();
    let mut written: Vec<(NewRecord, Position)> = Vec::new();
    let mut seq = 0;
    for batch_size in [1, 50, 7, 120, 3, 119] {
        let batch: Vec<NewRecord> = (0..batch_size)
            .map(|_| {
                seq += 1;
                record(&keys[(seq * 7 % 10) as usize], seq)
            })
            .collect();
        let positions = log.append(batch.clone()).await.unwrap();
        assert_eq!(positions.len(), batch.len());
        written.extend(batch.into_iter().zip(positions));
    }

    // Every record went to the Kafka partition of its key, with dense offsets in input order.
    let mut next = [0u64; 4];
    for (record, position) in &written {
        assert_eq!(position.partition, partition_for(&record.key, 4));
        assert_eq!(position.offset, next[position.partition as usize]);
        next[position.partition as usize] += 1;
    }
    assert_eq!(log.end_offsets().await.unwrap(), next.to_vec());
    assert!(next.iter().all(|&n| n > 0), "all partitions used: {next:?}");

    for partition in 0..4 {
        let read = read_all(&log, partition).await;
        let want: Vec<LogRecord> = written
            .iter()
            .filter(|(_, p)| p.partition == partition)
            .map(|(r, p)| expected(r, *p))
            .collect();
        assert_eq!(read, want);
    }
    // Order is kept per key.
    for key in &keys {
        let partition = partition_for(key.as_bytes(), 4);
        let seqs: Vec<u64> = read_all(&log, partition)
            .await
            .iter()
            .filter(|r| r.key == key.as_bytes())
            .map(seq_of)
            .collect();
        assert!(!seqs.is_empty());
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{key}: {seqs:?}");
    }

    // Reads from the middle, past the end, and of a missing partition.
    let middle = log.read(0, 3, 2).await.unwrap();
    assert_eq!(
        middle.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert!(log.read(0, next[0], 10).await.unwrap().is_empty());
    assert!(log.read(0, 0, 0).await.unwrap().is_empty());
    assert!(matches!(
        log.read(4, 0, 10).await,
        Err(Error::NoSuchPartition {
            partition: 4,
            count: 4
        })
    ));
    assert!(log.append(Vec::new()).await.unwrap().is_empty());
    log.ping().await.unwrap();
}

#[tokio::test]
async fn reopen_after_drop_restores_records_and_end_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let mut written = Vec::new();
    let ends = {
        let log = FileLog::open(tmp.path(), options(3, FsyncPolicy::Never))
            .await
            .unwrap();
        for chunk in (0..200).collect::<Vec<u64>>().chunks(40) {
            let batch: Vec<NewRecord> = chunk
                .iter()
                .map(|&i| record(&format!("k{}", i % 13), i))
                .collect();
            let positions = log.append(batch.clone()).await.unwrap();
            written.extend(batch.into_iter().zip(positions));
        }
        log.end_offsets().await.unwrap()
    };
    assert_eq!(ends.iter().sum::<u64>(), 200);

    // The partition count of an existing log wins over the options.
    let log = FileLog::open(tmp.path(), options(5, FsyncPolicy::Always))
        .await
        .unwrap();
    assert_eq!(log.partition_count(), 3);
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.end_offsets().await.unwrap(), ends);
    for partition in 0..3 {
        let want: Vec<LogRecord> = written
            .iter()
            .filter(|(_, p)| p.partition == partition)
            .map(|(r, p)| expected(r, *p))
            .collect();
        assert_eq!(read_all(&log, partition).await, want);
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&fs::read(tmp.path().join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta, serde_json::json!({"format": 1, "partitions": 3}));

    // Appends continue at the end offsets.
    let new = record("k1", 1000);
    let partition = partition_for(&new.key, 3);
    let positions = log.append(vec![new]).await.unwrap();
    assert_eq!(
        positions,
        vec![Position {
            partition,
            offset: ends[partition as usize]
        }]
    );
}

/// Writes `n` records to a one-partition log in `dir`; returns them and the byte range of the
/// last record in the segment.
async fn write_for_crash(dir: &Path, n: u64) -> (Vec<NewRecord>, u64, u64) {
    let log = FileLog::open(dir, options(1, FsyncPolicy::Always))
        .await
        .unwrap();
    let records: Vec<NewRecord> = (0..n).map(|i| record("session", i)).collect();
    for chunk in records[..n as usize - 1].chunks(6) {
        log.append(chunk.to_vec()).await.unwrap();
    }
    let segment = &segment_files(dir, 0)[0];
    let start = file_len(segment);
    let positions = log
        .append(vec![records[n as usize - 1].clone()])
        .await
        .unwrap();
    assert_eq!(
        positions,
        vec![Position {
            partition: 0,
            offset: n - 1
        }]
    );
    let end = file_len(segment);
    assert!(end - start > 40, "the last record is big enough to cut");
    (records, start, end)
}

/// Opens a damaged copy and checks that it recovered the first `n - 1` records, reporting a cut
/// of `truncated` bytes at `start`; then appends and reopens.
async fn check_recovered(dir: &Path, records: &[NewRecord], start: u64, truncated: u64) {
    let n = records.len() as u64;
    let segment = segment_files(dir, 0)[0].clone();
    let log = FileLog::open(dir, options(1, FsyncPolicy::Always))
        .await
        .unwrap();
    assert_eq!(log.end_offsets().await.unwrap(), vec![n - 1]);
    let want: Vec<LogRecord> = records[..n as usize - 1]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            expected(
                r,
                Position {
                    partition: 0,
                    offset: i as u64,
                },
            )
        })
        .collect();
    assert_eq!(read_all(&log, 0).await, want);
    if truncated == 0 {
        assert!(log.recovery_report().is_empty());
    } else {
        assert_eq!(
            log.recovery_report(),
            &[TornTail {
                partition: 0,
                segment: segment.clone(),
                valid_bytes: start,
                truncated_bytes: truncated,
            }]
        );
    }
    assert_eq!(file_len(&segment), start);

    let again = record("session", 999);
    let positions = log.append(vec![again.clone()]).await.unwrap();
    assert_eq!(
        positions,
        vec![Position {
            partition: 0,
            offset: n - 1
        }]
    );
    drop(log);

    let log = FileLog::open(dir, options(1, FsyncPolicy::Always))
        .await
        .unwrap();
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.end_offsets().await.unwrap(), vec![n]);
    let all = read_all(&log, 0).await;
    assert_eq!(all[..n as usize - 1], want[..]);
    assert_eq!(
        all[n as usize - 1],
        expected(
            &again,
            Position {
                partition: 0,
                offset: n - 1
            }
        )
    );
}

#[tokio::test]
async fn crash_at_every_byte_of_the_last_record_recovers_the_earlier_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("log");
    let n = 20;
    let (records, start, end) = write_for_crash(&original, n).await;

    for cut in start..end {
        let case = tempfile::tempdir().unwrap();
        let dir = case.path().join("log");
        copy_dir(&original, &dir);
        truncate(&segment_files(&dir, 0)[0], cut);
        check_recovered(&dir, &records, start, cut - start).await;
    }
}

#[tokio::test]
async fn corrupt_byte_in_the_last_record_is_cut_like_a_torn_write() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("log");
    let (records, start, end) = write_for_crash(&original, 12).await;

    // Every byte: the length, the crc, the offset and the rest of the body.
    for at in start..end {
        let case = tempfile::tempdir().unwrap();
        let dir = case.path().join("log");
        copy_dir(&original, &dir);
        flip_byte(&segment_files(&dir, 0)[0], at);
        check_recovered(&dir, &records, start, end - start).await;
    }
}

#[tokio::test]
async fn rollover_reads_across_segments_and_survives_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = FileLogOptions {
        partitions: 2,
        fsync: FsyncPolicy::Interval(Duration::from_millis(5)),
        segment_bytes: 1024,
    };
    let keys = [key_for(0, 2), key_for(1, 2)];
    let mut written: Vec<Vec<LogRecord>> = vec![Vec::new(), Vec::new()];
    {
        let log = FileLog::open(tmp.path(), opts.clone()).await.unwrap();
        for chunk in (0..300).collect::<Vec<u64>>().chunks(45) {
            let batch: Vec<NewRecord> = chunk
                .iter()
                .map(|&i| record(&keys[(i % 2) as usize], i))
                .collect();
            let positions = log.append(batch.clone()).await.unwrap();
            for (r, p) in batch.iter().zip(positions) {
                written[p.partition as usize].push(expected(r, p));
            }
        }
        for partition in 0..2u32 {
            let files = segment_files(tmp.path(), partition);
            assert!(files.len() > 5, "{} segments", files.len());
            for file in &files {
                assert!(file_len(file) <= 1024, "{} is too big", file.display());
            }
            let want = &written[partition as usize];
            assert_eq!(&read_all(&log, partition).await, want);
            // Every window, including ones that span segment boundaries.
            for from in 0..want.len() {
                let got = log.read(partition, from as u64, 13).await.unwrap();
                let upto = (from + 13).min(want.len());
                assert_eq!(got, want[from..upto], "from {from}");
            }
        }
    }

    // Segment names are the offset of their first record.
    for partition in 0..2u32 {
        let mut next = 0;
        for file in segment_files(tmp.path(), partition) {
            let name = file.file_name().unwrap().to_str().unwrap().to_owned();
            assert_eq!(name, segment_name(next));
            let log_bytes = fs::read(&file).unwrap();
            let mut pos = 0;
            while pos < log_bytes.len() {
                let (len, _) = frame_header(&log_bytes[pos..]);
                pos += FRAME_HEADER + len;
                next += 1;
            }
        }
        assert_eq!(next, written[partition as usize].len() as u64);
    }

    // A crash right after a roll leaves an empty last segment: that is fine.
    let ends: Vec<u64> = written.iter().map(|w| w.len() as u64).collect();
    let empty = tmp
        .path()
        .join("partitions/0001")
        .join(segment_name(ends[1]));
    File::create(&empty).unwrap();

    let log = FileLog::open(tmp.path(), opts).await.unwrap();
    assert!(log.recovery_report().is_empty());
    assert_eq!(log.end_offsets().await.unwrap(), ends);
    for partition in 0..2u32 {
        assert_eq!(read_all(&log, partition).await, written[partition as usize]);
    }
    let positions = log
        .append(vec![record(&keys[1], 5000), record(&keys[0], 5001)])
        .await
        .unwrap();
    assert_eq!(
        positions,
        vec![
            Position {
                partition: 1,
                offset: ends[1]
            },
            Position {
                partition: 0,
                offset: ends[0]
            }
        ]
    );
    assert!(
        file_len(&empty) > 0,
        "the append went to the empty last segment"
    );
    let tail = log.read(1, ends[1] - 1, 10).await.unwrap();
    assert_eq!(tail.len(), 2);
    assert_eq!(seq_of(&tail[1]), 5000);
}

#[tokio::test]
async fn sealed_segment_damage_is_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("log");
    let opts = FileLogOptions {
        partitions: 1,
        fsync: FsyncPolicy::Never,
        segment_bytes: 512,
    };
    {
        let log = FileLog::open(&original, opts.clone()).await.unwrap();
        let batch: Vec<NewRecord> = (0..40).map(|i| record("k", i)).collect();
        log.append(batch).await.unwrap();
    }
    let files = segment_files(&original, 0);
    assert!(files.len() >= 3);

    // A flipped value byte in a sealed segment: opening trusts it, reading it fails.
    {
        let case = tempfile::tempdir().unwrap();
        let dir = case.path().join("log");
        copy_dir(&original, &dir);
        let first = &segment_files(&dir, 0)[0];
        let (len, _) = frame_header(&fs::read(first).unwrap());
        flip_byte(first, (FRAME_HEADER + len - 1) as u64);
        let log = FileLog::open(&dir, opts.clone()).await.unwrap();
        assert!(log.recovery_report().is_empty());
        match log.read(0, 0, 10).await {
            Err(Error::Corrupt {
                position, reason, ..
            }) => {
                assert_eq!(position, 0);
                assert!(reason.contains("crc"), "{reason}");
            }
            other => panic!("expected corruption, got {other:?}"),
        }
        // Its neighbours still read.
        let next = log.read(0, 1, 3).await.unwrap();
        assert_eq!(next.iter().map(|r| r.offset).collect::<Vec<_>>(), [1, 2, 3]);
    }

    // A sealed segment that ends inside a record.
    {
        let case = tempfile::tempdir().unwrap();
        let dir = case.path().join("log");
        copy_dir(&original, &dir);
        let first = &segment_files(&dir, 0)[0];
        truncate(first, file_len(first) - 1);
        let err = FileLog::open(&dir, opts.clone()).await.unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }

    // A missing segment in the middle.
    {
        let case = tempfile::tempdir().unwrap();
        let dir = case.path().join("log");
        copy_dir(&original, &dir);
        fs::remove_file(&segment_files(&dir, 0)[1]).unwrap();
        let err = FileLog::open(&dir, opts.clone()).await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { reason, .. } if reason.contains("ends at offset")),
            "{err}"
        );
    }
}

#[tokio::test]
async fn consumer_group_commits_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(tmp.path(), options(2, FsyncPolicy::Always))
        .await
        .unwrap();
    let keys = [key_for(0, 2), key_for(1, 2)];
    let batch: Vec<NewRecord> = (0..20)
        .map(|i| record(&keys[(i % 2) as usize], i))
        .collect();
    log.append(batch).await.unwrap();

    assert!(log.committed("projector").await.unwrap().is_empty());
    let mut consumer = log.subscribe("projector").await.unwrap();
    assert!(consumer.assignment().is_empty());
    let first = consumer.poll(100, Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.assigned, vec![0, 1]);
    assert!(first.records.is_empty(), "assignment comes before records");
    assert_eq!(consumer.assignment(), vec![0, 1]);

    let polled = consumer.poll(100, Duration::from_secs(5)).await.unwrap();
    assert!(polled.assigned.is_empty());
    assert_eq!(polled.records.len(), 20);
    for partition in 0..2 {
        let offsets: Vec<u64> = polled
            .records
            .iter()
            .filter(|r| r.partition == partition)
            .map(|r| r.offset)
            .collect();
        assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    }

    consumer
        .commit(&BTreeMap::from([(0, 5), (1, 3)]))
        .await
        .unwrap();
    consumer.commit(&BTreeMap::from([(1, 7)])).await.unwrap();
    let want = BTreeMap::from([(0, 5), (1, 7)]);
    assert_eq!(log.committed("projector").await.unwrap(), want);
    assert!(log.committed("other").await.unwrap().is_empty());
    assert!(matches!(
        consumer.commit(&BTreeMap::from([(2, 1)])).await,
        Err(Error::NoSuchPartition { partition: 2, .. })
    ));
    consumer.close().await.unwrap();

    // A new member resumes from the committed offsets, also after a reopen.
    drop(log);
    let log = FileLog::open(tmp.path(), options(2, FsyncPolicy::Always))
        .await
        .unwrap();
    assert_eq!(log.committed("projector").await.unwrap(), want);
    let mut consumer = log.subscribe("projector").await.unwrap();
    assert_eq!(
        consumer
            .poll(100, Duration::from_secs(5))
            .await
            .unwrap()
            .assigned,
        vec![0, 1]
    );
    let polled = consumer.poll(100, Duration::from_secs(5)).await.unwrap();
    let firsts: BTreeMap<u32, u64> = polled
        .records
        .iter()
        .rev()
        .map(|r| (r.partition, r.offset))
        .collect();
    assert_eq!(firsts, want);
    assert_eq!(polled.records.len(), 5 + 3);
    assert!(tmp.path().join("groups/projector.json").is_file());
}

#[tokio::test]
async fn poll_wakes_up_on_a_concurrent_append() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(
        FileLog::open(tmp.path(), options(4, FsyncPolicy::Never))
            .await
            .unwrap(),
    );
    let mut consumer = log.subscribe("g").await.unwrap();
    consumer.poll(10, Duration::from_secs(1)).await.unwrap();

    // Nothing to read: waits for the whole timeout.
    let started = Instant::now();
    let polled = consumer.poll(10, Duration::from_millis(60)).await.unwrap();
    assert!(polled.records.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(60));

    let writer = Arc::clone(&log);
    let append = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        writer.append(vec![record("late", 1)]).await.unwrap()
    });
    let started = Instant::now();
    let polled = consumer.poll(10, Duration::from_secs(20)).await.unwrap();
    let waited = started.elapsed();
    let positions = append.await.unwrap();
    assert_eq!(polled.records.len(), 1);
    assert_eq!(polled.records[0].position(), positions[0]);
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[tokio::test]
async fn seek_moves_the_position() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(tmp.path(), options(2, FsyncPolicy::Never))
        .await
        .unwrap();
    let key = key_for(1, 2);
    log.append((0..10).map(|i| record(&key, i)).collect())
        .await
        .unwrap();
    let mut consumer = log.subscribe("g").await.unwrap();
    consumer.poll(10, Duration::ZERO).await.unwrap();

    consumer.seek(1, 7).unwrap();
    let polled = consumer.poll(10, Duration::from_secs(1)).await.unwrap();
    let offsets: Vec<u64> = polled.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [7, 8, 9]);

    consumer.seek(1, 2).unwrap();
    let polled = consumer.poll(2, Duration::from_secs(1)).await.unwrap();
    let offsets: Vec<u64> = polled.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [2, 3]);

    consumer.seek(1, 100).unwrap();
    let polled = consumer.poll(10, Duration::from_millis(10)).await.unwrap();
    assert!(polled.records.is_empty());
    assert!(matches!(
        consumer.seek(2, 0),
        Err(Error::NoSuchPartition { partition: 2, .. })
    ));
}

#[tokio::test]
async fn poll_shares_records_fairly_between_partitions() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(tmp.path(), options(4, FsyncPolicy::Never))
        .await
        .unwrap();
    let mut batch = Vec::new();
    for partition in 0..4 {
        let key = key_for(partition, 4);
        // Partition 3 has only two records.
        let count = if partition == 3 { 2 } else { 50 };
        batch.extend((0..count).map(|i| record(&key, i)));
    }
    log.append(batch).await.unwrap();
    let mut consumer = log.subscribe("fair").await.unwrap();
    consumer.poll(20, Duration::ZERO).await.unwrap();

    let polled = consumer.poll(20, Duration::ZERO).await.unwrap();
    assert_eq!(polled.records.len(), 20);
    let mut per_partition = [0; 4];
    for r in &polled.records {
        per_partition[r.partition as usize] += 1;
    }
    // Partition 3 gives its two, the others share the remaining 18.
    assert_eq!(per_partition, [6, 6, 6, 2]);
    for partition in 0..4 {
        let offsets: Vec<u64> = polled
            .records
            .iter()
            .filter(|r| r.partition == partition)
            .map(|r| r.offset)
            .collect();
        assert!(offsets.windows(2).all(|w| w[1] == w[0] + 1));
    }
    // Drains everything, each record once.
    let mut seen = polled.records.len();
    loop {
        let polled = consumer.poll(20, Duration::ZERO).await.unwrap();
        if polled.records.is_empty() {
            break;
        }
        seen += polled.records.len();
    }
    assert_eq!(seen, 152);
}

#[tokio::test]
async fn concurrent_appends_keep_offsets_dense_and_key_order() {
    let tmp = tempfile::tempdir().unwrap();
    let log = Arc::new(
        FileLog::open(
            tmp.path(),
            FileLogOptions {
                partitions: 3,
                fsync: FsyncPolicy::Always,
                segment_bytes: 16 << 10,
            },
        )
        .await
        .unwrap(),
    );
    let writers = (0..8u64).map(|w| {
        let log = Arc::clone(&log);
        tokio::spawn(async move {
            let mut positions = Vec::new();
            for b in 0..15u64 {
                let batch: Vec<NewRecord> = (0..20)
                    .map(|i| record(&format!("writer-{w}"), b * 20 + i))
                    .collect();
                positions.extend(log.append(batch).await.unwrap());
            }
            positions
        })
    });
    let mut all_positions = Vec::new();
    for writer in writers.collect::<Vec<_>>() {
        all_positions.extend(writer.await.unwrap());
    }
    assert_eq!(all_positions.len(), 8 * 300);
    all_positions.sort();
    all_positions.dedup();
    assert_eq!(all_positions.len(), 8 * 300, "no position handed out twice");

    let ends = log.end_offsets().await.unwrap();
    assert_eq!(ends.iter().sum::<u64>(), 8 * 300);
    for partition in 0..3 {
        let records = read_all(&log, partition).await;
        assert_eq!(records.len() as u64, ends[partition as usize]);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.offset, i as u64);
        }
        for w in 0..8 {
            let key = format!("writer-{w}");
            let seqs: Vec<u64> = records
                .iter()
                .filter(|r| r.key == key.as_bytes())
                .map(seq_of)
                .collect();
            assert!(seqs.windows(2).all(|s| s[0] < s[1]), "{key}");
        }
    }
}

#[tokio::test]
async fn interval_policy_flushes_in_the_background_and_stops_on_drop() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(
        tmp.path(),
        options(1, FsyncPolicy::Interval(Duration::from_millis(10))),
    )
    .await
    .unwrap();
    log.append(vec![record("k", 1)]).await.unwrap();
    assert_eq!(log.end_offsets().await.unwrap(), vec![1]);
    assert!(log.inner.partitions[0].lock().dirty);
    let deadline = Instant::now() + Duration::from_secs(5);
    while log.inner.partitions[0].lock().dirty {
        assert!(Instant::now() < deadline, "the flusher never ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let flusher = log.inner.flusher.get().cloned().expect("a flusher task");
    assert!(!flusher.is_finished());
    drop(log);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !flusher.is_finished() {
        assert!(Instant::now() < deadline, "the flusher outlived the log");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn invalid_input_is_rejected_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(tmp.path(), options(1, FsyncPolicy::Never))
        .await
        .unwrap();
    let mut bad = record("k", 2);
    bad.headers.push(("n".repeat(70_000), Vec::new()));
    let err = log.append(vec![record("k", 1), bad]).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    assert_eq!(log.end_offsets().await.unwrap(), vec![0]);
    assert_eq!(file_len(&segment_files(tmp.path(), 0)[0]), 0);

    for group in ["", "a/b", "../x", "with space", "é", &"g".repeat(129)] {
        assert!(
            matches!(log.committed(group).await, Err(Error::InvalidInput(_))),
            "{group:?}"
        );
        assert!(log.subscribe(group).await.is_err(), "{group:?}");
    }
    for group in ["a.b-c_D9", &"g".repeat(128)] {
        assert!(log.committed(group).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn options_and_meta_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let err = FileLog::open(tmp.path().join("a"), options(0, FsyncPolicy::Never))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");

    let dir = tmp.path().join("b");
    FileLog::open(&dir, options(2, FsyncPolicy::Never))
        .await
        .unwrap();
    fs::write(dir.join("meta.json"), r#"{"format":2,"partitions":2}"#).unwrap();
    let err = FileLog::open(&dir, options(2, FsyncPolicy::Never))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");

    // A partition directory the meta does not know about.
    fs::write(dir.join("meta.json"), r#"{"format":1,"partitions":1}"#).unwrap();
    let err = FileLog::open(&dir, options(2, FsyncPolicy::Never))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[test]
fn segment_names_round_trip() {
    assert_eq!(segment_name(0), "00000000000000000000.log");
    assert_eq!(segment_name(1234), "00000000000000001234.log");
    assert_eq!(parse_segment_name("00000000000000001234.log"), Some(1234));
    assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
    for bad in [
        "1234.log",
        "00000000000000001234.tmp",
        "0000000000000000123x.log",
    ] {
        assert_eq!(parse_segment_name(bad), None, "{bad}");
    }
}

#[test]
fn encoding_matches_the_documented_framing() {
    let record = NewRecord {
        key: b"k".to_vec(),
        headers: vec![("h".to_owned(), b"v".to_vec())],
        value: b"val".to_vec(),
        timestamp_ms: -2,
    };
    let len = body_len(&record).unwrap();
    let mut buf = Vec::new();
    encode(&mut buf, 7, &record, len);
    let mut body = Vec::new();
    body.extend_from_slice(&7u64.to_le_bytes());
    body.extend_from_slice(&(-2i64).to_le_bytes());
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(b"k");
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(b"h");
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(b"v");
    body.extend_from_slice(&3u32.to_le_bytes());
    body.extend_from_slice(b"val");
    let mut want = Vec::new();
    want.extend_from_slice(&(body.len() as u32).to_le_bytes());
    want.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    want.extend_from_slice(&body);
    assert_eq!(buf, want);
    assert_eq!(check_body(&body), Some(7));
    let decoded = decode(3, &body).unwrap();
    assert_eq!(
        decoded,
        expected(
            &record,
            Position {
                partition: 3,
                offset: 7
            }
        )
    );
    assert_eq!(check_body(&body[..body.len() - 1]), None);
}

#[tokio::test]
async fn dead_letters_are_kept_apart_and_survive_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let log = FileLog::open(tmp.path(), options(2, FsyncPolicy::Always))
        .await
        .unwrap();
    assert!(log.read_dead_letters(0, 10).await.unwrap().is_empty());
    let at = log.append(vec![record("s", 1)]).await.unwrap()[0];
    let bad = log
        .read(at.partition, at.offset, 1)
        .await
        .unwrap()
        .remove(0);
    let dl = log
        .dead_letter(&bad, "strata-projector", "undecodable event: bad magic")
        .await
        .unwrap();
    assert_eq!(dl.offset, 0);
    drop(log);
    let log = FileLog::open(tmp.path(), options(2, FsyncPolicy::Always))
        .await
        .unwrap();
    let letters = log.read_dead_letters(0, 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].value, bad.value);
    assert_eq!(
        letters[0].header(crate::dead_letter::REASON),
        Some(&b"undecodable event: bad magic"[..])
    );
    assert_eq!(letters[0].header("seq"), Some(&b"1"[..]));
    assert_eq!(
        log.end_offsets().await.unwrap().iter().sum::<u64>(),
        1,
        "dead letters are not records of the log"
    );
}

/// Start positions of the frames of a segment file.
fn frame_starts(path: &Path) -> Vec<u64> {
    let bytes = fs::read(path).unwrap();
    let mut starts = Vec::new();
    let mut pos = 0usize;
    while pos + FRAME_HEADER <= bytes.len() {
        starts.push(pos as u64);
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        pos += FRAME_HEADER + len;
    }
    starts
}

#[tokio::test]
async fn damage_inside_the_log_is_quarantined_and_the_records_after_it_are_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let original = tmp.path().join("log");
    let n = 12u64;
    let (records, _, _) = write_for_crash(&original, n).await;
    let starts = frame_starts(&segment_files(&original, 0)[0]);
    assert_eq!(starts.len() as u64, n);

    // One record's body, one record's length field, and two neighbours' bodies at once.
    let cases: Vec<(Vec<u64>, std::ops::Range<u64>)> = vec![
        (vec![starts[5] + 20], 5..6),
        (vec![starts[3]], 3..4),
        (vec![starts[7] + 12, starts[8] + 30], 7..9),
    ];
    for (flips, lost) in cases {
        let case = tempfile::tempdir().unwrap();
        let dir = case.path().join("log");
        copy_dir(&original, &dir);
        let segment = segment_files(&dir, 0)[0].clone();
        let damaged_len = file_len(&segment);
        for at in &flips {
            flip_byte(&segment, *at);
        }
        let log = FileLog::open(&dir, options(1, FsyncPolicy::Always))
            .await
            .unwrap();
        assert!(
            log.recovery_report().is_empty(),
            "{flips:?}: nothing is cut"
        );
        assert_eq!(file_len(&segment), damaged_len, "{flips:?}: nothing is cut");
        let report = log.quarantine_report();
        assert_eq!(report.len(), 1, "{flips:?}: {report:?}");
        assert_eq!(report[0].offsets, lost, "{flips:?}");
        // The damaged bytes are kept aside, as they were.
        let copy = fs::read(&report[0].copy).unwrap();
        assert_eq!(copy.len() as u64, report[0].bytes);
        assert_eq!(log.end_offsets().await.unwrap(), vec![n]);
        let read = read_all(&log, 0).await;
        assert_eq!(read.len() as u64, n);
        for (i, r) in read.iter().enumerate() {
            let i = i as u64;
            assert_eq!(r.offset, i);
            if lost.contains(&i) {
                assert!(
                    r.value.iter().all(|b| *b == 0) && r.headers.is_empty(),
                    "stand-in {i}"
                );
            } else {
                assert_eq!(r.value, records[i as usize].value, "record {i} is kept");
            }
        }
        // Appends go on after the kept records, and a reopen finds nothing more to do.
        log.append(vec![record("session", 99)]).await.unwrap();
        drop(log);
        let log = FileLog::open(&dir, options(1, FsyncPolicy::Always))
            .await
            .unwrap();
        assert!(log.quarantine_report().is_empty() && log.recovery_report().is_empty());
        assert_eq!(log.end_offsets().await.unwrap(), vec![n + 1]);
    }
}
