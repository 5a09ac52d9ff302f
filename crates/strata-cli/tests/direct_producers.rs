//! A platform that produces straight to Kafka, as one outside Rust does: the documented Python
//! producer (`docs/examples/direct_producer.py`: `confluent-kafka` and `fastavro` from PyPI,
//! which `scripts/services.sh start` installs in the interpreter `STRATA_TEST_PYTHON` names)
//! writes a session's events to the tenant's inbound topic on the shared broker
//! (`STRATA_TEST_KAFKA_BROKERS`), while ingest also writes to that session over its HTTP path.
//! Ingest's relay, a projector and the assembler then give the same context as for the same
//! events sent over HTTP, with the assembly recorded and a re-sent record applied once. Outside
//! CI a missing broker or interpreter skips the test with a message; under `CI` it fails.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_ingest::inbound::{open_inbound, relay};
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::{FileLogOptions, FsyncPolicy};
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::{BackendOpts, Backends};

fn required(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI (scripts/services.sh start sets it)")
        }
        _ => {
            eprintln!("skipping: {var} is not set (scripts/services.sh start sets it)");
            None
        }
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the workspace root")
}

/// A short coding session of `session`: a start, a request, a tool call with a large output (an
/// artifact), a file write and a follow-up request.
fn session_events(session: &str) -> Vec<Value> {
    let e = |n: usize, ty: &str, payload: Value| {
        json!({"event_id": format!("{session}-{n}"), "tenant_id": "acme", "session_id": session,
            "branch_id": "main", "timestamp": format!("2026-06-03T10:00:{n:02}Z"), "type": ty,
            "actor": "agent", "payload": payload})
    };
    let log: String = (0..400)
        .map(|i| {
            format!(
                "test invoices::case_{i} ... {}\n",
                if i == 7 { "FAILED" } else { "ok" }
            )
        })
        .collect();
    vec![
        e(
            1,
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "system_prompt": "You are a coding agent."}),
        ),
        e(
            2,
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "Fix the failing invoice test."}),
        ),
        e(
            3,
            "ModelResponseReceived",
            json!({"message_id": "a1", "text": "Running the tests.",
            "tool_calls": [{"tool_call_id": "c1", "name": "run_tests", "args": {"filter": "invoices"}}]}),
        ),
        e(
            4,
            "ToolCallFinished",
            json!({"tool_call_id": "c1", "output": log, "is_error": true}),
        ),
        e(
            5,
            "FileWritten",
            json!({"path": "src/invoices.rs", "bytes": 2048}),
        ),
        e(
            6,
            "UserPromptSubmitted",
            json!({"message_id": "u2", "text": "Now add a regression test."}),
        ),
    ]
}

/// Runs the documented producer on `events` (one JSON per line on its standard input).
fn produce_with_python(python: &str, brokers: &str, topic: &str, events: &[Value]) {
    let mut child = Command::new(python)
        .arg(repo_root().join("docs/examples/direct_producer.py"))
        .args(["--brokers", brokers, "--topic", topic, "--schema"])
        .arg(repo_root().join("schemas/event.avsc"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    for e in events {
        writeln!(stdin, "{e}").expect("write an event");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("the producer runs");
    assert!(
        out.status.success(),
        "the Python producer failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_producer_gets_the_same_context_as_http_ingest() {
    let (Some(brokers), Some(python)) = (
        required("STRATA_TEST_KAFKA_BROKERS"),
        required("STRATA_TEST_PYTHON"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("direct");
    let log_url = format!("kafka://{brokers}/{topic}?partitions=2");
    let opts = BackendOpts {
        log_url: Some(log_url.clone()),
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.expect("backends");
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let acme = Publisher::Tenant("acme".into());

    // The services: a projector and ingest's relay of acme's inbound topic.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let projector = {
        let (backends, stop) = (backends.clone(), until_stopped(stopped.clone()));
        tokio::spawn(async move {
            let p = Projector::start(backends, ProjectorOptions::default())
                .await
                .expect("start the projector");
            p.run(stop).await
        })
    };
    let inbound = open_inbound(&log_url, "acme", FileLogOptions::default())
        .await
        .expect("the inbound topic");
    let relaying = {
        let (ingestor, inbound, stop) = (ingestor.clone(), inbound.clone(), until_stopped(stopped));
        tokio::spawn(
            async move { relay(&ingestor, inbound.as_ref(), "acme", "test-relay", stop).await },
        )
    };

    // The same session twice: over HTTP's path, and through Kafka — whose start also comes
    // over HTTP (ingest writes to the session too), and one of whose records is sent twice.
    ingestor
        .ingest_json(&acme, session_events("via-http"))
        .await
        .expect("accepted");
    let mut direct = session_events("via-kafka");
    ingestor
        .ingest_json(&acme, vec![direct.remove(0)])
        .await
        .expect("accepted");
    direct.insert(2, direct[1].clone());
    let inbound_topic = format!("{topic}.inbound.acme");
    produce_with_python(&python, &brokers, &inbound_topic, &direct);

    let assembler = Assembler::new(
        backends.clone(),
        ingestor.clone(),
        AssemblerOptions::default(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let context = |session: &'static str| {
        let assembler = &assembler;
        async move {
            loop {
                if let Ok((rendered, recorded)) = assembler
                    .context_and_record("acme", session, &ContextRequest::default())
                    .await
                {
                    if rendered.payload.to_string().contains("regression test") {
                        return (rendered, recorded);
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "{session} never got its last request"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (http, http_recorded) = context("via-http").await;
    let (kafka, kafka_recorded) = context("via-kafka").await;
    assert!(http_recorded && kafka_recorded, "both assemblies recorded");
    let same = |v: &Value, session: &str| v.to_string().replace(session, "SESSION");
    assert_eq!(
        same(&kafka.payload, "via-kafka"),
        same(&http.payload, "via-http"),
        "the direct producer's context differs from HTTP's"
    );
    assert!(
        kafka.payload.to_string().contains("artifact:sha256:"),
        "the large output offloaded"
    );

    // The re-sent record is on the log once; every event got ingest's seq, in order.
    let state = backends
        .store
        .events("acme", "via-kafka", 0, 100)
        .await
        .expect("events");
    let ids: Vec<&str> = state
        .iter()
        .filter_map(|e| e["event_id"].as_str())
        .collect();
    assert_eq!(
        ids.iter().filter(|id| id.starts_with("via-kafka-")).count(),
        6,
        "{ids:?}"
    );
    let seqs: Vec<u64> = state.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");

    stop.send(true).unwrap();
    relaying.await.unwrap().expect("the relay stops cleanly");
    projector
        .await
        .unwrap()
        .expect("the projector stops cleanly");
}
