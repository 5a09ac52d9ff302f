//! The memory extractor (SPEC §6). In this version it consumes the log in its own consumer group, keeps
//! its offsets and counts what it sees; its rules come with the memory-and-compaction issue.

use std::future::Future;

use strata_runtime::follow::{follow_counting, CountsByType, FollowStats};
use strata_runtime::Backends;

/// The consumer group of the memory extractor.
pub const DEFAULT_GROUP: &str = "strata-memory";

/// Runs the memory extractor until `shutdown` resolves; returns what it consumed, by event type.
pub async fn run(
    backends: &Backends,
    group: &str,
    shutdown: impl Future<Output = ()>,
) -> Result<(FollowStats, CountsByType), strata_log::Error> {
    follow_counting(backends, group, shutdown).await
}
