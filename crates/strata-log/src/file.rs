//! The embedded `file://` backend: a Kafka-shaped log in plain segment files.
//!
//! # Layout
//!
//! ```text
//! DIR/meta.json                        {"format":1,"partitions":N}
//! DIR/partitions/0000/00000000000000000000.log
//! DIR/partitions/0000/00000000000000001234.log   segments, named by their base offset
//! DIR/groups/<group>.json              committed offsets of a consumer group
//! ```
//!
//! The partition count is fixed when the log is created; reopening keeps it whatever the options
//! say. Offsets are dense per partition and start at 0.
//!
//! # Record framing
//!
//! Each record in a segment is `[u32 LE body_len][u32 LE crc32c(body)][body]`, where the body is
//! `u64 offset, i64 timestamp_ms, u32 key_len, key, u16 header_count,
//! (u16 name_len, name, u32 value_len, value)*, u32 value_len, value`, all little-endian.
//!
//! # Durability and recovery
//!
//! [`FsyncPolicy`] decides when appended bytes are forced to disk. On open, the last segment of
//! every partition is scanned completely (lengths, CRCs, consecutive offsets). A bad or
//! incomplete record with no valid record after it is the torn tail of a write interrupted by a
//! crash: the segment is cut there, reported by [`FileLog::recovery_report`]. Damage that valid
//! records follow is not a torn tail: its bytes are copied to `quarantine/` beside the segment and
//! it is rewritten as one empty stand-in record per offset it held, so that nothing after it is
//! lost ([`FileLog::quarantine_report`]; consumers set the stand-ins aside as undecodable). Earlier segments were sealed (and, unless the policy is
//! [`FsyncPolicy::Never`], fsynced) before the next one was created, so they are only walked by
//! their length fields to build the sparse index; a length that runs past the end of a sealed
//! segment is [`Error::Corrupt`], and so is a CRC failure found later by a read.
//!
//! # One process
//!
//! The embedded log serves one process: two processes (or two [`FileLog`]s in one process) must
//! never open the same directory, and a consumer group has a single member, which is assigned
//! every partition. Use the Kafka backend for anything distributed.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::{
    partition_for, Error, EventLog, FileLogOptions, FsyncPolicy, LogConsumer, LogRecord, NewRecord,
    Offsets, Polled, Position, Result,
};

/// Version of the on-disk format written to `meta.json`.
const FORMAT: u32 = 1;
/// `body_len` and `crc32c` in front of every body.
const FRAME_HEADER: usize = 8;
/// Body of a record with empty key, no headers and an empty value.
const MIN_BODY: usize = 8 + 8 + 4 + 2 + 4;
/// One sparse index entry per this many bytes of segment.
const INDEX_INTERVAL: u64 = 4096;
/// Read-ahead while scanning a segment at open.
const SCAN_CHUNK: usize = 1 << 20;
/// Largest encoding buffer kept between appends.
const MAX_KEPT_BUFFER: usize = 8 << 20;
/// Longest consumer group name.
const MAX_GROUP_LEN: usize = 128;

/// The torn tail cut from a partition's last segment when the log was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Partition of the segment.
    pub partition: u32,
    /// The segment file that was truncated.
    pub segment: PathBuf,
    /// Bytes of complete, valid records kept (the new length of the file).
    pub valid_bytes: u64,
    /// Bytes removed after them.
    pub truncated_bytes: u64,
}

/// The embedded, file-backed [`EventLog`] (`file://DIR`).
///
/// Appends take a per-partition lock and do their I/O on tokio's blocking pool; reads work on
/// shared file handles with positional reads, so they do not wait for the disk behind a lock.
/// See the [module docs](self) for the layout, durability and the one-process limit.
pub struct FileLog {
    inner: Arc<Inner>,
    recovery: Vec<TornTail>,
    quarantined: Vec<Quarantined>,
    /// The dead-letter queue, a one-partition file log in `DIR/dead-letter`, opened on first use.
    dead_letters: Arc<tokio::sync::OnceCell<Box<FileLog>>>,
    fsync: FsyncPolicy,
}

impl fmt::Debug for FileLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileLog")
            .field("dir", &self.inner.dir)
            .field("partitions", &self.inner.partitions.len())
            .field("fsync", &self.inner.fsync)
            .field("segment_bytes", &self.inner.segment_bytes)
            .finish()
    }
}

impl FileLog {
    /// Opens the log in `dir`, creating the directory and a new log (with `options.partitions`
    /// partitions) when there is none, and recovering torn tails otherwise.
    pub async fn open(dir: impl AsRef<Path>, options: FileLogOptions) -> Result<FileLog> {
        let dir = dir.as_ref().to_path_buf();
        let fsync = options.fsync;
        let (inner, recovery, quarantined) = blocking(move || open_blocking(dir, options)).await?;
        let inner = Arc::new(inner);
        if let FsyncPolicy::Interval(every) = fsync {
            let handle = tokio::spawn(flush_periodically(Arc::downgrade(&inner), every));
            // `flusher` is set exactly once, here.
            let _ = inner.flusher.set(handle.abort_handle());
        }
        tracing::debug!(
            dir = %inner.dir.display(),
            partitions = inner.partitions.len(),
            torn_tails = recovery.len(),
            "opened file log"
        );
        Ok(FileLog {
            inner,
            recovery,
            quarantined,
            dead_letters: Arc::default(),
            fsync,
        })
    }

    async fn dead_letter_log(&self) -> Result<&FileLog> {
        let dir = self.inner.dir.join(DEAD_LETTER_DIR);
        let fsync = self.fsync;
        let log = self
            .dead_letters
            .get_or_try_init(|| async move {
                let options = FileLogOptions {
                    partitions: 1,
                    fsync,
                    segment_bytes: FileLogOptions::default().segment_bytes,
                };
                FileLog::open(dir, options).await.map(Box::new)
            })
            .await?;
        Ok(log)
    }

    /// The torn tails cut while opening, one per partition whose last segment ended in a
    /// partial or corrupt record. Empty after a clean shutdown.
    pub fn recovery_report(&self) -> &[TornTail] {
        &self.recovery
    }

    /// The damaged spans inside last segments that valid records followed, quarantined while
    /// opening (see [`Quarantined`]). Empty unless the disk damaged the log.
    pub fn quarantine_report(&self) -> &[Quarantined] {
        &self.quarantined
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

#[async_trait]
impl EventLog for FileLog {
    fn partition_count(&self) -> u32 {
        self.inner.partition_count()
    }

    fn is_embedded(&self) -> bool {
        true
    }

    async fn append(&self, records: Vec<NewRecord>) -> Result<Vec<Position>> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let inner = Arc::clone(&self.inner);
        blocking(move || inner.append_blocking(&records)).await
    }

    async fn end_offsets(&self) -> Result<Vec<u64>> {
        Ok(self.inner.end_offsets())
    }

    async fn read(&self, partition: u32, from: u64, max_records: usize) -> Result<Vec<LogRecord>> {
        self.inner.partition(partition)?;
        if max_records == 0 || from >= self.inner.partitions[partition as usize].visible_end() {
            return Ok(Vec::new());
        }
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let mut out = Vec::with_capacity(max_records.min(4096));
            inner.read_blocking(partition, from, max_records, &mut out)?;
            Ok(out)
        })
        .await
    }

    async fn committed(&self, group: &str) -> Result<Offsets> {
        validate_group(group)?;
        let path = self.inner.group_path(group);
        blocking(move || read_group_file(&path)).await
    }

    async fn subscribe(&self, group: &str) -> Result<Box<dyn LogConsumer>> {
        let committed = self.committed(group).await?;
        let positions = (0..self.inner.partition_count())
            .map(|p| committed.get(&p).copied().unwrap_or(0))
            .collect();
        Ok(Box::new(FileConsumer {
            appended: self.inner.appended.subscribe(),
            inner: Arc::clone(&self.inner),
            group: group.to_owned(),
            positions,
            assigned: false,
            cursor: 0,
        }))
    }

    async fn ping(&self) -> Result<()> {
        match tokio::fs::metadata(&self.inner.dir).await {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => Err(io_error(
                &self.inner.dir,
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "the log directory is not a directory",
                ),
            )),
            Err(e) => Err(io_error(&self.inner.dir, e)),
        }
    }

    async fn dead_letter(&self, record: &LogRecord, group: &str, reason: &str) -> Result<Position> {
        let letter = crate::dead_letter::record(record, group, reason);
        let log = self.dead_letter_log().await?;
        let mut positions = log.append(vec![letter]).await?;
        positions.pop().ok_or(Error::Closed)
    }

    async fn read_dead_letters(&self, from: u64, max_records: usize) -> Result<Vec<LogRecord>> {
        if !self.inner.dir.join(DEAD_LETTER_DIR).exists() {
            return Ok(Vec::new());
        }
        self.dead_letter_log()
            .await?
            .read(0, from, max_records)
            .await
    }
}

/// Subdirectory of the log holding its dead-letter queue.
const DEAD_LETTER_DIR: &str = "dead-letter";

/// The single member of a consumer group of a [`FileLog`]; it is assigned every partition.
///
/// The first [`poll`](LogConsumer::poll) only reports the assignment (no records), so that the
/// caller can [`seek`](LogConsumer::seek) before anything is read; until then, positions are
/// the group's committed offsets (0 where there is none).
pub struct FileConsumer {
    inner: Arc<Inner>,
    group: String,
    /// Next offset to read, per partition.
    positions: Vec<u64>,
    assigned: bool,
    /// Partition that goes first in the next round-robin fetch.
    cursor: usize,
    appended: watch::Receiver<u64>,
}

impl fmt::Debug for FileConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileConsumer")
            .field("dir", &self.inner.dir)
            .field("group", &self.group)
            .field("positions", &self.positions)
            .field("assigned", &self.assigned)
            .finish()
    }
}

impl FileConsumer {
    /// Reads up to `max_records` records, shared fairly between partitions with data, starting
    /// the round at a different partition each time; advances the positions.
    async fn fetch(&mut self, max_records: usize) -> Result<Vec<LogRecord>> {
        let count = self.positions.len();
        if max_records == 0 {
            return Ok(Vec::new());
        }
        // (partition, from, available), in round-robin order from the cursor.
        let mut wanted: Vec<(u32, u64, u64)> = (0..count)
            .map(|i| (self.cursor + i) % count)
            .filter_map(|p| {
                let from = self.positions[p];
                let end = self.inner.partitions[p].visible_end();
                (end > from).then(|| (p as u32, from, end - from))
            })
            .collect();
        self.cursor = (self.cursor + 1) % count.max(1);
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        // Water-filling: partitions with little data take what they have, the rest share what
        // is left equally.
        let mut by_available: Vec<usize> = (0..wanted.len()).collect();
        by_available.sort_by_key(|&i| wanted[i].2);
        let mut remaining = max_records as u64;
        for (k, &i) in by_available.iter().enumerate() {
            let left = (by_available.len() - k) as u64;
            let share = remaining.div_ceil(left).min(wanted[i].2);
            wanted[i].2 = share;
            remaining -= share;
        }
        wanted.retain(|w| w.2 > 0);

        let inner = Arc::clone(&self.inner);
        let records = blocking(move || {
            let mut out = Vec::with_capacity(max_records.min(4096));
            for (partition, from, max) in wanted {
                inner.read_blocking(partition, from, max as usize, &mut out)?;
            }
            Ok(out)
        })
        .await?;
        for record in &records {
            self.positions[record.partition as usize] = record.offset + 1;
        }
        Ok(records)
    }
}

#[async_trait]
impl LogConsumer for FileConsumer {
    async fn poll(&mut self, max_records: usize, timeout: Duration) -> Result<Polled> {
        if !self.assigned {
            self.assigned = true;
            return Ok(Polled {
                assigned: self.assignment(),
                ..Polled::default()
            });
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Mark the current generation seen before reading, so that an append landing after
            // the read wakes the wait below.
            self.appended.borrow_and_update();
            let records = self.fetch(max_records).await?;
            if !records.is_empty() || max_records == 0 {
                return Ok(Polled {
                    records,
                    ..Polled::default()
                });
            }
            match tokio::time::timeout_at(deadline, self.appended.changed()).await {
                Err(_elapsed) => return Ok(Polled::default()),
                Ok(Err(_closed)) => return Err(Error::Closed),
                Ok(Ok(())) => {}
            }
        }
    }

    fn seek(&mut self, partition: u32, offset: u64) -> Result<()> {
        self.inner.partition(partition)?;
        self.positions[partition as usize] = offset;
        Ok(())
    }

    async fn commit(&mut self, offsets: &Offsets) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        let group = self.group.clone();
        let offsets = offsets.clone();
        blocking(move || inner.commit_blocking(&group, &offsets)).await
    }

    fn assignment(&self) -> Vec<u32> {
        if self.assigned {
            (0..self.inner.partition_count()).collect()
        } else {
            Vec::new()
        }
    }

    async fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// State shared by the log, its consumers and the background flusher.
struct Inner {
    dir: PathBuf,
    partitions: Vec<Partition>,
    fsync: FsyncPolicy,
    segment_bytes: u64,
    /// Bumped after every append that made records visible.
    appended: watch::Sender<u64>,
    /// Serializes the read-merge-write of group files.
    groups: Mutex<()>,
    /// The [`FsyncPolicy::Interval`] task, stopped when the log goes away.
    flusher: OnceLock<tokio::task::AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(flusher) = self.flusher.get() {
            flusher.abort();
        }
    }
}

struct Partition {
    id: u32,
    dir: PathBuf,
    state: Mutex<PartitionState>,
    /// Records below this offset may be read: written, and fsynced under
    /// [`FsyncPolicy::Always`].
    visible_end: AtomicU64,
}

impl Partition {
    fn lock(&self) -> MutexGuard<'_, PartitionState> {
        // Writes go to `active.len` and only advance it on success, so the state is consistent
        // even if a holder panicked.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn visible_end(&self) -> u64 {
        self.visible_end.load(Ordering::Acquire)
    }
}

struct PartitionState {
    /// Full segments; their files are opened when read, so a long log does not hold one file
    /// descriptor per segment.
    sealed: Vec<Segment>,
    active: Segment,
    /// The active segment, open for reading and writing.
    active_file: Arc<File>,
    /// The active segment has bytes not fsynced yet ([`FsyncPolicy::Interval`]).
    dirty: bool,
    /// Reused encoding buffer.
    buf: Vec<u8>,
    /// Reused buffer of index entries for the bytes in `buf`.
    pending_index: Vec<(u64, u64)>,
}

struct Segment {
    base: u64,
    path: Arc<Path>,
    /// Bytes of complete records.
    len: u64,
    /// Offset after the last record.
    end: u64,
    /// Sparse index of `(offset, byte position)`, ascending.
    index: Vec<(u64, u64)>,
}

/// Adds `(offset, pos)` to a sparse index when it is far enough from the last entry.
fn index_record(index: &mut Vec<(u64, u64)>, last: Option<u64>, offset: u64, pos: u64) {
    if last.is_none_or(|last| pos >= last + INDEX_INTERVAL) {
        index.push((offset, pos));
    }
}

impl Segment {
    /// `(offset, byte position)` of a record at or before `offset`.
    fn locate(&self, offset: u64) -> (u64, u64) {
        match self.index.partition_point(|&(o, _)| o <= offset) {
            0 => (self.base, 0),
            i => self.index[i - 1],
        }
    }
}

/// What a read needs of one segment, taken under the partition lock.
struct SegmentSnapshot {
    path: Arc<Path>,
    /// Open handle of the active segment; sealed segments are opened by the read.
    file: Option<Arc<File>>,
    /// Offset of the record at `start`.
    start_offset: u64,
    start: u64,
    len: u64,
}

impl Inner {
    fn partition_count(&self) -> u32 {
        self.partitions.len() as u32
    }

    fn partition(&self, partition: u32) -> Result<&Partition> {
        self.partitions
            .get(partition as usize)
            .ok_or(Error::NoSuchPartition {
                partition,
                count: self.partition_count(),
            })
    }

    fn end_offsets(&self) -> Vec<u64> {
        self.partitions.iter().map(Partition::visible_end).collect()
    }

    fn group_path(&self, group: &str) -> PathBuf {
        self.dir.join("groups").join(format!("{group}.json"))
    }

    fn append_blocking(&self, records: &[NewRecord]) -> Result<Vec<Position>> {
        let count = self.partition_count();
        // Validate everything first: a bad record fails the batch before anything is written.
        let body_lens = records
            .iter()
            .map(body_len)
            .collect::<Result<Vec<usize>>>()?;
        let mut by_partition: Vec<Vec<usize>> = vec![Vec::new(); count as usize];
        for (i, record) in records.iter().enumerate() {
            by_partition[partition_for(&record.key, count) as usize].push(i);
        }

        let mut positions = vec![
            Position {
                partition: 0,
                offset: 0
            };
            records.len()
        ];
        let mut to_sync: Vec<(usize, Arc<Path>, Arc<File>, u64)> = Vec::new();
        let mut published = false;
        let mut failure = None;
        for (p, indices) in by_partition.iter().enumerate() {
            if indices.is_empty() {
                continue;
            }
            let partition = &self.partitions[p];
            let mut state = partition.lock();
            let first = state.active.end;
            if let Err(e) = self.write_records(partition, &mut state, records, indices, &body_lens)
            {
                failure = Some(e);
                break;
            }
            for (k, &i) in indices.iter().enumerate() {
                positions[i] = Position {
                    partition: p as u32,
                    offset: first + k as u64,
                };
            }
            let end = state.active.end;
            match self.fsync {
                FsyncPolicy::Always => {
                    to_sync.push((
                        p,
                        Arc::clone(&state.active.path),
                        Arc::clone(&state.active_file),
                        end,
                    ));
                }
                FsyncPolicy::Interval(_) => {
                    state.dirty = true;
                    partition.visible_end.fetch_max(end, Ordering::AcqRel);
                    published = true;
                }
                FsyncPolicy::Never => {
                    partition.visible_end.fetch_max(end, Ordering::AcqRel);
                    published = true;
                }
            }
        }
        // fsync outside the lock: concurrent appenders to the same segment share the flush.
        for (p, path, file, end) in to_sync {
            match file.sync_data() {
                Ok(()) => {
                    self.partitions[p]
                        .visible_end
                        .fetch_max(end, Ordering::AcqRel);
                    published = true;
                }
                Err(e) => {
                    failure.get_or_insert(io_error(&path, e));
                }
            }
        }
        if published {
            self.appended.send_modify(|generation| {
                *generation = generation.wrapping_add(1);
            });
        }
        match failure {
            // Records already written to other partitions stay in the log: a retry of the batch
            // may duplicate them (at-least-once).
            Some(e) => Err(e),
            None => Ok(positions),
        }
    }

    /// Encodes and writes records of one partition, rolling segments as they fill up.
    fn write_records(
        &self,
        partition: &Partition,
        state: &mut PartitionState,
        records: &[NewRecord],
        indices: &[usize],
        body_lens: &[usize],
    ) -> Result<()> {
        let mut buf = std::mem::take(&mut state.buf);
        let mut index = std::mem::take(&mut state.pending_index);
        buf.clear();
        index.clear();
        let result = self.encode_and_write(
            partition, state, records, indices, body_lens, &mut buf, &mut index,
        );
        if buf.capacity() > MAX_KEPT_BUFFER {
            buf = Vec::new();
        }
        state.buf = buf;
        state.pending_index = index;
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn encode_and_write(
        &self,
        partition: &Partition,
        state: &mut PartitionState,
        records: &[NewRecord],
        indices: &[usize],
        body_lens: &[usize],
        buf: &mut Vec<u8>,
        index: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        let mut pending = 0u64;
        for &i in indices {
            let frame = (FRAME_HEADER + body_lens[i]) as u64;
            let size = state.active.len + buf.len() as u64;
            if size > 0 && size + frame > self.segment_bytes {
                flush(state, buf, index, &mut pending)?;
                self.roll(partition, state)?;
            }
            let pos = state.active.len + buf.len() as u64;
            let offset = state.active.end + pending;
            let last_indexed = index.last().or(state.active.index.last()).map(|e| e.1);
            index_record(index, last_indexed, offset, pos);
            encode(buf, offset, &records[i], body_lens[i]);
            pending += 1;
        }
        flush(state, buf, index, &mut pending)
    }

    /// Seals the active segment and starts a new one at its end offset.
    fn roll(&self, partition: &Partition, state: &mut PartitionState) -> Result<()> {
        let sync = self.fsync != FsyncPolicy::Never;
        if sync {
            state
                .active_file
                .sync_data()
                .map_err(|e| io_error(&state.active.path, e))?;
        }
        let base = state.active.end;
        let path = partition.dir.join(segment_name(base));
        // A file of that name can only be left over from a roll that failed after creating it.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| io_error(&path, e))?;
        if sync {
            sync_dir(&partition.dir)?;
        }
        tracing::debug!(
            partition = partition.id,
            base_offset = base,
            "rolled to a new log segment"
        );
        let new = Segment {
            base,
            path: path.into(),
            len: 0,
            end: base,
            index: Vec::new(),
        };
        let old = std::mem::replace(&mut state.active, new);
        state.sealed.push(old);
        state.active_file = Arc::new(file);
        state.dirty = false;
        Ok(())
    }

    /// Appends to `out` up to `max` records of `partition` from offset `from`.
    fn read_blocking(
        &self,
        partition: u32,
        from: u64,
        max: usize,
        out: &mut Vec<LogRecord>,
    ) -> Result<()> {
        let part = self.partition(partition)?;
        let visible = part.visible_end();
        if max == 0 || from >= visible {
            return Ok(());
        }
        let upto = visible.min(from.saturating_add(max as u64));
        let snapshots: Vec<SegmentSnapshot> = {
            let state = part.lock();
            let first_sealed = if from >= state.active.base {
                state.sealed.len()
            } else {
                state
                    .sealed
                    .partition_point(|s| s.base <= from)
                    .saturating_sub(1)
            };
            state.sealed[first_sealed..]
                .iter()
                .map(|s| (s, None))
                .chain(std::iter::once((&state.active, Some(&state.active_file))))
                .take_while(|(s, _)| s.base < upto)
                .enumerate()
                .map(|(k, (s, file))| {
                    let (start_offset, start) = if k == 0 { s.locate(from) } else { (s.base, 0) };
                    SegmentSnapshot {
                        path: Arc::clone(&s.path),
                        file: file.map(Arc::clone),
                        start_offset,
                        start,
                        len: s.len,
                    }
                })
                .collect()
        };
        // Read ahead roughly what the request needs, within bounds.
        let chunk = (max.saturating_mul(512)).clamp(16 << 10, 1 << 20);
        for snapshot in snapshots {
            let file = match snapshot.file {
                Some(file) => file,
                None => {
                    Arc::new(File::open(&snapshot.path).map_err(|e| io_error(&snapshot.path, e))?)
                }
            };
            let mut scanner = Scanner::new(&file, snapshot.len, chunk);
            let mut pos = snapshot.start;
            // Offsets are dense, so the position in the walk tells each record's offset.
            let mut offset = snapshot.start_offset;
            while pos < snapshot.len && offset < upto {
                let corrupt = |reason: String| Error::Corrupt {
                    path: snapshot.path.display().to_string(),
                    position: pos,
                    reason,
                };
                let header = scanner
                    .bytes(pos, FRAME_HEADER)
                    .map_err(|e| io_error(&snapshot.path, e))?
                    .ok_or_else(|| {
                        corrupt("record header runs past the end of the segment".into())
                    })?;
                let (len, crc) = frame_header(header);
                if len < MIN_BODY {
                    return Err(corrupt(format!("record length {len} is too small")));
                }
                let body = scanner
                    .bytes(pos + FRAME_HEADER as u64, len)
                    .map_err(|e| io_error(&snapshot.path, e))?
                    .ok_or_else(|| {
                        corrupt(format!(
                            "record of {len} bytes runs past the end of the segment"
                        ))
                    })?;
                // Records before `from` (between the index entry and `from`) are skipped by
                // their length; every record returned is verified.
                if offset >= from {
                    if crc32c::crc32c(body) != crc {
                        return Err(corrupt("crc mismatch".into()));
                    }
                    let record = decode(partition, body)
                        .ok_or_else(|| corrupt("malformed record body".into()))?;
                    if record.offset != offset {
                        return Err(corrupt(format!(
                            "record has offset {} where {offset} was expected",
                            record.offset
                        )));
                    }
                    out.push(record);
                }
                pos += (FRAME_HEADER + len) as u64;
                offset += 1;
            }
        }
        Ok(())
    }

    fn commit_blocking(&self, group: &str, offsets: &Offsets) -> Result<()> {
        validate_group(group)?;
        for &partition in offsets.keys() {
            self.partition(partition)?;
        }
        let _guard = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        let path = self.group_path(group);
        let mut merged = read_group_file(&path)?;
        merged.extend(offsets.iter().map(|(&p, &o)| (p, o)));
        let file = GroupFile {
            format: FORMAT,
            offsets: merged,
        };
        let json =
            serde_json::to_vec_pretty(&file).map_err(|e| io_error(&path, io::Error::other(e)))?;
        write_atomically(&path, &json, self.fsync != FsyncPolicy::Never)
    }

    /// fsyncs the active segments appended to since the last call.
    fn sync_dirty(&self) {
        for partition in &self.partitions {
            let (path, file) = {
                let mut state = partition.lock();
                if !state.dirty {
                    continue;
                }
                state.dirty = false;
                (
                    Arc::clone(&state.active.path),
                    Arc::clone(&state.active_file),
                )
            };
            if let Err(e) = file.sync_data() {
                tracing::warn!(
                    partition = partition.id,
                    segment = %path.display(),
                    error = %e,
                    "background fsync of the log failed"
                );
                partition.lock().dirty = true;
            }
        }
    }
}

/// The [`FsyncPolicy::Interval`] task: fsyncs dirty segments every `every` until the log is gone.
async fn flush_periodically(inner: std::sync::Weak<Inner>, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || inner.sync_dirty()).await;
    }
}

/// Writes `buf` (holding `pending` records) at the end of the active segment.
fn flush(
    state: &mut PartitionState,
    buf: &mut Vec<u8>,
    index: &mut Vec<(u64, u64)>,
    pending: &mut u64,
) -> Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let segment = &mut state.active;
    let file = &state.active_file;
    let written = write_all_at(file, buf, segment.len);
    let count = std::mem::take(pending);
    if let Err(e) = written {
        buf.clear();
        index.clear();
        // Cut whatever part of the batch reached the file, so that the segment stays a clean
        // sequence of records (a later append writes at `len` anyway).
        if let Err(cut) = file.set_len(segment.len) {
            tracing::warn!(
                segment = %segment.path.display(),
                error = %cut,
                "could not cut a failed append from the log"
            );
        }
        return Err(io_error(&segment.path, e));
    }
    segment.len += buf.len() as u64;
    segment.end += count;
    segment.index.append(index);
    buf.clear();
    Ok(())
}

/// Runs blocking work on tokio's blocking pool.
async fn blocking<T, F>(work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Closed),
    }
}

// ---------------------------------------------------------------------------------------------
// Opening and recovery

#[derive(Serialize, Deserialize)]
struct Meta {
    format: u32,
    partitions: u32,
}

#[derive(Serialize, Deserialize)]
struct GroupFile {
    format: u32,
    offsets: Offsets,
}

fn open_blocking(
    dir: PathBuf,
    options: FileLogOptions,
) -> Result<(Inner, Vec<TornTail>, Vec<Quarantined>)> {
    if options.segment_bytes == 0 {
        return Err(Error::Config("segment_bytes must be positive".into()));
    }
    let sync = options.fsync != FsyncPolicy::Never;
    fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let meta_path = dir.join("meta.json");
    let count = match fs::read(&meta_path) {
        Ok(bytes) => {
            let meta: Meta = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                path: meta_path.display().to_string(),
                position: 0,
                reason: format!("invalid meta.json: {e}"),
            })?;
            if meta.format != FORMAT {
                return Err(Error::Config(format!(
                    "{} has format {}, this build reads format {FORMAT}",
                    meta_path.display(),
                    meta.format
                )));
            }
            if meta.partitions == 0 {
                return Err(Error::Config(format!(
                    "{} declares zero partitions",
                    meta_path.display()
                )));
            }
            meta.partitions
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if options.partitions == 0 {
                return Err(Error::Config(
                    "a new log needs at least one partition".into(),
                ));
            }
            let meta = format!(
                "{{\"format\":{FORMAT},\"partitions\":{}}}\n",
                options.partitions
            );
            // The partition count must survive a crash whatever the policy.
            write_atomically(&meta_path, meta.as_bytes(), true)?;
            options.partitions
        }
        Err(e) => return Err(io_error(&meta_path, e)),
    };

    let partitions_dir = dir.join("partitions");
    let groups_dir = dir.join("groups");
    for d in [&partitions_dir, &groups_dir] {
        fs::create_dir_all(d).map_err(|e| io_error(d, e))?;
    }
    for entry in fs::read_dir(&partitions_dir).map_err(|e| io_error(&partitions_dir, e))? {
        let entry = entry.map_err(|e| io_error(&partitions_dir, e))?;
        let name = entry.file_name();
        if let Some(n) = name.to_str().and_then(|n| n.parse::<u32>().ok()) {
            if n >= count {
                return Err(Error::Config(format!(
                    "{} holds partition {n}, but meta.json says the log has {count}",
                    partitions_dir.display()
                )));
            }
        }
    }

    let mut partitions = Vec::with_capacity(count as usize);
    let mut recovery = Vec::new();
    let mut quarantined = Vec::new();
    let mut created = false;
    for id in 0..count {
        let pdir = partitions_dir.join(format!("{id:04}"));
        if !pdir.exists() {
            fs::create_dir(&pdir).map_err(|e| io_error(&pdir, e))?;
            created = true;
        }
        let (state, torn, damaged) = open_partition(id, &pdir, sync)?;
        recovery.extend(torn);
        quarantined.extend(damaged);
        let end = state.active.end;
        partitions.push(Partition {
            id,
            dir: pdir,
            state: Mutex::new(state),
            visible_end: AtomicU64::new(end),
        });
    }
    if created && sync {
        sync_dir(&partitions_dir)?;
        sync_dir(&dir)?;
    }

    let (appended, _) = watch::channel(0);
    let inner = Inner {
        dir,
        partitions,
        fsync: options.fsync,
        segment_bytes: options.segment_bytes,
        appended,
        groups: Mutex::new(()),
        flusher: OnceLock::new(),
    };
    Ok((inner, recovery, quarantined))
}

/// A partition's state, the torn tail cut from it and the damage quarantined in it.
type OpenedPartition = (PartitionState, Option<TornTail>, Vec<Quarantined>);

fn open_partition(id: u32, dir: &Path, sync: bool) -> Result<OpenedPartition> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        if let Some(base) = entry.file_name().to_str().and_then(parse_segment_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();

    let Some((&last_base, sealed_bases)) = bases.split_last() else {
        let path = dir.join(segment_name(0));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, e))?;
        if sync {
            sync_dir(dir)?;
        }
        let active = Segment {
            base: 0,
            path: path.into(),
            len: 0,
            end: 0,
            index: Vec::new(),
        };
        return Ok((new_state(Vec::new(), active, file), None, Vec::new()));
    };

    let mut sealed = Vec::with_capacity(sealed_bases.len());
    let mut expected: Option<(u64, PathBuf)> = None;
    for &base in sealed_bases {
        let path = dir.join(segment_name(base));
        check_base(&expected, base, &path)?;
        let segment = walk_sealed(base, &path)?;
        expected = Some((segment.end, path));
        sealed.push(segment);
    }
    let path = dir.join(segment_name(last_base));
    check_base(&expected, last_base, &path)?;
    let (active, file, torn, quarantined) = recover_last(id, last_base, &path)?;
    Ok((new_state(sealed, active, file), torn, quarantined))
}

fn new_state(sealed: Vec<Segment>, active: Segment, active_file: File) -> PartitionState {
    PartitionState {
        sealed,
        active,
        active_file: Arc::new(active_file),
        dirty: false,
        buf: Vec::new(),
        pending_index: Vec::new(),
    }
}

/// A segment must start where the previous one ended.
fn check_base(previous: &Option<(u64, PathBuf)>, base: u64, path: &Path) -> Result<()> {
    match previous {
        Some((end, previous)) if *end != base => Err(Error::Corrupt {
            path: path.display().to_string(),
            position: 0,
            reason: format!(
                "segment starts at offset {base} but {} ends at offset {end}",
                previous.display()
            ),
        }),
        _ => Ok(()),
    }
}

/// Walks the length fields of a sealed segment to build its index.
fn walk_sealed(base: u64, path: &Path) -> Result<Segment> {
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let file_len = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut segment = Segment {
        base,
        path: path.into(),
        len: file_len,
        end: base,
        index: Vec::new(),
    };
    let mut scanner = Scanner::new(&file, file_len, SCAN_CHUNK);
    let mut pos = 0u64;
    let mut next = base;
    let mut index = Vec::new();
    while pos < file_len {
        let corrupt = |reason: String| Error::Corrupt {
            path: path.display().to_string(),
            position: pos,
            reason,
        };
        // Header plus the offset that opens the body.
        let head = scanner
            .bytes(pos, FRAME_HEADER + 8)
            .map_err(|e| io_error(path, e))?
            .ok_or_else(|| corrupt("record runs past the end of a sealed segment".into()))?;
        let (len, _) = frame_header(head);
        let offset = u64::from_le_bytes(le_array(&head[FRAME_HEADER..]));
        if len < MIN_BODY {
            return Err(corrupt(format!("record length {len} is too small")));
        }
        let frame_end = pos + (FRAME_HEADER + len) as u64;
        if frame_end > file_len {
            return Err(corrupt(format!(
                "record of {len} bytes runs past the end of a sealed segment"
            )));
        }
        if offset != next {
            return Err(corrupt(format!(
                "record has offset {offset} where {next} was expected"
            )));
        }
        let last_indexed = index.last().map(|e: &(u64, u64)| e.1);
        index_record(&mut index, last_indexed, offset, pos);
        pos = frame_end;
        next += 1;
    }
    segment.end = next;
    segment.index = index;
    Ok(segment)
}

/// A damaged span in the middle of a last segment that valid records follow: its bytes were
/// copied aside and it was rewritten as one empty stand-in record per offset it held, so that the
/// records after it are kept (consumers set the stand-ins aside as undecodable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    pub partition: u32,
    pub segment: PathBuf,
    /// Where the damaged span starts in the segment, and its length.
    pub position: u64,
    pub bytes: u64,
    /// The offsets it held (each now an empty stand-in record).
    pub offsets: std::ops::Range<u64>,
    /// The copy of the damaged bytes.
    pub copy: PathBuf,
    pub reason: String,
}

/// The next valid record after a damage at `pos` (expecting offset `next`): its position and
/// offset, when the span between could hold one stand-in record per offset it skips.
fn resume_after_damage(
    scanner: &mut Scanner<'_>,
    pos: u64,
    file_len: u64,
    next: u64,
) -> io::Result<Option<(u64, u64)>> {
    let marker = (FRAME_HEADER + MIN_BODY) as u64;
    let mut q = pos + 1;
    while q + marker <= file_len {
        let Some(head) = scanner.bytes(q, FRAME_HEADER + 8)? else {
            return Ok(None);
        };
        let (len, crc) = frame_header(head);
        let offset = u64::from_le_bytes(le_array(&head[FRAME_HEADER..]));
        let fits = offset > next && (offset - next).saturating_mul(marker) <= q - pos;
        if fits && len >= MIN_BODY && q + (FRAME_HEADER + len) as u64 <= file_len {
            if let Some(body) = scanner.bytes(q + FRAME_HEADER as u64, len)? {
                if crc32c::crc32c(body) == crc && check_body(body) == Some(offset) {
                    return Ok(Some((q, offset)));
                }
            }
        }
        q += 1;
    }
    Ok(None)
}

/// Copies the damaged span aside, then rewrites it as `offsets.len()` empty stand-in records
/// that fill it exactly.
fn quarantine_span(
    file: &File,
    path: &Path,
    span: std::ops::Range<u64>,
    offsets: std::ops::Range<u64>,
) -> Result<PathBuf> {
    use std::os::unix::fs::FileExt;
    let len = (span.end - span.start) as usize;
    let mut damaged = vec![0u8; len];
    file.read_exact_at(&mut damaged, span.start)
        .map_err(|e| io_error(path, e))?;
    let dir = path
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("quarantine");
    fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let name = path
        .file_name()
        .map_or_else(|| "segment".into(), |n| n.to_string_lossy().into_owned());
    let copy = dir.join(format!("{name}.at-{}.damaged", span.start));
    let mut out = File::create(&copy).map_err(|e| io_error(&copy, e))?;
    io::Write::write_all(&mut out, &damaged).map_err(|e| io_error(&copy, e))?;
    out.sync_all().map_err(|e| io_error(&copy, e))?;

    let count = (offsets.end - offsets.start) as usize;
    let marker = FRAME_HEADER + MIN_BODY;
    let mut frames = Vec::with_capacity(len);
    for (i, offset) in offsets.enumerate() {
        // The last stand-in takes what the others leave, as padding in its value.
        let frame_len = if i + 1 == count {
            len - marker * (count - 1)
        } else {
            marker
        };
        let padding = frame_len - marker;
        let stand_in = NewRecord {
            key: Vec::new(),
            headers: Vec::new(),
            value: vec![0; padding],
            timestamp_ms: 0,
        };
        encode(&mut frames, offset, &stand_in, MIN_BODY + padding);
    }
    debug_assert_eq!(frames.len(), len);
    file.write_all_at(&frames, span.start)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(path, e))?;
    Ok(copy)
}

/// Scans the last segment of a partition completely. Damage that valid records follow is
/// quarantined ([`Quarantined`]); the first bad record with nothing valid after it is a torn
/// tail, and the segment is cut there.
fn recover_last(
    partition: u32,
    base: u64,
    path: &Path,
) -> Result<(Segment, File, Option<TornTail>, Vec<Quarantined>)> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io_error(path, e))?;
    let file_len = file.metadata().map_err(|e| io_error(path, e))?.len();
    let mut segment = Segment {
        base,
        path: path.into(),
        len: 0,
        end: base,
        index: Vec::new(),
    };
    let mut scanner = Scanner::new(&file, file_len, SCAN_CHUNK);
    let mut pos = 0u64;
    let mut next = base;
    let mut index = Vec::new();
    let mut quarantined = Vec::new();
    let problem = loop {
        if pos == file_len {
            break None;
        }
        let len = match damage_at(&mut scanner, path, pos, next)? {
            Ok(len) => len,
            Err(reason) => {
                let Some((resume, offset)) = resume_after_damage(&mut scanner, pos, file_len, next)
                    .map_err(|e| io_error(path, e))?
                else {
                    break Some(reason);
                };
                let copy = quarantine_span(&file, path, pos..resume, next..offset)?;
                tracing::error!(
                    partition,
                    segment = %path.display(),
                    position = pos,
                    bytes = resume - pos,
                    offsets = ?(next..offset),
                    copy = %copy.display(),
                    reason = %reason,
                    "damaged records inside the log were quarantined; the records after them are kept"
                );
                quarantined.push(Quarantined {
                    partition,
                    segment: path.to_path_buf(),
                    position: pos,
                    bytes: resume - pos,
                    offsets: next..offset,
                    copy,
                    reason,
                });
                // The stand-ins are read like any record from here on.
                scanner = Scanner::new(&file, file_len, SCAN_CHUNK);
                continue;
            }
        };
        let last_indexed = index.last().map(|e: &(u64, u64)| e.1);
        index_record(&mut index, last_indexed, next, pos);
        pos += (FRAME_HEADER + len) as u64;
        next += 1;
    };
    segment.len = pos;
    segment.end = next;
    segment.index = index;

    let torn = match problem {
        None => None,
        Some(reason) => {
            file.set_len(pos)
                .and_then(|()| file.sync_all())
                .map_err(|e| io_error(path, e))?;
            let torn = TornTail {
                partition,
                segment: path.to_path_buf(),
                valid_bytes: pos,
                truncated_bytes: file_len - pos,
            };
            tracing::warn!(
                partition,
                segment = %path.display(),
                valid_bytes = torn.valid_bytes,
                truncated_bytes = torn.truncated_bytes,
                next_offset = next,
                reason = %reason,
                "truncated a torn tail of the log"
            );
            Some(torn)
        }
    };
    Ok((segment, file, torn, quarantined))
}

/// The body length of the valid record at `pos` (expecting offset `next`), or why it is not one.
fn damage_at(
    scanner: &mut Scanner<'_>,
    path: &Path,
    pos: u64,
    next: u64,
) -> Result<std::result::Result<usize, String>> {
    let Some(header) = scanner
        .bytes(pos, FRAME_HEADER)
        .map_err(|e| io_error(path, e))?
    else {
        return Ok(Err("incomplete record header".to_owned()));
    };
    let (len, crc) = frame_header(header);
    if len < MIN_BODY {
        return Ok(Err(format!("record length {len} is too small")));
    }
    let Some(body) = scanner
        .bytes(pos + FRAME_HEADER as u64, len)
        .map_err(|e| io_error(path, e))?
    else {
        return Ok(Err(format!("incomplete record of {len} bytes")));
    };
    if crc32c::crc32c(body) != crc {
        return Ok(Err("crc mismatch".to_owned()));
    }
    Ok(match check_body(body) {
        None => Err("malformed record body".to_owned()),
        Some(offset) if offset != next => Err(format!(
            "record has offset {offset} where {next} was expected"
        )),
        Some(_) => Ok(len),
    })
}

// ---------------------------------------------------------------------------------------------
// Record encoding

/// Length of a record's body, or why it cannot be stored.
fn body_len(record: &NewRecord) -> Result<usize> {
    fn check(what: &str, len: usize, max: usize) -> Result<usize> {
        if len > max {
            Err(Error::InvalidInput(format!(
                "record {what} of {len} bytes exceeds the limit of {max}"
            )))
        } else {
            Ok(len)
        }
    }
    let u32_max = u32::MAX as usize;
    let u16_max = u16::MAX as usize;
    let mut len = MIN_BODY;
    len += check("key", record.key.len(), u32_max)?;
    check("header count", record.headers.len(), u16_max)?;
    for (name, value) in &record.headers {
        len += 2 + check("header name", name.len(), u16_max)?;
        len += 4 + check("header value", value.len(), u32_max)?;
    }
    len += check("value", record.value.len(), u32_max)?;
    check("body", len, u32_max)
}

/// Appends the frame of `record` to `buf`.
fn encode(buf: &mut Vec<u8>, offset: u64, record: &NewRecord, body_len: usize) {
    buf.reserve(FRAME_HEADER + body_len);
    let start = buf.len();
    buf.extend_from_slice(&(body_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    let body_start = buf.len();
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(&record.timestamp_ms.to_le_bytes());
    buf.extend_from_slice(&(record.key.len() as u32).to_le_bytes());
    buf.extend_from_slice(&record.key);
    buf.extend_from_slice(&(record.headers.len() as u16).to_le_bytes());
    for (name, value) in &record.headers {
        buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
        buf.extend_from_slice(value);
    }
    buf.extend_from_slice(&(record.value.len() as u32).to_le_bytes());
    buf.extend_from_slice(&record.value);
    debug_assert_eq!(buf.len() - body_start, body_len);
    let crc = crc32c::crc32c(&buf[body_start..]);
    buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// `(body_len, crc)` of a frame header.
fn frame_header(header: &[u8]) -> (usize, u32) {
    let len = u32::from_le_bytes(le_array(&header[0..4]));
    let crc = u32::from_le_bytes(le_array(&header[4..8]));
    (len as usize, crc)
}

fn le_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// Reads a body field by field; every method returns `None` past the end.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes(le_array(b)))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(le_array(b)))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(le_array(b)))
    }
    fn i64(&mut self) -> Option<i64> {
        self.take(8).map(|b| i64::from_le_bytes(le_array(b)))
    }
    fn bytes32(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()? as usize;
        self.take(len)
    }
}

/// Checks the structure of a body without copying it; returns its offset.
fn check_body(body: &[u8]) -> Option<u64> {
    let mut c = Cursor(body);
    let offset = c.u64()?;
    c.i64()?;
    c.bytes32()?;
    for _ in 0..c.u16()? {
        let name_len = c.u16()? as usize;
        std::str::from_utf8(c.take(name_len)?).ok()?;
        c.bytes32()?;
    }
    c.bytes32()?;
    c.0.is_empty().then_some(offset)
}

fn decode(partition: u32, body: &[u8]) -> Option<LogRecord> {
    let mut c = Cursor(body);
    let offset = c.u64()?;
    let timestamp_ms = c.i64()?;
    let key = c.bytes32()?.to_vec();
    let header_count = c.u16()? as usize;
    let mut headers = Vec::with_capacity(header_count);
    for _ in 0..header_count {
        let name_len = c.u16()? as usize;
        let name = std::str::from_utf8(c.take(name_len)?).ok()?.to_owned();
        headers.push((name, c.bytes32()?.to_vec()));
    }
    let value = c.bytes32()?.to_vec();
    c.0.is_empty().then_some(LogRecord {
        partition,
        offset,
        timestamp_ms,
        key,
        headers,
        value,
    })
}

// ---------------------------------------------------------------------------------------------
// File helpers

/// Sequential reader over the first `limit` bytes of a file, with positional reads.
struct Scanner<'f> {
    file: &'f File,
    limit: u64,
    chunk: usize,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_pos: u64,
}

impl<'f> Scanner<'f> {
    fn new(file: &'f File, limit: u64, chunk: usize) -> Self {
        Scanner {
            file,
            limit,
            chunk,
            buf: Vec::new(),
            buf_pos: 0,
        }
    }

    /// The `n` bytes at `pos`, or `None` when they run past the limit.
    fn bytes(&mut self, pos: u64, n: usize) -> io::Result<Option<&[u8]>> {
        let end = match pos.checked_add(n as u64) {
            Some(end) if end <= self.limit => end,
            _ => return Ok(None),
        };
        let buffered_end = self.buf_pos + self.buf.len() as u64;
        if pos < self.buf_pos || end > buffered_end {
            let want = (n.max(self.chunk) as u64).min(self.limit - pos) as usize;
            self.buf.resize(want, 0);
            read_exact_at(self.file, &mut self.buf, pos)?;
            self.buf_pos = pos;
        }
        let start = (pos - self.buf_pos) as usize;
        Ok(Some(&self.buf[start..start + n]))
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, pos)
}

#[cfg(unix)]
fn write_all_at(file: &File, buf: &[u8], pos: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, pos)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut pos: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, pos) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                pos += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(windows)]
fn write_all_at(file: &File, mut buf: &[u8], mut pos: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_write(buf, pos) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                pos += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes the entries of a directory (created, renamed files) durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    Ok(())
}

/// Replaces `path` with `bytes` through a temporary file and a rename.
fn write_atomically(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let write = || -> io::Result<()> {
        let mut file = File::create(&tmp)?;
        io::Write::write_all(&mut file, bytes)?;
        if sync {
            file.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| io_error(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| io_error(path, e))?;
    if sync {
        if let Some(parent) = path.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

fn read_group_file(path: &Path) -> Result<Offsets> {
    match fs::read(path) {
        Ok(bytes) => {
            let file: GroupFile = serde_json::from_slice(&bytes).map_err(|e| Error::Corrupt {
                path: path.display().to_string(),
                position: 0,
                reason: format!("invalid group file: {e}"),
            })?;
            Ok(file.offsets)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Offsets::new()),
        Err(e) => Err(io_error(path, e)),
    }
}

/// Group names become file names: 1 to 128 characters of `[A-Za-z0-9._-]`.
fn validate_group(group: &str) -> Result<()> {
    let valid = (1..=MAX_GROUP_LEN).contains(&group.len())
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "invalid consumer group name {group:?}: expected 1 to {MAX_GROUP_LEN} characters of [A-Za-z0-9._-]"
        )))
    }
}

fn segment_name(base: u64) -> String {
    format!("{base:020}.log")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
        stem.parse().ok()
    } else {
        None
    }
}

fn io_error(path: &Path, source: io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

pub mod rewrite;

#[cfg(test)]
mod tests;
