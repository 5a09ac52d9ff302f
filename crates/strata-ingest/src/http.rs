//! `POST /v1/events`: append a batch of canonical events.
//!
//! Body: `{"events": [EVENT, ...]}` or a bare JSON array. Answers `200` with one outcome per
//! event (`accepted` or `duplicate`), `400` with every field error (event index, event id, field,
//! message), `401` without a valid key (checked before the body is read), `403` for another
//! tenant's event, `408` when the body is too slow to arrive, `413` over 64 MiB or 10,000
//! events, `409` when
//! `expected_seq` or `seq` does not match the session head, `429` (with `Retry-After`) while the
//! tenant has its share of events in flight, `503` while a backend is unavailable
//! and `507` when the blob store has no space left for a large tool output. Nothing of a refused
//! batch is acknowledged: re-sending it later is safe.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use strata_runtime::http_server::read_body;
use strata_runtime::{auth, ApiError};

use crate::{IngestError, Ingestor, Publisher};

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Most invalid events a 400 lists (every error of each); the rest are counted.
const MAX_REPORTED_EVENTS: usize = 100;
/// Most events in one batch.
pub const MAX_BATCH_EVENTS: usize = 10_000;

/// The ingest routes.
pub fn routes(ingestor: Arc<Ingestor>) -> Router {
    Router::new()
        .route("/v1/events", post(append_events))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(ingestor)
}

async fn append_events(
    State(ingestor): State<Arc<Ingestor>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    // The key is checked from the head, before a byte of the body is read: a keyless client
    // never makes the server buffer its upload.
    let tenant = auth::authenticate(ingestor.backends().store.as_ref(), &headers).await?;
    let body = read_body(&headers, body, MAX_BODY_BYTES).await?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    let events = match value {
        Value::Array(events) => events,
        Value::Object(mut obj) => match obj.remove("events") {
            Some(Value::Array(events)) => events,
            Some(_) => {
                return Err(ApiError::bad_request(
                    "field events: expected an array of events",
                ))
            }
            None => {
                return Err(ApiError::bad_request(
                    "missing field events: send {\"events\": [...]} or a JSON array",
                ))
            }
        },
        _ => {
            return Err(ApiError::bad_request(
                "request body must be {\"events\": [...]} or a JSON array of events",
            ))
        }
    };
    if events.is_empty() {
        return Err(ApiError::bad_request("events: the batch is empty"));
    }
    if events.len() > MAX_BATCH_EVENTS {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "events: {} in one batch, at most {MAX_BATCH_EVENTS}; nothing of this batch was \
                 accepted; send smaller batches",
                events.len()
            ),
        ));
    }
    match ingestor
        .ingest_json(&Publisher::Tenant(tenant.0), events)
        .await
    {
        Ok(outcomes) => Ok(Json(json!({ "results": outcomes }))),
        Err(e) => {
            strata_runtime::metrics::BATCHES_REJECTED.add(1);
            Err(to_api_error(e))
        }
    }
}

/// Maps an ingest refusal to its HTTP answer.
pub fn to_api_error(e: IngestError) -> ApiError {
    match e {
        IngestError::Invalid(mut errors) => {
            let message = e_summary(&errors);
            // Every problem of the first events, and how many more events have some.
            let more = errors.len().saturating_sub(MAX_REPORTED_EVENTS);
            errors.truncate(MAX_REPORTED_EVENTS);
            let mut details = json!({ "events": errors });
            if more > 0 {
                details["more_invalid_events"] = json!(more);
            }
            ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "invalid_events",
                message,
            )
            .with_details(details)
        }
        e @ (IngestError::WrongTenant { .. } | IngestError::ServiceOnly { .. }) => {
            ApiError::forbidden(e.to_string())
        }
        e @ IngestError::Conflict { .. } => ApiError::conflict(e.to_string()),
        IngestError::IdConflict(conflicts) => {
            let message = IngestError::IdConflict(conflicts.clone()).to_string();
            let more = conflicts.len().saturating_sub(MAX_REPORTED_EVENTS);
            let shown = &conflicts[..conflicts.len().min(MAX_REPORTED_EVENTS)];
            let mut details = json!({ "events": shown });
            if more > 0 {
                details["more_conflicting_events"] = json!(more);
            }
            ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "event_id_conflict",
                format!("{message}; nothing of this batch was accepted"),
            )
            .with_details(details)
        }
        e @ IngestError::Forgotten { .. } => {
            ApiError::new(axum::http::StatusCode::CONFLICT, "forgotten", e.to_string())
        }
        IngestError::Backend(cause) => {
            let mut err = ApiError::internal(&cause);
            err.status = axum::http::StatusCode::SERVICE_UNAVAILABLE;
            err.code = "unavailable";
            err.message = "a backend is unavailable; nothing of this batch was accepted".into();
            err
        }
        e @ IngestError::Throttled { .. } => ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            e.to_string(),
        ),
        IngestError::Unavailable(why) => {
            ApiError::unavailable(format!("{why}; nothing of this batch was accepted"))
        }
        IngestError::Artifact {
            index,
            event_id,
            bytes,
            source,
        } if source.is_no_space() => {
            // Logged in full (it names the store); the client learns which event and why.
            tracing::error!(index, event_id = %event_id, bytes, error = %source,
                "blob store full; batch refused");
            ApiError::new(
                axum::http::StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                format!(
                    "event {index} ({event_id}): no space left on the blob store for its tool \
                     output ({bytes} bytes); nothing of this batch was accepted; retry once space \
                     is freed"
                ),
            )
        }
        IngestError::Artifact {
            index,
            event_id,
            bytes,
            source,
        } => {
            tracing::error!(index, event_id = %event_id, bytes, error = %source,
                "blob store failed; batch refused");
            ApiError::unavailable(format!(
                "event {index} ({event_id}): the blob store is unavailable for its tool output \
                 ({bytes} bytes); nothing of this batch was accepted"
            ))
        }
    }
}

fn e_summary(errors: &[crate::EventErrors]) -> String {
    let first = &errors[0];
    let field = first
        .errors
        .first()
        .map(|f| format!("{}: {}", f.field, f.message))
        .unwrap_or_default();
    format!(
        "{} invalid event(s); event {}{}: {field}",
        errors.len(),
        first.index,
        first
            .event_id
            .as_deref()
            .map(|id| format!(" ({id})"))
            .unwrap_or_default()
    )
}
