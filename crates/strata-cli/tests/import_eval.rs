//! `strata import` of other formats, the tenant a verb finds by itself, and `strata eval`,
//! through the binary on the embedded default.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn strata_with_stdin(data_dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data_dir);
    for var in [
        "STRATA_DATA_DIR",
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
        "STRATA_PARTITIONS",
        "STRATA_LOG_FORMAT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("STRATA_FSYNC", "never")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run strata");
    if let Some(bytes) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(bytes)
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for strata")
}

fn strata(data_dir: &Path, args: &[&str]) -> Output {
    strata_with_stdin(data_dir, args, None)
}

fn ok(data_dir: &Path, args: &[&str]) -> String {
    let out = strata(data_dir, args);
    assert!(
        out.status.success(),
        "strata {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn err(data_dir: &Path, args: &[&str]) -> String {
    let out = strata(data_dir, args);
    assert!(!out.status.success(), "strata {} succeeded", args.join(" "));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A two-event canonical session of `tenant`.
fn session_jsonl(tenant: &str, session: &str) -> String {
    [
        serde_json::json!({"event_id": format!("{tenant}-1"), "tenant_id": tenant,
            "session_id": session, "timestamp": "2026-06-03T10:00:00Z", "type": "SessionStarted",
            "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
                "context_window_tokens": 16000, "reserved_output_tokens": 1000,
                "system_prompt": "You help."}}),
        serde_json::json!({"event_id": format!("{tenant}-2"), "tenant_id": tenant,
            "session_id": session, "timestamp": "2026-06-03T10:00:01Z",
            "type": "UserPromptSubmitted",
            "payload": {"message_id": "u1", "text": format!("question of {tenant}")}}),
    ]
    .iter()
    .map(|v| v.to_string() + "\n")
    .collect()
}

#[test]
fn verbs_find_the_tenant_of_a_session_and_ask_when_several_have_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let acme = dir.path().join("acme.jsonl");
    std::fs::write(&acme, session_jsonl("acme", "s1")).expect("write");
    ok(&data, &["import", acme.to_str().expect("utf-8")]);
    // No --tenant: the only tenant with s1 is used.
    let context = ok(&data, &["context", "s1", "--json"]);
    assert!(context.contains("question of acme"), "{context}");
    assert!(ok(&data, &["export", "s1"]).contains("acme-2"));

    // The same session id for another tenant, from standard input: now the verb asks.
    let out = strata_with_stdin(
        &data,
        &["import", "-"],
        Some(session_jsonl("globex", "s1").as_bytes()),
    );
    assert!(out.status.success(), "{out:?}");
    let stderr = err(&data, &["context", "s1"]);
    assert!(
        stderr.contains("\"acme\"") && stderr.contains("\"globex\"") && stderr.contains("--tenant"),
        "{stderr}"
    );
    let context = ok(&data, &["context", "s1", "--tenant", "globex", "--json"]);
    assert!(context.contains("question of globex"), "{context}");
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/scenarios")
        .join(format!("{name}.jsonl"))
}

fn totals(json: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(json).expect("eval --json");
    v["totals"].clone()
}

#[test]
fn eval_of_a_file_writes_nothing_and_matches_eval_of_the_same_session_imported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // A long coding session, and one with outputs over the artifact threshold (offloaded on
    // import: eval of the log reads them back from the blob store).
    let coding = scenario("cli_coding_agent_compaction");
    let coding = coding.to_str().expect("utf-8");
    let files = scenario("multi_tool_file_generation");
    let files = files.to_str().expect("utf-8");
    let report = dir.path().join("points.jsonl");

    let from_file = ok(
        &data,
        &[
            "eval",
            coding,
            files,
            "--json",
            "--report",
            report.to_str().expect("utf-8"),
        ],
    );
    assert!(
        !data.join("log").exists(),
        "eval of a file never writes to the data directory"
    );
    let t = totals(&from_file);
    let points = t["points"].as_u64().expect("points");
    assert!(points > 10, "{t}");
    let (strata, transcript) = (
        t["strata"]["tokens"].as_u64().expect("tokens"),
        t["transcript"]["tokens"].as_u64().expect("tokens"),
    );
    assert!(strata < transcript, "{t}");
    assert!(t["floor"]["tokens"].as_u64().expect("floor") <= transcript);
    // The transcript holds every reference found earlier by construction.
    assert_eq!(t["transcript"]["recall"], 1.0, "{t}");
    let recall = t["strata"]["recall"].as_f64().expect("recall");
    assert!((0.0..=1.0).contains(&recall));
    let lines = std::fs::read_to_string(&report).expect("report");
    assert_eq!(lines.lines().count() as u64, points);
    for line in lines.lines() {
        let p: serde_json::Value = serde_json::from_str(line).expect("point");
        let missing = p["missing"].as_array().expect("missing");
        let present = p["sides"]["strata"]["present"].as_u64().expect("present");
        assert_eq!(
            present + missing.len() as u64,
            p["evidence"].as_u64().expect("evidence"),
            "{p}"
        );
        for m in missing {
            assert!(m["last_seen"]["event_id"].is_string(), "{m}");
        }
    }

    // The same session through import and the live log: the same figures, point for point.
    ok(&data, &["import", coding, files]);
    ok(&data, &["context", "scn-cli-coding-agent", "--json"]);
    let from_log = ok(&data, &["eval", "--json"]);
    assert_eq!(totals(&from_log), t);
}

#[test]
fn eval_refuses_an_unknown_or_retired_policy_and_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = scenario("branch_isolation");
    let file = file.to_str().expect("utf-8");
    let stderr = err(&data, &["eval", file, "--policy", "nope"]);
    assert!(
        stderr.contains("unknown assembly policy \"nope\""),
        "{stderr}"
    );
    // A retired version is named as such, beside what may be asked for instead.
    let stderr = err(&data, &["eval", file, "--policy", "strata.assembly/9"]);
    assert!(
        stderr.contains("strata.assembly/9 is retired") && stderr.contains("strata.assembly/8"),
        "{stderr}"
    );
    let stderr = err(&data, &["eval", file, "--format", "nope"]);
    assert!(stderr.contains("unknown format \"nope\""), "{stderr}");
}

#[test]
fn eval_goes_on_past_a_file_it_cannot_read_and_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"messages\": [").expect("write");
    let good = scenario("retry_critical_error_kept");
    let out = ok(
        &data,
        &[
            "eval",
            good.to_str().expect("utf-8"),
            broken.to_str().expect("utf-8"),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["sessions"], 1, "{v}");
    let unreadable = v["unreadable"].as_array().expect("unreadable");
    assert_eq!(unreadable.len(), 1, "{v}");
    assert!(
        unreadable[0].as_str().expect("why").contains("broken.json"),
        "{v}"
    );
}

fn fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../strata-import/tests/fixtures")
        .join(path)
        .to_str()
        .expect("utf-8")
        .to_owned()
}

#[test]
fn import_detects_each_format_and_a_second_import_has_no_effect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let files = [
        fixture("claude-code/11111111-2222-4333-8444-555555555555.jsonl"),
        fixture("codex/rollout-2025-10-01T10-00-00-0199a000-0000-7000-8000-000000000001.jsonl"),
        fixture("openai-chat/document.json"),
        fixture("openai-responses/items.jsonl"),
        fixture("swe-agent/legacy.traj"),
        fixture("mini-swe-agent/v2.traj.json"),
    ];
    let mut args = vec!["import", "--json", "--base-time", "2026-01-01T00:00:00Z"];
    args.extend(files.iter().map(String::as_str));
    let first: serde_json::Value = serde_json::from_str(&ok(&data, &args)).expect("json");
    let formats: Vec<&str> = first["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["format"].as_str().expect("format"))
        .collect();
    assert_eq!(
        formats,
        [
            "claude-code",
            "codex",
            "openai-chat",
            "openai-responses",
            "swe-agent",
            "mini-swe-agent"
        ]
    );
    let accepted = first["accepted"].as_u64().expect("accepted");
    assert!(accepted > 30, "{first}");
    assert_eq!(first["duplicates"], 0);

    let again: serde_json::Value = serde_json::from_str(&ok(&data, &args)).expect("json");
    assert_eq!(again["accepted"], 0, "{again}");
    assert_eq!(again["duplicates"].as_u64(), Some(accepted));

    // An imported mini-swe-agent session is a session like any other.
    let session = first["files"][5]["report"]["sessions"][0]
        .as_str()
        .expect("session")
        .to_owned();
    let context = ok(&data, &["context", &session, "--json"]);
    assert!(context.contains("\"assembly\""), "{context}");
}

#[test]
fn two_recordings_of_one_session_id_are_evaluated_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let file = scenario("retry_critical_error_kept");
    let file = file.to_str().expect("utf-8");
    let once = totals(&ok(&data, &["eval", file, "--json"]));
    let twice: serde_json::Value =
        serde_json::from_str(&ok(&data, &["eval", file, file, "--json"])).expect("json");
    assert_eq!(twice["sessions"], 2, "{twice}");
    let t = &twice["totals"];
    for side in ["transcript", "floor"] {
        assert_eq!(
            t[side]["tokens"].as_u64().expect("tokens"),
            2 * once[side]["tokens"].as_u64().expect("tokens"),
            "{side}: {twice}"
        );
    }
    // The renamed copy's ids (`~2`) are a few tokens longer where the context names them.
    let (two, one) = (
        t["strata"]["tokens"].as_u64().expect("tokens"),
        once["strata"]["tokens"].as_u64().expect("tokens"),
    );
    assert!((2 * one..2 * one + 2 * one / 100).contains(&two), "{twice}");
    assert_eq!(t["strata"]["recall"], once["strata"]["recall"]);
}

#[test]
fn eval_reads_back_the_artifacts_a_rehydration_admits_as_the_assembler_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // A 20 KiB output (offloaded as an artifact), a request for its exact bytes, and a response
    // that quotes a row from its middle (beyond the preview).
    let rows: String = (0..400)
        .map(|i| format!("row_{i:04},region_{},{}\n", i % 7, i * 13))
        .collect();
    let lines = [
        serde_json::json!({"event_id": "r1", "tenant_id": "acme", "session_id": "rh",
            "timestamp": "2026-06-03T10:00:00Z", "type": "SessionStarted",
            "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
                "context_window_tokens": 128000, "reserved_output_tokens": 4000}}),
        serde_json::json!({"event_id": "r2", "tenant_id": "acme", "session_id": "rh",
            "timestamp": "2026-06-03T10:00:01Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": "u1", "text": "Export the sales table."}}),
        serde_json::json!({"event_id": "r3", "tenant_id": "acme", "session_id": "rh",
            "timestamp": "2026-06-03T10:00:02Z", "type": "ModelResponseReceived",
            "payload": {"message_id": "a1", "text": "Exporting.", "tool_calls": [
                {"tool_call_id": "c1", "name": "export_csv", "args": {"table": "sales"}}]}}),
        serde_json::json!({"event_id": "r4", "tenant_id": "acme", "session_id": "rh",
            "timestamp": "2026-06-03T10:00:03Z", "type": "ToolCallFinished",
            "payload": {"tool_call_id": "c1", "output": rows}}),
        serde_json::json!({"event_id": "r5", "tenant_id": "acme", "session_id": "rh",
            "timestamp": "2026-06-03T10:00:04Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": "u2", "text": "Use the exact CSV from the export."}}),
        serde_json::json!({"event_id": "r6", "tenant_id": "acme", "session_id": "rh",
            "timestamp": "2026-06-03T10:00:05Z", "type": "ModelResponseReceived",
            "payload": {"message_id": "a2", "text": "Row `row_0200` has 2600."}}),
    ];
    let file = dir.path().join("rh.jsonl");
    std::fs::write(
        &file,
        lines
            .iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>(),
    )
    .expect("write");
    let report = dir.path().join("points.jsonl");
    ok(
        &data,
        &[
            "eval",
            file.to_str().expect("utf-8"),
            "--json",
            "--report",
            report.to_str().expect("utf-8"),
        ],
    );
    let points = std::fs::read_to_string(&report).expect("report");
    let last: serde_json::Value =
        serde_json::from_str(points.lines().last().expect("a point")).expect("json");
    assert!(
        last["segments"]["rehydrated_artifact"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{last}"
    );
    assert!(last["evidence"].as_u64().expect("evidence") >= 1, "{last}");
    assert_eq!(last["missing"], serde_json::json!([]), "{last}");
}

#[test]
fn eval_targets_print_the_cost_recall_curve_one_row_per_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let coding = scenario("cli_coding_agent_compaction");
    let coding = coding.to_str().expect("utf-8");
    let out = ok(
        &data,
        &[
            "eval",
            coding,
            "--policy",
            "strata.assembly/8",
            "--targets",
            "300,100000",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let curve = v["curve"].as_array().expect("curve");
    let targets: Vec<&serde_json::Value> = curve.iter().map(|r| &r["target_tokens"]).collect();
    assert_eq!(
        targets,
        [&serde_json::Value::Null, &300.into(), &100000.into()],
        "{v}"
    );
    let tokens: Vec<u64> = curve
        .iter()
        .map(|r| r["totals"]["strata"]["tokens"].as_u64().expect("tokens"))
        .collect();
    let points: Vec<u64> = curve
        .iter()
        .map(|r| r["totals"]["points"].as_u64().expect("points"))
        .collect();
    assert!(
        points.iter().all(|p| *p == points[0] && *p > 0),
        "{points:?}"
    );
    // A small target sends less than the policy's own sizes; a large one no less.
    assert!(tokens[1] < tokens[0], "{tokens:?}");
    assert!(tokens[2] >= tokens[0], "{tokens:?}");
    let table = ok(
        &data,
        &[
            "eval",
            coding,
            "--policy",
            "strata.assembly/8",
            "--targets",
            "300",
        ],
    );
    assert!(table.contains("Cost/recall curve"), "{table}");
    assert!(
        table.contains("policy's own") && table.contains("\n300 "),
        "{table}"
    );
}

#[test]
fn a_response_repeated_under_a_later_prompt_is_not_scored_again() {
    // Claude Code writes a resumed conversation's earlier responses again under the new
    // prompt: the same provider message id and text, which no model call produced there.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let event = |n: u32, ty: &str, payload: serde_json::Value| {
        serde_json::json!({"event_id": format!("rep-{n}"), "tenant_id": "acme",
            "session_id": "resumed", "timestamp": format!("2026-06-03T10:00:{n:02}Z"),
            "type": ty, "payload": payload})
        .to_string()
            + "\n"
    };
    let answer = serde_json::json!({"message_id": "msg_1",
        "text": "The bug is in `parse_header` of src/wire.rs."});
    let file = dir.path().join("resumed.jsonl");
    let lines = [
        event(
            1,
            "SessionStarted",
            serde_json::json!({
            "model": {"provider": "anthropic", "model": "claude"},
            "context_window_tokens": 16000, "reserved_output_tokens": 1000}),
        ),
        event(
            2,
            "UserPromptSubmitted",
            serde_json::json!({"message_id": "u1",
            "text": "Where does `parse_header` fail?"}),
        ),
        event(3, "ModelResponseReceived", answer.clone()),
        event(
            4,
            "UserPromptSubmitted",
            serde_json::json!({"message_id": "u2",
            "text": "Go on."}),
        ),
        event(5, "ModelResponseReceived", answer),
        event(
            6,
            "ModelResponseReceived",
            serde_json::json!({"message_id": "msg_2",
            "text": "A different answer that names `parse_header` again."}),
        ),
    ];
    std::fs::write(&file, lines.concat()).expect("write");
    let report: serde_json::Value = serde_json::from_str(&ok(
        &data,
        &["eval", file.to_str().expect("utf-8"), "--json"],
    ))
    .expect("json");
    assert_eq!(report["repeated_points"], 1, "{report}");
    assert_eq!(report["totals"]["points"], 2, "{report}");
    let text = ok(&data, &["eval", file.to_str().expect("utf-8")]);
    assert!(
        text.contains("2 call points") && text.contains("1 repeated"),
        "{text}"
    );
}
