//! The Redis backend of the hot state (`redis://`, `rediss://`), shared by every instance of
//! every service. Key layout, TTLs and the fallback on a miss are described in the crate docs.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, Script, ServerErrorKind};

use crate::{redact_url, Accepted, Error, HotState, ProjectedSession, Result, Seeding};

// Linked for its `ring` crypto provider, which `rediss://` connections use (see Cargo.toml).
use rustls as _;

/// Default lifetime of every hot-state key: seven days.
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Sets the head only when it holds `expected` (`ARGV[1]`, empty: absent), and refreshes its TTL.
/// A head expected absent is set only while the tenant's heads marker (`KEYS[2]`) is there and
/// not settling (`KEYS[3]`): after a loss an absent head says nothing. A head expected present
/// was written since the last loss (a loss removes it), so it needs no marker.
/// One script, so the read and the write are one atomic step on the server.
const COMPARE_AND_SET_HEAD: &str = r#"
if ARGV[1] == '' and (redis.call('EXISTS', KEYS[2]) == 0 or redis.call('PTTL', KEYS[3]) > 0) then
  return 0
end
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '' then
  if current then return 0 end
elseif current ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"#;

/// Seeds a recovered head (`ARGV[1]`, 0: none) unless the tenant's heads marker is missing
/// (`{2, 0}`: lost) or settling (`{3, ms}`); `{1, v}`: present already; `{0, 0}`: seeded.
const SEED_HEAD: &str = r#"
if redis.call('EXISTS', KEYS[2]) == 0 then return {2, 0} end
local left = redis.call('PTTL', KEYS[3])
if left > 0 then return {3, left} end
local current = redis.call('GET', KEYS[1])
if current then return {1, tonumber(current)} end
if tonumber(ARGV[1]) > 0 then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return {0, 0}
"#;

/// Restores the tenant's heads marker when missing, with a settling time of `ARGV[1]` ms (0:
/// none); returns the settling time left.
const RESTORE_HEADS: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], '1')
  if tonumber(ARGV[1]) > 0 then redis.call('SET', KEYS[2], '1', 'PX', ARGV[1]) end
end
local left = redis.call('PTTL', KEYS[2])
if left > 0 then return left end
return 0
"#;

/// Deletes the head only when it holds `ARGV[1]`, in one atomic step.
const FORGET_HEAD: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

/// Lifetimes of the Redis keys. Both must be at least one second (Redis expires in seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOptions {
    /// Lifetime of log heads and projected sessions; every write refreshes it.
    pub ttl: Duration,
    /// Lifetime of accepted event ids.
    pub accepted_ttl: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_TTL,
            accepted_ttl: DEFAULT_TTL,
        }
    }
}

impl RedisOptions {
    /// Reads `ttl_secs` and `accepted_ttl_secs` from the URL's query, defaults elsewhere.
    fn from_url(url: &str) -> Result<Self> {
        let unsupported = |reason: String| Error::UnsupportedUrl {
            url: redact_url(url),
            reason,
        };
        let parsed =
            url::Url::parse(url).map_err(|e| unsupported(format!("not a valid url: {e}")))?;
        let mut options = Self::default();
        for (name, value) in parsed.query_pairs() {
            let slot = match name.as_ref() {
                "ttl_secs" => &mut options.ttl,
                "accepted_ttl_secs" => &mut options.accepted_ttl,
                _ => continue,
            };
            *slot = match value.parse::<u64>() {
                Ok(secs) if secs > 0 => Duration::from_secs(secs),
                _ => {
                    return Err(unsupported(format!(
                        "{name} must be a whole number of seconds > 0"
                    )))
                }
            };
        }
        Ok(options)
    }

    fn secs(ttl: Duration) -> u64 {
        ttl.as_secs().max(1)
    }
}

/// Hot state in Redis, over a [`ConnectionManager`] (one multiplexed connection, reconnected
/// when it drops; clones share it).
#[derive(Clone)]
pub struct RedisHotState {
    conn: ConnectionManager,
    compare_and_set: Script,
    seed_head: Script,
    restore_heads: Script,
    forget_head: Script,
    options: RedisOptions,
    /// The URL with its password redacted, for `Debug` and errors.
    endpoint: String,
}

impl fmt::Debug for RedisHotState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisHotState")
            .field("endpoint", &self.endpoint)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisHotState {
    /// Connects to the server a `redis://` or `rediss://` URL names, with the TTLs its query sets
    /// (`ttl_secs`, `accepted_ttl_secs`).
    pub async fn open(url: &str) -> Result<Self> {
        let options = RedisOptions::from_url(url)?;
        Self::connect(url, options).await
    }

    /// Connects with explicit options (any TTL parameters in the URL are ignored).
    pub async fn connect(url: &str, options: RedisOptions) -> Result<Self> {
        let endpoint = redact_url(url);
        if options.ttl < Duration::from_secs(1) || options.accepted_ttl < Duration::from_secs(1) {
            return Err(Error::UnsupportedUrl {
                url: endpoint,
                reason: "redis ttls must be at least one second".into(),
            });
        }
        let client = redis::Client::open(url).map_err(|e| Error::UnsupportedUrl {
            url: endpoint.clone(),
            reason: format!("not a usable redis url ({})", describe(&e)),
        })?;
        // A cache fails fast: while Redis is down, callers take their fallback paths instead
        // of waiting on reconnection backoff.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(200));
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| {
                let message = format!("redis connect to {endpoint} failed: {}", describe(&e));
                // Unreachable, or busy loading its data: retrying may succeed. A refused login
                // or a client setting the server rejects does not change by retrying.
                let passing = e.is_io_error()
                    || matches!(
                        e.kind(),
                        ErrorKind::Server(
                            ServerErrorKind::BusyLoading
                                | ServerErrorKind::TryAgain
                                | ServerErrorKind::MasterDown
                                | ServerErrorKind::ClusterDown
                        )
                    );
                if passing {
                    Error::Unavailable(message)
                } else {
                    Error::Refused(message)
                }
            })?;
        Ok(Self {
            conn,
            compare_and_set: Script::new(COMPARE_AND_SET_HEAD),
            seed_head: Script::new(SEED_HEAD),
            restore_heads: Script::new(RESTORE_HEADS),
            forget_head: Script::new(FORGET_HEAD),
            options,
            endpoint,
        })
    }

    /// The TTLs in use.
    pub fn options(&self) -> RedisOptions {
        self.options
    }

    /// The key of a session's log head.
    pub fn head_key(tenant: &str, session: &str) -> String {
        format!("{}head:{session}", tenant_prefix(tenant))
    }

    /// The key marking the tenant's heads as recovered since the hot state last lost them (a
    /// flush or restart wipes it with them).
    pub fn heads_marker_key(tenant: &str) -> String {
        format!("{}heads", tenant_prefix(tenant))
    }

    /// The key, with a TTL, of the tenant's settling time after a loss.
    pub fn settling_key(tenant: &str) -> String {
        format!("{}settling", tenant_prefix(tenant))
    }

    /// The key of an accepted event id.
    pub fn accepted_key(tenant: &str, event_id: &str) -> String {
        format!("{}evt:{event_id}", tenant_prefix(tenant))
    }

    /// The key of a session's projected state.
    pub fn projected_key(tenant: &str, session: &str) -> String {
        format!("{}proj:v1:{session}", tenant_prefix(tenant))
    }

    /// The prefix every key of `tenant` starts with, e.g. for `SCAN MATCH <prefix>*`.
    pub fn tenant_prefix(tenant: &str) -> String {
        tenant_prefix(tenant)
    }
}

/// `strata:{<tenant>}:`, the tenant percent-encoded where it could end the hash tag or the
/// segment early.
fn tenant_prefix(tenant: &str) -> String {
    let mut out = String::with_capacity(tenant.len() + 10);
    out.push_str("strata:{");
    for c in tenant.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out.push_str("}:");
    out
}

/// What went wrong, from the error's kind only: its text may quote stored values.
fn describe(e: &RedisError) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connection_refusal() {
        "connection refused".into()
    } else if e.is_connection_dropped() {
        "connection dropped".into()
    } else if let Some(code) = e.code() {
        format!("server replied {code}")
    } else {
        match e.category() {
            "" => "server error".into(),
            category => category.to_owned(),
        }
    }
}

/// Maps a Redis error of operation `op`; the message names `op`, never a key's value.
fn failed(op: &str, e: RedisError) -> Error {
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
            Error::Corrupt(format!("redis {op}: the stored value has the wrong type"))
        }
        _ => Error::Unavailable(format!("redis {op} failed: {}", describe(&e))),
    }
}

#[async_trait]
impl HotState for RedisHotState {
    async fn log_head(&self, tenant: &str, session: &str) -> Result<Option<u64>> {
        redis::cmd("GET")
            .arg(Self::head_key(tenant, session))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("log_head", e))
    }

    async fn compare_and_set_log_head(
        &self,
        tenant: &str,
        session: &str,
        expected: Option<u64>,
        new: u64,
    ) -> Result<bool> {
        let set: i64 = self
            .compare_and_set
            .key(Self::head_key(tenant, session))
            .key(Self::heads_marker_key(tenant))
            .key(Self::settling_key(tenant))
            .arg(expected.map(|v| v.to_string()).unwrap_or_default())
            .arg(new)
            .arg(RedisOptions::secs(self.options.ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("compare_and_set_log_head", e))?;
        Ok(set == 1)
    }

    async fn seed_log_head(&self, tenant: &str, session: &str, seq: u64) -> Result<Seeding> {
        let (code, value): (i64, i64) = self
            .seed_head
            .key(Self::head_key(tenant, session))
            .key(Self::heads_marker_key(tenant))
            .key(Self::settling_key(tenant))
            .arg(seq)
            .arg(RedisOptions::secs(self.options.ttl))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("seed_log_head", e))?;
        Ok(match code {
            0 => Seeding::Seeded,
            1 => Seeding::Present(value.max(0) as u64),
            2 => Seeding::Lost,
            _ => Seeding::Settling(Duration::from_millis(value.max(1) as u64)),
        })
    }

    async fn restore_heads(&self, tenant: &str, settle: Duration) -> Result<Duration> {
        let left: i64 = self
            .restore_heads
            .key(Self::heads_marker_key(tenant))
            .key(Self::settling_key(tenant))
            .arg(settle.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("restore_heads", e))?;
        Ok(Duration::from_millis(left.max(0) as u64))
    }

    async fn forget_log_head(&self, tenant: &str, session: &str, expected: u64) -> Result<bool> {
        let removed: i64 = self
            .forget_head
            .key(Self::head_key(tenant, session))
            .arg(expected)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("forget_log_head", e))?;
        Ok(removed == 1)
    }

    async fn accepted_event(&self, tenant: &str, event_id: &str) -> Result<Option<Accepted>> {
        let text: Option<String> = redis::cmd("GET")
            .arg(Self::accepted_key(tenant, event_id))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("accepted_event", e))?;
        // A value of another form is treated as a miss: the projections answer instead.
        Ok(text.as_deref().and_then(Accepted::decode))
    }

    async fn remember_accepted(&self, tenant: &str, events: &[(String, Accepted)]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let ttl = RedisOptions::secs(self.options.accepted_ttl);
        let mut pipe = redis::pipe();
        for (event_id, accepted) in events {
            pipe.set_ex(Self::accepted_key(tenant, event_id), accepted.encode(), ttl)
                .ignore();
        }
        pipe.exec_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("remember_accepted", e))
    }

    async fn put_projected(
        &self,
        tenant: &str,
        session: &str,
        value: ProjectedSession,
    ) -> Result<()> {
        let json = serde_json::to_vec(&value).map_err(|_| {
            Error::Corrupt("redis put_projected: the projected session does not encode".into())
        })?;
        redis::cmd("SET")
            .arg(Self::projected_key(tenant, session))
            .arg(json)
            .arg("EX")
            .arg(RedisOptions::secs(self.options.ttl))
            .exec_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("put_projected", e))
    }

    async fn projected(&self, tenant: &str, session: &str) -> Result<Option<ProjectedSession>> {
        let json: Option<Vec<u8>> = redis::cmd("GET")
            .arg(Self::projected_key(tenant, session))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("projected", e))?;
        json.map(|json| {
            // serde_json's message can quote the value: keep it out of the error.
            serde_json::from_slice(&json).map_err(|_| {
                Error::Corrupt(
                    "redis projected: the stored value is not a projected session".into(),
                )
            })
        })
        .transpose()
    }

    async fn forget_session(&self, tenant: &str, session: &str) -> Result<()> {
        redis::cmd("DEL")
            .arg(Self::projected_key(tenant, session))
            .exec_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("forget_session", e))
    }

    async fn ping(&self) -> Result<()> {
        let reply: String = redis::cmd("PING")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| failed("ping", e))?;
        if reply == "PONG" {
            Ok(())
        } else {
            Err(Error::Unavailable(
                "redis ping failed: unexpected reply".into(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_namespaced_and_hash_tagged_by_tenant() {
        assert_eq!(
            RedisHotState::head_key("acme", "s1"),
            "strata:{acme}:head:s1"
        );
        assert_eq!(
            RedisHotState::accepted_key("acme", "evt_01"),
            "strata:{acme}:evt:evt_01"
        );
        assert_eq!(
            RedisHotState::projected_key("acme", "s1"),
            "strata:{acme}:proj:v1:s1"
        );
        // A tenant cannot end the hash tag or the segment early: no two (tenant, session) pairs
        // share a key.
        assert_ne!(
            RedisHotState::head_key("a}:head:b", "c"),
            RedisHotState::head_key("a", "b}:head:c")
        );
        assert_eq!(
            RedisHotState::tenant_prefix("a:{b}%"),
            "strata:{a%3A%7Bb%7D%25}:"
        );
    }

    #[test]
    fn ttls_come_from_the_url() {
        let o = RedisOptions::from_url("redis://127.0.0.1:6379/0").unwrap();
        assert_eq!(o, RedisOptions::default());
        assert_eq!(o.ttl, Duration::from_secs(604_800));
        let o = RedisOptions::from_url(
            "redis://h:1/?ttl_secs=60&accepted_ttl_secs=3600&protocol=resp2",
        )
        .unwrap();
        assert_eq!(o.ttl, Duration::from_secs(60));
        assert_eq!(o.accepted_ttl, Duration::from_secs(3600));
        for bad in ["ttl_secs=0", "ttl_secs=-1", "accepted_ttl_secs=soon"] {
            let err = RedisOptions::from_url(&format!("redis://:hunter2@h:1/?{bad}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("must be a whole number"), "{err}");
            assert!(!err.contains("hunter2"), "password leaked: {err}");
        }
    }

    #[test]
    fn tls_urls_are_supported_by_this_build() {
        redis::Client::open("rediss://127.0.0.1:6380/").expect("rediss:// must be built in");
        // The redis crate builds its TLS config from the process-wide provider; with exactly one
        // provider compiled in, rustls picks it (with none, or two, this panics).
        let _ = rustls::ClientConfig::builder();
    }

    #[tokio::test]
    async fn unreachable_server_is_unavailable_without_leaking_the_password() {
        // Port 1 on loopback refuses connections.
        let err = RedisHotState::open("redis://:hunter2@127.0.0.1:1/")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
        assert!(
            err.is_transient(),
            "an unreachable server is worth retrying: {err}"
        );
        let text = format!("{err} {err:?}");
        assert!(text.contains("connect"), "{text}");
        assert!(!text.contains("hunter2"), "password leaked: {text}");
    }

    #[tokio::test]
    async fn a_malformed_url_is_not_transient() {
        for url in ["redis://:hunter2@h:1/?ttl_secs=0", "redis://:hunter2@[::1/"] {
            let err = RedisHotState::open(url).await.unwrap_err();
            assert!(!err.is_transient(), "{url}: {err}");
            assert!(
                !err.to_string().contains("hunter2"),
                "password leaked: {err}"
            );
        }
    }
}
