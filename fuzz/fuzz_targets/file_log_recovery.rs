//! Any bytes in a file-log segment are recovered from without a panic: the log opens (or says
//! why not), every record it then serves can be read, and opening it again finds the same log.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use strata_log::file::FileLog;
use strata_log::{EventLog, FileLogOptions, FsyncPolicy};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
});

fn options() -> FileLogOptions {
    FileLogOptions {
        partitions: 1,
        fsync: FsyncPolicy::Never,
        ..Default::default()
    }
}

async fn end_and_records(log: &FileLog) -> (u64, usize) {
    let end = log.end_offsets().await.expect("end offsets")[0];
    let records = log.read(0, 0, 10_000).await.expect("records read");
    (end, records.len())
}

fuzz_target!(|data: &[u8]| {
    RUNTIME.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(
            FileLog::open(dir.path(), options())
                .await
                .expect("a new log"),
        );
        let segment = dir.path().join("partitions/0000/00000000000000000000.log");
        std::fs::write(&segment, data).expect("segment written");
        let Ok(log) = FileLog::open(dir.path(), options()).await else {
            return;
        };
        let first = end_and_records(&log).await;
        drop(log);
        let log = FileLog::open(dir.path(), options())
            .await
            .expect("a recovered log opens again");
        assert_eq!(end_and_records(&log).await, first, "recovery is idempotent");
    });
});
