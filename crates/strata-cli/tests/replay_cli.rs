//! `strata replay` and `strata rebuild` through the binary, on the embedded default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn strata(data_dir: &Path, args: &[&str]) -> Output {
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
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n != "LOCK") {
                out.insert(path.clone(), std::fs::read(&path).expect("read"));
            }
        }
    }
    out
}

/// Replay wrote nothing into `data` since `before` was taken: the files that differ, by name.
fn assert_unchanged(data: &Path, before: &BTreeMap<PathBuf, Vec<u8>>) {
    let after = files(data);
    let changed: Vec<_> = after
        .keys()
        .chain(before.keys())
        .filter(|k| after.get(*k) != before.get(*k))
        .collect();
    assert!(
        changed.is_empty(),
        "replay wrote into the data directory: {changed:?}"
    );
}

#[test]
fn replay_changes_nothing_live_and_rebuild_switches_readers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    // A session to work on: the demo's.
    ok(&data, &["demo"]);
    let exported = ok(&data, &["export", "demo-invoice-fix"]);
    assert!(exported.lines().count() > 10);

    let before = files(&data);
    let report = dir.path().join("points.jsonl");
    let out = ok(
        &data,
        &[
            "replay",
            "--tenant",
            "dev",
            "--policy",
            "strata.assembly/3-tight",
            "--budget",
            "4000",
            "--report",
            report.to_str().expect("utf-8"),
            "--json",
        ],
    );
    let summary: serde_json::Value = serde_json::from_str(&out).expect("json summary");
    assert_eq!(summary["sessions"], 1, "{summary}");
    assert!(
        summary["call_points"].as_u64().expect("points") > 0,
        "{summary}"
    );
    assert_eq!(summary["candidate_policy"], "strata.assembly/3-tight");
    // The quality columns: the demo's recorded responses, scored under both policies.
    let quality = &summary["recorded_quality"];
    assert!(quality["points"].as_u64().expect("points") > 0, "{summary}");
    assert!(
        quality["evidence"].as_u64().expect("evidence") > 0,
        "{summary}"
    );
    assert_eq!(summary["candidate_quality"]["points"], quality["points"]);
    assert!(
        quality["strata"]["present"].as_u64() <= quality["transcript"]["present"].as_u64(),
        "{summary}"
    );
    let points = std::fs::read_to_string(&report).expect("report");
    assert_eq!(
        points.lines().count() as u64,
        summary["call_points"].as_u64().expect("points")
    );
    assert_unchanged(&data, &before);

    // The archive replays like the log.
    let out = ok(&data, &["archive"]);
    assert!(out.contains("archived"), "{out}");
    let before = files(&data);
    let from_archive = ok(
        &data,
        &[
            "replay",
            "--from-archive",
            "--policy",
            "strata.assembly/3-tight",
            "--budget",
            "4000",
            "--json",
        ],
    );
    let from_archive: serde_json::Value = serde_json::from_str(&from_archive).expect("json");
    assert_eq!(from_archive["call_points"], summary["call_points"]);
    assert_eq!(
        from_archive["candidate_tokens"],
        summary["candidate_tokens"]
    );
    assert_eq!(
        from_archive["recorded_quality"],
        summary["recorded_quality"]
    );
    assert_eq!(
        from_archive["candidate_quality"],
        summary["candidate_quality"]
    );
    assert_unchanged(&data, &before);

    // An unknown policy is refused, naming the known ones.
    let bad = strata(&data, &["replay", "--policy", "nope"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("strata.assembly/3"));

    let out = ok(&data, &["rebuild"]);
    assert!(out.contains("readers switched to strata.gen-2.db"), "{out}");
    assert_eq!(
        std::fs::read_to_string(data.join("store.current"))
            .expect("pointer")
            .trim(),
        "strata.gen-2.db"
    );
    // Readers use the rebuilt set: the session reads back the same.
    assert_eq!(ok(&data, &["export", "demo-invoice-fix"]), exported);
    let list = ok(&data, &["rebuild", "--list"]);
    assert!(list.contains("strata.gen-2.db  (current)"), "{list}");
    ok(&data, &["rebuild", "--drop", "strata.db"]);
    assert!(!data.join("strata.db").exists());
    assert_eq!(ok(&data, &["export", "demo-invoice-fix"]), exported);
}

/// `strata archive --follow` is the archiver service: a pass at start, then one per interval,
/// each copying only what is new (a JSON line each), and a clean exit on SIGTERM.
#[test]
fn archive_follow_runs_passes_until_sigterm() {
    use std::io::{BufRead, BufReader};

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    ok(&data, &["demo"]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    for var in ["STRATA_DATA_DIR", "STRATA_LOG", "STRATA_DB", "STRATA_BLOB"] {
        cmd.env_remove(var);
    }
    let mut child = cmd
        .arg("--data-dir")
        .arg(&data)
        .args(["archive", "--follow", "--interval-secs", "1", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run strata archive --follow");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first: serde_json::Value =
        serde_json::from_str(&lines.next().expect("a first pass").expect("read")).expect("json");
    assert!(first["records"].as_u64().unwrap() > 0, "{first}");
    // The next pass finds nothing new.
    let second: serde_json::Value =
        serde_json::from_str(&lines.next().expect("a second pass").expect("read")).expect("json");
    assert_eq!(second["records"], 0, "{second}");
    assert_eq!(second["ends"], first["ends"]);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the archiver did not stop on SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
