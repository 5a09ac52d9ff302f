//! `POST /v1/sessions/{id}/compact`: authenticated, tenant-scoped, answers with the record.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use strata_compactor::scenario::coding_session;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};
use tower::ServiceExt;

async fn post(
    router: &axum::Router,
    key: Option<&str>,
    path: &str,
    body: &str,
) -> (StatusCode, Value) {
    let mut req = Request::post(path);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    let res = router
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn compact_endpoint_is_authenticated_and_returns_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.unwrap();
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    ingestor
        .ingest_json(&Publisher::Operator, coding_session("t", "s", 30))
        .await
        .unwrap();
    strata_projector::catch_up(&backends).await.unwrap();
    backends
        .store
        .put_api_key(&strata_core::sha256_hex(b"sk_t"), "t", "test", None)
        .await
        .unwrap();
    backends
        .store
        .put_api_key(&strata_core::sha256_hex(b"sk_other"), "other", "test", None)
        .await
        .unwrap();
    let router = strata_compactor::http::routes(backends.clone(), ingestor);
    // A projector follows the log, as in `strata dev`.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let projector = strata_projector::Projector::start(
        backends.clone(),
        strata_projector::ProjectorOptions::default(),
    )
    .await
    .unwrap();
    let projecting = tokio::spawn(projector.run(async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));

    let (status, _) = post(&router, None, "/v1/sessions/s/compact", "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Another tenant sees no such session, as for any unknown one; nothing is written for it.
    let (status, body) = post(&router, Some("sk_other"), "/v1/sessions/s/compact", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = post(
        &router,
        Some("sk_t"),
        "/v1/sessions/s/compact",
        r#"{"keep_turns": 3}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "completed");
    let compaction_id = body["compaction_id"].as_str().unwrap();
    assert!(compaction_id.starts_with("cmp_"));
    // Answered once projected: the next call sees it, and a second compaction finds nothing.
    let event_id = format!("cmpev_{}", &compaction_id[4..]);
    let seq = backends.store.event_seq("t", "s", &event_id).await.unwrap();
    assert!(seq.is_some(), "the compaction is not projected yet");
    let (status, body) = post(
        &router,
        Some("sk_t"),
        "/v1/sessions/s/compact",
        r#"{"keep_turns": 3}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "nothing_to_compact");
    let (status, _) = post(
        &router,
        Some("sk_t"),
        "/v1/sessions/s/compact",
        r#"{"nope": 1}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    stop.send(true).unwrap();
    projecting.await.unwrap().unwrap();
}
