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
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    format!("sk_{}", hex::encode(bytes))
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

/// Authenticates a request by its `Authorization: Bearer <key>` (or `x-api-key`) header.
pub async fn authenticate(
    store: &dyn ProjectionStore,
    headers: &HeaderMap,
) -> Result<Tenant, ApiError> {
    let key = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| {
            ApiError::unauthorized("missing api key: send Authorization: Bearer <key>")
        })?;
    match store
        .tenant_for_key(&strata_core::sha256_hex(key.as_bytes()))
        .await
    {
        Ok(Some(tenant)) => Ok(Tenant(tenant)),
        Ok(None) => Err(ApiError::unauthorized("unknown api key")),
        Err(e) => Err(ApiError::internal(&e)),
    }
}
