//! Opening the backends at a service's start ([`Backends::open_with_retry`],
//! [`startup::Service`]), in process, against a redis-server this test starts itself on a port
//! nothing listens on yet (never the shared one of `scripts/services.sh`). The service binaries
//! are run the same way by `crates/strata-projector/tests/startup.rs` and
//! `crates/strata-ingest/tests/startup.rs`.
//!
//! Without `redis-server` on `PATH` the test that needs it skips with a message, except under
//! `CI`, where it fails.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use strata_runtime::admin::WorkerHealth;
use strata_runtime::startup::Service;
use strata_runtime::{BackendOpts, Backends, DataDirLock};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn redis_server_installed() -> bool {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found || std::env::var_os("CI").is_none(),
        "redis-server is not installed under CI (scripts/services.sh start installs it)"
    );
    if !found {
        eprintln!(
            "skipping: redis-server is not installed (scripts/services.sh start installs it)"
        );
    }
    found
}

/// A redis-server of this test's own on `port`, password `hunter2`; killed on drop.
struct PrivateRedis(Child);

impl PrivateRedis {
    fn start(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                "hunter2",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("run redis-server");
        PrivateRedis(child)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `method path` on `port`: the status code and the body (`None`: no answer).
fn request(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let text = exchange(port, method, path)?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// `method path` on `port`: the whole answer, head and body.
fn exchange(port: u16, method: &str, path: &str) -> Option<String> {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    Some(text)
}

/// The port answers before the backends are open: `/healthz` 200, `/readyz` and the API 503
/// naming the backend it waits for and why; once the server is up, the backends open and the
/// service's router answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_answers_503_until_an_unreachable_backend_comes_up() {
    if !redis_server_installed() {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let redis_port = free_port();
    let opts = BackendOpts {
        hot_url: Some(format!("redis://:hunter2@127.0.0.1:{redis_port}/0")),
        ..BackendOpts::embedded(dir.path())
    };
    let service = Service::bind("127.0.0.1:0".parse().unwrap(), "test")
        .await
        .expect("bind");
    let port = service.local_addr().port();
    let task = {
        let opts = opts.clone();
        tokio::spawn(async move {
            let opened = service.open_backends(&opts).await;
            (service, opened)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ready = None;
    while Instant::now() < deadline {
        ready = tokio::task::spawn_blocking(move || request(port, "GET", "/readyz"))
            .await
            .unwrap();
        if matches!(&ready, Some((503, body)) if body.contains("waiting for")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = ready.expect("/readyz answers during the wait");
    assert_eq!(status, 503, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
    let message = body["error"]["message"].as_str().expect("a message");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    // The kind of backend, and nothing of it: not its URL, host or what it answered (the
    // endpoint is unauthenticated).
    assert_eq!(message, "waiting for the hot state", "{message}");
    assert!(!message.contains("hunter2"), "password leaked: {message}");
    let check = move || {
        (
            request(port, "GET", "/healthz"),
            request(port, "POST", "/v1/events"),
            request(port, "GET", "/metrics").map(|r| r.0),
            exchange(port, "POST", "/v1/events"),
        )
    };
    let (healthz, api, metrics, api_head) = tokio::task::spawn_blocking(check).await.unwrap();
    assert_eq!(healthz.map(|r| r.0), Some(200));
    let (status, body) = api.expect("the API answers during the wait");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(r#""code":"unavailable""#), "{body}");
    // A client is told when to come back.
    let api_head = api_head.expect("the API answers during the wait");
    assert!(
        api_head.to_ascii_lowercase().contains("retry-after: 1\r\n"),
        "{api_head}"
    );
    assert_eq!(metrics, Some(200));

    // The server comes up: the next attempt (at most 5 s of backoff later) opens it.
    let _redis = PrivateRedis::start(redis_port);
    let up = Instant::now();
    let (service, opened) = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the backends open within 10 s of the server coming up")
        .unwrap();
    eprintln!("opened {:?} after the server came up", up.elapsed());
    let backends = opened
        .expect("no error that retrying cannot fix")
        .expect("not stopped");
    backends.hot.ping().await.expect("the hot state answers");
    let router = strata_runtime::admin::admin_routes(backends);
    let serving = tokio::spawn(service.serve(router));
    let ready = tokio::task::spawn_blocking(move || request(port, "GET", "/readyz"))
        .await
        .unwrap();
    assert_eq!(ready, Some((200, "ready".into())));
    serving.abort();
    eprintln!("test {:?}", started.elapsed());
}

/// A shutdown during the wait ends it: `None`, at once.
#[tokio::test]
async fn a_shutdown_during_the_wait_stops_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts {
        db_url: Some(format!("postgres://strata@127.0.0.1:{}/db", free_port())),
        ..BackendOpts::embedded(dir.path())
    };
    let health = WorkerHealth::new();
    let started = Instant::now();
    let opened = Backends::open_with_retry(
        &opts,
        "test",
        &health,
        tokio::time::sleep(Duration::from_millis(500)),
    )
    .await
    .expect("no error that retrying cannot fix");
    assert!(opened.is_none(), "stopped, not opened");
    assert!(started.elapsed() < Duration::from_secs(2));
    let problem = health.problem().expect("not ready during the wait");
    assert!(
        problem.starts_with("waiting for the projection store"),
        "{problem}"
    );
}

/// Errors that retrying cannot fix are returned at once.
#[tokio::test]
async fn errors_retrying_cannot_fix_are_returned_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let embedded = BackendOpts::embedded(dir.path());
    let cases = [
        (
            BackendOpts {
                db_url: Some("mysql://strata:hunter2@db/strata".into()),
                ..embedded.clone()
            },
            "unsupported store url",
        ),
        (
            BackendOpts {
                log_url: Some("kafka://127.0.0.1:1/events?partitions=none".into()),
                ..embedded.clone()
            },
            "partitions must be a positive integer",
        ),
        (
            BackendOpts {
                hot_url: Some("redis://127.0.0.1:1/?ttl_secs=0".into()),
                ..embedded.clone()
            },
            "ttl_secs must be a whole number",
        ),
        (
            BackendOpts {
                blob_url: Some("ftp://blobs".into()),
                ..embedded.clone()
            },
            "unsupported blob url",
        ),
    ];
    for (opts, expected) in cases {
        let started = Instant::now();
        let err =
            Backends::open_with_retry(&opts, "test", &WorkerHealth::new(), std::future::pending())
                .await
                .expect_err("a configuration error");
        assert!(!err.is_transient(), "{err}");
        assert!(err.to_string().contains(expected), "{expected}: {err}");
        assert!(
            !err.to_string().contains("hunter2"),
            "password leaked: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(2), "{err}");
    }

    // The data directory of another process.
    let _held = DataDirLock::acquire(dir.path(), "another process").expect("lock");
    let err = Backends::open_with_retry(
        &embedded,
        "test",
        &WorkerHealth::new(),
        std::future::pending(),
    )
    .await
    .expect_err("the data directory is locked");
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("another process"), "{err}");
}
