//! Per-tenant API keys. Keys are random, shown once, and stored only as their SHA-256.

use std::path::Path;

use axum::http::HeaderMap;
use rand::RngCore;
use strata_store::ProjectionStore;

use crate::ApiError;

/// The tenant of the development key the embedded default creates.
pub const DEV_TENANT: &str = "dev";

/// A request's authenticated tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

/// A new random API key (`sk_` + 48 hex characters).
pub fn generate_key() -> String {
    format!("sk_{}", hex::encode(random_bytes::<24>()))
}

/// Registers a new key for `tenant` and returns it.
pub async fn create_key(
    store: &dyn ProjectionStore,
    tenant: &str,
    label: &str,
) -> Result<String, strata_store::Error> {
    create_expiring_key(store, tenant, label, None).await
}

/// Registers a new key for `tenant` that is refused from `expires_at` (RFC 3339, UTC) on.
pub async fn create_expiring_key(
    store: &dyn ProjectionStore,
    tenant: &str,
    label: &str,
    expires_at: Option<&str>,
) -> Result<String, strata_store::Error> {
    let key = generate_key();
    store
        .put_api_key(
            &strata_core::sha256_hex(key.as_bytes()),
            tenant,
            label,
            expires_at,
        )
        .await?;
    Ok(key)
}

/// The development key of an embedded data directory: created on first use, kept in
/// `DATA_DIR/dev-api-key` (mode 0600) so every local command can use it.
pub async fn ensure_dev_key(
    store: &dyn ProjectionStore,
    data_dir: &Path,
) -> Result<String, crate::Error> {
    let path = data_dir.join("dev-api-key");
    let io = |source| crate::Error::Io {
        path: path.clone(),
        source,
    };
    let kept = match std::fs::read_to_string(&path) {
        Ok(k) if !k.trim().is_empty() => Some(k.trim().to_owned()),
        Ok(_) | Err(_) => None,
    };
    // A revoked or expired development key stays dead: a new one replaces it.
    let key = match kept {
        Some(k) => match store
            .api_key(&strata_core::sha256_hex(k.as_bytes()))
            .await?
        {
            Some(info) if !info.is_live_at(&strata_store::now_utc()) => {
                tracing::warn!(key_id = %info.key_id, "the dev api key was revoked or expired; a new one replaces it");
                None
            }
            _ => Some(k),
        },
        None => None,
    };
    let key = match key {
        Some(k) => k,
        None => {
            let key = generate_key();
            write_private(&path, &key).map_err(io)?;
            key
        }
    };
    store
        .put_api_key(
            &strata_core::sha256_hex(key.as_bytes()),
            DEV_TENANT,
            "dev",
            None,
        )
        .await?;
    Ok(key)
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    writeln!(f, "{contents}")?;
    f.sync_all()
}

/// The key a request presents: `Authorization: Bearer <key>`, or `x-api-key`.
fn presented_key(headers: &HeaderMap) -> Result<&str, ApiError> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ApiError::unauthorized("missing api key: send Authorization: Bearer <key>"))
}

/// Authenticates a request by its `Authorization: Bearer <key>` (or `x-api-key`) header.
pub async fn authenticate(
    store: &dyn ProjectionStore,
    headers: &HeaderMap,
) -> Result<Tenant, ApiError> {
    let key = presented_key(headers)?;
    match store
        .tenant_for_key(&strata_core::sha256_hex(key.as_bytes()))
        .await
    {
        Ok(Some(tenant)) => Ok(Tenant(tenant)),
        Ok(None) => Err(ApiError::unauthorized("unknown api key")),
        Err(e) => Err(ApiError::internal(&e)),
    }
}

/// File of an embedded data directory holding its admin credential (mode 0600).
pub const ADMIN_KEY_FILE: &str = "admin-api-key";

/// Fewest characters an admin credential has: anything shorter is guessable.
const ADMIN_KEY_MIN_CHARS: usize = 32;

/// The deployment's admin credential, kept only as its SHA-256: it authenticates the routes that
/// act across tenants (forgetting a tenant, or an end user of any tenant), which no tenant's API
/// key reaches. It is not in the projection store, so a rebuild or a leaked database dump
/// neither loses nor reveals it.
#[derive(Clone)]
pub struct AdminKey {
    digest: String,
}

impl std::fmt::Debug for AdminKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminKey(..)")
    }
}

impl AdminKey {
    /// The credential `key` (its first line, trimmed).
    pub fn new(key: &str) -> Result<Self, String> {
        let key = key.lines().next().unwrap_or_default().trim();
        if key.chars().count() < ADMIN_KEY_MIN_CHARS {
            return Err(format!(
                "an admin key has at least {ADMIN_KEY_MIN_CHARS} characters (make one with \
                 `openssl rand -hex 32`)"
            ));
        }
        Ok(Self {
            digest: strata_core::sha256_hex(key.as_bytes()),
        })
    }

    /// The credential in `path`.
    pub fn from_file(path: &Path) -> Result<Self, crate::Error> {
        let text = std::fs::read_to_string(path).map_err(|source| crate::Error::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::new(&text).map_err(|why| {
            crate::Error::AdminKey(format!("the admin key file {}: {why}", path.display()))
        })
    }

    /// Whether `presented` is this credential. Digests are compared, so the time taken says
    /// nothing about the key itself.
    pub fn matches(&self, presented: &str) -> bool {
        strata_core::sha256_hex(presented.trim().as_bytes()) == self.digest
    }
}

/// The admin credential a process started with `opts` accepts: the file `--admin-key-file`
/// names; else, when the deployment lives in a data directory, `DATA_DIR/admin-api-key` (made on
/// first use); else none, and the admin routes answer 403 saying how to configure one.
pub fn admin_key(opts: &crate::BackendOpts) -> Result<Option<AdminKey>, crate::Error> {
    if let Some(path) = &opts.admin_key_file {
        return AdminKey::from_file(path).map(Some);
    }
    if !opts.uses_data_dir() {
        return Ok(None);
    }
    let path = opts.data_dir.join(ADMIN_KEY_FILE);
    if !path.exists() {
        write_private(&path, &format!("sa_{}", hex::encode(random_bytes::<32>()))).map_err(
            |source| crate::Error::Io {
                path: path.clone(),
                source,
            },
        )?;
    }
    AdminKey::from_file(&path).map(Some)
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// Authenticates a request to an admin route: its bearer key must be the deployment's admin
/// credential. A tenant's API key is refused (403), as is every key when none is configured.
pub async fn authenticate_admin(
    admin: Option<&AdminKey>,
    store: &dyn ProjectionStore,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let key = presented_key(headers)?;
    if admin.is_some_and(|admin| admin.matches(key)) {
        return Ok(());
    }
    let tenant_key = matches!(
        store
            .tenant_for_key(&strata_core::sha256_hex(key.as_bytes()))
            .await,
        Ok(Some(_))
    );
    match (admin, tenant_key) {
        (_, true) => Err(ApiError::forbidden(
            "this route acts across tenants and needs the deployment's admin key; a tenant's \
             api key cannot call it",
        )),
        (None, false) => Err(ApiError::forbidden(
            "this service has no admin key configured: start it with --admin-key-file \
             (STRATA_ADMIN_KEY_FILE)",
        )),
        (Some(_), false) => Err(ApiError::unauthorized("unknown admin key")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_key_is_long_and_matched_exactly() {
        assert!(AdminKey::new("short").is_err());
        let key = AdminKey::new(&format!("sa_{}\n", "ab".repeat(16))).expect("a key");
        assert!(key.matches(&format!("sa_{}", "ab".repeat(16))));
        assert!(!key.matches(&format!("sa_{}", "ab".repeat(15))));
        assert_eq!(format!("{key:?}"), "AdminKey(..)", "never printed");
    }

    #[test]
    fn the_embedded_default_makes_its_admin_key_and_servers_have_none_unless_given() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = crate::BackendOpts::embedded(dir.path());
        let made = admin_key(&opts).expect("made").expect("a key");
        let text = std::fs::read_to_string(dir.path().join(ADMIN_KEY_FILE)).expect("kept");
        assert!(made.matches(&text));
        assert!(admin_key(&opts)
            .expect("read again")
            .expect("a key")
            .matches(&text));

        let servers = crate::BackendOpts {
            log_url: Some("kafka://127.0.0.1:9/t".into()),
            db_url: Some("postgres://127.0.0.1/db".into()),
            blob_url: Some("s3://bucket/p".into()),
            ..crate::BackendOpts::embedded(dir.path().join("unused"))
        };
        assert!(admin_key(&servers).expect("none").is_none());

        let short = dir.path().join("short");
        std::fs::write(&short, "CHANGE-ME\n").expect("write");
        let given = crate::BackendOpts {
            admin_key_file: Some(short.clone()),
            ..servers
        };
        let err = admin_key(&given)
            .expect_err("a placeholder is refused")
            .to_string();
        assert!(err.contains(&short.display().to_string()), "{err}");
    }
}
