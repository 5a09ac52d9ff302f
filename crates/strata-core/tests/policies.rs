//! The policy set on pure snapshots: participant visibility, privacy against the
//! provider, recovery state, subagents, raw rehydration, branch exclusions and the "why (not)"
//! explanations — each decision visible in the ContextAssembly record.

use serde_json::{json, Value};
use strata_core::assembly::{
    assemble, assemble_with_policy, explain, rehydration_plan, AssemblyPolicy, AssemblyRequest,
    OmissionReason, Provider, Snapshot, Tier,
};
use strata_core::projection::{AgentState, OpenError, SubagentState};
use strata_core::tokens::O200k;

fn pair(id: &str, seq: u64, name: &str, output: &str, privacy: Option<&str>) -> Value {
    json!({"tool_call_id": id, "name": name, "args": "{\"path\":\"sales.csv\"}",
        "call_tokens": 10, "request_event_id": format!("{id}-q"), "request_seq": seq,
        "status": "succeeded", "result_event_id": format!("{id}-r"), "output": output,
        "output_ref": null, "output_preview": null, "output_bytes": output.len(),
        "output_tokens": output.len() / 4, "preview_tokens": 0, "error": null,
        "retryable": false, "privacy_class": privacy})
}

fn msg(seq: u64, role: &str, participant: &str, text: &str, calls: Vec<Value>) -> Value {
    json!({"seq": seq, "event_id": format!("e{seq}"), "role": role,
        "participant_id": participant, "text": text, "tokens": text.len() / 4 + 1,
        "tool_calls": calls})
}

fn snapshot(participant: &str, messages: Vec<Value>, state: AgentState) -> Snapshot {
    serde_json::from_value(json!({
        "tenant_id": "t", "session_id": "s", "branch_id": "main", "participant_id": participant,
        "head_seq": 100, "model": "gpt-4o", "context_window_tokens": 32000,
        "reserved_output_tokens": 1000, "system_prompt": "be useful", "system_prompt_tokens": 5,
        "session_started_event_id": "start", "tools": [], "tools_tokens": 0,
        "state": serde_json::to_value(state).unwrap(),
        "messages": messages, "messages_before_window": 0, "loose_tool_calls": [],
        "transcript_tokens": 5000, "orphan_results": 0
    }))
    .unwrap()
}

fn bundle_text(a: &strata_core::assembly::Assembled) -> String {
    serde_json::to_string(&a.messages).unwrap()
}

#[test]
fn another_participants_working_state_stays_private_and_its_final_text_is_labelled() {
    let messages = vec![
        msg(1, "user", "agent-a", "compare the two vendors", vec![]),
        msg(
            2,
            "assistant",
            "agent-b",
            "PRIVATE-NOTE-7731 checking vendor B",
            vec![pair(
                "cb",
                2,
                "search",
                "vendor B price list RAW-B-99",
                None,
            )],
        ),
        msg(
            3,
            "assistant",
            "agent-b",
            "Vendor B is 12% cheaper.",
            vec![],
        ),
        msg(
            4,
            "assistant",
            "agent-a",
            "looking at vendor A",
            vec![pair("ca", 4, "search", "vendor A price list", None)],
        ),
    ];
    let snap = snapshot("agent-a", messages, AgentState::default());
    let out = assemble(&snap, &AssemblyRequest::default(), &O200k);
    let text = bundle_text(&out);
    assert!(!text.contains("PRIVATE-NOTE-7731"), "{text}");
    assert!(!text.contains("RAW-B-99"), "{text}");
    assert!(
        text.contains("[agent-b] Vendor B is 12% cheaper."),
        "{text}"
    );
    assert!(text.contains("vendor A price list"), "{text}");
    assert_eq!(out.assembly.omitted[&OmissionReason::OtherParticipant], 1);
    let why = explain(&out.assembly, "e2");
    assert!(why[0].contains("private to another participant"), "{why:?}");

    // The same session seen by agent-b: its own work, agent-a's search kept out.
    let mut snap_b = snap.clone();
    snap_b.participant_id = "agent-b".into();
    let text_b = bundle_text(&assemble(&snap_b, &AssemblyRequest::default(), &O200k));
    assert!(text_b.contains("RAW-B-99") && !text_b.contains("vendor A price list"));
}

#[test]
fn moderator_instructions_carry_speaker_labels_in_a_debate() {
    let messages = vec![
        msg(1, "user", "moderator", "Debate: tabs or spaces?", vec![]),
        msg(2, "assistant", "pro", "Tabs: accessibility.", vec![]),
        msg(3, "assistant", "con", "Spaces: consistency.", vec![]),
        msg(4, "user", "moderator", "Rebuttals, one sentence.", vec![]),
    ];
    let snap = snapshot("pro", messages, AgentState::default());
    let text = bundle_text(&assemble(&snap, &AssemblyRequest::default(), &O200k));
    assert!(
        text.contains("[moderator] Debate: tabs or spaces?"),
        "{text}"
    );
    assert!(text.contains("[con] Spaces: consistency."), "{text}");
    assert!(
        text.contains("\"Tabs: accessibility.\""),
        "own text unlabelled: {text}"
    );
}

#[test]
fn restricted_output_is_withheld_with_a_safe_summary_and_confidential_follows_the_allow_list() {
    let messages = vec![
        msg(1, "user", "agent", "summarise my inbox", vec![]),
        msg(
            2,
            "assistant",
            "agent",
            "",
            vec![
                pair(
                    "g1",
                    2,
                    "gmail.list",
                    "From: boss SECRET-BODY-42",
                    Some("restricted"),
                ),
                pair("c1", 2, "crm.get", "deal size CONF-7", Some("confidential")),
            ],
        ),
    ];
    let snap = snapshot("agent", messages, AgentState::default());
    let denied = assemble(&snap, &AssemblyRequest::default(), &O200k);
    let text = bundle_text(&denied);
    assert!(
        !text.contains("SECRET-BODY-42") && !text.contains("CONF-7"),
        "{text}"
    );
    assert!(text.contains("withheld by privacy policy: restricted output of gmail.list"));
    assert!(
        text.contains("re-run gmail.list"),
        "revalidation hint: {text}"
    );
    assert_eq!(denied.assembly.omitted[&OmissionReason::PrivacyProvider], 2);

    let allowed = assemble(
        &snap,
        &AssemblyRequest {
            provider: Provider::Anthropic,
            confidential_allowed: true,
            ..AssemblyRequest::default()
        },
        &O200k,
    );
    let text = bundle_text(&allowed);
    assert!(
        text.contains("CONF-7"),
        "allow-listed provider gets confidential: {text}"
    );
    assert!(!text.contains("SECRET-BODY-42"), "restricted never: {text}");
}

#[test]
fn unresolved_retryable_errors_are_p0_even_under_a_tiny_budget() {
    let state = AgentState {
        errors: vec![OpenError {
            tool_call_id: "up1".into(),
            tool: "upload".into(),
            message: "HTTP 503 from storage".into(),
            retryable: true,
            source_event_id: "e9".into(),
            privacy_class: None,
            orphan: false,
        }],
        ..AgentState::default()
    };
    let messages = vec![msg(1, "user", "agent", "upload the report", vec![])];
    let snap = snapshot("agent", messages, state);
    let out = assemble(
        &snap,
        &AssemblyRequest {
            budget: Some(10),
            ..AssemblyRequest::default()
        },
        &O200k,
    );
    let seg = out
        .assembly
        .included
        .iter()
        .find(|s| s.kind == "recovery_state")
        .expect("recovery state included");
    assert_eq!(seg.tier, Tier::P0);
    assert!(bundle_text(&out).contains("HTTP 503 from storage"));
    assert!(bundle_text(&out).contains("retryable"));
}

#[test]
fn a_subagent_is_private_until_it_finishes_then_its_report_and_checkpoint_reach_the_parent() {
    let running = SubagentState {
        child_session_id: "child-1".into(),
        task: Some("collect benchmarks".into()),
        checkpoint: Some("{\"resume_at\":\"step 4: write summary\"}".into()),
        status: "running".into(),
        started_event_id: "sa1".into(),
        last_event_id: "sa1".into(),
        ..SubagentState::default()
    };
    let state = AgentState {
        subagents: vec![running.clone()],
        ..AgentState::default()
    };
    let messages = vec![msg(1, "user", "agent", "go", vec![])];
    let out = assemble(
        &snapshot("agent", messages.clone(), state),
        &AssemblyRequest::default(),
        &O200k,
    );
    let text = bundle_text(&out);
    assert!(
        text.contains("child-1: running") && !text.contains("step 4"),
        "{text}"
    );
    assert_eq!(out.assembly.omitted[&OmissionReason::NotPromoted], 1);

    let finished = SubagentState {
        status: "failed".into(),
        finished: true,
        report: Some("2 of 3 suites ran".into()),
        artifacts: vec!["artifact:sha256:abc".into()],
        error: Some("suite C timed out".into()),
        retryable: Some(true),
        last_event_id: "sa2".into(),
        ..running
    };
    let state = AgentState {
        subagents: vec![finished],
        ..AgentState::default()
    };
    let out = assemble(
        &snapshot("agent", messages, state),
        &AssemblyRequest::default(),
        &O200k,
    );
    let text = bundle_text(&out);
    for needle in [
        "2 of 3 suites ran",
        "artifact:sha256:abc",
        "suite C timed out (retryable)",
        "step 4: write summary",
    ] {
        assert!(text.contains(needle), "{needle} missing: {text}");
    }
    assert!(!out
        .assembly
        .omitted
        .contains_key(&OmissionReason::NotPromoted));
}

#[test]
fn rehydration_needs_the_words_or_the_id_and_passes_privacy_provider_and_byte_budget() {
    let csv = "region,q1,q2\nnorth,10,12\nsouth,7,9\n";
    let messages = vec![
        msg(1, "user", "agent", "load the sales data", vec![]),
        msg(
            2,
            "assistant",
            "agent",
            "",
            vec![pair("csv1", 2, "read_file", csv, None), {
                let mut p = pair("sec", 2, "read_secret", "TOKEN-XYZ", Some("restricted"));
                p["args"] = json!("{\"name\":\"api\"}");
                p
            }],
        ),
        msg(3, "assistant", "agent", "Loaded.", vec![]),
        msg(4, "user", "agent", "Use the exact CSV from before.", vec![]),
    ];
    let snap = snapshot("agent", messages, AgentState::default());
    let request = AssemblyRequest {
        rehydrate: vec!["sec".into(), "missing".into()],
        ..AssemblyRequest::default()
    };
    let plan = rehydration_plan(&snap, &request);
    let by = |t: &str| plan.iter().find(|d| d.target == t).unwrap();
    assert!(!by("sec").rehydrated && by("sec").reason.contains("restricted"));
    assert!(!by("missing").rehydrated);
    assert!(
        by("csv1").rehydrated,
        "the request's words name it: {plan:?}"
    );

    // The default sends the inline bytes whole where they are, not a second copy.
    let out = assemble(&snap, &request, &O200k);
    let text = bundle_text(&out);
    assert!(!text.contains("## Exact output of read_file"), "{text}");
    assert_eq!(text.matches("north,10,12\\nsouth,7,9").count(), 1, "{text}");
    assert!(!text.contains("TOKEN-XYZ"));
    assert_eq!(out.assembly.rehydrations.len(), 3);
    assert!(explain(&out.assembly, "csv1")[0].starts_with("raw bytes rehydrated"));
    // Policy 8 adds them as a unit of their own.
    let out = assemble_with_policy(&snap, &request, &AssemblyPolicy::OWN_WORDS, &O200k);
    let text = bundle_text(&out);
    assert!(text.contains("## Exact output of read_file"), "{text}");
    assert!(text.contains("north,10,12\\nsouth,7,9"), "{text}");
    assert!(!text.contains("TOKEN-XYZ"));
    assert!(explain(&out.assembly, "csv1")[0].starts_with("raw bytes rehydrated"));

    // Over the byte budget: refused, and the plain rendering stands.
    let small = AssemblyRequest {
        rehydrate_max_bytes: 8,
        ..AssemblyRequest::default()
    };
    let out = assemble(&snap, &small, &O200k);
    let d = &out.assembly.rehydrations[0];
    assert!(!d.rehydrated && d.reason.contains("byte budget"), "{d:?}");
    assert!(!bundle_text(&out).contains("## Exact output"));
}

#[test]
fn sibling_branches_are_counted_apart_and_the_compact_record_says_so() {
    let mut snap = snapshot(
        "agent",
        vec![msg(1, "user", "agent", "hi", vec![])],
        AgentState::default(),
    );
    snap.other_branch_messages = 7;
    snap.other_branch_tokens = 900;
    let out = assemble(&snap, &AssemblyRequest::default(), &O200k);
    assert_eq!(out.assembly.omitted[&OmissionReason::OtherBranch], 7);
    assert!(!out.assembly.omitted.contains_key(&OmissionReason::Budget));
    let compact = out.assembly.compact();
    assert!(compact.omitted_items.is_empty() && !compact.traced);
    assert_eq!(compact.omitted, out.assembly.omitted);
    assert!(explain(&compact, "nope")[0].contains("--trace"));
    assert!(explain(&compact, "e1")[0].starts_with("included in"));
}

#[test]
fn the_full_policy_set_is_deterministic() {
    let messages = vec![
        msg(1, "user", "moderator", "start", vec![]),
        msg(
            2,
            "assistant",
            "a",
            "x",
            vec![pair("p", 2, "t", "out", Some("restricted"))],
        ),
        msg(3, "assistant", "b", "final", vec![]),
        msg(4, "user", "moderator", "next", vec![]),
    ];
    let snap = snapshot("a", messages, AgentState::default());
    let one = assemble(&snap, &AssemblyRequest::default(), &O200k);
    let two = assemble(&snap, &AssemblyRequest::default(), &O200k);
    assert_eq!(
        serde_json::to_vec(&one.messages).unwrap(),
        serde_json::to_vec(&two.messages).unwrap()
    );
    assert_eq!(one.assembly, two.assembly);
}

#[test]
fn compaction_notes_keep_owner_and_privacy_and_never_quote_a_protected_error() {
    use strata_core::compaction::{DeterministicSummarizer, Summarizer};
    use strata_core::payload::PrivacyClass;
    let ev = |n: u32, who: &str, ty: &str, payload: Value| {
        strata_core::Event::from_json(
            json!({"event_id": format!("x{n}"), "tenant_id": "t", "session_id": "s",
                "participant_id": who, "timestamp": "2026-06-03T10:00:00Z", "type": ty,
                "payload": payload}),
            None,
        )
        .unwrap()
    };
    let events = [
        ev(
            1,
            "agent-b",
            "ModelResponseReceived",
            json!({"message_id": "m", "text": "",
            "tool_calls": [{"tool_call_id": "t1", "name": "pytest", "args": {}},
                           {"tool_call_id": "t2", "name": "pytest", "args": {"k": "secret"}}]}),
        ),
        ev(
            2,
            "agent-b",
            "ToolCallFinished",
            json!({"tool_call_id": "t1",
            "output": "3 passed, 1 failed", "privacy_class": "internal"}),
        ),
        ev(
            3,
            "agent-b",
            "ToolCallFinished",
            json!({"tool_call_id": "t2",
            "output": "FAILED: token SECRET-TOKEN-5 rejected", "is_error": true,
            "privacy_class": "restricted"}),
        ),
    ];
    let refs: Vec<&strata_core::Event> = events.iter().collect();
    let summary = DeterministicSummarizer.summarize(&refs, None);
    let note = summary
        .tool_results
        .iter()
        .find(|n| n.tool_call_id == "t1")
        .unwrap();
    assert_eq!(note.owner_participant.as_deref(), Some("agent-b"));
    assert_eq!(note.privacy_class, Some(PrivacyClass::Internal));
    // The stored note may quote the restricted result (the summary is audit data); it is
    // marked so that the assembler withholds it from every provider.
    for n in summary
        .tool_results
        .iter()
        .filter(|n| n.summary.contains("SECRET-TOKEN-5"))
    {
        assert_eq!(n.privacy_class, Some(PrivacyClass::Restricted));
    }
    let error = summary
        .errors
        .iter()
        .find(|e| e.tool_call_id == "t2")
        .unwrap();
    assert!(!error.message.contains("SECRET-TOKEN-5"), "{error:?}");
}

#[test]
fn a_memory_made_on_the_parent_after_the_fork_is_not_the_childs() {
    use strata_core::memory::{Memory, MemoryEngine};
    use strata_core::payload::Payload;
    let mut engine = MemoryEngine::default();
    let mut memories = Vec::new();
    let ev = |id: &str, seq: u64, ty: &str, payload: Value| {
        let mut e = strata_core::Event::from_json(
            json!({"event_id": id, "tenant_id": "t", "session_id": "s", "branch_id": "main",
                "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload}),
            None,
        )
        .unwrap();
        e.seq = Some(seq);
        e
    };
    for (call, seq, output) in [("early", 3, "rows=10"), ("late", 9, "LATE-ON-MAIN rows=99")] {
        engine.observe(&ev(
            &format!("{call}-q"),
            seq,
            "ToolCallRequested",
            json!({"tool_call_id": call, "name": "crm.get", "args": {"id": call}}),
        ));
        for d in engine.observe(&ev(
            &format!("{call}-r"),
            seq + 1,
            "ToolCallFinished",
            json!({"tool_call_id": call, "output": output}),
        )) {
            if let Payload::MemoryRecorded(p) = d.payload {
                memories.push(Memory::from_payload(&p).unwrap());
            }
        }
    }
    assert_eq!(memories.len(), 2);
    let mut snap = snapshot(
        "agent",
        vec![msg(20, "user", "agent", "go on", vec![])],
        AgentState::default(),
    );
    snap.branch_id = "alt".into();
    snap.lineage = vec![("alt".into(), None), ("main".into(), Some(5))];
    snap.project_id = Some(memories[0].project_id.clone());
    snap.memories = memories;
    // Policy 3 offers the one from before the fork (the long-turn policy, with no step to say
    // it, offers an observation's memory only when it is relevant); neither offers the other.
    let turns = strata_core::assembly::assemble_with_policy(
        &snap,
        &AssemblyRequest::default(),
        &strata_core::assembly::AssemblyPolicy::TURNS,
        &O200k,
    );
    let text = bundle_text(&turns);
    assert!(text.contains("rows=10"), "before the fork: {text}");
    for out in [turns, assemble(&snap, &AssemblyRequest::default(), &O200k)] {
        let text = bundle_text(&out);
        assert!(!text.contains("LATE-ON-MAIN"), "after the fork: {text}");
        assert_eq!(out.assembly.omitted[&OmissionReason::OtherBranch], 1);
    }
}

#[test]
fn a_message_the_platform_wrote_in_the_users_turn_is_sent_but_is_no_request_and_no_new_turn() {
    use strata_core::assembly::BundleMessage;
    let big = "row\n".repeat(2000);
    let messages = vec![
        msg(1, "user", "agent", "fix the parser bug", vec![]),
        msg(
            2,
            "assistant",
            "agent",
            "looking",
            vec![pair("c1", 2, "read_file", &big, None)],
        ),
        msg(3, "assistant", "agent", "two actions", vec![]),
        msg(
            4,
            "platform",
            "agent",
            "Please always provide EXACTLY ONE action.",
            vec![],
        ),
        msg(
            5,
            "assistant",
            "agent",
            "one action",
            vec![pair("c2", 5, "run_tests", "ok", None)],
        ),
    ];
    let as_user = {
        let mut m = messages.clone();
        m[3]["role"] = json!("user");
        m
    };
    // Under the long-turn policy (policy 3 keeps its recorded turn boundaries).
    let policy = strata_core::assembly::AssemblyPolicy::OWN_WORDS;
    let at = |m: Vec<Value>| {
        strata_core::assembly::assemble_with_policy(
            &snapshot("agent", m, AgentState::default()),
            &AssemblyRequest::default(),
            &policy,
            &O200k,
        )
    };
    let a = at(messages);
    let b = at(as_user);
    // Sent, as the model read it, in the user's voice.
    assert!(a.messages.iter().any(|m| matches!(m,
        BundleMessage::User { text } if text.contains("EXACTLY ONE action"))));
    // But the turn is still the task's: the read before the reminder is a step of the current
    // turn, whole, where as a user message it would have closed the turn and shortened it.
    let result_of = |x: &strata_core::assembly::Assembled| {
        x.messages
            .iter()
            .find_map(|m| match m {
                BundleMessage::Tool {
                    tool_call_id,
                    content,
                    ..
                } if tool_call_id == "c1" => Some(content.len()),
                _ => None,
            })
            .unwrap_or(0)
    };
    assert_eq!(result_of(&a), big.len());
    assert!(
        result_of(&b) < big.len(),
        "as a user message it closes the turn"
    );
}

#[test]
fn a_retired_version_is_refused_to_a_request_and_replays_under_policy_8() {
    use strata_core::assembly::{
        retired_replay_note, AssemblyPolicy, PolicyVersionError, POLICY_VERSION_OWN_WORDS,
        RETIRED_POLICY_VERSIONS,
    };
    let refused = AssemblyPolicy::requested("strata.assembly/9").unwrap_err();
    assert_eq!(
        refused,
        PolicyVersionError::Retired("strata.assembly/9".into())
    );
    let message = refused.to_string();
    assert!(
        message.contains("strata.assembly/9 is retired"),
        "{message}"
    );
    for selectable in AssemblyPolicy::selectable_versions() {
        assert!(message.contains(selectable), "{message}");
    }
    assert!(matches!(
        AssemblyPolicy::requested("strata.assembly/99"),
        Err(PolicyVersionError::Unknown(_))
    ));
    for retired in RETIRED_POLICY_VERSIONS {
        assert_eq!(AssemblyPolicy::by_version(retired), None);
        assert_eq!(
            AssemblyPolicy::for_replay(retired),
            Some(AssemblyPolicy::OWN_WORDS)
        );
    }
    assert_eq!(
        retired_replay_note("strata.assembly/7").as_deref(),
        Some("recorded under strata.assembly/7, retired: replayed under strata.assembly/8")
    );
    // A kept version replays as itself, and says nothing.
    assert_eq!(
        AssemblyPolicy::for_replay(POLICY_VERSION_OWN_WORDS),
        Some(AssemblyPolicy::OWN_WORDS)
    );
    assert_eq!(retired_replay_note(POLICY_VERSION_OWN_WORDS), None);
    assert_eq!(AssemblyPolicy::for_replay("strata.assembly/99"), None);
}
