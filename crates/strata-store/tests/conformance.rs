//! One conformance suite for the [`ProjectionStore`] port, run against every backend: each test
//! body below is instantiated for SQLite (a temporary file) and for PostgreSQL (a fresh database
//! per test on the server `STRATA_TEST_POSTGRES_URL` names, dropped afterwards).
//!
//! Without `STRATA_TEST_POSTGRES_URL` the PostgreSQL instances are skipped with a message, except
//! under `CI`, where a missing server is a failure. Start one with
//! `scripts/services.sh start; source /tmp/strata-services/env`.
//!
//! The rows are never written by hand: every batch comes from folding real events with
//! [`strata_core::projection::apply`], as the projector does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use strata_core::assembly::Snapshot;
use strata_core::projection::{apply, Change, LogPosition, SessionFold, ToolStatus};
use strata_core::tokens::TokenCounter;
use strata_core::{Event, Payload};
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::{Error, Offsets, ProjectionBatch, ProjectionStore};

const GROUP: &str = "projector";

// ---------------------------------------------------------------------------------------------
// Backends

/// A store under test and its "fail the next commit" hook.
struct Subject {
    store: Arc<dyn ProjectionStore>,
    fail_next_commit: Box<dyn Fn() + Send + Sync>,
}

/// Makes fresh, empty stores of one backend, and cleans up after them.
enum Backend {
    Sqlite(tempfile::TempDir),
    Postgres {
        admin_url: String,
        databases: Mutex<Vec<String>>,
    },
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Backend {
    fn sqlite() -> Backend {
        Backend::Sqlite(tempfile::tempdir().unwrap())
    }

    /// The PostgreSQL backend, or `None` (after saying why) when no server is configured.
    fn postgres() -> Option<Backend> {
        match std::env::var("STRATA_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => Some(Backend::Postgres {
                admin_url: url,
                databases: Mutex::new(Vec::new()),
            }),
            _ if std::env::var_os("CI").is_some() => panic!(
                "STRATA_TEST_POSTGRES_URL is not set under CI: the PostgreSQL server is missing \
                 (scripts/services.sh start; source /tmp/strata-services/env)"
            ),
            _ => {
                eprintln!("skipping postgres conformance: STRATA_TEST_POSTGRES_URL is not set");
                None
            }
        }
    }

    /// The URL of a fresh, empty store (for [`strata_store::open`]).
    async fn fresh_url(&self) -> String {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        match self {
            Backend::Sqlite(dir) => {
                format!("sqlite://{}", dir.path().join(format!("{n}.db")).display())
            }
            Backend::Postgres {
                admin_url,
                databases,
            } => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos();
                let name = format!("strata_test_{}_{nanos}_{n}", std::process::id());
                let mut admin = PgConnection::connect(admin_url)
                    .await
                    .expect("connect to STRATA_TEST_POSTGRES_URL");
                // `Executor::execute` (a boxed, Send future) rather than `raw_sql(..).execute`,
                // whose future the compiler cannot prove Send inside a spawned test body.
                admin
                    .execute(format!("CREATE DATABASE {name}").as_str())
                    .await
                    .expect("create a test database");
                admin.close().await.ok();
                databases.lock().unwrap().push(name.clone());
                format!("{}?max_connections=4", with_database(admin_url, &name))
            }
        }
    }

    /// A fresh, empty store.
    async fn open(&self) -> Subject {
        let url = self.fresh_url().await;
        match self {
            Backend::Sqlite(_) => {
                let store = Arc::new(
                    SqliteStore::open(url.strip_prefix("sqlite://").unwrap())
                        .await
                        .unwrap(),
                );
                let hook = store.clone();
                Subject {
                    store,
                    fail_next_commit: Box::new(move || hook.fail_next_commit()),
                }
            }
            Backend::Postgres { .. } => {
                let store = Arc::new(PgStore::open(&url).await.unwrap());
                let hook = store.clone();
                Subject {
                    store,
                    fail_next_commit: Box::new(move || hook.fail_next_commit()),
                }
            }
        }
    }

    /// Drops the databases this backend created (best effort).
    async fn clean_up(&self) {
        let Backend::Postgres {
            admin_url,
            databases,
        } = self
        else {
            return;
        };
        let names = std::mem::take(&mut *databases.lock().unwrap());
        let Ok(mut admin) = PgConnection::connect(admin_url).await else {
            return;
        };
        for name in names {
            let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
            if let Err(e) = admin.execute(drop.as_str()).await {
                eprintln!("could not drop test database {name}: {e}");
            }
        }
        admin.close().await.ok();
    }
}

/// `url` with its database replaced by `name` (query parameters kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[authority_start..]
        .find('/')
        .map(|i| authority_start + i)
        .unwrap_or(base.len());
    let mut out = format!("{}/{name}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Runs a test body against a backend, then cleans up even when the body panics.
async fn run<F, Fut>(backend: Backend, body: F)
where
    F: FnOnce(Arc<Backend>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let backend = Arc::new(backend);
    let outcome = tokio::spawn(body(backend.clone())).await;
    backend.clean_up().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

macro_rules! conformance {
    ($($body:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $body() {
                    crate::run(crate::Backend::sqlite(), crate::$body).await;
                }
            )+
        }

        mod postgres {
            $(
                #[tokio::test]
                async fn $body() {
                    if let Some(backend) = crate::Backend::postgres() {
                        crate::run(backend, crate::$body).await;
                    }
                }
            )+
        }
    };
}

conformance!(
    open_by_url,
    commit_batch_writes_rows_folds_and_offsets,
    injected_failure_leaves_nothing,
    projected_event_ids_and_event_seq,
    snapshot_window_and_tool_pairs,
    snapshot_tool_call_lifecycle,
    snapshot_keeps_open_calls_older_than_window,
    snapshot_follows_branch_lineage,
    snapshot_of_unknown_session_or_branch_is_none,
    events_paging,
    tenant_isolation,
    assembly_round_trip,
    sessions_listing,
    api_keys,
    api_key_lifecycle,
    fingerprint_equal_for_equal_content,
    text_with_nul_projects,
    snapshot_memories_and_compaction,
    snapshot_memories_are_the_newest_and_found_by_the_sessions_project,
    artifact_classes_are_those_of_the_tenants_references,
    withheld_results_are_the_confidential_and_restricted_in_the_range,
);

// ---------------------------------------------------------------------------------------------
// Events, folded as the projector folds them

/// Counts words: the suite checks that stores keep what the fold says, not the tokenizer.
struct Words;

impl TokenCounter for Words {
    fn count(&self, text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }

    fn name(&self) -> &'static str {
        "words"
    }
}

/// One session's events, folded into the changes and fold a projector batch would carry.
struct Feed {
    fold: SessionFold,
    partition: u32,
    next_offset: u64,
    seqs: HashMap<String, u64>,
    pending: Vec<Change>,
    /// Canonical JSON of every event pushed, in order.
    events: Vec<Value>,
}

impl Feed {
    fn new(tenant: &str, session: &str, partition: u32) -> Feed {
        Feed {
            fold: SessionFold::new(tenant, session),
            partition,
            next_offset: 0,
            seqs: HashMap::new(),
            pending: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Folds one event (id `<session>-<seq>`) and returns its id.
    fn push(&mut self, branch: &str, ty: &str, payload: Value) -> String {
        self.push_by(branch, None, ty, payload)
    }

    /// [`Feed::push`] of an event a named participant wrote.
    fn push_by(
        &mut self,
        branch: &str,
        participant: Option<&str>,
        ty: &str,
        payload: Value,
    ) -> String {
        let seq = self.fold.head_seq + 1;
        let id = format!("{}-{seq}", self.fold.session_id);
        let mut event = json!({"event_id": id, "tenant_id": self.fold.tenant_id,
            "session_id": self.fold.session_id, "branch_id": branch, "seq": seq,
            "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload});
        if let Some(participant) = participant {
            event["participant_id"] = json!(participant);
        }
        let event = Event::from_json(event, None).expect("a valid event");
        let fork_seq = match &event.payload {
            Payload::BranchForked(p) => self.seqs.get(&p.from_event_id).copied(),
            _ => None,
        };
        let position = LogPosition {
            partition: self.partition,
            offset: self.next_offset,
        };
        self.pending
            .extend(apply(&mut self.fold, &event, position, fork_seq, &Words));
        self.next_offset += 1;
        self.seqs.insert(id.clone(), seq);
        self.events.push(event.to_json());
        id
    }

    fn seq(&self, event_id: &str) -> u64 {
        self.seqs[event_id]
    }

    fn started(&mut self) -> String {
        self.push(
            "main",
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "gpt-4o"},
                "context_window_tokens": 128000, "reserved_output_tokens": 8000,
                "system_prompt": "be useful",
                "tools": [{"name": "run_tests", "description": "runs the tests"}]}),
        )
    }

    fn user(&mut self, branch: &str, message_id: &str, text: &str) -> String {
        self.push(
            branch,
            "UserPromptSubmitted",
            json!({"message_id": message_id, "text": text}),
        )
    }

    /// An assistant message asking for `calls` (tool call ids, tool `run_tests`).
    fn assistant(&mut self, branch: &str, message_id: &str, text: &str, calls: &[&str]) -> String {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| json!({"tool_call_id": c, "name": "run_tests", "args": {"call": c}}))
            .collect();
        self.push(
            branch,
            "ModelResponseReceived",
            json!({"message_id": message_id, "text": text, "tool_calls": calls}),
        )
    }

    fn finished(&mut self, branch: &str, call: &str, output: &str) -> String {
        self.push(
            branch,
            "ToolCallFinished",
            json!({"tool_call_id": call, "output": output}),
        )
    }

    /// The pending changes as one batch of this session alone.
    fn batch(&mut self) -> ProjectionBatch {
        batch(&mut [self])
    }
}

/// The pending changes of several sessions as one batch.
fn batch(feeds: &mut [&mut Feed]) -> ProjectionBatch {
    let mut out = ProjectionBatch {
        group: GROUP.into(),
        ..ProjectionBatch::default()
    };
    for f in feeds.iter_mut() {
        out.changes.append(&mut f.pending);
        out.folds.push(f.fold.clone());
        out.offsets.insert(f.partition, f.next_offset);
    }
    out
}

async fn snapshot(store: &dyn ProjectionStore, feed: &Feed, branch: &str, window: u32) -> Snapshot {
    store
        .snapshot(
            &feed.fold.tenant_id,
            &feed.fold.session_id,
            branch,
            None,
            window,
        )
        .await
        .unwrap()
        .expect("a snapshot of a known session and branch")
}

fn seqs(s: &Snapshot) -> Vec<u64> {
    s.messages.iter().map(|m| m.seq).collect()
}

fn call_ids(calls: &[strata_core::assembly::ToolPair]) -> Vec<&str> {
    calls.iter().map(|c| c.tool_call_id.as_str()).collect()
}

async fn all_events(store: &dyn ProjectionStore, tenant: &str, session: &str) -> Vec<Value> {
    store.events(tenant, session, 0, 10_000).await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// The bodies

async fn open_by_url(backend: Arc<Backend>) {
    let url = backend.fresh_url().await;
    let store = strata_store::open(&url).await.unwrap();
    store.ping().await.unwrap();
    assert!(store.offsets(GROUP).await.unwrap().is_empty());
    // Opening again finds the migrated schema and keeps the data.
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    store.commit_batch(feed.batch()).await.unwrap();
    drop(store);
    let again = strata_store::open(&url).await.unwrap();
    assert_eq!(again.sessions("acme").await.unwrap().len(), 1);
}

async fn commit_batch_writes_rows_folds_and_offsets(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    store.ping().await.unwrap();
    assert!(store.session_fold("acme", "s1").await.unwrap().is_none());

    let mut feed = Feed::new("acme", "s1", 2);
    feed.started();
    feed.user("main", "u1", "fix the bug");
    feed.assistant("main", "a1", "running the tests", &["c1"]);
    store.commit_batch(feed.batch()).await.unwrap();

    assert_eq!(store.offsets(GROUP).await.unwrap(), Offsets::from([(2, 3)]));
    assert!(store.offsets("another-group").await.unwrap().is_empty());
    assert_eq!(
        store.session_fold("acme", "s1").await.unwrap().as_ref(),
        Some(&feed.fold)
    );
    assert_eq!(all_events(store, "acme", "s1").await, feed.events);
    let snap = snapshot(store, &feed, "main", 10).await;
    assert_eq!(seqs(&snap), [2, 3]);
    assert_eq!(snap.messages[1].tool_calls[0].status, ToolStatus::Pending);

    // The next batch updates the fold and the call, and advances the offsets.
    feed.finished("main", "c1", "ok");
    let mut other = Feed::new("acme", "s2", 5);
    other.started();
    store
        .commit_batch(batch(&mut [&mut feed, &mut other]))
        .await
        .unwrap();
    assert_eq!(
        store.offsets(GROUP).await.unwrap(),
        Offsets::from([(2, 4), (5, 1)])
    );
    let fold = store.session_fold("acme", "s1").await.unwrap().unwrap();
    assert_eq!(fold, feed.fold);
    assert!(fold.open_tool_calls.is_empty());
    assert_eq!(
        store.session_fold("acme", "s2").await.unwrap().as_ref(),
        Some(&other.fold)
    );
    let snap = snapshot(store, &feed, "main", 10).await;
    let call = &snap.messages[1].tool_calls[0];
    assert_eq!(call.status, ToolStatus::Succeeded);
    assert_eq!(call.output.as_deref(), Some("ok"));
    assert_eq!(call.result_event_id.as_deref(), Some("s1-4"));
}

async fn injected_failure_leaves_nothing(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.assistant("main", "a1", "calling", &["c1"]);
    store.commit_batch(feed.batch()).await.unwrap();
    let before = store.fingerprint().await.unwrap();
    let fold_before = feed.fold.clone();

    // A batch with every kind of write: rows, an update of an earlier row, a fold, offsets.
    feed.finished("main", "c1", "ok");
    feed.user("main", "u1", "more");
    feed.assistant("main", "a2", "again", &["c2"]);
    let mut other = Feed::new("acme", "s2", 1);
    other.started();
    let failing = batch(&mut [&mut feed, &mut other]);
    (s.fail_next_commit)();
    let err = store.commit_batch(failing.clone()).await.unwrap_err();
    assert!(matches!(err, Error::Injected), "{err}");

    assert_eq!(store.fingerprint().await.unwrap(), before);
    assert_eq!(store.offsets(GROUP).await.unwrap(), Offsets::from([(0, 2)]));
    assert_eq!(
        store.session_fold("acme", "s1").await.unwrap(),
        Some(fold_before)
    );
    assert!(store.session_fold("acme", "s2").await.unwrap().is_none());
    assert_eq!(all_events(store, "acme", "s1").await.len(), 2);
    let ids: Vec<String> = ["s1-3", "s1-4", "s1-5"].map(String::from).to_vec();
    assert!(store
        .projected_event_ids("acme", &ids)
        .await
        .unwrap()
        .is_empty());
    let snap = snapshot(store, &feed, "main", 10).await;
    assert_eq!(snap.messages[0].tool_calls[0].status, ToolStatus::Pending);

    // The hook fires once: the same batch then commits, as a restarted projector's would.
    store.commit_batch(failing).await.unwrap();
    assert_eq!(
        store.offsets(GROUP).await.unwrap(),
        Offsets::from([(0, 5), (1, 1)])
    );
    assert_eq!(all_events(store, "acme", "s1").await, feed.events);
    assert_ne!(store.fingerprint().await.unwrap(), before);
}

async fn projected_event_ids_and_event_seq(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    for i in 0..450 {
        feed.user("main", &format!("u{i}"), "hello");
    }
    store.commit_batch(feed.batch()).await.unwrap();
    let mut other = Feed::new("globex", "g1", 1);
    other.started();
    other.user("main", "u", "hi");
    store.commit_batch(other.batch()).await.unwrap();

    // More ids than one IN list holds, known and unknown mixed.
    let asked: Vec<String> = (1..=900).map(|i| format!("s1-{i}")).collect();
    let found = store.projected_event_ids("acme", &asked).await.unwrap();
    let expected: HashSet<String> = (1..=451).map(|i| format!("s1-{i}")).collect();
    assert_eq!(found, expected);
    assert!(store
        .projected_event_ids("acme", &[])
        .await
        .unwrap()
        .is_empty());
    // Another tenant's events are not this tenant's.
    let theirs = vec!["g1-1".to_owned(), "g1-2".to_owned()];
    assert!(store
        .projected_event_ids("acme", &theirs)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.projected_event_ids("globex", &theirs).await.unwrap(),
        theirs.iter().cloned().collect()
    );

    assert_eq!(
        store.event_seq("acme", "s1", "s1-17").await.unwrap(),
        Some(17)
    );
    assert_eq!(store.event_seq("acme", "s1", "s1-999").await.unwrap(), None);
    assert_eq!(
        store.event_seq("acme", "other", "s1-17").await.unwrap(),
        None
    );
    assert_eq!(
        store.event_seq("globex", "s1", "s1-17").await.unwrap(),
        None
    );
    assert_eq!(
        store.event_seq("globex", "g1", "g1-2").await.unwrap(),
        Some(2)
    );
}

async fn snapshot_window_and_tool_pairs(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    let started = feed.started(); // 1
    feed.push("main", "StateUpdated", json!({"goal": "green tests"})); // 2
    feed.user("main", "u1", "fix the bug"); // 3
    feed.assistant("main", "a1", "looking", &["c1"]); // 4
    feed.finished("main", "c1", "ok 1"); // 5
    feed.assistant("main", "a2", "again", &["c2", "c0"]); // 6
    feed.push(
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "c2", "output": "FAILED", "is_error": true}),
    ); // 7
    feed.push(
        "main",
        "ToolCallRequested",
        json!({"tool_call_id": "c3", "name": "read_file", "args": {"path": "src/lib.rs"}}),
    ); // 8
    feed.finished("main", "c3", "fn main() {}"); // 9
    feed.finished("main", "c0", "ok 0"); // 10
    feed.user("main", "u2", "thanks"); // 11
    feed.assistant("main", "a3", "done", &[]); // 12
    store.commit_batch(feed.batch()).await.unwrap();

    let all = snapshot(store, &feed, "main", 100).await;
    assert_eq!(seqs(&all), [3, 4, 6, 8, 11, 12]);
    assert_eq!(all.messages_before_window, 0);
    assert_eq!(all.tenant_id, "acme");
    assert_eq!(all.session_id, "s1");
    assert_eq!(all.branch_id, "main");
    assert_eq!(all.participant_id, "agent");
    assert_eq!(all.head_seq, 12);
    assert_eq!(all.model, "gpt-4o");
    assert_eq!(all.context_window_tokens, 128000);
    assert_eq!(all.reserved_output_tokens, 8000);
    assert_eq!(all.system_prompt.as_deref(), Some("be useful"));
    assert!(all.system_prompt_tokens > 0);
    assert_eq!(
        all.session_started_event_id.as_deref(),
        Some(started.as_str())
    );
    assert_eq!(all.tools.len(), 1);
    assert_eq!(all.tools[0].name, "run_tests");
    assert!(all.tools_tokens > 0);
    assert_eq!(all.state, feed.fold.branches["main"].state);
    assert_eq!(all.state.goal.as_ref().unwrap().text, "green tests");
    assert_eq!(
        all.transcript_tokens,
        feed.fold.branches["main"].transcript_tokens
    );
    assert_eq!(all.orphan_results, 0);
    assert!(all.loose_tool_calls.is_empty());

    let u1 = &all.messages[0];
    assert_eq!(
        (u1.role.as_str(), u1.text.as_str()),
        ("user", "fix the bug")
    );
    assert_eq!(u1.event_id, "s1-3");
    assert_eq!(u1.participant_id, "agent");
    assert_eq!(u1.tokens, feed_tokens("fix the bug"));
    assert!(u1.tool_calls.is_empty());
    let a1 = &all.messages[1];
    assert_eq!(call_ids(&a1.tool_calls), ["c1"]);
    let c1 = &a1.tool_calls[0];
    assert_eq!(c1.name, "run_tests");
    assert_eq!(c1.args, r#"{"call":"c1"}"#);
    assert_eq!(c1.request_event_id, "s1-4");
    assert_eq!(c1.request_seq, 4);
    assert!(c1.call_tokens > 0);
    assert_eq!(c1.status, ToolStatus::Succeeded);
    assert_eq!(c1.result_event_id.as_deref(), Some("s1-5"));
    assert_eq!(c1.output.as_deref(), Some("ok 1"));
    assert_eq!(c1.output_bytes, Some(4));
    assert_eq!(c1.output_tokens, 2);
    assert!(!c1.retryable);
    // Two calls of one response keep the order the model asked for them, whatever the
    // order of their results.
    let a2 = &all.messages[2];
    assert_eq!(call_ids(&a2.tool_calls), ["c2", "c0"]);
    assert_eq!(a2.tool_calls[0].status, ToolStatus::Errored);
    assert_eq!(a2.tool_calls[0].output.as_deref(), Some("FAILED"));
    assert_eq!(a2.tool_calls[1].status, ToolStatus::Succeeded);
    // A call requested without a response message stands as its own step.
    let step = &all.messages[3];
    assert_eq!(step.role, "assistant");
    assert_eq!(step.text, "");
    assert_eq!(step.event_id, "s1-8");
    assert_eq!(call_ids(&step.tool_calls), ["c3"]);
    assert_eq!(step.tool_calls[0].name, "read_file");
    assert_eq!(step.tool_calls[0].output.as_deref(), Some("fn main() {}"));

    // The window holds the newest messages; older ones are counted, not loaded.
    let window = snapshot(store, &feed, "main", 3).await;
    assert_eq!(seqs(&window), [6, 8, 11, 12]);
    assert_eq!(window.messages_before_window, 2);
    assert_eq!(window.messages[0], all.messages[2]);
    assert_eq!(window.messages[1], all.messages[3]);
    assert!(window.loose_tool_calls.is_empty());

    let one = snapshot(store, &feed, "main", 1).await;
    assert_eq!(seqs(&one), [12]);
    assert_eq!(one.messages_before_window, 4);

    // A participant asked for is the snapshot's participant.
    let theirs = store
        .snapshot("acme", "s1", "main", Some("reviewer"), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(theirs.participant_id, "reviewer");
}

fn feed_tokens(text: &str) -> u64 {
    Words.count(text) + strata_core::tokens::MESSAGE_OVERHEAD_TOKENS
}

async fn snapshot_tool_call_lifecycle(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.assistant(
        "main",
        "a1",
        "doing four things",
        &["f1", "e1", "d1", "big1"],
    );
    store.commit_batch(feed.batch()).await.unwrap();
    feed.push(
        "main",
        "ToolCallFailed",
        json!({"tool_call_id": "f1", "error": "compiler crashed\nsignal 11", "retryable": true}),
    );
    feed.push(
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "e1", "output": "error: bad", "is_error": true,
            "privacy_class": "confidential"}),
    );
    feed.push(
        "main",
        "ApprovalRequested",
        json!({"approval_id": "ap1", "tool_call_id": "d1"}),
    );
    store.commit_batch(feed.batch()).await.unwrap();
    let snap = snapshot(store, &feed, "main", 10).await;
    assert_eq!(
        snap.messages[0].tool_calls[2].status,
        ToolStatus::AwaitingApproval
    );
    assert_eq!(snap.messages[0].tool_calls[3].status, ToolStatus::Pending);

    feed.push(
        "main",
        "ApprovalDenied",
        json!({"approval_id": "ap1", "tool_call_id": "d1"}),
    );
    let sha = "ab".repeat(32);
    feed.push(
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "big1", "output_ref": "file:///blobs/ab", "output_sha256": sha,
            "output_bytes": 100000, "output_preview": "first lines", "privacy_class": "internal"}),
    );
    feed.push(
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "ghost", "output": "an orphan"}),
    );
    store.commit_batch(feed.batch()).await.unwrap();

    let snap = snapshot(store, &feed, "main", 10).await;
    assert_eq!(seqs(&snap), [2]);
    assert_eq!(snap.orphan_results, 1);
    let calls = &snap.messages[0].tool_calls;
    assert_eq!(call_ids(calls), ["f1", "e1", "d1", "big1"]);
    let (f1, e1, d1, big1) = (&calls[0], &calls[1], &calls[2], &calls[3]);
    assert_eq!(f1.status, ToolStatus::Failed);
    assert_eq!(f1.error.as_deref(), Some("compiler crashed\nsignal 11"));
    assert!(f1.retryable);
    assert_eq!(f1.output, None);
    assert_eq!(f1.output_bytes, None);
    assert_eq!(e1.status, ToolStatus::Errored);
    assert_eq!(e1.output.as_deref(), Some("error: bad"));
    assert_eq!(
        e1.privacy_class,
        Some(strata_core::payload::PrivacyClass::Confidential)
    );
    assert!(!e1.retryable);
    assert_eq!(d1.status, ToolStatus::Denied);
    assert_eq!(d1.result_event_id, None);
    assert_eq!(big1.status, ToolStatus::Succeeded);
    assert_eq!(big1.output, None);
    assert_eq!(big1.output_ref.as_deref(), Some("file:///blobs/ab"));
    assert_eq!(big1.output_preview.as_deref(), Some("first lines"));
    assert_eq!(big1.output_bytes, Some(100000));
    assert_eq!(big1.output_tokens, 25000);
    assert_eq!(big1.preview_tokens, 2);
    assert_eq!(
        big1.privacy_class,
        Some(strata_core::payload::PrivacyClass::Internal)
    );
    // The large output is an artifact.
    assert_eq!(store.fingerprint().await.unwrap()["artifacts"].0, 1);
}

async fn snapshot_keeps_open_calls_older_than_window(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started(); // 1
    feed.user("main", "u1", "deploy it"); // 2
    feed.assistant("main", "a1", "deploying", &["z-deploy"]); // 3, stays open
    feed.push(
        "main",
        "ToolCallRequested",
        json!({"tool_call_id": "a-approve", "name": "rm", "args": {}}),
    ); // 4, stays open
    feed.push(
        "main",
        "ApprovalRequested",
        json!({"approval_id": "ap", "tool_call_id": "a-approve"}),
    ); // 5
    feed.assistant("main", "a2", "checking", &["m-done"]); // 6
    feed.finished("main", "m-done", "fine"); // 7
    for i in 0..5 {
        feed.user("main", &format!("u{i}"), "still there?"); // 8..12
    }
    store.commit_batch(feed.batch()).await.unwrap();

    let snap = snapshot(store, &feed, "main", 3).await;
    assert_eq!(seqs(&snap), [10, 11, 12]);
    assert_eq!(snap.messages_before_window, 5);
    // Still open and older than the window: loaded by id, in id order.
    assert_eq!(call_ids(&snap.loose_tool_calls), ["a-approve", "z-deploy"]);
    assert_eq!(
        snap.loose_tool_calls[0].status,
        ToolStatus::AwaitingApproval
    );
    assert_eq!(snap.loose_tool_calls[0].request_seq, 4);
    assert_eq!(snap.loose_tool_calls[1].status, ToolStatus::Pending);
    assert_eq!(snap.loose_tool_calls[1].request_seq, 3);
    assert!(snap.messages.iter().all(|m| m.tool_calls.is_empty()));

    // Once the window reaches back to them they are attached where they belong.
    let all = snapshot(store, &feed, "main", 100).await;
    assert!(all.loose_tool_calls.is_empty());
    assert_eq!(seqs(&all), [2, 3, 4, 6, 8, 9, 10, 11, 12]);
    assert_eq!(call_ids(&all.messages[1].tool_calls), ["z-deploy"]);
    assert_eq!(call_ids(&all.messages[2].tool_calls), ["a-approve"]);
    assert_eq!(call_ids(&all.messages[3].tool_calls), ["m-done"]);
}

async fn snapshot_follows_branch_lineage(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started(); // 1
    feed.user("main", "m1", "one"); // 2
    let m2 = feed.assistant("main", "m2", "two", &["cm"]); // 3
    feed.finished("main", "cm", "ok"); // 4
    feed.push("main", "StateUpdated", json!({"goal": "the main goal"})); // 5
                                                                         // Fork `alt` at m2: it sees main up to seq 3 only.
    feed.push(
        "main",
        "BranchForked",
        json!({"new_branch_id": "alt", "from_event_id": m2}),
    ); // 6
    feed.user("main", "m3", "main goes on"); // 7
    feed.assistant("main", "m4", "calling", &["late"]); // 8
    let a1 = feed.user("alt", "a1", "alt starts"); // 9
    feed.push("alt", "StateUpdated", json!({"goal": "the alt goal"})); // 10
                                                                       // Fork `alt2` from alt at a1: alt up to 9, main up to 3 (the lower bound).
    feed.push(
        "alt",
        "BranchForked",
        json!({"new_branch_id": "alt2", "from_event_id": a1, "kind": "what_if"}),
    ); // 11
    feed.user("alt", "a2", "alt goes on"); // 12
    feed.user("alt2", "b1", "what if"); // 13
    feed.user("main", "m5", "main again"); // 14
    store.commit_batch(feed.batch()).await.unwrap();
    assert_eq!(feed.fold.branches["alt"].fork_seq, Some(feed.seq(&m2)));
    assert_eq!(feed.fold.branches["alt2"].fork_seq, Some(feed.seq(&a1)));
    assert_eq!((feed.seq(&m2), feed.seq(&a1)), (3, 9));

    let main = snapshot(store, &feed, "main", 100).await;
    assert_eq!(seqs(&main), [2, 3, 7, 8, 14]);
    assert_eq!(call_ids(&main.messages[1].tool_calls), ["cm"]);
    assert_eq!(call_ids(&main.messages[3].tool_calls), ["late"]);
    assert_eq!(main.state.goal.as_ref().unwrap().text, "the main goal");

    let alt = snapshot(store, &feed, "alt", 100).await;
    assert_eq!(seqs(&alt), [2, 3, 9, 12]);
    // The parent's call before the fork point is part of the fork's history, with its result.
    assert_eq!(call_ids(&alt.messages[1].tool_calls), ["cm"]);
    assert_eq!(alt.messages[1].tool_calls[0].status, ToolStatus::Succeeded);
    assert!(alt.loose_tool_calls.is_empty());
    assert_eq!(alt.state.goal.as_ref().unwrap().text, "the alt goal");
    assert_eq!(
        alt.transcript_tokens,
        feed.fold.branches["alt"].transcript_tokens
    );

    let alt2 = snapshot(store, &feed, "alt2", 100).await;
    assert_eq!(seqs(&alt2), [2, 3, 9, 13]);
    assert_eq!(alt2.branch_id, "alt2");

    // The window counts the lineage's messages only.
    let window = snapshot(store, &feed, "alt2", 2).await;
    assert_eq!(seqs(&window), [9, 13]);
    assert_eq!(window.messages_before_window, 2);

    // Each branch's own head (what a resumed worker reads), not its ancestors'.
    let heads: Vec<(String, u64, u64)> = store
        .branch_heads("acme", "s1")
        .await
        .unwrap()
        .into_iter()
        .map(|h| {
            assert!(!h.last_event_at.is_empty(), "{h:?}");
            (h.branch_id, h.head_seq, h.events)
        })
        .collect();
    assert_eq!(
        heads,
        [
            ("alt".to_owned(), 12, 4),
            ("alt2".to_owned(), 13, 1),
            ("main".to_owned(), 14, 9)
        ]
    );
    assert!(store.branch_heads("globex", "s1").await.unwrap().is_empty());
    // The session head's time is the one the session list shows.
    let listed = store
        .sessions_listing("acme", None, 100, None)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.session_id == "s1")
        .expect("listed");
    let main_head = store
        .branch_heads("acme", "s1")
        .await
        .unwrap()
        .into_iter()
        .find(|h| h.branch_id == "main")
        .expect("main");
    assert_eq!(listed.last_event_at, Some(main_head.last_event_at));
    assert!(store
        .session_provider("acme", "s1")
        .await
        .unwrap()
        .is_some());
    assert_eq!(store.session_provider("globex", "s1").await.unwrap(), None);
}

async fn snapshot_of_unknown_session_or_branch_is_none(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    assert!(store
        .snapshot("acme", "nope", "main", None, 10)
        .await
        .unwrap()
        .is_none());
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    store.commit_batch(feed.batch()).await.unwrap();
    assert!(store
        .snapshot("acme", "s1", "nope", None, 10)
        .await
        .unwrap()
        .is_none());
    // A session whose first event is not SessionStarted has a snapshot without its facts.
    let mut early = Feed::new("acme", "s2", 1);
    early.user("main", "u1", "hello");
    store.commit_batch(early.batch()).await.unwrap();
    let snap = snapshot(store, &early, "main", 10).await;
    assert_eq!(snap.model, "unknown");
    assert_eq!(snap.session_started_event_id, None);
    assert!(snap.tools.is_empty());
    assert_eq!(seqs(&snap), [1]);
}

async fn events_paging(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    for i in 0..24 {
        feed.user("main", &format!("u{i}"), &format!("message {i}"));
    }
    store.commit_batch(feed.batch()).await.unwrap();

    let mut pages = Vec::new();
    let mut after = 0;
    loop {
        let page = store.events("acme", "s1", after, 10).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 10);
        after = page.last().unwrap()["seq"].as_u64().unwrap();
        pages.push(page);
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
    assert_eq!(pages.concat(), feed.events);
    assert_eq!(
        store.events("acme", "s1", 20, 100).await.unwrap(),
        feed.events[20..]
    );
    assert!(store.events("acme", "s1", 25, 10).await.unwrap().is_empty());
    assert!(store
        .events("acme", "nope", 0, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store.events("acme", "s1", 0, 0).await.unwrap().is_empty());
}

async fn tenant_isolation(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    // Two tenants with the same session id and the same event ids.
    let mut a = Feed::new("tenant-a", "s1", 0);
    a.started();
    a.user("main", "u1", "a's secret");
    a.push(
        "main",
        "ContextBuilt",
        json!({"assembly_id": "asm-a", "context_tokens": 10, "transcript_tokens": 20,
            "assembly": {"owner": "a"}}),
    );
    a.user("main", "u2", "a's second");
    let mut b = Feed::new("tenant-b", "s1", 1);
    b.started();
    b.user("main", "u1", "b's own");
    store
        .commit_batch(batch(&mut [&mut a, &mut b]))
        .await
        .unwrap();

    assert_eq!(all_events(store, "tenant-a", "s1").await, a.events);
    assert_eq!(all_events(store, "tenant-b", "s1").await, b.events);
    assert_eq!(
        store.session_fold("tenant-b", "s1").await.unwrap(),
        Some(b.fold.clone())
    );
    let sessions = store.sessions("tenant-b").await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!((sessions[0].head_seq, sessions[0].event_count), (2, 2));

    let snap = snapshot(store, &b, "main", 100).await;
    assert_eq!(seqs(&snap), [2]);
    assert_eq!(snap.messages[0].text, "b's own");
    assert!(store.assembly("tenant-b", "asm-a").await.unwrap().is_none());
    assert!(store.assembly("tenant-a", "asm-a").await.unwrap().is_some());
    let a_only = vec!["s1-3".to_owned(), "s1-4".to_owned()];
    assert!(store
        .projected_event_ids("tenant-b", &a_only)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.event_seq("tenant-b", "s1", "s1-4").await.unwrap(),
        None
    );

    // A tenant with nothing sees nothing.
    assert!(store.sessions("tenant-c").await.unwrap().is_empty());
    assert!(store
        .session_fold("tenant-c", "s1")
        .await
        .unwrap()
        .is_none());
    assert!(store
        .events("tenant-c", "s1", 0, 100)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .snapshot("tenant-c", "s1", "main", None, 10)
        .await
        .unwrap()
        .is_none());
}

async fn assembly_round_trip(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let record = json!({"zeta": 1, "alpha": [1.5, -2, 1e-7, 12345678901234567_u64],
        "nested": {"b": null, "a": "ünïcödé ✓ \"quoted\"\n"}, "empty": {}, "flag": true});
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.push(
        "main",
        "ContextBuilt",
        json!({"assembly_id": "asm-1", "context_tokens": 10, "transcript_tokens": 20,
            "assembly": record}),
    );
    feed.push(
        "main",
        "MemoryRecorded",
        json!({"memory_id": "mem-1", "scope": "project", "kind": "fact", "text": "uses tokio",
            "source_refs": ["s1-1"]}),
    );
    feed.push(
        "main",
        "MemoryRecorded",
        json!({"memory_id": "mem-2", "scope": "project", "kind": "fact", "text": "uses axum",
            "source_refs": ["s1-1"]}),
    );
    feed.push(
        "main",
        "MemorySuperseded",
        json!({"memory_id": "mem-1", "superseded_by": "mem-2"}),
    );
    feed.push(
        "main",
        "CompactionCompleted",
        json!({"compaction_id": "cmp-1", "first_event_id": "s1-1", "last_event_id": "s1-2",
            "first_kept_event_id": "s1-3", "tokens_before": 100, "tokens_after": 10,
            "summary": {"text": "short"}}),
    );
    store.commit_batch(feed.batch()).await.unwrap();

    let stored = store.assembly("acme", "asm-1").await.unwrap().unwrap();
    assert_eq!(stored, record);
    // Key order included.
    assert_eq!(stored.to_string(), record.to_string());
    assert!(store.assembly("acme", "asm-2").await.unwrap().is_none());
    let fp = store.fingerprint().await.unwrap();
    assert_eq!(fp["assemblies"].0, 1);
    assert_eq!(fp["memories"].0, 2);
    assert_eq!(fp["compactions"].0, 1);
}

async fn sessions_listing(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    assert!(store.sessions("acme").await.unwrap().is_empty());
    // Byte order: upper case before `_` before lower case.
    let ids = ["b-2", "B-1", "a_1", "_x", "a-10", "a-9"];
    for (i, id) in ids.iter().enumerate() {
        let mut feed = Feed::new("acme", id, i as u32);
        feed.started();
        for _ in 0..i {
            feed.user("main", "u", "hi");
        }
        store.commit_batch(feed.batch()).await.unwrap();
    }
    let listed = store.sessions("acme").await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(names, ["B-1", "_x", "a-10", "a-9", "a_1", "b-2"]);
    let b2 = &listed[5];
    assert_eq!((b2.head_seq, b2.event_count), (1, 1));
    let a9 = &listed[3];
    assert_eq!((a9.head_seq, a9.event_count), (6, 6));
    assert!(store.sessions("other").await.unwrap().is_empty());
    // Pages of two, each after the last id of the one before, give the same list.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store
            .sessions_page("acme", after.as_deref(), 2)
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some(last.session_id.clone());
        paged.extend(page);
    }
    assert_eq!(paged, listed);
    assert!(store
        .sessions_page("other", None, 10)
        .await
        .unwrap()
        .is_empty());

    // The listing: filtered by a plain substring of the id (no wildcards), with what a list shows.
    let mut feed = Feed::new("acme", "with-calls", 9);
    feed.started();
    feed.assistant("main", "a1", "", &["c1"]);
    store.commit_batch(feed.batch()).await.unwrap();
    let ids = |page: Vec<strata_store::SessionListing>| {
        page.into_iter().map(|s| s.session_id).collect::<Vec<_>>()
    };
    let found = store
        .sessions_listing("acme", None, 10, Some("a-"))
        .await
        .unwrap();
    assert_eq!(found[1].model.as_deref(), Some("gpt-4o"));
    assert_eq!(
        found[1].last_event_at.as_deref(),
        Some("2026-06-03T10:00:00Z")
    );
    assert_eq!((found[1].head_seq, found[1].fold.event_count), (6, 6));
    assert_eq!(ids(found), ["a-10", "a-9"]);
    let underscore = store
        .sessions_listing("acme", None, 10, Some("_"))
        .await
        .unwrap();
    assert_eq!(ids(underscore), ["_x", "a_1"]);
    assert!(store
        .sessions_listing("acme", None, 10, Some("%"))
        .await
        .unwrap()
        .is_empty());
    let calls = store
        .sessions_listing("acme", None, 10, Some("calls"))
        .await
        .unwrap();
    assert_eq!(calls[0].fold.open_tool_calls.len(), 1);
    assert_eq!(
        calls[0].participants.len(),
        1,
        "{:?}",
        calls[0].participants
    );
    let all = store
        .sessions_listing("acme", Some("a_1"), 10, None)
        .await
        .unwrap();
    assert_eq!(ids(all), ["b-2", "with-calls"]);
    // The search also finds a session by its model or by one of its participants.
    let mut feed = Feed::new("acme", "zz-review", 10);
    feed.started();
    feed.push_by(
        "main",
        Some("reviewer-bot"),
        "UserPromptSubmitted",
        json!({"message_id": "r1", "text": "looks fine"}),
    );
    store.commit_batch(feed.batch()).await.unwrap();
    let by_participant = store
        .sessions_listing("acme", None, 10, Some("viewer-b"))
        .await
        .unwrap();
    assert_eq!(ids(by_participant), ["zz-review"]);
    let by_model = store
        .sessions_listing("acme", None, 10, Some("gpt-4"))
        .await
        .unwrap();
    assert_eq!(by_model.len(), 8, "every session runs gpt-4o");
    assert!(store
        .sessions_listing("acme", None, 10, Some("claude"))
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .sessions_listing("other", None, 10, None)
        .await
        .unwrap()
        .is_empty());
}

async fn api_keys(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let key = strata_core::sha256_hex(b"sk-test");
    assert_eq!(store.tenant_for_key(&key).await.unwrap(), None);
    store
        .put_api_key(&key, "acme", "ci key", None)
        .await
        .unwrap();
    assert_eq!(
        store.tenant_for_key(&key).await.unwrap().as_deref(),
        Some("acme")
    );
    // Idempotent: registering the key again (even for another tenant) changes nothing.
    store
        .put_api_key(&key, "acme", "ci key", None)
        .await
        .unwrap();
    store
        .put_api_key(&key, "globex", "stolen", None)
        .await
        .unwrap();
    assert_eq!(
        store.tenant_for_key(&key).await.unwrap().as_deref(),
        Some("acme")
    );
    let other = strata_core::sha256_hex(b"sk-other");
    store.put_api_key(&other, "globex", "", None).await.unwrap();
    assert_eq!(
        store.tenant_for_key(&other).await.unwrap().as_deref(),
        Some("globex")
    );
    // Keys are operator data, not projections.
    let empty = backend.open().await;
    assert_eq!(
        store.fingerprint().await.unwrap(),
        empty.store.fingerprint().await.unwrap()
    );
}

/// Feeds the same three batches (every kind of row) to a store.
fn rich_batches() -> Vec<ProjectionBatch> {
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.user("main", "u1", "go");
    feed.assistant("main", "a1", "calling", &["c1", "c2"]);
    let first = feed.batch();
    feed.finished("main", "c1", "ok");
    feed.push(
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "c2", "output_ref": "file:///b/cd", "output_sha256": "cd".repeat(32),
            "output_bytes": 9000, "output_preview": "p"}),
    );
    let from = feed.user("main", "u2", "fork me");
    feed.push(
        "main",
        "BranchForked",
        json!({"new_branch_id": "alt", "from_event_id": from}),
    );
    let second = feed.batch();
    feed.user("alt", "u3", "on alt");
    feed.push(
        "main",
        "MemoryRecorded",
        json!({"memory_id": "mem-1", "scope": "project", "kind": "fact", "text": "t",
            "source_refs": ["s1-1"]}),
    );
    let mut other = Feed::new("acme", "s2", 1);
    other.started();
    let third = batch(&mut [&mut feed, &mut other]);
    vec![first, second, third]
}

async fn fingerprint_equal_for_equal_content(backend: Arc<Backend>) {
    let one = backend.open().await;
    let two = backend.open().await;
    let empty = one.store.fingerprint().await.unwrap();
    let tables: Vec<&str> = empty.keys().map(String::as_str).collect();
    assert_eq!(
        tables,
        [
            "artifacts",
            "assemblies",
            "branches",
            "compactions",
            "consumer_offsets",
            "events",
            "memories",
            "messages",
            "session_folds",
            "sessions",
            "tool_calls"
        ]
    );
    assert!(empty.values().all(|(rows, _)| *rows == 0));
    assert_eq!(empty, two.store.fingerprint().await.unwrap());

    // Store one fails a batch once and retries it, as a crashed projector would; store two
    // runs clean. Their contents, and so their fingerprints, are equal.
    let batches = rich_batches();
    for (i, b) in batches.iter().enumerate() {
        if i == 1 {
            (one.fail_next_commit)();
            assert!(one.store.commit_batch(b.clone()).await.is_err());
        }
        one.store.commit_batch(b.clone()).await.unwrap();
        two.store.commit_batch(b.clone()).await.unwrap();
    }
    let fp = one.store.fingerprint().await.unwrap();
    assert_eq!(fp, two.store.fingerprint().await.unwrap());
    let counts: BTreeMap<&str, u64> = fp.iter().map(|(t, (n, _))| (t.as_str(), *n)).collect();
    assert_eq!(
        counts,
        BTreeMap::from([
            ("artifacts", 1),
            ("assemblies", 0),
            ("branches", 3),
            ("compactions", 0),
            ("consumer_offsets", 2),
            ("events", 10),
            ("memories", 1),
            ("messages", 4),
            ("session_folds", 2),
            ("sessions", 2),
            ("tool_calls", 2)
        ])
    );

    // A change to the content changes the fingerprint of the tables it touches.
    let mut more = Feed::new("acme", "s3", 2);
    more.started();
    one.store.commit_batch(more.batch()).await.unwrap();
    let changed = one.store.fingerprint().await.unwrap();
    for table in [
        "events",
        "sessions",
        "session_folds",
        "consumer_offsets",
        "branches",
    ] {
        assert_ne!(changed[table], fp[table], "{table}");
    }
    for table in ["messages", "tool_calls", "artifacts", "memories"] {
        assert_eq!(changed[table], fp[table], "{table}");
    }
    // An update without new rows changes it too.
    let mut feed = Feed::new("acme", "s4", 3);
    feed.started();
    feed.assistant("main", "a", "call", &["x"]);
    one.store.commit_batch(feed.batch()).await.unwrap();
    let before = one.store.fingerprint().await.unwrap();
    feed.push(
        "main",
        "ApprovalRequested",
        json!({"approval_id": "ap", "tool_call_id": "x"}),
    );
    let mut update = feed.batch();
    update
        .changes
        .retain(|c| matches!(c, Change::ToolStatus { .. }));
    update.folds.clear();
    update.offsets.clear();
    one.store.commit_batch(update).await.unwrap();
    let after = one.store.fingerprint().await.unwrap();
    assert_eq!(after["tool_calls"].0, before["tool_calls"].0);
    assert_ne!(after["tool_calls"].1, before["tool_calls"].1);
}

async fn text_with_nul_projects(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.user("main", "u1", "before\0after");
    feed.assistant("main", "a1", "call", &["c1"]);
    feed.finished("main", "c1", "binary\0output");
    store.commit_batch(feed.batch()).await.unwrap();

    // The canonical event keeps the NUL exactly (JSON escapes it).
    assert_eq!(all_events(store, "acme", "s1").await, feed.events);
    // The columns hold it, or (PostgreSQL, whose text cannot) U+FFFD in its place.
    let snap = snapshot(store, &feed, "main", 10).await;
    let shown = |s: &str| s.replace('\0', "\u{FFFD}");
    assert_eq!(shown(&snap.messages[0].text), "before\u{FFFD}after");
    assert_eq!(
        shown(snap.messages[1].tool_calls[0].output.as_deref().unwrap()),
        "binary\u{FFFD}output"
    );
}

// ---------------------------------------------------------------------------------------------
// Governed memory and compaction (issue 4)

/// Pushes a raw event and what the memory engine derives from it.
fn push_with_memory(
    feed: &mut Feed,
    engine: &mut strata_core::memory::MemoryEngine,
    ty: &str,
    payload: Value,
) {
    feed.push("main", ty, payload);
    let event = Event::from_json(feed.events.last().unwrap().clone(), None).unwrap();
    for d in engine.observe(&event) {
        let p = d.payload.to_json();
        feed.push("main", d.payload.event_type().as_str(), p);
    }
}

fn memory_session(
    engine: &mut strata_core::memory::MemoryEngine,
    tenant: &str,
    session: &str,
    project: &str,
    status: &str,
) -> Feed {
    let mut feed = Feed::new(tenant, session, 0);
    push_with_memory(
        &mut feed,
        engine,
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "project_id": project, "user_id": "u1"}),
    );
    push_with_memory(
        &mut feed,
        engine,
        "ModelResponseReceived",
        json!({"message_id": "a1", "text": "I think the cache is stale.",
            "tool_calls": [{"tool_call_id": "c1", "name": "crm.get_order", "args": {"id": 7}}]}),
    );
    push_with_memory(
        &mut feed,
        engine,
        "ToolCallFinished",
        json!({"tool_call_id": "c1", "output": "{\"order_id\": \"7\", \"status\": \"open\"}"}),
    );
    push_with_memory(
        &mut feed,
        engine,
        "ModelResponseReceived",
        json!({"message_id": "a2", "text": "",
            "tool_calls": [{"tool_call_id": "c2", "name": "crm.get_order", "args": {"id": 7}}]}),
    );
    push_with_memory(
        &mut feed,
        engine,
        "ToolCallFinished",
        json!({"tool_call_id": "c2",
            "output": format!("{{\"order_id\": \"7\", \"status\": \"{status}\"}}")}),
    );
    feed
}

async fn snapshot_memories_and_compaction(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut engine = strata_core::memory::MemoryEngine::default();
    let mut a1 = memory_session(&mut engine, "acme", "a1", "alpha", "closed");
    push_with_memory(
        &mut a1,
        &mut engine,
        "UserPromptSubmitted",
        json!({"message_id": "u1", "text": "Remember: answer in French"}),
    );
    let mut a2 = memory_session(&mut engine, "acme", "a2", "alpha", "closed");
    let mut b1 = memory_session(&mut engine, "acme", "b1", "beta", "closed");
    let mut x1 = memory_session(&mut engine, "other", "x1", "alpha", "closed");
    let mut other_user = Feed::new("acme", "a9", 0);
    push_with_memory(
        &mut other_user,
        &mut engine,
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "project_id": "alpha", "user_id": "u2"}),
    );
    // A failed compaction, then a successful one: only the latter stands.
    for (id, status) in [("cmp_ok", "completed"), ("cmp_failed", "failed")] {
        let record = json!({"compaction_id": id, "tenant_id": "acme", "session_id": "a1",
            "branch_id": "main", "status": status, "first_event_id": "a1-1",
            "last_event_id": "a1-2", "first_seq": 1, "last_seq": 2,
            "first_kept_event_id": "a1-3", "first_kept_seq": 3, "tokens_before": 100,
            "tokens_after": 10, "goal": "g", "current_task": null, "constraints": [],
            "progress": {"done": [], "in_progress": []}, "decisions": [], "files_read": [],
            "files_modified": [], "tool_results": [], "errors": [], "open_questions": [],
            "next_steps": ["n"], "provenance": {"summarizer": "x", "previous_compaction_id": null,
            "source_event_ids": ["a1-1", "a1-2"]},
            "check": {"passed": status == "completed", "has_task": true, "has_next_steps": true,
            "missing_modified_files": [], "dropped_unresolved_errors": [],
            "split_tool_calls": [], "failures": []}});
        a1.push(
            "main",
            "CompactionCompleted",
            json!({"compaction_id": id, "first_event_id": "a1-1", "last_event_id": "a1-2",
                "first_kept_event_id": "a1-3", "tokens_before": 100, "tokens_after": 10,
                "summary": record, "status": status}),
        );
    }
    store
        .commit_batch(batch(&mut [
            &mut a1,
            &mut a2,
            &mut b1,
            &mut x1,
            &mut other_user,
        ]))
        .await
        .unwrap();

    let snap = snapshot(store, &a2, "main", 100).await;
    assert_eq!(snap.project_id.as_deref(), Some("alpha"));
    assert!(snap.as_of.is_some());
    let ids = |s: &Snapshot| -> Vec<(String, String, bool)> {
        s.memories
            .iter()
            .map(|m| {
                (
                    m.session_id.clone(),
                    m.kind.clone(),
                    m.superseded_by.is_some(),
                )
            })
            .collect()
    };
    let got = ids(&snap);
    // a1's guess (session scope) never reaches a2; a1's project facts and user memory do.
    assert!(
        !got.iter().any(|(s, k, _)| s == "a1" && k == "hypothesis"),
        "{got:?}"
    );
    assert!(got.iter().any(|(s, k, _)| s == "a1" && k == "tool_memory"));
    assert!(got
        .iter()
        .any(|(s, k, _)| s == "a1" && k == "user_preference"));
    assert!(got
        .iter()
        .any(|(s, k, sup)| s == "a2" && k == "tool_memory" && *sup));
    assert!(got.iter().all(|(s, _, _)| s == "a1" || s == "a2"));
    // Another project sees only its own and the user's; another tenant nothing of acme's.
    let got = ids(&snapshot(store, &b1, "main", 100).await);
    assert!(
        got.iter()
            .all(|(s, k, _)| s == "b1" || k == "user_preference"),
        "{got:?}"
    );
    let got = ids(&snapshot(store, &x1, "main", 100).await);
    assert!(got.iter().all(|(s, _, _)| s == "x1"), "{got:?}");
    // Another end user of the same tenant and project never gets u1's preference.
    let snap = snapshot(store, &other_user, "main", 100).await;
    assert_eq!(snap.user_id.as_deref(), Some("u2"));
    let got = ids(&snap);
    assert!(
        !got.iter().any(|(_, k, _)| k == "user_preference"),
        "{got:?}"
    );
    assert!(got.iter().any(|(s, k, _)| s == "a1" && k == "tool_memory"));
    // The latest successful compaction, not the later failed one.
    let snap = snapshot(store, &a1, "main", 100).await;
    assert_eq!(
        snap.compaction.as_ref().map(|c| c.compaction_id.as_str()),
        Some("cmp_ok")
    );
    assert!(snap.state.last_compaction_id.as_deref() == Some("cmp_ok"));
}

async fn snapshot_memories_are_the_newest_and_found_by_the_sessions_project(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut engine = strata_core::memory::MemoryEngine::default();
    let mut a1 = memory_session(&mut engine, "acme", "a1", "alpha", "closed");
    // More memories of its own than a snapshot offers: the newest are the ones offered.
    let template = a1
        .events
        .iter()
        .find(|e| e["type"] == "MemoryRecorded")
        .map(|e| e["payload"].clone())
        .expect("the session recorded a memory");
    for i in 0..2010 {
        let mut record = template.clone();
        record["memory_id"] = json!(format!("mem-{i:04}"));
        record["scope"] = json!("session");
        record["kind"] = json!("fact");
        record["tool_call_id"] = Value::Null;
        record["text"] = json!(format!("fact {i}"));
        a1.push("main", "MemoryRecorded", record);
    }
    // A new session of the project that has recorded nothing yet.
    let mut fresh = Feed::new("acme", "a3", 0);
    fresh.push(
        "main",
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "project_id": "alpha"}),
    );
    store
        .commit_batch(batch(&mut [&mut a1, &mut fresh]))
        .await
        .unwrap();

    let snap = snapshot(store, &a1, "main", 100).await;
    let own: Vec<&str> = snap
        .memories
        .iter()
        .filter(|m| m.session_id == "a1" && m.kind == "fact")
        .map(|m| m.text.as_str())
        .collect();
    assert!(own.contains(&"fact 2009"), "the newest is offered");
    assert!(!own.contains(&"fact 0"), "the oldest gives way");
    assert_eq!(
        own.last(),
        Some(&"fact 2009"),
        "oldest first, as the policy reads them"
    );

    let snap = snapshot(store, &fresh, "main", 100).await;
    assert_eq!(snap.project_id.as_deref(), Some("alpha"));
    assert!(
        snap.memories
            .iter()
            .any(|m| m.session_id == "a1" && m.kind == "tool_memory"),
        "the project's memories, before the session has one of its own"
    );
    assert!(
        !snap.memories.iter().any(|m| m.kind == "fact"),
        "a1's session-scoped facts stay a1's"
    );
}

async fn artifact_classes_are_those_of_the_tenants_references(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let sha = "ab".repeat(32);
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.assistant("main", "a1", "", &["c1", "c2"]);
    for (call, class) in [("c1", Value::Null), ("c2", json!("restricted"))] {
        feed.push(
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": call, "output_ref": format!("artifact:sha256:{sha}"),
                "output_sha256": sha, "output_bytes": 10, "privacy_class": class}),
        );
    }
    store.commit_batch(feed.batch()).await.unwrap();
    let mut classes = store.artifact_classes("acme", &sha).await.unwrap();
    classes.sort();
    assert_eq!(
        classes,
        vec![None, Some(strata_core::payload::PrivacyClass::Restricted)]
    );
    assert!(store
        .artifact_classes("globex", &sha)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .artifact_classes("acme", &"cd".repeat(32))
        .await
        .unwrap()
        .is_empty());
}

async fn withheld_results_are_the_confidential_and_restricted_in_the_range(backend: Arc<Backend>) {
    use strata_core::payload::PrivacyClass;
    let s = backend.open().await;
    let store = s.store.as_ref();
    let mut feed = Feed::new("acme", "s1", 0);
    feed.started();
    feed.assistant("main", "a1", "", &["c1", "c2", "c3", "c4"]);
    let mut ids = Vec::new();
    for (call, class) in [
        ("c1", json!("restricted")),
        ("c2", Value::Null),
        ("c3", json!("internal")),
        ("c4", json!("confidential")),
    ] {
        ids.push(feed.push(
            "main",
            "ToolCallFinished",
            json!({"tool_call_id": call, "output": "x", "privacy_class": class}),
        ));
    }
    store.commit_batch(feed.batch()).await.unwrap();
    let all = store
        .withheld_results("acme", "s1", 0, u64::MAX >> 1)
        .await
        .unwrap();
    assert_eq!(all.into_iter().collect::<Vec<_>>(), {
        let mut want = vec![
            (ids[0].clone(), PrivacyClass::Restricted),
            (ids[3].clone(), PrivacyClass::Confidential),
        ];
        want.sort();
        want
    });
    // The range is the page's: only c4's result lies after c1's.
    let after_first = store
        .withheld_results("acme", "s1", feed.seq(&ids[0]), feed.seq(&ids[3]))
        .await
        .unwrap();
    assert_eq!(after_first.keys().collect::<Vec<_>>(), [&ids[3]]);
    assert!(store
        .withheld_results("globex", "s1", 0, u64::MAX >> 1)
        .await
        .unwrap()
        .is_empty());
}

async fn api_key_lifecycle(backend: Arc<Backend>) {
    let s = backend.open().await;
    let store = s.store.as_ref();
    let live = strata_core::sha256_hex(b"sk-live");
    let expired = strata_core::sha256_hex(b"sk-expired");
    let later = strata_core::sha256_hex(b"sk-later");
    store.put_api_key(&live, "acme", "ci", None).await.unwrap();
    store
        .put_api_key(&expired, "acme", "old", Some("2020-01-01T00:00:00Z"))
        .await
        .unwrap();
    store
        .put_api_key(&later, "globex", "new", Some("2999-01-01T00:00:00Z"))
        .await
        .unwrap();
    assert_eq!(store.tenant_for_key(&expired).await.unwrap(), None);
    assert_eq!(
        store.tenant_for_key(&later).await.unwrap().as_deref(),
        Some("globex")
    );
    let acme = store.api_keys(Some("acme")).await.unwrap();
    assert_eq!(acme.len(), 2);
    assert!(acme
        .iter()
        .all(|k| k.key_id.starts_with("key_") && k.key_id.len() == 20));
    assert!(
        !acme.iter().any(|k| k.key_id.contains(&live[16..])),
        "never the key's hash whole"
    );
    assert_eq!(store.api_keys(None).await.unwrap().len(), 3);

    // Revoked: refused from then on, and registering it again does not bring it back.
    let id = strata_store::ApiKeyInfo::id_of(&live);
    assert!(store
        .revoke_api_key(&id, "2026-12-01T10:00:00Z")
        .await
        .unwrap());
    assert!(!store
        .revoke_api_key(&id, "2026-12-01T10:00:01Z")
        .await
        .unwrap());
    assert!(!store
        .revoke_api_key("key_nothex!", "2026-12-01T10:00:01Z")
        .await
        .unwrap());
    assert_eq!(store.tenant_for_key(&live).await.unwrap(), None);
    store.put_api_key(&live, "acme", "ci", None).await.unwrap();
    assert_eq!(store.tenant_for_key(&live).await.unwrap(), None);
    let info = store.api_key(&live).await.unwrap().unwrap();
    assert_eq!(info.revoked_at.as_deref(), Some("2026-12-01T10:00:00Z"));
    assert!(!info.is_live_at(&strata_store::now_utc()));
}
