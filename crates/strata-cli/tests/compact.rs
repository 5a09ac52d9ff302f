//! `strata compact` through the real binary: an explicit compaction is recorded on the log and
//! projected, the next context uses its summary for the range, and the raw events stay
//! exportable (invariant 8).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use strata_compactor::scenario;

fn strata(data_dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data_dir);
    for var in [
        "STRATA_DATA_DIR",
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("STRATA_FSYNC", "never")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run strata")
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
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn explicit_compaction_is_recorded_used_and_replaces_no_raw_event() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let events = scenario::coding_session("t", "s", 30);
    let file = dir.path().join("s.jsonl");
    let lines: Vec<String> = events.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    ok(&data, &["import", file.to_str().unwrap()]);

    let record: Value =
        serde_json::from_str(&ok(&data, &["compact", "s", "--tenant", "t", "--json"])).unwrap();
    assert_eq!(record["status"], "completed", "{record:#}");
    assert_eq!(record["check"]["passed"], true);
    assert_eq!(record["first_event_id"], "s-00000");
    assert!(record["files_modified"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "src/module_2.rs"));
    // Nothing new to summarise: a second request says so.
    assert!(ok(&data, &["compact", "s", "--tenant", "t"]).contains("nothing to compact"));

    let context: Value =
        serde_json::from_str(&ok(&data, &["context", "s", "--tenant", "t", "--json"])).unwrap();
    let included = context["assembly"]["included"].as_array().unwrap();
    assert!(included.iter().any(|s| s["kind"] == "compaction_summary"));
    assert!(
        context["assembly"]["omitted"]["compacted"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let payload = context["payload"].to_string();
    assert!(payload.contains(scenario::GOAL));
    assert!(payload.contains(scenario::UNRESOLVED_ERROR));

    // Every raw event is still exported, plus the compaction event.
    let exported = ok(&data, &["export", "s", "--tenant", "t"]);
    for e in &events {
        assert!(exported.contains(e["event_id"].as_str().unwrap()));
    }
    assert!(exported.contains("CompactionCompleted"));

    // A branch the session does not have is refused, by name.
    let out = strata(&data, &["compact", "s", "--tenant", "t", "--branch", "b1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(r#"has no branch "b1""#));
}
