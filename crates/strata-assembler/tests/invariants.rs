//! Invariants 1, 5, 6, 9 and 12 (`docs/design/invariants.md`) on the real embedded pipeline: ingest → file log →
//! projector → SQLite → assembler.

use std::sync::Arc;

use serde_json::{json, Value};
use strata_assembler::Rendered as Assembled;
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_core::assembly::{OmissionReason, Provider};
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

const TENANT: &str = "acme";
const SESSION: &str = "s1";

struct Env {
    _dir: tempfile::TempDir,
    backends: Backends,
    ingestor: Arc<Ingestor>,
    n: u32,
}

impl Env {
    async fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let opts = BackendOpts {
            fsync: FsyncPolicy::Never,
            ..BackendOpts::embedded(dir.path())
        };
        let backends = Backends::open(&opts, "test").await.unwrap();
        let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
        Env {
            _dir: dir,
            backends,
            ingestor,
            n: 0,
        }
    }

    async fn send(&mut self, branch: &str, ty: &str, payload: Value) -> String {
        self.n += 1;
        let id = format!("e{:03}", self.n);
        let event = json!({"event_id": id, "tenant_id": TENANT, "session_id": SESSION,
            "branch_id": branch, "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload});
        self.ingestor
            .ingest_json(&Publisher::Operator, vec![event])
            .await
            .unwrap();
        id
    }

    /// A session with a goal, open questions, two completed turns with tool pairs (one large
    /// output), and a current request.
    async fn coding_session(&mut self) {
        self.send(
            "main",
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "system_prompt": "You are a coding agent."}),
        )
        .await;
        self.send(
            "main",
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "Fix the failing invoice test."}),
        )
        .await;
        self.send(
            "main",
            "StateUpdated",
            json!({"goal": "GOAL-make-tests-pass",
            "open_questions": ["QUESTION-which-rounding-mode"]}),
        )
        .await;
        for i in 0..6 {
            self.send("main", "ModelResponseReceived", json!({"message_id": format!("a{i}"),
                "text": format!("step {i}: running tests"),
                "tool_calls": [{"tool_call_id": format!("c{i}"), "name": "run_tests", "args": {"n": i}}]})).await;
            let output = if i == 2 {
                "test x ... ok\n".repeat(2000)
            } else {
                format!("result {i}: 3 passed")
            };
            self.send(
                "main",
                "ToolCallFinished",
                json!({"tool_call_id": format!("c{i}"), "output": output}),
            )
            .await;
        }
        self.send(
            "main",
            "UserPromptSubmitted",
            json!({"message_id": "u2", "text": "REQUEST-now-add-a-regression-test"}),
        )
        .await;
    }

    async fn context(&self, request: ContextRequest) -> Assembled {
        strata_projector::catch_up(&self.backends).await.unwrap();
        let assembler = Assembler::new(
            self.backends.clone(),
            self.ingestor.clone(),
            AssemblerOptions::default(),
        );
        assembler.context(TENANT, SESSION, &request).await.unwrap()
    }
}

fn text_of(a: &Assembled) -> String {
    a.payload.to_string()
}

/// Every tool message follows an assistant message that called it, and every call sent has its
/// result (OpenAI format).
fn assert_tool_pairs_whole(payload: &Value) {
    let messages = payload["messages"].as_array().unwrap();
    let mut called: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    for m in messages {
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            called.extend(calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()));
        }
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap().to_owned();
            assert!(
                called.contains(&id),
                "tool result {id} without a preceding call"
            );
            answered.push(id);
        }
    }
    for id in called {
        assert!(answered.contains(&id), "call {id} sent without its result");
    }
}

#[tokio::test]
async fn invariant_5_request_goal_and_open_questions_survive_a_tiny_budget() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let a = env
        .context(ContextRequest {
            budget: Some(20),
            ..Default::default()
        })
        .await;
    let text = text_of(&a);
    for must in [
        "REQUEST-now-add-a-regression-test",
        "GOAL-make-tests-pass",
        "QUESTION-which-rounding-mode",
    ] {
        assert!(text.contains(must), "{must} missing from the context");
    }
    assert!(
        a.assembly.over_budget,
        "20 tokens cannot hold P0 and the task state"
    );
    assert!(
        a.assembly
            .omitted
            .get(&OmissionReason::Budget)
            .copied()
            .unwrap_or(0)
            > 0
    );
    assert_tool_pairs_whole(&a.payload);
}

#[tokio::test]
async fn invariant_6_same_snapshot_same_bytes() {
    let mut env = Env::new().await;
    env.coding_session().await;
    for provider in [Provider::Openai, Provider::Anthropic] {
        let request = ContextRequest {
            provider: Some(provider),
            budget: Some(3000),
            ..Default::default()
        };
        let first = env.context(request.clone()).await;
        let second = env.context(request).await;
        assert_eq!(
            serde_json::to_vec(&first.payload).unwrap(),
            serde_json::to_vec(&second.payload).unwrap()
        );
        assert_eq!(first.assembly.assembly_id, second.assembly.assembly_id);
        assert_eq!(first.assembly.included, second.assembly.included);
    }
}

#[tokio::test]
async fn invariant_12_every_included_segment_has_a_reason_and_a_source() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let a = env.context(ContextRequest::default()).await;
    assert!(!a.assembly.included.is_empty());
    for s in &a.assembly.included {
        assert!(!s.reason.is_empty(), "segment {} has no reason", s.id);
        assert!(
            !s.source_event_ids.is_empty(),
            "segment {} ({}) has no source",
            s.id,
            s.kind
        );
    }
    // The assembly was recorded on the log and projected: it can be read back.
    strata_projector::catch_up(&env.backends).await.unwrap();
    let stored = env
        .backends
        .store
        .assembly(TENANT, &a.assembly.assembly_id)
        .await
        .unwrap()
        .expect("assembly recorded as ContextBuilt and projected");
    assert_eq!(stored["assembly_id"], a.assembly.assembly_id.as_str());
}

#[tokio::test]
async fn large_outputs_are_previews_with_artifact_refs_and_pairs_stay_whole() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let a = env.context(ContextRequest::default()).await;
    let text = text_of(&a);
    assert!(
        text.contains("artifact:sha256:"),
        "large output not replaced by its ref"
    );
    assert!(
        !text.contains(&"test x ... ok\\n".repeat(200)),
        "large output inlined"
    );
    assert!(a.assembly.context_tokens < a.assembly.transcript_tokens / 2);
    assert_tool_pairs_whole(&a.payload);
    // Under a budget that forces evictions, pairs still never split.
    let tight = env
        .context(ContextRequest {
            budget: Some(400),
            ..Default::default()
        })
        .await;
    assert_tool_pairs_whole(&tight.payload);
}

#[tokio::test]
async fn invariant_1_a_result_without_a_call_is_never_sent() {
    let mut env = Env::new().await;
    env.coding_session().await;
    env.send(
        "main",
        "ToolCallFinished",
        json!({"tool_call_id": "ghost", "output": "GHOST-OUTPUT"}),
    )
    .await;
    let a = env.context(ContextRequest::default()).await;
    assert!(!text_of(&a).contains("GHOST-OUTPUT"));
    assert_eq!(
        a.assembly.omitted.get(&OmissionReason::OrphanResult),
        Some(&1)
    );
    assert_tool_pairs_whole(&a.payload);
}

#[tokio::test]
async fn pending_tool_calls_are_kept() {
    let mut env = Env::new().await;
    env.coding_session().await;
    env.send(
        "main",
        "ModelResponseReceived",
        json!({"message_id": "a9", "text": "running again",
        "tool_calls": [{"tool_call_id": "PENDING-CALL", "name": "run_tests", "args": {}}]}),
    )
    .await;
    let a = env
        .context(ContextRequest {
            budget: Some(20),
            ..Default::default()
        })
        .await;
    assert!(text_of(&a).contains("PENDING-CALL"));
    // Sent as pending state, not as a dangling call without a result.
    assert_tool_pairs_whole(&a.payload);
}

#[tokio::test]
async fn invariant_9_a_branch_never_mutates_its_ancestor() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let before = env.context(ContextRequest::default()).await;
    let fork_at = format!("e{:03}", env.n);
    env.send(
        "main",
        "BranchForked",
        json!({"new_branch_id": "alt", "from_event_id": fork_at}),
    )
    .await;
    env.send(
        "alt",
        "UserPromptSubmitted",
        json!({"message_id": "x1", "text": "ALT-ONLY-REQUEST"}),
    )
    .await;
    env.send("alt", "StateUpdated", json!({"goal": "ALT-GOAL"}))
        .await;
    let main_after = env.context(ContextRequest::default()).await;
    assert_eq!(
        before.payload, main_after.payload,
        "forking changed the main branch"
    );
    let alt = env
        .context(ContextRequest {
            branch: Some("alt".into()),
            ..Default::default()
        })
        .await;
    let alt_text = text_of(&alt);
    assert!(alt_text.contains("ALT-ONLY-REQUEST"));
    assert!(alt_text.contains("ALT-GOAL"));
    // The ancestor's history up to the fork is inherited.
    assert!(alt_text.contains("Fix the failing invoice test."));
    assert!(!text_of(&main_after).contains("ALT-ONLY"));
    // Main continues; the branch does not see main's later events.
    env.send(
        "main",
        "UserPromptSubmitted",
        json!({"message_id": "m9", "text": "MAIN-LATER"}),
    )
    .await;
    let alt_again = env
        .context(ContextRequest {
            branch: Some("alt".into()),
            ..Default::default()
        })
        .await;
    assert!(!text_of(&alt_again).contains("MAIN-LATER"));
}

/// A branch forked from an earlier event starts from the parent's state *at that event*: what
/// the parent decided, wrote and set as its goal after the fork point is not the branch's —
/// whether the parent's later events were projected before the fork (read back from the store)
/// or arrive in the same batch as it.
#[tokio::test]
async fn invariant_9_a_branch_forked_from_an_earlier_event_has_the_state_of_that_point() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let fork_at = format!("e{:03}", env.n);
    env.send(
        "main",
        "StateUpdated",
        json!({"goal": "MAIN-LATER-GOAL", "decisions": ["MAIN-LATER-DECISION"]}),
    )
    .await;
    env.send(
        "main",
        "FileWritten",
        json!({"path": "src/main_later.rs", "bytes": 10}),
    )
    .await;
    let main = env.context(ContextRequest::default()).await;
    assert!(text_of(&main).contains("MAIN-LATER-GOAL"));
    assert!(text_of(&main).contains("src/main_later.rs"));

    env.send(
        "main",
        "BranchForked",
        json!({"new_branch_id": "alt", "from_event_id": fork_at}),
    )
    .await;
    env.send(
        "alt",
        "UserPromptSubmitted",
        json!({"message_id": "x1", "text": "ALT-ONLY-REQUEST"}),
    )
    .await;
    // In one batch with the fork: main moves on again, then forks a second branch.
    env.send("main", "StateUpdated", json!({"goal": "MAIN-LATEST-GOAL"}))
        .await;
    env.send(
        "main",
        "BranchForked",
        json!({"new_branch_id": "alt2", "from_event_id": fork_at}),
    )
    .await;
    for branch in ["alt", "alt2"] {
        let ctx = env
            .context(ContextRequest {
                branch: Some(branch.into()),
                ..Default::default()
            })
            .await;
        let text = text_of(&ctx);
        assert!(text.contains("GOAL-make-tests-pass"), "{branch}: {text}");
        for later in [
            "MAIN-LATER-GOAL",
            "MAIN-LATER-DECISION",
            "src/main_later.rs",
            "MAIN-LATEST-GOAL",
        ] {
            assert!(!text.contains(later), "{branch} shows {later}: {text}");
        }
    }
    let main = env.context(ContextRequest::default()).await;
    assert!(text_of(&main).contains("MAIN-LATEST-GOAL"));
}

/// A why-not answers from the caller's tenant only: a record naming another tenant (a tenant can
/// post a `ContextBuilt` of its own making) is refused, and nothing of that tenant is read.
#[tokio::test]
async fn why_not_reads_under_the_callers_tenant_and_refuses_a_record_naming_another() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let assembled = env.context(ContextRequest::default()).await;
    let mut record = assembled.assembly.clone();
    let call = "c1";
    // The real record, asked by its own tenant, answers.
    let own = strata_assembler::explain_reference(&env.backends, TENANT, &record, call)
        .await
        .unwrap();
    assert!(!own.is_empty());
    // The same record asked by another tenant, or a forged one naming this tenant asked by
    // another, is refused without reading a thing.
    let refused = strata_assembler::explain_reference(&env.backends, "globex", &record, call).await;
    assert!(
        matches!(&refused, Err(strata_assembler::Error::BadRequest(m)) if m.contains("another tenant")),
        "{refused:?}"
    );
    record.tenant_id = "globex".into();
    let forged = strata_assembler::explain_reference(&env.backends, "globex", &record, call)
        .await
        .unwrap();
    // Read under globex, acme's session has no events: nothing of acme's comes back.
    assert!(
        !forged
            .iter()
            .any(|l| l.contains("ToolCall") || l.contains("ModelResponse")),
        "{forged:?}"
    );
}

/// A why-not reads the session only up to the assembly's snapshot: what came later cannot be in
/// it, and a session that keeps growing does not make the answer slower.
#[tokio::test]
async fn why_not_reads_no_event_after_the_assemblys_snapshot() {
    let mut env = Env::new().await;
    env.coding_session().await;
    let assembled = env.context(ContextRequest::default()).await;
    env.send(
        "main",
        "ToolCallRequested",
        json!({"tool_call_id": "c-late", "name": "bash", "args": {"command": "ls"}}),
    )
    .await;
    let lines =
        strata_assembler::explain_reference(&env.backends, TENANT, &assembled.assembly, "c-late")
            .await
            .unwrap();
    assert!(
        !lines.iter().any(|l| l.starts_with("ToolCallRequested")),
        "{lines:?}"
    );
    // A call of the snapshot is still found by its events.
    let early =
        strata_assembler::explain_reference(&env.backends, TENANT, &assembled.assembly, "c1")
            .await
            .unwrap();
    assert!(
        early
            .iter()
            .any(|l| l.starts_with("ToolCall") || l.starts_with("ModelResponse")),
        "{early:?}"
    );
}
