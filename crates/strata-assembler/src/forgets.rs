//! Forgetting over HTTP (`docs/design/forgetting.md`), and the forgets a crash cut short,
//! finished when the service starts: a destroyed key with derived copies still in place is not
//! left for an operator to notice.
//!
//! A tenant's API key forgets its own sessions and end users; forgetting a whole tenant, or an
//! end user of any tenant, takes the deployment's admin key. A session or a user answers once it
//! is done (after at least 5 s: the services beside this one may trust a cached key that long,
//! and are waited out, once per request); a whole tenant, which may hold any number of sessions,
//! answers 202 at once with the forget's id, and `GET /v1/forgets/{id}` follows it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::{json, Value};
use strata_replay::forget::{self, NotForgettable};
use strata_runtime::{auth, ApiError, Backends};
use strata_store::ProjectionStore;

use crate::http::{store_error, tenant};
use crate::Assembler;

/// The forget routes.
pub(crate) fn routes(assembler: Assembler) -> Router {
    Router::new()
        .route("/v1/sessions/{session}", delete(forget_session))
        .route("/v1/users/{user}", delete(forget_own_user))
        .route("/v1/tenants/{tenant}", delete(forget_tenant))
        .route("/v1/tenants/{tenant}/users/{user}", delete(forget_user))
        .route("/v1/forgets/{forget}", get(forget_status))
        .with_state(assembler)
}

/// `DELETE /v1/sessions/{session}`: forgets the session of the key's tenant for real: its data
/// key destroyed, every derived copy deleted, an audit entry written; its subagents' sessions
/// with it.
async fn forget_session(
    State(a): State<Assembler>,
    Path(session): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    let backends = a.backends();
    if backends
        .store
        .session_fold(&tenant, &session)
        .await
        .map_err(store_error)?
        .is_none()
    {
        return Err(ApiError::not_found(format!(
            "session {session:?} not found"
        )));
    }
    let sets = other_sets(backends).await?;
    let requested_by = format!("an api key of tenant {tenant}");
    forget::forget_session(backends, &sets, &tenant, &session, &requested_by, true)
        .await
        .map(|report| Json(json!(report)))
        .map_err(forget_error)
}

/// `DELETE /v1/users/{user}`: forgets every session of the key's tenant that serves end user
/// `user`, and the memories they were the source of.
async fn forget_own_user(
    State(a): State<Assembler>,
    Path(user): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let tenant = tenant(&a, &headers).await?;
    let requested_by = format!("an api key of tenant {tenant}");
    user_forgotten(&a, &tenant, &user, &requested_by).await
}

/// `DELETE /v1/tenants/{tenant}/users/{user}` (admin key): [`forget_own_user`] for any tenant.
async fn forget_user(
    State(a): State<Assembler>,
    Path((tenant, user)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    admin(&a, &headers).await?;
    user_forgotten(&a, &tenant, &user, "the admin key").await
}

async fn user_forgotten(
    a: &Assembler,
    tenant: &str,
    user: &str,
    requested_by: &str,
) -> Result<Json<Value>, ApiError> {
    let backends = a.backends();
    let sets = other_sets(backends).await?;
    let report = forget::forget_user(backends, &sets, tenant, user, requested_by, true)
        .await
        .map_err(forget_error)?;
    answer(&report, &report.not_forgettable)
}

/// `DELETE /v1/tenants/{tenant}` (admin key): revokes the tenant's API keys and forgets every
/// session of it, as a job: recorded, then run in the background; answers 202 with its id at
/// once.
async fn forget_tenant(
    State(a): State<Assembler>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    admin(&a, &headers).await?;
    let sets = other_sets(a.backends()).await?;
    let entry = forget::job::begin(a.backends(), &tenant, "the admin key")
        .await
        .map_err(forget_error)?;
    let id = entry.forget_id.clone();
    a.forget_jobs
        .set(&id, Live::Running(forget::Progress::default()));
    let runner = a.clone();
    let job_id = id.clone();
    tokio::spawn(async move {
        let jobs = &runner.forget_jobs;
        let progress = |p: &forget::Progress| jobs.set(&job_id, Live::Running(p.clone()));
        let ran = forget::job::run(runner.backends(), &sets, entry, true, &progress).await;
        match ran {
            Ok(_) => jobs.remove(&job_id),
            Err(e) => {
                tracing::warn!(forget_id = %job_id, error = %e, "a tenant's forget stopped");
                jobs.set(&job_id, Live::Failed(e.to_string()));
            }
        }
    });
    let url = format!("/v1/forgets/{id}");
    let body = json!({
        "forget_id": id,
        "tenant_id": tenant,
        "state": "running",
        "status_url": url,
    });
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, url)], Json(body)))
}

/// `GET /v1/forgets/{id}` (admin key): a forget's state — `running` with its progress here,
/// `pending` when another process runs it or a crash cut it short (it is finished at the next
/// start of a service, or by `strata forget --resume`), `failed` with why, or `done` with what
/// it removed (counts only).
async fn forget_status(
    State(a): State<Assembler>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    admin(&a, &headers).await?;
    let entry = forget::job::find(a.backends(), &id)
        .await
        .map_err(forget_error)?
        .ok_or_else(|| ApiError::not_found(format!("no forget {id:?}")))?;
    let report: Option<Value> = entry
        .report
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok());
    let mut body = json!({
        "forget_id": entry.forget_id,
        "tenant_id": entry.tenant_id,
        "kind": if forget::job::is_tenant_job(&entry) { "tenant" } else { "session" },
        "requested_at": entry.requested_at,
        "completed_at": entry.completed_at,
    });
    let state = match (&entry.completed_at, a.forget_jobs.get(&id)) {
        (Some(_), _) => {
            body["report"] = json!(report);
            "done"
        }
        (None, Some(Live::Running(progress))) => {
            body["progress"] = json!(progress);
            "running"
        }
        (None, Some(Live::Failed(why))) => {
            body["error"] = json!(format!(
                "{why}; it is finished at the next start of a service, or by `strata forget \
                 --resume`"
            ));
            "failed"
        }
        (None, None) => "pending",
    };
    body["state"] = json!(state);
    Ok(Json(body))
}

/// The tenants' forgets this assembler runs, by id, while they run (a finished one is read from
/// the audit).
#[derive(Debug, Default)]
pub(crate) struct Jobs(Mutex<HashMap<String, Live>>);

#[derive(Debug, Clone)]
enum Live {
    Running(forget::Progress),
    Failed(String),
}

impl Jobs {
    fn set(&self, id: &str, live: Live) {
        self.lock().insert(id.to_owned(), live);
    }

    fn get(&self, id: &str) -> Option<Live> {
        self.lock().get(id).cloned()
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        // Each operation is one map call: a panic elsewhere cannot leave it half-changed.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn admin(a: &Assembler, headers: &HeaderMap) -> Result<(), ApiError> {
    let store = a.backends().store.as_ref();
    auth::authenticate_admin(a.options().admin_key.as_ref(), store, headers).await
}

/// The report; 409 `not_forgettable` with the report as details when some sessions could not
/// be forgotten (the rest were).
fn answer<R: Serialize>(report: &R, left: &[NotForgettable]) -> Result<Json<Value>, ApiError> {
    let report = json!(report);
    if left.is_empty() {
        return Ok(Json(report));
    }
    let names: Vec<&str> = left.iter().map(|n| n.session_id.as_str()).collect();
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "not_forgettable",
        format!(
            "{} session(s) have events on the log in the clear (written while sealing was off) \
             and were left as they were: {}; every other session was forgotten (details)",
            left.len(),
            names.join(", ")
        ),
    )
    .with_details(report))
}

/// The projection sets besides the live one (older rebuild generations).
async fn other_sets(backends: &Backends) -> Result<Vec<Arc<dyn ProjectionStore>>, ApiError> {
    Ok(forget::older_projection_sets(backends)
        .await
        .map_err(|e| ApiError::internal(&e))?
        .into_iter()
        .map(|(_, store)| store)
        .collect())
}

fn forget_error(e: strata_replay::Error) -> ApiError {
    match e {
        // Not sealed (or partly in the clear): nothing was changed, and it cannot be by retrying.
        strata_replay::Error::Invalid(why) => {
            ApiError::new(StatusCode::CONFLICT, "not_forgettable", why)
        }
        e @ strata_replay::Error::Pending(_) => ApiError::unavailable(e.to_string()),
        e => ApiError::internal(&e),
    }
}

/// First wait before trying again while the projector has not reached the log's end.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between two tries.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Finishes every pending forget; tried again (backing off) while the projector has not caught
/// up, given up with a warning on any other error (`strata forget --resume` finishes it then).
pub async fn finish_pending(backends: Backends) {
    let mut wait = FIRST_RETRY;
    loop {
        match finish_once(&backends).await {
            Ok(0) => return,
            Ok(done) => {
                tracing::info!(forgets = done, "finished the forgets a crash cut short");
                return;
            }
            Err(e @ strata_replay::Error::Pending(_)) => {
                tracing::warn!(error = %e, retry_in_secs = wait.as_secs(), "a pending forget waits");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_RETRY);
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not finish the pending forgets; `strata forget --resume` will"
                );
                return;
            }
        }
    }
}

async fn finish_once(backends: &Backends) -> Result<usize, strata_replay::Error> {
    let sets: Vec<_> = forget::older_projection_sets(backends)
        .await?
        .into_iter()
        .map(|(_, store)| store)
        .collect();
    Ok(forget::resume_pending(backends, &sets, true).await?.len())
}
