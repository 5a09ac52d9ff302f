//! The abuse limits of the HTTP server, on a real socket: the key is checked before a byte of
//! the body is read, a body that trickles in is cut off with `408`, an idle or slow-loris
//! connection is closed, connections beyond the limit wait, and an oversized batch is `413`
//! before anything is appended.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use strata_ingest::{IngestOptions, Ingestor};
use strata_log::FsyncPolicy;
use strata_runtime::http_server::{serve, HttpLimits};
use strata_runtime::{auth, BackendOpts, Backends};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Server {
    address: std::net::SocketAddr,
    backends: Backends,
    key: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(limits: HttpLimits) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = BackendOpts {
            fsync: FsyncPolicy::Never,
            ..BackendOpts::embedded(dir.path())
        };
        let backends = Backends::open(&opts, "test").await.expect("backends");
        let key = auth::create_key(backends.store.as_ref(), "acme", "test")
            .await
            .expect("key");
        let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
        let router = strata_ingest::http::routes(ingestor);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, router, limits, async {
            let _ = stopped.await;
        }));
        Server {
            address,
            backends,
            key,
            stop: Some(stop),
            _dir: dir,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.address).await.expect("connect")
    }

    async fn log_len(&self) -> u64 {
        self.backends
            .log
            .end_offsets()
            .await
            .expect("offsets")
            .iter()
            .sum()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Reads what the server sends until it closes or `within` passes; `None` if it sent nothing
/// and kept the connection open.
async fn read_response(stream: &mut TcpStream, within: Duration) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => break,
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                // A whole response with a body: the JSON error ends with `}`.
                if text.contains("\r\n\r\n") && text.trim_end().ends_with('}') {
                    break;
                }
            }
        }
    }
    (!buf.is_empty()).then(|| String::from_utf8_lossy(&buf).into_owned())
}

fn short_limits() -> HttpLimits {
    HttpLimits {
        max_connections: 8,
        header_read_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        ..HttpLimits::default()
    }
}

#[tokio::test]
async fn a_keyless_upload_is_refused_before_its_body_is_read() {
    let server = Server::start(HttpLimits::default()).await;
    let mut stream = server.connect().await;
    // Announces 60 MiB and sends none of it: the answer must not wait for the body.
    stream
        .write_all(
            b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 62914560\r\n\r\n",
        )
        .await
        .unwrap();
    let response = read_response(&mut stream, Duration::from_secs(5))
        .await
        .expect("an answer without the body");
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");
    assert!(response.contains("missing api key"), "{response}");
    assert_eq!(server.log_len().await, 0);
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_413_before_it_is_read() {
    let server = Server::start(HttpLimits::default()).await;
    let mut stream = server.connect().await;
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        server.key,
        strata_ingest::http::MAX_BODY_BYTES + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let response = read_response(&mut stream, Duration::from_secs(5))
        .await
        .expect("an answer without the body");
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("payload_too_large"), "{response}");
}

#[tokio::test]
async fn a_body_that_trickles_in_is_cut_off_with_408_and_appends_nothing() {
    let server = Server::start(short_limits()).await;
    let mut stream = server.connect().await;
    let body = json!([{"event_id": "e1", "session_id": "s1", "type": "UserPromptSubmitted",
        "timestamp": "2026-06-03T10:00:00Z", "payload": {"message_id": "m1", "text": "hi"}}])
    .to_string();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        server.key,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Half of the body, then nothing more.
    stream
        .write_all(&body.as_bytes()[..body.len() / 2])
        .await
        .unwrap();
    let response = read_response(&mut stream, Duration::from_secs(10))
        .await
        .expect("an answer once the body timeout passed");
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("request_timeout"), "{response}");
    assert_eq!(server.log_len().await, 0);
}

#[tokio::test]
async fn an_idle_or_slow_loris_connection_is_closed() {
    let server = Server::start(short_limits()).await;
    // Connects and sends nothing.
    let mut idle = server.connect().await;
    // Sends half a request head, then nothing.
    let mut slow = server.connect().await;
    slow.write_all(b"POST /v1/events HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    for stream in [&mut idle, &mut slow] {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the server closes the connection: {read:?}"
        );
    }
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let server = Server::start(HttpLimits {
        max_connections: 1,
        header_read_timeout: Duration::from_secs(30),
        body_timeout: Duration::from_secs(30),
        ..HttpLimits::default()
    })
    .await;
    let holder = server.connect().await;
    let mut waiting = server.connect().await;
    waiting
        .write_all(b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n[]")
        .await
        .unwrap();
    assert_eq!(
        read_response(&mut waiting, Duration::from_millis(700)).await,
        None,
        "not served while the only slot is held"
    );
    drop(holder);
    let response = read_response(&mut waiting, Duration::from_secs(10))
        .await
        .expect("served once the slot is free");
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");
}

#[tokio::test]
async fn a_batch_over_the_event_cap_is_413_and_appends_nothing() {
    let server = Server::start(HttpLimits::default()).await;
    let events: Vec<_> = (0..=strata_ingest::http::MAX_BATCH_EVENTS)
        .map(|i| {
            json!({"event_id": format!("e{i}"), "session_id": "s1",
                "type": "UserPromptSubmitted", "timestamp": "2026-06-03T10:00:00Z",
                "payload": {"message_id": format!("m{i}"), "text": "hi"}})
        })
        .collect();
    let body = serde_json::to_vec(&events).unwrap();
    let mut stream = server.connect().await;
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        server.key,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let response = read_response(&mut stream, Duration::from_secs(30))
        .await
        .expect("an answer");
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("at most 10000"), "{response}");
    assert_eq!(server.log_len().await, 0);
}

/// Sends one `POST /v1/events` with `key` and returns the status line's code.
async fn status_of(server: &Server, key: &str) -> (u16, String) {
    let mut stream = server.connect().await;
    let body = "[]";
    let request = format!(
        "POST /v1/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let response = read_response(&mut stream, Duration::from_secs(10))
        .await
        .expect("an answer");
    let code = response[9..12].parse().expect("status code");
    (code, response)
}

#[tokio::test]
async fn repeated_failed_authentications_from_one_address_are_throttled_with_429() {
    let server = Server::start(HttpLimits {
        auth_failures_per_minute: 3,
        ..HttpLimits::default()
    })
    .await;
    // A good key works, and does not count.
    assert_eq!(status_of(&server, &server.key).await.0, 400);
    for _ in 0..3 {
        assert_eq!(status_of(&server, "sk_guess").await.0, 401);
    }
    let (code, response) = status_of(&server, "sk_guess").await;
    assert_eq!(code, 429, "{response}");
    assert!(
        response.to_ascii_lowercase().contains("retry-after:"),
        "{response}"
    );
    assert!(response.contains("too_many_requests"), "{response}");
    // The throttle answers failures only: a valid key from the same address is still served,
    // and the failing attempts after it are still refused.
    assert_eq!(status_of(&server, &server.key).await.0, 400);
    assert_eq!(status_of(&server, "sk_guess").await.0, 429);
    assert_eq!(status_of(&server, &server.key).await.0, 400);
}

/// Sends one request head (no body) and returns the whole answer.
async fn answer_to(server: &Server, request_line: &str) -> String {
    let mut stream = server.connect().await;
    let head = format!(
        "{request_line}\r\nhost: x\r\nauthorization: Bearer {}\r\nconnection: close\r\n\r\n",
        server.key
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    read_response(&mut stream, Duration::from_secs(5))
        .await
        .expect("an answer")
}

#[tokio::test]
async fn unknown_routes_and_wrong_methods_get_the_json_error_body() {
    let server = Server::start(HttpLimits::default()).await;
    let missing = answer_to(&server, "GET /v1/nothing-here HTTP/1.1").await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    assert!(missing.contains("application/json"), "{missing}");
    assert!(
        missing.contains(r#""code":"not_found""#) && missing.contains("GET /v1/nothing-here"),
        "{missing}"
    );
    let wrong = answer_to(&server, "GET /v1/events HTTP/1.1").await;
    assert!(wrong.starts_with("HTTP/1.1 405"), "{wrong}");
    assert!(wrong.contains(r#""code":"method_not_allowed""#), "{wrong}");
    // The route's own header survives the rewrite.
    assert!(
        wrong.to_ascii_lowercase().contains("allow: post"),
        "{wrong}"
    );
}
