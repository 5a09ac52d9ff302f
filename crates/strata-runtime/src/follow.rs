//! What a consumer that follows the log in its own group reports (the memory extractor and the
//! compactor run `strata_ingest::derive::run_deriving`).

/// Counts of what a following consumer saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowStats {
    pub events: u64,
    pub undecodable: u64,
}

/// Events seen, by event type (plus counters a service adds, such as `"appended"`).
pub type CountsByType = std::collections::BTreeMap<&'static str, u64>;
