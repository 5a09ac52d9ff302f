//! Process-wide metrics in the Prometheus text format (`GET /metrics`). Labels are bounded:
//! never an event, session or tenant id.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use strata_log::{EventLog, Offsets};

/// A monotonically increasing counter.
#[derive(Debug)]
pub struct Counter {
    name: &'static str,
    help: &'static str,
    value: AtomicU64,
}

impl Counter {
    const fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            value: AtomicU64::new(0),
        }
    }

    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 10] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 2.0];

/// A latency histogram with fixed buckets.
#[derive(Debug)]
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    buckets: [AtomicU64; 10],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    const fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            buckets: [const { AtomicU64::new(0) }; 10],
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Records between each consumer group's position and the log's end, per partition: a gauge
/// labelled by group (a configured name) and partition.
#[derive(Debug)]
pub struct ConsumerLag {
    values: Mutex<BTreeMap<(String, u32), u64>>,
}

impl ConsumerLag {
    const fn new() -> Self {
        Self {
            values: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn set(&self, group: &str, partition: u32, lag: u64) {
        self.lock().insert((group.to_owned(), partition), lag);
    }

    /// The lag last set, if any.
    pub fn get(&self, group: &str, partition: u32) -> Option<u64> {
        self.lock().get(&(group.to_owned(), partition)).copied()
    }

    /// Forgets partitions this process no longer consumes for `group` (another member reports
    /// them).
    pub fn forget(&self, group: &str, partitions: &[u32]) {
        let mut values = self.lock();
        for p in partitions {
            values.remove(&(group.to_owned(), *p));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u32), u64>> {
        self.values.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP strata_consumer_lag_records Records between a consumer group's position and \
             the end of the log, per partition."
        );
        let _ = writeln!(out, "# TYPE strata_consumer_lag_records gauge");
        for ((group, partition), lag) in self.lock().iter() {
            let group = group.replace('\\', "\\\\").replace('"', "\\\"");
            let _ = writeln!(
                out,
                "strata_consumer_lag_records{{group=\"{group}\",partition=\"{partition}\"}} {lag}"
            );
        }
    }
}

pub static CONSUMER_LAG: ConsumerLag = ConsumerLag::new();

/// Measures a consumer's lag against the log's end offsets, at most once per `every` (reading
/// the end offsets is a broker round trip on Kafka).
#[derive(Debug)]
pub struct LagReporter {
    group: String,
    every: Duration,
    last: Option<Instant>,
}

impl LagReporter {
    pub fn new(group: &str, every: Duration) -> Self {
        Self {
            group: group.to_owned(),
            every,
            last: None,
        }
    }

    /// Sets the lag of every partition in `positions` (next offset to read, per assigned
    /// partition) unless it was measured less than `every` ago. A failure to read the end
    /// offsets is logged and leaves the gauges as they were.
    pub async fn report(&mut self, log: &dyn EventLog, positions: &Offsets) {
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            return;
        }
        self.last = Some(Instant::now());
        match log.end_offsets().await {
            Ok(ends) => {
                for (&partition, &position) in positions {
                    if let Some(&end) = ends.get(partition as usize) {
                        CONSUMER_LAG.set(&self.group, partition, end.saturating_sub(position));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(group = %self.group, error = %e, "could not measure consumer lag")
            }
        }
    }

    /// Forgets revoked partitions.
    pub fn revoked(&self, partitions: &[u32]) {
        CONSUMER_LAG.forget(&self.group, partitions);
    }
}

pub static EVENTS_ACCEPTED: Counter = Counter::new(
    "strata_ingest_events_accepted_total",
    "Events appended to the log by ingest.",
);
pub static EVENTS_DUPLICATE: Counter = Counter::new(
    "strata_ingest_events_duplicate_total",
    "Re-sent events recognised by event_id and not appended again.",
);
pub static BATCHES_REJECTED: Counter = Counter::new(
    "strata_ingest_batches_rejected_total",
    "Ingest batches refused (invalid, wrong tenant, conflict, backend failure).",
);
pub static EVENTS_PROJECTED: Counter = Counter::new(
    "strata_projector_events_applied_total",
    "Events folded into the projections.",
);
pub static PROJECTOR_BATCHES: Counter = Counter::new(
    "strata_projector_batches_total",
    "Projector transactions committed.",
);
pub static PROJECTOR_FAILURES: Counter = Counter::new(
    "strata_projector_failures_total",
    "Projector batches that failed (a backend outage) and were retried after a backoff.",
);
pub static DEAD_LETTERS: Counter = Counter::new(
    "strata_dead_letters_total",
    "Undecodable records set aside in the dead-letter queue.",
);
pub static ASSEMBLIES: Counter = Counter::new(
    "strata_assembler_assemblies_total",
    "Context bundles assembled.",
);
pub static ASSEMBLIES_UNRECORDED: Counter = Counter::new(
    "strata_assembler_unrecorded_total",
    "Context bundles returned without their ContextBuilt record (the log or hot state failed).",
);
pub static PROJECTOR_BATCH_LATENCY: Histogram = Histogram::new(
    "strata_projector_batch_seconds",
    "Time to fold and commit one projector batch.",
);
pub static ASSEMBLY_LATENCY: Histogram = Histogram::new(
    "strata_assembler_assembly_seconds",
    "Time to assemble one context bundle (snapshot, policy, rendering).",
);

/// Every metric of this process in the Prometheus text format.
pub fn render() -> String {
    let mut out = String::new();
    for c in [
        &EVENTS_ACCEPTED,
        &EVENTS_DUPLICATE,
        &BATCHES_REJECTED,
        &EVENTS_PROJECTED,
        &PROJECTOR_BATCHES,
        &PROJECTOR_FAILURES,
        &DEAD_LETTERS,
        &ASSEMBLIES,
        &ASSEMBLIES_UNRECORDED,
    ] {
        let _ = writeln!(out, "# HELP {} {}", c.name, c.help);
        let _ = writeln!(out, "# TYPE {} counter", c.name);
        let _ = writeln!(out, "{} {}", c.name, c.get());
    }
    for h in [&PROJECTOR_BATCH_LATENCY, &ASSEMBLY_LATENCY] {
        let _ = writeln!(out, "# HELP {} {}", h.name, h.help);
        let _ = writeln!(out, "# TYPE {} histogram", h.name);
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}_bucket{{le=\"{bound}\"}} {}",
                h.name,
                h.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = h.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{}_bucket{{le=\"+Inf\"}} {count}", h.name);
        let _ = writeln!(
            out,
            "{}_sum {}",
            h.name,
            h.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{}_count {count}", h.name);
    }
    CONSUMER_LAG.render(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        ASSEMBLIES.add(2);
        ASSEMBLY_LATENCY.observe(Duration::from_micros(1500));
        let text = render();
        assert!(text.contains("# TYPE strata_assembler_assemblies_total counter"));
        assert!(text.contains("strata_assembler_assembly_seconds_bucket{le=\"0.002\"} 1"));
        assert!(text.contains("strata_assembler_assembly_seconds_bucket{le=\"0.001\"} 0"));
        assert!(text.contains("strata_assembler_assembly_seconds_count 1"));
    }

    #[tokio::test]
    async fn reports_lag_per_group_and_partition() {
        let tmp = tempfile::tempdir().unwrap();
        let log = strata_log::file::FileLog::open(
            tmp.path(),
            strata_log::FileLogOptions {
                partitions: 2,
                fsync: strata_log::FsyncPolicy::Never,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let records = (0..5)
            .map(|i| strata_log::NewRecord {
                key: b"k".to_vec(),
                headers: vec![],
                value: vec![i],
                timestamp_ms: 0,
            })
            .collect();
        let at = log.append(records).await.unwrap()[0].partition;
        let mut reporter = LagReporter::new("lag-\"test\"", Duration::from_secs(60));
        reporter
            .report(&log, &Offsets::from([(at, 2), (1 - at, 0)]))
            .await;
        assert_eq!(CONSUMER_LAG.get("lag-\"test\"", at), Some(3));
        assert_eq!(CONSUMER_LAG.get("lag-\"test\"", 1 - at), Some(0));
        // Within `every`, nothing is re-measured.
        reporter.report(&log, &Offsets::from([(at, 5)])).await;
        assert_eq!(CONSUMER_LAG.get("lag-\"test\"", at), Some(3));
        let text = render();
        assert!(
            text.contains(&format!(
                "strata_consumer_lag_records{{group=\"lag-\\\"test\\\"\",partition=\"{at}\"}} 3"
            )),
            "{text}"
        );
        reporter.revoked(&[at]);
        assert_eq!(CONSUMER_LAG.get("lag-\"test\"", at), None);
    }
}
