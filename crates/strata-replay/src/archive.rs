//! The log archive: the log copied into Avro object container files in blob
//! storage, one file per partition and offset range, listed by a manifest, so that replay and
//! rebuild can read records the log no longer keeps.
//!
//! Layout in the blob store: `archive/p{partition}/{from:020}-{to:020}.avro` (records `from..to`)
//! and `archive/manifest.json`. Each file holds the records exactly as they were on the log:
//! partition, offset, timestamp, key, headers and value bytes. The archiver advances its own
//! consumer group ([`ARCHIVER_GROUP`]) after a file and the manifest are written; the manifest is
//! what says where the archive ends, so a crash between the two only rewrites the same file.

use std::collections::BTreeMap;

use apache_avro::types::Value as Avro;
use apache_avro::{Reader, Schema, Writer};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_blob::BlobStore;
use strata_log::{EventLog, LogRecord};

use crate::{Error, Result};

/// The archiver's consumer group.
pub const ARCHIVER_GROUP: &str = "strata-archiver";
/// Where the manifest lives in the blob store.
pub const MANIFEST_PATH: &str = "archive/manifest.json";
const FORMAT: &str = "strata.archive/1";

const SCHEMA: &str = r#"{
  "type": "record", "name": "LogRecord", "namespace": "dev.strata.archive",
  "fields": [
    {"name": "partition", "type": "int"},
    {"name": "offset", "type": "long"},
    {"name": "timestamp_ms", "type": "long"},
    {"name": "key", "type": "bytes"},
    {"name": "headers", "type": {"type": "array", "items": {
      "type": "record", "name": "Header",
      "fields": [{"name": "name", "type": "string"}, {"name": "value", "type": "bytes"}]}}},
    {"name": "value", "type": "bytes"}
  ]
}"#;

/// One archived file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub partition: u32,
    /// First offset in the file.
    pub from: u64,
    /// One past the last offset in the file.
    pub to: u64,
    /// Records in the file (offsets may have gaps on a compacted log).
    pub records: u64,
    /// Its path in the blob store.
    pub path: String,
    /// SHA-256 of the file.
    pub sha256: String,
}

/// The archive's table of contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub segments: Vec<Segment>,
}

impl Default for Manifest {
    fn default() -> Self {
        Self {
            format: FORMAT.into(),
            segments: Vec::new(),
        }
    }
}

impl Manifest {
    /// One past the last archived offset, per partition.
    pub fn ends(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for s in &self.segments {
            let e = out.entry(s.partition).or_insert(0);
            *e = (*e).max(s.to);
        }
        out
    }
}

fn schema() -> Schema {
    Schema::parse_str(SCHEMA).expect("the archive schema parses")
}

fn avro_err(e: apache_avro::Error) -> Error {
    Error::Invalid(format!("avro: {e}"))
}

/// Reads the manifest (empty when there is no archive yet).
pub async fn manifest(blobs: &BlobStore) -> Result<Manifest> {
    match blobs.get_object(MANIFEST_PATH).await.map_err(blob_err)? {
        None => Ok(Manifest::default()),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Invalid(format!("corrupt {MANIFEST_PATH}: {e}"))),
    }
}

fn blob_err(e: strata_blob::Error) -> Error {
    Error::Invalid(format!("blob store: {e}"))
}

/// Encodes records of one partition as an Avro object container file.
pub fn encode(records: &[LogRecord]) -> Result<Vec<u8>> {
    let schema = schema();
    let mut writer = Writer::new(&schema, Vec::new());
    for r in records {
        let headers = r
            .headers
            .iter()
            .map(|(n, v)| {
                Avro::Record(vec![
                    ("name".into(), Avro::String(n.clone())),
                    ("value".into(), Avro::Bytes(v.clone())),
                ])
            })
            .collect();
        writer
            .append(Avro::Record(vec![
                ("partition".into(), Avro::Int(r.partition as i32)),
                ("offset".into(), Avro::Long(r.offset as i64)),
                ("timestamp_ms".into(), Avro::Long(r.timestamp_ms)),
                ("key".into(), Avro::Bytes(r.key.clone())),
                ("headers".into(), Avro::Array(headers)),
                ("value".into(), Avro::Bytes(r.value.clone())),
            ]))
            .map_err(avro_err)?;
    }
    writer.into_inner().map_err(avro_err)
}

/// Decodes a file written by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Vec<LogRecord>> {
    let reader = Reader::new(bytes).map_err(avro_err)?;
    let bad = |what: &str| Error::Invalid(format!("archive record: bad {what}"));
    let mut out = Vec::new();
    for value in reader {
        let Avro::Record(fields) = value.map_err(avro_err)? else {
            return Err(bad("record"));
        };
        let mut r = LogRecord {
            partition: 0,
            offset: 0,
            timestamp_ms: 0,
            key: Vec::new(),
            headers: Vec::new(),
            value: Vec::new(),
        };
        for (name, v) in fields {
            match (name.as_str(), v) {
                ("partition", Avro::Int(p)) => r.partition = p as u32,
                ("offset", Avro::Long(o)) => r.offset = o as u64,
                ("timestamp_ms", Avro::Long(t)) => r.timestamp_ms = t,
                ("key", Avro::Bytes(k)) => r.key = k,
                ("value", Avro::Bytes(v)) => r.value = v,
                ("headers", Avro::Array(hs)) => {
                    for h in hs {
                        let Avro::Record(hf) = h else {
                            return Err(bad("header"));
                        };
                        let mut name = String::new();
                        let mut value = Vec::new();
                        for (k, v) in hf {
                            match (k.as_str(), v) {
                                ("name", Avro::String(s)) => name = s,
                                ("value", Avro::Bytes(b)) => value = b,
                                _ => return Err(bad("header field")),
                            }
                        }
                        r.headers.push((name, value));
                    }
                }
                (other, _) => return Err(bad(other)),
            }
        }
        out.push(r);
    }
    Ok(out)
}

/// What one archiver pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ArchiveReport {
    /// Files written.
    pub files: u64,
    /// Records archived.
    pub records: u64,
    /// One past the last archived offset, per partition, after the pass.
    pub ends: BTreeMap<u32, u64>,
}

/// Copies every record not yet archived, up to the log's end as of the call, in files of at most
/// `max_records` records; then advances the archiver group.
pub async fn archive(
    log: &dyn EventLog,
    blobs: &BlobStore,
    max_records: usize,
) -> Result<ArchiveReport> {
    let max_records = max_records.max(1);
    let mut manifest = manifest(blobs).await?;
    let ends = manifest.ends();
    let head = log.end_offsets().await?;
    let mut report = ArchiveReport::default();
    for (p, end) in head.iter().enumerate() {
        let p = p as u32;
        let mut from = ends.get(&p).copied().unwrap_or(0);
        while from < *end {
            let want = ((*end - from) as usize).min(max_records);
            let records = log.read(p, from, want).await?;
            let Some(last) = records.last() else {
                return Err(Error::Invalid(format!(
                    "log partition {p} returned no record at offset {from} below its end {end}"
                )));
            };
            let to = last.offset + 1;
            let bytes = encode(&records)?;
            let path = format!("archive/p{p}/{from:020}-{to:020}.avro");
            let sha256 = strata_core::sha256_hex(&bytes);
            blobs
                .put_object(&path, Bytes::from(bytes))
                .await
                .map_err(blob_err)?;
            manifest.segments.push(Segment {
                partition: p,
                from,
                to,
                records: records.len() as u64,
                path,
                sha256,
            });
            let json = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
            blobs
                .put_object(MANIFEST_PATH, Bytes::from(json))
                .await
                .map_err(blob_err)?;
            report.files += 1;
            report.records += records.len() as u64;
            from = to;
        }
    }
    report.ends = manifest.ends();
    // The group's offsets say how far the archive is, for lag monitoring.
    if !report.ends.is_empty() {
        let mut consumer = log.subscribe(ARCHIVER_GROUP).await?;
        consumer.commit(&report.ends).await?;
        consumer.close().await?;
    }
    Ok(report)
}

/// Every archived record, partition by partition in offset order, each file checked against its
/// hash.
pub async fn read_all(blobs: &BlobStore) -> Result<Vec<LogRecord>> {
    let manifest = manifest(blobs).await?;
    let mut segments = manifest.segments.clone();
    segments.sort_by_key(|s| (s.partition, s.from));
    let mut out = Vec::new();
    for s in &segments {
        out.extend(read_segment(blobs, s).await?);
    }
    Ok(out)
}

/// The records of one archived file, checked against its hash.
pub async fn read_segment(blobs: &BlobStore, segment: &Segment) -> Result<Vec<LogRecord>> {
    let bytes = blobs
        .get_object(&segment.path)
        .await
        .map_err(blob_err)?
        .ok_or_else(|| Error::Invalid(format!("archive file {} is missing", segment.path)))?;
    if strata_core::sha256_hex(&bytes) != segment.sha256 {
        return Err(Error::Invalid(format!(
            "archive file {} does not match its hash",
            segment.path
        )));
    }
    decode(&bytes)
}

/// Reads what the log no longer keeps from the archive, one file at a time (the last one read
/// is kept decoded: readers go through a file chunk by chunk).
pub(crate) struct ArchiveReader {
    blobs: BlobStore,
    manifest: Option<Manifest>,
    file: Option<(Segment, Vec<LogRecord>)>,
    /// Records handed out so far.
    pub(crate) records: u64,
}

impl std::fmt::Debug for ArchiveReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveReader")
            .field("records", &self.records)
            .finish_non_exhaustive()
    }
}

impl ArchiveReader {
    pub(crate) fn new(blobs: BlobStore) -> Self {
        Self {
            blobs,
            manifest: None,
            file: None,
            records: 0,
        }
    }

    /// Up to `max` archived records of `partition` from offset `from` (below `end`); empty when
    /// no archived file holds `from`.
    pub(crate) async fn read(
        &mut self,
        partition: u32,
        from: u64,
        end: u64,
        max: usize,
    ) -> Result<Vec<LogRecord>> {
        let holds = |s: &Segment| s.partition == partition && s.from <= from && from < s.to;
        if !self.file.as_ref().is_some_and(|(s, _)| holds(s)) {
            if self.manifest.is_none() {
                self.manifest = Some(manifest(&self.blobs).await?);
            }
            let Some(segment) = self
                .manifest
                .as_ref()
                .and_then(|m| m.segments.iter().find(|s| holds(s)))
                .cloned()
            else {
                return Ok(Vec::new());
            };
            let records = read_segment(&self.blobs, &segment).await?;
            self.file = Some((segment, records));
        }
        let (_, records) = self.file.as_ref().expect("loaded above");
        let out: Vec<LogRecord> = records
            .iter()
            .filter(|r| r.offset >= from && r.offset < end)
            .take(max)
            .cloned()
            .collect();
        self.records += out.len() as u64;
        Ok(out)
    }
}
