//! `strata seal --migrate`: a deployment that wrote its log in the clear made forgettable. Every
//! plain event on the embedded file log is sealed with its session's data key, and every plain
//! artifact with a key of its own, in place; the log one segment at a time ([`strata_log::file::rewrite`]): offsets stay, so consumer groups and the
//! positions projections recorded stay valid, and a crash leaves each segment either as it was
//! or sealed (both readable), so running it again finishes the work.

use std::collections::BTreeSet;

use strata_codec::Record;
use strata_log::file::rewrite::{recover, segment_files, SegmentFile};
use strata_log::LogRecord;

use crate::sealing::record_codec;
use crate::{set_sealing, BackendOpts, DataDirLock, Error};

/// The log header that names the schema a record was written with (`strata_ingest::headers`).
const SCHEMA_HEADER: &str = "schema_fingerprint";

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Segments read, and of them rewritten.
    pub segments: usize,
    pub rewritten: usize,
    /// Events sealed now, and events found sealed already.
    pub sealed: u64,
    pub already_sealed: u64,
    /// Records that are no event (a quarantined stand-in, a dead letter that never decoded):
    /// left as they are.
    pub not_events: u64,
    /// Sessions with an event sealed now.
    pub sessions: usize,
    /// Artifacts sealed now, of those stored.
    pub artifacts_sealed: usize,
    pub artifacts: usize,
}

/// One segment done: its position among all, and the report so far.
#[derive(Debug)]
pub struct Progress<'a> {
    pub done: usize,
    pub of: usize,
    pub segment: &'a SegmentFile,
    pub so_far: &'a MigrateReport,
}

/// Seals every plain event of the deployment's file log, records sealing on, and reports.
/// Holds the data directory's lock throughout: no service may run on it meanwhile.
pub async fn migrate(
    opts: &BackendOpts,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<MigrateReport, Error> {
    let log_url = opts.log_url();
    let Some(dir) = log_url.strip_prefix("file://") else {
        return Err(Error::Sealing(format!(
            "`strata seal --migrate` seals a file:// log in place, and this deployment's log is \
             {}: a Kafka topic's records cannot be rewritten, and this build has no migration \
             into a new topic; its sessions written in the clear stay unforgettable",
            strata_store::redact(&log_url)
        )));
    };
    std::fs::create_dir_all(&opts.data_dir).map_err(|source| Error::Io {
        path: opts.data_dir.clone(),
        source,
    })?;
    let _lock = DataDirLock::acquire(&opts.data_dir, "strata seal --migrate")?;
    // A torn tail left by a crash is cut first: a rewrite reads every segment whole.
    recover(std::path::Path::new(dir), opts.log_options()).await?;
    set_sealing(opts, true).await?;
    let codec = record_codec(opts, None, &mut None)
        .await?
        .expect("an open that does not retry is never stopped");
    if !codec.seals() {
        return Err(Error::Sealing(
            "sealing is recorded on but no key ring could be opened".into(),
        ));
    }
    let segments = segment_files(std::path::Path::new(dir))?;
    let mut report = MigrateReport {
        segments: segments.len(),
        ..MigrateReport::default()
    };
    let mut sessions = BTreeSet::new();
    for (i, segment) in segments.iter().enumerate() {
        let mut records = segment.records()?;
        let mut changed = false;
        for record in &mut records {
            if seal_record(&codec, record, &mut report, &mut sessions).await? {
                changed = true;
            }
        }
        if changed {
            segment.replace(&records)?;
            report.rewritten += 1;
        }
        report.sessions = sessions.len();
        progress(Progress {
            done: i + 1,
            of: segments.len(),
            segment,
            so_far: &report,
        });
    }
    // The artifacts stored in the clear, sealed in place the same way.
    let blobs = crate::blobs_with_keys(strata_blob::BlobStore::open(&opts.blob_url())?, &codec);
    let artifacts = blobs.artifacts().await?;
    report.artifacts = artifacts.len();
    for (tenant, sha256) in &artifacts {
        if blobs.seal_stored(tenant, sha256).await? {
            report.artifacts_sealed += 1;
        }
    }
    Ok(report)
}

/// Seals `record` when it holds a plain event; returns whether it changed.
async fn seal_record(
    codec: &strata_keys::RecordCodec,
    record: &mut LogRecord,
    report: &mut MigrateReport,
    sessions: &mut BTreeSet<(String, String)>,
) -> Result<bool, Error> {
    let event = match codec.avro().decode_record(&record.value) {
        Ok(Record::Plain(event)) => event,
        Ok(Record::Sealed(_)) => {
            report.already_sealed += 1;
            return Ok(false);
        }
        Err(_) => {
            report.not_events += 1;
            return Ok(false);
        }
    };
    let key = codec
        .sealing_key(&event.tenant_id, &event.session_id)
        .await?;
    record.value = codec.encode_with(&event, key.as_deref())?;
    for (name, value) in &mut record.headers {
        if name == SCHEMA_HEADER {
            *value = codec.avro().fingerprint_hex().into_bytes();
        }
    }
    report.sealed += 1;
    sessions.insert((event.tenant_id, event.session_id));
    Ok(true)
}
