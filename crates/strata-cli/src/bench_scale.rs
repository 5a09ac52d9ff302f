//! `strata bench scale`: how the projector scales out on Kafka + PostgreSQL, in one run (issue 6).
//!
//! 1. Synthetic coding-agent sessions are ingested onto a fresh topic.
//! 2. One `strata-projector` process projects the topic from offset 0 into a fresh database,
//!    then two processes in one consumer group do the same into another: events/s for each,
//!    from the start of the processes until the group's offsets in the store reach the log's end.
//! 3. With the two members caught up, one dies — first a clean stop (SIGTERM: it leaves the
//!    group), then, after a new member has joined, an abrupt one (SIGKILL: the broker notices
//!    after the session timeout). The time is taken from the signal until the group's offsets in
//!    the store cover a fresh burst of events ingested onto the dead member's partitions, which
//!    only the survivor can project.
//!
//! The projectors are the real `strata-projector` binary (beside `strata`, or `--projector-bin`),
//! each with its own admin port; which partitions a member holds is read from its `/metrics`
//! (the consumer-lag gauges). Servers come from flags or the variables `scripts/services.sh env`
//! prints; the topics and databases of a run are its own and are deleted afterwards.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use serde_json::json;
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_runtime::Backends;
use strata_store::postgres::PgStore;
use strata_store::ProjectionStore;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::bench_distributed::{rate, Database};

/// Longest wait for the projectors to reach the end of the log.
const PROJECT_WITHIN: Duration = Duration::from_secs(600);
/// Longest wait for two members to split the partitions between them and catch up.
const SPLIT_WITHIN: Duration = Duration::from_secs(90);

/// Servers and workload of `strata bench scale`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScaleArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "STRATA_TEST_KAFKA_BROKERS")]
    kafka: String,
    /// PostgreSQL URL of a role that may create databases.
    #[arg(long, env = "STRATA_TEST_POSTGRES_URL")]
    postgres: String,
    /// Events ingested before the throughput runs (about; sessions end on a whole step).
    #[arg(long, default_value_t = 50_000)]
    events: u64,
    /// Sessions they are spread over (each session is keyed to one partition).
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Most records per projector transaction (`STRATA_PROJECTOR_BATCH_SIZE`).
    #[arg(long, default_value_t = 2000)]
    batch_size: usize,
    /// Events ingested onto the dead member's partitions after it died.
    #[arg(long, default_value_t = 500)]
    burst: u64,
    /// Session timeout of the projectors' consumers (`session_timeout_ms=` of the Kafka URL):
    /// how long a killed member keeps its partitions.
    #[arg(long, default_value_t = 6000)]
    session_timeout_ms: u32,
    /// How long a death may take to move the partitions before the bench reports that they did
    /// not move.
    #[arg(long, default_value_t = 60)]
    move_within_secs: u64,
    /// Clean stops measured (each after a new member joined and the group split again).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The `strata-projector` binary [default: the one beside this `strata`].
    #[arg(long, env = "STRATA_PROJECTOR_BIN")]
    projector_bin: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: ScaleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.partitions >= 2,
        "two members need at least two partitions"
    );
    anyhow::ensure!(args.sessions > 0 && args.events > 0, "nothing to project");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    let bin = projector_bin(args.projector_bin.clone())?;
    let run_id = format!(
        "{}x{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let topic = format!("bench-scale-{run_id}");
    let load_before = load_average();
    eprintln!("strata bench scale: projectors from {}", bin.display());

    let one = Database::create(&args.postgres, format!("strata_scale_one_{run_id}")).await?;
    let two = match Database::create(&args.postgres, format!("strata_scale_two_{run_id}")).await {
        Ok(d) => d,
        Err(e) => {
            one.drop().await;
            return Err(e);
        }
    };
    let result = measure(&args, &bin, &run_id, &topic, &one.url, &two.url).await;
    one.drop().await;
    two.drop().await;
    if let Err(e) = delete_topics(
        &args.kafka,
        &[topic.clone(), format!("{topic}.dead-letter")],
    )
    .await
    {
        eprintln!("warning: could not delete the topics of this run ({topic}): {e:#}");
    }
    let mut report = result?;
    report["setup"]["projector"] = json!(bin.display().to_string());
    report["setup"]["topic"] = json!(topic);
    report["setup"]["load_average_before"] = json!(load_before);
    report["setup"]["load_average_after"] = json!(load_average());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Everything between creating the databases and deleting them; returns the report.
async fn measure(
    args: &ScaleArgs,
    bin: &Path,
    run_id: &str,
    topic: &str,
    one_url: &str,
    two_url: &str,
) -> anyhow::Result<serde_json::Value> {
    let dir = tempfile::tempdir()?;
    let log_url = format!(
        "kafka://{}/{topic}?partitions={}&session_timeout_ms={}",
        args.kafka, args.partitions, args.session_timeout_ms
    );
    let log = strata_log::open(&log_url, strata_log::FileLogOptions::default()).await?;
    anyhow::ensure!(
        log.partition_count() == args.partitions,
        "topic {topic} has {} partitions, not {}",
        log.partition_count(),
        args.partitions
    );
    // Opening the stores creates their schemas before any projector process starts.
    let store_one = Arc::new(PgStore::open(one_url).await?);
    let store_two = Arc::new(PgStore::open(two_url).await?);
    let group_one = format!("bench-scale-one-{run_id}");
    let group_two = format!("bench-scale-two-{run_id}");
    let blob_url = format!("file://{}", dir.path().join("blobs").display());
    // Ingest as in production: it reads the projections of the group that projects them.
    let backends = Backends::from_parts(
        log.clone(),
        store_two.clone(),
        Arc::new(strata_hot::MemoryHotState::default()),
        strata_blob::BlobStore::open(&blob_url)?,
        dir.path().to_path_buf(),
    );
    let ingestor = Ingestor::new(
        backends.clone(),
        IngestOptions {
            projector_group: group_two.clone(),
            ..IngestOptions::default()
        },
    );
    let tenant = format!("scale{run_id}");
    let per = (args.events / args.sessions as u64).max(10);
    let events = strata_replay::workload::sessions(&tenant, args.sessions, per);
    eprintln!(
        "ingesting {} events of {} sessions onto {topic} ({} partitions)",
        events.len(),
        args.sessions,
        args.partitions
    );
    let started = Instant::now();
    ingest(&ingestor, events).await?;
    let ingested_in = started.elapsed();
    let end = log.end_offsets().await?;
    let total: u64 = end.iter().sum();

    let spawner = Spawner {
        bin: bin.to_path_buf(),
        dir: dir.path().to_path_buf(),
        log_url: log_url.clone(),
        blob_url,
        batch_size: args.batch_size,
    };

    // One member.
    eprintln!("one projector process …");
    let started = Instant::now();
    let mut a = spawner.spawn("one-a", &group_one, one_url)?;
    let single =
        until_projected(store_one.as_ref(), &group_one, &end, started, &mut [&mut a]).await?;
    a.stop(Duration::from_secs(30)).await;
    drop(a);

    // Two members of one group, started together.
    eprintln!("two projector processes in one group …");
    let started = Instant::now();
    let mut a = spawner.spawn("two-a", &group_two, two_url)?;
    let mut b = spawner.spawn("two-b", &group_two, two_url)?;
    let double = until_projected(
        store_two.as_ref(),
        &group_two,
        &end,
        started,
        &mut [&mut a, &mut b],
    )
    .await?;

    let mover = Mover {
        log: log.as_ref(),
        store: store_two.as_ref(),
        group: &group_two,
        ingestor: &ingestor,
        tenant: &tenant,
        partitions: args.partitions,
        burst: args.burst,
        within: Duration::from_secs(args.move_within_secs),
    };

    // Clean stops: B leaves the group; then a new B joins, the group splits again, and so on.
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        eprintln!(
            "partition move after SIGTERM ({} of {}) …",
            round + 1,
            args.rounds
        );
        if round > 0 {
            b = spawner.spawn(&format!("two-b{round}"), &group_two, two_url)?;
        }
        rounds.push(match wait_split(&mover, &a, &b).await? {
            Some(held) => {
                mover
                    .kill(&mut b, Death::Graceful, &a, held, &format!("term{round}"))
                    .await?
            }
            None => not_split(&a, &b).await,
        });
    }
    drop(b);
    let graceful = summary(rounds);

    // An abrupt death: a new member joins, the group splits again, and the newcomer is killed.
    eprintln!("partition move after SIGKILL …");
    let mut c = spawner.spawn("two-c", &group_two, two_url)?;
    let mut abrupt = match wait_split(&mover, &a, &c).await? {
        Some(held) => mover.kill(&mut c, Death::Abrupt, &a, held, "kill").await?,
        None => not_split(&a, &c).await,
    };
    drop(c);
    a.stop(Duration::from_secs(30)).await;
    drop(a);

    let mut per_partition = Vec::new();
    for p in 0..args.partitions {
        per_partition.push(end[p as usize]);
    }
    let ratio = double.events_per_sec(total) / single.events_per_sec(total);
    abrupt["signal"] = json!("SIGKILL");
    abrupt["session_timeout_ms"] = json!(args.session_timeout_ms);
    Ok(json!({
        "setup": {
            "events": total,
            "sessions": args.sessions,
            "partitions": args.partitions,
            "events_per_partition": per_partition,
            "batch_size": args.batch_size,
            "burst_events": args.burst,
            "session_timeout_ms": args.session_timeout_ms,
            "move_within_secs": args.move_within_secs,
            "ingest_secs": ingested_in.as_secs_f64(),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        },
        "one_instance": single.to_json(total),
        "two_instances": double.to_json(total),
        "two_to_one": ratio,
        "move_graceful": graceful,
        "move_abrupt": abrupt,
    }))
}

async fn ingest(ingestor: &Ingestor, events: Vec<Event>) -> anyhow::Result<()> {
    for chunk in events.chunks(crate::bench::BATCH) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await?;
    }
    Ok(())
}

/// How long a throughput run took.
#[derive(Debug)]
struct Run {
    /// From the start of the processes until the offsets reached the end.
    took: Duration,
    /// From the start until the first batch was committed (process start and group join).
    first_commit: Duration,
    /// Records the group had committed when the first commit was seen.
    at_first_commit: u64,
}

impl Run {
    fn events_per_sec(&self, total: u64) -> f64 {
        rate(total, self.took)
    }

    /// The rate once projecting had begun (start-up and group join left out).
    fn after_first_commit(&self, total: u64) -> f64 {
        rate(
            total.saturating_sub(self.at_first_commit),
            self.took.saturating_sub(self.first_commit),
        )
    }

    fn to_json(&self, total: u64) -> serde_json::Value {
        json!({
            "secs": self.took.as_secs_f64(),
            "events_per_sec": self.events_per_sec(total),
            "first_commit_secs": self.first_commit.as_secs_f64(),
            "events_per_sec_after_first_commit": self.after_first_commit(total),
        })
    }
}

/// Records `group` still has to project to reach `end`, by the offsets in `store`; and how many
/// it has committed.
async fn behind(
    store: &dyn ProjectionStore,
    group: &str,
    end: &[u64],
) -> anyhow::Result<(u64, u64)> {
    let at = store.offsets(group).await?;
    let mut behind = 0;
    let mut done = 0;
    for (p, e) in end.iter().enumerate() {
        let o = at.get(&(p as u32)).copied().unwrap_or(0).min(*e);
        behind += e - o;
        done += o;
    }
    Ok((behind, done))
}

/// Waits until `group`'s offsets in `store` reach `end`.
async fn until_projected(
    store: &dyn ProjectionStore,
    group: &str,
    end: &[u64],
    started: Instant,
    members: &mut [&mut Member],
) -> anyhow::Result<Run> {
    let mut first = None;
    loop {
        let (left, done) = behind(store, group, end).await?;
        if done > 0 && first.is_none() {
            first = Some((started.elapsed(), done));
        }
        if left == 0 {
            let (first_commit, at_first_commit) = first.unwrap_or((started.elapsed(), done));
            return Ok(Run {
                took: started.elapsed(),
                first_commit,
                at_first_commit,
            });
        }
        for m in members.iter_mut() {
            if let Some(status) = m.child.try_wait()? {
                anyhow::bail!(
                    "projector {} exited ({status}) before the end of the log; its log:\n{}",
                    m.name,
                    m.log_tail()
                );
            }
        }
        if started.elapsed() > PROJECT_WITHIN {
            let tails: Vec<String> = members
                .iter()
                .map(|m| format!("{}:\n{}", m.name, m.log_tail()))
                .collect();
            anyhow::bail!(
                "the projectors did not reach the end of the log within {} s ({left} records \
                 behind); their logs:\n{}",
                PROJECT_WITHIN.as_secs(),
                tails.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts `strata-projector` processes.
#[derive(Debug)]
struct Spawner {
    bin: PathBuf,
    dir: PathBuf,
    log_url: String,
    blob_url: String,
    batch_size: usize,
}

impl Spawner {
    fn spawn(&self, name: &str, group: &str, db_url: &str) -> anyhow::Result<Member> {
        let admin_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log_path = self.dir.join(format!("{name}.log"));
        let child = Command::new(&self.bin)
            .env("STRATA_DATA_DIR", self.dir.join(name))
            .env("STRATA_LOG", &self.log_url)
            .env("STRATA_DB", db_url)
            // Unsealed, as the figures this bench is read against were.
            .env("STRATA_SEAL", "off")
            .env("STRATA_HOT", "memory://")
            .env("STRATA_BLOB", &self.blob_url)
            .env("STRATA_ADMIN_LISTEN", format!("127.0.0.1:{admin_port}"))
            .env("STRATA_PROJECTOR_BATCH_SIZE", self.batch_size.to_string())
            .env("STRATA_PROJECTOR_GROUP", group)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        Ok(Member {
            name: name.to_owned(),
            child,
            admin_port,
            group: group.to_owned(),
            log_path,
        })
    }
}

/// One `strata-projector` process; killed when dropped.
#[derive(Debug)]
struct Member {
    name: String,
    child: Child,
    admin_port: u16,
    group: String,
    log_path: PathBuf,
}

impl Member {
    /// The partitions this member holds, by the consumer-lag gauges of its `/metrics` (refreshed
    /// about once a second).
    async fn held(&self) -> BTreeSet<u32> {
        let Ok(text) = self.metrics().await else {
            return BTreeSet::new();
        };
        let prefix = format!(
            "strata_consumer_lag_records{{group=\"{}\",partition=\"",
            self.group
        );
        text.lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(&prefix)?;
                rest.split_once('"')?.0.parse().ok()
            })
            .collect()
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        let fetch = async {
            let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", self.admin_port)).await?;
            conn.write_all(
                b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            )
            .await?;
            let mut text = String::new();
            conn.read_to_string(&mut text).await?;
            anyhow::Ok(text)
        };
        tokio::time::timeout(Duration::from_secs(5), fetch).await?
    }

    fn signal_term(&self) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM {} failed", self.child.id());
        Ok(())
    }

    async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// SIGTERM, then SIGKILL when it has not exited `within`.
    async fn stop(&mut self, within: Duration) {
        if self.signal_term().is_ok() && self.wait_exit(within).await.is_some() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a member dies.
#[derive(Debug, Clone, Copy)]
enum Death {
    /// SIGTERM: it finishes, commits and leaves the group.
    Graceful,
    /// SIGKILL: it says nothing; the broker drops it after the session timeout.
    Abrupt,
}

/// What a partition move needs.
struct Mover<'a> {
    log: &'a dyn strata_log::EventLog,
    store: &'a dyn ProjectionStore,
    group: &'a str,
    ingestor: &'a Ingestor,
    tenant: &'a str,
    partitions: u32,
    burst: u64,
    within: Duration,
}

/// Waits until `a` and `b` hold disjoint, non-empty sets of partitions covering them all, and the
/// group is at the end of the log; returns what `b` holds, or `None` after [`SPLIT_WITHIN`].
async fn wait_split(
    m: &Mover<'_>,
    a: &Member,
    b: &Member,
) -> anyhow::Result<Option<BTreeSet<u32>>> {
    let started = Instant::now();
    while started.elapsed() < SPLIT_WITHIN {
        let (pa, pb) = (a.held().await, b.held().await);
        if !pa.is_empty()
            && !pb.is_empty()
            && pa.is_disjoint(&pb)
            && pa.union(&pb).count() == m.partitions as usize
        {
            let end = m.log.end_offsets().await?;
            if behind(m.store, m.group, &end).await?.0 == 0 {
                return Ok(Some(pb));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(None)
}

async fn not_split(a: &Member, b: &Member) -> serde_json::Value {
    json!({
        "outcome": format!(
            "not measured: the two members did not split the partitions within {} s \
             (held {:?} and {:?})",
            SPLIT_WITHIN.as_secs(),
            a.held().await.iter().collect::<Vec<_>>(),
            b.held().await.iter().collect::<Vec<_>>()
        ),
        "moved_ms": null,
    })
}

impl Mover<'_> {
    /// Kills `victim`, which holds `held`, ingests a burst onto those partitions and waits until
    /// the group has projected it (only `survivor` can).
    async fn kill(
        &self,
        victim: &mut Member,
        death: Death,
        survivor: &Member,
        held: BTreeSet<u32>,
        tag: &str,
    ) -> anyhow::Result<serde_json::Value> {
        let burst = burst_events(self.tenant, &held, self.partitions, self.burst, tag);
        let burst_len = burst.len();
        let died = Instant::now();
        match death {
            Death::Graceful => victim.signal_term()?,
            Death::Abrupt => victim.child.kill()?,
        }
        let status = victim.wait_exit(Duration::from_secs(30)).await;
        let exited = died.elapsed();
        anyhow::ensure!(
            status.is_some(),
            "{} did not exit within 30 s of the signal",
            victim.name
        );
        // After the exit, so the burst can only be projected by the survivor.
        ingest(self.ingestor, burst).await?;
        let appended = died.elapsed();
        let end = self.log.end_offsets().await?;
        let mut moved = None;
        while died.elapsed() < self.within {
            if behind(self.store, self.group, &end).await?.0 == 0 {
                moved = Some(died.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Its gauges follow a rebalance within about a second.
        let mut survivor_held = survivor.held().await;
        let asked = Instant::now();
        while moved.is_some()
            && survivor_held.len() < self.partitions as usize
            && asked.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
            survivor_held = survivor.held().await;
        }
        let outcome = match moved {
            Some(_) => "moved".to_owned(),
            None => format!(
                "did not move within {} s: the survivor held partitions {:?}{}",
                self.within.as_secs(),
                survivor_held.iter().collect::<Vec<_>>(),
                match death {
                    Death::Abrupt => {
                        "; tansu 0.6.0 keeps assigning partitions to a member whose session \
                         expired (see INFRA.md)"
                    }
                    Death::Graceful => "",
                }
            ),
        };
        Ok(json!({
            "outcome": outcome,
            "victim_held": held,
            "exited_ms": ms(exited),
            "burst_events": burst_len,
            "burst_ingested_ms": ms(appended),
            "moved_ms": moved.map(ms),
            "survivor_held": survivor_held,
            "exit_status": status.map(|s| s.to_string()),
        }))
    }
}

/// About `n` events of new sessions (named after `tag`), spread evenly over `partitions_held`
/// (of `partitions`).
fn burst_events(
    tenant: &str,
    partitions_held: &BTreeSet<u32>,
    partitions: u32,
    n: u64,
    tag: &str,
) -> Vec<Event> {
    let per = (n / partitions_held.len().max(1) as u64).max(10);
    let mut out = Vec::new();
    for &p in partitions_held {
        let session = (0u32..)
            .map(|k| format!("burst-{tag}-{p}-{k}"))
            .find(|s| strata_log::partition_for(s.as_bytes(), partitions) == p)
            .expect("some name lands on every partition");
        out.extend(strata_replay::workload::session(tenant, &session, per));
    }
    out
}

/// The rounds of clean stops, with the median, least and most time the moves took.
fn summary(rounds: Vec<serde_json::Value>) -> serde_json::Value {
    let mut moved: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r["moved_ms"].as_f64())
        .collect();
    moved.sort_by(f64::total_cmp);
    json!({
        "signal": "SIGTERM",
        "moved": moved.len(),
        "moved_ms_median": moved.get(moved.len() / 2),
        "moved_ms_min": moved.first(),
        "moved_ms_max": moved.last(),
        "rounds": rounds,
    })
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

fn projector_bin(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(p) => p,
        None => std::env::current_exe()?
            .with_file_name(format!("strata-projector{}", std::env::consts::EXE_SUFFIX)),
    };
    anyhow::ensure!(
        path.is_file(),
        "no strata-projector at {}: build it beside strata (cargo build [--release] -p \
         strata-projector) or pass --projector-bin",
        path.display()
    );
    Ok(path)
}

async fn delete_topics(brokers: &str, topics: &[String]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let results = admin
        .delete_topics(
            &names,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await?;
    for r in results {
        match r {
            Ok(_) => {}
            // tansu 0.6.0 may already have removed `<topic>.dead-letter` with `<topic>`.
            Err((_, rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((topic, code)) => anyhow::bail!("{topic}: {code}"),
        }
    }
    Ok(())
}

/// The 1-minute load average (Linux), to say how busy the machine was.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn print_table(r: &serde_json::Value) {
    let s = &r["setup"];
    println!(
        "strata bench scale: {} events, {} sessions, {} partitions (events per partition {}), \
         projector batches of {}",
        s["events"], s["sessions"], s["partitions"], s["events_per_partition"], s["batch_size"]
    );
    println!(
        "strata-projector processes ({}), Kafka + PostgreSQL on loopback; {} cores, load \
         average {} before, {} after",
        s["projector"].as_str().unwrap_or_default(),
        s["cores"],
        s["load_average_before"],
        s["load_average_after"]
    );
    println!();
    println!("{:<62} {:>14} {:>8}", "measure", "result", "ratio");
    for (key, label) in [
        ("one_instance", "project: one instance (start → log end)"),
        (
            "two_instances",
            "project: two instances, one group (start → log end)",
        ),
    ] {
        let run = &r[key];
        println!(
            "{:<62} {:>9.0} ev/s {:>8}",
            label,
            run["events_per_sec"].as_f64().unwrap_or(0.0),
            if key == "two_instances" {
                format!("{:.2}x", r["two_to_one"].as_f64().unwrap_or(0.0))
            } else {
                String::new()
            }
        );
        println!(
            "{:<62} {:>14}",
            format!(
                "  took {:.2} s; first commit after {:.2} s, then",
                run["secs"].as_f64().unwrap_or(0.0),
                run["first_commit_secs"].as_f64().unwrap_or(0.0)
            ),
            format!(
                "{:.0} ev/s",
                run["events_per_sec_after_first_commit"]
                    .as_f64()
                    .unwrap_or(0.0)
            )
        );
    }
    let g = &r["move_graceful"];
    let rounds = g["rounds"].as_array().map(Vec::len).unwrap_or(0);
    println!(
        "{:<62} {:>14}",
        format!(
            "partitions move after SIGTERM (leaves the group): median of {}",
            g["moved"]
        ),
        match g["moved_ms_median"].as_f64() {
            Some(v) => format!("{v:.0} ms"),
            None => "—".to_owned(),
        }
    );
    if let (Some(min), Some(max)) = (g["moved_ms_min"].as_f64(), g["moved_ms_max"].as_f64()) {
        println!(
            "{:<62} {:>14}",
            "  least – most",
            format!("{min:.0} – {max:.0} ms")
        );
    }
    for (i, m) in g["rounds"].as_array().into_iter().flatten().enumerate() {
        print_move(&format!("round {} of {rounds}", i + 1), m);
    }
    let m = &r["move_abrupt"];
    println!(
        "{:<62} {:>14}",
        format!(
            "partitions move after SIGKILL (session timeout {} ms)",
            s["session_timeout_ms"]
        ),
        match m["moved_ms"].as_f64() {
            Some(v) => format!("{v:.0} ms"),
            None => "—".to_owned(),
        }
    );
    print_move("", m);
}

fn print_move(label: &str, m: &serde_json::Value) {
    let label = if label.is_empty() {
        String::new()
    } else {
        format!("{label}: ")
    };
    if m["outcome"] == "moved" {
        println!(
            "  {label}{} ms; it held {}, exited after {} ms; {} burst events ingested by {} ms; \
             survivor holds {}",
            m["moved_ms"],
            m["victim_held"],
            m["exited_ms"],
            m["burst_events"],
            m["burst_ingested_ms"],
            m["survivor_held"]
        );
    } else {
        println!(
            "  {label}it held {}; {}",
            m["victim_held"],
            m["outcome"].as_str().unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn a_burst_lands_on_the_dead_members_partitions_only() {
        let held = BTreeSet::from([1, 3]);
        let events = super::burst_events("t", &held, 4, 200, "kill");
        assert!(events.len() >= 200);
        let on: BTreeSet<u32> = events
            .iter()
            .map(|e| strata_log::partition_for(e.session_id.as_bytes(), 4))
            .collect();
        assert_eq!(on, held);
    }
}
