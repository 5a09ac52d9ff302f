//! Reading the log for replay and rebuild: every partition from a start offset up to a target,
//! decoded, in chunks; and progress reporting.

use std::time::{Duration, Instant};

use strata_core::projection::LogPosition;
use strata_core::Event;
use strata_keys::{RecordCodec, Unreadable};
use strata_log::EventLog;
use strata_store::Offsets;

use crate::archive::ArchiveReader;
use crate::{Error, Result};

/// Records read per partition per call.
pub(crate) const READ_CHUNK: usize = 4096;

/// Reads the log partition by partition, chunk by chunk, from `from` up to (excluding) `to`.
#[derive(Debug)]
pub(crate) struct LogReader {
    next: Offsets,
    to: Offsets,
    codec: RecordCodec,
    /// Undecodable records passed over: the live consumers set them aside in the dead-letter
    /// queue and move on, so a rebuild or replay that matches them must skip them too.
    pub(crate) undecodable: u64,
    /// Records of forgotten sessions passed over (their keys are destroyed).
    pub(crate) forgotten: u64,
    /// Where records the log no longer keeps (retention) are read from, if anywhere.
    pub(crate) archive: Option<ArchiveReader>,
    /// The partition and next offset of the chunk last returned: records passed over at its end
    /// (undecodable, forgotten) are read too, and a rebuild's offsets must move past them.
    read_to: Option<(u32, u64)>,
}

impl LogReader {
    pub(crate) fn new(from: &Offsets, to: &Offsets, codec: RecordCodec) -> Self {
        let next = to
            .keys()
            .map(|p| (*p, from.get(p).copied().unwrap_or(0)))
            .collect();
        Self {
            next,
            to: to.clone(),
            codec,
            undecodable: 0,
            forgotten: 0,
            archive: None,
            read_to: None,
        }
    }

    /// Reads records the log no longer keeps from the archive in `blobs`.
    pub(crate) fn with_archive(mut self, blobs: strata_blob::BlobStore) -> Self {
        self.archive = Some(ArchiveReader::new(blobs));
        self
    }

    /// Records read from the archive so far.
    pub(crate) fn archived(&self) -> u64 {
        self.archive.as_ref().map_or(0, |a| a.records)
    }

    /// Where the chunk last returned ends (partition, next offset); taken once. Call it before
    /// reading ahead: the next read replaces it.
    pub(crate) fn take_read_to(&mut self) -> Option<(u32, u64)> {
        self.read_to.take()
    }

    /// Records left to read.
    pub(crate) fn remaining(&self) -> u64 {
        self.to
            .iter()
            .map(|(p, end)| end.saturating_sub(self.next.get(p).copied().unwrap_or(0)))
            .sum()
    }

    /// Moves the target to `to` (a later head).
    pub(crate) fn extend_to(&mut self, to: &Offsets) {
        for (p, end) in to {
            self.next.entry(*p).or_insert(0);
            let t = self.to.entry(*p).or_insert(0);
            *t = (*t).max(*end);
        }
    }

    /// The next chunk of one partition that has records left, decoded; `None` when done.
    pub(crate) async fn next_chunk(
        &mut self,
        log: &dyn EventLog,
    ) -> Result<Option<Vec<(LogPosition, Event)>>> {
        let Some((&p, &from)) = self
            .next
            .iter()
            .find(|(p, n)| **n < self.to.get(p).copied().unwrap_or(0))
        else {
            return Ok(None);
        };
        let end = self.to[&p];
        let want = ((end - from) as usize).min(READ_CHUNK);
        let mut records = log.read(p, from, want).await?;
        if records.is_empty() {
            if let Some(archive) = self.archive.as_mut() {
                records = archive.read(p, from, end, want).await?;
            }
        }
        if records.is_empty() {
            return Err(Error::Invalid(format!(
                "log partition {p} returned no record at offset {from} below its end {end} \
                 (retention may have dropped it{})",
                if self.archive.is_some() {
                    ", and no archived file holds it"
                } else {
                    "; `strata archive` keeps a copy that rebuild reads"
                }
            )));
        }
        let mut out = Vec::with_capacity(records.len());
        let mut read_to = from;
        for r in records.into_iter().filter(|r| r.offset < end) {
            read_to = r.offset + 1;
            match self.codec.decode(&r.value).await {
                // Without the keys the rest cannot be read either: stop, nothing is half done.
                Err(e) if e.unreadable() == Unreadable::Retry => return Err(e.into()),
                Err(e) if e.unreadable() == Unreadable::Forgotten => self.forgotten += 1,
                Ok(event) => out.push((
                    LogPosition {
                        partition: r.partition,
                        offset: r.offset,
                    },
                    event,
                )),
                Err(e) => {
                    self.undecodable += 1;
                    tracing::warn!(partition = r.partition, offset = r.offset, error = %e,
                        "passing over an undecodable record (the live consumers set it aside in the dead-letter queue)");
                }
            }
        }
        let next = if read_to > from { read_to } else { end };
        self.next.insert(p, next);
        self.read_to = Some((p, next));
        Ok(Some(out))
    }
}

/// Progress of a replay or rebuild, as shown on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Progress {
    /// Events read so far.
    pub events: u64,
    /// Events to read in all (grows when the head moves).
    pub total_events: u64,
    /// Sessions done so far (replay) or folded so far (rebuild).
    pub sessions: u64,
    /// Sessions in all, when known.
    pub total_sessions: u64,
    /// Events per second since the start.
    pub events_per_sec: f64,
    /// Estimated time left, in seconds.
    pub eta_secs: f64,
}

/// Reports progress at most every `every`.
pub(crate) struct Ticker<'a> {
    started: Instant,
    last: Instant,
    every: Duration,
    sink: Option<&'a mut (dyn FnMut(Progress) + Send)>,
}

impl std::fmt::Debug for Ticker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticker").finish_non_exhaustive()
    }
}

impl<'a> Ticker<'a> {
    pub(crate) fn new(sink: Option<&'a mut (dyn FnMut(Progress) + Send)>) -> Self {
        let now = Instant::now();
        Self {
            started: now,
            last: now,
            every: Duration::from_millis(250),
            sink,
        }
    }

    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn tick(&mut self, events: u64, total: u64, sessions: u64, total_sessions: u64) {
        self.report(events, total, sessions, total_sessions, false);
    }

    pub(crate) fn finish(&mut self, events: u64, total: u64, sessions: u64, total_sessions: u64) {
        self.report(events, total, sessions, total_sessions, true);
    }

    fn report(&mut self, events: u64, total: u64, sessions: u64, total_sessions: u64, force: bool) {
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        if !force && self.last.elapsed() < self.every {
            return;
        }
        self.last = Instant::now();
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let rate = events as f64 / secs;
        let eta = if rate > 0.0 {
            total.saturating_sub(events) as f64 / rate
        } else {
            0.0
        };
        sink(Progress {
            events,
            total_events: total,
            sessions,
            total_sessions,
            events_per_sec: rate,
            eta_secs: eta,
        });
    }
}

/// Offsets as a map from the log's end offsets.
pub(crate) fn offsets_of(end: &[u64]) -> Offsets {
    end.iter()
        .enumerate()
        .map(|(p, o)| (p as u32, *o))
        .collect()
}
