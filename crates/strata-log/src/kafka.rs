//! The log on Kafka (`kafka://host:port[,host:port]/topic?partitions=N&replication=R
//! &dead_letter_topic=T&session_timeout_ms=MS&group_instance_id=ID&delivery_timeout_ms=MS`),
//! through `rdkafka`.
//!
//! - Producer: idempotent (`enable.idempotence`, `acks=all`), the session id as key and the
//!   partition chosen explicitly with Kafka's own murmur2 partitioner ([`crate::partition_for`]),
//!   so records written here and by any Kafka producer with the default partitioner agree. An
//!   append fails after `delivery_timeout_ms` (default [`DEFAULT_DELIVERY_TIMEOUT_MS`]) when the
//!   brokers do not confirm it, instead of librdkafka's five minutes: a caller waiting on it
//!   (an HTTP client of ingest) gets an answer. A failed append may still have written some of
//!   its records; callers must treat its outcome as unknown.
//! - The topic and its dead-letter topic (`<topic>.dead-letter`, one partition) are created
//!   through the admin API when missing.
//! - Consumers: one `BaseConsumer` per group member, polled on a blocking thread (librdkafka's
//!   poll and rebalance callback are synchronous), `enable.auto.commit=false`: offsets are
//!   committed only when the caller says its work is durable. Assignment changes are reported by
//!   `poll`; a caller that keeps its own offsets (the projector) seeks to them.
//! - Seeking right after an assignment can race librdkafka's fetcher start; a seek that fails is
//!   retried on the next polls and, failing that, reading continues from the group's committed
//!   offset, which is never ahead of the caller's own (it commits to Kafka after its store): the
//!   caller then sees records again and skips them by event id. At-least-once delivery with
//!   idempotent effects, as Kafka consumers must be.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::{
    Error, EventLog, LogConsumer, LogRecord, NewRecord, Offsets, Polled, Position, Result,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// How long an append waits for the brokers' confirmation by default (`message.timeout.ms`).
pub const DEFAULT_DELIVERY_TIMEOUT_MS: u32 = 30_000;

/// Where and how to reach the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaOptions {
    pub brokers: String,
    pub topic: String,
    /// Partitions of a topic this backend creates.
    pub partitions: u32,
    pub replication: i32,
    /// Topic of the dead-letter queue (`?dead_letter_topic=`; default `<topic>.dead-letter`).
    pub dead_letter_topic: String,
    /// How long a silent group member keeps its partitions (`?session_timeout_ms=`; default:
    /// librdkafka's, 45 s). A member killed without leaving hands its partitions over after it.
    pub session_timeout_ms: Option<u32>,
    /// Static group membership (`?group_instance_id=`, KIP-345): a member that restarts with
    /// the same id within the session timeout gets its partitions back without a rebalance.
    /// Give every process its own (e.g. the pod name of a StatefulSet).
    pub group_instance_id: Option<String>,
    /// How long an append waits for the brokers to confirm its records before it fails
    /// (`?delivery_timeout_ms=`, librdkafka's `message.timeout.ms`).
    pub delivery_timeout_ms: u32,
}

impl KafkaOptions {
    /// Parses `kafka://host:port[,host:port]/topic?partitions=N&replication=R`.
    pub fn from_url(url: &str, default_partitions: u32) -> Result<KafkaOptions> {
        let bad = |reason: &str| Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = url
            .strip_prefix("kafka://")
            .ok_or_else(|| bad("expected kafka://"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topic) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected kafka://host:port/topic"))?;
        if brokers.is_empty() || topic.is_empty() || topic.contains('/') {
            return Err(bad("expected kafka://host:port/topic"));
        }
        let mut options = KafkaOptions {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            partitions: default_partitions,
            replication: 1,
            dead_letter_topic: format!("{topic}.dead-letter"),
            session_timeout_ms: None,
            group_instance_id: None,
            delivery_timeout_ms: DEFAULT_DELIVERY_TIMEOUT_MS,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("partitions", v)) => {
                    options.partitions = v
                        .parse()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| bad("partitions must be a positive integer"))?
                }
                Some(("replication", v)) => {
                    options.replication = v
                        .parse()
                        .ok()
                        .filter(|r| *r > 0)
                        .ok_or_else(|| bad("replication must be a positive integer"))?
                }
                Some(("dead_letter_topic", v)) if !v.is_empty() && !v.contains('/') => {
                    options.dead_letter_topic = v.to_owned()
                }
                Some(("group_instance_id", v)) if !v.is_empty() => {
                    options.group_instance_id = Some(v.to_owned())
                }
                Some(("session_timeout_ms", v)) => {
                    options.session_timeout_ms = Some(
                        v.parse()
                            .ok()
                            .filter(|ms| *ms >= 1000)
                            .ok_or_else(|| bad("session_timeout_ms must be at least 1000"))?,
                    )
                }
                Some(("delivery_timeout_ms", v)) => {
                    options.delivery_timeout_ms = v
                        .parse()
                        .ok()
                        .filter(|ms| *ms >= 100)
                        .ok_or_else(|| bad("delivery_timeout_ms must be at least 100"))?
                }
                _ => return Err(bad(&format!("unknown parameter {pair:?}"))),
            }
        }
        Ok(options)
    }

    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.brokers);
        c
    }
}

/// Maps a client error of operation `what`. Errors of the brokers' availability (unreachable,
/// timed out, no leader or controller yet) get an I/O error kind that [`Error::is_transient`]
/// retries; the rest (a bad client setting, an authorization failure, …) stay `Other`.
fn kafka_error(what: &str, e: KafkaError) -> Error {
    let code = match &e {
        KafkaError::AdminOp(code) => Some(*code),
        e => e.rdkafka_error_code(),
    };
    Error::Io {
        path: what.to_owned(),
        source: std::io::Error::new(io_kind(code), e.to_string()),
    }
}

/// The I/O error kind of an rdkafka error code: `TimedOut` or `NotConnected` when the brokers
/// could not be reached or did not answer in time, `Other` otherwise.
fn io_kind(code: Option<RDKafkaErrorCode>) -> std::io::ErrorKind {
    use std::io::ErrorKind;
    use RDKafkaErrorCode as C;
    match code {
        Some(C::OperationTimedOut | C::RequestTimedOut | C::MessageTimedOut | C::TimedOutQueue) => {
            ErrorKind::TimedOut
        }
        Some(
            C::BrokerTransportFailure
            | C::Resolve
            | C::AllBrokersDown
            | C::LeaderNotAvailable
            | C::BrokerNotAvailable
            | C::ReplicaNotAvailable
            | C::NetworkException
            | C::CoordinatorLoadInProgress
            | C::CoordinatorNotAvailable
            | C::NotCoordinator
            | C::NotController
            | C::NotEnoughReplicas,
        ) => ErrorKind::NotConnected,
        _ => ErrorKind::Other,
    }
}

/// Connects to the bootstrap brokers (`host:port[,host:port]`) over TCP, each bounded by
/// `timeout`, until one accepts. librdkafka retries an unreachable broker silently until its
/// request times out; this says at once, and why, when none can be reached.
async fn reach_a_broker(brokers: &str, timeout: Duration) -> Result<()> {
    let mut reasons = Vec::new();
    for broker in brokers.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(broker)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => reasons.push(format!("{broker}: {e}")),
            Err(_) => reasons.push(format!("{broker}: no answer within {timeout:?}")),
        }
    }
    Err(Error::Io {
        path: "kafka brokers".into(),
        source: std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("no broker reachable ({})", reasons.join("; ")),
        ),
    })
}

/// The log on a Kafka topic.
pub struct KafkaLog {
    options: KafkaOptions,
    partitions: u32,
    /// Replaced after a failed delivery (see [`KafkaLog::replace_producer`]).
    producer: Mutex<Arc<FutureProducer>>,
    /// Used for watermarks, metadata and plain reads (assigned, never subscribed).
    reader: Arc<Mutex<BaseConsumer>>,
    /// Used for plain reads only, and where its assignment stands after the last one (topic,
    /// partition, next offset): a read that continues there keeps the assignment and what
    /// librdkafka prefetched instead of assigning again (a rebuild reads a partition chunk after
    /// chunk). Apart from `reader`, whose metadata and watermark requests would otherwise queue
    /// behind this one's long-polling fetches on the broker connection.
    streamer: Arc<Mutex<Streamer>>,
}

/// The consumer of plain reads, and where its assignment stands.
struct Streamer {
    consumer: BaseConsumer,
    at: Option<(String, u32, u64)>,
}

impl std::fmt::Debug for KafkaLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaLog")
            .field("options", &self.options)
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

impl KafkaLog {
    /// Connects, creates the topic when missing, and reads its partition count.
    ///
    /// Brokers that cannot be reached fail it with an error [`Error::is_transient`] retries: none
    /// of the bootstrap brokers accepts a connection, or the topic could not be created or
    /// described within 10 s.
    pub async fn open(options: KafkaOptions) -> Result<KafkaLog> {
        reach_a_broker(&options.brokers, TIMEOUT).await?;
        let admin: AdminClient<DefaultClientContext> = options
            .client_config()
            .create()
            .map_err(|e| kafka_error("kafka admin client", e))?;
        let topic = NewTopic::new(
            &options.topic,
            options.partitions as i32,
            TopicReplication::Fixed(options.replication),
        );
        // One partition keeps dead letters in the order they were set aside.
        let dead_letters = NewTopic::new(
            &options.dead_letter_topic,
            1,
            TopicReplication::Fixed(options.replication),
        );
        let results = admin
            .create_topics(
                [&topic, &dead_letters],
                &AdminOptions::new()
                    .operation_timeout(Some(TIMEOUT))
                    .request_timeout(Some(TIMEOUT)),
            )
            .await
            .map_err(|e| kafka_error("create topic", e))?;
        for r in results {
            match r {
                Ok(t) => tracing::info!(topic = %t, "created topic"),
                Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
                // The cluster is not ready yet (no controller, brokers starting): retry later.
                Err((t, code)) if io_kind(Some(code)) != std::io::ErrorKind::Other => {
                    return Err(Error::Io {
                        path: format!("create topic {t}"),
                        source: std::io::Error::new(io_kind(Some(code)), code.to_string()),
                    })
                }
                Err((t, code)) => {
                    return Err(Error::Config(format!("cannot create topic {t}: {code}")))
                }
            }
        }
        let producer = Mutex::new(Arc::new(new_producer(&options)?));
        let reader: BaseConsumer = options
            .client_config()
            .set("group.id", "strata-reader")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .create()
            .map_err(|e| kafka_error("kafka reader", e))?;
        let streamer = Arc::new(Mutex::new(Streamer {
            consumer: options
                .client_config()
                .set("group.id", "strata-reader")
                .set("enable.auto.commit", "false")
                .set("enable.partition.eof", "false")
                // A reader wants what is there now, not to wait for more: brokers that hold a
                // fetch for its whole wait even when records are there (tansu does) would
                // otherwise cost that wait per fetch.
                .set("fetch.wait.max.ms", "10")
                .set("max.partition.fetch.bytes", "8388608")
                .create()
                .map_err(|e| kafka_error("kafka reader", e))?,
            at: None,
        }));
        let topic_name = options.topic.clone();
        let reader = Arc::new(Mutex::new(reader));
        let r = reader.clone();
        let partitions = tokio::task::spawn_blocking(move || {
            let reader = r.lock().map_err(|_| Error::Closed)?;
            // The topic may take a moment to appear in the metadata after creation.
            for _ in 0..50 {
                let md = reader
                    .fetch_metadata(Some(&topic_name), TIMEOUT)
                    .map_err(|e| kafka_error("topic metadata", e))?;
                if let Some(t) = md.topics().iter().find(|t| t.name() == topic_name) {
                    if !t.partitions().is_empty() {
                        return Ok(t.partitions().len() as u32);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(Error::Io {
                path: format!("topic {topic_name}"),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no partitions in its metadata after 5 s",
                ),
            })
        })
        .await
        .map_err(|_| Error::Closed)??;
        Ok(KafkaLog {
            options,
            partitions,
            producer,
            reader,
            streamer,
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&BaseConsumer) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            let reader = reader.lock().map_err(|_| Error::Closed)?;
            f(&reader)
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    /// Reads up to `max_records` records of one partition of `topic` from offset `from`.
    async fn read_topic(
        &self,
        topic: String,
        partition: u32,
        from: u64,
        max_records: usize,
    ) -> Result<Vec<LogRecord>> {
        let (low, high) = {
            let topic = topic.clone();
            self.blocking(move |c| {
                let (low, high) = c
                    .fetch_watermarks(&topic, partition as i32, TIMEOUT)
                    .map_err(|e| kafka_error("watermarks", e))?;
                Ok((low.max(0) as u64, high.max(0) as u64))
            })
            .await?
        };
        // Below the low watermark retention dropped the records: nothing to read there (the
        // consumer would otherwise jump to wherever `auto.offset.reset` says).
        if from >= high || from < low {
            return Ok(Vec::new());
        }
        let streamer = self.streamer.clone();
        tokio::task::spawn_blocking(move || {
            let mut streamer = streamer.lock().map_err(|_| Error::Closed)?;
            let Streamer { consumer: c, at } = &mut *streamer;
            let continues = at
                .as_ref()
                .is_some_and(|(t, p, next)| *t == topic && *p == partition && *next == from);
            if !continues {
                *at = None;
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(&topic, partition as i32, Offset::Offset(from as i64))
                    .map_err(|e| kafka_error("assign", e))?;
                c.assign(&tpl).map_err(|e| kafka_error("assign", e))?;
            }
            let want = ((high - from) as usize).min(max_records);
            let mut out: Vec<LogRecord> = Vec::with_capacity(want);
            let deadline = std::time::Instant::now() + TIMEOUT;
            while out.len() < want && std::time::Instant::now() < deadline {
                match c.poll(Duration::from_millis(100)) {
                    Some(Ok(m)) if m.offset() as u64 >= from => out.push(to_log_record(&m)),
                    Some(Ok(_)) | None => {}
                    // librdkafka reports a lost connection once as an error event, also after
                    // it has reconnected (a broker restart): not an error of this read, which
                    // goes on until the deadline.
                    Some(Err(KafkaError::MessageConsumption(
                        rdkafka::types::RDKafkaErrorCode::AllBrokersDown
                        | rdkafka::types::RDKafkaErrorCode::BrokerTransportFailure,
                    ))) => {}
                    Some(Err(e)) => return Err(kafka_error("read", e)),
                }
            }
            // The assignment stays for a read that continues where this one stopped, as long
            // as the records came in order with no gap.
            let contiguous = out
                .iter()
                .enumerate()
                .all(|(i, r)| r.offset == from + i as u64);
            if contiguous && out.len() == want {
                *at = Some((topic, partition, from + want as u64));
            } else {
                *at = None;
                let _ = c.unassign();
            }
            Ok(out)
        })
        .await
        .map_err(|_| Error::Closed)?
    }
}

/// The idempotent producer of `options`.
fn new_producer(options: &KafkaOptions) -> Result<FutureProducer> {
    options
        .client_config()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", "lz4")
        .set("linger.ms", "5")
        .set(
            "message.timeout.ms",
            options.delivery_timeout_ms.to_string(),
        )
        .create()
        .map_err(|e| kafka_error("kafka producer", e))
}

impl KafkaLog {
    /// Enqueues `records` in order on `producer` and waits for every delivery.
    async fn append_with(
        &self,
        producer: &FutureProducer,
        records: Vec<NewRecord>,
    ) -> Result<Vec<Position>> {
        let mut deliveries = Vec::with_capacity(records.len());
        for r in &records {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v),
                });
            }
            let record = FutureRecord::to(&self.options.topic)
                .partition(self.partition_for_key(&r.key) as i32)
                .key(&r.key)
                .payload(&r.value)
                .headers(headers)
                .timestamp(r.timestamp_ms);
            // Enqueue in order (one key keeps its order); await the deliveries afterwards.
            deliveries.push(
                producer
                    .send_result(record)
                    .map_err(|(e, _)| kafka_error("enqueue record", e))?,
            );
        }
        let mut positions = Vec::with_capacity(deliveries.len());
        for d in deliveries {
            let delivery = d
                .await
                .map_err(|_| Error::Closed)?
                .map_err(|(e, _)| kafka_error("deliver record", e))?;
            positions.push(Position {
                partition: delivery.partition as u32,
                offset: delivery.offset as u64,
            });
        }
        Ok(positions)
    }

    fn producer(&self) -> Result<Arc<FutureProducer>> {
        Ok(self.producer.lock().map_err(|_| Error::Closed)?.clone())
    }

    /// Replaces `failed` (if it is still the current producer) by a new one. After a broker
    /// restart, an idempotent producer can keep failing every delivery (tansu 0.6.0 forgets its
    /// producer ids and answers "unknown broker error" forever) while a new one works at once;
    /// its pending records are already reported failed to their callers.
    fn replace_producer(&self, failed: &Arc<FutureProducer>) {
        let Ok(mut current) = self.producer.lock() else {
            return;
        };
        if !Arc::ptr_eq(&current, failed) {
            return; // another caller replaced it already
        }
        match new_producer(&self.options) {
            Ok(p) => {
                *current = Arc::new(p);
                tracing::warn!(topic = %self.options.topic,
                    "replaced the kafka producer after a failed delivery");
            }
            Err(e) => tracing::warn!(error = %e, "could not replace the kafka producer"),
        }
    }
}

fn to_log_record(m: &impl Message) -> LogRecord {
    let headers = m
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        h.value.map(<[u8]>::to_vec).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    LogRecord {
        partition: m.partition() as u32,
        offset: m.offset() as u64,
        timestamp_ms: m.timestamp().to_millis().unwrap_or(0),
        key: m.key().map(<[u8]>::to_vec).unwrap_or_default(),
        headers,
        value: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
    }
}

#[async_trait]
impl EventLog for KafkaLog {
    fn partition_count(&self) -> u32 {
        self.partitions
    }

    async fn append(&self, records: Vec<NewRecord>) -> Result<Vec<Position>> {
        let producer = self.producer()?;
        let result = self.append_with(&producer, records).await;
        if matches!(result, Err(Error::Io { .. })) {
            self.replace_producer(&producer);
        }
        result
    }

    async fn end_offsets(&self) -> Result<Vec<u64>> {
        let topic = self.options.topic.clone();
        let n = self.partitions;
        self.blocking(move |c| {
            (0..n)
                .map(|p| {
                    c.fetch_watermarks(&topic, p as i32, TIMEOUT)
                        .map(|(_, high)| high.max(0) as u64)
                        .map_err(|e| kafka_error("watermarks", e))
                })
                .collect()
        })
        .await
    }

    async fn read(&self, partition: u32, from: u64, max_records: usize) -> Result<Vec<LogRecord>> {
        if partition >= self.partitions {
            return Err(Error::NoSuchPartition {
                partition,
                count: self.partitions,
            });
        }
        self.read_topic(self.options.topic.clone(), partition, from, max_records)
            .await
    }

    async fn dead_letter(&self, record: &LogRecord, group: &str, reason: &str) -> Result<Position> {
        let letter = crate::dead_letter::record(record, group, reason);
        let mut headers = OwnedHeaders::new_with_capacity(letter.headers.len());
        for (k, v) in &letter.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(v),
            });
        }
        let delivery = self
            .producer()?
            .send(
                FutureRecord::to(&self.options.dead_letter_topic)
                    .partition(0)
                    .key(&letter.key)
                    .payload(&letter.value)
                    .headers(headers)
                    .timestamp(letter.timestamp_ms),
                rdkafka::util::Timeout::After(TIMEOUT),
            )
            .await
            .map_err(|(e, _)| kafka_error("deliver dead letter", e))?;
        Ok(Position {
            partition: delivery.partition as u32,
            offset: delivery.offset as u64,
        })
    }

    async fn read_dead_letters(&self, from: u64, max_records: usize) -> Result<Vec<LogRecord>> {
        self.read_topic(self.options.dead_letter_topic.clone(), 0, from, max_records)
            .await
    }

    async fn committed(&self, group: &str) -> Result<Offsets> {
        let consumer: BaseConsumer = self
            .options
            .client_config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e| kafka_error("kafka consumer", e))?;
        let topic = self.options.topic.clone();
        let n = self.partitions;
        tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::new();
            for p in 0..n {
                tpl.add_partition(&topic, p as i32);
            }
            let committed = consumer
                .committed_offsets(tpl, TIMEOUT)
                .map_err(|e| kafka_error("committed offsets", e))?;
            Ok(committed
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) if o >= 0 => Some((e.partition() as u32, o as u64)),
                    _ => None,
                })
                .collect())
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    async fn subscribe(&self, group: &str) -> Result<Box<dyn LogConsumer>> {
        let context = GroupContext::default();
        let events = context.events.clone();
        let mut config = self.options.client_config();
        if let Some(id) = &self.options.group_instance_id {
            config.set("group.instance.id", id);
        }
        if let Some(ms) = self.options.session_timeout_ms {
            config
                .set("session.timeout.ms", ms.to_string())
                .set("heartbeat.interval.ms", (ms / 3).min(3000).to_string());
        }
        let consumer: BaseConsumer<GroupContext> = config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create_with_context(context)
            .map_err(|e| kafka_error("kafka consumer", e))?;
        consumer
            .subscribe(&[&self.options.topic])
            .map_err(|e| kafka_error("subscribe", e))?;
        Ok(Box::new(KafkaConsumer {
            topic: self.options.topic.clone(),
            consumer: Arc::new(consumer),
            events,
            pending_seeks: BTreeMap::new(),
            assignment: Vec::new(),
        }))
    }

    async fn ping(&self) -> Result<()> {
        let topic = self.options.topic.clone();
        self.blocking(move |c| {
            c.fetch_metadata(Some(&topic), Duration::from_secs(3))
                .map(|_| ())
                .map_err(|e| kafka_error("ping", e))
        })
        .await
    }
}

/// Assignment changes seen by librdkafka's rebalance callback, drained by `poll`.
#[derive(Debug, Default, Clone)]
struct RebalanceEvents {
    inner: Arc<Mutex<(Vec<u32>, Vec<u32>)>>,
}

#[derive(Default)]
struct GroupContext {
    events: RebalanceEvents,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut e = match self.events.inner.lock() {
            Ok(e) => e,
            Err(p) => p.into_inner(),
        };
        match rebalance {
            Rebalance::Assign(tpl) => {
                e.0.extend(tpl.elements().iter().map(|x| x.partition() as u32))
            }
            Rebalance::Revoke(tpl) => {
                e.1.extend(tpl.elements().iter().map(|x| x.partition() as u32))
            }
            Rebalance::Error(err) => tracing::warn!(error = %err, "rebalance error"),
        }
    }
}

/// One member of a consumer group on Kafka.
struct KafkaConsumer {
    topic: String,
    consumer: Arc<BaseConsumer<GroupContext>>,
    events: RebalanceEvents,
    pending_seeks: BTreeMap<u32, u64>,
    assignment: Vec<u32>,
}

impl std::fmt::Debug for KafkaConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConsumer")
            .field("topic", &self.topic)
            .field("assignment", &self.assignment)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl LogConsumer for KafkaConsumer {
    async fn poll(&mut self, max_records: usize, timeout: Duration) -> Result<Polled> {
        let consumer = self.consumer.clone();
        let topic = self.topic.clone();
        let seeks = std::mem::take(&mut self.pending_seeks);
        let (records, unapplied) = tokio::task::spawn_blocking(move || {
            let mut unapplied = BTreeMap::new();
            for (p, o) in seeks {
                if let Err(e) = consumer.seek(&topic, p as i32, Offset::Offset(o as i64), TIMEOUT) {
                    tracing::debug!(partition = p, offset = o, error = %e, "seek deferred");
                    unapplied.insert(p, o);
                }
            }
            let mut out = Vec::new();
            let mut wait = timeout;
            while out.len() < max_records {
                match consumer.poll(wait) {
                    Some(Ok(m)) => out.push(to_log_record(&m)),
                    Some(Err(e)) => return Err(kafka_error("poll", e)),
                    None => break,
                }
                // Once something came, only take what is already there.
                wait = Duration::ZERO;
            }
            Ok((out, unapplied))
        })
        .await
        .map_err(|_| Error::Closed)??;
        self.pending_seeks.extend(unapplied);
        let (assigned, revoked) = {
            let mut e = match self.events.inner.lock() {
                Ok(e) => e,
                Err(p) => p.into_inner(),
            };
            (std::mem::take(&mut e.0), std::mem::take(&mut e.1))
        };
        for p in &revoked {
            self.assignment.retain(|x| x != p);
            self.pending_seeks.remove(p);
        }
        for p in &assigned {
            if !self.assignment.contains(p) {
                self.assignment.push(*p);
            }
        }
        self.assignment.sort_unstable();
        // Records of partitions no longer ours are not handed out.
        let records = records
            .into_iter()
            .filter(|r| self.assignment.contains(&r.partition))
            .collect();
        Ok(Polled {
            assigned,
            revoked,
            records,
        })
    }

    fn seek(&mut self, partition: u32, offset: u64) -> Result<()> {
        // Applied on the polling thread at the next poll (librdkafka calls block).
        self.pending_seeks.insert(partition, offset);
        Ok(())
    }

    async fn commit(&mut self, offsets: &Offsets) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        for (p, o) in offsets {
            tpl.add_partition_offset(&self.topic, *p as i32, Offset::Offset(*o as i64))
                .map_err(|e| kafka_error("commit", e))?;
        }
        let consumer = self.consumer.clone();
        tokio::task::spawn_blocking(move || {
            consumer
                .commit(&tpl, CommitMode::Sync)
                .map_err(|e| kafka_error("commit", e))
        })
        .await
        .map_err(|_| Error::Closed)?
    }

    fn assignment(&self) -> Vec<u32> {
        self.assignment.clone()
    }

    async fn close(self: Box<Self>) -> Result<()> {
        let consumer = self.consumer.clone();
        tokio::task::spawn_blocking(move || {
            consumer.unsubscribe();
            // Let the group see this member leave.
            let _ = consumer.poll(Duration::from_millis(100));
        })
        .await
        .map_err(|_| Error::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let o =
            KafkaOptions::from_url("kafka://127.0.0.1:9092/agent-events?partitions=4", 8).unwrap();
        assert_eq!(o.brokers, "127.0.0.1:9092");
        assert_eq!(o.topic, "agent-events");
        assert_eq!(o.partitions, 4);
        assert_eq!(o.replication, 1);
        assert_eq!(o.dead_letter_topic, "agent-events.dead-letter");
        let o = KafkaOptions::from_url("kafka://h:1/t?dead_letter_topic=t-dlq&replication=3", 8)
            .unwrap();
        assert_eq!((o.dead_letter_topic.as_str(), o.replication), ("t-dlq", 3));
        assert!(KafkaOptions::from_url("kafka://h:1/t?dead_letter_topic=", 8).is_err());
        let o = KafkaOptions::from_url("kafka://h:1/t?session_timeout_ms=6000", 8).unwrap();
        assert_eq!(o.session_timeout_ms, Some(6000));
        assert!(KafkaOptions::from_url("kafka://h:1/t?session_timeout_ms=10", 8).is_err());
        let o = KafkaOptions::from_url("kafka://h:1/t?group_instance_id=projector-0", 8).unwrap();
        assert_eq!(o.group_instance_id.as_deref(), Some("projector-0"));
        assert_eq!(o.delivery_timeout_ms, DEFAULT_DELIVERY_TIMEOUT_MS);
        let o = KafkaOptions::from_url("kafka://h:1/t?delivery_timeout_ms=3000", 8).unwrap();
        assert_eq!(o.delivery_timeout_ms, 3000);
        assert!(KafkaOptions::from_url("kafka://h:1/t?delivery_timeout_ms=5", 8).is_err());
        assert!(KafkaOptions::from_url("kafka://127.0.0.1:9092", 8).is_err());
        assert!(KafkaOptions::from_url("kafka://h:1/t?partitions=0", 8).is_err());
        assert!(KafkaOptions::from_url("kafka://h:1/t?bogus=1", 8).is_err());
    }

    #[tokio::test]
    async fn unreachable_brokers_fail_the_open_at_once_and_are_transient() {
        // Port 1 on loopback refuses connections.
        let started = std::time::Instant::now();
        let err = crate::open("kafka://127.0.0.1:1/t", crate::FileLogOptions::default())
            .await
            .unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    }

    #[tokio::test]
    async fn a_malformed_url_is_not_transient() {
        for url in [
            "kafka://127.0.0.1:1/t?bogus=1",
            "kafka://127.0.0.1:1",
            "kafkaa://h/t",
        ] {
            let err = crate::open(url, crate::FileLogOptions::default())
                .await
                .unwrap_err();
            assert!(!err.is_transient(), "{url}: {err}");
        }
    }

    #[test]
    fn availability_codes_are_transient_and_the_rest_is_not() {
        let io = |code| Error::Io {
            path: "t".into(),
            source: std::io::Error::new(io_kind(Some(code)), "x"),
        };
        assert!(io(RDKafkaErrorCode::OperationTimedOut).is_transient());
        assert!(io(RDKafkaErrorCode::AllBrokersDown).is_transient());
        assert!(io(RDKafkaErrorCode::NotController).is_transient());
        assert!(!io(RDKafkaErrorCode::InvalidReplicationFactor).is_transient());
        assert!(!io(RDKafkaErrorCode::TopicAuthorizationFailed).is_transient());
    }
}
