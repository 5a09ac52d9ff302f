//! `/healthz`, `/readyz` and `/metrics`, served by every service.
//!
//! These are the routes once the backends are open; before, while a service waits for them,
//! [`crate::startup::Service`] answers on the same port (`/readyz` 503 naming what it waits for).
//!
//! `/readyz` answers 503 while a backend does not answer its ping (each ping is bounded by
//! [`PING_TIMEOUT`], so a probe never hangs on a dead server) or while the service's own work
//! reports a failure ([`WorkerHealth`]): a consumer that keeps failing on a backend is taken out
//! of rotation even when that backend's ping happens to pass.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;

use axum::routing::get;
use axum::Router;

use crate::{ApiError, Backends};

/// Longest a `/readyz` waits for one backend's ping before reporting it unavailable.
pub const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// What a service's own work says about itself, shared between the work loop and `/readyz`.
///
/// A worker that retries a failing backend with backoff calls [`WorkerHealth::failing`] on each
/// failure and [`WorkerHealth::ok`] once it succeeds again; meanwhile `/readyz` answers 503 with
/// the reason.
#[derive(Debug, Clone, Default)]
pub struct WorkerHealth {
    problem: Arc<Mutex<Option<String>>>,
}

impl WorkerHealth {
    /// A health that reports no problem.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports the worker not ready, with the reason `/readyz` gives.
    pub fn failing(&self, reason: impl Into<String>) {
        *self.lock() = Some(reason.into());
    }

    /// Reports the worker ready again.
    pub fn ok(&self) {
        *self.lock() = None;
    }

    /// The current problem, if any.
    pub fn problem(&self) -> Option<String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic while holding this lock cannot leave the Option half-written: keep using it.
        self.problem
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Liveness, readiness (every backend answers) and Prometheus metrics; no authentication.
pub fn admin_routes(backends: Backends) -> Router {
    routes(backends, true, None)
}

/// [`admin_routes`] for a worker that also reports on its own work: `/readyz` fails while
/// `health` has a problem.
pub fn admin_routes_with_health(backends: Backends, health: WorkerHealth) -> Router {
    routes(backends, true, Some(health))
}

/// [`admin_routes`] for a service that answers correctly without the hot state (the assembler
/// falls back to the projections and the log): a hot-state failure is reported in the body of
/// `/readyz` but does not make the service unready.
pub fn admin_routes_hot_optional(backends: Backends) -> Router {
    routes(backends, false, None)
}

fn routes(backends: Backends, hot_required: bool, worker: Option<WorkerHealth>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(|| async { crate::metrics::render() }))
        .with_state(Readiness {
            backends,
            hot_required,
            worker,
        })
}

#[derive(Debug, Clone)]
struct Readiness {
    backends: Backends,
    hot_required: bool,
    worker: Option<WorkerHealth>,
}

/// Runs one backend ping, bounded by [`PING_TIMEOUT`]; the error names the backend.
async fn ping<E: std::fmt::Display>(
    what: &str,
    ping: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    match tokio::time::timeout(PING_TIMEOUT, ping).await {
        Ok(Ok(())) => Ok(()),
        // `/readyz` is unauthenticated: what the backend answered goes to the log only.
        Ok(Err(e)) => {
            tracing::warn!(backend = what, error = %e, "readiness ping failed");
            Err(format!("{what}: unavailable"))
        }
        Err(_) => Err(format!(
            "{what}: no answer within {} s",
            PING_TIMEOUT.as_secs()
        )),
    }
}

async fn ready(State(r): State<Readiness>) -> Result<String, ApiError> {
    if let Some(problem) = r.worker.as_ref().and_then(WorkerHealth::problem) {
        return Err(ApiError::unavailable(problem));
    }
    let b = &r.backends;
    ping("log", b.log.ping())
        .await
        .map_err(ApiError::unavailable)?;
    ping("projection store", b.store.ping())
        .await
        .map_err(ApiError::unavailable)?;
    let hot = ping("hot state", b.hot.ping()).await;
    ping("blob store", b.blobs.ping())
        .await
        .map_err(ApiError::unavailable)?;
    match hot {
        Ok(()) => Ok("ready".into()),
        Err(e) if r.hot_required => Err(ApiError::unavailable(e)),
        Err(_) => Ok("ready (hot state unavailable, answering from the projections)".into()),
    }
}

/// A boxed error, for what a worker returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs a consumer service on backends opened already: `work` gets a future that resolves on
/// SIGTERM or Ctrl-C, while the admin endpoints are served on `listen`. When `work` returns
/// (after a signal, or on its own), the admin server stops too. A service binary serves its port
/// before it opens its backends instead: see [`crate::startup::Service`].
pub async fn run_worker<T, E, Fut>(
    backends: Backends,
    listen: std::net::SocketAddr,
    work: impl FnOnce(crate::startup::Stop) -> Fut,
) -> Result<T, BoxError>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    run_worker_with_health(backends, listen, WorkerHealth::new(), work).await
}

/// [`run_worker`] for a worker that reports on its own work through `health` (see
/// [`admin_routes_with_health`]).
pub async fn run_worker_with_health<T, E, Fut>(
    backends: Backends,
    listen: std::net::SocketAddr,
    health: WorkerHealth,
    work: impl FnOnce(crate::startup::Stop) -> Fut,
) -> Result<T, BoxError>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    crate::startup::Service::bind(listen, "worker")
        .await?
        .run_worker(admin_routes_with_health(backends, health), work)
        .await
}
