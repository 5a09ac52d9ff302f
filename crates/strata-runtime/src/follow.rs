//! A plain consumer loop for services that read the log in their own group and keep their
//! offsets in the log's group offsets (the memory extractor and compactor).

use std::future::Future;
use std::time::Duration;

use strata_core::Event;

use crate::Backends;

/// Counts of what [`follow_log`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowStats {
    pub events: u64,
    pub undecodable: u64,
}

/// Consumes the log as group `group` until `shutdown` resolves, handing each decoded event to
/// `handle` and committing offsets after each batch is handled. Undecodable records go to the
/// dead-letter queue with the reason and are counted, never passed on silently.
pub async fn follow_log<F>(
    backends: &Backends,
    group: &str,
    shutdown: impl Future<Output = ()>,
    mut handle: F,
) -> Result<FollowStats, strata_log::Error>
where
    F: FnMut(&Event),
{
    let mut consumer = backends.log.subscribe(group).await?;
    let mut stats = FollowStats::default();
    let committed = backends.log.committed(group).await?;
    let mut positions = crate::Offsets::new();
    let mut lag = crate::metrics::LagReporter::new(group, Duration::from_secs(1));
    tokio::pin!(shutdown);
    loop {
        let polled = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            p = consumer.poll(1000, Duration::from_millis(200)) => p?,
        };
        for p in &polled.assigned {
            positions.insert(*p, committed.get(p).copied().unwrap_or(0));
        }
        for p in &polled.revoked {
            positions.remove(p);
        }
        lag.revoked(&polled.revoked);
        if polled.records.is_empty() {
            lag.report(backends.log.as_ref(), &positions).await;
            continue;
        }
        let mut offsets = crate::Offsets::new();
        for r in &polled.records {
            match backends.codec.decode(&r.value) {
                Ok(event) => {
                    stats.events += 1;
                    handle(&event);
                }
                Err(e) => {
                    stats.undecodable += 1;
                    let reason = format!("undecodable event: {e}");
                    backends.log.dead_letter(r, group, &reason).await?;
                    crate::metrics::DEAD_LETTERS.add(1);
                    tracing::error!(group, partition = r.partition, offset = r.offset, error = %e,
                        "undecodable record set aside in the dead-letter queue");
                }
            }
            offsets.insert(r.partition, r.offset + 1);
        }
        consumer.commit(&offsets).await?;
        positions.extend(offsets);
        lag.report(backends.log.as_ref(), &positions).await;
    }
    consumer.close().await?;
    tracing::info!(group, events = stats.events, "consumer stopped");
    Ok(stats)
}

/// Events seen, by event type.
pub type CountsByType = std::collections::BTreeMap<&'static str, u64>;

/// [`follow_log`] that only counts what it consumes, by event type: what a derived service does
/// before its rules exist.
pub async fn follow_counting(
    backends: &Backends,
    group: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<(FollowStats, CountsByType), strata_log::Error> {
    let mut by_type = CountsByType::new();
    let stats = follow_log(backends, group, shutdown, |event| {
        *by_type.entry(event.event_type().as_str()).or_default() += 1;
    })
    .await?;
    Ok((stats, by_type))
}
