//! `--seal on` on the embedded default, through the binary: the log holds no content in the
//! clear, every reader (projector, replay, rebuild, archive) opens it, and the same session reads
//! back exactly as on a plain log.

mod sealing;

use std::path::Path;

use sealing::{bytes_under, contains, files_under, ok, strata};

/// The session's events as exported, without the assembly records (their ids are random).
fn history(data_dir: &Path, seal: &str) -> Vec<serde_json::Value> {
    ok(data_dir, seal, &["export", "demo-invoice-fix"])
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
        .filter(|e| e["type"] != "ContextBuilt")
        .collect()
}

#[test]
fn a_sealed_log_reads_back_like_a_plain_one_and_holds_no_text_in_the_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sealed, plain) = (dir.path().join("sealed"), dir.path().join("plain"));
    ok(&sealed, "on", &["demo"]);
    ok(&plain, "off", &["demo"]);
    assert!(sealed.join("master.key").exists() && sealed.join("keys.db").exists());
    assert!(!plain.join("master.key").exists(), "off creates no key");

    let events = history(&plain, "off");
    assert!(events.len() > 10);
    assert_eq!(history(&sealed, "on"), events, "same events, sealed or not");

    // What the agent and the tools said is in the plain log and not in the sealed one.
    let markers: Vec<String> = events
        .iter()
        .filter_map(|e| match e["type"].as_str() {
            Some("UserPromptSubmitted" | "ModelResponseReceived") => e["payload"]["text"].as_str(),
            Some("ToolCallFinished") => e["payload"]["output"].as_str(),
            _ => None,
        })
        .map(|text| text.chars().take(40).collect::<String>())
        .filter(|m| m.len() >= 20)
        .collect();
    assert!(markers.len() >= 5, "{markers:?}");
    let (sealed_log, plain_log) = (
        bytes_under(&sealed.join("log")),
        bytes_under(&plain.join("log")),
    );
    for marker in &markers {
        assert!(contains(&plain_log, marker), "plain log lacks {marker:?}");
        assert!(
            !contains(&sealed_log, marker),
            "sealed log holds {marker:?}"
        );
    }
    // The artifacts (outputs too large for the log) are sealed too: the plain deployment's
    // blobs hold their text, the sealed one's do not.
    let artifact_text: Vec<String> = files_under(&plain.join("blobs"))
        .iter()
        .filter_map(|bytes| bytes.get(100..140))
        .filter_map(|w| std::str::from_utf8(w).ok())
        .filter(|w| w.chars().all(|c| c.is_ascii_graphic() || c == ' '))
        .map(str::to_owned)
        .collect();
    assert!(!artifact_text.is_empty(), "the demo stores artifacts");
    let sealed_blobs = bytes_under(&sealed.join("blobs"));
    for text in &artifact_text {
        assert!(
            !contains(&sealed_blobs, text),
            "a sealed artifact holds {text:?}"
        );
    }
    // The key store holds keys wrapped, never the master key that wraps them.
    let master = std::fs::read_to_string(sealed.join("master.key")).expect("master key");
    let mut stores = std::fs::read(sealed.join("keys.db")).expect("keys.db");
    stores.extend(&sealed_log);
    assert!(!contains(&stores, master.trim()));

    // Replay, the archive and rebuild open the sealed records; turning sealing off later keeps
    // them readable while the master key is there.
    ok(&sealed, "", &["seal", "off"]);
    let replayed = ok(&sealed, "", &["replay", "--json"]);
    ok(&sealed, "", &["seal", "on"]);
    let plain_replay = ok(&plain, "off", &["replay", "--json"]);
    let points = |s: &str| {
        serde_json::from_str::<serde_json::Value>(s).expect("json")["call_points"].clone()
    };
    assert_eq!(points(&replayed), points(&plain_replay));
    ok(&sealed, "on", &["archive"]);
    let from_archive = ok(&sealed, "on", &["replay", "--from-archive", "--json"]);
    assert_eq!(points(&from_archive), points(&plain_replay));
    let out = ok(&sealed, "on", &["rebuild"]);
    assert!(out.contains("readers switched"), "{out}");
    assert_eq!(
        history(&sealed, "on"),
        events,
        "the rebuilt set reads the same"
    );

    // Without the master key the log cannot be read, and the error says so.
    std::fs::rename(sealed.join("master.key"), dir.path().join("elsewhere.key")).expect("move");
    let out = strata(&sealed, "", &["replay", "--json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sealed"), "{stderr}");
    let out = strata(&sealed, "", &["demo"]);
    assert!(!out.status.success(), "no new master key over old keys");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("restore the master key"), "{stderr}");
    assert!(!sealed.join("master.key").exists());

    // Another master key does not unwrap the keys.
    let other = tempfile::tempdir().expect("tempdir");
    ok(&other.path().join("data"), "on", &["demo"]);
    std::fs::copy(
        other.path().join("data/master.key"),
        sealed.join("master.key"),
    )
    .expect("copy");
    let out = strata(&sealed, "", &["replay", "--json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not unwrap"), "{stderr}");
}
