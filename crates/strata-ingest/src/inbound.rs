//! The second way in: platforms that produce straight to Kafka.
//!
//! A direct producer does not write to the log: it writes Avro records of the canonical event
//! (`schemas/event.avsc`, single-object encoding) to its tenant's *inbound* topic
//! (`<topic>.inbound.<tenant>`, see [`strata_log::inbound_url`]). Ingest relays each tenant's
//! inbound topic to the log through the same path as `POST /v1/events` with that tenant's
//! authority: every event validated as over HTTP, duplicates dropped by `event_id`, `seq`
//! assigned per session (a `seq` the producer set must be the next one), large outputs stored
//! as artifacts, privacy stamped, the derived types and client-set artifact references refused.
//! The log keeps one writer per session and every guarantee HTTP gives.
//!
//! A record that can never be taken (undecodable, invalid, of another tenant, of a derived type,
//! a `seq` conflict) goes to the inbound topic's dead-letter queue with the reason, and the relay
//! moves on; while ingest cannot take records for a passing reason (a backend down, the hot
//! state settling, the tenant's share in flight) the relay retries with backoff and commits
//! nothing. Offsets are committed after the records are on the log (or set aside), so a crash
//! relays them again, and ingest answers them as duplicates.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use strata_log::{EventLog, FileLogOptions, LogRecord, Offsets};

use crate::{IngestError, Ingestor, Publisher};

/// The consumer group of the relay on every inbound topic.
pub const DEFAULT_GROUP: &str = "strata-ingest-inbound";

/// Most records relayed in one batch (ingest's batch cap).
const MAX_BATCH: usize = 1000;

/// First and longest wait before retrying a batch ingest could not take.
const RETRY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// Errors that stop a tenant's relay.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboundError {
    /// The inbound log failed (opening, polling, committing, setting a record aside).
    #[error("inbound log of tenant {tenant:?}: {source}")]
    Log {
        tenant: String,
        #[source]
        source: strata_log::Error,
    },
}

/// What a relay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboundStats {
    /// Records read from the inbound topic.
    pub records: u64,
    /// Events newly appended to the log.
    pub accepted: u64,
    /// Events the log had already (re-sent or re-read).
    pub duplicates: u64,
    /// Records set aside in the inbound dead-letter queue.
    pub dead_letters: u64,
}

/// Opens `tenant`'s inbound log beside the log at `log_url`.
pub async fn open_inbound(
    log_url: &str,
    tenant: &str,
    options: FileLogOptions,
) -> Result<Arc<dyn EventLog>, InboundError> {
    let err = |source| InboundError::Log {
        tenant: tenant.to_owned(),
        source,
    };
    let url = strata_log::inbound_url(log_url, tenant).map_err(err)?;
    strata_log::open(&url, options).await.map_err(err)
}

/// Relays `tenant`'s inbound log (`inbound`) to the log through `ingestor`, in consumer group
/// `group`, until `shutdown` resolves.
pub async fn relay(
    ingestor: &Ingestor,
    inbound: &dyn EventLog,
    tenant: &str,
    group: &str,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<InboundStats, InboundError> {
    let err = |source| InboundError::Log {
        tenant: tenant.to_owned(),
        source,
    };
    let mut consumer = inbound.subscribe(group).await.map_err(err)?;
    let mut stats = InboundStats::default();
    tokio::pin!(shutdown);
    tracing::info!(
        tenant,
        group,
        "relaying the tenant's inbound topic to the log"
    );
    loop {
        let polled = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            p = consumer.poll(MAX_BATCH, Duration::from_millis(200)) => p.map_err(err)?,
        };
        if polled.records.is_empty() {
            continue;
        }
        let mut offsets = Offsets::new();
        for r in &polled.records {
            offsets.insert(r.partition, r.offset + 1);
        }
        stats.records += polled.records.len() as u64;
        let relayed = relay_batch(
            ingestor,
            inbound,
            tenant,
            group,
            &polled.records,
            &mut shutdown,
        )
        .await?;
        let Some(batch) = relayed else {
            break; // asked to stop while retrying: nothing committed, relayed again on restart
        };
        stats.accepted += batch.accepted;
        stats.duplicates += batch.duplicates;
        stats.dead_letters += batch.dead_letters;
        consumer.commit(&offsets).await.map_err(err)?;
    }
    consumer.close().await.map_err(err)?;
    tracing::info!(tenant, ?stats, "inbound relay stopped");
    Ok(stats)
}

/// Relays one polled batch: decodes it, sets aside what can never be taken, and hands the rest
/// to ingest until it takes them. `None`: `shutdown` came first.
async fn relay_batch(
    ingestor: &Ingestor,
    inbound: &dyn EventLog,
    tenant: &str,
    group: &str,
    records: &[LogRecord],
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<Option<InboundStats>, InboundError> {
    let mut stats = InboundStats::default();
    let set_aside = |record, reason| set_aside(inbound, tenant, group, record, reason);
    // Decoded records, each with the record it came from.
    let mut pending: Vec<(&LogRecord, Value)> = Vec::with_capacity(records.len());
    for r in records {
        // Direct producers write plain records; ingest seals them on the way to the log.
        match ingestor.backends().codec.avro().decode(&r.value) {
            // Parsed again from JSON, so that it is validated exactly as an HTTP batch is.
            Ok(event) => pending.push((r, event.to_json())),
            Err(e) => {
                set_aside(r, format!("undecodable event: {e}")).await?;
                stats.dead_letters += 1;
            }
        }
    }
    let mut wait = RETRY.0;
    while !pending.is_empty() {
        let values: Vec<Value> = pending.iter().map(|(_, v)| v.clone()).collect();
        let publisher = Publisher::Tenant(tenant.to_owned());
        let refused = match ingestor.ingest_json(&publisher, values).await {
            Ok(outcomes) => {
                for o in &outcomes {
                    match o.status {
                        "accepted" => stats.accepted += 1,
                        _ => stats.duplicates += 1,
                    }
                }
                break;
            }
            Err(e) => e,
        };
        // Which records can never be taken, with why; the rest are tried again at once.
        let rejected: Vec<(usize, String)> = match &refused {
            IngestError::Invalid(events) => events
                .iter()
                .map(|e| {
                    let problems: Vec<String> = e.errors.iter().map(ToString::to_string).collect();
                    (e.index, format!("invalid event: {}", problems.join("; ")))
                })
                .collect(),
            IngestError::WrongTenant { index, .. }
            | IngestError::ServiceOnly { index, .. }
            | IngestError::Forgotten { index, .. } => vec![(*index, refused.to_string())],
            // Another event under an accepted id: the id is taken for good.
            IngestError::IdConflict(conflicts) => conflicts
                .iter()
                .map(|c| {
                    let fields: Vec<&str> = c.differs.iter().map(|d| d.field.as_str()).collect();
                    let reason = format!(
                        "event id {} was accepted before with other content (differs in {})",
                        c.event_id,
                        fields.join(", ")
                    );
                    (c.index, reason)
                })
                .collect(),
            // A `seq` the producer set that is not the session's next: never right later.
            IngestError::Conflict {
                index, event_id, ..
            } if !event_id.is_empty() => vec![(*index, refused.to_string())],
            _ => Vec::new(),
        };
        if rejected.is_empty() {
            tracing::warn!(tenant, error = %refused, retry_in_ms = wait.as_millis() as u64,
                "ingest could not take inbound records; retrying");
            tokio::select! {
                biased;
                _ = shutdown.as_mut() => return Ok(None),
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(RETRY.1);
            continue;
        }
        let mut drop_at: Vec<usize> = rejected.iter().map(|(i, _)| *i).collect();
        drop_at.sort_unstable();
        drop_at.dedup();
        for (index, reason) in rejected {
            if let Some((record, _)) = pending.get(index) {
                set_aside(record, reason).await?;
            }
        }
        stats.dead_letters += drop_at.len() as u64;
        for index in drop_at.into_iter().rev() {
            if index < pending.len() {
                pending.remove(index);
            }
        }
    }
    Ok(Some(stats))
}

/// Sets `record` aside in the inbound dead-letter queue with `reason`, durably.
async fn set_aside(
    inbound: &dyn EventLog,
    tenant: &str,
    group: &str,
    record: &LogRecord,
    reason: String,
) -> Result<(), InboundError> {
    tracing::warn!(tenant, partition = record.partition, offset = record.offset,
        reason = %reason, "inbound record set aside in the dead-letter queue");
    strata_runtime::metrics::DEAD_LETTERS.add(1);
    inbound
        .dead_letter(record, group, &reason)
        .await
        .map(drop)
        .map_err(|source| InboundError::Log {
            tenant: tenant.to_owned(),
            source,
        })
}
