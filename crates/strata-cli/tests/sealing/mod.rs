//! What the sealing and forgetting tests share: the `strata` binary run with `--seal` (none when
//! `seal` is empty: the deployment's setting), on a data directory of its own, and byte searches
//! over what it leaves on disk.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) fn strata(data_dir: &Path, seal: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata"));
    cmd.arg("--data-dir").arg(data_dir);
    if !seal.is_empty() {
        cmd.args(["--seal", seal]);
    }
    for var in [
        "STRATA_DATA_DIR",
        "STRATA_LOG",
        "STRATA_DB",
        "STRATA_HOT",
        "STRATA_BLOB",
        "STRATA_KEYS",
        "STRATA_MASTER_KEY_FILE",
        "STRATA_SEAL",
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

pub(crate) fn ok(data_dir: &Path, seal: &str, args: &[&str]) -> String {
    let out = strata(data_dir, seal, args);
    assert!(
        out.status.success(),
        "strata --seal {seal} {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file under `dir`, concatenated.
pub(crate) fn bytes_under(dir: &Path) -> Vec<u8> {
    files_under(dir).concat()
}

/// The contents of every file under `dir`, one by one.
pub(crate) fn files_under(dir: &Path) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(std::fs::read(&path).expect("read"));
            }
        }
    }
    out
}

pub(crate) fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}
