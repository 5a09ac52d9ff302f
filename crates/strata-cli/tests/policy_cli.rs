//! The policy set through the real `strata` binary: a restricted output (large enough to be an
//! artifact, so its preview is stored too) never leaves the service — not in the payload, not in
//! the service's logs at trace level, not in the error of a refused rehydration; a confidential
//! one follows the tenant's allow-list; the recorded assembly is compact unless `--trace`, and
//! `--why-not` answers for one record from either.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

const SECRET: &str = "PATIENT-RECORD-SECRET-9931";
const CONFIDENTIAL: &str = "DEAL-SIZE-CONFIDENTIAL-77";

fn strata(data_dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data_dir);
    for var in [
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
        "STRATA_CONFIDENTIAL_PROVIDERS",
        "STRATA_LOG_FORMAT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("STRATA_FSYNC", "never").env("RUST_LOG", "trace");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata");
    assert!(
        out.status.success(),
        "strata {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn events() -> String {
    // 12 KiB of "records", the secret in the head (so in the stored preview too) and the tail.
    let mut records = format!("id,name,diagnosis\n1,{SECRET},flu\n");
    while records.len() < 12 * 1024 {
        records.push_str("2,redacted,none\n");
    }
    records.push_str(&format!("3,{SECRET},cold\n"));
    let lines = [
        json!({"type": "SessionStarted", "payload": {"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 32000, "reserved_output_tokens": 1000,
            "system_prompt": "You help clinicians."}}),
        json!({"type": "UserPromptSubmitted", "payload": {"message_id": "u1", "text": "Pull the patient list and the deal."}}),
        json!({"type": "ModelResponseReceived", "payload": {"message_id": "a1", "text": "",
            "tool_calls": [{"tool_call_id": "ehr", "name": "ehr.export", "args": {"ward": 3}},
                           {"tool_call_id": "crm", "name": "crm.deal", "args": {"id": 5}}]}}),
        json!({"type": "ToolCallFinished", "payload": {"tool_call_id": "ehr", "output": records,
            "privacy_class": "restricted"}}),
        json!({"type": "ToolCallFinished", "payload": {"tool_call_id": "crm",
            "output": format!("deal 5: {CONFIDENTIAL}"), "privacy_class": "confidential"}}),
        json!({"type": "ModelResponseReceived", "payload": {"message_id": "a2", "text": "Done."}}),
        json!({"type": "UserPromptSubmitted", "payload": {"message_id": "u2",
            "text": "Use the exact ehr export from before."}}),
    ];
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut l = l.clone();
            l["event_id"] = json!(format!("p{i}"));
            l["tenant_id"] = json!("dev");
            l["session_id"] = json!("clinic");
            l["timestamp"] = json!(format!("2026-06-03T10:00:{i:02}Z"));
            l.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn withheld_bytes_never_leave_and_explanations_answer_from_compact_and_traced_records() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("clinic.jsonl");
    std::fs::write(&file, events()).unwrap();
    strata(&data, &[], &["import", file.to_str().unwrap()]);

    // The request asks for the restricted export byte for byte: refused, with a safe summary.
    let out = strata(&data, &[], &["context", "clinic", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains(SECRET),
        "payload or record leaks: {stdout}"
    );
    assert!(!stderr.contains(SECRET), "logs leak at trace level");
    assert!(!stdout.contains(CONFIDENTIAL), "not on the allow-list");
    assert!(stdout.contains("withheld by privacy policy: restricted output of ehr.export"));
    let ctx: Value = serde_json::from_str(&stdout).unwrap();
    let a = &ctx["assembly"];
    // Both raw outputs are withheld (and the memories made from them).
    let withheld_outputs = a["omitted_items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "raw_tool_output" && o["reason"] == "privacy_provider")
        .count();
    assert_eq!(withheld_outputs, 2, "{a}");
    let refusal = &a["rehydrations"][0];
    assert_eq!(refusal["tool_call_id"], "ehr");
    assert_eq!(refusal["rehydrated"], false);
    assert!(refusal["reason"].as_str().unwrap().contains("restricted"));

    // Anthropic is on the tenant's allow-list for confidential data; OpenAI is not.
    let allow = [("STRATA_CONFIDENTIAL_PROVIDERS", "dev=anthropic")];
    let out = strata(
        &data,
        &allow,
        &["context", "clinic", "--json", "--provider", "anthropic"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(CONFIDENTIAL) && !stdout.contains(SECRET));
    let out = strata(&data, &allow, &["context", "clinic", "--json"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(CONFIDENTIAL));

    // The recorded assembly is compact; --why-not still answers for what was selected.
    let id = a["assembly_id"].as_str().unwrap().to_owned();
    let rec: Value =
        serde_json::from_slice(&strata(&data, &[], &["inspect", &id, "--json"]).stdout).unwrap();
    assert_eq!(rec["traced"], false);
    assert_eq!(rec["omitted_items"], json!([]));
    assert_eq!(rec["omitted"], a["omitted"], "counts by reason are kept");
    let why: Value = serde_json::from_slice(
        &strata(&data, &[], &["inspect", &id, "--why-not", "p6", "--json"]).stdout,
    )
    .unwrap();
    assert!(
        why["explanation"][0]
            .as_str()
            .unwrap()
            .starts_with("included in"),
        "{why}"
    );

    // With --trace the record keeps every candidate: the withheld result is explained.
    let traced: Value = serde_json::from_slice(
        &strata(
            &data,
            &[],
            &[
                "context",
                "clinic",
                "--json",
                "--trace",
                "--request",
                "status?",
            ],
        )
        .stdout,
    )
    .unwrap();
    let id = traced["assembly"]["assembly_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = strata(&data, &[], &["inspect", &id, "--why-not", "p3"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("withheld from this provider by privacy policy"),
        "{text}"
    );
    assert!(!text.contains(SECRET));

    // A tool call id is answered through the events that carry it: the call and its result.
    let out = strata(&data, &[], &["inspect", &id, "--why-not", "ehr"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ModelResponseReceived p2: included in"),
        "{text}"
    );
    assert!(
        text.contains("ToolCallFinished p3: left out: withheld from this provider"),
        "{text}"
    );
}
