//! The durable event log: the [`EventLog`] port and its backends.
//!
//! The port is shaped after Kafka so that a Kafka backend (`rdkafka`) can serve it unchanged:
//! a fixed number of partitions, records addressed by `(partition, offset)`, keys that choose
//! the partition (Kafka's murmur2 partitioner, so producers writing to Kafka directly agree with
//! us), headers, and consumer groups whose members receive partition assignments and commit
//! offsets. A consumer that keeps its offsets elsewhere (the projector keeps them in its SQL
//! transaction) seeks to them when a partition is assigned.
//!
//! Backends are chosen by URL: `file://DIR` is the embedded default ([`file::FileLog`]).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub mod file;
#[cfg(feature = "kafka")]
pub mod kafka;
mod partitioner;

pub use partitioner::{murmur2, partition_for};

/// Errors of the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on the log's files.
    #[error("log i/o error at {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A record in the middle of the log failed its CRC or length check (not a torn tail).
    #[error("corrupt log record in {path} at byte {position}: {reason}")]
    Corrupt {
        path: String,
        position: u64,
        reason: String,
    },
    /// A partition number outside `0..partition_count`.
    #[error("partition {partition} does not exist (the log has {count})")]
    NoSuchPartition { partition: u32, count: u32 },
    /// The URL names a backend this build does not have, or is malformed.
    #[error("unsupported log url {url:?}: {reason}")]
    UnsupportedUrl { url: String, reason: String },
    /// The log was configured inconsistently with what is on disk.
    #[error("log configuration error: {0}")]
    Config(String),
    /// An argument the log cannot store or use: an oversized record field, an invalid consumer
    /// group name.
    #[error("invalid log input: {0}")]
    InvalidInput(String),
    /// The backend is shutting down or gone.
    #[error("log closed")]
    Closed,
}

impl Error {
    /// Whether retrying may succeed: an I/O error of a kind that passes (the brokers could not
    /// be reached or did not answer in time, a connection dropped, the disk is full). A malformed
    /// URL, an inconsistent configuration, a corrupt record or a file the process may not open
    /// are not: retrying gives the same answer.
    pub fn is_transient(&self) -> bool {
        use std::io::ErrorKind as K;
        match self {
            Error::Io { source, .. } => matches!(
                source.kind(),
                K::ConnectionRefused
                    | K::ConnectionReset
                    | K::ConnectionAborted
                    | K::NotConnected
                    | K::BrokenPipe
                    | K::TimedOut
                    | K::Interrupted
                    | K::WouldBlock
                    | K::UnexpectedEof
                    | K::AddrNotAvailable
                    | K::HostUnreachable
                    | K::NetworkUnreachable
                    | K::NetworkDown
                    | K::StorageFull
            ),
            _ => false,
        }
    }
}

/// Result with the log's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A record to append. `key` chooses the partition; for Strata it is the session id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    pub key: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub value: Vec<u8>,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

/// Where an appended record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub partition: u32,
    pub offset: u64,
}

/// A record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub partition: u32,
    pub offset: u64,
    pub timestamp_ms: i64,
    pub key: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub value: Vec<u8>,
}

impl LogRecord {
    /// The value of the first header called `name`.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    pub fn position(&self) -> Position {
        Position {
            partition: self.partition,
            offset: self.offset,
        }
    }
}

/// What one [`LogConsumer::poll`] returned: assignment changes first, then records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Polled {
    /// Partitions newly assigned to this member; seek them before relying on their position.
    pub assigned: Vec<u32>,
    /// Partitions taken away from this member; stop working on them.
    pub revoked: Vec<u32>,
    /// Records of assigned partitions, in offset order within each partition.
    pub records: Vec<LogRecord>,
}

/// Next offset to read per partition (Kafka's committed-offset convention).
pub type Offsets = BTreeMap<u32, u64>;

/// The durable, partitioned log.
#[async_trait]
pub trait EventLog: Debug + Send + Sync + 'static {
    /// Number of partitions; fixed for the life of the log.
    fn partition_count(&self) -> u32;

    /// The partition a key goes to.
    fn partition_for_key(&self, key: &[u8]) -> u32 {
        partition_for(key, self.partition_count())
    }

    /// Appends records; when this returns `Ok`, they are durable under the log's policy and
    /// their positions are returned in input order. Records of one key keep their order.
    async fn append(&self, records: Vec<NewRecord>) -> Result<Vec<Position>>;

    /// The next offset to be written, per partition (Kafka's high watermark).
    async fn end_offsets(&self) -> Result<Vec<u64>>;

    /// Reads up to `max_records` records of `partition` from offset `from` (inclusive); none when
    /// `from` is at the end, or below what the log still keeps (Kafka retention).
    async fn read(&self, partition: u32, from: u64, max_records: usize) -> Result<Vec<LogRecord>>;

    /// Offsets committed by `group` (empty for an unknown group).
    async fn committed(&self, group: &str) -> Result<Offsets>;

    /// Joins consumer group `group`. Positions start at the group's committed offsets, or at
    /// offset 0 for a partition without one.
    async fn subscribe(&self, group: &str) -> Result<Box<dyn LogConsumer>>;

    /// Checks that the backend is reachable.
    async fn ping(&self) -> Result<()>;

    /// Whether the log lives inside this process (the file log): no other process consumes it,
    /// so a reader that needs current projections projects them itself instead of waiting for a
    /// projector service.
    fn is_embedded(&self) -> bool {
        false
    }

    /// Sets aside a record that consumer group `group` cannot process, with the reason, in the
    /// log's dead-letter queue (the file log: `DIR/dead-letter/`; Kafka: the topic
    /// `<topic>.dead-letter`). The record keeps its key, headers and bytes; headers
    /// [`dead_letter::REASON`], [`dead_letter::GROUP`], [`dead_letter::PARTITION`] and
    /// [`dead_letter::OFFSET`] say why and where it came from. Durable when this returns.
    async fn dead_letter(&self, record: &LogRecord, group: &str, reason: &str) -> Result<Position>;

    /// Reads up to `max_records` dead letters from offset `from` (inclusive), oldest first.
    async fn read_dead_letters(&self, from: u64, max_records: usize) -> Result<Vec<LogRecord>>;
}

/// The dead-letter queue's record layout.
pub mod dead_letter {
    use crate::{LogRecord, NewRecord};

    /// Why the record was set aside.
    pub const REASON: &str = "strata.dead_letter.reason";
    /// The consumer group that could not process it.
    pub const GROUP: &str = "strata.dead_letter.group";
    /// Its partition on the log.
    pub const PARTITION: &str = "strata.dead_letter.partition";
    /// Its offset on the log.
    pub const OFFSET: &str = "strata.dead_letter.offset";

    /// The dead letter of `record`: the same key, headers, bytes and timestamp, plus the
    /// headers that say why and where from.
    pub fn record(record: &LogRecord, group: &str, reason: &str) -> NewRecord {
        let mut headers = record.headers.clone();
        headers.push((REASON.into(), reason.as_bytes().to_vec()));
        headers.push((GROUP.into(), group.as_bytes().to_vec()));
        headers.push((PARTITION.into(), record.partition.to_string().into_bytes()));
        headers.push((OFFSET.into(), record.offset.to_string().into_bytes()));
        NewRecord {
            key: record.key.clone(),
            headers,
            value: record.value.clone(),
            timestamp_ms: record.timestamp_ms,
        }
    }
}

/// One member of a consumer group.
#[async_trait]
pub trait LogConsumer: Debug + Send {
    /// Waits at most `timeout` for records of the assigned partitions; returns early as soon as
    /// there are any. Assignment changes are reported in the same call.
    async fn poll(&mut self, max_records: usize, timeout: Duration) -> Result<Polled>;

    /// Sets the next offset to read from an assigned partition.
    fn seek(&mut self, partition: u32, offset: u64) -> Result<()>;

    /// Commits offsets (next offset to read) for this member's group in the log itself.
    async fn commit(&mut self, offsets: &Offsets) -> Result<()>;

    /// Partitions currently assigned to this member.
    fn assignment(&self) -> Vec<u32>;

    /// Leaves the group cleanly.
    async fn close(self: Box<Self>) -> Result<()>;
}

fn _assert_event_log_object_safe(_: &dyn EventLog) {}
fn _assert_consumer_object_safe(_: &dyn LogConsumer) {}

#[async_trait]
impl<T: EventLog + ?Sized> EventLog for Arc<T> {
    fn partition_count(&self) -> u32 {
        (**self).partition_count()
    }
    async fn append(&self, records: Vec<NewRecord>) -> Result<Vec<Position>> {
        (**self).append(records).await
    }
    async fn end_offsets(&self) -> Result<Vec<u64>> {
        (**self).end_offsets().await
    }
    async fn read(&self, partition: u32, from: u64, max_records: usize) -> Result<Vec<LogRecord>> {
        (**self).read(partition, from, max_records).await
    }
    async fn committed(&self, group: &str) -> Result<Offsets> {
        (**self).committed(group).await
    }
    async fn subscribe(&self, group: &str) -> Result<Box<dyn LogConsumer>> {
        (**self).subscribe(group).await
    }
    async fn ping(&self) -> Result<()> {
        (**self).ping().await
    }
    fn is_embedded(&self) -> bool {
        (**self).is_embedded()
    }
    async fn dead_letter(&self, record: &LogRecord, group: &str, reason: &str) -> Result<Position> {
        (**self).dead_letter(record, group, reason).await
    }
    async fn read_dead_letters(&self, from: u64, max_records: usize) -> Result<Vec<LogRecord>> {
        (**self).read_dead_letters(from, max_records).await
    }
}

/// How the file log makes appends durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// fsync before every append returns (one fsync per batch): an acknowledged record survives
    /// power loss. The default.
    Always,
    /// fsync in the background at this interval: an acknowledged record survives a process
    /// crash, and power loss costs at most the interval.
    Interval(Duration),
    /// Never fsync (tests, benchmarks): the OS decides.
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;
    /// `always`, `never`, or `interval:<ms>` (e.g. `interval:100`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => match s.strip_prefix("interval:").map(str::parse::<u64>) {
                Some(Ok(ms)) if ms > 0 => Ok(FsyncPolicy::Interval(Duration::from_millis(ms))),
                _ => Err(format!(
                    "invalid fsync policy {s:?}: expected always, never or interval:<ms>"
                )),
            },
        }
    }
}

/// Options of the embedded file log.
#[derive(Debug, Clone)]
pub struct FileLogOptions {
    /// Partitions of a new log; an existing log keeps its own count.
    pub partitions: u32,
    pub fsync: FsyncPolicy,
    /// A segment rolls over once it holds this many bytes.
    pub segment_bytes: u64,
}

impl Default for FileLogOptions {
    fn default() -> Self {
        Self {
            partitions: 8,
            fsync: FsyncPolicy::Always,
            segment_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The URL of `tenant`'s inbound log beside the log `log_url` names, where platforms that
/// produce straight to Kafka write (ingest relays it to the log; see `strata-ingest`'s
/// `inbound`): on Kafka the topic `<topic>.inbound.<tenant>` with the same brokers and settings
/// (its dead-letter topic `<topic>.inbound.<tenant>.dead-letter`), so that broker ACLs say which
/// tenant a producer may write as; on the file log the directory `DIR/inbound/<tenant>`. A
/// tenant id that cannot name a Kafka topic (`[A-Za-z0-9._-]`, the whole name at most 249
/// characters) is refused.
pub fn inbound_url(log_url: &str, tenant: &str) -> Result<String> {
    let bad = |reason: String| Error::UnsupportedUrl {
        url: log_url.to_owned(),
        reason,
    };
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if tenant.is_empty() || !tenant.chars().all(legal) || tenant.chars().all(|c| c == '.') {
        return Err(bad(format!(
            "tenant {tenant:?} cannot name an inbound topic: use letters, digits, '.', '_' and '-'"
        )));
    }
    match log_url.split_once("://") {
        Some(("file", dir)) if !dir.is_empty() => Ok(format!(
            "file://{}/inbound/{tenant}",
            dir.trim_end_matches('/')
        )),
        Some(("kafka", rest)) => {
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            let (brokers, topic) = path
                .split_once('/')
                .ok_or_else(|| bad("expected kafka://host:port/topic".into()))?;
            let inbound = format!("{topic}.inbound.{tenant}");
            // Room for the dead-letter suffix within Kafka's 249 characters.
            if inbound.len() + ".dead-letter".len() > 249 {
                return Err(bad(format!(
                    "the inbound topic of tenant {tenant:?} is too long"
                )));
            }
            // The log's own dead-letter topic and static member id are not the inbound log's.
            let query: Vec<&str> = query
                .split('&')
                .filter(|p| {
                    !p.is_empty()
                        && !p.starts_with("dead_letter_topic=")
                        && !p.starts_with("group_instance_id=")
                })
                .collect();
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            Ok(format!("kafka://{brokers}/{inbound}{query}"))
        }
        _ => Err(bad("expected file://DIR or kafka://host:port/topic".into())),
    }
}

/// Opens the log a URL names: `file:///abs/dir` or `file://./rel/dir` (created when missing).
pub async fn open(url: &str, options: FileLogOptions) -> Result<Arc<dyn EventLog>> {
    match url.split_once("://") {
        Some(("file", "")) => Err(Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: "file:// needs a directory".into(),
        }),
        Some(("file", path)) => Ok(Arc::new(file::FileLog::open(path, options).await?)),
        #[cfg(feature = "kafka")]
        Some(("kafka", _)) => Ok(Arc::new(
            kafka::KafkaLog::open(kafka::KafkaOptions::from_url(url, options.partitions)?).await?,
        )),
        #[cfg(not(feature = "kafka"))]
        Some(("kafka", _)) => Err(Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: "this build has no kafka backend (cargo feature `kafka`)".into(),
        }),
        _ => Err(Error::UnsupportedUrl {
            url: url.to_owned(),
            reason: "expected file://DIR".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_policy_parses() {
        assert_eq!("always".parse(), Ok(FsyncPolicy::Always));
        assert_eq!("never".parse(), Ok(FsyncPolicy::Never));
        assert_eq!(
            "interval:100".parse(),
            Ok(FsyncPolicy::Interval(Duration::from_millis(100)))
        );
        for bad in [
            "",
            "Always",
            "interval",
            "interval:",
            "interval:0",
            "interval:-5",
            "interval:1.5",
            "sometimes",
        ] {
            let err = bad.parse::<FsyncPolicy>().unwrap_err();
            assert!(err.contains("invalid fsync policy"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_tenants_inbound_log_sits_beside_the_log() {
        assert_eq!(
            inbound_url(
                "kafka://b1:9092,b2:9092/strata-events?partitions=8&dead_letter_topic=x&group_instance_id=p0&replication=3",
                "acme"
            )
            .unwrap(),
            "kafka://b1:9092,b2:9092/strata-events.inbound.acme?partitions=8&replication=3"
        );
        assert_eq!(
            inbound_url("kafka://b:9092/t", "acme.eu-1").unwrap(),
            "kafka://b:9092/t.inbound.acme.eu-1"
        );
        assert_eq!(
            inbound_url("file:///data/log/", "acme").unwrap(),
            "file:///data/log/inbound/acme"
        );
        for bad in ["", "a/b", "a b", "..", "ünï"] {
            let err = inbound_url("kafka://b:9092/t", bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("inbound topic"), "{bad:?}: {err}");
        }
        assert!(inbound_url("kafka://b:9092/t", &"a".repeat(240)).is_err());
        assert!(inbound_url("s3://x", "acme").is_err());
    }

    #[tokio::test]
    async fn open_by_url_creates_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nested").join("log");
        let url = format!("file://{}", dir.display());
        let log = open(&url, FileLogOptions::default()).await.unwrap();
        assert!(dir.join("meta.json").is_file());
        assert_eq!(log.partition_count(), 8);
        log.ping().await.unwrap();
    }

    #[tokio::test]
    async fn open_rejects_unknown_urls() {
        for url in [
            "kafka://broker:9092",
            "s3://bucket",
            "/just/a/path",
            "file://",
        ] {
            let err = open(url, FileLogOptions::default()).await.unwrap_err();
            assert!(matches!(err, Error::UnsupportedUrl { .. }), "{url}: {err}");
        }
    }
}
