//! Data keys for the sealed log (crypto-shredding; `docs/design/forgetting.md`).
//!
//! Every session has a data key (AES-256) that seals its events before they are appended
//! ([`RecordCodec::encode`]); every consumer opens them with it ([`RecordCodec::decode`]). Keys
//! are stored wrapped by a [`MasterKey`] that lives in a file of its own, in a [`KeyStore`]
//! chosen by URL (`sqlite://DATA_DIR/keys.db` embedded, the `strata_keys` schema of the
//! PostgreSQL database distributed). Destroying a session's key
//! ([`KeyRing::destroy_session_key`]) makes its content unreadable in every copy of the log at
//! once — the topic, its replicas, the archive — without rewriting any of them.

mod master;
mod ring;
mod store;

use std::path::PathBuf;

pub use master::MasterKey;
pub use ring::{
    artifact_subject, session_subject, KeyRing, RecordCodec, DEFAULT_CACHED_KEYS, KEY_CACHE_TTL,
};
pub use store::{
    open, DestroyedKeys, ForgetEntry, KeyStore, PgKeyStore, Sealing, SqliteKeyStore, StoredKey,
};
pub use strata_codec::AvroCodec;

/// Everything that can go wrong with data keys.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The master key file is not a key.
    #[error("the master key file {path} {what}")]
    MasterKey { path: PathBuf, what: &'static str },
    /// A wrapped key does not unwrap with this master key.
    #[error(
        "data key {key_id} does not unwrap with the master key {master}: is this the master key \
         the key store was written with?"
    )]
    Unwrap { key_id: String, master: PathBuf },
    /// A sealed record names a key the key store does not have.
    #[error(
        "no data key {key_id} for session {session_id} of tenant {tenant_id}: the record was \
         sealed with a key this key store does not hold (another key store, or a lost one)"
    )]
    KeyMissing {
        tenant_id: String,
        session_id: String,
        key_id: String,
    },
    /// The session's key was destroyed: its content is gone.
    #[error("session {session_id} of tenant {tenant_id} was forgotten: its data key is destroyed")]
    Forgotten {
        tenant_id: String,
        session_id: String,
    },
    /// The key store failed.
    #[error("key store: cannot {what}: {source}")]
    Store {
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// A key inserted a moment ago cannot be read back.
    #[error("key store: a row written a moment ago could not be read back")]
    Vanished,
    #[error("unsupported key store URL {url}: {reason}")]
    UnsupportedUrl { url: String, reason: &'static str },
    #[error(transparent)]
    Codec(#[from] strata_codec::Error),
}

impl Error {
    fn store(what: &'static str, source: sqlx::Error) -> Error {
        Error::Store { what, source }
    }

    /// Whether retrying may succeed: the key store could not be reached or timed out.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Store {
                source: sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed,
                ..
            }
        )
    }
}

/// How a consumer of the log treats a record it could not read ([`Error::unreadable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreadable {
    /// Malformed or altered: set it aside (the dead-letter queue) and go on.
    SetAside,
    /// Its session was forgotten (the key is destroyed): there is no content to read.
    Forgotten,
    /// The keys cannot be had now (the key store is down, the master key is missing or wrong):
    /// stop and try again later. Setting the record aside would lose a good record.
    Retry,
}

impl Error {
    /// How a consumer treats a record whose decoding failed with this error.
    pub fn unreadable(&self) -> Unreadable {
        match self {
            // Without a key ring a sealed record is a configuration problem, not a bad record.
            Error::Codec(strata_codec::Error::Sealed { .. }) => Unreadable::Retry,
            Error::Codec(_) => Unreadable::SetAside,
            Error::Forgotten { .. } => Unreadable::Forgotten,
            _ => Unreadable::Retry,
        }
    }
}

/// The key functions' result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
