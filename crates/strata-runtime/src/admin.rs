//! `/healthz`, `/readyz` and `/metrics`, served by every service.

use axum::extract::State;
use std::future::IntoFuture as _;

use axum::routing::get;
use axum::Router;

use crate::{ApiError, Backends};

/// Liveness, readiness (every backend answers) and Prometheus metrics; no authentication.
pub fn admin_routes(backends: Backends) -> Router {
    routes(backends, true)
}

/// [`admin_routes`] for a service that answers correctly without the hot state (the assembler
/// falls back to the projections and the log): a hot-state failure is reported in the body of
/// `/readyz` but does not make the service unready.
pub fn admin_routes_hot_optional(backends: Backends) -> Router {
    routes(backends, false)
}

fn routes(backends: Backends, hot_required: bool) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(|| async { crate::metrics::render() }))
        .with_state(Readiness {
            backends,
            hot_required,
        })
}

#[derive(Debug, Clone)]
struct Readiness {
    backends: Backends,
    hot_required: bool,
}

async fn ready(State(r): State<Readiness>) -> Result<String, ApiError> {
    let b = &r.backends;
    b.log
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("log: {e}")))?;
    b.store
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("projection store: {e}")))?;
    let hot = b.hot.ping().await;
    b.blobs
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("blob store: {e}")))?;
    match hot {
        Ok(()) => Ok("ready".into()),
        Err(e) if r.hot_required => Err(ApiError::unavailable(format!("hot state: {e}"))),
        Err(e) => Ok(format!(
            "ready (hot state unavailable, answering from the projections: {e})"
        )),
    }
}

/// A boxed error, for what a worker returns.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs a consumer service: `work` gets a future that resolves on SIGTERM or Ctrl-C, while the
/// admin endpoints are served on `listen`. When `work` returns (after a signal, or on its own),
/// the admin server stops too.
pub async fn run_worker<T, E, Fut>(
    backends: Backends,
    listen: std::net::SocketAddr,
    work: impl FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) -> Fut,
) -> Result<T, BoxError>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(address = %listener.local_addr()?, "admin endpoints listening");
    let server = tokio::spawn(
        axum::serve(listener, admin_routes(backends))
            .with_graceful_shutdown(stopped(stop_rx.clone()))
            .into_future(),
    );
    let stop_tx = std::sync::Arc::new(stop_tx);
    let signal_tx = stop_tx.clone();
    let signal = tokio::spawn(async move {
        crate::shutdown_signal().await;
        let _ = signal_tx.send(true);
    });
    let result = work(Box::pin(stopped(stop_rx))).await.map_err(Into::into);
    signal.abort();
    let _ = stop_tx.send(true);
    server.await??;
    result
}
