//! The start of a service: its port answers before its backends are open.
//!
//! [`Service::bind`] binds the service's port (the API port of ingest and the assembler, the
//! admin port of the workers) and serves it at once, then [`Service::open_backends`] opens the
//! backends with [`Backends::open_with_retry`]. Until they are open the port answers:
//!
//! - `/healthz`: 200 (the process is alive: a liveness probe must not restart it for an outage);
//! - `/readyz`: 503 naming the kind of backend the service waits for, e.g.
//!   `{"error": {"code": "unavailable", "message": "waiting for the projection store"}}` — never
//!   its URL or what it answered (the endpoint is unauthenticated; the log has both);
//! - `/metrics`: the metrics;
//! - any other route: the same 503, so a client never gets an answer the service cannot stand
//!   behind.
//!
//! Once the backends are open, the service's own router answers everything
//! ([`Service::serve`] for an HTTP service, [`Service::run_worker`] for a consumer). SIGTERM or
//! Ctrl-C at any point stops the service cleanly; during the wait, `open_backends` returns
//! `None` and the binary exits 0. An error that retrying cannot fix (a malformed URL, a data
//! directory locked by another process, a failed migration) is returned at once and the binary
//! exits with it.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower::ServiceExt as _;

use crate::admin::{BoxError, WorkerHealth};
use crate::{ApiError, BackendOpts, Backends};

/// A service whose port is served from the start (see the module docs).
#[derive(Debug)]
pub struct Service {
    name: String,
    address: SocketAddr,
    /// What `/readyz` says until the service's router is installed.
    health: WorkerHealth,
    /// The service's router, once its backends are open.
    app: Arc<OnceLock<Router>>,
    stop_tx: Arc<watch::Sender<bool>>,
    stop_rx: watch::Receiver<bool>,
    server: JoinHandle<std::io::Result<()>>,
    signal: JoinHandle<()>,
}

/// The future a worker gets: it resolves when the service is asked to stop.
pub type Stop = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Service {
    /// Binds `listen` and serves it (see the module docs); listens for SIGTERM and Ctrl-C from
    /// now on. `name` names the process (in logs, and to another process that finds the data
    /// directory locked).
    pub async fn bind(listen: SocketAddr, name: &str) -> std::io::Result<Service> {
        let shutdown = crate::listen_for_shutdown()?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        tracing::info!(service = name, %address, "listening");
        let (stop_tx, stop_rx) = watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let signal = {
            let stop_tx = stop_tx.clone();
            tokio::spawn(async move {
                shutdown.await;
                let _ = stop_tx.send(true);
            })
        };
        let health = WorkerHealth::new();
        health.failing("starting");
        let app = Arc::new(OnceLock::new());
        let router = Router::new().fallback(dispatch).with_state(Dispatch {
            app: app.clone(),
            health: health.clone(),
        });
        let limits = crate::http_server::HttpLimits::from_env()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let server = tokio::spawn(crate::http_server::serve(
            listener,
            router,
            limits,
            stopped(stop_rx.clone()),
        ));
        Ok(Service {
            name: name.to_owned(),
            address,
            health,
            app,
            stop_tx,
            stop_rx,
            server,
            signal,
        })
    }

    /// Opens the backends `opts` names, retrying the unreachable ones
    /// ([`Backends::open_with_retry`]) while `/readyz` says what the service waits for. `None`:
    /// the service was asked to stop meanwhile.
    pub async fn open_backends(
        &self,
        opts: &BackendOpts,
    ) -> Result<Option<Backends>, crate::Error> {
        let opened =
            Backends::open_with_retry(opts, &self.name, &self.health, self.stopping()).await?;
        if opened.is_some() {
            tracing::info!(service = %self.name, "backends open");
        }
        Ok(opened)
    }

    /// The address the port is bound to (the port the OS chose, for `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// A future that resolves when the service is asked to stop.
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        stopped(self.stop_rx.clone())
    }

    /// For an HTTP service: answers with `router` from now on, until the service is asked to
    /// stop; then finishes the requests in flight.
    pub async fn serve(self, router: Router) -> Result<(), BoxError> {
        self.install(router);
        let served = self.server.await;
        self.signal.abort();
        served??;
        Ok(())
    }

    /// For a consumer: answers with `admin` (its `/healthz`, `/readyz`, `/metrics`) from now
    /// on and runs `work`, which gets a future that resolves when the service is asked to stop.
    /// When `work` returns (after a stop, or on its own) the server stops too.
    pub async fn run_worker<T, E, Fut>(
        self,
        admin: Router,
        work: impl FnOnce(Stop) -> Fut,
    ) -> Result<T, BoxError>
    where
        Fut: Future<Output = Result<T, E>>,
        E: Into<BoxError>,
    {
        self.install(admin);
        let result = work(Box::pin(self.stopping())).await.map_err(Into::into);
        self.signal.abort();
        let _ = self.stop_tx.send(true);
        self.server.await??;
        result
    }

    fn install(&self, router: Router) {
        if self
            .app
            .set(crate::http_server::traced_routes(router))
            .is_err()
        {
            tracing::error!(service = %self.name, "a router was already installed; keeping it");
        }
    }
}

/// Resolves once `rx` says stop (or its sender is gone).
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

#[derive(Debug, Clone)]
struct Dispatch {
    app: Arc<OnceLock<Router>>,
    health: WorkerHealth,
}

/// Every request: to the service's router once there is one, else the starting answers.
async fn dispatch(State(d): State<Dispatch>, request: Request) -> Response {
    if let Some(app) = d.app.get() {
        return match app.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
    }
    match request.uri().path() {
        "/healthz" => "ok".into_response(),
        "/metrics" => crate::metrics::render().into_response(),
        _ => ApiError::unavailable(d.health.problem().unwrap_or_else(|| "starting".into()))
            .into_response(),
    }
}
