//! Strata's domain core: the canonical event model, the projection fold and
//! the assembly policy. Everything here is pure: no I/O, no clocks, no randomness, so
//! the same log always folds to the same state and the same snapshot always assembles to the same
//! bytes.

pub mod assembly;
pub mod compaction;
pub mod event;
mod json;
pub mod memory;
pub mod payload;
pub mod privacy;
pub mod projection;
pub mod tokens;

pub use event::{Causality, Event, FieldError, InvalidEvent, MAIN_BRANCH};
pub use payload::{EventType, Payload};

/// Lowercase hex SHA-256 of `bytes` (artifact addresses, payload hashes, assembly ids).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
