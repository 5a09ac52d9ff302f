//! One conformance suite for the blob store, run against every backend: the generic bodies below
//! take any `BlobStore`; `suite!` instantiates them per backend.
//!
//! S3 runs when `STRATA_TEST_S3_URL` is set (e.g. `s3://strata-test/strata-test`, with `AWS_*`
//! pointing at the server). Without it the S3 tests print why they skip — or fail when `CI` is
//! set, where a missing service is a failure. Each S3 test works under its own random prefix and
//! deletes what it wrote afterwards (best effort, also when it panics).

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;
use strata_blob::{BlobStore, Error};

/// A backend under test; dropping it removes what the test stored.
struct Fixture {
    store: BlobStore,
    _cleanup: Box<dyn std::any::Any>,
}

fn random_name() -> String {
    format!("conf{:016x}", rand::random::<u64>())
}

fn file() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let store = BlobStore::open(&format!("file://{}", dir.path().display())).unwrap();
    Some(Fixture {
        store,
        _cleanup: Box::new(dir),
    })
}

fn memory() -> Option<Fixture> {
    Some(Fixture {
        store: BlobStore::open("memory://").unwrap(),
        _cleanup: Box::new(()),
    })
}

/// The S3 URL, or `None` (after saying why) when the tests should skip.
fn s3_url() -> Option<String> {
    const VAR: &str = "STRATA_TEST_S3_URL";
    match std::env::var(VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("s3 server missing: {VAR} is not set and CI is set (a missing service is a failure in CI)")
        }
        _ => {
            // Once per test binary, and past libtest's capture (which hides `eprintln!` of
            // passing tests), so a plain `cargo test` shows why these tests did nothing.
            static NOTICE: std::sync::Once = std::sync::Once::new();
            NOTICE.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipping s3 conformance: {VAR} is not set"
                );
            });
            None
        }
    }
}

/// `s3://bucket[/prefix]` → (bucket, prefix).
fn split_s3(url: &str) -> (String, String) {
    let rest = url
        .strip_prefix("s3://")
        .expect("STRATA_TEST_S3_URL must be s3://...");
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    (bucket.to_owned(), prefix.trim_matches('/').to_owned())
}

fn s3() -> Option<Fixture> {
    let base = s3_url()?;
    let (bucket, prefix) = split_s3(&base);
    let prefix = if prefix.is_empty() {
        random_name()
    } else {
        format!("{prefix}/{}", random_name())
    };
    let store = BlobStore::open(&format!("s3://{bucket}/{prefix}"))
        .unwrap_or_else(|e| panic!("cannot open the s3 blob store: {e}"));
    Some(Fixture {
        store,
        _cleanup: Box::new(S3Cleanup { bucket, prefix }),
    })
}

/// A raw S3 client on the test bucket, configured like the store.
fn raw_s3(bucket: &str) -> Arc<dyn ObjectStore> {
    let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
    if std::env::var_os("AWS_ENDPOINT_URL").is_some() {
        builder = builder.with_virtual_hosted_style_request(false);
    }
    Arc::new(builder.build().unwrap())
}

/// Deletes everything under the test's prefix when dropped; `Drop` cannot await, so it runs on
/// a thread with its own runtime.
struct S3Cleanup {
    bucket: String,
    prefix: String,
}

impl Drop for S3Cleanup {
    fn drop(&mut self) {
        let (bucket, prefix) = (self.bucket.clone(), self.prefix.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                use futures::StreamExt;
                let s3 = raw_s3(&bucket);
                let prefix = Path::from(prefix);
                let mut listing = s3.list(Some(&prefix));
                while let Some(Ok(meta)) = listing.next().await {
                    let _ = s3.delete(&meta.location).await;
                }
            });
        })
        .join();
    }
}

/// Deterministic, incompressible-looking bytes (xorshift).
fn pseudo_random(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

// ---- generic bodies ----

async fn content_addressing(s: &BlobStore) {
    let bytes = Bytes::from_static(b"hello, artifacts");
    let a = s.put_artifact("acme", bytes.clone()).await.unwrap();
    assert_eq!(a.sha256, strata_core::sha256_hex(&bytes));
    assert_eq!(a.sha256.len(), 64);
    assert_eq!(a.uri, format!("artifact:sha256:{}", a.sha256));
    assert_eq!(a.uri, strata_blob::artifact_uri(&a.sha256));
    assert_eq!(a.bytes, bytes.len() as u64);
    assert!(a.created);
    assert_eq!(
        s.get_artifact("acme", &a.sha256).await.unwrap(),
        Some(bytes)
    );
    // Different bytes, different address.
    let b = s
        .put_artifact("acme", Bytes::from_static(b"hello, artifacts!"))
        .await
        .unwrap();
    assert_ne!(a.sha256, b.sha256);
    // The empty artifact is an artifact too.
    let empty = s.put_artifact("acme", Bytes::new()).await.unwrap();
    assert_eq!(empty.bytes, 0);
    assert_eq!(
        s.get_artifact("acme", &empty.sha256).await.unwrap(),
        Some(Bytes::new())
    );
}

async fn reupload_is_a_no_op(s: &BlobStore) {
    let bytes = pseudo_random(4096, 7);
    let first = s.put_artifact("acme", bytes.clone()).await.unwrap();
    assert!(first.created);
    for _ in 0..3 {
        let again = s.put_artifact("acme", bytes.clone()).await.unwrap();
        assert!(!again.created, "a re-upload must be a no-op");
        assert_eq!(
            (again.sha256.as_str(), again.bytes),
            (first.sha256.as_str(), first.bytes)
        );
    }
    assert_eq!(
        s.get_artifact("acme", &first.sha256).await.unwrap(),
        Some(bytes)
    );
}

async fn tenants_are_scoped(s: &BlobStore) {
    let bytes = Bytes::from_static(b"tenant-private output");
    let a = s.put_artifact("acme", bytes.clone()).await.unwrap();
    // Another tenant cannot read it, even knowing the hash...
    assert_eq!(s.get_artifact("other", &a.sha256).await.unwrap(), None);
    // ...and storing the same bytes for it is its own first write.
    let b = s.put_artifact("other", bytes.clone()).await.unwrap();
    assert!(b.created);
    assert_eq!(b.sha256, a.sha256);
    assert_eq!(
        s.get_artifact("other", &a.sha256).await.unwrap(),
        Some(bytes)
    );
}

async fn invalid_ids_are_rejected(s: &BlobStore) {
    let valid = "a".repeat(64);
    for bad in [
        String::new(),
        "../../etc/passwd".into(),
        "a".repeat(63),
        "a".repeat(65),
        "A".repeat(64),
        format!("{}g", "a".repeat(63)),
        format!("../{}", "a".repeat(61)),
        format!("{}/{}", "a".repeat(31), "a".repeat(32)),
    ] {
        assert!(
            matches!(s.get_artifact("acme", &bad).await, Err(Error::InvalidId(_))),
            "{bad:?} must be rejected"
        );
    }
    assert_eq!(s.get_artifact("acme", &valid).await.unwrap(), None);
}

async fn large_artifact_round_trip(s: &BlobStore) {
    let bytes = pseudo_random(12 * 1024 * 1024, 42);
    let a = s.put_artifact("acme", bytes.clone()).await.unwrap();
    assert!(a.created);
    assert_eq!(a.bytes, 12 * 1024 * 1024);
    let back = s.get_artifact("acme", &a.sha256).await.unwrap().unwrap();
    assert!(back == bytes, "12 MiB artifact did not round-trip");
    assert!(!s.put_artifact("acme", bytes).await.unwrap().created);
}

async fn missing_is_none(s: &BlobStore) {
    let absent = strata_core::sha256_hex(random_name().as_bytes());
    assert_eq!(s.get_artifact("acme", &absent).await.unwrap(), None);
    assert_eq!(s.get_artifact("nobody", &absent).await.unwrap(), None);
}

async fn ping(s: &BlobStore) {
    s.ping().await.unwrap();
}

macro_rules! suite {
    ($backend:ident) => {
        mod $backend {
            #[tokio::test]
            async fn content_addressing() {
                let Some(f) = super::$backend() else { return };
                super::content_addressing(&f.store).await;
            }

            #[tokio::test]
            async fn reupload_is_a_no_op() {
                let Some(f) = super::$backend() else { return };
                super::reupload_is_a_no_op(&f.store).await;
            }

            #[tokio::test]
            async fn tenants_are_scoped() {
                let Some(f) = super::$backend() else { return };
                super::tenants_are_scoped(&f.store).await;
            }

            #[tokio::test]
            async fn invalid_ids_are_rejected() {
                let Some(f) = super::$backend() else { return };
                super::invalid_ids_are_rejected(&f.store).await;
            }

            #[tokio::test]
            async fn large_artifact_round_trip() {
                let Some(f) = super::$backend() else { return };
                super::large_artifact_round_trip(&f.store).await;
            }

            #[tokio::test]
            async fn missing_is_none() {
                let Some(f) = super::$backend() else { return };
                super::missing_is_none(&f.store).await;
            }

            #[tokio::test]
            async fn ping() {
                let Some(f) = super::$backend() else { return };
                super::ping(&f.store).await;
            }
        }
    };
}

suite!(file);
suite!(memory);
suite!(s3);

// ---- S3 only: layout under the prefix, the create-only put, errors ----

mod s3_only {
    use super::*;

    #[tokio::test]
    async fn keys_live_under_the_prefix() {
        let Some(base) = s3_url() else { return };
        let (bucket, prefix) = split_s3(&base);
        let mine = format!("{prefix}/{}", random_name());
        let _cleanup = S3Cleanup {
            bucket: bucket.clone(),
            prefix: mine.clone(),
        };
        let store = BlobStore::open(&format!("s3://{bucket}/{mine}/")).unwrap();
        assert_eq!(store.name(), format!("s3://{bucket}/{mine}"));
        let a = store
            .put_artifact("acme", Bytes::from_static(b"where am i"))
            .await
            .unwrap();
        let key = Path::from(format!(
            "{mine}/tenants/acme/artifacts/sha256/{}/{}",
            &a.sha256[..2],
            a.sha256
        ));
        let meta = raw_s3(&bucket).head(&key).await.unwrap();
        assert_eq!(meta.size, 10);
    }

    #[tokio::test]
    async fn create_only_put_reports_existing_keys() {
        // The store relies on the server refusing a create-only put of an existing key
        // (`If-None-Match: *` → 412 → AlreadyExists) rather than a HEAD before the PUT.
        let Some(base) = s3_url() else { return };
        let (bucket, prefix) = split_s3(&base);
        let mine = format!("{prefix}/{}", random_name());
        let _cleanup = S3Cleanup {
            bucket: bucket.clone(),
            prefix: mine.clone(),
        };
        let s3 = raw_s3(&bucket);
        let key = Path::from(format!("{mine}/k"));
        let create = || object_store::PutOptions {
            mode: object_store::PutMode::Create,
            ..Default::default()
        };
        s3.put_opts(&key, Bytes::from_static(b"one").into(), create())
            .await
            .unwrap();
        let second = s3
            .put_opts(&key, Bytes::from_static(b"two").into(), create())
            .await;
        assert!(
            matches!(second, Err(object_store::Error::AlreadyExists { .. })),
            "{second:?}"
        );
        // The first write stands.
        let kept = s3.get(&key).await.unwrap().bytes().await.unwrap();
        assert_eq!(kept, Bytes::from_static(b"one"));
    }

    #[tokio::test]
    async fn a_missing_bucket_fails_ping_naming_the_bucket_not_the_credentials() {
        let Some(_) = s3_url() else { return };
        let bucket = format!("strata-missing-{}", random_name());
        let store = BlobStore::open(&format!("s3://{bucket}/p")).unwrap();
        let err = store.ping().await.unwrap_err();
        let text = format!("{err} {err:?}");
        assert!(text.contains(&bucket), "{text}");
        for var in [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            if let Ok(secret) = std::env::var(var) {
                // The test servers may use the bucket's own name as a key; only check
                // credentials that could not appear for another reason.
                if !secret.is_empty() && !bucket.contains(&secret) && !"s3".contains(&secret) {
                    assert!(!text.contains(&secret), "{var} leaked: {text}");
                }
            }
        }
        let put = store
            .put_artifact("acme", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(put.to_string().contains(&bucket), "{put}");
    }
}

#[test]
fn s3_urls_are_parsed() {
    for bad in ["s3://", "s3:///prefix", "s3://bucket/p?x=1"] {
        assert!(
            matches!(BlobStore::open(bad), Err(Error::UnsupportedUrl { .. })),
            "{bad}"
        );
    }
    assert!(matches!(
        BlobStore::open("gs://bucket"),
        Err(Error::UnsupportedUrl { .. })
    ));
}
