//! Artifacts: raw tool outputs and files, stored content-addressed by SHA-256 through
//! `object_store`, so the same bytes are stored once and a re-upload is a no-op.
//!
//! # Backends
//!
//! [`BlobStore::open`] picks the backend from the URL:
//!
//! | URL | backend | use |
//! | --- | --- | --- |
//! | `file://DIR` | a local directory (created when missing) | the embedded default (`strata dev`) |
//! | `memory://` | in process, lost on exit | tests |
//! | `s3://BUCKET[/PREFIX]` | S3 or an S3-compatible store (MinIO, moto, R2, ...) | production |
//!
//! `s3://` reads the rest of its configuration from the standard `AWS_*` environment variables
//! (`AmazonS3Builder::from_env`): `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL` (an S3-compatible
//! server), `AWS_ALLOW_HTTP=true` (plain-HTTP endpoints), and web-identity / container
//! credentials. With an endpoint set, requests use path-style addressing
//! (`http://ENDPOINT/BUCKET/KEY`) unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST` says otherwise. The
//! optional `PREFIX` puts every key of this store under `PREFIX/`, so several deployments can
//! share a bucket. Errors name the store (`s3://BUCKET/PREFIX`), never credentials.
//!
//! Keys are `tenants/<tenant>/artifacts/sha256/<first two hex>/<hex>`: a tenant's artifacts live
//! under its own prefix, and every read names the tenant.
//!
//! Only create-if-absent writes are used (`PutMode::Create`, never conditional updates), which
//! every backend here supports: the local file system and memory natively, S3 with
//! `If-None-Match: *` (object_store's default `S3ConditionalPut::ETagMatch`; AWS S3, MinIO, R2
//! and moto answer an existing key with 412, which becomes "already stored"). Since the key is
//! the hash of the bytes, a lost race between two writers of the same artifact is harmless.
//!
//! ```no_run
//! # fn demo() -> strata_blob::Result<()> {
//! use strata_blob::BlobStore;
//! let local = BlobStore::open("file://./data/blobs")?;
//! let s3 = BlobStore::open("s3://my-bucket/strata/prod")?; // AWS_* from the environment
//! # let _ = (local, s3); Ok(()) }
//! ```

use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

/// Errors of the blob store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object store failed. `store` names it (`s3://bucket/prefix`, `file://dir`,
    /// `memory://`); `message` is the backend's error with any configured credentials removed.
    #[error("blob store {store}: {message}")]
    Store { store: String, message: String },
    /// The store has no space left for a write (`ENOSPC` on a local directory). Nothing was
    /// stored; the write succeeds once space is freed.
    #[error("blob store {store} has no space left: {message}")]
    NoSpace { store: String, message: String },
    /// The URL names a backend this build does not have, or is malformed.
    #[error("unsupported blob url {url:?}: {reason}")]
    UnsupportedUrl { url: String, reason: String },
    /// An artifact id that is not a SHA-256 hex digest.
    #[error("invalid artifact id {0:?}: expected 64 lowercase hex characters")]
    InvalidId(String),
    /// Stored bytes do not hash to their address (corruption).
    #[error("artifact {0} is corrupt: its bytes do not match its hash")]
    Corrupt(String),
    /// A sealed artifact that cannot be opened here: no key ring, or one that fails.
    #[error("artifact {sha256} is sealed: {why}")]
    Sealed { sha256: String, why: String },
}

/// Seals and opens artifacts with a key per content (crypto-shredding: destroying it makes
/// every copy unreadable, backups and object versions included). The runtime implements it
/// over the key ring; a store without one writes plain artifacts and cannot open sealed ones.
#[async_trait::async_trait]
pub trait ArtifactKeys: Send + Sync + std::fmt::Debug {
    /// `plain`, artifact `sha256` of `tenant`, sealed; `None` when new artifacts are not sealed.
    async fn seal(
        &self,
        tenant: &str,
        sha256: &str,
        plain: &[u8],
    ) -> std::result::Result<Option<Vec<u8>>, String>;

    /// A sealed artifact opened; `None` when its key was destroyed (it was forgotten).
    async fn open(
        &self,
        tenant: &str,
        sha256: &str,
        sealed: &[u8],
    ) -> std::result::Result<Option<Vec<u8>>, String>;
}

/// What a sealed artifact's stored bytes start with (a plain one is the content as it was).
const SEALED_MAGIC: &[u8] = b"\0strata-sealed-artifact/1\0";

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
#[derive(Clone)]
pub struct BlobStore {
    store: Arc<dyn ObjectStore>,
    /// What errors call this store, e.g. `s3://bucket/prefix`.
    name: String,
    /// Configured credentials, scrubbed from error messages (S3 error bodies can echo the
    /// access key id).
    secrets: Arc<[String]>,
    /// Seals new artifacts and opens sealed ones, when the deployment has keys.
    keys: Option<Arc<dyn ArtifactKeys>>,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("store", &self.name)
            .finish_non_exhaustive()
    }
}

impl BlobStore {
    /// Opens the store a URL names: `file://DIR` (created when missing), `memory://` or
    /// `s3://BUCKET[/PREFIX]` (configured from `AWS_*`; see the crate docs). Nothing is
    /// contacted yet: use [`BlobStore::ping`] to check the backend.
    pub fn open(url: &str) -> Result<BlobStore> {
        let unsupported = |reason: String| Error::UnsupportedUrl {
            url: url.to_owned(),
            reason,
        };
        match url.split_once("://") {
            Some(("file", dir)) => {
                let name = format!("file://{dir}");
                std::fs::create_dir_all(dir)
                    .map_err(|e| unsupported(format!("cannot create directory: {e}")))?;
                let store = LocalFileSystem::new_with_prefix(dir).map_err(|e| Error::Store {
                    store: name.clone(),
                    message: e.to_string(),
                })?;
                Ok(BlobStore::named(Arc::new(store), name, Vec::new()))
            }
            Some(("memory", _)) => Ok(BlobStore::named(
                Arc::new(InMemory::new()),
                "memory://".into(),
                Vec::new(),
            )),
            Some(("s3", rest)) => Self::open_s3(rest).map_err(unsupported),
            _ => Err(unsupported(
                "expected file://DIR, memory:// or s3://BUCKET[/PREFIX]".into(),
            )),
        }
    }

    /// `rest` is `BUCKET[/PREFIX]`; errors are the reason the URL is unusable.
    fn open_s3(rest: &str) -> Result<BlobStore, String> {
        if rest.contains(['?', '#']) {
            return Err("s3 urls take no query or fragment; configure through AWS_*".into());
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_matches('/');
        if bucket.is_empty() {
            return Err("missing bucket: expected s3://BUCKET[/PREFIX]".into());
        }
        let prefix = if prefix.is_empty() {
            None
        } else {
            Some(Path::parse(prefix).map_err(|e| format!("invalid prefix: {e}"))?)
        };
        let name = match &prefix {
            Some(p) => format!("s3://{bucket}/{p}"),
            None => format!("s3://{bucket}"),
        };
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if builder
            .get_config_value(&AmazonS3ConfigKey::Endpoint)
            .is_some()
            && std::env::var_os("AWS_VIRTUAL_HOSTED_STYLE_REQUEST").is_none()
        {
            // S3-compatible servers (MinIO, moto, ...) want http://ENDPOINT/BUCKET/KEY.
            builder = builder.with_virtual_hosted_style_request(false);
        }
        let secrets: Vec<String> = [
            AmazonS3ConfigKey::AccessKeyId,
            AmazonS3ConfigKey::SecretAccessKey,
            AmazonS3ConfigKey::Token,
        ]
        .iter()
        .filter_map(|k| builder.get_config_value(k))
        .filter(|v| !v.is_empty())
        .collect();
        let s3 = builder.build().map_err(|e| {
            format!(
                "cannot configure {name}: {}",
                scrub(&e.to_string(), &secrets)
            )
        })?;
        let store: Arc<dyn ObjectStore> = match prefix {
            Some(p) => Arc::new(PrefixStore::new(s3, p)),
            None => Arc::new(s3),
        };
        Ok(BlobStore::named(store, name, secrets))
    }

    /// Wraps an existing object store.
    pub fn from_object_store(store: Arc<dyn ObjectStore>) -> BlobStore {
        let name = store.to_string();
        BlobStore::named(store, name, Vec::new())
    }

    fn named(store: Arc<dyn ObjectStore>, name: String, secrets: Vec<String>) -> BlobStore {
        BlobStore {
            store,
            name,
            secrets: secrets.into(),
            keys: None,
        }
    }

    /// The same store, sealing and opening artifacts with `keys`.
    pub fn with_keys(mut self, keys: Arc<dyn ArtifactKeys>) -> BlobStore {
        self.keys = Some(keys);
        self
    }

    /// The store's name as errors give it, e.g. `s3://bucket/prefix`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn error(&self, op: &str, e: object_store::Error) -> Error {
        let store = self.name.clone();
        let message = scrub(&format!("{op} failed: {e}"), &self.secrets);
        if is_no_space(&e) {
            Error::NoSpace { store, message }
        } else {
            Error::Store { store, message }
        }
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
        let bytes = self.sealed(tenant, &sha256, bytes).await?;
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
            Err(e) => return Err(self.error("put", e)),
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
            Ok(r) => r.bytes().await.map_err(|e| self.error("get", e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.error("get", e)),
        };
        let Some(bytes) = self.opened(tenant, sha256, bytes).await? else {
            return Ok(None);
        };
        if strata_core::sha256_hex(&bytes) != sha256 {
            return Err(Error::Corrupt(sha256.to_owned()));
        }
        Ok(Some(bytes))
    }

    /// `plain` as stored: sealed when the store has keys that seal.
    async fn sealed(&self, tenant: &str, sha256: &str, plain: Bytes) -> Result<Bytes> {
        let Some(keys) = &self.keys else {
            return Ok(plain);
        };
        let sealing = keys.seal(tenant, sha256, &plain).await;
        match sealing.map_err(|why| Error::Sealed {
            sha256: sha256.to_owned(),
            why,
        })? {
            Some(sealed) => Ok([SEALED_MAGIC, &sealed].concat().into()),
            None => Ok(plain),
        }
    }

    /// Stored bytes as content: opened when sealed; `None` when the key was destroyed.
    async fn opened(&self, tenant: &str, sha256: &str, stored: Bytes) -> Result<Option<Bytes>> {
        let Some(sealed) = stored.strip_prefix(SEALED_MAGIC) else {
            return Ok(Some(stored));
        };
        let sealed_error = |why: String| Error::Sealed {
            sha256: sha256.to_owned(),
            why,
        };
        let Some(keys) = &self.keys else {
            return Err(sealed_error(
                "this process has no key ring (the master key) to open it".into(),
            ));
        };
        let opened = keys
            .open(tenant, sha256, sealed)
            .await
            .map_err(sealed_error)?;
        Ok(opened.map(Bytes::from))
    }

    /// Deletes an artifact of `tenant` (forgetting: the caller checked that nothing else still
    /// refers to it). Returns whether it was there.
    pub async fn delete_artifact(&self, tenant: &str, sha256: &str) -> Result<bool> {
        if sha256.len() != 64
            || !sha256
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(Error::InvalidId(sha256.to_owned()));
        }
        let path = Self::path(tenant, sha256);
        match self.store.head(&path).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.error("head", e)),
        }
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(true),
            Err(e) => Err(self.error("delete", e)),
        }
    }

    /// Writes (or overwrites) an object at `path` (`/`-separated, e.g. `archive/p0/…`). For
    /// data that is not content-addressed: the log archive and its manifest.
    pub async fn put_object(&self, path: &str, bytes: Bytes) -> Result<()> {
        let path = Path::parse(path).map_err(|e| Error::InvalidId(format!("{path}: {e}")))?;
        self.store
            .put(&path, PutPayload::from(bytes))
            .await
            .map_err(|e| self.error("put", e))?;
        Ok(())
    }

    /// Every artifact of every tenant, as `(tenant, sha256)`.
    pub async fn artifacts(&self) -> Result<Vec<(String, String)>> {
        use futures::TryStreamExt;
        let listed: Vec<_> = self
            .store
            .list(Some(&Path::from("tenants")))
            .try_collect()
            .await
            .map_err(|e| self.error("list", e))?;
        Ok(listed
            .into_iter()
            .filter_map(|meta| {
                let parts: Vec<String> = meta
                    .location
                    .parts()
                    .map(|p| p.as_ref().to_owned())
                    .collect();
                match parts.as_slice() {
                    [root, tenant, artifacts, algo, _, sha256]
                        if root == "tenants" && artifacts == "artifacts" && algo == "sha256" =>
                    {
                        Some((tenant.clone(), sha256.clone()))
                    }
                    _ => None,
                }
            })
            .collect())
    }

    /// Seals an artifact stored in the clear, in place (one overwrite, atomic on every backend);
    /// returns whether it did: not for one sealed already, nor when the store's keys do not seal.
    pub async fn seal_stored(&self, tenant: &str, sha256: &str) -> Result<bool> {
        let path = Self::path(tenant, sha256);
        let stored = match self.store.get(&path).await {
            Ok(r) => r.bytes().await.map_err(|e| self.error("get", e))?,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(self.error("get", e)),
        };
        if stored.starts_with(SEALED_MAGIC) {
            return Ok(false);
        }
        if strata_core::sha256_hex(&stored) != sha256 {
            return Err(Error::Corrupt(sha256.to_owned()));
        }
        let sealed = self.sealed(tenant, sha256, stored.clone()).await?;
        if sealed == stored {
            return Ok(false);
        }
        self.store
            .put(&path, PutPayload::from(sealed))
            .await
            .map_err(|e| self.error("put", e))?;
        Ok(true)
    }

    /// The bytes of an object written by [`BlobStore::put_object`]; `None` when absent.
    pub async fn get_object(&self, path: &str) -> Result<Option<Bytes>> {
        let path = Path::parse(path).map_err(|e| Error::InvalidId(format!("{path}: {e}")))?;
        match self.store.get(&path).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| self.error("get", e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("get", e)),
        }
    }

    /// Checks that the backend answers (on S3: that the bucket exists and the credentials may
    /// list it).
    pub async fn ping(&self) -> Result<()> {
        match self
            .store
            .list_with_delimiter(Some(&Path::from("strata-ping")))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.error("ping", e)),
        }
    }
}

impl Error {
    /// Whether the store refused a write for lack of space (see [`Error::NoSpace`]).
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::NoSpace { .. })
    }
}

/// Whether an object-store error comes from a full disk: `object_store` wraps the I/O error of
/// its local backend in its own errors, so the cause chain is searched for it.
fn is_no_space(e: &object_store::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            // ENOSPC, and EDQUOT (a user or project quota), which the caller handles the same.
            if io.kind() == std::io::ErrorKind::StorageFull
                || io.kind() == std::io::ErrorKind::QuotaExceeded
            {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

/// `message` with every secret replaced.
fn scrub(message: &str, secrets: &[String]) -> String {
    secrets.iter().fold(message.to_owned(), |m, secret| {
        m.replace(secret.as_str(), "***")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys that "seal" by reversing the bytes, and know one destroyed artifact.
    #[derive(Debug)]
    struct Reversing {
        destroyed: String,
    }

    #[async_trait::async_trait]
    impl ArtifactKeys for Reversing {
        async fn seal(&self, _: &str, _: &str, plain: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok(Some(plain.iter().rev().copied().collect()))
        }
        async fn open(&self, _: &str, sha: &str, sealed: &[u8]) -> Result<Option<Vec<u8>>, String> {
            Ok((sha != self.destroyed).then(|| sealed.iter().rev().copied().collect()))
        }
    }

    #[tokio::test]
    async fn a_sealed_artifact_is_stored_marked_and_opens_only_with_keys() {
        let plain = BlobStore::open("memory://").unwrap();
        let keys = Arc::new(Reversing {
            destroyed: strata_core::sha256_hex(b"forgotten words"),
        });
        let sealed = plain.clone().with_keys(keys);
        let a = sealed
            .put_artifact("acme", Bytes::from_static(b"some words"))
            .await
            .unwrap();
        let stored = plain
            .store
            .get(&BlobStore::path("acme", &a.sha256))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(stored.starts_with(SEALED_MAGIC), "marked as sealed");
        assert!(
            !stored.windows(5).any(|w| w == b"words"),
            "not in the clear"
        );
        assert_eq!(
            sealed.get_artifact("acme", &a.sha256).await.unwrap(),
            Some(Bytes::from_static(b"some words"))
        );
        let err = plain.get_artifact("acme", &a.sha256).await.unwrap_err();
        assert!(matches!(err, Error::Sealed { .. }), "{err}");
        assert!(err.to_string().contains("no key ring"), "{err}");
        // A destroyed key reads as absent: forgotten.
        let f = sealed
            .put_artifact("acme", Bytes::from_static(b"forgotten words"))
            .await
            .unwrap();
        assert_eq!(sealed.get_artifact("acme", &f.sha256).await.unwrap(), None);
        // A plain artifact reads the same with or without keys.
        let p = plain
            .put_artifact("acme", Bytes::from_static(b"plain words"))
            .await
            .unwrap();
        assert_eq!(
            sealed.get_artifact("acme", &p.sha256).await.unwrap(),
            Some(Bytes::from_static(b"plain words"))
        );
        // ...and is sealed in place on request, once.
        assert_eq!(plain.artifacts().await.unwrap().len(), 3);
        assert!(
            !plain.seal_stored("acme", &p.sha256).await.unwrap(),
            "no keys"
        );
        assert!(sealed.seal_stored("acme", &p.sha256).await.unwrap());
        assert!(
            !sealed.seal_stored("acme", &p.sha256).await.unwrap(),
            "once"
        );
        assert!(
            plain.get_artifact("acme", &p.sha256).await.is_err(),
            "sealed now"
        );
        assert_eq!(
            sealed.get_artifact("acme", &p.sha256).await.unwrap(),
            Some(Bytes::from_static(b"plain words"))
        );
    }

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

    #[test]
    fn a_full_disk_is_told_apart_from_other_failures() {
        let store = BlobStore::open("memory://").unwrap();
        // How object_store's local backend reports ENOSPC: its own error around the io error.
        let full = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::StorageFull)),
        };
        let err = store.error("put", full);
        assert!(err.is_no_space(), "{err:?}");
        assert!(err.to_string().contains("has no space left"), "{err}");
        let other = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(std::io::Error::from(std::io::ErrorKind::PermissionDenied)),
        };
        assert!(!store.error("put", other).is_no_space());
    }

    #[test]
    fn errors_never_carry_credentials() {
        let secrets = vec!["AKIAEXAMPLE".to_owned(), "wJalrXUtnFEMI/K7MDENG".to_owned()];
        let body =
            "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIAEXAMPLE</AWSAccessKeyId>\
                    <StringToSign>wJalrXUtnFEMI/K7MDENG</StringToSign></Error>";
        let scrubbed = scrub(body, &secrets);
        assert!(!scrubbed.contains("AKIAEXAMPLE"), "{scrubbed}");
        assert!(!scrubbed.contains("wJalrXUtnFEMI"), "{scrubbed}");
        assert!(scrubbed.contains("SignatureDoesNotMatch"));
    }

    #[test]
    fn s3_urls_name_bucket_and_prefix() {
        let store = BlobStore::open("s3://bucket//a/b/").unwrap();
        assert_eq!(store.name(), "s3://bucket/a/b");
        assert_eq!(
            BlobStore::open("s3://bucket").unwrap().name(),
            "s3://bucket"
        );
        assert!(format!("{store:?}").contains("s3://bucket/a/b"));
    }
}
