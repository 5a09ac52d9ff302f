//! Process-wide metrics in the Prometheus text format (`GET /metrics`). Labels are bounded:
//! never an event, session or tenant id.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
pub static DEAD_LETTERS: Counter = Counter::new(
    "strata_dead_letters_total",
    "Undecodable records set aside in the dead-letter queue.",
);
pub static ASSEMBLIES: Counter = Counter::new(
    "strata_assembler_assemblies_total",
    "Context bundles assembled.",
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
        &DEAD_LETTERS,
        &ASSEMBLIES,
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
}
