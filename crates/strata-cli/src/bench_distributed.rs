//! `strata bench distributed`: the distributed backends against their raw baselines, in one run —
//! ingest through Strata vs a raw `rdkafka` producer sending the same records to the same broker;
//! the projector into PostgreSQL vs a raw `COPY` of the rows it wrote (and vs reading the topic
//! alone); assembly with Redis hot vs cold (the hot state has nothing: completeness is checked
//! against the log and PostgreSQL).
//!
//! Servers come from flags or the variables `scripts/services.sh env` prints
//! (`STRATA_TEST_KAFKA_BROKERS`, `STRATA_TEST_POSTGRES_URL`, `STRATA_TEST_REDIS_URL`). Every run
//! uses its own topics, databases (dropped afterwards) and tenant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sqlx::Connection as _;
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_runtime::Backends;

use crate::bench::{coding_session, ms, small_events_for, BATCH};

/// Where the servers are.
#[derive(Debug, clap::Args)]
pub(crate) struct Servers {
    /// Kafka bootstrap servers.
    #[arg(long, env = "STRATA_TEST_KAFKA_BROKERS")]
    kafka: String,
    /// PostgreSQL URL of a role that may create databases.
    #[arg(long, env = "STRATA_TEST_POSTGRES_URL")]
    postgres: String,
    /// Redis URL (database 0 is used hot; database 15 stands for a cold cache).
    #[arg(long, env = "STRATA_TEST_REDIS_URL")]
    redis: String,
    /// Small events for the ingest and projector figures.
    #[arg(long, default_value_t = 50_000)]
    events: u64,
    /// Assemblies timed per cache state.
    #[arg(long, default_value_t = 200)]
    assemblies: usize,
}

/// A database of this run, dropped when the run ends.
pub(crate) struct Database {
    admin: String,
    name: String,
    pub(crate) url: String,
}

impl Database {
    pub(crate) async fn create(admin: &str, name: String) -> anyhow::Result<Database> {
        let mut conn = sqlx::PgConnection::connect(admin).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        let base = &admin[..admin
            .rfind('/')
            .context("postgres url without a database")?];
        Ok(Database {
            admin: admin.to_owned(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    pub(crate) async fn drop(self) {
        if let Ok(mut conn) = sqlx::PgConnection::connect(&self.admin).await {
            let _ = sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut conn)
            .await;
        }
    }
}

pub(crate) async fn run(servers: Servers) -> anyhow::Result<()> {
    let run_id = format!(
        "{}x{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let tenant = format!("bench{run_id}");
    println!(
        "strata bench distributed: {} small events, {} assemblies per cache state",
        servers.events, servers.assemblies
    );
    println!("kafka {}, postgres and redis on loopback", servers.kafka);
    println!();
    println!("{:<58} {:>14} {:>10}", "measure", "result", "vs raw");

    let live = Database::create(&servers.postgres, format!("strata_bench_{run_id}")).await?;
    let copy = Database::create(&servers.postgres, format!("strata_bench_copy_{run_id}")).await?;
    let two = Database::create(&servers.postgres, format!("strata_bench_two_{run_id}")).await?;
    let result = measure(&servers, &tenant, &run_id, &live, &copy, &two).await;
    live.drop().await;
    copy.drop().await;
    two.drop().await;
    result
}

async fn measure(
    servers: &Servers,
    tenant: &str,
    run_id: &str,
    live: &Database,
    copy: &Database,
    two: &Database,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let blob_url = format!("file://{}", dir.path().join("blobs").display());
    let open = |topic: String, db: String, hot: String| {
        let dir = dir.path().to_path_buf();
        let blob_url = blob_url.clone();
        async move {
            let opts = strata_runtime::BackendOpts {
                log_url: Some(format!("kafka://{}/{topic}?partitions=8", servers.kafka)),
                db_url: Some(db),
                hot_url: Some(hot),
                blob_url: Some(blob_url),
                // Unsealed, as the figures this bench is read against were (`strata bench`
                // measures what sealing costs); a sealed run would need a master key.
                seal: Some(strata_runtime::SealMode::Off),
                ..strata_runtime::BackendOpts::embedded(dir)
            };
            Backends::open(&opts, "strata bench").await
        }
    };
    let hot_url = redis_db(&servers.redis, 0);
    let backends = open(format!("bench-{run_id}"), live.url.clone(), hot_url.clone()).await?;
    let events: Vec<Event> = small_events_for(tenant, servers.events).collect();

    // 1. Produce: raw rdkafka with the producer settings of the Kafka log, then Strata's ingest.
    let raw_topic = format!("bench-raw-{run_id}");
    let raw_log = strata_log::open(
        &format!("kafka://{}/{raw_topic}?partitions=8", servers.kafka),
        strata_log::FileLogOptions::default(),
    )
    .await?; // creates the topic the same way
    drop(raw_log);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &servers.kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "lz4")
        .set("linger.ms", "5")
        .create()?;
    let codec = &backends.codec;
    let encoded: Vec<Vec<u8>> = events
        .iter()
        .map(|e| codec.avro().encode(e))
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let records = events.iter().zip(&encoded).map(|(e, value)| {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: strata_ingest::headers::EVENT_TYPE,
                value: Some(e.event_type().as_str()),
            })
            .insert(Header {
                key: strata_ingest::headers::TENANT,
                value: Some(&e.tenant_id),
            });
        FutureRecord::to(&raw_topic)
            .partition(strata_log::partition_for(e.session_id.as_bytes(), 8) as i32)
            .key(e.session_id.as_str())
            .payload(value.as_slice())
            .headers(headers)
    });
    send_in_batches(&producer, records).await?;
    let raw_produce = rate(servers.events, started.elapsed());

    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let started = Instant::now();
    for chunk in events.chunks(BATCH) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await?;
    }
    let ingest = rate(servers.events, started.elapsed());
    row(
        &format!("produce: raw rdkafka (idempotent, acks=all, batches of {BATCH})"),
        raw_produce,
        None,
    );
    row(
        "produce: Strata ingest → Kafka (+ Redis, PostgreSQL checks)",
        ingest,
        Some(ingest / raw_produce),
    );
    let direct = produce_direct(servers, &backends, &producer, tenant, run_id).await?;
    row(
        "produce: straight to the inbound topic, relayed into the log",
        direct,
        Some(direct / ingest),
    );

    // 2. What the projector reads: the records through a consumer group, alone.
    let mut consumer = backends
        .log
        .subscribe(&format!("bench-read-{run_id}"))
        .await?;
    let total: u64 = backends.log.end_offsets().await?.iter().sum();
    let started = Instant::now();
    let mut read = 0u64;
    while read < total {
        let polled = consumer.poll(2000, Duration::from_millis(200)).await?;
        for r in &polled.records {
            std::hint::black_box(codec.decode(&r.value).await?);
        }
        read += polled.records.len() as u64;
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "reading the topic timed out"
        );
    }
    consumer.close().await?;
    row(
        "consume: Kafka → Avro decode, one group member",
        rate(read, started.elapsed()),
        None,
    );

    // Project into PostgreSQL, then COPY the rows it wrote into an empty twin.
    let started = Instant::now();
    let applied = strata_projector::catch_up(&backends).await?;
    let project = rate(applied, started.elapsed());
    let mut from = sqlx::PgConnection::connect(&live.url).await?;
    let twin = strata_store::postgres::PgStore::open(&copy.url).await?; // same schema
    drop(twin);
    let mut to = sqlx::PgConnection::connect(&copy.url).await?;
    let mut dumps = Vec::new();
    for table in [
        "events",
        "messages",
        "tool_calls",
        "sessions",
        "branches",
        "session_folds",
        "consumer_offsets",
    ] {
        let mut out = from
            .copy_out_raw(&format!("COPY {table} TO STDOUT (FORMAT binary)"))
            .await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = out.next().await {
            bytes.extend_from_slice(&chunk?);
        }
        drop(out);
        dumps.push((table, bytes));
    }
    let started = Instant::now();
    let mut tx = to.begin().await?;
    for (table, bytes) in &dumps {
        let mut sink = tx
            .copy_in_raw(&format!("COPY {table} FROM STDIN (FORMAT binary)"))
            .await?;
        sink.send(bytes.as_slice()).await?;
        sink.finish().await?;
    }
    tx.commit().await?;
    let raw_copy = rate(applied, started.elapsed());
    row(
        "project → PostgreSQL: raw COPY of the same rows (one tx)",
        raw_copy,
        None,
    );
    row(
        "project → PostgreSQL: Strata projector (batches of 2000)",
        project,
        Some(project / raw_copy),
    );

    // Two members of one group (in this process) into a fresh database, then one leaves.
    let (two_members, handover, held) =
        two_members(&backends, &two.url, run_id, dir.path()).await?;
    row(
        "project → PostgreSQL: two projector members in one group",
        rate(applied, two_members),
        Some(rate(applied, two_members) / project),
    );
    println!(
        "{:<58} {:>14}",
        format!("partitions move after a clean leave (other held {held})"),
        ms(handover)
    );

    // 3. Assembly of a 1,000-event session, Redis hot vs cold.
    let session = "bench-assembly";
    let mut coding = coding_session(session, 1_000);
    for e in &mut coding {
        e.tenant_id = tenant.to_owned();
    }
    for chunk in coding.chunks(BATCH) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await?;
    }
    strata_projector::catch_up(&backends).await?;
    let mut results = Vec::new();
    for (label, hot) in [("hot", hot_url), ("cold", redis_db(&servers.redis, 15))] {
        let backends = Backends::from_parts(
            backends.log.clone(),
            backends.store.clone(),
            strata_hot::open(&hot).await?,
            backends.blobs.clone(),
            dir.path().to_path_buf(),
        );
        let assembler = Assembler::new(
            backends,
            ingestor.clone(),
            AssemblerOptions {
                record_assemblies: false,
                ..AssemblerOptions::default()
            },
        );
        let request = ContextRequest {
            budget: Some(16_000),
            ..ContextRequest::default()
        };
        let mut times = Vec::with_capacity(servers.assemblies);
        let mut complete = true;
        for _ in 0..servers.assemblies {
            let started = Instant::now();
            let a = assembler.context(tenant, session, &request).await?;
            times.push(started.elapsed());
            complete &= a.assembly.projection_complete;
        }
        anyhow::ensure!(complete, "an assembly was not complete ({label})");
        times.sort();
        let p = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        results.push((label, p(0.5), p(0.99)));
    }
    for (label, p50, p99) in &results {
        println!(
            "{:<58} {:>14} {:>10}",
            format!("assembly, 1,000-event session, Redis {label}: p50 / p99"),
            format!("{} / {}", ms(*p50), ms(*p99)),
            if *label == "cold" {
                format!(
                    "{:.2}x",
                    results[0].1.as_secs_f64() / p50.as_secs_f64().max(1e-9)
                )
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// Projects the topic with two members of a new group (in this process, sharing its two cores)
/// into the database at `db_url`; returns the time to project it all (group formation
/// included), then stops one member (it finishes its batch, commits and leaves) and returns the
/// time until the other holds every partition, and what it held before.
/// A platform producing straight to Kafka (docs/direct-producers.md): the same number of events,
/// of sessions of their own, produced with rdkafka to the tenant's inbound topic in batches of
/// [`BATCH`], while ingest's relay takes them into the log (validation, seq, duplicate checks);
/// the clock stops when the log holds them all. Events per second, end to end into the log.
async fn produce_direct(
    servers: &Servers,
    backends: &Backends,
    producer: &FutureProducer,
    tenant: &str,
    run_id: &str,
) -> anyhow::Result<f64> {
    let log_url = format!("kafka://{}/bench-{run_id}?partitions=8", servers.kafka);
    let inbound =
        strata_ingest::inbound::open_inbound(&log_url, tenant, Default::default()).await?;
    let inbound_topic = format!("bench-{run_id}.inbound.{tenant}");
    let events: Vec<Event> = small_events_for(tenant, servers.events)
        .map(|mut e| {
            e.session_id = format!("direct-{}", e.session_id);
            e.event_id = format!("direct-{}", e.event_id);
            e
        })
        .collect();
    let encoded: Vec<Vec<u8>> = events
        .iter()
        .map(|e| backends.codec.avro().encode(e))
        .collect::<Result<_, _>>()?;
    let in_log = |ends: Vec<u64>| ends.iter().sum::<u64>();
    let before = in_log(backends.log.end_offsets().await?);
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let group = format!("bench-relay-{run_id}");
    let started = Instant::now();
    let relaying =
        strata_ingest::inbound::relay(&ingestor, inbound.as_ref(), tenant, &group, async {
            let _ = stopped.await;
        });
    let producing = async {
        let records = events.iter().zip(&encoded).map(|(e, value)| {
            FutureRecord::to(&inbound_topic)
                .key(e.session_id.as_str())
                .payload(value.as_slice())
        });
        send_in_batches(producer, records).await?;
        let target = before + servers.events;
        while in_log(backends.log.end_offsets().await?) < target {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(600),
                "the relay did not take the direct events within 600 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let elapsed = started.elapsed();
        let _ = stop.send(());
        anyhow::Ok(elapsed)
    };
    let (stats, elapsed) = tokio::join!(relaying, producing);
    let (stats, elapsed) = (stats?, elapsed?);
    anyhow::ensure!(
        stats.accepted == servers.events && stats.dead_letters == 0,
        "the relay took {} of {} direct events ({} set aside)",
        stats.accepted,
        servers.events,
        stats.dead_letters
    );
    Ok(rate(servers.events, elapsed))
}

/// Sends `records` with `producer` in batches of [`BATCH`], each batch delivered before the next
/// is sent (as a platform that waits for its acknowledgements does).
async fn send_in_batches<'a>(
    producer: &FutureProducer,
    records: impl Iterator<Item = FutureRecord<'a, str, [u8]>>,
) -> anyhow::Result<()> {
    let mut records = records.peekable();
    while records.peek().is_some() {
        let mut deliveries = Vec::with_capacity(BATCH);
        for record in records.by_ref().take(BATCH) {
            deliveries.push(
                producer
                    .send_result(record)
                    .map_err(|(e, _)| anyhow::anyhow!("enqueue: {e}"))?,
            );
        }
        for d in deliveries {
            d.await?.map_err(|(e, _)| anyhow::anyhow!("deliver: {e}"))?;
        }
    }
    Ok(())
}

async fn two_members(
    backends: &Backends,
    db_url: &str,
    run_id: &str,
    dir: &std::path::Path,
) -> anyhow::Result<(Duration, Duration, String)> {
    let store: Arc<dyn strata_store::ProjectionStore> =
        Arc::new(strata_store::postgres::PgStore::open(db_url).await?);
    let backends = Backends::from_parts(
        backends.log.clone(),
        store,
        Arc::new(strata_hot::MemoryHotState::default()),
        backends.blobs.clone(),
        dir.to_path_buf(),
    );
    let options = strata_projector::ProjectorOptions {
        group: format!("bench-two-{run_id}"),
        ..strata_projector::ProjectorOptions::default()
    };
    let partitions = backends.log.partition_count() as usize;
    let started = Instant::now();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let first = strata_projector::Projector::start(backends.clone(), options.clone()).await?;
    let first = tokio::spawn(first.run(async {
        let _ = stopped.await;
    }));
    let mut second = strata_projector::Projector::start(backends.clone(), options.clone()).await?;
    loop {
        second.step().await?;
        let behind =
            strata_projector::wait_for_projector(&backends, &options.group, Duration::ZERO).await?;
        if behind == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "two members did not project the topic in 10 minutes"
        );
    }
    let projected = started.elapsed();
    // The group may not have split yet when the work is small: wait for it, so the handover
    // below moves partitions for real.
    let deadline = Instant::now() + Duration::from_secs(60);
    while second.positions().len() >= partitions || second.positions().is_empty() {
        second.step().await?;
        anyhow::ensure!(
            Instant::now() < deadline,
            "the group never split its {partitions} partitions between the two members"
        );
    }
    let held = second.positions().len();
    let _ = stop.send(());
    first.await??;
    let left = Instant::now();
    while second.positions().len() < partitions {
        second.step().await?;
        anyhow::ensure!(
            left.elapsed() < Duration::from_secs(120),
            "the remaining member never got every partition"
        );
    }
    Ok((projected, left.elapsed(), format!("{held} of {partitions}")))
}

fn redis_db(url: &str, db: u32) -> String {
    let base = url.trim_end_matches('/');
    let base = match base.rsplit_once('/') {
        Some((head, tail)) if tail.chars().all(|c| c.is_ascii_digit()) && head.contains("//") => {
            head.to_owned()
        }
        _ => base.to_owned(),
    };
    format!("{base}/{db}")
}

pub(crate) fn rate(n: u64, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn row(what: &str, per_sec: f64, ratio: Option<f64>) {
    println!(
        "{:<58} {:>10.0} ev/s {:>10}",
        what,
        per_sec,
        ratio.map(|r| format!("{r:.2}x")).unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn redis_db_replaces_or_adds_the_database() {
        assert_eq!(
            super::redis_db("redis://127.0.0.1:6379/", 15),
            "redis://127.0.0.1:6379/15"
        );
        assert_eq!(
            super::redis_db("redis://127.0.0.1:6379/0", 15),
            "redis://127.0.0.1:6379/15"
        );
        assert_eq!(
            super::redis_db("redis://127.0.0.1:6379", 3),
            "redis://127.0.0.1:6379/3"
        );
    }
}
