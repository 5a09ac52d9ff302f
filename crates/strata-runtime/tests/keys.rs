//! Key lifecycle: a revoked development key stays dead across restarts, and a new one replaces
//! it; an expired key is refused.

use axum::http::HeaderMap;
use strata_runtime::auth;

fn bearer(key: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("authorization", format!("Bearer {key}").parse().unwrap());
    h
}

#[tokio::test]
async fn a_revoked_dev_key_is_never_reinstated_and_a_new_one_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("db.sqlite").display());
    let store = strata_store::open(&url).await.unwrap();
    let first = auth::ensure_dev_key(store.as_ref(), dir.path())
        .await
        .unwrap();
    // A restart keeps a live key.
    assert_eq!(
        auth::ensure_dev_key(store.as_ref(), dir.path())
            .await
            .unwrap(),
        first
    );
    let id = strata_store::ApiKeyInfo::id_of(&strata_core::sha256_hex(first.as_bytes()));
    assert!(store
        .revoke_api_key(&id, &strata_store::now_utc())
        .await
        .unwrap());
    assert!(auth::authenticate(store.as_ref(), &bearer(&first))
        .await
        .is_err());

    let second = auth::ensure_dev_key(store.as_ref(), dir.path())
        .await
        .unwrap();
    assert_ne!(second, first, "the revoked key is not registered again");
    assert!(auth::authenticate(store.as_ref(), &bearer(&first))
        .await
        .is_err());
    let tenant = auth::authenticate(store.as_ref(), &bearer(&second))
        .await
        .unwrap();
    assert_eq!(tenant.0, auth::DEV_TENANT);
    let on_disk = std::fs::read_to_string(dir.path().join("dev-api-key")).unwrap();
    assert_eq!(on_disk.trim(), second);
}

#[tokio::test]
async fn an_expired_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("db.sqlite").display());
    let store = strata_store::open(&url).await.unwrap();
    let old = auth::create_expiring_key(store.as_ref(), "acme", "t", Some("2020-01-01T00:00:00Z"))
        .await
        .unwrap();
    let err = auth::authenticate(store.as_ref(), &bearer(&old))
        .await
        .unwrap_err();
    assert_eq!(err.status, axum::http::StatusCode::UNAUTHORIZED);
    let fresh =
        auth::create_expiring_key(store.as_ref(), "acme", "t", Some("2999-01-01T00:00:00Z"))
            .await
            .unwrap();
    assert!(auth::authenticate(store.as_ref(), &bearer(&fresh))
        .await
        .is_ok());
}
