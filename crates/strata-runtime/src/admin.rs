//! `/healthz`, `/readyz` and `/metrics`, served by every service.

use axum::extract::State;
use std::future::IntoFuture as _;

use axum::routing::get;
use axum::Router;

use crate::{ApiError, Backends};

/// Liveness, readiness (every backend answers) and Prometheus metrics; no authentication.
pub fn admin_routes(backends: Backends) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(|| async { crate::metrics::render() }))
        .with_state(backends)
}

async fn ready(State(b): State<Backends>) -> Result<&'static str, ApiError> {
    b.log
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("log: {e}")))?;
    b.store
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("projection store: {e}")))?;
    b.hot
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("hot state: {e}")))?;
    b.blobs
        .ping()
        .await
        .map_err(|e| ApiError::unavailable(format!("blob store: {e}")))?;
    Ok("ready")
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
