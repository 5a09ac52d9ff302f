//! The read side of the HTTP API: context bundles, assemblies, session state and events, raw
//! artifacts, health. Every route but health authenticates with the tenant's API key, and every
//! query is scoped to that tenant.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use strata_runtime::{auth, ApiError};

use strata_core::assembly::ContextAssembly;
use strata_core::payload::PrivacyClass;

use crate::{Assembler, ContextRequest, Error};

/// The assembler and read routes.
pub fn routes(assembler: Assembler) -> Router {
    Router::new()
        .route("/v1/sessions", get(list_sessions))
        .route("/v1/sessions/{session}", get(resume))
        .route("/v1/sessions/{session}/context", post(context))
        .route("/v1/sessions/{session}/state", get(state))
        .route("/v1/sessions/{session}/events", get(events))
        .route("/v1/sessions/{session}/eval", get(eval))
        .route("/v1/assemblies/{assembly}", get(assembly))
        .route("/v1/artifacts/{sha256}", get(artifact))
        .route("/v1/openapi.yaml", get(openapi))
        .with_state(assembler.clone())
        .merge(crate::forgets::routes(assembler.clone()))
        .merge(strata_runtime::admin::admin_routes_hot_optional(
            assembler.backends().clone(),
        ))
        .merge(crate::ui::routes())
}

/// The API's OpenAPI document, as built into the binary (the repository's `docs/openapi.yaml`).
pub const OPENAPI_YAML: &str = include_str!("../../../docs/openapi.yaml");

/// `GET /v1/openapi.yaml`: the document this server answers by, for clients and contract tests
/// to check themselves against (authenticated, as every route but health).
async fn openapi(State(a): State<Assembler>, headers: HeaderMap) -> Result<Response, ApiError> {
    tenant(&a, &headers).await?;
    Ok(([(header::CONTENT_TYPE, "application/yaml")], OPENAPI_YAML).into_response())
}

pub(crate) async fn tenant(a: &Assembler, headers: &HeaderMap) -> Result<String, ApiError> {
    Ok(auth::authenticate(a.backends().store.as_ref(), headers)
        .await?
        .0)
}

pub(crate) fn store_error(e: strata_store::Error) -> ApiError {
    ApiError::internal(&e)
}

async fn context(
    State(a): State<Assembler>,
    Path(session): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    let request: ContextRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ContextRequest::default()
    } else {
        strata_runtime::parse_object(&body, "context request")?
    };
    match a.context_and_record(&tenant, &session, &request).await {
        Ok((assembled, recorded)) => Ok(Json(json!({
            "payload": assembled.payload,
            "assembly": assembled.assembly,
            "recorded": recorded,
        }))),
        Err(e @ Error::NotFound { .. }) => Err(ApiError::not_found(e.to_string())),
        Err(e @ Error::BadRequest(_)) => Err(ApiError::bad_request(e.to_string())),
        Err(e) => Err(ApiError::internal(&e)),
    }
}

/// Query of `GET /v1/assemblies/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AssemblyQuery {
    /// Answer for one record (event id, tool call id or artifact ref) instead.
    why_not: Option<String>,
}

async fn assembly(
    State(a): State<Assembler>,
    Path(id): Path<String>,
    Query(query): Query<AssemblyQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    match a.backends().store.assembly(&tenant, &id).await {
        Ok(Some(record)) => match query.why_not {
            None => Ok(Json(record)),
            Some(reference) => {
                let parsed: ContextAssembly = serde_json::from_value(record).map_err(|e| {
                    ApiError::internal(&format!("assembly {id:?} is unreadable: {e}"))
                })?;
                let explanation =
                    crate::explain_reference(a.backends(), &tenant, &parsed, &reference)
                        .await
                        .map_err(|e| match e {
                            Error::BadRequest(m) => ApiError::conflict(m),
                            e => ApiError::internal(&e),
                        })?;
                Ok(Json(json!({
                    "assembly_id": parsed.assembly_id,
                    "reference": reference,
                    "traced": parsed.traced,
                    "explanation": explanation,
                })))
            }
        },
        Ok(None) => Err(ApiError::not_found(format!("assembly {id:?} not found"))),
        Err(e) => Err(store_error(e)),
    }
}

/// Sessions listed per page, by default and at most.
const SESSIONS_PAGE: u32 = 100;
const SESSIONS_PAGE_MAX: u32 = 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionsQuery {
    /// Only sessions whose ids sort after this one (the previous page's `next_after`).
    after: Option<String>,
    limit: Option<u32>,
    /// Only sessions whose ids contain this text.
    q: Option<String>,
}

async fn list_sessions(
    State(a): State<Assembler>,
    headers: HeaderMap,
    Query(q): Query<SessionsQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    let limit = q.limit.unwrap_or(SESSIONS_PAGE);
    if !(1..=SESSIONS_PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: {limit} is out of range; ask for 1 to {SESSIONS_PAGE_MAX} sessions"
        )));
    }
    let matching = q.q.as_deref().filter(|q| !q.is_empty());
    let sessions = a
        .backends()
        .store
        .sessions_listing(&tenant, q.after.as_deref(), limit, matching)
        .await
        .map_err(store_error)?;
    // A full page may have a next one: its cursor is the last id listed.
    let next_after = (sessions.len() == limit as usize)
        .then(|| sessions.last().map(|s| s.session_id.clone()))
        .flatten();
    let sessions: Vec<Value> = sessions.iter().map(listed).collect();
    Ok(Json(
        json!({ "sessions": sessions, "next_after": next_after }),
    ))
}

/// A session as `GET /v1/sessions` lists it: what it is, when it last moved, who took part,
/// and what is unfinished in it (open calls, unresolved errors, all branches).
fn listed(s: &strata_store::SessionListing) -> Value {
    let branches = s.fold.branches.values();
    let errors: usize = branches.clone().map(|b| b.state.errors.len()).sum();
    let subagents: usize = branches.map(|b| b.state.subagents.len()).sum();
    json!({
        "session_id": s.session_id,
        "head_seq": s.head_seq,
        "event_count": s.event_count,
        "last_event_at": s.last_event_at,
        "model": s.model,
        "participants": s.participants,
        "branches": s.fold.branches.len(),
        "open_tool_calls": s.fold.open_tool_calls.len(),
        "unresolved_errors": errors,
        "subagents": subagents,
    })
}

async fn state(
    State(a): State<Assembler>,
    Path(session): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    match a.backends().store.session_fold(&tenant, &session).await {
        Ok(Some(fold)) => Ok(Json(json!({
            "session_id": fold.session_id,
            "head_seq": fold.head_seq,
            "event_count": fold.event_count,
            "branches": fold.branches,
            "open_tool_calls": fold.open_tool_calls.values().collect::<Vec<_>>(),
            "stats": {"tool_failures": fold.tool_failures, "orphan_results": fold.orphan_results},
        }))),
        Ok(None) => Err(ApiError::not_found(format!(
            "session {session:?} not found"
        ))),
        Err(e) => Err(store_error(e)),
    }
}

/// `GET /v1/sessions/{id}`: what a restarted platform worker needs to carry on — the model and
/// context configuration, where the session stands (`status`), each branch's head, the open tool
/// calls, the subagents with their checkpoints and the latest compaction.
async fn resume(
    State(a): State<Assembler>,
    Path(session): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    let store = &a.backends().store;
    let not_found = || ApiError::not_found(format!("session {session:?} not found"));
    let fold = store
        .session_fold(&tenant, &session)
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)?;
    let heads = store
        .branch_heads(&tenant, &session)
        .await
        .map_err(store_error)?;
    // The main branch's newest message says who speaks next (one message is enough).
    let main = store
        .snapshot(&tenant, &session, strata_core::MAIN_BRANCH, None, 1)
        .await
        .map_err(store_error)?;
    Ok(Json(crate::resume::view(&fold, main.as_ref(), &heads)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    #[serde(default)]
    after_seq: u64,
    #[serde(default = "default_limit")]
    limit: u32,
}

/// Most events one page of `GET /v1/sessions/{id}/events` holds.
const EVENTS_PAGE_MAX: u32 = 10_000;

fn default_limit() -> u32 {
    1000
}

async fn events(
    State(a): State<Assembler>,
    Path(session): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    if !(1..=EVENTS_PAGE_MAX).contains(&q.limit) {
        return Err(ApiError::bad_request(format!(
            "limit: {} is out of range; ask for 1 to {EVENTS_PAGE_MAX} events",
            q.limit
        )));
    }
    let store = &a.backends().store;
    let fold = match store.session_fold(&tenant, &session).await {
        Ok(Some(fold)) => fold,
        Ok(None) => {
            return Err(ApiError::not_found(format!(
                "session {session:?} not found"
            )))
        }
        Err(e) => return Err(store_error(e)),
    };
    let mut events = store
        .events(&tenant, &session, q.after_seq, q.limit)
        .await
        .map_err(store_error)?;
    let through = events
        .last()
        .and_then(|e| e.get("seq"))
        .and_then(Value::as_u64)
        .unwrap_or(q.after_seq);
    let projected = store
        .withheld_results(&tenant, &session, q.after_seq, through)
        .await
        .map_err(store_error)?;
    crate::withhold::redact(&mut events, &projected, &fold.privacy);
    Ok(Json(json!({ "events": events })))
}

async fn eval(
    State(a): State<Assembler>,
    Path(session): Path<String>,
    Query(q): Query<crate::eval::EvalQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    a.evaluate(&tenant, &session, &q).await.map(Json)
}

async fn artifact(
    State(a): State<Assembler>,
    Path(sha256): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    // Privacy belongs to the references: the blob is served only when a projected event
    // cites it and none of those that do holds it `restricted` or `confidential`.
    let classes = a
        .backends()
        .store
        .artifact_classes(&tenant, &sha256)
        .await
        .map_err(|e| ApiError::internal(&e))?;
    if classes.is_empty() {
        return Err(ApiError::not_found(format!(
            "artifact {sha256:?} not found (or not projected yet)"
        )));
    }
    if let Some(class) = classes
        .iter()
        .flatten()
        .copied()
        .filter(|c| *c >= PrivacyClass::Confidential)
        .max()
    {
        return Err(ApiError::forbidden(format!(
            "artifact {sha256:?} is withheld by privacy policy: {} output",
            class.as_str()
        )));
    }
    match a.backends().blobs.get_artifact(&tenant, &sha256).await {
        Ok(Some(bytes)) => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response()),
        Ok(None) => Err(ApiError::not_found(format!(
            "artifact {sha256:?} not found"
        ))),
        Err(e @ strata_blob::Error::InvalidId(_)) => Err(ApiError::bad_request(e.to_string())),
        Err(e) => Err(ApiError::internal(&e)),
    }
}
