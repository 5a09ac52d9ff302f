//! Artifacts (SPEC §4): raw tool outputs and files, stored content-addressed by SHA-256 through
//! `object_store`, so the same bytes are stored once and a re-upload is a no-op.
//!
//! Backends are chosen by URL: `file://DIR` (the embedded default, a local directory) and
//! `memory://` (tests). Keys are `tenants/<tenant>/artifacts/sha256/<first two hex>/<hex>`: a
//! tenant's artifacts live under its own prefix, and every read names the tenant.
//!
//! Only create-if-absent writes are used (no conditional updates), which every `object_store`
//! backend supports, the local file system included.

use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

/// Errors of the blob store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object store failed.
    #[error("blob store error: {0}")]
    Store(#[from] object_store::Error),
    /// The URL names a backend this build does not have, or is malformed.
    #[error("unsupported blob url {url:?}: {reason}")]
    UnsupportedUrl { url: String, reason: String },
    /// An artifact id that is not a SHA-256 hex digest.
    #[error("invalid artifact id {0:?}: expected 64 lowercase hex characters")]
    InvalidId(String),
    /// Stored bytes do not hash to their address (corruption).
    #[error("artifact {0} is corrupt: its bytes do not match its hash")]
    Corrupt(String),
}

/// Result with the blob store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where an artifact was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredArtifact {
    pub sha256: String,
    /// `artifact:sha256:<hex>`, the reference events carry.
    pub uri: String,
    pub bytes: u64,
    /// Whether this call wrote it (false: it was already there).
    pub created: bool,
}

/// The reference an event carries for an artifact.
pub fn artifact_uri(sha256: &str) -> String {
    format!("artifact:sha256:{sha256}")
}

/// Content-addressed artifact storage over any `object_store` backend.
#[derive(Debug, Clone)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
}

impl BlobStore {
    /// Opens the store a URL names: `file://DIR` (created when missing) or `memory://`.
    pub fn open(url: &str) -> Result<BlobStore> {
        let store: Arc<dyn ObjectStore> = match url.split_once("://") {
            Some(("file", dir)) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::UnsupportedUrl {
                    url: url.to_owned(),
                    reason: format!("cannot create directory: {e}"),
                })?;
                Arc::new(LocalFileSystem::new_with_prefix(dir)?)
            }
            Some(("memory", _)) => Arc::new(InMemory::new()),
            Some(("s3", _)) => {
                return Err(Error::UnsupportedUrl {
                    url: url.to_owned(),
                    reason: "the s3 backend is not built yet (see the distributed-backends issue)"
                        .into(),
                })
            }
            _ => {
                return Err(Error::UnsupportedUrl {
                    url: url.to_owned(),
                    reason: "expected file://DIR or memory://".into(),
                })
            }
        };
        Ok(BlobStore { store })
    }

    /// Wraps an existing object store.
    pub fn from_object_store(store: Arc<dyn ObjectStore>) -> BlobStore {
        BlobStore { store }
    }

    fn path(tenant: &str, sha256: &str) -> Path {
        Path::from(format!(
            "tenants/{tenant}/artifacts/sha256/{}/{sha256}",
            &sha256[..2]
        ))
    }

    /// Stores `bytes` for `tenant` under their SHA-256; a no-op when already stored.
    #[tracing::instrument(name = "blob.put_artifact", skip_all, fields(tenant, bytes = bytes.len()))]
    pub async fn put_artifact(&self, tenant: &str, bytes: Bytes) -> Result<StoredArtifact> {
        let sha256 = strata_core::sha256_hex(&bytes);
        let len = bytes.len() as u64;
        let path = Self::path(tenant, &sha256);
        let created = match self
            .store
            .put_opts(
                &path,
                PutPayload::from(bytes),
                PutOptions {
                    mode: PutMode::Create,
                    ..Default::default()
                },
            )
            .await
        {
            Ok(_) => true,
            Err(object_store::Error::AlreadyExists { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        Ok(StoredArtifact {
            uri: artifact_uri(&sha256),
            sha256,
            bytes: len,
            created,
        })
    }

    /// The bytes of an artifact of `tenant`, verified against their hash; `None` when absent.
    pub async fn get_artifact(&self, tenant: &str, sha256: &str) -> Result<Option<Bytes>> {
        if sha256.len() != 64
            || !sha256
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(Error::InvalidId(sha256.to_owned()));
        }
        let bytes = match self.store.get(&Self::path(tenant, sha256)).await {
            Ok(r) => r.bytes().await?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if strata_core::sha256_hex(&bytes) != sha256 {
            return Err(Error::Corrupt(sha256.to_owned()));
        }
        Ok(Some(bytes))
    }

    /// Checks that the backend answers.
    pub async fn ping(&self) -> Result<()> {
        match self.store.head(&Path::from("strata-ping")).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn content_addressed_and_tenant_scoped() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::open(&format!("file://{}", dir.path().display())).unwrap();
        let a = store
            .put_artifact("acme", Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert!(a.created);
        assert_eq!(a.bytes, 5);
        assert_eq!(a.uri, format!("artifact:sha256:{}", a.sha256));
        let again = store
            .put_artifact("acme", Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert!(!again.created, "re-upload must be a no-op");
        assert_eq!(
            store
                .get_artifact("acme", &a.sha256)
                .await
                .unwrap()
                .unwrap(),
            Bytes::from_static(b"hello")
        );
        // Another tenant cannot read it, even knowing the hash.
        assert_eq!(store.get_artifact("other", &a.sha256).await.unwrap(), None);
        assert!(matches!(
            store.get_artifact("acme", "../../etc").await,
            Err(Error::InvalidId(_))
        ));
    }
}
