//! What this process knows of the log beyond the projections (see [`TailIndex`]).

use std::collections::HashMap;

use strata_codec::Record;
use strata_core::Event;
use strata_hot::Accepted;
use strata_runtime::Backends;

use crate::IngestError;

/// What this process knows of the log beyond the projections, per partition: the sessions found
/// there with their highest seq and event ids (with their content hashes where known: this
/// process's appends and plain records; a sealed record is read without its key), up to
/// `scanned_to`. Filled by reading the log on a
/// hot-state miss and by this process's own appends (when they follow on), so the log is read at
/// most once per record; entries the projections have caught up with are dropped, and a partition
/// holding more than [`TailIndex::MAX_IDS`] ids is forgotten (and read again if needed).
#[derive(Debug, Default)]
pub(crate) struct TailIndex {
    partitions: HashMap<u32, PartitionTail>,
}

#[derive(Debug, Default)]
struct PartitionTail {
    scanned_to: u64,
    ids: usize,
    /// By tenant, then session: lookups by `&str` need no allocation on the append path.
    sessions: HashMap<String, HashMap<String, SessionTail>>,
}

#[derive(Debug, Default)]
pub(crate) struct SessionTail {
    pub(crate) seq: u64,
    last_offset: u64,
    pub(crate) ids: HashMap<String, Accepted>,
}

impl PartitionTail {
    fn add(&mut self, event: &Event, content_sha256: Option<String>, offset: u64) {
        self.add_ids(
            &event.tenant_id,
            &event.session_id,
            &event.event_id,
            Accepted {
                seq: event.seq.unwrap_or(0),
                content_sha256,
            },
            offset,
        );
    }

    fn add_ids(
        &mut self,
        tenant_id: &str,
        session_id: &str,
        event_id: &str,
        accepted: Accepted,
        offset: u64,
    ) {
        let by_session = match self.sessions.get_mut(tenant_id) {
            Some(m) => m,
            None => self.sessions.entry(tenant_id.to_owned()).or_default(),
        };
        let s = match by_session.get_mut(session_id) {
            Some(s) => s,
            None => by_session.entry(session_id.to_owned()).or_default(),
        };
        s.seq = s.seq.max(accepted.seq);
        s.last_offset = s.last_offset.max(offset);
        if s.ids.insert(event_id.to_owned(), accepted).is_none() {
            self.ids += 1;
        }
    }
}

impl TailIndex {
    const MAX_IDS: usize = 200_000;

    pub(crate) fn scanned_to(&self, partition: u32) -> u64 {
        self.partitions.get(&partition).map_or(0, |p| p.scanned_to)
    }

    pub(crate) fn session(
        &self,
        partition: u32,
        tenant: &str,
        session: &str,
    ) -> Option<&SessionTail> {
        self.partitions
            .get(&partition)?
            .sessions
            .get(tenant)?
            .get(session)
    }

    /// Brings the partition's entry up to `end`, reading the records between what is known and
    /// the end; returns how many it read.
    pub(crate) async fn catch_up(
        &mut self,
        backends: &Backends,
        partition: u32,
        projected_to: u64,
        end: u64,
    ) -> Result<u64, IngestError> {
        let backend = |e: &dyn std::fmt::Display| IngestError::Backend(e.to_string());
        let tail = self.partitions.entry(partition).or_default();
        for by_session in tail.sessions.values_mut() {
            by_session.retain(|_, s| s.last_offset >= projected_to);
        }
        tail.sessions.retain(|_, by_session| !by_session.is_empty());
        tail.ids = tail
            .sessions
            .values()
            .flat_map(HashMap::values)
            .map(|s| s.ids.len())
            .sum();
        let mut from = tail.scanned_to.max(projected_to);
        let start = from;
        while from < end {
            let records = backends
                .log
                .read(partition, from, 1000)
                .await
                .map_err(|e| backend(&e))?;
            let Some(last) = records.last() else { break };
            from = last.offset + 1;
            for r in &records {
                // Undecodable records are the projector's to set aside; they carry no seq. A
                // sealed record is opened with its key, so a re-send compares with it as with a
                // plain one; one that does not open (its session forgotten) is known by id.
                let Ok(record) = backends.codec.avro().decode_record(&r.value) else {
                    continue;
                };
                let opened = match record {
                    Record::Plain(event) => Ok(event),
                    sealed => backends.codec.decode(&r.value).await.map_err(|_| sealed),
                };
                match opened {
                    Ok(event) => {
                        let sha = crate::conflict::content_sha256(&event);
                        tail.add(&event, Some(sha), r.offset);
                    }
                    Err(record) => {
                        let accepted = Accepted {
                            seq: record.seq().unwrap_or(0),
                            content_sha256: None,
                        };
                        let (tenant, session) = (record.tenant_id(), record.session_id());
                        tail.add_ids(tenant, session, record.event_id(), accepted, r.offset);
                    }
                }
            }
        }
        tail.scanned_to = from.max(tail.scanned_to);
        Ok(from - start)
    }

    /// Records this process's own appends, when they follow what is known.
    pub(crate) fn appended<'a>(
        &mut self,
        appended: impl Iterator<Item = ((&'a Event, &'a String), &'a strata_log::Position)>,
    ) {
        for ((event, sha), pos) in appended {
            let tail = self.partitions.entry(pos.partition).or_default();
            if tail.scanned_to == pos.offset {
                tail.add(event, Some(sha.clone()), pos.offset);
                tail.scanned_to = pos.offset + 1;
            }
            if tail.ids > Self::MAX_IDS {
                *tail = PartitionTail::default();
            }
        }
    }
}
