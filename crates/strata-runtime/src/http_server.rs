//! The HTTP server every service runs: axum's router on hyper's HTTP/1 connections, with the
//! limits a server facing untrusted clients needs and `axum::serve` does not set.
//!
//! - **Connections**: at most [`HttpLimits::max_connections`] at once; further ones wait in the
//!   listen backlog until one closes, so a client that opens thousands cannot exhaust memory or
//!   file descriptors.
//! - **Headers**: a request head must arrive within [`HttpLimits::header_read_timeout`], and so
//!   must the next one on an idle keep-alive connection: a slow-loris client loses its socket.
//! - **Failed authentications**: once a client address had more `401`s in a minute than
//!   [`HttpLimits::auth_failures_per_minute`], its further failing attempts get `429` (with
//!   `Retry-After`) until the minute is over. A valid key is always served: the throttle
//!   answers failures, never a credential, so one caller's bad keys cannot lock out the others
//!   behind the same address.
//! - **Bodies**: the whole body of a request must arrive within [`HttpLimits::body_timeout`] of
//!   its head; a body read after that fails with [`BodyTimeout`], which [`read_body`] answers with
//!   `408`. Handlers authenticate from the head *before* they read a body (see
//!   `strata-ingest`), so a keyless client never makes the server buffer anything.
//! - **Errors**: every error answer has the JSON error body (axum's own rejections too) and every
//!   `503` and `429` a `Retry-After`.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::ApiError;

/// The limits of [`serve`]. `from_env` reads `STRATA_HTTP_MAX_CONNECTIONS`,
/// `STRATA_HTTP_HEADER_TIMEOUT_SECS` and `STRATA_HTTP_BODY_TIMEOUT_SECS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub body_timeout: Duration,
    /// Failed authentications (401s) a client address may have in a minute; past them its
    /// failing attempts get `429` instead of `401` until the minute is over (requests with a
    /// valid key are served as usual).
    pub auth_failures_per_minute: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            auth_failures_per_minute: 20,
        }
    }
}

impl HttpLimits {
    /// The defaults, overridden by the environment; a malformed value is an error naming it.
    pub fn from_env() -> Result<Self, String> {
        let mut limits = Self::default();
        if let Some(n) = env_number("STRATA_HTTP_MAX_CONNECTIONS")? {
            limits.max_connections = (n as usize).max(1);
        }
        if let Some(s) = env_number("STRATA_HTTP_HEADER_TIMEOUT_SECS")? {
            limits.header_read_timeout = Duration::from_secs(s.max(1));
        }
        if let Some(s) = env_number("STRATA_HTTP_BODY_TIMEOUT_SECS")? {
            limits.body_timeout = Duration::from_secs(s.max(1));
        }
        if let Some(n) = env_number("STRATA_HTTP_AUTH_FAILURES_PER_MINUTE")? {
            limits.auth_failures_per_minute = n.clamp(1, u64::from(u32::MAX)) as u32;
        }
        Ok(limits)
    }
}

/// `router` with every request run in an `http.request` span named by its route, a child of the
/// caller's trace when the request carries a W3C `traceparent` header
/// ([`crate::telemetry::continue_trace`]); the handlers' own spans (`ingest.batch`,
/// `assembler.context`, …) nest under it. Applied to a service's own routes (after routing, so
/// the route is known).
pub fn traced_routes(router: Router) -> Router {
    router.layer(axum::middleware::from_fn(traced))
}

async fn traced(req: Request<Body>, next: Next) -> Response {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{} {}", req.method(), route_of(&req)),
        otel.kind = "server",
        http.request.method = %req.method(),
        url.path = %req.uri().path(),
        http.route = %route_of(&req),
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::continue_trace(&span, req.headers());
    let response = next.run(req).instrument(span.clone()).await;
    span.record(
        "http.response.status_code",
        i64::from(response.status().as_u16()),
    );
    response
}

/// The route template that matched (`/v1/sessions/{session}/context`), never the raw path with
/// its ids, so that span names stay few.
fn route_of(req: &Request<Body>) -> String {
    req.extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned())
}

fn env_number(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name}={v:?}: expected a whole number")),
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then lets the
/// requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let throttle = Arc::new(AuthThrottle::new(limits.auth_failures_per_minute));
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            throttle,
            throttle_failed_auth,
        ))
        .layer(axum::middleware::from_fn(uniform_errors));
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let body_timeout = limits.body_timeout;
        let service = router.clone().map_request(move |req: Request<Incoming>| {
            let mut req = req.map(|body| Body::new(TimedBody::new(body, body_timeout)));
            req.extensions_mut().insert(ConnectInfo(remote));
            req
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Failed authentications per client address in the current minute.
struct AuthThrottle {
    per_minute: u32,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// Most client addresses tracked at once; beyond it, windows that ended are dropped first.
const THROTTLE_MAX_ADDRESSES: usize = 65_536;
const THROTTLE_WINDOW: Duration = Duration::from_secs(60);

impl AuthThrottle {
    fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a failed authentication of `ip`; past the allowance of its window, how long
    /// until the window is over.
    fn failed(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= THROTTLE_MAX_ADDRESSES && !failures.contains_key(&ip) {
            failures.retain(|_, (started, _)| now.duration_since(*started) < THROTTLE_WINDOW);
            if failures.len() >= THROTTLE_MAX_ADDRESSES {
                return None;
            }
        }
        let entry = failures.entry(ip).or_insert((now, 0));
        if now.duration_since(entry.0) >= THROTTLE_WINDOW {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
        let left = THROTTLE_WINDOW.saturating_sub(now.duration_since(entry.0));
        (entry.1 > self.per_minute).then_some(left)
    }
}

/// Longest plain-text rejection body read back to be re-sent as the JSON error's message.
const REJECTION_MAX_BYTES: usize = 16 * 1024;

/// The error code of a status that reached a client without the JSON error body.
fn status_code_name(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "unprocessable",
        StatusCode::TOO_MANY_REQUESTS => "too_many_requests",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    }
}

/// Every error answer carries the JSON error body, and every `503` and `429` a `Retry-After`:
/// axum's own rejections (a malformed query string, an unknown route, a wrong method) come as
/// plain text or with no body at all, which a client cannot tell from a proxy's page.
async fn uniform_errors(req: axum::extract::Request, next: Next) -> Response {
    let route = format!("{} {}", req.method(), req.uri().path());
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let mut response = if is_json {
        response
    } else {
        let (parts, body) = response.into_parts();
        let text = axum::body::to_bytes(body, REJECTION_MAX_BYTES)
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
            .unwrap_or_default();
        let message = match (text.is_empty(), status) {
            (false, _) => format!("{route}: {text}"),
            (true, StatusCode::NOT_FOUND) => format!("no such route: {route}"),
            (true, StatusCode::METHOD_NOT_ALLOWED) => {
                format!("{route}: method not allowed on this route")
            }
            (true, _) => format!("{route}: {status}"),
        };
        let mut fresh = ApiError::new(status, status_code_name(status), message).into_response();
        for (name, value) in &parts.headers {
            if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
                fresh.headers_mut().insert(name.clone(), value.clone());
            }
        }
        fresh
    };
    if matches!(
        status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
    ) && !response.headers().contains_key(header::RETRY_AFTER)
    {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

/// Counts the `401`s of each client address, and answers a failing attempt past the address's
/// allowance this minute with `429` instead. A request that authenticates is always served, so
/// one caller's bad keys never lock out the tenants that share its address (a NAT, a proxy).
async fn throttle_failed_auth(
    State(throttle): State<Arc<AuthThrottle>>,
    req: axum::extract::Request,
    next: Next,
) -> Response {
    let ip = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    // Handlers check the key from the head before reading a body (and a key check is one
    // hash and one lookup), so serving a throttled address's attempt costs next to nothing.
    let response = next.run(req).await;
    if response.status() != StatusCode::UNAUTHORIZED {
        return response;
    }
    match ip.and_then(|ip| throttle.failed(ip, Instant::now())) {
        Some(wait) => too_many_failures(wait),
        None => response,
    }
}

/// The `429` a failing attempt gets once its address spent its allowance, with `Retry-After`.
fn too_many_failures(wait: Duration) -> Response {
    let secs = wait.as_secs().max(1);
    let mut response = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_requests",
        format!(
            "too many failed authentications from this address; a valid key is still served, \
             failing ones are refused for {secs} s"
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, secs.into());
    response
}

/// A request body that must arrive whole within a deadline set when its head arrived.
struct TimedBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl TimedBody {
    fn new(inner: Incoming, within: Duration) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(within)),
        }
    }
}

/// The request body did not arrive within the server's body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the server's body timeout")]
pub struct BodyTimeout;

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

/// Reads a request body of at most `limit` bytes: `413` beyond it (before reading anything
/// when the declared length says so), `408` when it does not arrive in time, `400` when the
/// client breaks off.
pub async fn read_body(
    headers: &axum::http::HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body is larger than {limit} bytes; send smaller batches"),
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let cause = std::error::Error::source(&e);
        if chain(cause).any(|c| c.is::<BodyTimeout>()) {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time; nothing of it was accepted",
            )
        } else if chain(cause).any(|c| c.is::<http_body_util::LengthLimitError>()) {
            too_large()
        } else {
            ApiError::bad_request("the request body could not be read to its end")
        }
    })
}

fn chain<'a>(
    first: Option<&'a (dyn std::error::Error + 'static)>,
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(first, |e| e.source())
}
