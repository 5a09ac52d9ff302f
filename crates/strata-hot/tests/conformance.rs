//! One conformance suite for the `HotState` port, run against every backend: the generic bodies
//! below take any `HotState`; `suite!` instantiates them per backend.
//!
//! Redis runs when `STRATA_TEST_REDIS_URL` is set (e.g. `redis://127.0.0.1:6379/`). Without it
//! the Redis tests print why they skip — or fail when `CI` is set, where a missing service is a
//! failure. Every test works under its own random tenant prefix and deletes its keys afterwards
//! (best effort, also when it panics).

use std::sync::Arc;
use std::time::Duration;

use strata_core::projection::{AgentState, OpenError, OpenToolCall, Sourced};
use strata_hot::{
    Accepted, Error, HotState, MemoryHotState, ProjectedSession, RedisHotState, Seeding,
};
use tokio::sync::Barrier;

fn seq_only(seq: u64) -> Accepted {
    Accepted {
        seq,
        content_sha256: None,
    }
}

/// A backend under test and the tenant prefix this test owns.
struct Fixture {
    hot: Arc<dyn HotState>,
    prefix: String,
    _cleanup: Option<RedisCleanup>,
}

impl Fixture {
    /// A tenant id of this test (tenant ids allow `[A-Za-z0-9_-]`).
    fn tenant(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// A tenant whose heads are recoverable, as ingest's first recovery leaves them.
    async fn ready_tenant(&self, name: &str) -> String {
        let t = self.tenant(name);
        assert_eq!(
            self.hot.restore_heads(&t, Duration::ZERO).await.unwrap(),
            Duration::ZERO
        );
        t
    }
}

fn random_prefix() -> String {
    format!("conf{:016x}", rand::random::<u64>())
}

async fn memory() -> Option<Fixture> {
    Some(Fixture {
        hot: Arc::new(MemoryHotState::default()),
        prefix: random_prefix(),
        _cleanup: None,
    })
}

/// The Redis URL, or `None` (after saying why) when the tests should skip.
fn redis_url() -> Option<String> {
    const VAR: &str = "STRATA_TEST_REDIS_URL";
    match std::env::var(VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("redis server missing: {VAR} is not set and CI is set (a missing service is a failure in CI)")
        }
        _ => {
            // Once per test binary, and past libtest's capture (which hides `eprintln!` of
            // passing tests), so a plain `cargo test` shows why these tests did nothing.
            static NOTICE: std::sync::Once = std::sync::Once::new();
            NOTICE.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipping redis conformance: {VAR} is not set"
                );
            });
            None
        }
    }
}

async fn redis() -> Option<Fixture> {
    redis_with("").await
}

/// A Redis fixture; `query` is appended to the URL (TTL options).
async fn redis_with(query: &str) -> Option<Fixture> {
    let url = redis_url()?;
    let prefix = random_prefix();
    let full = if query.is_empty() {
        url.clone()
    } else {
        format!("{url}?{query}")
    };
    let hot = strata_hot::open(&full)
        .await
        .unwrap_or_else(|e| panic!("cannot open redis hot state: {e}"));
    Some(Fixture {
        hot,
        _cleanup: Some(RedisCleanup {
            url,
            prefix: prefix.clone(),
        }),
        prefix,
    })
}

/// Deletes this test's keys when dropped (a synchronous connection: `Drop` cannot await).
struct RedisCleanup {
    url: String,
    prefix: String,
}

impl RedisCleanup {
    fn keys(con: &mut ::redis::Connection, prefix: &str) -> Vec<String> {
        // Tenants of a test are `<prefix>-<name>`, so their keys start `strata:{<prefix>-`.
        let pattern = format!("strata:{{{prefix}-*");
        ::redis::cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .clone()
            .iter::<String>(con)
            .map(|it| it.filter_map(Result::ok).collect())
            .unwrap_or_default()
    }
}

impl Drop for RedisCleanup {
    fn drop(&mut self) {
        let Ok(client) = ::redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut con) = client.get_connection() else {
            return;
        };
        let keys = Self::keys(&mut con, &self.prefix);
        if !keys.is_empty() {
            let _: ::redis::RedisResult<()> = ::redis::cmd("DEL").arg(keys).query(&mut con);
        }
    }
}

fn sample_projection(seq: u64) -> ProjectedSession {
    let sourced = |text: &str| Sourced {
        text: text.into(),
        source_event_id: format!("evt_{seq}"),
    };
    ProjectedSession {
        projected_seq: seq,
        state: AgentState {
            goal: Some(sourced("ship the release — ünïcode and \"quotes\"")),
            current_task: Some(sourced("fix the flaky test")),
            plan: vec![sourced("reproduce"), sourced("fix"), sourced("verify")],
            files_modified: vec![sourced("src/lib.rs")],
            errors: vec![OpenError {
                tool_call_id: "call_1".into(),
                tool: "shell".into(),
                message: "exit status 101".into(),
                retryable: true,
                source_event_id: "evt_3".into(),
                privacy_class: None,
                orphan: false,
            }],
            last_compaction_id: Some("cmp_1".into()),
            source_event_id: Some(format!("evt_{seq}")),
            version: seq,
            ..AgentState::default()
        },
        open_tool_calls: vec![OpenToolCall {
            tool_call_id: "call_2".into(),
            name: "pytest".into(),
            branch_id: "main".into(),
            participant_id: "agent-a".into(),
            request_event_id: "evt_5".into(),
            request_seq: 5,
            awaiting_approval: false,
        }],
    }
}

// ---- generic bodies ----

async fn compare_and_set_semantics(f: &Fixture) {
    let h = &f.hot;
    let t = f.tenant("cas");
    // The tenant's heads are recoverable (what ingest's first recovery does).
    assert_eq!(
        h.restore_heads(&t, Duration::ZERO).await.unwrap(),
        Duration::ZERO
    );
    assert_eq!(h.log_head(&t, "s").await.unwrap(), None);
    // Absent: only `None` matches.
    assert!(!h
        .compare_and_set_log_head(&t, "s", Some(0), 1)
        .await
        .unwrap());
    assert!(h.compare_and_set_log_head(&t, "s", None, 1).await.unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(1));
    // Present: `None` and a wrong value do not match, and change nothing.
    assert!(!h.compare_and_set_log_head(&t, "s", None, 2).await.unwrap());
    assert!(!h
        .compare_and_set_log_head(&t, "s", Some(0), 2)
        .await
        .unwrap());
    assert!(!h
        .compare_and_set_log_head(&t, "s", Some(2), 3)
        .await
        .unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(1));
    // The expected value matches.
    assert!(h
        .compare_and_set_log_head(&t, "s", Some(1), 5)
        .await
        .unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(5));
    // Going back is allowed (ingest releases a reservation after a failed append).
    assert!(h
        .compare_and_set_log_head(&t, "s", Some(5), 1)
        .await
        .unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(1));
    // Large values survive.
    assert!(h
        .compare_and_set_log_head(&t, "s", Some(1), u64::MAX)
        .await
        .unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(u64::MAX));
    // Forgetting needs the current value (ingest forgets a head after an append of unknown
    // outcome), and leaves the head absent.
    assert!(!h.forget_log_head(&t, "s", 7).await.unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(u64::MAX));
    assert!(h.forget_log_head(&t, "s", u64::MAX).await.unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), None);
    assert!(!h.forget_log_head(&t, "s", u64::MAX).await.unwrap());
    assert!(h.compare_and_set_log_head(&t, "s", None, 3).await.unwrap());
    // Other sessions are untouched.
    assert_eq!(h.log_head(&t, "s2").await.unwrap(), None);
}

async fn concurrent_compare_and_set_has_one_winner_per_step(f: &Fixture) {
    const TASKS: usize = 20;
    const STEPS: u64 = 25;
    let t = f.ready_tenant("race").await;
    let barrier = Arc::new(Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (h, t, barrier) = (f.hot.clone(), t.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            let mut heads = Vec::new();
            for step in 0..STEPS {
                barrier.wait().await;
                let expected = (step > 0).then_some(step);
                if h.compare_and_set_log_head(&t, "s", expected, step + 1)
                    .await
                    .unwrap()
                {
                    wins.push(step);
                }
                barrier.wait().await;
                heads.push(h.log_head(&t, "s").await.unwrap());
            }
            (wins, heads)
        }));
    }
    let mut winners = vec![0usize; STEPS as usize];
    for task in tasks {
        let (wins, heads) = task.await.unwrap();
        for step in wins {
            winners[step as usize] += 1;
        }
        // Every task saw the head rise by exactly one per step.
        let expected: Vec<Option<u64>> = (1..=STEPS).map(Some).collect();
        assert_eq!(heads, expected);
    }
    assert!(
        winners.iter().all(|&n| n == 1),
        "each step must have exactly one winner: {winners:?}"
    );

    // Free-for-all: tasks race read-then-swap without a barrier; every value is won once, and
    // the wins of each task strictly increase.
    let t = f.ready_tenant("race-free").await;
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (h, t) = (f.hot.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let mut wins = Vec::new();
            loop {
                let head = h.log_head(&t, "s").await.unwrap();
                let next = head.unwrap_or(0) + 1;
                if next > STEPS {
                    return wins;
                }
                if h.compare_and_set_log_head(&t, "s", head, next)
                    .await
                    .unwrap()
                {
                    wins.push(next);
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let wins = task.await.unwrap();
        assert!(wins.windows(2).all(|w| w[0] < w[1]), "{wins:?}");
        all.extend(wins);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=STEPS).collect::<Vec<_>>());
    assert_eq!(f.hot.log_head(&t, "s").await.unwrap(), Some(STEPS));
}

/// After the hot state lost a tenant's heads (here: the marker deleted, as a flush would), a
/// recovery is refused until the heads are restored, then waits out the settling time; no head
/// can be reserved meanwhile.
async fn a_loss_settles_before_heads_are_recovered(f: &Fixture) {
    let h = &f.hot;
    let t = f.tenant("loss");
    // Never recovered: lost, and nothing is written.
    assert_eq!(h.seed_log_head(&t, "s", 4).await.unwrap(), Seeding::Lost);
    assert!(!h.compare_and_set_log_head(&t, "s", None, 5).await.unwrap());
    assert_eq!(h.log_head(&t, "s").await.unwrap(), None);
    let left = h
        .restore_heads(&t, Duration::from_millis(400))
        .await
        .unwrap();
    assert!(left > Duration::from_millis(200), "{left:?}");
    // A second writer restoring meanwhile gets the same wait, not a new one.
    let again = h.restore_heads(&t, Duration::from_secs(30)).await.unwrap();
    assert!(again <= left, "{again:?} > {left:?}");
    assert!(matches!(
        h.seed_log_head(&t, "s", 4).await.unwrap(),
        Seeding::Settling(_)
    ));
    assert!(!h.compare_and_set_log_head(&t, "s", None, 5).await.unwrap());
    tokio::time::sleep(left + Duration::from_millis(50)).await;
    assert_eq!(h.seed_log_head(&t, "s", 4).await.unwrap(), Seeding::Seeded);
    assert_eq!(h.log_head(&t, "s").await.unwrap(), Some(4));
    assert_eq!(
        h.seed_log_head(&t, "s", 2).await.unwrap(),
        Seeding::Present(4)
    );
    assert!(h
        .compare_and_set_log_head(&t, "s", Some(4), 5)
        .await
        .unwrap());
}

async fn tenants_are_isolated(f: &Fixture) {
    let h = &f.hot;
    let (a, b) = (f.ready_tenant("a").await, f.ready_tenant("b").await);
    assert!(h.compare_and_set_log_head(&a, "s", None, 7).await.unwrap());
    h.remember_accepted(&a, &[("evt_1".into(), seq_only(7))])
        .await
        .unwrap();
    h.put_projected(&a, "s", sample_projection(7))
        .await
        .unwrap();

    assert_eq!(h.log_head(&b, "s").await.unwrap(), None);
    assert_eq!(
        h.accepted_event(&b, "evt_1").await.unwrap().map(|a| a.seq),
        None
    );
    assert_eq!(h.projected(&b, "s").await.unwrap(), None);
    // The other tenant's head is its own.
    assert!(h.compare_and_set_log_head(&b, "s", None, 1).await.unwrap());
    assert_eq!(h.log_head(&a, "s").await.unwrap(), Some(7));
    assert_eq!(h.log_head(&b, "s").await.unwrap(), Some(1));
}

async fn ids_are_opaque(f: &Fixture) {
    let h = &f.hot;
    let t = f.ready_tenant("ids").await;
    // Ids with separators, braces, spaces and non-ASCII never collide.
    let sessions = [
        "a",
        "a:b",
        "a:head:b",
        "{a}",
        "a}:head:b",
        "a b",
        "ü",
        "a%3Ab",
    ];
    for (i, s) in sessions.iter().enumerate() {
        assert!(h
            .compare_and_set_log_head(&t, s, None, i as u64 + 1)
            .await
            .unwrap());
    }
    for (i, s) in sessions.iter().enumerate() {
        assert_eq!(h.log_head(&t, s).await.unwrap(), Some(i as u64 + 1), "{s}");
    }
    // A tenant and a session cannot combine into another pair's key.
    let (t1, t2) = (format!("{t}-x}}:head:y"), format!("{t}-x"));
    h.restore_heads(&t1, Duration::ZERO).await.unwrap();
    assert!(h.compare_and_set_log_head(&t1, "z", None, 1).await.unwrap());
    assert_eq!(h.log_head(&t2, "y}:head:z").await.unwrap(), None);
}

async fn accepted_ids(f: &Fixture) {
    let h = &f.hot;
    let t = f.ready_tenant("acc").await;
    assert_eq!(
        h.accepted_event(&t, "evt_1").await.unwrap().map(|a| a.seq),
        None
    );
    h.remember_accepted(&t, &[]).await.unwrap();
    // Even seqs with a content hash, odd ones without (as an older version remembered them).
    let batch: Vec<(String, Accepted)> = (1..=50)
        .map(|seq| {
            let content_sha256 = (seq % 2 == 0).then(|| format!("{seq:064x}"));
            (
                format!("evt_{seq}"),
                Accepted {
                    seq,
                    content_sha256,
                },
            )
        })
        .collect();
    h.remember_accepted(&t, &batch).await.unwrap();
    for (id, accepted) in &batch {
        assert_eq!(
            h.accepted_event(&t, id).await.unwrap().as_ref(),
            Some(accepted),
            "{id}"
        );
    }
    assert_eq!(
        h.accepted_event(&t, "evt_51").await.unwrap().map(|a| a.seq),
        None
    );
    // Remembering again is harmless.
    h.remember_accepted(&t, &batch[..3]).await.unwrap();
    assert_eq!(
        h.accepted_event(&t, "evt_2").await.unwrap().map(|a| a.seq),
        Some(2)
    );
    // Event ids and session ids live in separate namespaces.
    assert_eq!(h.log_head(&t, "evt_1").await.unwrap(), None);
}

async fn projected_round_trip(f: &Fixture) {
    let h = &f.hot;
    let t = f.ready_tenant("proj").await;
    assert_eq!(h.projected(&t, "s").await.unwrap(), None);
    let first = sample_projection(3);
    h.put_projected(&t, "s", first.clone()).await.unwrap();
    assert_eq!(h.projected(&t, "s").await.unwrap(), Some(first));
    let empty = ProjectedSession {
        projected_seq: 0,
        state: AgentState::default(),
        open_tool_calls: vec![],
    };
    h.put_projected(&t, "empty", empty.clone()).await.unwrap();
    assert_eq!(h.projected(&t, "empty").await.unwrap(), Some(empty));
    // A later put replaces the value.
    let second = sample_projection(9);
    h.put_projected(&t, "s", second.clone()).await.unwrap();
    assert_eq!(h.projected(&t, "s").await.unwrap(), Some(second));
    assert_eq!(h.projected(&t, "other").await.unwrap(), None);
    // The projected session is not the log head.
    assert_eq!(h.log_head(&t, "s").await.unwrap(), None);
}

async fn ping(f: &Fixture) {
    f.hot.ping().await.unwrap();
}

macro_rules! suite {
    ($backend:ident) => {
        mod $backend {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn compare_and_set_semantics() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::compare_and_set_semantics(&f).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_compare_and_set_has_one_winner_per_step() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::concurrent_compare_and_set_has_one_winner_per_step(&f).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tenants_are_isolated() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::tenants_are_isolated(&f).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ids_are_opaque() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::ids_are_opaque(&f).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn accepted_ids() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::accepted_ids(&f).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn projected_round_trip() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::projected_round_trip(&f).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ping() {
                let Some(f) = super::$backend().await else {
                    return;
                };
                super::ping(&f).await;
            }
        }
    };
}

suite!(memory);
suite!(redis);

// Only Redis can lose what it holds while writers run (the in-process state lives and dies
// with them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_loss_settles_before_heads_are_recovered() {
    let Some(f) = redis().await else {
        return;
    };
    a_loss_settles_before_heads_are_recovered(&f).await;

    // Heads written before this version (no marker), or a marker evicted alone: a present head
    // still advances; only a head expected absent needs the marker.
    let t = f.tenant("loss");
    let mut con = redis_only::connection(&redis_url().unwrap());
    let _: () = ::redis::cmd("DEL")
        .arg(RedisHotState::heads_marker_key(&t))
        .query(&mut con)
        .unwrap();
    assert!(f
        .hot
        .compare_and_set_log_head(&t, "s", Some(5), 6)
        .await
        .unwrap());
    assert!(!f
        .hot
        .compare_and_set_log_head(&t, "other", None, 1)
        .await
        .unwrap());
    assert_eq!(
        f.hot.seed_log_head(&t, "other", 0).await.unwrap(),
        Seeding::Lost
    );
}

// ---- Redis only: TTLs, key layout, error hygiene ----

mod redis_only {
    use super::*;

    pub(super) fn connection(url: &str) -> ::redis::Connection {
        ::redis::Client::open(url)
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn ttl(con: &mut ::redis::Connection, key: &str) -> i64 {
        ::redis::cmd("TTL").arg(key).query(con).unwrap()
    }

    #[tokio::test]
    async fn keys_are_namespaced_and_carry_ttls() {
        let Some(f) = redis().await else { return };
        let t = f.ready_tenant("ttl").await;
        f.hot
            .compare_and_set_log_head(&t, "s", None, 1)
            .await
            .unwrap();
        f.hot
            .remember_accepted(&t, &[("evt_1".into(), seq_only(1))])
            .await
            .unwrap();
        f.hot
            .put_projected(&t, "s", sample_projection(1))
            .await
            .unwrap();

        let mut con = connection(&redis_url().unwrap());
        let week = 7 * 24 * 3600;
        for key in [
            format!("strata:{{{t}}}:head:s"),
            format!("strata:{{{t}}}:evt:evt_1"),
            format!("strata:{{{t}}}:proj:v1:s"),
        ] {
            let left = ttl(&mut con, &key);
            assert!(left > week - 60 && left <= week, "{key}: ttl {left}");
        }
        // The tenant's heads marker does not expire: only a loss removes it.
        let marker = RedisHotState::heads_marker_key(&t);
        assert_eq!(marker, format!("strata:{{{t}}}:heads"));
        assert_eq!(ttl(&mut con, &marker), -1, "{marker}");
        let mut keys = RedisCleanup::keys(&mut con, &f.prefix);
        keys.sort();
        assert_eq!(keys.len(), 4, "{keys:?}");
        assert_eq!(
            RedisHotState::head_key(&t, "s"),
            format!("strata:{{{t}}}:head:s")
        );
    }

    #[tokio::test]
    async fn compare_and_set_refreshes_the_ttl() {
        let Some(f) = redis().await else { return };
        let t = f.ready_tenant("refresh").await;
        let key = RedisHotState::head_key(&t, "s");
        f.hot
            .compare_and_set_log_head(&t, "s", None, 1)
            .await
            .unwrap();
        let mut con = connection(&redis_url().unwrap());
        let _: () = ::redis::cmd("EXPIRE")
            .arg(&key)
            .arg(100)
            .query(&mut con)
            .unwrap();
        // A failed compare-and-set leaves the TTL alone; a successful one refreshes it.
        assert!(!f
            .hot
            .compare_and_set_log_head(&t, "s", Some(9), 2)
            .await
            .unwrap());
        assert!(ttl(&mut con, &key) <= 100);
        assert!(f
            .hot
            .compare_and_set_log_head(&t, "s", Some(1), 2)
            .await
            .unwrap());
        assert!(ttl(&mut con, &key) > 100);
    }

    #[tokio::test]
    async fn ttls_are_configurable_and_an_expired_key_is_a_miss() {
        let Some(f) = redis_with("ttl_secs=1&accepted_ttl_secs=1").await else {
            return;
        };
        let t = f.ready_tenant("expiry").await;
        f.hot
            .compare_and_set_log_head(&t, "s", None, 4)
            .await
            .unwrap();
        f.hot
            .remember_accepted(&t, &[("evt_1".into(), seq_only(4))])
            .await
            .unwrap();
        f.hot
            .put_projected(&t, "s", sample_projection(4))
            .await
            .unwrap();
        assert_eq!(f.hot.log_head(&t, "s").await.unwrap(), Some(4));
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert_eq!(f.hot.log_head(&t, "s").await.unwrap(), None);
        assert_eq!(
            f.hot
                .accepted_event(&t, "evt_1")
                .await
                .unwrap()
                .map(|a| a.seq),
            None
        );
        assert_eq!(f.hot.projected(&t, "s").await.unwrap(), None);
        // After a miss the caller reseeds from the projections with a compare-and-set on `None`.
        assert!(f
            .hot
            .compare_and_set_log_head(&t, "s", None, 4)
            .await
            .unwrap());
    }

    #[tokio::test]
    async fn unreadable_values_are_errors_that_do_not_quote_them() {
        let Some(f) = redis().await else { return };
        let t = f.ready_tenant("corrupt").await;
        let mut con = connection(&redis_url().unwrap());
        let secret = "secret-payload-7f3a";
        let _: () = ::redis::cmd("SET")
            .arg(RedisHotState::head_key(&t, "s"))
            .arg(secret)
            .query(&mut con)
            .unwrap();
        let _: () = ::redis::cmd("SET")
            .arg(RedisHotState::projected_key(&t, "s"))
            .arg(format!("{{\"projected_seq\": \"{secret}\"}}"))
            .query(&mut con)
            .unwrap();
        let _: () = ::redis::cmd("HSET")
            .arg(RedisHotState::accepted_key(&t, "evt_1"))
            .arg("field")
            .arg(secret)
            .query(&mut con)
            .unwrap();

        let head = f.hot.log_head(&t, "s").await.unwrap_err();
        assert!(matches!(head, Error::Corrupt(_)), "{head:?}");
        let projected = f.hot.projected(&t, "s").await.unwrap_err();
        assert!(matches!(projected, Error::Corrupt(_)), "{projected:?}");
        // GET on a hash: the server refuses (WRONGTYPE).
        let accepted = f.hot.accepted_event(&t, "evt_1").await.unwrap_err();
        assert!(matches!(accepted, Error::Unavailable(_)), "{accepted:?}");
        // The script compares strings: a damaged head never matches, so nothing is overwritten.
        assert!(!f
            .hot
            .compare_and_set_log_head(&t, "s", Some(1), 2)
            .await
            .unwrap());

        for (op, err) in [
            ("log_head", head),
            ("projected", projected),
            ("accepted_event", accepted),
        ] {
            let text = format!("{err} {err:?}");
            assert!(text.contains(op), "the error names the operation: {text}");
            assert!(!text.contains(secret), "the error quotes the value: {text}");
        }
    }
}

/// A login the server refuses fails the open with an error retrying does not fix (a service
/// exits with it at startup instead of waiting).
#[tokio::test]
async fn a_refused_login_is_not_transient() {
    let Some(url) = redis_url() else {
        return;
    };
    // The test server has no password: a login with one is refused.
    let url = url.replacen("redis://", "redis://strata:hunter2@", 1);
    let err = strata_hot::open(&url).await.unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
}
