//! The ingest service: the only way events reach the log.
//!
//! For each batch, in this order, all or nothing:
//! 1. parse and validate every event, reporting every field error with its event and field;
//! 2. check that every event belongs to the caller's tenant, and that the tenant has room for
//!    the batch in its share of the events in flight (429 otherwise);
//! 3. store tool outputs over the threshold as content-addressed artifacts, replacing them in
//!    the event by `output_ref`, a preview, the hash, byte and token counts;
//! 4. then, holding the batch's sessions (batches of other sessions go on meanwhile): drop
//!    events whose `event_id` was already accepted with the same content (they are reported as
//!    duplicates, with the seq they got the first time), refuse an accepted `event_id` sent
//!    with other content, or twice in the batch with different content (409
//!    [`IngestError::IdConflict`], naming the fields that differ by hash, see [`conflict`];
//!    derived events excepted: services name them by what they derive from, and the first
//!    derivation stands),
//!    assign per-session `seq` and check `expected_seq` / explicit `seq` (409 on conflict);
//! 5. append the batch to the log (durable when this returns) and publish the new heads.
//!
//! Nothing is appended unless every event passed steps 1–4, and an artifact is always stored
//! before the event that refers to it. Event ids are checked for duplicates per tenant, but
//! batches are ordered per session: the same new event id sent in two different sessions at the
//! same moment may be accepted in both, and the projections keep the first (a client reusing an
//! id across sessions is in error either way).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use strata_core::payload::Payload;
use strata_core::tokens::{O200k, TokenCounter};
use strata_core::{Event, FieldError};
use strata_hot::{Accepted, Seeding};
use strata_log::NewRecord;
use strata_runtime::Backends;

mod admission;
pub mod conflict;
pub mod derive;
pub mod http;
pub mod inbound;
mod tail;
mod warnings;

use admission::{SessionLocks, TenantQuota};
use tail::TailIndex;

/// Default size above which a tool output is stored as an artifact.
pub const DEFAULT_ARTIFACT_THRESHOLD: usize = 8 * 1024;

/// Log header names (Kafka headers on the distributed backend).
pub mod headers {
    pub const EVENT_TYPE: &str = "event_type";
    pub const TENANT: &str = "tenant_id";
    pub const SCHEMA: &str = "schema_fingerprint";
}

/// Who is publishing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publisher {
    /// An API client: every event must belong to this tenant (a missing `tenant_id` is filled).
    Tenant(String),
    /// A trusted local operator (`strata import`) or an in-process service: events name their
    /// own tenant.
    Operator,
}

/// Errors of one event, by position in the batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventErrors {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    pub errors: Vec<FieldError>,
}

/// Why a batch was refused. Nothing of a refused batch is appended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// Some events are malformed.
    #[error("{} invalid event(s); first: event {} {}", .0.len(), .0[0].index, .0[0].errors.first().map(ToString::to_string).unwrap_or_default())]
    Invalid(Vec<EventErrors>),
    /// An event names another tenant than the caller's key.
    #[error("event {index} belongs to tenant {event_tenant:?}, but the api key is for tenant {key_tenant:?}")]
    WrongTenant {
        index: usize,
        event_tenant: String,
        key_tenant: String,
    },
    /// A tenant key wrote a type only Strata's services derive (memories, compactions, assembly
    /// records): a forged one would stand in for history or for the audit trail.
    #[error(
        "event {index} ({event_id}): {event_type} is written by Strata's services only, never \
         with a tenant api key"
    )]
    ServiceOnly {
        index: usize,
        event_id: String,
        event_type: &'static str,
    },
    /// `expected_seq` or an explicit `seq` does not match the session's head.
    #[error(
        "event {index} ({event_id}): session {session_id} is at seq {head}, but the event {what}"
    )]
    Conflict {
        index: usize,
        event_id: String,
        session_id: String,
        head: u64,
        what: String,
    },
    /// Event ids already accepted (or earlier in the batch) sent again with other content: a
    /// retry must re-send the same event, a new event needs an id of its own.
    #[error(
        "{} event(s) reuse an accepted event id with other content; first: event {} ({}) differs \
         in {}",
        .0.len(), .0[0].index, .0[0].event_id,
        .0[0].differs.iter().map(|d| d.field.as_str()).collect::<Vec<_>>().join(", ")
    )]
    IdConflict(Vec<IdConflict>),
    /// The event's session was forgotten (`strata forget`): its id is never taken again.
    #[error(
        "event {index} ({event_id}): session {session_id} was forgotten and its id cannot be \
         used again; start a new session"
    )]
    Forgotten {
        index: usize,
        event_id: String,
        session_id: String,
    },
    /// The tenant has as many events in flight as its share allows; nothing of the batch was
    /// acknowledged. Retrying once its batches in flight are done succeeds.
    #[error(
        "tenant {tenant:?} has {in_flight} events in flight, and this batch of {events} would \
         pass its share of {limit}; nothing of this batch was accepted; retry shortly"
    )]
    Throttled {
        tenant: String,
        in_flight: usize,
        events: usize,
        limit: usize,
    },
    /// A backend failed; nothing of the batch was acknowledged.
    #[error("{0}")]
    Backend(String),
    /// Ingest cannot safely assign seqs right now; nothing of the batch was acknowledged.
    /// Retrying later succeeds.
    #[error("{0}")]
    Unavailable(String),
    /// A tool output over the artifact threshold could not be stored in the blob store (full,
    /// or unreachable); nothing of the batch was acknowledged. [`strata_blob::Error::is_no_space`]
    /// tells a full store apart.
    #[error(
        "event {index} ({event_id}): its tool output ({bytes} bytes) could not be stored as an \
         artifact: {source}"
    )]
    Artifact {
        index: usize,
        event_id: String,
        bytes: usize,
        #[source]
        source: strata_blob::Error,
    },
}

/// One event of a batch whose id was accepted before with other content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdConflict {
    pub index: usize,
    pub event_id: String,
    /// The fields that differ, by hash; a single `event` entry when only the whole stored
    /// event's hash is at hand.
    pub differs: Vec<conflict::FieldDiff>,
}

/// What happened to one event of an accepted batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub event_id: String,
    /// `accepted` or `duplicate`.
    pub status: &'static str,
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Set when the tool output was stored as an artifact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<String>,
    /// What was accepted but looks wrong (see the `warnings` module): a session that does not
    /// start with `SessionStarted`, a tool result whose call is not open on the log.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Options of ingest.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Tool outputs larger than this many bytes become artifacts.
    pub artifact_threshold: usize,
    /// The projector's consumer group, whose offsets in the projection store say how far the
    /// projections reach on each partition.
    pub projector_group: String,
    /// Most log records read to recover a session head the hot state lost (see
    /// [`Ingestor::ingest`]); beyond it the batch is refused until the projector catches up.
    pub max_head_recovery_records: u64,
    /// How long a tenant's batches wait (refused as unavailable) after the hot state lost its
    /// heads (a flushed or restarted Redis) before any head is recovered from the log: longer
    /// than an append can take, so that appends other ingest replicas reserved before the loss
    /// are on the log by then (see [`strata_hot::HotState::seed_log_head`]). It must exceed the
    /// log's delivery timeout (Kafka: `delivery_timeout_ms`, 30 s by default). Zero is safe with
    /// a single ingest replica only (it serialises its own reservations and appends).
    pub hot_loss_settle: std::time::Duration,
    /// Per tenant, how tool outputs without a privacy class are classed: stamped into each
    /// `SessionStarted` (as a floor under the platform's own `privacy` rule), so the log carries
    /// it and every service folds it alike.
    pub privacy_defaults: BTreeMap<String, strata_core::privacy::PrivacyDefaults>,
    /// Most events one tenant key may have in flight through this process at once (0: no
    /// limit); a batch beyond it is refused with [`IngestError::Throttled`] instead of queueing
    /// in front of the other tenants. A batch alone always passes. Services are not limited.
    pub max_tenant_events_in_flight: usize,
}

/// Default of [`IngestOptions::max_tenant_events_in_flight`]: two full batches.
pub const DEFAULT_MAX_TENANT_EVENTS_IN_FLIGHT: usize = 2 * http::MAX_BATCH_EVENTS;

/// Default of [`IngestOptions::hot_loss_settle`]: the Kafka log's default delivery timeout
/// (30 s) and a margin.
pub const DEFAULT_HOT_LOSS_SETTLE: std::time::Duration = std::time::Duration::from_secs(35);

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            artifact_threshold: DEFAULT_ARTIFACT_THRESHOLD,
            projector_group: strata_runtime::PROJECTOR_GROUP.into(),
            max_head_recovery_records: 200_000,
            hot_loss_settle: DEFAULT_HOT_LOSS_SETTLE,
            privacy_defaults: BTreeMap::new(),
            max_tenant_events_in_flight: DEFAULT_MAX_TENANT_EVENTS_IN_FLIGHT,
        }
    }
}

/// The refusal while a tenant's heads settle after the hot state lost them.
fn settling(tenant: &str, left: std::time::Duration) -> IngestError {
    IngestError::Unavailable(format!(
        "the hot state lost the session heads of tenant {tenant:?} (Redis flushed or restarted); \
         they are recovered from the log once appends in flight have settled: retry in {:.1} s",
        left.as_secs_f64()
    ))
}

/// A session's head as the hot state had it, or as recovered from the projections and the log.
#[derive(Debug, Clone, Default)]
struct Head {
    /// The value in the hot state (`None`: absent), for the compare-and-set.
    cached: Option<u64>,
    /// The next seq is `seq + 1`.
    seq: u64,
    /// When recovered: events of the session on the log beyond the projections, by event id.
    unprojected: HashMap<String, Accepted>,
}

/// The ingest pipeline over a set of backends.
#[derive(Debug)]
pub struct Ingestor {
    backends: Backends,
    options: IngestOptions,
    /// Serialise seq assignment and append per session within this process (across processes
    /// the hot state's compare-and-set on the session head guards `seq`).
    sessions: SessionLocks,
    quota: TenantQuota,
    /// What this process knows of the log beyond the projections.
    tail: tokio::sync::Mutex<TailIndex>,
}

impl Ingestor {
    pub fn new(backends: Backends, options: IngestOptions) -> Self {
        Self {
            backends,
            quota: TenantQuota::new(options.max_tenant_events_in_flight),
            options,
            sessions: SessionLocks::new(),
            tail: tokio::sync::Mutex::new(TailIndex::default()),
        }
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// Parses and ingests a batch of JSON events (each may carry `expected_seq`).
    pub async fn ingest_json(
        &self,
        publisher: &Publisher,
        values: Vec<Value>,
    ) -> Result<Vec<Outcome>, IngestError> {
        let default_tenant = match publisher {
            Publisher::Tenant(t) => Some(t.as_str()),
            Publisher::Operator => None,
        };
        let mut parsed = Vec::with_capacity(values.len());
        let mut invalid = Vec::new();
        for (index, mut value) in values.into_iter().enumerate() {
            let mut errors = Vec::new();
            let expected = match value.as_object_mut().and_then(|o| o.remove("expected_seq")) {
                None | Some(Value::Null) => None,
                Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
                Some(_) => {
                    errors.push(FieldError::new(
                        "expected_seq",
                        "expected a non-negative integer (the session's current head seq)",
                    ));
                    None
                }
            };
            // Named back to the client as sent, but never at length.
            let event_id = value
                .get("event_id")
                .and_then(Value::as_str)
                .map(|id| strata_core::projection::truncate_chars(id, 200));
            match Event::from_json(value, default_tenant) {
                Ok(e) if errors.is_empty() => parsed.push((e, expected)),
                Ok(_) => invalid.push(EventErrors {
                    index,
                    event_id,
                    errors,
                }),
                Err(e) => {
                    errors.extend(e.0);
                    invalid.push(EventErrors {
                        index,
                        event_id,
                        errors,
                    });
                }
            }
        }
        if !invalid.is_empty() {
            return Err(IngestError::Invalid(invalid));
        }
        self.ingest(publisher, parsed).await
    }

    /// Ingests parsed events, each with an optional `expected_seq`.
    #[tracing::instrument(name = "ingest.batch", skip_all, fields(events = events.len() as i64))]
    pub async fn ingest(
        &self,
        publisher: &Publisher,
        mut events: Vec<(Event, Option<u64>)>,
    ) -> Result<Vec<Outcome>, IngestError> {
        // Events built in code (the services', an importer's) are held to the ids parsed ones
        // are: an event on the log must always read back.
        let unreadable: Vec<EventErrors> = events
            .iter()
            .enumerate()
            .filter_map(|(index, (e, _))| {
                let errors = strata_core::event::check_ids(e);
                (!errors.is_empty()).then(|| EventErrors {
                    index,
                    event_id: Some(strata_core::projection::truncate_chars(&e.event_id, 200)),
                    errors,
                })
            })
            .collect();
        if !unreadable.is_empty() {
            return Err(IngestError::Invalid(unreadable));
        }
        let mut _permit = None;
        if let Publisher::Tenant(key_tenant) = publisher {
            for (index, (e, _)) in events.iter().enumerate() {
                if &e.tenant_id != key_tenant {
                    return Err(IngestError::WrongTenant {
                        index,
                        event_tenant: e.tenant_id.clone(),
                        key_tenant: key_tenant.clone(),
                    });
                }
                if e.is_derived() {
                    return Err(IngestError::ServiceOnly {
                        index,
                        event_id: e.event_id.clone(),
                        event_type: e.event_type().as_str(),
                    });
                }
            }
            let cited: Vec<EventErrors> = events
                .iter()
                .enumerate()
                .filter_map(|(index, (e, _))| ingest_only_fields(index, e))
                .collect();
            if !cited.is_empty() {
                return Err(IngestError::Invalid(cited));
            }
            let permit = self
                .quota
                .acquire(key_tenant, events.len())
                .map_err(|in_flight| IngestError::Throttled {
                    tenant: key_tenant.clone(),
                    in_flight,
                    events: events.len(),
                    limit: self.quota.limit(),
                })?;
            _permit = Some(permit);
        }
        let backend = |e: &dyn std::fmt::Display| IngestError::Backend(e.to_string());
        let b = &self.backends;

        // The heavy work first, before waiting for any other batch: large outputs become
        // artifacts (hashed, counted, previewed) before the events that refer to them are
        // appended. Nothing is reserved yet: a refusal here leaves no trace but orphan artifacts,
        // which are content-addressed and reused when the batch is sent again.
        let mut artifact_uris: Vec<Option<String>> = Vec::with_capacity(events.len());
        for (index, (event, _)) in events.iter_mut().enumerate() {
            self.stamp_privacy(event);
            artifact_uris.push(self.offload_output(index, event).await?);
        }

        // From here to the append, per session: batches of other sessions go on meanwhile.
        let _sessions = self
            .sessions
            .lock(
                events
                    .iter()
                    .map(|(e, _)| (e.tenant_id.as_str(), e.session_id.as_str())),
            )
            .await;

        // What a re-sent event id is compared by.
        let sent: Vec<String> = events
            .iter()
            .map(|(e, _)| conflict::content_sha256(e))
            .collect();
        // Duplicates: earlier in this batch, in the hot state, or already projected.
        let mut known = self.known_ids(&events).await?;

        // Session heads. A head the hot state lost is recovered from the projections and the
        // log; the events found on the log beyond the projections also answer for duplicates.
        let mut heads: HashMap<(String, String), Head> = HashMap::new();
        for (e, _) in &events {
            let skey = (e.tenant_id.clone(), e.session_id.clone());
            if let std::collections::hash_map::Entry::Vacant(slot) = heads.entry(skey) {
                slot.insert(self.head_of(&e.tenant_id, &e.session_id).await?);
            }
        }
        for (e, _) in &events {
            let id_key = (e.tenant_id.clone(), e.event_id.clone());
            if known.contains_key(&id_key) {
                continue;
            }
            let head = &heads[&(e.tenant_id.clone(), e.session_id.clone())];
            if let Some(accepted) = head.unprojected.get(&e.event_id) {
                known.insert(id_key, accepted.clone());
            }
        }

        // Sequence numbers.
        let heads_before: HashMap<(String, String), u64> =
            heads.iter().map(|(k, h)| (k.clone(), h.seq)).collect();
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(events.len());
        let mut fresh: Vec<(usize, Event)> = Vec::new();
        let mut conflicts: Vec<IdConflict> = Vec::new();
        // Ids new in this batch: the seq each got and the index of its event.
        let mut seen_in_batch: HashMap<(String, String), (u64, usize)> = HashMap::new();
        for (index, (mut event, expected)) in events.into_iter().enumerate() {
            let id_key = (event.tenant_id.clone(), event.event_id.clone());
            let resolved = match (seen_in_batch.get(&id_key), known.get(&id_key)) {
                // A service's derivation under an id already taken: the first one stands.
                (Some(&(seq, first)), _) if sent[first] == sent[index] || event.is_derived() => {
                    Some(Resolution::Same(seq))
                }
                (Some(&(_, first)), _) => {
                    let earlier = fresh
                        .iter()
                        .find(|(slot, _)| *slot == first)
                        .map(|(_, e)| e)
                        .expect("a new id of this batch is among its fresh events");
                    let differs = conflict::differing_fields(earlier, &event);
                    Some(Resolution::Differs(differs))
                }
                (None, Some(k)) => Some(self.resolve(&event, &sent[index], k).await?),
                (None, None) => None,
            };
            match resolved {
                Some(Resolution::Same(seq)) => {
                    outcomes.push(duplicate(&event.event_id, seq));
                    continue;
                }
                Some(Resolution::Differs(differs)) => {
                    // The batch is refused below; the rest is still checked, to name every one.
                    conflicts.push(IdConflict {
                        index,
                        event_id: event.event_id,
                        differs,
                    });
                    continue;
                }
                None => {}
            }
            let skey = (event.tenant_id.clone(), event.session_id.clone());
            let head = &mut heads.get_mut(&skey).expect("every session has a head").seq;
            if let Some(expected) = expected {
                if expected != *head {
                    return Err(IngestError::Conflict {
                        index,
                        event_id: event.event_id,
                        session_id: event.session_id,
                        head: *head,
                        what: format!("expected seq {expected}"),
                    });
                }
            }
            match event.seq {
                Some(seq) if seq != *head + 1 => {
                    return Err(IngestError::Conflict {
                        index,
                        event_id: event.event_id,
                        session_id: event.session_id,
                        head: *head,
                        what: format!("claims seq {seq} (the next seq is {})", *head + 1),
                    })
                }
                _ => {}
            }
            *head += 1;
            event.seq = Some(*head);
            seen_in_batch.insert(id_key, (*head, index));
            outcomes.push(Outcome {
                event_id: event.event_id.clone(),
                status: "accepted",
                seq: *head,
                partition: None,
                offset: None,
                output_ref: artifact_uris[index].take(),
                warnings: Vec::new(),
            });
            fresh.push((index, event));
        }
        if !conflicts.is_empty() {
            return Err(IngestError::IdConflict(conflicts));
        }
        if fresh.is_empty() {
            strata_runtime::metrics::EVENTS_DUPLICATE.add(outcomes.len() as u64);
            return Ok(outcomes);
        }

        // Reserve the heads, append, publish.
        let mut reserved: Vec<(String, String, Option<u64>)> = Vec::new();
        for ((tenant, session), head) in &heads {
            let (old, new) = (&head.cached, &head.seq);
            if *new == old.unwrap_or(0) {
                continue; // nothing new for this session (only duplicates)
            }
            let ok = b
                .hot
                .compare_and_set_log_head(tenant, session, *old, *new)
                .await
                .map_err(|e| backend(&e))?;
            if !ok {
                self.release(&reserved, &heads).await;
                return Err(IngestError::Conflict {
                    index: 0,
                    event_id: String::new(),
                    session_id: session.clone(),
                    head: old.unwrap_or(0),
                    what: "raced with another writer; retry".into(),
                });
            }
            reserved.push((tenant.clone(), session.clone(), *old));
        }
        let mut records = Vec::with_capacity(fresh.len());
        let fingerprint = b.codec.avro().fingerprint_hex().into_bytes();
        let mut keys: HashMap<(&str, &str), Option<Arc<strata_codec::DataKey>>> = HashMap::new();
        let mut sessions: Vec<(&str, &str)> = fresh
            .iter()
            .map(|(_, e)| (e.tenant_id.as_str(), e.session_id.as_str()))
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        if let Err(e) = b.codec.prepare_sealing_keys(&sessions).await {
            // Only a shortcut: each session's key is asked for below, and that says what failed.
            tracing::debug!(error = %e, "making a batch's data keys at once failed");
        }
        for (slot, event) in &fresh {
            let session = (event.tenant_id.as_str(), event.session_id.as_str());
            let key = match keys.get(&session) {
                Some(key) => Ok(key.clone()),
                None => b.codec.sealing_key(session.0, session.1).await,
            };
            let encoded = key.and_then(|key| {
                let encoded = b.codec.encode_with(event, key.as_deref());
                keys.insert(session, key);
                encoded
            });
            let value = match encoded {
                Ok(v) => v,
                Err(e) => {
                    self.release(&reserved, &heads).await;
                    return Err(match e {
                        strata_keys::Error::Codec(strata_codec::Error::TooLarge { bytes, max }) => {
                            IngestError::Invalid(vec![EventErrors {
                                index: *slot,
                                event_id: Some(event.event_id.clone()),
                                errors: vec![FieldError::new(
                                    "payload",
                                    format!(
                                        "the event is {bytes} bytes as a log record, more than \
                                         {max}; send large tool outputs as `output` (stored as \
                                         an artifact) and keep other fields small"
                                    ),
                                )],
                            }])
                        }
                        strata_keys::Error::Forgotten { session_id, .. } => {
                            IngestError::Forgotten {
                                index: *slot,
                                event_id: event.event_id.clone(),
                                session_id,
                            }
                        }
                        e => backend(&e),
                    });
                }
            };
            records.push(NewRecord {
                key: event.session_id.as_bytes().to_vec(),
                headers: vec![
                    (
                        headers::EVENT_TYPE.into(),
                        event.event_type().as_str().as_bytes().to_vec(),
                    ),
                    (headers::TENANT.into(), event.tenant_id.as_bytes().to_vec()),
                    (headers::SCHEMA.into(), fingerprint.clone()),
                ],
                value,
                timestamp_ms: event.timestamp.timestamp_millis(),
            });
        }
        let positions = match b.log.append(records).await {
            Ok(p) => p,
            Err(e) => {
                // Some records may be on the log all the same (a broker that timed out after
                // writing them): giving the seqs back could hand them out twice. The heads are
                // forgotten instead, and the next batch recovers them from the log.
                self.forget(&reserved, &heads).await;
                return Err(backend(&e));
            }
        };
        self.tail.lock().await.appended(
            fresh
                .iter()
                .map(|(slot, e)| (e, &sent[*slot]))
                .zip(&positions),
        );
        let mut remembered: BTreeMap<String, Vec<(String, Accepted)>> = BTreeMap::new();
        for ((slot, event), pos) in fresh.iter().zip(positions) {
            outcomes[*slot].partition = Some(pos.partition);
            outcomes[*slot].offset = Some(pos.offset);
            let accepted = Accepted {
                seq: event.seq.unwrap_or(0),
                content_sha256: Some(sent[*slot].clone()),
            };
            remembered
                .entry(event.tenant_id.clone())
                .or_default()
                .push((event.event_id.clone(), accepted));
        }
        for (slot, warning) in warnings::of_batch(b, &fresh, &heads_before).await {
            outcomes[slot].warnings.push(warning);
        }
        let accepted = fresh.len() as u64;
        strata_runtime::metrics::EVENTS_ACCEPTED.add(accepted);
        strata_runtime::metrics::EVENTS_DUPLICATE.add(outcomes.len() as u64 - accepted);
        for (tenant, ids) in remembered {
            // The events are durable; failing to cache their ids only costs a store lookup.
            if let Err(e) = b.hot.remember_accepted(&tenant, &ids).await {
                tracing::warn!(error = %e, "could not cache accepted event ids");
            }
        }
        Ok(outcomes)
    }

    /// Forgets reserved heads after an append whose outcome is unknown, so that the next batch
    /// of those sessions recovers its head from the projections and the log (see
    /// `head_of`). If the hot state cannot forget them either, they stay reserved:
    /// the seqs are skipped, never handed out twice.
    async fn forget(
        &self,
        reserved: &[(String, String, Option<u64>)],
        heads: &HashMap<(String, String), Head>,
    ) {
        for (tenant, session, _) in reserved {
            let new = heads[&(tenant.clone(), session.clone())].seq;
            if let Err(e) = self
                .backends
                .hot
                .forget_log_head(tenant, session, new)
                .await
            {
                tracing::warn!(error = %e, session = %session,
                    "could not forget a session head after a failed append; its seqs are skipped");
            }
        }
    }

    /// Gives back reserved heads when nothing was appended. A head that was absent before is
    /// forgotten again rather than left reserved, which would skip its seqs.
    async fn release(
        &self,
        reserved: &[(String, String, Option<u64>)],
        heads: &HashMap<(String, String), Head>,
    ) {
        for (tenant, session, old) in reserved {
            let new = heads[&(tenant.clone(), session.clone())].seq;
            let hot = &self.backends.hot;
            // Best effort: a head left reserved only skips seqs, it never repeats one.
            let _ = match old {
                Some(old) => {
                    hot.compare_and_set_log_head(tenant, session, Some(new), *old)
                        .await
                }
                None => hot.forget_log_head(tenant, session, new).await,
            };
        }
    }

    /// The session's head: the hot state's, or, when the hot state does not have it (a new
    /// session, an expired key, a flushed Redis), recovered without trusting the projections to
    /// be current: the projector's offset on the session's partition is read first, then the
    /// session's fold (at least that current), then every record of the partition from that
    /// offset to the end of the log. The head is the highest seq among them, and the events found
    /// on the log are returned for the duplicate check. A lagging projector can therefore never
    /// make ingest hand out a seq twice.
    async fn head_of(&self, tenant: &str, session: &str) -> Result<Head, IngestError> {
        let backend = |e: &dyn std::fmt::Display| IngestError::Backend(e.to_string());
        let b = &self.backends;
        if let Some(h) = b
            .hot
            .log_head(tenant, session)
            .await
            .map_err(|e| backend(&e))?
        {
            return Ok(Head {
                cached: Some(h),
                seq: h,
                unprojected: HashMap::new(),
            });
        }
        let partition = b.log.partition_for_key(session.as_bytes());
        let projected_to = b
            .store
            .offsets(&self.options.projector_group)
            .await
            .map_err(|e| backend(&e))?
            .get(&partition)
            .copied()
            .unwrap_or(0);
        let mut seq = b
            .store
            .session_fold(tenant, session)
            .await
            .map_err(|e| backend(&e))?
            .map(|f| f.head_seq)
            .unwrap_or(0);
        let end = b
            .log
            .end_offsets()
            .await
            .map_err(|e| backend(&e))?
            .get(partition as usize)
            .copied()
            .unwrap_or(0);
        // Held while the log is read, so two recoveries on this partition read it once.
        let mut tail = self.tail.lock().await;
        if end.saturating_sub(projected_to.max(tail.scanned_to(partition)))
            > self.options.max_head_recovery_records
        {
            return Err(IngestError::Unavailable(format!(
                "the head of session {session:?} is not in the hot state and the projections are \
                 {} records behind the log on partition {partition}; retry once the projector \
                 has caught up",
                end.saturating_sub(projected_to)
            )));
        }
        let behind = tail.catch_up(b, partition, projected_to, end).await?;
        if behind > 0 {
            tracing::debug!(
                partition,
                records = behind,
                "read the log beyond the projections"
            );
        }
        let mut unprojected = HashMap::new();
        if let Some(known) = tail.session(partition, tenant, session) {
            seq = seq.max(known.seq);
            unprojected = known.ids.clone();
        }
        drop(tail);
        // Seed the hot state so the compare-and-set has something to compare with — unless the
        // hot state lost the tenant's heads since they were last recovered: then what other
        // replicas reserved just before the loss may not be on the log yet, and recovery waits
        // until it is (see `HotState::seed_log_head`).
        let mut restored = false;
        let cached = loop {
            match b
                .hot
                .seed_log_head(tenant, session, seq)
                .await
                .map_err(|e| backend(&e))?
            {
                Seeding::Seeded => break (seq > 0).then_some(seq),
                Seeding::Present(now) => {
                    // Another writer seeded (and maybe advanced) it meanwhile: use its value.
                    return Ok(Head {
                        cached: Some(now),
                        seq: now,
                        unprojected,
                    });
                }
                Seeding::Settling(left) => return Err(settling(tenant, left)),
                Seeding::Lost if !restored => {
                    restored = true;
                    // A tenant with nothing projected and nothing on the log tail has no append
                    // to wait for.
                    // One row tells: the tenant's whole session list is not needed.
                    let has_events = seq > 0
                        || !b
                            .store
                            .sessions_page(tenant, None, 1)
                            .await
                            .map_err(|e| backend(&e))?
                            .is_empty();
                    let settle = if has_events {
                        self.options.hot_loss_settle
                    } else {
                        std::time::Duration::ZERO
                    };
                    let left = b
                        .hot
                        .restore_heads(tenant, settle)
                        .await
                        .map_err(|e| backend(&e))?;
                    tracing::warn!(
                        tenant,
                        settle_ms = settle.as_millis() as u64,
                        "the hot state lost this tenant's session heads (Redis flushed or \
                         restarted): recovering them from the log once appends in flight have \
                         settled"
                    );
                    if !left.is_zero() {
                        return Err(settling(tenant, left));
                    }
                }
                Seeding::Lost => {
                    return Err(IngestError::Unavailable(
                        "the hot state keeps losing its data; retry".into(),
                    ))
                }
            }
        };
        tracing::debug!(
            tenant,
            session,
            seq,
            projected_to,
            end,
            "recovered a session head missing from the hot state"
        );
        Ok(Head {
            cached,
            seq,
            unprojected,
        })
    }

    /// The event ids of the batch already accepted, as the hot state or the projections know
    /// them (a projected one with seq 0 and no hash: it is read back when compared).
    async fn known_ids(
        &self,
        events: &[(Event, Option<u64>)],
    ) -> Result<HashMap<(String, String), Accepted>, IngestError> {
        let backend = |e: &dyn std::fmt::Display| IngestError::Backend(e.to_string());
        let b = &self.backends;
        let mut by_tenant: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (e, _) in events {
            by_tenant
                .entry(e.tenant_id.as_str())
                .or_default()
                .push(e.event_id.clone());
        }
        let mut known = HashMap::new();
        for (tenant, ids) in &by_tenant {
            let mut misses = Vec::new();
            for id in ids {
                match b
                    .hot
                    .accepted_event(tenant, id)
                    .await
                    .map_err(|e| backend(&e))?
                {
                    Some(a) => {
                        known.insert(((*tenant).to_owned(), id.clone()), a);
                    }
                    None => misses.push(id.clone()),
                }
            }
            if misses.is_empty() {
                continue;
            }
            let found = b
                .store
                .projected_event_ids(tenant, &misses)
                .await
                .map_err(|e| backend(&e))?;
            for id in found {
                let unknown = Accepted {
                    seq: 0,
                    content_sha256: None,
                };
                known.insert(((*tenant).to_owned(), id), unknown);
            }
        }
        Ok(known)
    }

    /// Whether `event`, whose id was accepted before, is that event again (`sent` is its
    /// content hash): by the hash the hot state kept, else by the stored event read back.
    async fn resolve(
        &self,
        event: &Event,
        sent: &str,
        known: &Accepted,
    ) -> Result<Resolution, IngestError> {
        // Services derive ids from what they derive from (a compaction's cut, a memory's
        // source): derived again with other content (other rules, a later log), the first
        // derivation stands, as it did when every re-sent id was a duplicate.
        if known.content_sha256.as_deref() == Some(sent) || event.is_derived() {
            let seq = match known.seq {
                0 => self.seq_of(event).await.map_err(IngestError::Backend)?,
                seq => seq,
            };
            return Ok(Resolution::Same(seq));
        }
        if let Some(stored) = self.stored_event(event).await? {
            if conflict::content_sha256(&stored) == sent {
                return Ok(Resolution::Same(stored.seq.unwrap_or(known.seq)));
            }
            return Ok(Resolution::Differs(conflict::differing_fields(
                &stored, event,
            )));
        }
        // Not in the event's session's projections: in another session, or not projected yet.
        let whole = |stored_sha256| {
            let sent_sha256 = Some(sent.to_owned());
            let field = "event".to_owned();
            Resolution::Differs(vec![conflict::FieldDiff {
                field,
                stored_sha256,
                sent_sha256,
            }])
        };
        if let Some(stored) = &known.content_sha256 {
            return Ok(whole(Some(stored.clone())));
        }
        let elsewhere = self
            .backends
            .store
            .projected_event_ids(&event.tenant_id, std::slice::from_ref(&event.event_id))
            .await
            .map_err(|e| IngestError::Backend(e.to_string()))?;
        if !elsewhere.is_empty() {
            return Ok(whole(None));
        }
        Err(IngestError::Unavailable(format!(
            "event {} was accepted moments ago and is not projected yet, so a re-send cannot be \
             compared with it; retry shortly",
            event.event_id
        )))
    }

    /// The stored event of `event`'s session with `event`'s id, read back from the projections.
    async fn stored_event(&self, event: &Event) -> Result<Option<Event>, IngestError> {
        let backend = |e: &dyn std::fmt::Display| IngestError::Backend(e.to_string());
        let store = &self.backends.store;
        let (tenant, session) = (&event.tenant_id, &event.session_id);
        let Some(seq) = store
            .event_seq(tenant, session, &event.event_id)
            .await
            .map_err(|e| backend(&e))?
        else {
            return Ok(None);
        };
        let stored = store
            .events_between(tenant, session, seq.saturating_sub(1), seq, 1)
            .await
            .map_err(|e| backend(&e))?;
        Ok(stored.into_iter().find(|e| e.event_id == event.event_id))
    }

    async fn seq_of(&self, event: &Event) -> Result<u64, String> {
        self.backends
            .store
            .event_seq(&event.tenant_id, &event.session_id, &event.event_id)
            .await
            .map(|s| s.unwrap_or(0))
            .map_err(|e| e.to_string())
    }

    /// Writes the tenant's privacy rule into a `SessionStarted`, the stricter of it and the
    /// rule the event carries.
    fn stamp_privacy(&self, event: &mut Event) {
        use strata_core::privacy::{PrivacyDefaults, PRIVACY_FIELD};
        let Some(floor) = self.options.privacy_defaults.get(&event.tenant_id) else {
            return;
        };
        let Payload::SessionStarted(p) = &mut event.payload else {
            return;
        };
        // Validated already; an unparsable rule cannot reach here.
        let own = PrivacyDefaults::of_start(p).unwrap_or_default();
        let rule = own.stricter(floor);
        if let Ok(value) = serde_json::to_value(&rule) {
            p.extra.insert(PRIVACY_FIELD.to_owned(), value);
        }
    }

    /// Moves a large inline tool output (event `index` of the batch) to blob storage; returns
    /// the artifact URI.
    async fn offload_output(
        &self,
        index: usize,
        event: &mut Event,
    ) -> Result<Option<String>, IngestError> {
        let Payload::ToolCallFinished(p) = &mut event.payload else {
            return Ok(None);
        };
        let Some(output) = p.output.as_ref() else {
            return Ok(None);
        };
        if output.len() <= self.options.artifact_threshold {
            return Ok(None);
        }
        // The event is dropped when the store fails (the batch is refused), so the output can
        // move into the store without a copy.
        let output = p.output.take().expect("checked above");
        let bytes = output.len();
        // Counting tokens of a large text is milliseconds of CPU: off the async workers, which
        // serve the other tenants' requests meanwhile.
        let (output, tokens, preview) = tokio::task::spawn_blocking(move || {
            let tokens = O200k.count(&output);
            let preview = strata_core::assembly::preview(&output);
            (output, tokens, preview)
        })
        .await
        .map_err(|e| {
            IngestError::Backend(format!("counting a tool output's tokens failed: {e}"))
        })?;
        let stored = self
            .backends
            .blobs
            .put_artifact(&event.tenant_id, Bytes::from(output))
            .await
            .map_err(|source| IngestError::Artifact {
                index,
                event_id: event.event_id.clone(),
                bytes,
                source,
            })?;
        p.output_ref = Some(stored.uri.clone());
        p.output_preview = Some(preview);
        p.output_sha256 = Some(stored.sha256);
        p.output_bytes = Some(stored.bytes);
        p.output_tokens = Some(tokens);
        Ok(Some(stored.uri))
    }
}

/// The fields of a tool result only ingest writes, when it stores a large output: a client that
/// set them could cite another event's blob with no privacy class (laundering a restricted
/// output to a provider) or a made-up size (defeating the rehydration byte budget).
fn ingest_only_fields(index: usize, event: &Event) -> Option<EventErrors> {
    let Payload::ToolCallFinished(p) = &event.payload else {
        return None;
    };
    let errors: Vec<FieldError> = [
        ("output_ref", p.output_ref.is_some()),
        ("output_sha256", p.output_sha256.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(field, _)| {
        FieldError::new(
            format!("payload.{field}"),
            "set only by Strata's ingest when it stores a large output: send the output inline \
             (`output`) and ingest stores it",
        )
    })
    .collect();
    (!errors.is_empty()).then(|| EventErrors {
        index,
        event_id: Some(event.event_id.clone()),
        errors,
    })
}

/// What a re-sent event id turned out to be.
enum Resolution {
    /// The event accepted before, with this seq.
    Same(u64),
    /// Another event under the same id.
    Differs(Vec<conflict::FieldDiff>),
}

fn duplicate(event_id: &str, seq: u64) -> Outcome {
    Outcome {
        event_id: event_id.to_owned(),
        status: "duplicate",
        seq,
        partition: None,
        offset: None,
        output_ref: None,
        warnings: Vec::new(),
    }
}

/// Shared handle to an [`Ingestor`].
pub type SharedIngestor = Arc<Ingestor>;
