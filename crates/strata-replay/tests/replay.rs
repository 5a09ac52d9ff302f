//! `replay` on the embedded default: a report per model call point under the recorded and a
//! candidate policy; the live log and projections are byte-identical before and after.

mod common;

use strata_core::assembly::{AssemblyPolicy, POLICY_VERSION, POLICY_VERSION_TIGHT};
use strata_replay::replay::{replay, ReplayOptions, ReplaySource, Selection};

#[tokio::test]
async fn replay_reports_every_call_point_and_writes_nothing_live() {
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 5, 200).await;
    let live_fp = live.store.fingerprint().await.unwrap();
    let head = live.log.end_offsets().await.unwrap();
    let before = common::snapshot_files(dir.path());

    let mut ticks = 0u32;
    let mut sink = |_p: strata_replay::Progress| ticks += 1;
    let report = replay(
        ReplaySource::Log(live.log.as_ref()),
        &ReplayOptions {
            selection: Selection {
                tenant: Some(common::TENANT.into()),
                sessions: vec!["sess-0001".into(), "sess-0003".into()],
                ..Selection::default()
            },
            policy: AssemblyPolicy::by_version(POLICY_VERSION_TIGHT),
            budget: Some(3000),
            scratch_dir: None,
            blobs: None,
            ..ReplayOptions::default()
        },
        Some(&mut sink),
    )
    .await
    .unwrap();
    assert!(ticks >= 1);
    assert_eq!(report.sessions, 2);
    assert!(
        report.events >= 400 && report.events < 420,
        "{}",
        report.events
    );
    // One call point per model response of the two sessions.
    let responses = strata_replay::workload::session(common::TENANT, "x", 200)
        .iter()
        .filter(|e| e.payload.event_type().as_str() == "ModelResponseReceived")
        .count() as u64;
    assert_eq!(report.call_points + report.skipped_points, 2 * responses);
    assert_eq!(report.recorded_policy, POLICY_VERSION);
    assert_eq!(
        report.candidate_policy.as_deref(),
        Some(POLICY_VERSION_TIGHT)
    );
    let last = report.points.last().unwrap();
    let cand = last.candidate.as_ref().unwrap();
    assert_eq!(cand.policy, POLICY_VERSION_TIGHT);
    assert_eq!(
        last.token_diff,
        cand.context_tokens as i64 - last.recorded.context_tokens as i64
    );
    // The tighter policy spends less and says what it dropped, with reasons.
    assert!(report.candidate_tokens.unwrap() < report.recorded_tokens);
    let dropped: Vec<_> = report.points.iter().flat_map(|p| &p.dropped).collect();
    assert!(!dropped.is_empty());
    assert!(dropped.iter().all(|d| !d.reason.is_empty()));

    // Nothing live changed: files byte-identical, projections and log as they were.
    assert_eq!(live.store.fingerprint().await.unwrap(), live_fp);
    assert_eq!(live.log.end_offsets().await.unwrap(), head);
    assert_eq!(common::snapshot_files(dir.path()), before);
}

#[tokio::test]
async fn replay_without_a_policy_change_reproduces_the_default_and_reads_jsonl_events() {
    let events = strata_replay::workload::sessions(common::TENANT, 3, 80);
    let report = replay(
        ReplaySource::Events(events),
        &ReplayOptions {
            selection: Selection {
                since: Some("2026-06-03T10:00:00Z".parse().unwrap()),
                ..Selection::default()
            },
            ..ReplayOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(report.sessions, 3);
    assert!(report.call_points > 0);
    assert!(report
        .points
        .iter()
        .all(|p| p.candidate.is_none() && p.token_diff == 0));

    // A time range that no event falls in selects nothing.
    let none = replay(
        ReplaySource::Events(strata_replay::workload::sessions(common::TENANT, 2, 30)),
        &ReplayOptions {
            selection: Selection {
                since: Some("2027-01-01T00:00:00Z".parse().unwrap()),
                ..Selection::default()
            },
            ..ReplayOptions::default()
        },
        None,
    )
    .await
    .unwrap();
    assert_eq!(none.sessions, 0);
}

#[tokio::test]
async fn the_default_policy_is_byte_identical_to_assemble_and_the_tight_one_differs() {
    use strata_core::assembly::{assemble, assemble_with_policy, AssemblyRequest};
    use strata_core::tokens::O200k;
    let dir = tempfile::tempdir().unwrap();
    let live = common::populate(dir.path(), 1, 300).await;
    let snapshot = live
        .store
        .snapshot(common::TENANT, "sess-0000", "main", None, 256)
        .await
        .unwrap()
        .unwrap();
    let request = AssemblyRequest {
        budget: Some(6000),
        ..AssemblyRequest::default()
    };
    let plain = assemble(&snapshot, &request, &O200k);
    let default = assemble_with_policy(&snapshot, &request, &AssemblyPolicy::default(), &O200k);
    assert_eq!(plain, default);
    assert_eq!(
        serde_json::to_vec(&plain.messages).unwrap(),
        serde_json::to_vec(&default.messages).unwrap()
    );
    let tight = AssemblyPolicy::by_version(POLICY_VERSION_TIGHT).unwrap();
    let other = assemble_with_policy(&snapshot, &request, &tight, &O200k);
    assert_eq!(other.assembly.policy_version, POLICY_VERSION_TIGHT);
    assert_ne!(other.assembly.assembly_id, plain.assembly.assembly_id);
    assert!(other.assembly.budget_tokens == 4500);
    assert!(other.assembly.context_tokens <= plain.assembly.context_tokens);
    assert!(!other
        .assembly
        .included
        .iter()
        .any(|s| s.kind == "turn_digest"));
}

/// A `ContextBuilt` whose record names `policy_version`, placed before the session's first
/// model response.
fn with_recorded_policy(
    mut events: Vec<strata_core::Event>,
    policy_version: &str,
) -> Vec<strata_core::Event> {
    use strata_core::assembly::{ContextAssembly, Provider, ASSEMBLER_VERSION};
    let at = events
        .iter()
        .position(|e| e.payload.event_type().as_str() == "ModelResponseReceived")
        .expect("a model response");
    let before = &events[at];
    let record = ContextAssembly {
        assembly_id: "asm-recorded".into(),
        tenant_id: before.tenant_id.clone(),
        session_id: before.session_id.clone(),
        branch_id: before.branch_id.clone(),
        participant_id: "main".into(),
        provider: Provider::Openai,
        model: "gpt-4o".into(),
        policy_version: policy_version.into(),
        assembler_version: ASSEMBLER_VERSION.into(),
        tokenizer: "o200k_base".into(),
        snapshot_seq: 0,
        budget_tokens: 8_000,
        target_tokens: None,
        context_tokens: 100,
        transcript_tokens: 100,
        over_budget: false,
        included: Vec::new(),
        omitted: Default::default(),
        omitted_items: Vec::new(),
        bundle_sha256: String::new(),
        payload_sha256: String::new(),
        timings_us: Default::default(),
        projection_complete: true,
        confidential_allowed: false,
        rehydrations: Vec::new(),
        traced: false,
    };
    let built = strata_core::Event::from_json(
        serde_json::json!({
            "event_id": "built-1",
            "tenant_id": before.tenant_id,
            "session_id": before.session_id,
            "branch_id": before.branch_id,
            "timestamp": before.timestamp,
            "type": "ContextBuilt",
            "payload": {"assembly_id": "asm-recorded", "context_tokens": 100,
                        "transcript_tokens": 100, "assembly": record},
        }),
        None,
    )
    .unwrap();
    events.insert(at, built);
    events
}

#[tokio::test]
async fn a_record_of_a_retired_policy_replays_under_policy_8_and_says_so() {
    use strata_core::assembly::POLICY_VERSION_OWN_WORDS;
    let events = with_recorded_policy(
        strata_replay::workload::session(common::TENANT, "retired", 60),
        "strata.assembly/7",
    );
    let report = replay(
        ReplaySource::Events(events.clone()),
        &ReplayOptions::default(),
        None,
    )
    .await
    .unwrap();
    let point = report
        .points
        .iter()
        .find(|p| p.event_id == "built-1")
        .expect("the recorded call point");
    assert_eq!(point.recorded.policy, POLICY_VERSION_OWN_WORDS);
    assert_eq!(point.retired_policy.as_deref(), Some("strata.assembly/7"));
    assert_eq!(
        point.policy_note.as_deref(),
        Some("recorded under strata.assembly/7, retired: replayed under strata.assembly/8")
    );
    assert_eq!(
        report.retired_policy_points.get("strata.assembly/7"),
        Some(&1)
    );
    // Points with no record assemble under the default, and say nothing of retirement.
    assert!(report
        .points
        .iter()
        .filter(|p| p.event_id != "built-1")
        .all(|p| p.recorded.policy == POLICY_VERSION && p.policy_note.is_none()));
    let json = serde_json::to_value(point).unwrap();
    assert_eq!(json["retired_policy"], "strata.assembly/7");

    // `strata eval` scores the response that record answered under policy 8, and says so.
    let options = strata_replay::EvalOptions {
        keep_points: true,
        ..strata_replay::EvalOptions::default()
    };
    let mut evaluator = strata_replay::Evaluator::new(options, None).await.unwrap();
    evaluator.session("retired", events).await.unwrap();
    let evaluated = evaluator.finish();
    assert_eq!(
        evaluated.retired_policy_points.get("strata.assembly/7"),
        Some(&1)
    );
    let first = evaluated.points.first().expect("a scored response");
    assert_eq!(first.policy, POLICY_VERSION_OWN_WORDS);
    assert!(first
        .policy_note
        .as_deref()
        .is_some_and(|n| n.contains("retired: replayed under strata.assembly/8")));
}
