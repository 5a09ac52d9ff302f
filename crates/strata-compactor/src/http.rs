//! `POST /v1/sessions/{session}/compact`: an explicit compaction request, authenticated with
//! the tenant's API key and scoped to that tenant. The body (optional) is
//! `{"branch": "main", "keep_turns": 2}`. The answer is the compaction record (status
//! `completed` or `failed` with its CompressionCheck), or `{"status": "nothing_to_compact"}`,
//! once the record is projected (bounded): the next call sees the compaction.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use strata_ingest::Ingestor;
use strata_runtime::{auth, ApiError, Backends};

/// What a caller may ask for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactRequest {
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    keep_turns: Option<usize>,
}

#[derive(Debug, Clone)]
struct Ctx {
    backends: Backends,
    ingestor: Arc<Ingestor>,
}

/// The compaction route.
pub fn routes(backends: Backends, ingestor: Arc<Ingestor>) -> Router {
    Router::new()
        .route("/v1/sessions/{session}/compact", post(compact))
        .with_state(Ctx { backends, ingestor })
}

async fn compact(
    State(c): State<Ctx>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let tenant = auth::authenticate(c.backends.store.as_ref(), &headers)
        .await?
        .0;
    let request: CompactRequest = if body.iter().all(u8::is_ascii_whitespace) {
        CompactRequest::default()
    } else {
        strata_runtime::parse_object(&body, "compact request")?
    };
    let branch = request
        .branch
        .unwrap_or_else(|| strata_core::MAIN_BRANCH.to_owned());
    let known = c
        .backends
        .store
        .session_fold(&tenant, &session)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    if known.is_none() {
        return Err(ApiError::not_found(format!(
            "session {session:?} not found"
        )));
    }
    match crate::compact_session(
        &c.backends,
        &c.ingestor,
        &tenant,
        &session,
        &branch,
        request.keep_turns.unwrap_or(2),
    )
    .await
    {
        Ok(Some(r)) => {
            // `strata dev` projects beside this route: answer once the record is readable.
            crate::wait_until_projected(&c.backends, &r)
                .await
                .map_err(|e| ApiError::internal(&e))?;
            let status = if r.succeeded() {
                StatusCode::OK
            } else {
                StatusCode::UNPROCESSABLE_ENTITY
            };
            Ok((
                status,
                Json(serde_json::to_value(&r).unwrap_or(Value::Null)),
            ))
        }
        Ok(None) => Ok((
            StatusCode::OK,
            Json(json!({"status": "nothing_to_compact"})),
        )),
        Err(e @ crate::Error::NotFound(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e) => Err(ApiError::internal(&e)),
    }
}
