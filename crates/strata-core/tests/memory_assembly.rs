//! The assembler's memory policy on a pure snapshot: superseded memories are left out and their
//! successor kept, stale volatile ones omitted, stale time-bounded ones marked with a
//! revalidation hint, both sides of a conflict shown with their sources, another project's
//! memories never offered — each recorded in the ContextAssembly.

use serde_json::{json, Value};
use strata_core::assembly::{
    assemble_with_policy, AssemblyPolicy, AssemblyRequest, OmissionReason, Snapshot,
};
use strata_core::memory::{Memory, MemoryEngine};
use strata_core::payload::Payload;
use strata_core::projection::AgentState;
use strata_core::tokens::O200k;
use strata_core::Event;

/// Policy 3's memory rules, which these tests pin (the long-turn policies' are below).
fn assemble(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
    tokens: &O200k,
) -> strata_core::assembly::Assembled {
    assemble_with_policy(snapshot, request, &AssemblyPolicy::TURNS, tokens)
}

fn ev(id: &str, session: &str, ts: &str, ty: &str, payload: Value) -> Event {
    Event::from_json(
        json!({"event_id": id, "tenant_id": "t", "session_id": session, "seq": 1,
            "timestamp": ts, "type": ty, "payload": payload}),
        None,
    )
    .unwrap()
}

fn call(
    e: &mut MemoryEngine,
    out: &mut Vec<Memory>,
    id: &str,
    ts: &str,
    name: &str,
    args: Value,
    output: &str,
) {
    e.observe(&ev(
        &format!("{id}-q"),
        "s",
        ts,
        "ToolCallRequested",
        json!({"tool_call_id": id, "name": name, "args": args}),
    ));
    for d in e.observe(&ev(
        &format!("{id}-r"),
        "s",
        ts,
        "ToolCallFinished",
        json!({"tool_call_id": id, "output": output}),
    )) {
        match d.payload {
            Payload::MemoryRecorded(p) => out.push(Memory::from_payload(&p).unwrap()),
            Payload::MemorySuperseded(p) => {
                for m in out.iter_mut().filter(|m| m.memory_id == p.memory_id) {
                    m.superseded_by = Some(p.superseded_by.clone());
                }
            }
            _ => {}
        }
    }
}

/// An engine that has seen session `s` of project `alpha` start.
fn engine_with_session_s() -> MemoryEngine {
    let mut e = MemoryEngine::default();
    e.observe(&ev(
        "start",
        "s",
        "2026-06-03T10:00:00Z",
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "m"}, "context_window_tokens": 16000,
            "reserved_output_tokens": 1000, "project_id": "alpha"}),
    ));
    e
}

fn snapshot(memories: Vec<Memory>, as_of: &str) -> Snapshot {
    serde_json::from_value(json!({
        "tenant_id": "t", "session_id": "s", "branch_id": "main", "participant_id": "agent",
        "head_seq": 10, "model": "gpt-4o", "context_window_tokens": 16000,
        "reserved_output_tokens": 1000, "system_prompt": "be useful", "system_prompt_tokens": 5,
        "session_started_event_id": "start", "tools": [], "tools_tokens": 0,
        "state": serde_json::to_value(AgentState::default()).unwrap(),
        "messages": [{"seq": 9, "event_id": "u1", "role": "user", "participant_id": "agent",
            "text": "status of order 42?", "tokens": 8, "tool_calls": []}],
        "messages_before_window": 0, "loose_tool_calls": [], "transcript_tokens": 500,
        "orphan_results": 0, "project_id": "alpha", "memories": memories, "as_of": as_of
    }))
    .unwrap()
}

#[test]
fn memory_policy_is_applied_and_explained() {
    let mut e = engine_with_session_s();
    let mut mems = Vec::new();
    call(
        &mut e,
        &mut mems,
        "c1",
        "2026-06-03T10:00:00Z",
        "crm.get_order",
        json!({"id": 42}),
        r#"{"order_id": "42", "status": "pending"}"#,
    );
    call(
        &mut e,
        &mut mems,
        "c2",
        "2026-06-03T10:30:00Z",
        "crm.get_order",
        json!({"id": 42}),
        r#"{"order_id": "42", "status": "shipped"}"#,
    );
    call(
        &mut e,
        &mut mems,
        "c3",
        "2026-06-03T10:31:00Z",
        "erp.fetch_order",
        json!({"order": 42}),
        r#"{"order_id": "42", "status": "cancelled"}"#,
    );
    call(
        &mut e,
        &mut mems,
        "c4",
        "2026-06-03T10:00:00Z",
        "bash",
        json!({"command": "cargo build"}),
        "error: linker failed\nexit code 1",
    );
    // A memory of another project (as a store bug would offer it) is never used.
    let mut foreign = mems[1].clone();
    foreign.memory_id = "mem_foreign".into();
    foreign.project_id = "beta".into();
    mems.push(foreign);
    // A restricted one never reaches a provider.
    let mut secret = mems[2].clone();
    secret.memory_id = "mem_secret".into();
    secret.privacy_class = strata_core::payload::PrivacyClass::Restricted;
    mems.push(secret);

    // At 10:45 nothing time-bounded is stale yet, the 10:00 shell memory (volatile) is.
    let a = assemble(
        &snapshot(mems.clone(), "2026-06-03T10:45:00Z"),
        &AssemblyRequest::default(),
        &O200k,
    );
    let text = serde_json::to_string(&a.messages).unwrap();
    let reasons = |r: OmissionReason| {
        a.assembly
            .omitted_items
            .iter()
            .filter(|o| o.reason == r)
            .count()
    };
    assert!(
        !text.contains("status=pending"),
        "superseded value left out"
    );
    assert!(
        text.contains("status=shipped") && text.contains("status=cancelled"),
        "both sides kept"
    );
    assert!(text.contains("CONFLICTS with"), "conflict marked");
    assert_eq!(reasons(OmissionReason::Superseded), 1);
    assert_eq!(
        reasons(OmissionReason::Stale),
        1,
        "volatile and stale: omitted"
    );
    assert_eq!(
        reasons(OmissionReason::OtherScope),
        1,
        "another project: never offered"
    );
    assert!(!text.contains("mem_foreign"));
    assert_eq!(reasons(OmissionReason::PrivacyProvider), 1);
    assert!(!text.contains("mem_secret"));
    let included: Vec<&str> = a
        .assembly
        .included
        .iter()
        .filter(|s| s.kind == "memory")
        .map(|s| s.reason.as_str())
        .collect();
    assert_eq!(included.len(), 2);
    assert!(included.iter().any(|r| r.contains("successor of")));
    assert!(included.iter().all(|r| r.contains("conflict kept")));

    // Two hours later the time-bounded facts are stale: marked, with the tool to call.
    let a = assemble(
        &snapshot(mems.clone(), "2026-06-03T12:45:00Z"),
        &AssemblyRequest::default(),
        &O200k,
    );
    let text = serde_json::to_string(&a.messages).unwrap();
    assert!(text.contains("STALE since") && text.contains("revalidate with `crm.get_order`"));
    // Deterministic: same snapshot, same bytes.
    let b = assemble(
        &snapshot(mems, "2026-06-03T12:45:00Z"),
        &AssemblyRequest::default(),
        &O200k,
    );
    assert_eq!(
        serde_json::to_vec(&a.messages).unwrap(),
        serde_json::to_vec(&b.messages).unwrap()
    );
}

#[test]
fn under_the_cap_memories_of_the_files_in_play_come_first_then_the_newest() {
    let mut e = engine_with_session_s();
    let mut seed = Vec::new();
    call(
        &mut e,
        &mut seed,
        "c0",
        "2026-06-03T10:00:00Z",
        "crm.get_order",
        json!({"id": 7}),
        r#"{"order_id": "7", "status": "open"}"#,
    );
    let template = seed.pop().unwrap();
    // 40 memories, oldest first; the oldest of all names the file the agent is editing.
    let mems: Vec<Memory> = (0..40)
        .map(|i| {
            let mut m = template.clone();
            m.memory_id = format!("mem_{i:02}");
            m.tool_call_id = None;
            m.kind = "fact".into();
            m.source_seq = Some(i);
            m.superseded_by = None;
            m.conflicts_with.clear();
            m.text = if i == 0 {
                "src/ledger/rounding.rs rounds half-even since the 2024 migration".into()
            } else {
                format!("observation number {i} about something else")
            };
            m
        })
        .collect();
    let mut snap = snapshot(mems, "2026-06-03T10:05:00Z");
    snap.state.files_modified.push(
        serde_json::from_value(json!({"text": "src/ledger/rounding.rs", "source_event_id": "w1"}))
            .unwrap(),
    );
    let a = assemble(&snap, &AssemblyRequest::default(), &O200k);
    let included: Vec<(&str, &str)> = a
        .assembly
        .included
        .iter()
        .filter(|s| s.kind == "memory")
        .map(|s| (s.id.as_str(), s.reason.as_str()))
        .collect();
    let text = serde_json::to_string(&a.messages).unwrap();
    assert_eq!(included.len(), 24, "{included:?}");
    // Memories are retrieved content: quoted data, never system instructions.
    use strata_core::assembly::BundleMessage;
    let (data, system): (Vec<_>, Vec<_>) = a
        .messages
        .iter()
        .filter_map(|m| match m {
            BundleMessage::Data { source, text } => Some((Some(source.as_str()), text)),
            BundleMessage::System { text } => Some((None, text)),
            _ => None,
        })
        .partition(|(source, _)| source.is_some());
    assert_eq!(data.len(), 24);
    assert!(data.iter().all(|(s, _)| *s == Some("memory")));
    assert!(
        !system.iter().any(|(_, t)| t.contains("[memory ")),
        "{system:?}"
    );
    assert!(
        text.contains("rounds half-even"),
        "the oldest, but relevant"
    );
    assert!(
        included
            .iter()
            .any(|(_, r)| r.contains("relevant: names src/ledger/rounding.rs, a file in play")),
        "{included:?}"
    );
    // The other 23 are the newest: 17..=39 kept, 1..=16 left out under the cap.
    assert!(text.contains("observation number 39") && text.contains("observation number 17"));
    assert!(!text.contains("observation number 16 "));
    assert_eq!(
        included
            .iter()
            .filter(|(_, r)| r.contains("among the newest"))
            .count(),
        23
    );
    let capped = a
        .assembly
        .omitted_items
        .iter()
        .filter(|o| o.kind == "memory" && o.reason == OmissionReason::Budget)
        .count();
    assert_eq!(capped, 16);

    // The long-turn policy offers an observation's memory only when it is relevant; what a
    // user said goes as before. (Seven long steps, more than the working set: a history sent
    // whole would need no memories.)
    let mut long = snap.clone();
    for m in &mut long.memories {
        m.kind = "tool_memory".into();
    }
    long.memories[39].kind = "user_preference".into();
    for i in 0..7u64 {
        long.messages.push(
            serde_json::from_value(json!({"seq": 10 + i, "event_id": format!("a{i}"),
                "role": "assistant", "participant_id": "agent", "text": format!("step {i}"),
                "tokens": 2_000, "tool_calls": []}))
            .unwrap(),
        );
    }
    let policy = AssemblyPolicy::OWN_WORDS;
    let a = assemble_with_policy(&long, &AssemblyRequest::default(), &policy, &O200k);
    let text = serde_json::to_string(&a.messages).unwrap();
    assert!(text.contains("rounds half-even"), "the relevant one");
    assert!(text.contains("observation number 39"), "what the user said");
    assert!(!text.contains("observation number 38"), "{text}");
    let not_relevant = a
        .assembly
        .omitted_items
        .iter()
        .filter(|o| o.kind == "memory" && o.reason == OmissionReason::NotRelevant)
        .count();
    assert_eq!(not_relevant, 38);
}

/// Under the long-turn policy a short session's own memories only restate its verbatim history
/// and are left out; what the user asked to be remembered in *another* session is no
/// restatement and is sent (it used to be left out with the session's own).
#[test]
fn a_short_session_gets_its_users_memories_from_other_sessions() {
    let mut e = MemoryEngine::default();
    let mut mems = Vec::new();
    for (session, text) in [
        ("earlier", "remember: I want amounts in euros"),
        ("s", "remember: reply in French"),
    ] {
        e.observe(&ev(
            &format!("{session}-start"),
            session,
            "2026-06-03T10:00:00Z",
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "m"}, "context_window_tokens": 16000,
                "reserved_output_tokens": 1000, "user_id": "alice"}),
        ));
        for d in e.observe(&ev(
            &format!("{session}-u"),
            session,
            "2026-06-03T10:00:01Z",
            "UserPromptSubmitted",
            json!({"message_id": "m", "text": text}),
        )) {
            if let Payload::MemoryRecorded(p) = d.payload {
                mems.push(Memory::from_payload(&p).unwrap());
            }
        }
    }
    assert_eq!(mems.len(), 2, "one user memory per session");
    let mut snap = snapshot(mems, "2026-06-03T10:00:02Z");
    snap.user_id = Some("alice".into());
    let out = assemble_with_policy(
        &snap,
        &AssemblyRequest::default(),
        &AssemblyPolicy::default(),
        &O200k,
    );
    let sent: String = out.messages.iter().map(|m| format!("{m:?}")).collect();
    assert!(sent.contains("amounts in euros"), "{sent}");
    assert!(!sent.contains("reply in French"), "{sent}");
    assert!(out
        .assembly
        .omitted_items
        .iter()
        .any(|o| o.kind == "memory" && o.reason == OmissionReason::Redundant));
}

#[test]
fn policy_8_leaves_out_a_hypothesis_whose_message_the_history_holds() {
    let mut e = engine_with_session_s();
    let text = "The refund is probably stuck in the ledger_sync job";
    let mems: Vec<Memory> = e
        .observe(&ev(
            "a1",
            "s",
            "2026-06-03T10:00:01Z",
            "ModelResponseReceived",
            json!({"message_id": "a1", "text": text}),
        ))
        .into_iter()
        .filter_map(|d| match d.payload {
            Payload::MemoryRecorded(p) => Some(Memory::from_payload(&p).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(mems.len(), 1, "one hypothesis");
    assert_eq!(mems[0].confidence_basis, "model_guess");
    let mut with_message = snapshot(mems, "2026-06-03T10:00:02Z");
    with_message.messages.push(
        serde_json::from_value(json!({"seq": 10, "event_id": "a1", "role": "assistant",
            "participant_id": "agent", "text": text, "tokens": 12, "tool_calls": []}))
        .unwrap(),
    );
    // Ten newer steps, too many to send the session whole (which would leave every memory of
    // it out as restated, under either policy).
    for i in 0..10u64 {
        with_message.messages.push(
            serde_json::from_value(json!({"seq": 11 + i, "event_id": format!("later{i}"),
                "role": "assistant", "participant_id": "agent",
                "text": format!("Checking job {i}."), "tokens": 2000, "tool_calls": []}))
            .unwrap(),
        );
    }
    let offered = |snap: &Snapshot, policy: &AssemblyPolicy| {
        let out = assemble_with_policy(snap, &AssemblyRequest::default(), policy, &O200k);
        let memory_units = out
            .assembly
            .included
            .iter()
            .filter(|s| s.kind == "memory")
            .count();
        let restated = out
            .assembly
            .omitted_items
            .iter()
            .any(|o| o.kind == "memory" && o.reason == OmissionReason::Redundant);
        (memory_units, restated)
    };
    assert_eq!(
        offered(&with_message, &AssemblyPolicy::OWN_WORDS),
        (0, true)
    );
    // Without its message in the history (compacted away, or before the window), it is what
    // remains of that sentence: offered.
    let mut without = with_message.clone();
    without.messages.retain(|m| m.event_id != "a1");
    assert_eq!(offered(&without, &AssemblyPolicy::OWN_WORDS).0, 1);
}
