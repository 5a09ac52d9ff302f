//! `rebuild` from Kafka into PostgreSQL while the live projector keeps projecting new events:
//! the new schema is verified, the switch holds the projector's batches and sends the next ones
//! to the new set, and a second rebuild finds the switched set equal to a fresh fold of the whole
//! log — nothing lost or applied twice across the switch.
//!
//! Needs `STRATA_TEST_KAFKA_BROKERS` and `STRATA_TEST_POSTGRES_URL` (`scripts/services.sh env`);
//! under CI a missing server is a failure.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, Executor, PgConnection};
use strata_blob::BlobStore;
use strata_log::FileLogOptions;
use strata_projector::{Projector, ProjectorOptions};
use strata_replay::rebuild::{self, RebuildOptions};
use strata_runtime::Backends;
use strata_store::postgres::generations::PgGenerations;
use strata_store::postgres::PgStore;
use strata_store::ProjectionStore;

fn required(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI: a server is missing (scripts/services.sh start)")
        }
        _ => {
            eprintln!("skipping: {var} is not set");
            None
        }
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_from_kafka_into_postgres_switches_under_a_running_projector() {
    let (Some(brokers), Some(admin)) = (
        required("STRATA_TEST_KAFKA_BROKERS"),
        required("STRATA_TEST_POSTGRES_URL"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log_url = format!("kafka://{brokers}/{}?partitions=4", unique("rebuild"));
    let group = unique("rebuild_projector");
    let database = unique("strata_rebuild");
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    conn.execute(format!("CREATE DATABASE {database}").as_str())
        .await
        .unwrap();
    let db_url = format!("{}/{database}", &admin[..admin.rfind('/').unwrap()]);

    let log = strata_log::open(&log_url, FileLogOptions::default())
        .await
        .unwrap();
    let live: Arc<dyn ProjectionStore> = Arc::new(PgStore::open(&db_url).await.unwrap());
    let backends = Backends::from_parts(
        log.clone(),
        live.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        BlobStore::open(&format!("file://{}", dir.path().join("blobs").display())).unwrap(),
        dir.path().to_path_buf(),
    );
    let first = strata_replay::workload::sessions("acme", 8, 120);
    let later = strata_replay::workload::sessions("globex", 4, 120);
    let total = (first.len() + later.len()) as u64;
    common::ingest(&backends, first).await;

    // The live projector, running throughout.
    let projector = Projector::start(
        backends.clone(),
        ProjectorOptions {
            group: group.clone(),
            batch_size: 100,
            poll_timeout: Duration::from_millis(20),
        },
    )
    .await
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(projector.run(async {
        let _ = stopped.await;
    }));
    let behind = strata_projector::wait_for_projector(&backends, &group, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(behind, 0, "the live projector did not catch up");

    // New events keep arriving during the rebuild.
    let writer = {
        let backends = backends.clone();
        tokio::spawn(async move {
            for chunk in later.chunks(40) {
                common::ingest(&backends, chunk.to_vec()).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let options = RebuildOptions {
        group: group.clone(),
        batch_events: 300,
        verify_timeout: Duration::from_secs(60),
        ..RebuildOptions::default()
    };
    let report = rebuild::rebuild_postgres(&db_url, log.as_ref(), live.as_ref(), &options, None)
        .await
        .unwrap();
    assert!(report.switched, "{report:?}");
    assert_eq!(
        (report.file.as_str(), report.previous.as_str()),
        ("strata_gen_2", "public")
    );
    assert!(report.verification.as_ref().unwrap().ok());
    assert!(report.events >= 8 * 120, "{report:?}");
    let generations = PgGenerations::connect(&db_url).await.unwrap();
    assert_eq!(generations.current().await.unwrap(), "strata_gen_2");

    // The projector goes on into the new set; once every event is there, a fresh fold of the
    // whole log equals it.
    writer.await.unwrap();
    let behind = strata_projector::wait_for_projector(&backends, &group, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(behind, 0, "the live projector stopped after the switch");
    let sessions = |tenant: &'static str| {
        let live = live.clone();
        async move {
            live.sessions(tenant)
                .await
                .unwrap()
                .iter()
                .map(|s| s.event_count)
                .sum::<u64>()
        }
    };
    assert_eq!(sessions("acme").await + sessions("globex").await, total);
    let check = rebuild::rebuild_postgres(
        &db_url,
        log.as_ref(),
        live.as_ref(),
        &RebuildOptions {
            switch: false,
            ..options.clone()
        },
        None,
    )
    .await
    .unwrap();
    let v = check.verification.unwrap();
    assert!(v.ok() && !check.switched, "{v:?}");
    assert_eq!(v.sessions, 12);
    assert_eq!(v.tables["events"], total);
    let listed = generations.list().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|g| (g.schema.as_str(), g.current, g.in_progress))
            .collect::<Vec<_>>(),
        [
            ("public", false, false),
            ("strata_gen_2", true, false),
            ("strata_gen_3", false, true)
        ]
    );

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    drop((live, backends, generations));
    conn.execute(format!("DROP DATABASE {database} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
