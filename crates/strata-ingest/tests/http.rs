//! `POST /v1/events` through the real router, on the embedded backends: every
//! refusal answers a JSON error that says what and where, and appends nothing; accepted batches
//! are deduplicated, sequenced per session and offload large tool outputs. The read side is
//! checked for tenant isolation too.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use strata_assembler::{Assembler, AssemblerOptions};
use strata_core::payload::Payload;
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{auth, BackendOpts, Backends};
use tower::ServiceExt;

struct Harness {
    backends: Backends,
    ingestor: Arc<Ingestor>,
    router: Router,
    acme: String,
    globex: String,
    // Dropped last: the data directory outlives the backends using it.
    dir: tempfile::TempDir,
}

fn opts(dir: &std::path::Path) -> BackendOpts {
    BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir)
    }
}

impl Harness {
    async fn new() -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let backends = Backends::open(&opts(dir.path()), "test")
            .await
            .expect("open backends");
        let acme = auth::create_key(backends.store.as_ref(), "acme", "test")
            .await
            .expect("acme key");
        let globex = auth::create_key(backends.store.as_ref(), "globex", "test")
            .await
            .expect("globex key");
        Self::with(dir, backends, acme, globex)
    }

    fn with(dir: tempfile::TempDir, backends: Backends, acme: String, globex: String) -> Harness {
        Self::with_options(dir, backends, acme, globex, IngestOptions::default())
    }

    async fn with_ingest_options(options: IngestOptions) -> Harness {
        let h = Harness::new().await;
        let Harness {
            backends,
            acme,
            globex,
            dir,
            ..
        } = h;
        Self::with_options(dir, backends, acme, globex, options)
    }

    fn with_options(
        dir: tempfile::TempDir,
        backends: Backends,
        acme: String,
        globex: String,
        options: IngestOptions,
    ) -> Harness {
        let ingestor = Arc::new(Ingestor::new(backends.clone(), options));
        let assembler = Assembler::new(
            backends.clone(),
            ingestor.clone(),
            AssemblerOptions::default(),
        );
        let router = strata_ingest::http::routes(ingestor.clone())
            .merge(strata_assembler::http::routes(assembler));
        Harness {
            backends,
            ingestor,
            router,
            acme,
            globex,
            dir,
        }
    }

    /// Sends a request; returns the status and the body parsed as JSON (`Value::Null` when the
    /// body is empty, the raw text as a string when it is not JSON).
    async fn send(
        &self,
        method: &str,
        uri: &str,
        key: Option<&str>,
        body: impl Into<Body>,
    ) -> (StatusCode, Value) {
        let (status, bytes) = self.send_raw(method, uri, key, body).await;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, value)
    }

    async fn send_raw(
        &self,
        method: &str,
        uri: &str,
        key: Option<&str>,
        body: impl Into<Body>,
    ) -> (StatusCode, Vec<u8>) {
        let auth = key.map(|k| format!("Bearer {k}"));
        self.send_with_auth(method, uri, auth.as_deref(), body)
            .await
    }

    /// Sends a request with `authorization` as the raw Authorization header.
    async fn send_with_auth(
        &self,
        method: &str,
        uri: &str,
        authorization: Option<&str>,
        body: impl Into<Body>,
    ) -> (StatusCode, Vec<u8>) {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json");
        if let Some(value) = authorization {
            req = req.header("authorization", value);
        }
        let response = self
            .router
            .clone()
            .oneshot(req.body(body.into()).expect("request"))
            .await
            .expect("router answers");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        (status, bytes)
    }

    async fn post_events(&self, key: Option<&str>, body: impl Into<Body>) -> (StatusCode, Value) {
        self.send("POST", "/v1/events", key, body).await
    }

    async fn post_json(&self, key: &str, body: &Value) -> (StatusCode, Value) {
        self.post_events(Some(key), body.to_string()).await
    }

    /// Total records in the log.
    async fn log_len(&self) -> u64 {
        self.backends
            .log
            .end_offsets()
            .await
            .expect("end offsets")
            .iter()
            .sum()
    }

    /// Every event of the log, decoded.
    async fn log_events(&self) -> Vec<Event> {
        let ends = self.backends.log.end_offsets().await.expect("end offsets");
        let mut out = Vec::new();
        for (p, end) in ends.iter().enumerate() {
            let mut from = 0;
            while from < *end {
                let records = self
                    .backends
                    .log
                    .read(p as u32, from, 1000)
                    .await
                    .expect("read log");
                assert!(!records.is_empty(), "partition {p} stops before its end");
                for r in &records {
                    out.push(
                        self.backends
                            .codec
                            .decode(&r.value)
                            .await
                            .expect("decode record"),
                    );
                    from = r.offset + 1;
                }
            }
        }
        out
    }

    async fn logged(&self, event_id: &str) -> Event {
        let events = self.log_events().await;
        let mut found: Vec<Event> = events
            .into_iter()
            .filter(|e| e.event_id == event_id)
            .collect();
        assert_eq!(found.len(), 1, "event {event_id} appears once in the log");
        found.remove(0)
    }
}

/// A valid event of `session`, without tenant_id (the key's tenant fills it).
fn event(id: &str, session: &str, ty: &str, payload: Value) -> Value {
    json!({
        "event_id": id,
        "session_id": session,
        "timestamp": "2026-06-03T10:00:00Z",
        "type": ty,
        "actor": "agent",
        "payload": payload,
    })
}

fn prompt(id: &str, session: &str) -> Value {
    event(
        id,
        session,
        "UserPromptSubmitted",
        json!({"message_id": format!("m-{id}"), "text": format!("prompt {id}")}),
    )
}

fn session_started(id: &str, session: &str) -> Value {
    event(
        id,
        session,
        "SessionStarted",
        json!({
            "model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000,
            "reserved_output_tokens": 8000,
            "system_prompt": "You are a careful engineer."
        }),
    )
}

fn with_field(mut v: Value, field: &str, value: Value) -> Value {
    v.as_object_mut()
        .expect("object")
        .insert(field.into(), value);
    v
}

fn without_field(mut v: Value, field: &str) -> Value {
    v.as_object_mut().expect("object").remove(field);
    v
}

/// Asserts the `{"error": {"code", "message"}}` shape and returns (code, message).
fn error_of(body: &Value) -> (String, String) {
    let err = body
        .get("error")
        .unwrap_or_else(|| panic!("no error object in {body}"));
    let code = err["code"]
        .as_str()
        .unwrap_or_else(|| panic!("error.code is not a string in {body}"));
    let message = err["message"]
        .as_str()
        .unwrap_or_else(|| panic!("error.message is not a string in {body}"));
    assert!(!message.is_empty(), "empty error message in {body}");
    (code.to_owned(), message.to_owned())
}

fn results(body: &Value) -> &Vec<Value> {
    body["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results array in {body}"))
}

/// (status, seq) of each outcome.
fn outcomes(body: &Value) -> Vec<(String, u64)> {
    results(body)
        .iter()
        .map(|r| {
            (
                r["status"].as_str().expect("status").to_owned(),
                r["seq"].as_u64().expect("seq"),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Authentication

#[tokio::test]
async fn missing_api_key_is_401_and_appends_nothing() {
    let h = Harness::new().await;
    let body = json!([prompt("e1", "s1")]).to_string();
    let (status, resp) = h.post_events(None, body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "unauthorized");
    assert!(
        message.contains("Authorization"),
        "the message names the header to send: {message}"
    );
    assert_eq!(h.log_len().await, 0);

    // A header that is not a bearer token is no key either, nor is an empty bearer token.
    for header in [format!("Basic {}", h.acme), "Bearer ".to_owned()] {
        let (status, bytes) = h
            .send_with_auth(
                "POST",
                "/v1/events",
                Some(&header),
                json!([prompt("e1", "s1")]).to_string(),
            )
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{header}");
        let resp: Value = serde_json::from_slice(&bytes).expect("JSON error body");
        assert_eq!(error_of(&resp).0, "unauthorized");
    }
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn unknown_api_key_is_401_and_appends_nothing() {
    let h = Harness::new().await;
    let forged = auth::generate_key();
    let (status, resp) = h
        .post_events(Some(&forged), json!([prompt("e1", "s1")]).to_string())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "unauthorized");
    assert!(message.contains("unknown api key"), "{message}");
    assert!(
        !message.contains(&forged),
        "the key is not echoed back: {message}"
    );
    assert_eq!(h.log_len().await, 0);

    // The same batch with a real key goes through: the 401 was about the key alone.
    let (status, resp) = h
        .post_events(Some(&h.acme), json!([prompt("e1", "s1")]).to_string())
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(h.log_len().await, 1);
}

// ---------------------------------------------------------------------------------------------
// Malformed bodies

#[tokio::test]
async fn body_that_is_not_json_is_400_mentioning_json() {
    let h = Harness::new().await;
    for body in ["{not json", "", "[{\"event_id\": \"e1\",]"] {
        let (status, resp) = h.post_events(Some(&h.acme), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "body {body:?}: {resp}");
        let (code, message) = error_of(&resp);
        assert_eq!(code, "bad_request");
        assert!(message.contains("JSON"), "body {body:?}: {message}");
    }
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn body_neither_array_nor_events_object_is_400() {
    let h = Harness::new().await;
    let cases: &[(Value, &str)] = &[
        (json!({"batch": [prompt("e1", "s1")]}), "events"),
        (json!({"events": prompt("e1", "s1")}), "events"),
        (json!({"events": "e1"}), "array"),
        (json!("e1"), "events"),
        (json!(42), "events"),
    ];
    for (body, needle) in cases {
        let (status, resp) = h.post_json(&h.acme, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "body {body}: {resp}");
        let (code, message) = error_of(&resp);
        assert_eq!(code, "bad_request", "body {body}");
        assert!(message.contains(needle), "body {body}: {message}");
    }
    assert_eq!(h.log_len().await, 0);

    // Both accepted shapes work.
    let (status, resp) = h
        .post_json(&h.acme, &json!({"events": [prompt("e1", "s1")]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let (status, resp) = h.post_json(&h.acme, &json!([prompt("e2", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(h.log_len().await, 2);
}

#[tokio::test]
async fn empty_batch_is_400() {
    let h = Harness::new().await;
    for body in [json!([]), json!({"events": []})] {
        let (status, resp) = h.post_json(&h.acme, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "body {body}: {resp}");
        let (code, message) = error_of(&resp);
        assert_eq!(code, "bad_request");
        assert!(message.contains("empty"), "{message}");
    }
    assert_eq!(h.log_len().await, 0);
}

// ---------------------------------------------------------------------------------------------
// Field validation

#[tokio::test]
async fn missing_fields_are_reported_with_their_path_and_event_index() {
    let h = Harness::new().await;
    let batch = json!([
        prompt("ok-1", "s1"),
        without_field(prompt("no-session", "s1"), "session_id"),
        event(
            "no-call-id",
            "s1",
            "ToolCallFinished",
            json!({"output": "done", "is_error": false})
        ),
        prompt("ok-2", "s1"),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "invalid_events");
    assert!(message.contains("2 invalid event(s)"), "{message}");
    assert!(
        message.contains("event 1") && message.contains("session_id"),
        "the summary names the first bad event and field: {message}"
    );

    let events = resp["error"]["details"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("details.events missing: {resp}"));
    assert_eq!(events.len(), 2, "exactly the two bad events: {resp}");

    assert_eq!(events[0]["index"], 1);
    assert_eq!(events[0]["event_id"], "no-session");
    let errors = events[0]["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{resp}");
    assert_eq!(errors[0]["field"], "session_id");
    assert_eq!(errors[0]["message"], "missing field");

    assert_eq!(events[1]["index"], 2);
    assert_eq!(events[1]["event_id"], "no-call-id");
    let errors = events[1]["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{resp}");
    assert_eq!(errors[0]["field"], "payload.tool_call_id");
    assert_eq!(errors[0]["message"], "missing field");

    // All or nothing: the two valid events were not appended either.
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn every_error_of_every_bad_event_is_reported() {
    let h = Harness::new().await;
    let mut no_id_no_ts = without_field(prompt("x", "s1"), "event_id");
    no_id_no_ts = without_field(no_id_no_ts, "timestamp");
    let batch = json!([
        no_id_no_ts,
        prompt("fine", "s1"),
        with_field(prompt("bad-ts", "s1"), "timestamp", json!("yesterday")),
        event(
            "no-text",
            "s1",
            "UserPromptSubmitted",
            json!({"message_id": "m"})
        ),
        with_field(prompt("bad-expected", "s1"), "expected_seq", json!(-1)),
        json!("not an event"),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    let events = resp["error"]["details"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("details.events missing: {resp}"));
    let reported: Vec<(u64, Vec<String>)> = events
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().expect("index"),
                e["errors"]
                    .as_array()
                    .expect("errors")
                    .iter()
                    .map(|f| f["field"].as_str().expect("field").to_owned())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        reported,
        vec![
            (0, vec!["event_id".to_owned(), "timestamp".to_owned()]),
            (2, vec!["timestamp".to_owned()]),
            (3, vec!["payload.text".to_owned()]),
            (4, vec!["expected_seq".to_owned()]),
            (5, vec![String::new()]),
        ],
        "{resp}"
    );
    assert!(events[0].get("event_id").is_none(), "{resp}");
    assert_eq!(events[1]["event_id"], "bad-ts");
    assert!(
        events[4]["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("object"),
        "a non-object event says what it expected: {resp}"
    );
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn unknown_event_type_is_400_naming_the_type() {
    let h = Harness::new().await;
    let batch = json!([
        prompt("ok", "s1"),
        event("weird", "s1", "ToolCallTeleported", json!({})),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "invalid_events");
    assert!(message.contains("ToolCallTeleported"), "{message}");
    let e = &resp["error"]["details"]["events"][0];
    assert_eq!(e["index"], 1, "{resp}");
    assert_eq!(e["event_id"], "weird", "{resp}");
    assert_eq!(e["errors"][0]["field"], "type", "{resp}");
    assert!(
        e["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ToolCallTeleported"),
        "{resp}"
    );
    assert_eq!(h.log_len().await, 0);
}

// ---------------------------------------------------------------------------------------------
// Tenancy

#[tokio::test]
async fn event_of_another_tenant_is_403_and_appends_nothing() {
    let h = Harness::new().await;
    let batch = json!([
        prompt("mine", "s1"),
        with_field(prompt("theirs", "s1"), "tenant_id", json!("globex")),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "forbidden");
    assert!(
        message.contains("event 1") && message.contains("globex") && message.contains("acme"),
        "the message names the event, its tenant and the key's: {message}"
    );
    assert_eq!(h.log_len().await, 0);

    // An explicit tenant_id equal to the key's is fine.
    let ok = with_field(prompt("explicit", "s1"), "tenant_id", json!("acme"));
    let (status, resp) = h.post_json(&h.acme, &json!([ok])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(h.log_len().await, 1);
}

#[tokio::test]
async fn derived_types_are_403_from_a_tenant_key_and_append_nothing() {
    let h = Harness::new().await;
    let derived = [
        (
            "MemoryRecorded",
            json!({"memory_id": "m1", "scope": "tenant", "kind": "fact",
            "text": "forged tenant-wide memory", "source_refs": ["x"]}),
        ),
        (
            "MemorySuperseded",
            json!({"memory_id": "m1", "superseded_by": "m2"}),
        ),
        (
            "CompactionCompleted",
            json!({"compaction_id": "c1", "first_event_id": "a",
            "last_event_id": "b", "first_kept_event_id": "b", "tokens_before": 10,
            "tokens_after": 1, "summary": {}}),
        ),
        (
            "ContextBuilt",
            json!({"assembly_id": "a1", "context_tokens": 1,
            "transcript_tokens": 1, "assembly": {}}),
        ),
    ];
    for (ty, payload) in derived {
        let batch = json!([prompt("ok-1", "s1"), event("forged", "s1", ty, payload)]);
        let (status, resp) = h.post_json(&h.acme, &batch).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{ty}: {resp}");
        let (code, message) = error_of(&resp);
        assert_eq!(code, "forbidden");
        assert!(
            message.contains("event 1") && message.contains(ty) && message.contains("services"),
            "{message}"
        );
        assert_eq!(
            h.log_len().await,
            0,
            "{ty}: nothing of the batch is appended"
        );
    }
}

#[tokio::test]
async fn missing_tenant_is_filled_with_the_keys_tenant() {
    let h = Harness::new().await;
    let (status, resp) = h.post_json(&h.globex, &json!([prompt("g1", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let (status, resp) = h.post_json(&h.acme, &json!([prompt("a1", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");

    let g = h.logged("g1").await;
    assert_eq!(g.tenant_id, "globex");
    let a = h.logged("a1").await;
    assert_eq!(a.tenant_id, "acme");
    // Same session id, different tenants: independent sessions, each starting at seq 1.
    assert_eq!(g.seq, Some(1));
    assert_eq!(a.seq, Some(1));
}

// ---------------------------------------------------------------------------------------------
// Idempotency

#[tokio::test]
async fn duplicate_event_id_is_reported_with_the_original_seq() {
    let h = Harness::new().await;
    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("a", "s1"), prompt("b", "s1")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(
        outcomes(&resp),
        vec![("accepted".into(), 1), ("accepted".into(), 2)]
    );
    assert_eq!(h.log_len().await, 2);

    // Re-sent: nothing new, the original seq is reported.
    let (status, resp) = h.post_json(&h.acme, &json!([prompt("b", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(outcomes(&resp), vec![("duplicate".into(), 2)]);
    assert_eq!(results(&resp)[0]["event_id"], "b");
    assert_eq!(h.log_len().await, 2);

    // Inside one batch, with a fresh event and an old one: only the fresh one is appended.
    let batch = json!([
        prompt("c", "s1"),
        prompt("c", "s1"),
        prompt("a", "s1"),
        prompt("d", "s1"),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(
        outcomes(&resp),
        vec![
            ("accepted".into(), 3),
            ("duplicate".into(), 3),
            ("duplicate".into(), 1),
            ("accepted".into(), 4),
        ]
    );
    assert!(results(&resp)[0]["offset"].is_u64(), "{resp}");
    assert!(
        results(&resp)[1].get("offset").is_none(),
        "a duplicate was not appended: {resp}"
    );
    assert_eq!(h.log_len().await, 4);

    // The same event id under another tenant is another event.
    let (status, resp) = h.post_json(&h.globex, &json!([prompt("a", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(outcomes(&resp), vec![("accepted".into(), 1)]);
    assert_eq!(h.log_len().await, 5);
}

#[tokio::test]
async fn duplicate_after_restart_is_found_in_the_projections() {
    let h = Harness::new().await;
    let (status, resp) = h
        .post_json(
            &h.acme,
            &json!([prompt("a", "s1"), prompt("b", "s1"), prompt("c", "s1")]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends)
        .await
        .expect("catch up");

    // A new process: the in-memory hot state is gone, the projections remain.
    let Harness {
        backends,
        ingestor,
        router,
        acme,
        globex,
        dir,
    } = h;
    drop((backends, ingestor, router));
    let backends = Backends::open(&opts(dir.path()), "test")
        .await
        .expect("reopen");
    let h = Harness::with(dir, backends, acme, globex);
    assert_eq!(h.log_len().await, 3);

    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("b", "s1"), prompt("d", "s1")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(
        outcomes(&resp),
        vec![("duplicate".into(), 2), ("accepted".into(), 4)],
        "the duplicate keeps its original seq and the head continues after the projected one"
    );
    assert_eq!(h.log_len().await, 4);
}

/// A prompt with the id of `prompt(id, session)` and other words.
fn reworded(id: &str, session: &str, words: &str) -> Value {
    let mut v = prompt(id, session);
    v["payload"]["text"] = json!(words);
    v
}

/// The `(index, event_id, differing fields)` of each event of an `event_id_conflict` answer.
fn conflicts(body: &Value) -> Vec<(u64, String, Vec<String>)> {
    assert_eq!(error_of(body).0, "event_id_conflict", "{body}");
    body["error"]["details"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no details.events in {body}"))
        .iter()
        .map(|e| {
            let differs = e["differs"].as_array().expect("differs");
            for d in differs {
                assert_ne!(d["stored_sha256"], d["sent_sha256"], "{body}");
            }
            let fields = differs
                .iter()
                .map(|d| d["field"].as_str().expect("field").to_owned());
            (
                e["index"].as_u64().expect("index"),
                e["event_id"].as_str().expect("event_id").to_owned(),
                fields.collect(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_reused_event_id_with_other_content_is_409_by_hash_and_nothing_is_appended() {
    let h = Harness::new().await;
    let (status, resp) = h.post_json(&h.acme, &json!([prompt("a", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");

    let batch = json!([reworded("a", "s1", "CHANGED-WORDS"), prompt("b", "s1")]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{resp}");
    // Not projected yet: the hashes of the whole event, as the hot state kept the first one's.
    assert_eq!(
        conflicts(&resp),
        vec![(0, "a".to_owned(), vec!["event".to_owned()])]
    );
    assert!(
        !resp.to_string().contains("CHANGED-WORDS"),
        "content echoed: {resp}"
    );
    assert_eq!(
        h.log_len().await,
        1,
        "nothing of the refused batch was appended"
    );
    // Once projected, the earlier event is read back and the differing field named.
    strata_projector::catch_up(&h.backends)
        .await
        .expect("catch up");
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{resp}");
    assert_eq!(
        conflicts(&resp),
        vec![(0, "a".to_owned(), vec!["payload.text".to_owned()])]
    );

    // The same event again is still a duplicate, and the rest of the batch goes on.
    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("a", "s1"), prompt("b", "s1")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(
        outcomes(&resp),
        vec![("duplicate".into(), 1), ("accepted".into(), 2)]
    );
    let kept = h.logged("a").await.payload;
    let Payload::UserPromptSubmitted(kept) = kept else {
        panic!("a prompt")
    };
    assert_eq!(kept.text, "prompt a", "the first content stays");
}

#[tokio::test]
async fn one_id_twice_in_a_batch_with_other_content_is_409() {
    let h = Harness::new().await;
    let batch = json!([
        prompt("c", "s1"),
        prompt("c", "s1"),
        reworded("c", "s1", "other"),
        prompt("d", "s1")
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{resp}");
    assert_eq!(
        conflicts(&resp),
        vec![(2, "c".to_owned(), vec!["payload.text".to_owned()])]
    );
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn a_reused_id_is_found_in_the_projections_after_a_restart() {
    let h = Harness::new().await;
    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("a", "s1"), prompt("b", "s1")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends)
        .await
        .expect("catch up");
    let Harness {
        backends,
        ingestor,
        router,
        acme,
        globex,
        dir,
    } = h;
    drop((backends, ingestor, router));
    let backends = Backends::open(&opts(dir.path()), "test")
        .await
        .expect("reopen");
    let h = Harness::with(dir, backends, acme, globex);

    // Read back from the projections: the hot state of the new process has no hash.
    let (status, resp) = h
        .post_json(&h.acme, &json!([reworded("b", "s1", "new words")]))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{resp}");
    assert_eq!(
        conflicts(&resp),
        vec![(0, "b".to_owned(), vec!["payload.text".to_owned()])]
    );
    let (status, resp) = h.post_json(&h.acme, &json!([prompt("b", "s1")])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(outcomes(&resp), vec![("duplicate".into(), 2)]);
    assert_eq!(h.log_len().await, 2);
}

// ---------------------------------------------------------------------------------------------
// Sequencing and optimistic concurrency

#[tokio::test]
async fn seq_is_assigned_per_session() {
    let h = Harness::new().await;
    let batch = json!([
        prompt("a1", "alpha"),
        prompt("b1", "beta"),
        prompt("a2", "alpha"),
        prompt("a3", "alpha"),
        prompt("b2", "beta"),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let seqs: Vec<u64> = outcomes(&resp).into_iter().map(|(_, s)| s).collect();
    assert_eq!(seqs, vec![1, 1, 2, 3, 2]);

    // A later batch continues each session where it stopped.
    let (status, resp) = h
        .post_json(
            &h.acme,
            &json!([
                prompt("b3", "beta"),
                prompt("a4", "alpha"),
                prompt("c1", "gamma")
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let seqs: Vec<u64> = outcomes(&resp).into_iter().map(|(_, s)| s).collect();
    assert_eq!(seqs, vec![3, 4, 1]);

    // The log holds the assigned seqs.
    assert_eq!(h.logged("a4").await.seq, Some(4));
    assert_eq!(h.logged("b3").await.seq, Some(3));
    assert_eq!(h.logged("c1").await.seq, Some(1));
}

#[tokio::test]
async fn expected_seq_conflict_is_409_with_the_head() {
    let h = Harness::new().await;
    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("a", "s1"), prompt("b", "s1")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(h.log_len().await, 2);

    // A stale writer believes the head is 1.
    let stale = with_field(prompt("c", "s1"), "expected_seq", json!(1));
    let (status, resp) = h.post_json(&h.acme, &json!([stale])).await;
    assert_eq!(status, StatusCode::CONFLICT, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "conflict");
    assert!(
        message.contains("s1")
            && message.contains("at seq 2")
            && message.contains("expected seq 1"),
        "the message names the session, its head and the expectation: {message}"
    );
    assert_eq!(h.log_len().await, 2);

    // A conflict anywhere in a batch refuses the whole batch.
    let batch = json!([
        prompt("other", "s2"),
        with_field(prompt("c", "s1"), "expected_seq", json!(5)),
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::CONFLICT, "{resp}");
    assert_eq!(h.log_len().await, 2);

    // The right expectation goes through.
    let fresh = with_field(prompt("c", "s1"), "expected_seq", json!(2));
    let (status, resp) = h.post_json(&h.acme, &json!([fresh])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(outcomes(&resp), vec![("accepted".into(), 3)]);
    assert_eq!(h.log_len().await, 3);

    // A new session's head is 0.
    let first = with_field(prompt("n1", "new"), "expected_seq", json!(0));
    let (status, resp) = h.post_json(&h.acme, &json!([first])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(outcomes(&resp), vec![("accepted".into(), 1)]);
}

#[tokio::test]
async fn explicit_wrong_seq_is_409() {
    let h = Harness::new().await;
    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("a", "s1"), prompt("b", "s1")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");

    for wrong in [1, 2, 7] {
        let e = with_field(prompt("c", "s1"), "seq", json!(wrong));
        let (status, resp) = h.post_json(&h.acme, &json!([e])).await;
        assert_eq!(status, StatusCode::CONFLICT, "seq {wrong}: {resp}");
        let (code, message) = error_of(&resp);
        assert_eq!(code, "conflict");
        assert!(
            message.contains(&format!("claims seq {wrong}"))
                && message.contains("next seq is 3")
                && message.contains("at seq 2"),
            "{message}"
        );
    }
    assert_eq!(h.log_len().await, 2);

    let e = with_field(prompt("c", "s1"), "seq", json!(3));
    let (status, resp) = h.post_json(&h.acme, &json!([e])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(outcomes(&resp), vec![("accepted".into(), 3)]);
    assert_eq!(h.logged("c").await.seq, Some(3));
}

// ---------------------------------------------------------------------------------------------
// Large tool outputs

/// A deterministic, non-repetitive text of `len` bytes.
fn big_output(len: usize) -> String {
    let mut out = String::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        out.push_str(&format!(
            "test suite::case_{i:05} ... {}\n",
            if i % 7 == 3 { "FAILED" } else { "ok" }
        ));
        i += 1;
    }
    out.truncate(len);
    out
}

fn tool_batch(session: &str, call: &str, output: &str) -> Value {
    json!([
        event(
            &format!("{call}-req"),
            session,
            "ModelResponseReceived",
            json!({"message_id": format!("m-{call}"), "text": "Running the tests.",
                   "tool_calls": [{"tool_call_id": call, "name": "run_tests", "args": {}}]})
        ),
        event(
            &format!("{call}-res"),
            session,
            "ToolCallFinished",
            json!({"tool_call_id": call, "output": output, "is_error": false})
        ),
    ])
}

#[tokio::test]
async fn large_tool_output_is_stored_as_an_artifact() {
    let h = Harness::new().await;
    let output = big_output(20 * 1024);
    let (status, resp) = h
        .post_json(&h.acme, &tool_batch("s1", "call-1", &output))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let res = results(&resp);
    assert!(
        res[0].get("output_ref").is_none(),
        "no artifact for a model response: {resp}"
    );
    let uri = res[1]["output_ref"]
        .as_str()
        .unwrap_or_else(|| panic!("no output_ref in {resp}"));
    let sha = uri
        .strip_prefix("artifact:sha256:")
        .unwrap_or_else(|| panic!("unexpected artifact uri {uri}"));
    assert_eq!(sha, strata_core::sha256_hex(output.as_bytes()));

    // The blob holds the exact original bytes.
    let stored = h
        .backends
        .blobs
        .get_artifact("acme", sha)
        .await
        .expect("read artifact")
        .expect("artifact exists");
    assert_eq!(stored.as_ref(), output.as_bytes());

    // The log record refers to it instead of carrying it.
    let event = h.logged("call-1-res").await;
    let Payload::ToolCallFinished(p) = &event.payload else {
        panic!("unexpected payload {:?}", event.payload);
    };
    assert_eq!(p.output, None, "the raw output is not inline");
    assert_eq!(p.output_ref.as_deref(), Some(uri));
    assert_eq!(p.output_sha256.as_deref(), Some(sha));
    assert_eq!(p.output_bytes, Some(output.len() as u64));
    assert!(p.output_tokens.unwrap_or(0) > 0, "{p:?}");
    let preview = p.output_preview.as_deref().unwrap_or_default();
    assert!(!preview.is_empty(), "a preview is kept");
    assert!(preview.len() < output.len() / 2, "the preview is short");
    assert!(
        preview.starts_with("test suite::case_00000"),
        "the preview starts with the output's head: {preview:?}"
    );
    assert_eq!(p.tool_call_id, "call-1");

    // Another tenant cannot read it, even knowing its hash.
    let theirs = h
        .backends
        .blobs
        .get_artifact("globex", sha)
        .await
        .expect("read artifact");
    assert!(theirs.is_none(), "globex reads acme's artifact");
}

#[tokio::test]
async fn output_at_the_threshold_stays_inline() {
    let h = Harness::new().await;
    let output = big_output(strata_ingest::DEFAULT_ARTIFACT_THRESHOLD);
    let (status, resp) = h
        .post_json(&h.acme, &tool_batch("s1", "call-1", &output))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert!(results(&resp)[1].get("output_ref").is_none(), "{resp}");
    let event = h.logged("call-1-res").await;
    let Payload::ToolCallFinished(p) = &event.payload else {
        panic!("unexpected payload {:?}", event.payload);
    };
    assert_eq!(p.output.as_deref(), Some(output.as_str()));
    assert_eq!(p.output_ref, None);

    // One byte more and it is offloaded.
    let output = big_output(strata_ingest::DEFAULT_ARTIFACT_THRESHOLD + 1);
    let (status, resp) = h
        .post_json(&h.acme, &tool_batch("s1", "call-2", &output))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert!(results(&resp)[1]["output_ref"].is_string(), "{resp}");
}

// ---------------------------------------------------------------------------------------------
// Read side: a tenant never reads another's data

/// An acme session `secret` with a large tool output, projected. Returns the output.
async fn secret_session(h: &Harness) -> String {
    let output = big_output(12 * 1024);
    let mut batch = vec![session_started("start", "secret"), prompt("ask", "secret")];
    batch.extend(
        tool_batch("secret", "call-1", &output)
            .as_array()
            .expect("array")
            .iter()
            .cloned(),
    );
    let (status, resp) = h.post_json(&h.acme, &Value::Array(batch)).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends)
        .await
        .expect("catch up");
    output
}

#[tokio::test]
async fn events_of_another_tenants_session_are_not_found() {
    let h = Harness::new().await;
    secret_session(&h).await;

    let uri = "/v1/sessions/secret/events";
    let (status, resp) = h.send("GET", uri, Some(&h.acme), Body::empty()).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let ids: Vec<&str> = resp["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events in {resp}"))
        .iter()
        .map(|e| e["event_id"].as_str().expect("event_id"))
        .collect();
    assert_eq!(ids, ["start", "ask", "call-1-req", "call-1-res"]);
    let (status, _) = h.send("GET", uri, None, Body::empty()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, resp) = h.send("GET", uri, Some(&h.globex), Body::empty()).await;
    assert!(
        !resp.to_string().contains("prompt ask"),
        "globex reads acme's events: {resp}"
    );
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "another tenant's session is not found: {resp}"
    );
    let (code, message) = error_of(&resp);
    assert_eq!(code, "not_found");
    assert!(message.contains("secret"), "{message}");
}

#[tokio::test]
async fn other_tenants_cannot_read_a_session() {
    let h = Harness::new().await;
    let output = secret_session(&h).await;
    let sha = strata_core::sha256_hex(output.as_bytes());

    // State.
    let uri = "/v1/sessions/secret/state";
    let (status, resp) = h.send("GET", uri, Some(&h.acme), Body::empty()).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let (status, resp) = h.send("GET", uri, Some(&h.globex), Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{resp}");

    // Context.
    let uri = "/v1/sessions/secret/context";
    let (status, resp) = h.send("POST", uri, Some(&h.globex), Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "not_found");
    assert!(message.contains("secret"), "{message}");
    assert!(
        !resp.to_string().contains("careful engineer"),
        "no trace of acme's system prompt: {resp}"
    );
    let (status, resp) = h.send("POST", uri, Some(&h.acme), "{}").await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(resp["assembly"]["tenant_id"], "acme");
    assert_eq!(resp["assembly"]["session_id"], "secret");
    assert!(
        resp["payload"].to_string().contains("careful engineer"),
        "acme's context holds its system prompt: {resp}"
    );

    // The assembly record, by id.
    let assembly_id = resp["assembly"]["assembly_id"]
        .as_str()
        .expect("assembly_id")
        .to_owned();
    strata_projector::catch_up(&h.backends)
        .await
        .expect("catch up");
    let uri = format!("/v1/assemblies/{assembly_id}");
    let (status, resp) = h.send("GET", &uri, Some(&h.acme), Body::empty()).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(resp["assembly_id"], assembly_id.as_str());
    let (status, resp) = h.send("GET", &uri, Some(&h.globex), Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{resp}");

    // Artifacts.
    let uri = format!("/v1/artifacts/{sha}");
    let (status, bytes) = h.send_raw("GET", &uri, Some(&h.acme), Body::empty()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes, output.as_bytes());
    let (status, resp) = h.send("GET", &uri, Some(&h.globex), Body::empty()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{resp}");

    // Session lists.
    let (status, resp) = h
        .send("GET", "/v1/sessions", Some(&h.globex), Body::empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert!(!resp.to_string().contains("secret"), "{resp}");
    let (status, resp) = h
        .send("GET", "/v1/sessions", Some(&h.acme), Body::empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert!(resp.to_string().contains("secret"), "{resp}");
}

/// The hot state loses every head while the projector lags (a flushed Redis, a restarted
/// process): ingest reads the log beyond the projections, so no seq is handed out twice and a
/// re-sent event only the log has is still a duplicate.
#[tokio::test]
async fn a_lost_hot_state_is_recovered_from_the_log_not_guessed_from_the_projections() {
    let dir = tempfile::tempdir().unwrap();
    let backends = Backends::open(&opts(dir.path()), "test").await.unwrap();
    let event = |n: u32| {
        json!({"event_id": format!("e{n}"), "tenant_id": "acme", "session_id": "s",
            "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": format!("m{n}"), "text": format!("prompt {n}")}})
    };
    let first = Ingestor::new(backends.clone(), IngestOptions::default());
    first
        .ingest_json(
            &strata_ingest::Publisher::Operator,
            (1..=3).map(event).collect(),
        )
        .await
        .unwrap();
    strata_projector::catch_up(&backends).await.unwrap();
    first
        .ingest_json(
            &strata_ingest::Publisher::Operator,
            (4..=5).map(event).collect(),
        )
        .await
        .unwrap();
    // A new process with an empty hot state; the projections stop at seq 3.
    let forgetful = Backends::from_parts(
        backends.log.clone(),
        backends.store.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        backends.blobs.clone(),
        dir.path().to_path_buf(),
    )
    .with_codec(backends.codec.clone());
    let second = Ingestor::new(forgetful, IngestOptions::default());
    let outcomes = second
        .ingest_json(
            &strata_ingest::Publisher::Operator,
            vec![event(2), event(5), event(6)],
        )
        .await
        .unwrap();
    let got: Vec<(&str, u64)> = outcomes.iter().map(|o| (o.status, o.seq)).collect();
    assert_eq!(
        got,
        vec![("duplicate", 2), ("duplicate", 5), ("accepted", 6)],
        "e2 is projected, e5 is only on the log, e6 is next"
    );
    strata_projector::catch_up(&backends).await.unwrap();
    let fold = backends
        .store
        .session_fold("acme", "s")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((fold.head_seq, fold.event_count), (6, 6));
}

#[tokio::test]
async fn a_client_cannot_cite_a_stored_blob_by_reference_to_launder_its_privacy() {
    let h = Harness::new().await;
    // A restricted output, stored by ingest.
    let secret = format!("vault token SECRET-9f2c\n{}", big_output(20 * 1024));
    let mut batch = tool_batch("s1", "call-1", &secret);
    batch[1]["payload"]["privacy_class"] = json!("restricted");
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let uri = results(&resp)[1]["output_ref"].as_str().unwrap().to_owned();
    let sha = uri.strip_prefix("artifact:sha256:").unwrap().to_owned();
    let before = h.log_len().await;

    // A second result citing that blob with no class and a made-up size is refused, whole.
    let mut laundering = tool_batch("s1", "call-2", "x");
    laundering[1]["payload"] = json!({"tool_call_id": "call-2", "output_ref": uri,
        "output_sha256": sha, "output_bytes": 10, "output_preview": "harmless"});
    let (status, resp) = h.post_json(&h.acme, &laundering).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    let fields: Vec<(u64, String)> = resp["error"]["details"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| {
            let index = e["index"].as_u64().unwrap();
            e["errors"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |f| (index, f["field"].as_str().unwrap().to_owned()))
        })
        .collect();
    assert_eq!(
        fields,
        vec![
            (1, "payload.output_ref".to_owned()),
            (1, "payload.output_sha256".to_owned())
        ],
        "{resp}"
    );
    assert!(
        resp.to_string().contains("send the output inline"),
        "{resp}"
    );
    assert_eq!(h.log_len().await, before, "nothing of the batch appended");
}

#[tokio::test]
async fn the_events_api_never_quotes_a_payload_privacy_policy_withholds() {
    let h = Harness::new().await;
    let start = with_field(
        session_started("e0", "s1"),
        "payload",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 4000,
            "privacy": {"tools": {"crm": "confidential"}}}),
    );
    let mut events = vec![start];
    let mut push = |batch: Value| events.extend(batch.as_array().unwrap().iter().cloned());
    // Restricted by the event, inline and offloaded; confidential by the session's rule.
    let mut inline = tool_batch("s1", "call-1", "token INLINE-SECRET-1");
    inline[1]["payload"]["privacy_class"] = json!("restricted");
    push(inline);
    let mut big = tool_batch(
        "s1",
        "call-2",
        &format!("BIG-SECRET-2\n{}", big_output(20 * 1024)),
    );
    big[1]["payload"]["privacy_class"] = json!("restricted");
    push(big);
    let mut crm = tool_batch("s1", "call-3", "CRM-SECRET-3");
    crm[0]["payload"]["tool_calls"][0]["name"] = json!("crm");
    push(crm);
    let mut crm = tool_batch("s1", "call-4", "CRM-ERROR-SECRET-4");
    crm[0]["payload"]["tool_calls"][0]["name"] = json!("crm");
    crm[1]["payload"]["is_error"] = json!(true);
    push(crm);
    push(tool_batch("s1", "call-5", "tests passed OPEN-5"));
    let (status, resp) = h.post_json(&h.acme, &Value::Array(events)).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();

    // Page by page too: the class of a result is the projection's, whatever the page holds.
    let mut listed = Vec::new();
    let mut after = 0;
    loop {
        let uri = format!("/v1/sessions/s1/events?after_seq={after}&limit=3");
        let (status, page) = h.send("GET", &uri, Some(&h.acme), Body::empty()).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let page = page["events"].as_array().unwrap().clone();
        let Some(last) = page.last() else { break };
        after = last["seq"].as_u64().unwrap();
        listed.extend(page);
    }
    assert_eq!(listed.len(), 11);
    let text = Value::Array(listed.clone()).to_string();
    for secret in [
        "INLINE-SECRET-1",
        "BIG-SECRET-2",
        "CRM-SECRET-3",
        "CRM-FAIL-SECRET-4",
    ] {
        assert!(!text.contains(secret), "{secret} leaks through /events");
    }
    assert!(
        text.contains("OPEN-5"),
        "an unclassed output is the tenant's own"
    );
    let withheld: Vec<(&str, &str)> = listed
        .iter()
        .filter_map(|e| Some((e["event_id"].as_str()?, e["payload"]["withheld"].as_str()?)))
        .collect();
    assert_eq!(
        withheld,
        [
            ("call-1-res", "restricted"),
            ("call-2-res", "restricted"),
            ("call-3-res", "confidential"),
            ("call-4-res", "confidential")
        ]
    );
    // The metadata stays: the offloaded output still names its artifact (which refuses too).
    let offloaded = listed
        .iter()
        .find(|e| e["event_id"] == "call-2-res")
        .unwrap();
    let uri = offloaded["payload"]["output_ref"].as_str().unwrap();
    let sha = uri.strip_prefix("artifact:sha256:").unwrap();
    let (status, _) = h
        .send(
            "GET",
            &format!("/v1/artifacts/{sha}"),
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_session_is_evaluated_per_call_point_against_the_baselines() {
    let h = Harness::new().await;
    let mut events = vec![
        session_started("e0", "ev"),
        event(
            "e1",
            "ev",
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "The parser tests fail; fix them."}),
        ),
    ];
    let mut run = tool_batch(
        "ev",
        "call-1",
        "FAILED tests/test_parse.py::test_split_header - AssertionError: 3 != 4",
    );
    run[1]["payload"]["is_error"] = json!(true);
    events.extend(run.as_array().unwrap().iter().cloned());
    let mut fix = tool_batch("ev", "call-2", "applied");
    fix[0]["payload"]["text"] =
        json!("test_split_header in tests/test_parse.py expects 4 fields; editing the parser.");
    events.extend(fix.as_array().unwrap().iter().cloned());
    let (status, resp) = h.post_json(&h.acme, &Value::Array(events)).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();

    let (status, report) = h
        .send("GET", "/v1/sessions/ev/eval", Some(&h.acme), Body::empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["policy"], "recorded");
    let points = report["points"].as_array().unwrap();
    let responses: Vec<&str> = points
        .iter()
        .map(|p| p["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(responses, ["call-1-req", "call-2-req"]);
    // The second response names the failing test, seen in the first result.
    let second = &points[1];
    assert!(second["evidence"].as_u64().unwrap() >= 1, "{second}");
    let sides = &second["sides"];
    assert_eq!(
        sides["strata"]["present"], sides["transcript"]["present"],
        "{second}"
    );
    assert!(sides["strata"]["tokens"].as_u64().unwrap() > 0);
    assert!(second.get("tenant_id").is_none());
    assert_eq!(report["totals"]["points"], 2);

    // Under a named policy, and refusals that say what is wrong.
    let (status, under) = h
        .send(
            "GET",
            "/v1/sessions/ev/eval?policy=strata.assembly/3",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{under}");
    assert_eq!(under["points"][1]["policy"], "strata.assembly/3");
    assert!(
        under.get("assembly").is_none(),
        "a record only for a named point"
    );
    // One call point's traced record, for a comparison segment by segment.
    let (status, at) = h
        .send(
            "GET",
            "/v1/sessions/ev/eval?policy=strata.assembly/3&point=call-2-req",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{at}");
    assert_eq!(at["assembly"]["policy_version"], "strata.assembly/3");
    assert_eq!(at["assembly"]["traced"], true);
    assert!(!at["assembly"]["included"].as_array().unwrap().is_empty());
    let (status, none) = h
        .send(
            "GET",
            "/v1/sessions/ev/eval?point=e1",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{none}");
    assert!(none.to_string().contains("not a call point"), "{none}");
    let (status, bad) = h
        .send(
            "GET",
            "/v1/sessions/ev/eval?policy=nope",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bad.to_string().contains("strata.assembly/8"), "{bad}");

    // The cost/recall curve: one run per target, ascending, each with its totals; the smallest
    // target sends no more tokens than the largest, and no target more than the transcript
    // (under one smaller than the protected steps, the unresolved error was said twice).
    let (status, curve) = h
        .send(
            "GET",
            "/v1/sessions/ev/eval?targets=4000,60,400",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{curve}");
    let runs = curve["curve"].as_array().expect("curve");
    let sizes: Vec<u64> = runs
        .iter()
        .map(|r| r["target_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [60, 400, 4000]);
    let tokens = |r: &Value| r["totals"]["strata"]["tokens"].as_u64().unwrap();
    assert!(tokens(&runs[0]) <= tokens(&runs[2]), "{curve}");
    for run in runs {
        assert_eq!(run["totals"]["larger_than_transcript"], 0, "{run}");
    }
    assert_eq!(runs[2]["totals"]["points"], 2);
    assert!(runs[0]["totals"]["last_n"]["tokens"].as_u64().unwrap() > 0);
    assert_eq!(curve["points"].as_array().unwrap().len(), 2);
    for (query, says) in [
        ("targets=400,lots", "item 2 (\"lots\") is not a token count"),
        ("targets=0", "item 1 is 0"),
        ("targets=1,2,3,4,5,6,7,8,9", "9 sizes, at most 8"),
    ] {
        let (status, bad) = h
            .send(
                "GET",
                &format!("/v1/sessions/ev/eval?{query}"),
                Some(&h.acme),
                Body::empty(),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {bad}");
        let message = bad["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{query}: {bad}");
    }
    let (status, _) = h
        .send(
            "GET",
            "/v1/sessions/ev/eval",
            Some(&h.globex),
            Body::empty(),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "another tenant's session does not exist"
    );
}

#[tokio::test]
async fn the_tenants_privacy_rule_is_stamped_into_session_start_as_a_floor() {
    let floor = strata_core::privacy::PrivacyDefaults::parse_per_tenant(
        r#"{"acme": {"unlabelled": "restricted", "tools": {"crm": "confidential"}}}"#,
    )
    .unwrap();
    let h = Harness::with_ingest_options(IngestOptions {
        privacy_defaults: floor,
        ..IngestOptions::default()
    })
    .await;
    // The platform's own rule is weaker; the stricter of the two is what the log keeps.
    let start = with_field(
        session_started("e1", "s1"),
        "payload",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 4000,
            "privacy": {"unlabelled": "internal", "tools": {"crm": "public", "ls": "internal"}}}),
    );
    let (status, resp) = h.post_json(&h.acme, &json!([start])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let logged = h.logged("e1").await;
    let Payload::SessionStarted(p) = &logged.payload else {
        panic!("{logged:?}")
    };
    assert_eq!(
        p.extra["privacy"],
        json!({"unlabelled": "restricted", "tools": {"crm": "confidential", "ls": "internal"}})
    );
    // Another tenant's sessions are left as sent.
    let (status, resp) = h
        .post_json(&h.globex, &json!([session_started("g1", "s9")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let Payload::SessionStarted(p) = &h.logged("g1").await.payload else {
        panic!()
    };
    assert!(p.extra.get("privacy").is_none());
}

#[tokio::test]
async fn a_malformed_privacy_rule_is_400_naming_the_field() {
    let h = Harness::new().await;
    let start = with_field(
        session_started("e1", "s1"),
        "payload",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 4000,
            "privacy": {"unlabelled": "secret"}}),
    );
    let (status, resp) = h.post_json(&h.acme, &json!([start])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    let text = resp.to_string();
    assert!(text.contains("payload.privacy.unlabelled"), "{text}");
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn a_raw_artifact_is_served_only_when_its_references_allow_it() {
    let h = Harness::new().await;
    let public = big_output(20 * 1024);
    let secret = format!("vault token SECRET-51aa\n{}", big_output(20 * 1024));
    let mut batch = tool_batch("s1", "call-1", &public);
    batch.as_array_mut().unwrap().extend(
        tool_batch("s1", "call-2", &secret)
            .as_array()
            .unwrap()
            .clone(),
    );
    batch[3]["payload"]["privacy_class"] = json!("restricted");
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let sha = |i: usize| {
        results(&resp)[i]["output_ref"]
            .as_str()
            .unwrap()
            .strip_prefix("artifact:sha256:")
            .unwrap()
            .to_owned()
    };
    let (public_sha, secret_sha) = (sha(1), sha(3));

    // Before the projector has seen the events, nothing says what they are: not served.
    let (status, _) = h
        .send_raw(
            "GET",
            &format!("/v1/artifacts/{public_sha}"),
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    strata_projector::catch_up(&h.backends).await.unwrap();
    let (status, bytes) = h
        .send_raw(
            "GET",
            &format!("/v1/artifacts/{public_sha}"),
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes, public.as_bytes());
    let (status, body) = h
        .send(
            "GET",
            &format!("/v1/artifacts/{secret_sha}"),
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.to_string().contains("restricted"), "{body}");
    assert!(!body.to_string().contains("SECRET-51aa"), "{body}");
}

#[tokio::test]
async fn an_error_body_names_the_problem_without_echoing_megabytes_of_input() {
    let h = Harness::new().await;
    let huge = "x".repeat(2 * 1024 * 1024);
    // A huge unknown type, a huge event id, and 300 bad events: the answer stays small.
    let mut events = vec![event(&huge, "s1", &huge, json!({}))];
    for i in 0..300 {
        events.push(event(
            &format!("e{i}"),
            "s1",
            "UserPromptSubmitted",
            json!({}),
        ));
    }
    let body = serde_json::to_string(&events).unwrap();
    let (status, bytes) = h.send_raw("POST", "/v1/events", Some(&h.acme), body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bytes.len() < 200 * 1024, "{} bytes", bytes.len());
    let resp: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        resp["error"]["details"]["events"].as_array().unwrap().len(),
        100
    );
    assert_eq!(resp["error"]["details"]["more_invalid_events"], 201);
    let first = &resp["error"]["details"]["events"][0];
    assert_eq!(first["index"], 0);
    assert!(
        first["errors"].to_string().contains("unknown event type"),
        "{first}"
    );
    assert_eq!(h.log_len().await, 0);
}

#[tokio::test]
async fn an_event_too_large_for_a_log_record_is_refused_and_nothing_is_appended() {
    let h = Harness::new().await;
    let mut start = session_started("e1", "s1");
    start["payload"]["system_prompt"] = json!("p".repeat(strata_codec::MAX_RECORD_BYTES + 1));
    let (status, resp) = h
        .post_json(&h.acme, &json!([prompt("e0", "s1"), start]))
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{}",
        &resp.to_string()[..300]
    );
    let first = &resp["error"]["details"]["events"][0];
    assert_eq!(first["index"], 1);
    assert!(
        first["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("as a log record, more than"),
        "{first}"
    );
    assert_eq!(h.log_len().await, 0);
    // The session head was released: the same events, made small, are accepted as seq 1 and 2.
    let (status, resp) = h
        .post_json(
            &h.acme,
            &json!([prompt("e0", "s1"), session_started("e1", "s1")]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(
        outcomes(&resp),
        vec![("accepted".to_owned(), 1), ("accepted".to_owned(), 2)]
    );
}

#[tokio::test]
async fn sessions_are_listed_by_pages_with_a_cursor_and_a_bad_limit_is_400() {
    let h = Harness::new().await;
    for i in 0..5 {
        let (status, resp) = h
            .post_json(
                &h.acme,
                &json!([prompt(&format!("e{i}"), &format!("s{i}"))]),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{resp}");
    }
    strata_projector::catch_up(&h.backends).await.unwrap();
    let (status, page) = h
        .send("GET", "/v1/sessions?limit=2", Some(&h.acme), Body::empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["sessions"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_after"], "s1");
    let (_, last) = h
        .send(
            "GET",
            "/v1/sessions?limit=2&after=s3",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    let ids: Vec<&str> = last["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s4"]);
    assert!(last["next_after"].is_null(), "{last}");
    let (status, body) = h
        .send("GET", "/v1/sessions?limit=0", Some(&h.acme), Body::empty())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("limit"), "{body}");
    // Another tenant's listing stays its own.
    let (_, other) = h
        .send("GET", "/v1/sessions", Some(&h.globex), Body::empty())
        .await;
    assert!(other["sessions"].as_array().unwrap().is_empty(), "{other}");
}

/// Files under the embedded blob store.
fn blob_files(dir: &std::path::Path) -> usize {
    fn walk(p: &std::path::Path) -> usize {
        std::fs::read_dir(p).map_or(0, |entries| {
            entries
                .flatten()
                .map(|e| {
                    let path = e.path();
                    if path.is_dir() {
                        walk(&path)
                    } else {
                        1
                    }
                })
                .sum()
        })
    }
    walk(&dir.join("blobs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_large_batch_holds_up_neither_other_tenants_nor_its_own_share() {
    let h = Arc::new(
        Harness::with_ingest_options(IngestOptions {
            max_tenant_events_in_flight: 50,
            ..IngestOptions::default()
        })
        .await,
    );
    // Acme's batch: 200 large tool outputs to store as artifacts (tokens counted, previews cut).
    let mut large = Vec::new();
    for i in 0..200 {
        let batch = tool_batch("big", &format!("c{i}"), &big_output(64 * 1024 + i));
        large.extend(batch.as_array().unwrap().iter().cloned());
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let big = {
        let (h, done) = (h.clone(), done.clone());
        tokio::spawn(async move {
            let answer = h.post_json(&h.acme, &json!(large)).await;
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            answer
        })
    };
    // Once its heavy work is under way…
    let started = std::time::Instant::now();
    while blob_files(h.dir.path()) == 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no artifact stored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // …another tenant's batch is taken without waiting for it,
    let (status, resp) = h
        .post_json(&h.globex, &json!([session_started("g1", "other")]))
        .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    let stored = blob_files(h.dir.path());
    assert!(
        stored < 200,
        "globex's one event waited for acme's large batch ({stored} of its 200 outputs stored)"
    );
    // …and acme's next batch, past its share while the first is in flight, is refused as such.
    let more: Vec<Value> = (0..20).map(|i| prompt(&format!("p{i}"), "small")).collect();
    let (status, resp) = h.post_json(&h.acme, &json!(more)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{resp}");
    let (code, message) = error_of(&resp);
    assert_eq!(code, "too_many_requests");
    assert!(message.contains("400 events in flight"), "{message}");
    assert!(
        !done.load(std::sync::atomic::Ordering::SeqCst),
        "the large batch ended before the refusal, which then proves nothing"
    );

    let (status, resp) = big.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert!(results(&resp).iter().all(|r| r["status"] == "accepted"));
    // Nothing of the refused batch was appended; sent again now, it is taken whole.
    assert_eq!(h.log_len().await, 401);
    let (status, resp) = h.post_json(&h.acme, &json!(more)).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    assert_eq!(h.log_len().await, 421);
}

#[tokio::test]
async fn a_restarted_worker_resumes_a_session_from_one_read() {
    let h = Harness::new().await;
    let start = with_field(
        session_started("r-start", "resume"),
        "payload",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "tools": [{"name": "run_tests"}, {"name": "read_file"}], "user_id": "u-7"}),
    );
    let call = event(
        "r-call",
        "resume",
        "ModelResponseReceived",
        json!({"message_id": "a1", "text": "Running the tests.",
               "tool_calls": [{"tool_call_id": "c1", "name": "run_tests", "args": {}}]}),
    );
    let fork = with_field(
        event(
            "r-fork",
            "resume",
            "BranchForked",
            json!({"new_branch_id": "alt", "from_event_id": "r-ask"}),
        ),
        "branch_id",
        json!("main"),
    );
    let on_alt = with_field(prompt("r-alt", "resume"), "branch_id", json!("alt"));
    let batch = json!([start, prompt("r-ask", "resume"), call, fork, on_alt]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();

    let (status, s) = h
        .send("GET", "/v1/sessions/resume", Some(&h.acme), Body::empty())
        .await;
    assert_eq!(status, StatusCode::OK, "{s}");
    assert_eq!(s["status"], "awaiting_tool_results", "{s}");
    assert_eq!(s["head_seq"], 5);
    assert_eq!(s["model"]["model"], "gpt-4o");
    assert_eq!(s["model"]["context_window_tokens"], 128000);
    assert_eq!(s["model"]["tools"], json!(["run_tests", "read_file"]));
    assert_eq!(s["model"]["user_id"], "u-7");
    assert_eq!(s["open_tool_calls"][0]["tool_call_id"], "c1");
    let branches = s["branches"].as_array().unwrap();
    let branch = |id: &str| branches.iter().find(|b| b["branch_id"] == id).unwrap();
    assert_eq!(branch("main")["head_seq"], 4);
    assert_eq!(branch("main")["events"], 4);
    assert_eq!(branch("alt")["head_seq"], 5);
    assert_eq!(branch("alt")["parent_branch_id"], "main");
    assert_eq!(branch("alt")["fork_event_id"], "r-ask");
    assert_eq!(s["latest_compaction"], Value::Null);

    // The result arrives: the model is called next.
    let result = event(
        "r-result",
        "resume",
        "ToolCallFinished",
        json!({"tool_call_id": "c1", "output": "3 passed"}),
    );
    let (status, resp) = h.post_json(&h.acme, &json!([result])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();
    let (_, s) = h
        .send("GET", "/v1/sessions/resume", Some(&h.acme), Body::empty())
        .await;
    assert_eq!(s["status"], "awaiting_model", "{s}");
    assert_eq!(s["open_tool_calls"], json!([]));

    // Another tenant learns nothing, not even that it exists.
    let (status, resp) = h
        .send("GET", "/v1/sessions/resume", Some(&h.globex), Body::empty())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{resp}");
    assert!(!resp.to_string().contains("gpt-4o"));
}

#[tokio::test]
async fn a_request_naming_a_retired_policy_is_refused_with_the_selectable_ones() {
    let h = Harness::new().await;
    let batch = json!([
        session_started("r-start", "retired"),
        prompt("r-ask", "retired")
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();
    let body = json!({"policy": "strata.assembly/9"}).to_string();
    let (status, refused) = h
        .send("POST", "/v1/sessions/retired/context", Some(&h.acme), body)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, eval) = h
        .send(
            "GET",
            "/v1/sessions/retired/eval?policy=strata.assembly/9",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{eval}");
    for answer in [refused, eval] {
        let text = answer.to_string();
        assert!(text.contains("strata.assembly/9 is retired"), "{text}");
        for selectable in [
            "strata.assembly/12",
            "strata.assembly/8",
            "strata.assembly/3",
        ] {
            assert!(text.contains(selectable), "{text}");
        }
    }
}

#[tokio::test]
async fn a_response_carries_the_assembly_it_answered_and_the_link_resolves() {
    let h = Harness::new().await;
    let batch = json!([
        session_started("l-start", "linked"),
        prompt("l-ask", "linked")
    ]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();
    let (status, ctx) = h
        .send("POST", "/v1/sessions/linked/context", Some(&h.acme), "{}")
        .await;
    assert_eq!(status, StatusCode::OK, "{ctx}");
    let assembly_id = ctx["assembly"]["assembly_id"].as_str().unwrap().to_owned();

    // The platform sends the model's answer back with the id of the context it answered.
    let answer = event(
        "l-answer",
        "linked",
        "ModelResponseReceived",
        json!({"message_id": "a1", "text": "Done.", "assembly_id": assembly_id}),
    );
    let (status, resp) = h.post_json(&h.acme, &json!([answer])).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();
    let (_, events) = h
        .send(
            "GET",
            "/v1/sessions/linked/events",
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    let answered = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_id"] == "l-answer")
        .expect("the answer is projected");
    let linked = answered["payload"]["assembly_id"].as_str().unwrap();
    assert_eq!(linked, assembly_id);
    // One lookup from the response to the exact context it answered.
    let (status, record) = h
        .send(
            "GET",
            &format!("/v1/assemblies/{linked}"),
            Some(&h.acme),
            Body::empty(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["session_id"], "linked");

    // A malformed link is refused, naming the field; nothing is appended.
    let before = h.log_len().await;
    let bad = event(
        "l-bad",
        "linked",
        "ModelResponseReceived",
        json!({"message_id": "a2", "text": "?", "assembly_id": "not-an-assembly"}),
    );
    let (status, resp) = h.post_json(&h.acme, &json!([bad])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    assert!(resp.to_string().contains("payload.assembly_id"), "{resp}");
    assert_eq!(h.log_len().await, before);
}

/// Found by schemathesis: a context asked for an empty participant recorded an assembly whose
/// event could not be read back, and every later compaction of the session failed on it.
#[tokio::test]
async fn a_context_request_naming_an_unusable_id_is_400_and_records_nothing() {
    let h = Harness::new().await;
    let batch = json!([session_started("u-start", "ids"), prompt("u-ask", "ids")]);
    let (status, resp) = h.post_json(&h.acme, &batch).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    strata_projector::catch_up(&h.backends).await.unwrap();
    let before = h.log_len().await;
    let uri = "/v1/sessions/ids/context";
    for (body, says) in [
        (json!({"participant": ""}), "participant: must not be empty"),
        (
            json!({"participant": "a\u{6}b"}),
            "participant: contains control characters",
        ),
        (json!({"branch": ""}), "branch: must not be empty"),
        (
            json!({"target_tokens": 0}),
            "target_tokens must be at least 1",
        ),
        (json!([]), "expected a JSON object"),
    ] {
        let (status, resp) = h.send("POST", uri, Some(&h.acme), body.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {resp}");
        let (code, message) = error_of(&resp);
        assert_eq!(code, "bad_request");
        assert!(message.contains(says), "{body}: {message}");
    }
    assert_eq!(h.log_len().await, before, "no assembly recorded");
    // The services' own events are held to the same ids.
    let mut event = h.logged("u-ask").await;
    event.event_id = "built-in-code".into();
    event.seq = None;
    event.participant_id = Some(String::new());
    let refused = h
        .ingestor
        .ingest(&Publisher::Operator, vec![(event, None)])
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("participant_id: must not be empty"),
        "{refused}"
    );
    assert_eq!(h.log_len().await, before);
}

#[tokio::test]
async fn a_service_s_derivation_under_a_taken_id_keeps_the_first() {
    let h = Harness::new().await;
    let superseded = |reason: &str| {
        json!({"event_id": "mem-sup-1", "tenant_id": "acme", "session_id": "s1",
            "timestamp": "2026-06-03T10:00:00Z", "type": "MemorySuperseded",
            "payload": {"memory_id": "m1", "superseded_by": "m2", "reason": reason}})
    };
    let first = h
        .ingestor
        .ingest_json(&Publisher::Operator, vec![superseded("first")])
        .await
        .expect("accepted");
    assert_eq!(first[0].status, "accepted");
    // Derived again by other rules: answered as a duplicate, never a conflict.
    let again = h
        .ingestor
        .ingest_json(&Publisher::Operator, vec![superseded("second")])
        .await
        .expect("a duplicate");
    assert_eq!((again[0].status, again[0].seq), ("duplicate", first[0].seq));
    assert_eq!(h.log_len().await, 1);
}
