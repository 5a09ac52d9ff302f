//! `strata bench replay`: rebuild and replay figures from one run on a scratch data directory.

use std::time::Instant;

use strata_core::assembly::{AssemblyPolicy, POLICY_VERSION_TIGHT};
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_replay::rebuild::{self, RebuildOptions};
use strata_replay::replay::{ReplayOptions, ReplaySource, Selection};
use strata_runtime::{BackendOpts, Backends, SealMode};

/// Sessions replayed by the bench.
const REPLAY_SESSIONS: usize = 10;

/// The servers of the Kafka figures; without them those are skipped (said in the output).
#[derive(Debug, clap::Args)]
pub(crate) struct KafkaServers {
    /// Kafka bootstrap servers.
    #[arg(long, env = "STRATA_TEST_KAFKA_BROKERS")]
    kafka: Option<String>,
    /// PostgreSQL URL of a role that may create databases.
    #[arg(long, env = "STRATA_TEST_POSTGRES_URL")]
    postgres: Option<String>,
}

pub(crate) async fn run(
    events: u64,
    sessions: usize,
    servers: &KafkaServers,
) -> anyhow::Result<()> {
    let sessions = sessions.max(1);
    let per = (events / sessions as u64).max(10);
    println!(
        "strata bench replay: {sessions} sessions of ~{per} events (coding agent: prompts, model \
         responses with tool calls, outputs, file writes, a fork)"
    );
    println!(
        "machine: {} cores; release build recommended",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    let dir = tempfile::tempdir()?;
    // Unsealed throughout, as the figures this bench is read against were (`strata bench`
    // measures what sealing costs).
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        seal: Some(SealMode::Off),
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "strata bench replay").await?;
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let all = strata_replay::workload::sessions("bench", sessions, per);
    let n = all.len() as u64;
    for chunk in all.chunks(1000) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await?;
    }
    println!();
    println!("{:<60} {:>14}", "measure", "result");
    let started = Instant::now();
    strata_projector::catch_up(&backends).await?;
    println!(
        "{:<60} {:>10.0} ev/s",
        format!("live projector: file log → SQLite ({n} events)"),
        n as f64 / started.elapsed().as_secs_f64()
    );

    let report = rebuild::rebuild(
        dir.path(),
        backends.log.as_ref(),
        backends.store.as_ref(),
        &RebuildOptions::default(),
        None,
    )
    .await?;
    print_rebuild("rebuild: file log → new SQLite set (fold + write)", &report);
    let v = report.verification.unwrap_or_default();
    println!(
        "{:<60} {:>11.2} s",
        format!(
            "rebuild verification ({} tables, {} sessions)",
            v.tables.len(),
            v.sessions
        ),
        report.verify_secs
    );

    match (&servers.kafka, &servers.postgres) {
        (Some(kafka), Some(postgres)) => from_kafka(kafka, postgres, &all).await?,
        _ => println!(
            "{:<60} {:>14}",
            "rebuild from Kafka", "skipped: no --kafka/--postgres"
        ),
    }

    // Replay assembles at every model call point (about one event in three): a subset of the
    // sessions keeps the run short.
    let replayed: Vec<String> = (0..sessions.min(REPLAY_SESSIONS))
        .map(|s| format!("sess-{s:04}"))
        .collect();
    for policy in [None, AssemblyPolicy::by_version(POLICY_VERSION_TIGHT)] {
        let r = strata_replay::replay(
            ReplaySource::Log(backends.log.as_ref()),
            &ReplayOptions {
                selection: Selection {
                    sessions: replayed.clone(),
                    ..Selection::default()
                },
                policy,
                budget: Some(8000),
                ..ReplayOptions::default()
            },
            None,
        )
        .await?;
        println!(
            "{:<60} {:>10.0} ev/s",
            format!(
                "replay of {} sessions, {} ({} call points)",
                r.sessions,
                match policy {
                    Some(p) => format!("recorded vs {}", p.version),
                    None => "recorded policy only".into(),
                },
                r.call_points
            ),
            r.events_per_sec
        );
        if let Some(t) = r.candidate_tokens {
            println!(
                "{:<60} {:>14}",
                "  tokens: recorded → candidate",
                format!("{} → {}", r.recorded_tokens, t)
            );
        }
    }
    Ok(())
}

/// The same events on a fresh Kafka topic: the live projector into PostgreSQL, then rebuilds
/// from the topic into a new PostgreSQL schema and into a new embedded SQLite set.
async fn from_kafka(
    brokers: &str,
    postgres: &str,
    events: &[strata_core::Event],
) -> anyhow::Result<()> {
    let run_id = format!(
        "{}x{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let n = events.len() as u64;
    let dir = tempfile::tempdir()?;
    let database = crate::bench_distributed::Database::create(
        postgres,
        format!("strata_bench_rebuild_{run_id}"),
    )
    .await?;
    let log_url = format!("kafka://{brokers}/strata-bench-rebuild-{run_id}?partitions=4");
    let result = async {
        let opts = BackendOpts {
            log_url: Some(log_url.clone()),
            db_url: Some(database.url.clone()),
            blob_url: Some(format!("file://{}", dir.path().join("blobs").display())),
            seal: Some(SealMode::Off),
            ..BackendOpts::embedded(dir.path())
        };
        let backends = Backends::open(&opts, "strata bench replay").await?;
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        let started = Instant::now();
        for chunk in events.chunks(1000) {
            ingestor
                .ingest(
                    &Publisher::Operator,
                    chunk.iter().cloned().map(|e| (e, None)).collect(),
                )
                .await?;
        }
        println!(
            "{:<60} {:>10.0} ev/s",
            format!("ingest onto Kafka ({n} events, 4 partitions)"),
            n as f64 / started.elapsed().as_secs_f64()
        );
        let started = Instant::now();
        strata_projector::catch_up(&backends).await?;
        println!(
            "{:<60} {:>10.0} ev/s",
            "live projector: Kafka → PostgreSQL",
            n as f64 / started.elapsed().as_secs_f64()
        );
        let report = rebuild::rebuild_postgres(
            &database.url,
            backends.log.as_ref(),
            backends.store.as_ref(),
            &RebuildOptions::default(),
            None,
        )
        .await?;
        print_rebuild(
            "rebuild: Kafka → new PostgreSQL schema (fold + write)",
            &report,
        );
        println!(
            "{:<60} {:>14}",
            "  verification / live projector held for the switch (s)",
            format!("{:.2} / {:.3}", report.verify_secs, report.switch_hold_secs)
        );

        // Kafka into the embedded default: its own live set first, in a data directory.
        let sqlite_dir = tempfile::tempdir()?;
        let opts = BackendOpts {
            log_url: Some(log_url.clone()),
            blob_url: Some(format!("file://{}", dir.path().join("blobs").display())),
            seal: Some(SealMode::Off),
            ..BackendOpts::embedded(sqlite_dir.path())
        };
        let embedded = Backends::open(&opts, "strata bench replay").await?;
        strata_projector::catch_up(&embedded).await?;
        let report = rebuild::rebuild(
            sqlite_dir.path(),
            embedded.log.as_ref(),
            embedded.store.as_ref(),
            &RebuildOptions::default(),
            None,
        )
        .await?;
        print_rebuild("rebuild: Kafka → new SQLite set (fold + write)", &report);
        anyhow::Ok(())
    }
    .await;
    database.drop().await;
    result
}

/// A rebuild's rate and where its time went.
fn print_rebuild(what: &str, report: &rebuild::RebuildReport) {
    println!("{:<60} {:>10.0} ev/s", what, report.events_per_sec);
    println!(
        "{:<60} {:>14}",
        "  split: read+decode / fold / wait for writes (s)",
        format!(
            "{:.2} / {:.2} / {:.2}",
            report.read_secs, report.apply_secs, report.write_wait_secs
        )
    );
}
