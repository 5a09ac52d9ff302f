//! Rewriting the records of a closed file log in place, one segment at a time (`strata seal
//! --migrate` seals the events an unsealed deployment wrote in the clear).
//!
//! A segment is written beside itself and renamed over it, so a crash leaves each segment as
//! it was or rewritten, never half of each; offsets, keys and timestamps stay as they were, so
//! consumer groups' committed offsets and the positions projections recorded stay valid. No
//! [`FileLog`](super::FileLog) may have the directory open meanwhile (its index is by byte
//! position): the caller holds the data directory's lock.

use std::fs;
use std::path::{Path, PathBuf};

use super::FileLog;
use super::{
    body_len, decode, encode, frame_header, io_error, parse_segment_name, sync_dir,
    DEAD_LETTER_DIR, FRAME_HEADER,
};
use crate::{Error, FileLogOptions, LogRecord, NewRecord, Result};

/// One segment file of a file log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    pub partition: u32,
    /// Offset of its first record.
    pub base: u64,
    pub path: PathBuf,
}

/// Opens the file log at `dir` and its dead letters once and closes them: what a crash left
/// (a torn tail, damage) is repaired as at any open, so that every segment reads whole.
pub async fn recover(dir: &Path, options: FileLogOptions) -> Result<()> {
    drop(FileLog::open(dir, options.clone()).await?);
    let dead_letters = dir.join(DEAD_LETTER_DIR);
    if dead_letters.exists() {
        drop(FileLog::open(&dead_letters, options).await?);
    }
    Ok(())
}

/// Every segment of the file log at `dir`, its dead letters' included, by partition and offset.
pub fn segment_files(dir: &Path) -> Result<Vec<SegmentFile>> {
    let mut out = partition_segments(dir)?;
    let dead_letters = dir.join(DEAD_LETTER_DIR);
    if dead_letters.exists() {
        out.extend(partition_segments(&dead_letters)?);
    }
    Ok(out)
}

fn partition_segments(dir: &Path) -> Result<Vec<SegmentFile>> {
    let partitions = dir.join("partitions");
    let mut out = Vec::new();
    for entry in fs::read_dir(&partitions).map_err(|e| io_error(&partitions, e))? {
        let entry = entry.map_err(|e| io_error(&partitions, e))?;
        let Some(partition) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        for file in fs::read_dir(&path).map_err(|e| io_error(&path, e))? {
            let file = file.map_err(|e| io_error(&path, e))?;
            if let Some(base) = file.file_name().to_str().and_then(parse_segment_name) {
                out.push(SegmentFile {
                    partition,
                    base,
                    path: file.path(),
                });
            }
        }
    }
    out.sort_by_key(|s| (s.partition, s.base));
    Ok(out)
}

impl SegmentFile {
    /// Its records in order. Any record that fails its length or CRC check is
    /// [`Error::Corrupt`]: open the log once first, which cuts a torn tail.
    pub fn records(&self) -> Result<Vec<LogRecord>> {
        let bytes = fs::read(&self.path).map_err(|e| io_error(&self.path, e))?;
        let mut records = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let corrupt = |reason: &str| Error::Corrupt {
                path: self.path.display().to_string(),
                position: pos as u64,
                reason: reason.to_owned(),
            };
            let header = bytes
                .get(pos..pos + FRAME_HEADER)
                .ok_or_else(|| corrupt("a frame header cut short"))?;
            let (len, crc) = frame_header(header);
            let body_start = pos + FRAME_HEADER;
            let body = bytes
                .get(body_start..body_start + len)
                .ok_or_else(|| corrupt("a body cut short"))?;
            if crc32c::crc32c(body) != crc {
                return Err(corrupt("CRC mismatch"));
            }
            let record = decode(self.partition, body).ok_or_else(|| corrupt("a malformed body"))?;
            let expected = self.base + records.len() as u64;
            if record.offset != expected {
                return Err(corrupt(&format!(
                    "offset {} where {expected} was expected",
                    record.offset
                )));
            }
            records.push(record);
            pos = body_start + len;
        }
        Ok(records)
    }

    /// Replaces the segment with `records`, which must hold its offsets in order: written
    /// beside it, made durable, renamed over it.
    pub fn replace(&self, records: &[LogRecord]) -> Result<()> {
        let mut buf = Vec::new();
        for (i, record) in records.iter().enumerate() {
            let expected = self.base + i as u64;
            if record.offset != expected || record.partition != self.partition {
                return Err(Error::InvalidInput(format!(
                    "a rewrite of {} must keep its offsets: record {i} is p{} o{}, not p{} o{}",
                    self.path.display(),
                    record.partition,
                    record.offset,
                    self.partition,
                    expected
                )));
            }
            let new = NewRecord {
                key: record.key.clone(),
                headers: record.headers.clone(),
                value: record.value.clone(),
                timestamp_ms: record.timestamp_ms,
            };
            let len = body_len(&new)?;
            encode(&mut buf, record.offset, &new, len);
        }
        let mut tmp_name = self.path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(".rewrite");
        let tmp = self.path.with_file_name(tmp_name);
        let write = || -> std::io::Result<()> {
            let mut file = fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, &buf)?;
            file.sync_all()
        };
        write().map_err(|e| io_error(&tmp, e))?;
        fs::rename(&tmp, &self.path).map_err(|e| io_error(&self.path, e))?;
        match self.path.parent() {
            Some(parent) => sync_dir(parent),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventLog;

    fn record(i: u8) -> NewRecord {
        NewRecord {
            key: format!("s{}", i % 3).into_bytes(),
            headers: vec![("h".into(), vec![i])],
            value: vec![i; 40 + usize::from(i)],
            timestamp_ms: 1_000 + i64::from(i),
        }
    }

    #[tokio::test]
    async fn a_rewritten_segment_keeps_offsets_keys_and_order_and_the_log_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let options = FileLogOptions {
            partitions: 2,
            segment_bytes: 256,
            ..FileLogOptions::default()
        };
        let log = FileLog::open(dir.path(), options.clone()).await.unwrap();
        log.append((0..20).map(record).collect()).await.unwrap();
        let ends = log.end_offsets().await.unwrap();
        drop(log);

        let segments = segment_files(dir.path()).unwrap();
        assert!(segments.len() > 2, "small segments roll: {segments:?}");
        for segment in &segments {
            let mut records = segment.records().unwrap();
            for r in &mut records {
                r.value = format!("sealed {}", r.value[0]).into_bytes();
            }
            segment.replace(&records).unwrap();
        }

        let log = FileLog::open(dir.path(), options).await.unwrap();
        assert_eq!(log.end_offsets().await.unwrap(), ends);
        let mut seen = 0;
        for partition in 0..2 {
            let records = log.read(partition, 0, 100).await.unwrap();
            for (offset, r) in records.iter().enumerate() {
                assert_eq!(r.offset, offset as u64);
                let i = r.headers[0].1[0];
                assert_eq!(r.value, format!("sealed {i}").into_bytes());
                assert_eq!(r.key, record(i).key);
                assert_eq!(r.timestamp_ms, record(i).timestamp_ms);
            }
            seen += records.len();
        }
        assert_eq!(seen, 20);
    }

    #[tokio::test]
    async fn a_rewrite_that_moves_an_offset_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let log = FileLog::open(dir.path(), FileLogOptions::default())
            .await
            .unwrap();
        log.append((0..3).map(|_| record(0)).collect())
            .await
            .unwrap();
        drop(log);
        let segment = segment_files(dir.path())
            .unwrap()
            .into_iter()
            .find(|s| fs::metadata(&s.path).unwrap().len() > 0)
            .unwrap();
        let before = fs::read(&segment.path).unwrap();
        let mut records = segment.records().unwrap();
        records.remove(1);
        let err = segment.replace(&records).unwrap_err().to_string();
        assert!(err.contains("must keep its offsets"), "{err}");
        assert_eq!(fs::read(&segment.path).unwrap(), before);
    }
}
