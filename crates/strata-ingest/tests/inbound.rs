//! The inbound relay against the shared Kafka-protocol broker (`STRATA_TEST_KAFKA_BROKERS`,
//! `scripts/services.sh start`): records a platform produced straight to its tenant's inbound
//! topic reach the log through ingest — sequenced after what came over HTTP for the same
//! session, duplicates once — and every record ingest refuses lands in the inbound topic's
//! dead-letter queue with its reason, never on the log. Outside CI a missing broker skips the
//! test with a message; under `CI` it fails.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_core::Event;
use strata_ingest::inbound::{open_inbound, relay, InboundStats};
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::{dead_letter, EventLog, FileLogOptions, FsyncPolicy, NewRecord};
use strata_runtime::{BackendOpts, Backends};

fn brokers() -> Option<String> {
    match std::env::var("STRATA_TEST_KAFKA_BROKERS") {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("STRATA_TEST_KAFKA_BROKERS is not set under CI (scripts/services.sh start)")
        }
        _ => {
            eprintln!("skipping: STRATA_TEST_KAFKA_BROKERS is not set");
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

fn event(id: &str, tenant: &str, ty: &str, payload: Value) -> Value {
    json!({"event_id": id, "tenant_id": tenant, "session_id": "s1",
        "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload})
}

fn prompt(id: &str) -> Value {
    event(
        id,
        "acme",
        "UserPromptSubmitted",
        json!({"message_id": format!("m-{id}"), "text": format!("prompt {id}")}),
    )
}

/// A record as a direct producer writes it: the event in Avro single-object encoding, keyed by
/// its session.
fn record(backends: &Backends, value: Value) -> NewRecord {
    let event = Event::from_json(value, None).expect("a well-formed event");
    NewRecord {
        key: event.session_id.as_bytes().to_vec(),
        headers: vec![],
        value: backends.codec.avro().encode(&event).expect("encodes"),
        timestamp_ms: 0,
    }
}

/// The session's events on the log: (event id, seq), in seq order.
async fn on_log(log: &dyn EventLog, backends: &Backends) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (p, end) in log.end_offsets().await.unwrap().iter().enumerate() {
        let mut from = 0;
        while from < *end {
            let records = log.read(p as u32, from, 500).await.unwrap();
            let Some(last) = records.last() else { break };
            from = last.offset + 1;
            for r in &records {
                let e = backends.codec.decode(&r.value).await.unwrap();
                out.push((e.event_id, e.seq.unwrap()));
            }
        }
    }
    out.sort_by_key(|(_, seq)| *seq);
    out
}

fn reasons(dead: &[strata_log::LogRecord]) -> Vec<String> {
    dead.iter()
        .map(|r| {
            let (_, v) = r
                .headers
                .iter()
                .find(|(k, _)| k == dead_letter::REASON)
                .expect("a reason header");
            String::from_utf8_lossy(v).into_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_records_reach_the_log_through_ingest_and_refused_ones_the_dead_letters() {
    let Some(brokers) = brokers() else { return };
    let dir = tempfile::tempdir().unwrap();
    let log_url = format!("kafka://{brokers}/{}?partitions=2", unique("inbound"));
    let opts = BackendOpts {
        log_url: Some(log_url.clone()),
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "test").await.expect("backends");
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    // Over HTTP's path first: the session's seq 1.
    ingestor
        .ingest_json(&Publisher::Tenant("acme".into()), vec![prompt("http-1")])
        .await
        .expect("accepted");

    let inbound = open_inbound(&log_url, "acme", FileLogOptions::default())
        .await
        .expect("open the inbound topic");
    let mut garbage = record(&backends, prompt("x"));
    garbage.value = b"not avro at all".to_vec();
    let mut with_seq = prompt("claims-seq");
    with_seq["seq"] = json!(99);
    let cited = event(
        "cites-a-blob",
        "acme",
        "ToolCallFinished",
        json!({"tool_call_id": "c1", "output_ref": "artifact:sha256:00", "output_sha256": "00",
            "output_bytes": 10}),
    );
    let records = vec![
        record(&backends, prompt("direct-1")),
        record(&backends, prompt("direct-1")), // re-sent: once on the log
        garbage,
        record(
            &backends,
            event(
                "other-tenant",
                "globex",
                "UserPromptSubmitted",
                json!({"message_id": "m", "text": "not acme's"}),
            ),
        ),
        record(
            &backends,
            event(
                "forged-memory",
                "acme",
                "MemorySuperseded",
                json!({"memory_id": "m1", "superseded_by": "m2"}),
            ),
        ),
        record(&backends, with_seq),
        record(&backends, cited),
        record(&backends, prompt("direct-2")),
    ];
    inbound.append(records).await.expect("produce");

    let group = unique("relay");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let relaying = {
        let (inbound, group) = (inbound.clone(), group.clone());
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        tokio::spawn(async move {
            relay(&ingestor, inbound.as_ref(), "acme", &group, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let dead = inbound.read_dead_letters(0, 100).await.unwrap();
        if on_log(backends.log.as_ref(), &backends).await.len() >= 3 && dead.len() >= 5 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not relayed: {} dead letters",
            dead.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    let stats = relaying.await.unwrap().expect("the relay stops cleanly");
    assert_eq!(
        stats,
        InboundStats {
            records: 8,
            accepted: 2,
            duplicates: 1,
            dead_letters: 5,
        }
    );

    // Sequenced by ingest after what HTTP appended, each once.
    assert_eq!(
        on_log(backends.log.as_ref(), &backends).await,
        [
            ("http-1".to_owned(), 1),
            ("direct-1".to_owned(), 2),
            ("direct-2".to_owned(), 3)
        ]
    );
    let dead = reasons(&inbound.read_dead_letters(0, 100).await.unwrap());
    assert_eq!(dead.len(), 5, "{dead:?}");
    let expect = [
        "undecodable event",
        "belongs to tenant \"globex\"",
        "MemorySuperseded is written by Strata's services only",
        "claims seq 99",
        "payload.output_ref",
    ];
    // One record each, in the order ingest found them out (not the topic's).
    for want in expect {
        let saying = dead.iter().filter(|r| r.contains(want)).count();
        assert_eq!(saying, 1, "{want:?} in {dead:?}");
    }

    // The offsets were committed: a relay started again relays nothing twice.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let again = {
        let (inbound, group) = (inbound.clone(), group.clone());
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        tokio::spawn(async move {
            relay(&ingestor, inbound.as_ref(), "acme", &group, async {
                let _ = stopped.await;
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = stop.send(());
    let stats = again.await.unwrap().expect("stops cleanly");
    assert_eq!(stats.records, 0, "{stats:?}");
    assert_eq!(on_log(backends.log.as_ref(), &backends).await.len(), 3);
}
