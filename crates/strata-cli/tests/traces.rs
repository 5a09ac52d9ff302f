//! Traces over OTLP: a `strata dev` with `OTEL_EXPORTER_OTLP_ENDPOINT` set exports its spans to
//! an OTLP/HTTP receiver this test runs on loopback, and a request's W3C `traceparent` makes
//! Strata's spans children of the caller's span.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Kills the child when a test fails before it stopped it.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An OTLP/HTTP receiver: every `POST /v1/traces` body (JSON) it was sent.
struct Receiver {
    port: u16,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let sink = bodies.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Some(body) = read_request(stream) {
                    sink.lock().expect("bodies").push(body);
                }
            }
        });
        Receiver { port, bodies }
    }

    /// Every span received so far, with its resource's `service.name`.
    fn spans(&self) -> Vec<Value> {
        let mut spans = Vec::new();
        for body in self.bodies.lock().expect("bodies").iter() {
            for resource in body["resourceSpans"].as_array().into_iter().flatten() {
                let service = attribute(&resource["resource"], "service.name");
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        let mut span = span.clone();
                        span["service"] = service.clone();
                        spans.push(span);
                    }
                }
            }
        }
        spans
    }
}

/// Reads one HTTP/1.1 request and answers 200; the body when it is JSON.
fn read_request(stream: TcpStream) -> Option<Value> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0;
    let mut path = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if path.is_empty() {
            path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
        }
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let mut stream = stream;
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
    );
    assert_eq!(path, "/v1/traces", "the exporter posts to the traces path");
    serde_json::from_slice(&body).ok()
}

/// The value of attribute `key` of an OTLP object, as JSON (strings, integers, booleans).
fn attribute(object: &Value, key: &str) -> Value {
    let Some(found) = object["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
    else {
        return Value::Null;
    };
    let value = &found["value"];
    if let Some(s) = value["stringValue"].as_str() {
        return json!(s);
    }
    if let Some(b) = value["boolValue"].as_bool() {
        return json!(b);
    }
    match &value["intValue"] {
        Value::String(s) => s.parse::<i64>().map_or(Value::Null, |n| json!(n)),
        Value::Number(n) => json!(n),
        _ => Value::Null,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn post(port: u16, path: &str, key: &str, traceparent: &str, body: &Value) -> (u16, Value) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\
         traceparent: {traceparent}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = body.trim();
    // Chunked or not: the JSON object is between the first `{` and the last `}`.
    let json = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&body[a..=b]).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (status, json)
}

fn start_dev(data: &std::path::Path, port: u16, receiver: &Receiver) -> (ChildGuard, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["dev", "--data-dir"])
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--fsync", "never"])
        .env_remove("STRATA_DB")
        .env_remove("STRATA_LOG")
        .env_remove("STRATA_HOT")
        .env_remove("STRATA_BLOB")
        .env("RUST_LOG", "warn")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.port),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_SERVICE_NAME", "strata-dev-under-test")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn strata dev");
    let stdout = child.stdout.take().expect("stdout");
    let guard = ChildGuard(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((_, key)) = line.split_once("dev api key (tenant dev): ") {
                let _ = tx.send(key.trim().to_owned());
            }
        }
    });
    let key = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("strata dev printed its api key");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "strata dev did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (guard, key)
}

#[test]
fn spans_reach_an_otlp_receiver_and_nest_under_the_callers_trace() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let (_dev, key) = start_dev(&dir.path().join("data"), port, &receiver);

    let append_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let context_trace = "5cf92f3577b34da6a3ce929d0e0e4737";
    let caller_span = "00f067aa0ba902b7";
    let events = json!({"events": [
        {"event_id": "t-1", "session_id": "traced", "timestamp": "2026-06-03T10:00:00Z",
         "type": "SessionStarted", "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
         "context_window_tokens": 128000, "reserved_output_tokens": 8000}},
        {"event_id": "t-2", "session_id": "traced", "timestamp": "2026-06-03T10:00:01Z",
         "type": "UserPromptSubmitted", "payload": {"message_id": "m1", "text": "Rename the flag."}}
    ]});
    let (status, body) = post(
        port,
        "/v1/events",
        &key,
        &format!("00-{append_trace}-{caller_span}-01"),
        &events,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        port,
        "/v1/sessions/traced/context",
        &key,
        &format!("00-{context_trace}-{caller_span}-01"),
        &json!({"budget": 4000}),
    );
    assert_eq!(status, 200, "{body}");
    let assembly_id = body["assembly"]["assembly_id"]
        .as_str()
        .expect("assembly id")
        .to_owned();

    let deadline = Instant::now() + Duration::from_secs(30);
    let named = |spans: &[Value], name: &str| -> Option<Value> {
        spans.iter().find(|s| s["name"] == name).cloned()
    };
    let spans = loop {
        let spans = receiver.spans();
        let has = |n: &str| spans.iter().any(|s| s["name"] == n);
        if has("assembler.context") && has("ingest.batch") && has("projector.batch") {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans received within 30 s: {:?}",
            spans.iter().map(|s| s["name"].clone()).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    let context = named(&spans, "assembler.context").expect("assembler.context");
    assert_eq!(context["traceId"], context_trace, "{context}");
    assert_eq!(context["service"], "strata-dev-under-test");
    assert_eq!(attribute(&context, "gen_ai.conversation.id"), "traced");
    assert_eq!(attribute(&context, "gen_ai.request.model"), "gpt-4o");
    assert_eq!(attribute(&context, "gen_ai.provider.name"), "openai");
    assert_eq!(
        attribute(&context, "strata.assembly_id"),
        assembly_id.as_str()
    );
    assert_eq!(attribute(&context, "strata.budget_tokens"), 4000);
    assert!(attribute(&context, "strata.context_tokens").as_i64() > Some(0));
    assert!(attribute(&context, "strata.transcript_tokens").as_i64() > Some(0));
    assert!(attribute(&context, "strata.included").as_i64() > Some(0));
    assert_eq!(attribute(&context, "strata.recorded"), true);

    // The request span is the caller's child, and the assembly the request span's.
    let request = spans
        .iter()
        .find(|s| s["spanId"] == context["parentSpanId"])
        .expect("the assembly's parent span was exported");
    assert_eq!(request["name"], "POST /v1/sessions/{session}/context");
    assert_eq!(request["parentSpanId"], caller_span);
    assert_eq!(request["traceId"], context_trace);
    assert_eq!(attribute(request, "http.response.status_code"), 200);

    let batch = named(&spans, "ingest.batch").expect("ingest.batch");
    assert_eq!(batch["traceId"], append_trace);
    assert_eq!(attribute(&batch, "events"), 2);
    assert!(named(&spans, "projector.batch").is_some());
    // Nothing of the events' contents is in a span.
    let all = serde_json::to_string(&spans).expect("spans");
    assert!(
        !all.contains("Rename the flag."),
        "a prompt leaked into a span"
    );
}
