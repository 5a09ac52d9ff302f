//! Shared helpers: an embedded data directory with a log of synthetic sessions, projected by the
//! live projector.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_runtime::{BackendOpts, Backends};

pub const TENANT: &str = "acme";

/// An unsealed data directory: these tests read the log with the options' plain codec (a sealed
/// log's rebuild, replay and archive are the CLI's `sealed_log` test).
pub fn opts(dir: &Path) -> BackendOpts {
    BackendOpts {
        fsync: strata_log::FsyncPolicy::Never,
        partitions: 4,
        seal: Some(strata_runtime::SealMode::Off),
        ..BackendOpts::embedded(dir)
    }
}

/// Ingests `sessions` × `per` events into the data directory and projects them (live set).
pub async fn populate(dir: &Path, sessions: usize, per: u64) -> Backends {
    let backends = Backends::open(&opts(dir), "test").await.unwrap();
    ingest(
        &backends,
        strata_replay::workload::sessions(TENANT, sessions, per),
    )
    .await;
    strata_projector::catch_up(&backends).await.unwrap();
    backends
}

pub async fn ingest(backends: &Backends, events: Vec<strata_core::Event>) {
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    for chunk in events.chunks(500) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await
            .unwrap();
    }
}

/// Every file under `dir` (recursively) with its bytes, except the lock file.
pub fn snapshot_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n != "LOCK") {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}
