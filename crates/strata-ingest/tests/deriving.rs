//! The deriving loop (the memory extractor's and the compactor's) through an outage of the hot
//! state, against a redis-server this test starts, stops and starts again itself: the loop keeps
//! retrying the append of what it derived instead of giving up, and once Redis is back every
//! derived event is on the log exactly once.
//!
//! Outside CI a missing `redis-server` skips the test with a message; under `CI` it fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_core::{Event, EventType};
use strata_ingest::derive::{run_deriving, Deriver};
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::follow::CountsByType;
use strata_runtime::{BackendOpts, Backends};

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A redis-server of this test's own on `port`, without persistence.
fn redis_on(port: u16) -> Child {
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (installed by scripts/services.sh) runs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn stop(mut redis: Child) {
    let _ = redis.kill();
    let _ = redis.wait();
}

fn prompt(n: usize) -> Event {
    Event::from_json(
        json!({"event_id": format!("p{n}"), "tenant_id": "acme", "session_id": "work",
            "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": format!("u{n}"), "text": format!("prompt {n}")}}),
        None,
    )
    .expect("a valid event")
}

/// What the test's observer derives from a prompt: a copy in a session of its own (a session
/// with nothing on the log yet, so no settling time applies when its head is recovered).
/// Derives one event from each prompt of session `work`, counting them.
struct Prompts(Arc<AtomicUsize>);

impl Deriver for Prompts {
    async fn derive(&mut self, event: &Event, replaying: bool, _: &mut CountsByType) -> Vec<Event> {
        if replaying
            || event.event_type() != EventType::UserPromptSubmitted
            || event.session_id != "work"
        {
            return Vec::new();
        }
        self.0.fetch_add(1, Ordering::SeqCst);
        vec![derived_from(event)]
    }
}

fn derived_from(event: &Event) -> Event {
    let mut d = event.clone();
    d.event_id = format!("derived-{}", event.event_id);
    d.session_id = "derived".into();
    d.seq = None;
    d
}

async fn derived_on_log(backends: &Backends) -> Vec<String> {
    let ends = backends.log.end_offsets().await.expect("end offsets");
    let mut ids = Vec::new();
    for (p, end) in ends.iter().enumerate() {
        let mut from = 0;
        while from < *end {
            let records = backends
                .log
                .read(p as u32, from, 1000)
                .await
                .expect("read the log");
            let Some(last) = records.last() else { break };
            from = last.offset + 1;
            for r in &records {
                let e = backends.codec.decode(&r.value).await.expect("decode");
                if e.event_id.starts_with("derived-") {
                    ids.push(e.event_id);
                }
            }
        }
    }
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deriving_service_retries_through_a_hot_state_outage_and_appends_once() {
    if which("redis-server").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is not installed under CI (scripts/services.sh installs it)"
        );
        eprintln!("skipping: redis-server is not installed (scripts/services.sh installs it)");
        return;
    }
    let port = free_port();
    let redis = redis_on(port);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts {
        hot_url: Some(format!("redis://127.0.0.1:{port}/0")),
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.expect("backends");
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let prompts: Vec<_> = (0..3).map(|n| (prompt(n), None)).collect();
    ingestor
        .ingest(&Publisher::Operator, prompts)
        .await
        .expect("the prompts are accepted");

    // Redis goes away before the deriving service starts: every append it tries fails.
    stop(redis);
    let observed = Arc::new(AtomicUsize::new(0));
    let (stop_loop, stopped) = tokio::sync::oneshot::channel::<()>();
    let deriving = {
        let (backends, observed) = (backends.clone(), observed.clone());
        tokio::spawn(async move {
            run_deriving(
                &backends,
                "test-deriver",
                async {
                    let _ = stopped.await;
                },
                Prompts(observed),
            )
            .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while observed.load(Ordering::SeqCst) < 3 {
        assert!(Instant::now() < deadline, "the loop never read the prompts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Long enough for several failed attempts.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !deriving.is_finished(),
        "the deriving loop gave up on a failed append: {:?}",
        deriving.await
    );
    assert!(derived_on_log(&backends).await.is_empty());

    // Back (empty, as after a restart): the retry goes through, once.
    let redis = redis_on(port);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ids = derived_on_log(&backends).await;
        if ids.len() >= 3 {
            assert_eq!(ids, ["derived-p0", "derived-p1", "derived-p2"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "derived events not appended: {ids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_loop.send(());
    let (stats, counts) = deriving
        .await
        .expect("the loop task")
        .expect("the loop stops cleanly");
    assert_eq!(stats.events, 6, "the prompts, then the derived events");
    assert_eq!(counts.get("appended").copied(), Some(3));
    assert_eq!(derived_on_log(&backends).await.len(), 3, "appended once");
    stop(redis);
}
