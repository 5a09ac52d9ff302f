//! Replay, rebuild and verification: the log as the source of truth.
//!
//! - [`replay`]: runs recorded sessions through the pure fold and the assembler into a
//!   **scratch** projection set that production never reads, under the recorded assembly policy
//!   and optionally another one, and reports every model call point's bundle under both.
//! - [`rebuild`]: folds the log from offset 0 into a new, versioned projection set, catches up
//!   to the head, verifies it against the live set at the same offsets (row counts and content
//!   hash per table, content hash per session) and only then switches readers over by rewriting
//!   the data directory's store pointer; resumes where it stopped after a crash.
//!
//! - [`eval`]: scores the context at every model call point of recorded sessions against the
//!   response the model really gave (evidence recall), beside transcript replay and the other
//!   baselines.
//!
//! All read the log with [`strata_log::EventLog::read`], outside any consumer group, and never
//! append to it.

use std::path::PathBuf;

pub mod archive;
pub mod eval;
mod fold;
pub mod forget;
pub mod rebuild;
pub mod replay;
pub mod retention;
mod source;
pub mod verify;
pub mod workload;

pub use eval::{eval, EvalOptions, EvalReport, Evaluator};
pub use rebuild::{rebuild, RebuildOptions, RebuildReport};
pub use replay::{replay, ReplayOptions, ReplayReport, Selection};
pub use source::Progress;
pub use verify::{session_hash, Verification};

/// Errors of replay and rebuild.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The log failed.
    #[error(transparent)]
    Log(#[from] strata_log::Error),
    /// A projection store failed.
    #[error(transparent)]
    Store(#[from] strata_store::Error),
    /// Sealed records cannot be opened (the key store or the master key).
    #[error(transparent)]
    Keys(#[from] strata_keys::Error),
    /// The hot state failed.
    #[error(transparent)]
    Hot(#[from] strata_hot::Error),
    /// The blob store failed.
    #[error(transparent)]
    Blob(#[from] strata_blob::Error),
    /// A direct database operation failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A record on the log is not a decodable event.
    #[error("undecodable record at partition {partition} offset {offset}: {reason}")]
    Undecodable {
        /// The record's partition.
        partition: u32,
        /// The record's offset.
        offset: u64,
        /// Why it does not decode.
        reason: String,
    },
    /// A file operation failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The rebuilt set differs from the live one: readers were not switched.
    #[error("verification failed, readers not switched: {0}")]
    VerificationFailed(String),
    /// The request cannot be carried out as asked.
    #[error("{0}")]
    Invalid(String),
    /// A forget began and could not finish now; it is recorded as pending and finishes with
    /// `strata forget --resume`.
    #[error("{0}")]
    Pending(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io { path, source }
}
