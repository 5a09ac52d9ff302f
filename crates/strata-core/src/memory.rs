//! Governed memory: the memory model, the deterministic tool-family extractors and the
//! pure [`MemoryEngine`] that turns log events into `MemoryRecorded` / `MemorySuperseded`
//! payloads.
//!
//! Rules the engine enforces, each tested below:
//! - every memory carries source refs (invariant 10) and a scope with a freshness class and an
//!   update policy (invariant 11); [`Memory::from_payload`] rejects one without;
//! - derived events (its own output, assemblies, compactions) are never extracted, nor is text
//!   that quotes a recalled memory (`[memory mem_…]`);
//! - the same tool with the same arguments, observed later in the same project, supersedes the
//!   earlier observation (`supersedes` on the new memory, `MemorySuperseded` for the old one);
//! - two observations of the same subject from different sources that disagree are both kept
//!   and linked with `conflicts_with`;
//! - a file write invalidates only the memories about that file;
//! - a guess of the model stays a session-scoped hypothesis; only an explicit user instruction
//!   (policy rule [`REMEMBER_RULE`]) promotes a statement to user scope, and the reason is kept;
//! - memories are keyed by tenant and project: nothing crosses either.
//!
//! The engine is pure and deterministic: ids derive from content, so replaying the same log gives
//! the same memories.

use std::collections::BTreeMap;
use std::fmt::Debug;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::event::{format_timestamp, Event};
use crate::payload::{FreshnessClass, MemoryRecorded, MemorySuperseded, Payload, PrivacyClass};
use crate::projection::truncate_chars;

mod held;
pub use held::MemoryLimits;
use held::{Indexed, OpenCall};

/// Version of the default extractors; part of every memory's provenance and id.
pub const EXTRACTOR_VERSION: &str = "strata.extract/1";
/// Largest summary text of a tool memory, in characters.
pub const MAX_TEXT_CHARS: usize = 240;
/// Largest structured payload of a tool memory, in bytes of compact JSON.
pub const MAX_PAYLOAD_BYTES: usize = 320;
/// The policy rule that promotes an explicit user instruction to user scope.
pub const REMEMBER_RULE: &str = "policy:explicit-remember-instruction";
/// Marker the assembler puts before a recalled memory; text carrying it is never re-extracted.
pub const RECALL_MARKER: &str = "[memory mem_";

/// Where a memory applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    User,
    Project,
    Workspace,
    Session,
    Global,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Workspace => "workspace",
            Scope::Session => "session",
            Scope::Global => "global",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Some(match s {
            "user" => Scope::User,
            "project" => Scope::Project,
            "workspace" => Scope::Workspace,
            "session" => Scope::Session,
            "global" => Scope::Global,
            _ => return None,
        })
    }
}

/// Who may see a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Visibility {
    /// Only the owner participant.
    Participant,
    /// Every participant of the branch.
    Branch,
    /// Every participant of the session.
    Session,
    /// Sessions of the same project (same tenant).
    Project,
}

/// A governed memory: the typed form of a `MemoryRecorded` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub memory_id: String,
    pub tenant_id: String,
    pub project_id: String,
    pub session_id: String,
    pub branch_id: String,
    /// Seq of the event it was made from (so that a branch forked before it does not see it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_seq: Option<u64>,
    pub scope: Scope,
    /// The platform's end user a `user`-scoped memory belongs to (the `user_id` of its
    /// session's `SessionStarted`). A user memory without one is never retrieved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// `tool_memory`, `file_change`, `user_preference`, `hypothesis`.
    pub kind: String,
    /// Tool family of a tool memory (`test_runner`, `shell`, `file_read`, `search`, `http`,
    /// `file_write`, `generic`), or the statement's origin.
    pub family: String,
    /// Compact summary text.
    pub text: String,
    /// Structured payload (bounded by [`MAX_PAYLOAD_BYTES`]).
    pub data: Value,
    /// Events the memory derives from (required).
    pub source_refs: Vec<String>,
    /// Artifacts the memory derives from.
    pub artifact_refs: Vec<String>,
    /// The tool call it summarises, for tool memories.
    pub tool_call_id: Option<String>,
    pub confidence: f64,
    /// `tool_output`, `tool_error`, `user_statement`, `model_guess`.
    pub confidence_basis: String,
    pub privacy_class: PrivacyClass,
    pub freshness_class: FreshnessClass,
    pub observed_at: String,
    pub stale_after: Option<String>,
    /// How the memory is kept up to date (invariant 11).
    pub update_policy: String,
    /// The tool to call to revalidate it once stale.
    pub revalidate_with: Option<String>,
    pub owner_participant: String,
    pub visibility: Visibility,
    /// Same tool + same canonical arguments: what supersession is decided on.
    pub provenance_key: String,
    /// What the memory is about: what conflicts are decided on.
    pub subject: String,
    /// Digest of the value observed for `subject`.
    pub value_digest: String,
    pub conflicts_with: Vec<String>,
    pub supersedes: Vec<String>,
    /// Filled by projection readers from `MemorySuperseded`; never by the writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// Why the memory has a scope wider than its session, when it does.
    pub promotion_reason: Option<String>,
    pub extractor: String,
}

/// Why a `MemoryRecorded` payload is not a governed memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// Invariant 10.
    #[error("memory {0} has no source refs")]
    NoSourceRefs(String),
    /// Invariant 11.
    #[error("memory {0} has no valid scope")]
    NoScope(String),
    /// Invariant 11.
    #[error("memory {0} has no freshness class or update policy")]
    NoUpdatePolicy(String),
    /// A wider-than-session memory with no recorded reason.
    #[error("memory {0} is promoted beyond its session without a reason")]
    UnreasonedPromotion(String),
    #[error("memory {0} is malformed: {1}")]
    Malformed(String, String),
}

impl Memory {
    /// The wire payload: typed fields where the schema has them, the rest in `extra`.
    pub fn to_payload(&self) -> MemoryRecorded {
        let mut full = serde_json::to_value(self).expect("memory serializes");
        let obj = full.as_object_mut().expect("object");
        for k in [
            "memory_id",
            "scope",
            "kind",
            "text",
            "source_refs",
            "confidence",
            "privacy_class",
            "freshness_class",
            "superseded_by",
        ] {
            obj.remove(k);
        }
        MemoryRecorded {
            memory_id: self.memory_id.clone(),
            scope: self.scope.as_str().to_owned(),
            kind: self.kind.clone(),
            text: self.text.clone(),
            source_refs: self.source_refs.clone(),
            confidence: Some(self.confidence),
            privacy_class: Some(self.privacy_class),
            freshness_class: Some(self.freshness_class),
            extra: std::mem::take(obj),
        }
    }

    /// Reads and checks a `MemoryRecorded` payload (invariants 10 and 11).
    pub fn from_payload(p: &MemoryRecorded) -> Result<Memory, MemoryError> {
        let id = p.memory_id.clone();
        if p.source_refs.iter().all(|s| s.trim().is_empty()) {
            return Err(MemoryError::NoSourceRefs(id));
        }
        if Scope::parse(&p.scope).is_none() {
            return Err(MemoryError::NoScope(id));
        }
        if p.freshness_class.is_none()
            || p.extra
                .get("update_policy")
                .and_then(Value::as_str)
                .is_none_or(|s| s.is_empty())
        {
            return Err(MemoryError::NoUpdatePolicy(id));
        }
        let mut obj: Map<String, Value> = p.extra.clone();
        obj.insert("memory_id".into(), json!(p.memory_id));
        obj.insert("scope".into(), json!(p.scope));
        obj.insert("kind".into(), json!(p.kind));
        obj.insert("text".into(), json!(p.text));
        obj.insert("source_refs".into(), json!(p.source_refs));
        obj.insert("confidence".into(), json!(p.confidence.unwrap_or(0.0)));
        obj.insert(
            "privacy_class".into(),
            json!(p.privacy_class.unwrap_or(PrivacyClass::Internal)),
        );
        obj.insert("freshness_class".into(), json!(p.freshness_class));
        let m: Memory = serde_json::from_value(Value::Object(obj))
            .map_err(|e| MemoryError::Malformed(id.clone(), e.to_string()))?;
        if m.scope != Scope::Session && m.promotion_reason.is_none() && m.kind != "tool_memory" {
            return Err(MemoryError::UnreasonedPromotion(id));
        }
        Ok(m)
    }

    /// Whether the memory is past its `stale_after` at `now`.
    pub fn is_stale_at(&self, now: &DateTime<Utc>) -> bool {
        self.stale_after
            .as_deref()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .is_some_and(|t| t.with_timezone(&Utc) <= *now)
    }
}

/// A finished tool call, as the extractors see it.
#[derive(Debug, Clone)]
pub struct ToolObservation<'a> {
    pub tool: &'a str,
    pub args: &'a Value,
    /// Inline output, or the preview of an output stored as an artifact.
    pub output: &'a str,
    pub is_error: bool,
    pub output_ref: Option<&'a str>,
    pub output_sha256: Option<&'a str>,
    pub output_bytes: Option<u64>,
}

/// What an extractor says about one tool result.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    pub family: &'static str,
    pub text: String,
    pub data: Value,
    /// What the observation is about; defaults to the provenance key.
    pub subject: Option<String>,
    pub freshness: FreshnessClass,
    /// Lifetime from `observed_at`, for time-bounded memories.
    pub ttl_secs: Option<i64>,
    pub scope: Scope,
}

/// A memory extractor for tool results. The default ones are deterministic rules; an
/// LLM-backed one can be plugged in (none is, by default: nothing calls out to a network).
pub trait Extractor: Debug + Send + Sync {
    /// Name and version, recorded in each memory's `extractor`.
    fn name(&self) -> &str;
    /// A memory for the observation, or `None` when this extractor does not handle it.
    fn extract(&self, obs: &ToolObservation<'_>) -> Option<Extracted>;
}

/// The tool families the default extractor recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFamily {
    TestRunner,
    Shell,
    FileRead,
    Search,
    Http,
    FileWrite,
    Generic,
}

/// Picks the family from the tool name, its arguments and the output's shape.
pub fn classify(obs: &ToolObservation<'_>) -> ToolFamily {
    let name = obs.tool.to_ascii_lowercase();
    let command = arg_str(obs.args, &["command", "cmd", "script"]).unwrap_or_default();
    let cmd = command.to_ascii_lowercase();
    // Words match whole name segments (a segment may extend a word of four letters or more:
    // `tests`, `execute`), so that `get_thread` is not a file read nor `list_charges` a grep.
    let segments: Vec<&str> = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|s| !s.is_empty())
        .collect();
    let has = |words: &[&str]| {
        words.iter().any(|w| {
            if w.contains('_') {
                name.contains(w)
            } else if w.len() <= 3 {
                segments.contains(w)
            } else {
                segments.iter().any(|s| s.starts_with(w))
            }
        })
    };
    let out = obs.output;
    if has(&["test", "pytest", "jest", "vitest"])
        || [
            "cargo test",
            "pytest",
            "npm test",
            "go test",
            "jest",
            "cargo nextest",
        ]
        .iter()
        .any(|w| cmd.contains(w))
        || out.contains("test result:")
        || (out.contains(" passed") && (out.contains(" failed") || out.contains("=====")))
    {
        return ToolFamily::TestRunner;
    }
    if has(&["write", "edit", "patch", "replace", "create_file"]) {
        return ToolFamily::FileWrite;
    }
    if has(&["read", "cat", "view", "open_file"]) {
        return ToolFamily::FileRead;
    }
    if has(&["search", "grep", "rg", "find", "glob", "lookup"]) {
        return ToolFamily::Search;
    }
    if has(&[
        "http", "fetch", "curl", "request", "api", "get_", "list_", "query",
    ]) || name.contains('.')
        || name.contains("__")
        || serde_json::from_str::<Value>(out.trim()).is_ok_and(|v| v.is_object())
    {
        return ToolFamily::Http;
    }
    if has(&[
        "bash", "shell", "sh", "exec", "run", "terminal", "build", "make", "cmd",
    ]) {
        return ToolFamily::Shell;
    }
    ToolFamily::Generic
}

/// The default deterministic extractor: one rule set per tool family.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleExtractor;

impl Extractor for RuleExtractor {
    fn name(&self) -> &str {
        EXTRACTOR_VERSION
    }

    fn extract(&self, obs: &ToolObservation<'_>) -> Option<Extracted> {
        let e = match classify(obs) {
            ToolFamily::TestRunner => extract_tests(obs),
            ToolFamily::Shell => extract_shell(obs),
            ToolFamily::FileRead => extract_file_read(obs),
            ToolFamily::Search => extract_search(obs),
            ToolFamily::Http => extract_http(obs),
            ToolFamily::FileWrite => extract_file_write(obs),
            ToolFamily::Generic => extract_generic(obs),
        };
        Some(bound(e))
    }
}

/// Caps text and payload so that a tool memory stays a few hundred bytes.
fn bound(mut e: Extracted) -> Extracted {
    e.text = truncate_chars(&e.text, MAX_TEXT_CHARS);
    if serde_json::to_string(&e.data).map_or(0, |s| s.len()) > MAX_PAYLOAD_BYTES {
        if let Some(obj) = e.data.as_object_mut() {
            // Shorten the largest fields first until it fits.
            for _ in 0..16 {
                let size = serde_json::to_string(&*obj).map_or(0, |s| s.len());
                if size <= MAX_PAYLOAD_BYTES {
                    break;
                }
                let Some(key) = obj
                    .iter()
                    .max_by_key(|(_, v)| v.to_string().len())
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                let v = obj.remove(&key).unwrap_or(Value::Null);
                let short = match v {
                    Value::Array(mut a) if a.len() > 1 => {
                        a.truncate(a.len() / 2);
                        Value::Array(a)
                    }
                    Value::String(s) if s.chars().count() > 24 => {
                        Value::String(truncate_chars(&s, s.chars().count() / 2))
                    }
                    _ => continue,
                };
                obj.insert(key, short);
            }
        }
        if serde_json::to_string(&e.data).map_or(0, |s| s.len()) > MAX_PAYLOAD_BYTES {
            e.data = json!({"truncated": true});
        }
    }
    e
}

fn arg_str(args: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match args.get(k) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    })
}

fn first_number_before(line: &str, word: &str) -> Option<u64> {
    let idx = line.find(word)?;
    line[..idx]
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
}

/// A `path:line[:col]` location in a line, if there is one.
fn location(line: &str) -> Option<String> {
    line.split_whitespace().find_map(|tok| {
        let tok = tok.trim_matches(|c: char| "()[],'\"`".contains(c));
        let mut parts = tok.split(':');
        let path = parts.next()?;
        let line_no = parts.next()?;
        (path.contains('.') && !path.is_empty() && line_no.parse::<u32>().is_ok())
            .then(|| tok.trim_end_matches(':').to_owned())
    })
}

fn extract_tests(obs: &ToolObservation<'_>) -> Extracted {
    let mut passed = 0u64;
    let mut failed = 0u64;
    let mut failing: Vec<String> = Vec::new();
    let mut first_error: Option<String> = None;
    for line in obs.output.lines() {
        let l = line.trim();
        let lower = l.to_ascii_lowercase();
        if lower.contains("passed") || lower.contains("failed") {
            if let Some(n) = first_number_before(&lower, " passed") {
                passed = passed.max(n);
            }
            if let Some(n) = first_number_before(&lower, " failed") {
                failed = failed.max(n);
            }
        }
        // cargo: "test path::name ... FAILED"; pytest: "FAILED tests/x.py::name - ..."
        if let Some(rest) = l.strip_prefix("test ") {
            if let Some(name) = rest.strip_suffix(" ... FAILED") {
                failing.push(name.to_owned());
            }
        } else if let Some(rest) = l.strip_prefix("FAILED ") {
            failing.push(rest.split(" - ").next().unwrap_or(rest).to_owned());
        }
        if first_error.is_none()
            && (lower.contains("panicked at")
                || lower.contains("error")
                || lower.contains("assert"))
        {
            first_error = location(l);
        }
    }
    failing.sort();
    failing.dedup();
    if failed == 0 && !failing.is_empty() {
        failed = failing.len() as u64;
    }
    let ok = failed == 0 && !obs.is_error;
    let text = if ok {
        format!("tests passed: {passed} passed, 0 failed")
    } else {
        format!(
            "tests FAILED: {passed} passed, {failed} failed{}{}",
            if failing.is_empty() {
                String::new()
            } else {
                format!(" ({})", failing.join(", "))
            },
            first_error
                .as_deref()
                .map(|l| format!("; first error at {l}"))
                .unwrap_or_default()
        )
    };
    Extracted {
        family: "test_runner",
        text,
        data: json!({"passed": passed, "failed": failed, "failing": failing,
            "first_error_at": first_error}),
        subject: None,
        freshness: FreshnessClass::Volatile,
        ttl_secs: None,
        scope: Scope::Session,
    }
}

fn extract_shell(obs: &ToolObservation<'_>) -> Extracted {
    let exit = obs
        .output
        .lines()
        .find_map(|l| {
            let lower = l.to_ascii_lowercase();
            let idx = lower
                .find("exit code")
                .or_else(|| lower.find("exit status"))?;
            lower[idx..]
                .split(|c: char| !c.is_ascii_digit() && c != '-')
                .find(|s| !s.is_empty() && *s != "-")
                .and_then(|s| s.parse::<i64>().ok())
        })
        .unwrap_or(if obs.is_error { 1 } else { 0 });
    let errors: Vec<String> = obs
        .output
        .lines()
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.contains("error") || lower.contains("fatal") || lower.contains("panicked")
        })
        .take(3)
        .map(|l| truncate_chars(l.trim(), 100))
        .collect();
    let command = arg_str(obs.args, &["command", "cmd", "script"]).unwrap_or_default();
    let text = if errors.is_empty() {
        format!("`{}` exited {exit}", truncate_chars(&command, 60))
    } else {
        format!(
            "`{}` exited {exit}: {}",
            truncate_chars(&command, 60),
            errors.join(" | ")
        )
    };
    Extracted {
        family: "shell",
        text,
        data: json!({"exit_status": exit, "error_lines": errors}),
        subject: None,
        freshness: FreshnessClass::Volatile,
        ttl_secs: None,
        scope: Scope::Session,
    }
}

fn language_of(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "rs" => "rust",
        "py" => "python",
        "ts" | "tsx" => "typescript",
        "js" | "jsx" => "javascript",
        "go" => "go",
        "java" => "java",
        "md" => "markdown",
        "toml" => "toml",
        "json" => "json",
        "yaml" | "yml" => "yaml",
        "sql" => "sql",
        "c" | "h" => "c",
        "cpp" | "hpp" | "cc" => "cpp",
        "sh" => "shell",
        _ => "text",
    }
}

fn extract_file_read(obs: &ToolObservation<'_>) -> Extracted {
    let path = arg_str(
        obs.args,
        &[
            "path",
            "file",
            "file_path",
            "filename",
            "file_id",
            "document_id",
            "doc_id",
            "id",
            "url",
            "uri",
        ],
    )
    .unwrap_or_default();
    // The first line is what a later turn recalls the document by (its title, a header row).
    let first = obs
        .output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let bytes = obs.output_bytes.unwrap_or(obs.output.len() as u64);
    let hash = obs
        .output_sha256
        .map(str::to_owned)
        .unwrap_or_else(|| crate::sha256_hex(obs.output.as_bytes()));
    let lines = obs.output.lines().count();
    let lang = language_of(&path);
    Extracted {
        family: "file_read",
        text: format!(
            "read {}: \"{}\" {bytes} bytes, {lines} lines, {lang}, sha256 {}",
            if path.is_empty() { obs.tool } else { &path },
            truncate_chars(first, 100),
            &hash[..12.min(hash.len())]
        ),
        data: json!({"path": path, "bytes": bytes, "lines": lines, "sha256": hash,
            "language": lang}),
        // Without a path there is nothing to compare with: no subject, so no conflicts.
        subject: (!path.is_empty()).then(|| format!("file:{path}")),
        freshness: FreshnessClass::Session,
        ttl_secs: None,
        scope: Scope::Session,
    }
}

fn extract_search(obs: &ToolObservation<'_>) -> Extracted {
    let query = arg_str(obs.args, &["query", "pattern", "q", "regex", "glob"]).unwrap_or_default();
    let hits: Vec<&str> = obs
        .output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let top: Vec<String> = hits.iter().take(3).map(|h| truncate_chars(h, 60)).collect();
    Extracted {
        family: "search",
        text: format!(
            "search {:?}: {} hits{}",
            truncate_chars(&query, 60),
            hits.len(),
            if top.is_empty() {
                String::new()
            } else {
                format!("; top: {}", top.join(" | "))
            }
        ),
        data: json!({"query": query, "hit_count": hits.len(), "top_hits": top}),
        subject: None,
        freshness: FreshnessClass::Session,
        ttl_secs: None,
        scope: Scope::Session,
    }
}

/// The top-level scalar fields of a JSON object that may be cut short (the preview of an output
/// stored as an artifact): every `"key": scalar` pair before the text ends or stops being JSON.
fn leading_scalars(text: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let s = text.trim_start();
    let Some(rest) = s.strip_prefix('{') else {
        return out;
    };
    let mut de = rest;
    loop {
        de = de.trim_start();
        let Some((key, after)) = json_string(de) else {
            return out;
        };
        let Some(after) = after.trim_start().strip_prefix(':') else {
            return out;
        };
        let after = after.trim_start();
        let (value, after) = match after.chars().next() {
            Some('"') => match json_string(after) {
                Some((v, a)) => (Some(Value::String(v)), a),
                None => return out,
            },
            Some('{') | Some('[') => match skip_nested(after) {
                Some(a) => (None, a),
                None => return out,
            },
            Some(_) => {
                let end = after
                    .find(|c: char| c == ',' || c == '}' || c.is_whitespace())
                    .unwrap_or(after.len());
                match serde_json::from_str::<Value>(&after[..end]) {
                    Ok(v) if end < after.len() => (Some(v), &after[end..]),
                    _ => return out,
                }
            }
            None => return out,
        };
        if let Some(v) = value {
            out.insert(key, v);
        }
        match after.trim_start().chars().next() {
            Some(',') => de = &after.trim_start()[1..],
            _ => return out,
        }
    }
}

/// A JSON string at the start of `s` and what follows it.
fn json_string(s: &str) -> Option<(String, &str)> {
    if !s.starts_with('"') {
        return None;
    }
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => {
                let parsed: String = serde_json::from_str(&s[..=i]).ok()?;
                return Some((parsed, &s[i + 1..]));
            }
            _ => escaped = false,
        }
    }
    None
}

/// What follows a balanced JSON object or array at the start of `s`.
fn skip_nested(s: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_string {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => in_string = false,
                _ => escaped = false,
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&s[i + 1..]);
                }
            }
            _ => {}
        }
    }
    None
}

fn extract_http(obs: &ToolObservation<'_>) -> Extracted {
    let parsed: Option<Value> = serde_json::from_str(obs.output.trim()).ok().or_else(|| {
        // A response cut to its preview still names its entity and leading fields.
        let partial = leading_scalars(obs.output);
        (!partial.is_empty()).then_some(Value::Object(partial))
    });
    let mut ids: Vec<String> = Vec::new();
    let mut fields = Map::new();
    if let Some(Value::Object(o)) = &parsed {
        for (k, v) in o {
            if (k == "id" || k.ends_with("_id")) && (v.is_string() || v.is_number()) {
                ids.push(format!(
                    "{k}={}",
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                ));
            }
            if v.is_string() || v.is_number() || v.is_boolean() || v.is_null() {
                let v = match v {
                    Value::String(s) => Value::String(truncate_chars(s, 40)),
                    other => other.clone(),
                };
                fields.insert(k.clone(), v);
            }
        }
    }
    // What the call asked about names the entity best (two systems' responses about one deal
    // carry different id fields, the same deal id in the arguments).
    let asked: Option<String> = obs.args.as_object().and_then(|o| {
        o.iter()
            .find(|(k, v)| {
                (k.as_str() == "id" || k.ends_with("_id")) && (v.is_string() || v.is_number())
            })
            .map(|(_, v)| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
    });
    let entity = ids.first().cloned();
    let subject = asked.clone().or_else(|| {
        entity
            .as_ref()
            .and_then(|e| e.split_once('=').map(|(_, v)| v.to_owned()))
    });
    let endpoint = arg_str(obs.args, &["url", "endpoint", "path", "resource"]).unwrap_or_default();
    let shown: Vec<String> = fields
        .iter()
        .filter(|(k, _)| !ids.iter().any(|i| i.starts_with(&format!("{k}="))))
        .take(6)
        .map(|(k, v)| {
            format!(
                "{k}={}",
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            )
        })
        .collect();
    let text = format!(
        "{}{}{}: {}",
        obs.tool,
        if endpoint.is_empty() {
            String::new()
        } else {
            format!(" {}", truncate_chars(&endpoint, 60))
        },
        entity
            .as_deref()
            .map(|e| format!(" [{e}]"))
            .unwrap_or_default(),
        if parsed.is_some() {
            shown.join(", ")
        } else {
            truncate_chars(obs.output.lines().next().unwrap_or(""), 120)
        }
    );
    Extracted {
        family: "http",
        text,
        data: json!({"entity_ids": ids, "fields": fields}),
        subject: subject.map(|e| format!("entity:{e}")),
        freshness: FreshnessClass::TimeBounded,
        ttl_secs: Some(3600),
        scope: Scope::Project,
    }
}

fn extract_file_write(obs: &ToolObservation<'_>) -> Extracted {
    let path = arg_str(obs.args, &["path", "file", "file_path", "filename"]).unwrap_or_default();
    let diff = arg_str(obs.args, &["diff", "patch", "content", "new_str"]).unwrap_or_default();
    let added = diff.lines().filter(|l| l.starts_with('+')).count();
    let removed = diff.lines().filter(|l| l.starts_with('-')).count();
    Extracted {
        family: "file_write",
        text: format!(
            "{} {path}{}",
            if obs.is_error {
                "failed to modify"
            } else {
                "modified"
            },
            if added + removed > 0 {
                format!(" (+{added} -{removed})")
            } else {
                String::new()
            }
        ),
        data: json!({"path": path, "added": added, "removed": removed, "ok": !obs.is_error}),
        subject: Some(format!("write:{path}")),
        freshness: FreshnessClass::Session,
        ttl_secs: None,
        scope: Scope::Session,
    }
}

fn extract_generic(obs: &ToolObservation<'_>) -> Extracted {
    let first = obs
        .output
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Extracted {
        family: "generic",
        text: format!(
            "{}{}: {} ({} bytes)",
            obs.tool,
            if obs.is_error { " failed" } else { "" },
            truncate_chars(first.trim(), 120),
            obs.output_bytes.unwrap_or(obs.output.len() as u64)
        ),
        data: json!({"is_error": obs.is_error}),
        subject: None,
        freshness: FreshnessClass::Volatile,
        ttl_secs: None,
        scope: Scope::Session,
    }
}

/// Canonical JSON (object keys sorted) of tool arguments: the provenance key's argument part.
pub fn canonical_args(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let sorted: BTreeMap<&String, Value> =
                    o.iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

/// Scalar fields of a memory's structured payload, without identifiers and timestamps (which
/// differ between sources without the facts disagreeing).
fn comparable_fields(data: &Value) -> BTreeMap<String, u64> {
    /// Fields compared per memory, and the longest name kept: an entry's size stays bounded.
    const MAX_FIELDS: usize = 32;
    const MAX_NAME: usize = 64;
    data.get("fields")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    !(k.as_str() == "id"
                        || k.ends_with("_id")
                        || k.ends_with("_at")
                        || k.contains("time")
                        || k.contains("date"))
                })
                .take(MAX_FIELDS)
                .map(|(k, v)| (truncate_chars(k, MAX_NAME), held::digest(&v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether two observations of one subject disagree: for structured ones, a field both have
/// with different values (two responses about one deal that share no field do not disagree);
/// otherwise different values.
fn disagree(a: &Indexed, b: &Indexed) -> bool {
    if a.value_digest == b.value_digest {
        return false;
    }
    if a.fields.is_empty() && b.fields.is_empty() {
        return true;
    }
    a.fields
        .iter()
        .any(|(k, v)| b.fields.get(k).is_some_and(|w| w != v))
}

/// The memory extractor's state machine. Feed it every event of the log in order with
/// [`MemoryEngine::observe`]; it returns the derived payloads to append. Derived events are
/// read only to learn the memories already recorded (so a restart or a second instance does not
/// record them again), never extracted.
#[derive(Debug)]
pub struct MemoryEngine {
    extractors: Vec<Box<dyn Extractor>>,
    /// Sessions' context and projects' memories, bounded by [`MemoryLimits`].
    held: held::Held,
}

impl Default for MemoryEngine {
    fn default() -> Self {
        Self::new(vec![Box::new(RuleExtractor)])
    }
}

/// One derived payload to append, with its content-derived event id.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    pub event_id: String,
    pub payload: Payload,
}

/// Actor of the events the memory extractor writes.
pub const ACTOR: &str = "strata-memory";

impl Derived {
    /// The event that carries this payload: same tenant, session, branch, participant and
    /// timestamp as its source, so the same log always derives the same bytes.
    pub fn into_event(self, source: &Event) -> Event {
        Event {
            event_id: self.event_id,
            tenant_id: source.tenant_id.clone(),
            session_id: source.session_id.clone(),
            branch_id: source.branch_id.clone(),
            seq: None,
            parent_event_id: None,
            timestamp: source.timestamp,
            actor: Some(ACTOR.into()),
            participant_id: source.participant_id.clone(),
            payload: self.payload,
            causality: None,
            extra: Default::default(),
        }
    }
}

impl MemoryEngine {
    /// An engine trying `extractors` in order (the first that answers wins).
    pub fn new(extractors: Vec<Box<dyn Extractor>>) -> Self {
        Self::with_limits(extractors, MemoryLimits::default())
    }

    /// [`MemoryEngine::new`] holding at most what `limits` allow.
    pub fn with_limits(extractors: Vec<Box<dyn Extractor>>, limits: MemoryLimits) -> Self {
        Self {
            extractors,
            held: held::Held::new(limits),
        }
    }

    /// The project of a session: `project_id` of its `SessionStarted`, else its repo root, else
    /// its working directory, else the session itself.
    pub fn project_of(&self, tenant: &str, session: &str) -> String {
        self.held
            .peek_session(tenant, session)
            .and_then(|s| s.project.clone())
            .unwrap_or_else(|| format!("session:{session}"))
    }

    /// Memories held for comparison with new ones, over all projects.
    pub fn memory_count(&self) -> usize {
        self.held.indexed()
    }

    /// Sessions and projects evicted so far under the engine's limits.
    pub fn evictions(&self) -> (u64, u64) {
        (self.held.evicted_sessions, self.held.evicted_projects)
    }

    /// Whether observing `event` needs the session's context first: the engine does not hold
    /// its session (never seen, or evicted under the limits) and the event is one whose
    /// derivation depends on it. A service then reads the session's start and open calls from
    /// the projections and hands them to [`MemoryEngine::restore_session`].
    pub fn needs_session(&self, event: &Event) -> bool {
        let depends = matches!(
            event.payload,
            Payload::ToolCallFinished(_)
                | Payload::ToolCallFailed(_)
                | Payload::FileWritten(_)
                | Payload::DiffApplied(_)
                | Payload::UserPromptSubmitted(_)
                | Payload::ModelResponseReceived(_)
                | Payload::ToolCallRequested(_)
                | Payload::MemorySuperseded(_)
        );
        depends && !self.held.holds_session(&event.tenant_id, &event.session_id)
    }

    /// Restores a session's context read back from the projections: its `SessionStarted`
    /// (when it has one) and its most recent events before the one being derived, oldest first,
    /// from which the tool calls still open at that point are taken (a call requested before
    /// them is not restored: its result then derives no memory).
    pub fn restore_session(
        &mut self,
        tenant: &str,
        session: &str,
        started: Option<&crate::payload::SessionStarted>,
        recent: &[Event],
    ) {
        match started {
            Some(p) => self.start_session(tenant, session, p),
            None => {
                self.held.session(tenant, session);
            }
        }
        for e in recent {
            match &e.payload {
                Payload::ModelResponseReceived(p) => {
                    for c in &p.tool_calls {
                        let (name, args) = (c.name.clone(), c.args.clone());
                        self.hold_call(tenant, session, &c.tool_call_id, name, args, &e.event_id);
                    }
                }
                Payload::ToolCallRequested(p) => {
                    let (name, args) = (p.name.clone(), p.args.clone());
                    self.hold_call(tenant, session, &p.tool_call_id, name, args, &e.event_id);
                }
                Payload::ToolCallFinished(p) => {
                    self.held.close_call(tenant, session, &p.tool_call_id);
                }
                Payload::ToolCallFailed(p) => {
                    self.held.close_call(tenant, session, &p.tool_call_id);
                }
                _ => {}
            }
        }
    }

    fn start_session(&mut self, tenant: &str, session: &str, p: &crate::payload::SessionStarted) {
        let state = self.held.session(tenant, session);
        state.project = Some(project_of_start(p, session));
        state.privacy = crate::privacy::PrivacyDefaults::folded_from(p);
        state.user = user_of_start(p);
    }

    fn hold_call(
        &mut self,
        tenant: &str,
        session: &str,
        id: &str,
        name: String,
        args: Value,
        request_event_id: &str,
    ) {
        let call = OpenCall {
            name,
            bytes: held::approx_bytes(&args),
            args,
            request_event_id: request_event_id.to_owned(),
        };
        self.held.open_call(tenant, session, id.to_owned(), call);
    }

    /// Folds one event in; returns the payloads to append to the log (in order).
    pub fn observe(&mut self, event: &Event) -> Vec<Derived> {
        let (tenant, session) = (event.tenant_id.as_str(), event.session_id.as_str());
        match &event.payload {
            Payload::SessionStarted(p) => {
                self.start_session(tenant, session, p);
                vec![]
            }
            Payload::ModelResponseReceived(p) => {
                for c in &p.tool_calls {
                    let (name, args) = (c.name.clone(), c.args.clone());
                    self.hold_call(
                        tenant,
                        session,
                        &c.tool_call_id,
                        name,
                        args,
                        &event.event_id,
                    );
                }
                self.hypotheses(event, &p.text)
            }
            Payload::ToolCallRequested(p) => {
                let (name, args) = (p.name.clone(), p.args.clone());
                self.hold_call(
                    tenant,
                    session,
                    &p.tool_call_id,
                    name,
                    args,
                    &event.event_id,
                );
                vec![]
            }
            Payload::ToolCallFinished(p) => self.tool_result(event, p),
            Payload::ToolCallFailed(p) => {
                self.held.close_call(tenant, session, &p.tool_call_id);
                vec![]
            }
            Payload::FileWritten(p) => self.file_change(event, &p.path, p.summary.as_deref()),
            Payload::DiffApplied(p) => {
                let added = p.diff.lines().filter(|l| l.starts_with('+')).count();
                let removed = p.diff.lines().filter(|l| l.starts_with('-')).count();
                self.file_change(event, &p.path, Some(&format!("+{added} -{removed}")))
            }
            Payload::UserPromptSubmitted(p) => self.user_statement(event, &p.text),
            Payload::MemoryRecorded(p) => {
                // Our own output (or another instance's): learn it, never extract it.
                if let Ok(m) = Memory::from_payload(p) {
                    if !self.held.knows(&m.tenant_id, &m.project_id, &m.memory_id) {
                        self.learn(&m);
                    }
                }
                vec![]
            }
            Payload::MemorySuperseded(p) => {
                // Supersession is decided within one project: the superseding memory's, which
                // is its source session's.
                let project = self.project_of(tenant, session);
                if let Some(index) = self.held.project_mut(tenant, &project) {
                    for i in index
                        .entries
                        .iter_mut()
                        .filter(|i| i.memory_id == p.memory_id)
                    {
                        i.superseded = true;
                    }
                }
                vec![]
            }
            _ => vec![],
        }
    }

    /// A tool's result, paired with its open call, as a memory.
    fn tool_result(&mut self, event: &Event, p: &crate::payload::ToolCallFinished) -> Vec<Derived> {
        let (tenant, session) = (event.tenant_id.as_str(), event.session_id.as_str());
        let rule = self
            .held
            .peek_session(tenant, session)
            .map(|s| s.privacy.clone());
        let stated = p.privacy_class;
        let Some(call) = self.held.close_call(tenant, session, &p.tool_call_id) else {
            return vec![];
        };
        let output = p
            .output
            .as_deref()
            .or(p.output_preview.as_deref())
            .unwrap_or("");
        if output.contains(RECALL_MARKER) {
            return vec![];
        }
        let obs = ToolObservation {
            tool: &call.name,
            args: &call.args,
            output,
            is_error: p.is_error,
            output_ref: p.output_ref.as_deref(),
            output_sha256: p.output_sha256.as_deref(),
            output_bytes: p.output_bytes,
        };
        let Some((extractor, extracted)) = self
            .extractors
            .iter()
            .find_map(|x| x.extract(&obs).map(|e| (x.name().to_owned(), e)))
        else {
            return vec![];
        };
        let privacy = rule
            .and_then(|r| r.class_of(stated, &call.name))
            .or(stated)
            .unwrap_or(PrivacyClass::Internal);
        let freshness = p.freshness_class.unwrap_or(extracted.freshness);
        let artifact_refs: Vec<String> = p.output_ref.iter().cloned().collect();
        let provenance = format!("{}|{}", call.name, canonical_args(&call.args));
        let mem = self.build(
            event,
            extracted,
            extractor,
            provenance,
            vec![call.request_event_id.clone(), event.event_id.clone()],
            artifact_refs,
            Some(p.tool_call_id.clone()),
            privacy,
            freshness,
            if p.is_error {
                "tool_error"
            } else {
                "tool_output"
            },
            Some(call.name.clone()),
        );
        self.record(mem)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        &self,
        event: &Event,
        e: Extracted,
        extractor: String,
        provenance_key: String,
        source_refs: Vec<String>,
        artifact_refs: Vec<String>,
        tool_call_id: Option<String>,
        privacy_class: PrivacyClass,
        freshness_class: FreshnessClass,
        basis: &str,
        revalidate_with: Option<String>,
    ) -> Memory {
        let project = self.project_of(&event.tenant_id, &event.session_id);
        let observed_at = event.timestamp;
        let stale_after = match freshness_class {
            FreshnessClass::TimeBounded => {
                Some(observed_at + Duration::seconds(e.ttl_secs.unwrap_or(3600)))
            }
            FreshnessClass::Volatile => Some(observed_at + Duration::seconds(900)),
            _ => None,
        };
        let value_digest = crate::sha256_hex(e.data.to_string().as_bytes())[..16].to_owned();
        let memory_id = format!(
            "mem_{}",
            &crate::sha256_hex(
                format!(
                    "{}\n{}\n{}\n{}\n{}",
                    event.tenant_id, event.session_id, event.event_id, extractor, e.family
                )
                .as_bytes()
            )[..24]
        );
        let confidence = match basis {
            "tool_output" => 0.95,
            "tool_error" => 0.9,
            "user_statement" => 0.9,
            _ => 0.3,
        };
        Memory {
            memory_id,
            tenant_id: event.tenant_id.clone(),
            project_id: project,
            session_id: event.session_id.clone(),
            branch_id: event.branch_id.clone(),
            source_seq: event.seq,
            scope: e.scope,
            user_id: None,
            kind: if basis.starts_with("tool") {
                if e.family == "file_change" {
                    "file_change".into()
                } else {
                    "tool_memory".into()
                }
            } else if basis == "model_guess" {
                "hypothesis".into()
            } else {
                "user_preference".into()
            },
            family: e.family.to_owned(),
            text: e.text,
            data: e.data,
            subject: e.subject.unwrap_or_else(|| provenance_key.clone()),
            provenance_key,
            value_digest,
            source_refs,
            artifact_refs,
            tool_call_id,
            confidence,
            confidence_basis: basis.to_owned(),
            privacy_class,
            freshness_class,
            observed_at: format_timestamp(&observed_at),
            stale_after: stale_after.map(|t| format_timestamp(&t)),
            update_policy: match freshness_class {
                FreshnessClass::Volatile | FreshnessClass::TimeBounded => {
                    "superseded by the same call; stale after stale_after".into()
                }
                FreshnessClass::Session => {
                    "superseded by the same call or a write of its subject; ends with the session"
                        .into()
                }
                _ => "superseded only by an explicit later statement".into(),
            },
            revalidate_with,
            owner_participant: event
                .participant_id
                .clone()
                .unwrap_or_else(|| crate::projection::DEFAULT_PARTICIPANT.into()),
            visibility: match e.scope {
                Scope::Session => Visibility::Participant,
                _ => Visibility::Project,
            },
            conflicts_with: vec![],
            supersedes: vec![],
            superseded_by: None,
            promotion_reason: None,
            extractor,
        }
    }

    fn indexed(m: &Memory) -> Indexed {
        Indexed {
            memory_id: m.memory_id.clone(),
            provenance: held::digest(&m.provenance_key),
            value_digest: m.value_digest.clone(),
            subject: held::digest(&m.subject),
            fields: comparable_fields(&m.data),
            superseded: false,
        }
    }

    fn learn(&mut self, m: &Memory) {
        self.held
            .index(&m.tenant_id, &m.project_id, Self::indexed(m));
    }

    /// Links a new memory to what it supersedes and conflicts with; returns the events.
    fn record(&mut self, mut m: Memory) -> Vec<Derived> {
        if self.held.knows(&m.tenant_id, &m.project_id, &m.memory_id) {
            return vec![];
        }
        let mut superseded = Vec::new();
        let this = Self::indexed(&m);
        if let Some(index) = self.held.project_mut(&m.tenant_id, &m.project_id) {
            for i in index.entries.iter_mut().filter(|i| !i.superseded) {
                if i.provenance == this.provenance {
                    // Same tool, same arguments, observed later: the newer observation wins.
                    i.superseded = true;
                    superseded.push(i.memory_id.clone());
                } else if i.subject == this.subject
                    && !m.subject.starts_with("write:")
                    && disagree(i, &this)
                {
                    // Same subject, another source, another value: keep both, linked. (Two
                    // writes of one file are successive versions, not a disagreement.)
                    m.conflicts_with.push(i.memory_id.clone());
                }
            }
        }
        m.supersedes = superseded.clone();
        self.learn(&m);
        let mut out = vec![Derived {
            event_id: format!("mrec_{}", &m.memory_id[4..]),
            payload: Payload::MemoryRecorded(m.to_payload()),
        }];
        for old in superseded {
            out.push(supersede(
                &old,
                &m.memory_id,
                "same tool and arguments observed later",
            ));
        }
        out
    }

    fn file_change(&mut self, event: &Event, path: &str, summary: Option<&str>) -> Vec<Derived> {
        let e = Extracted {
            family: "file_change",
            text: format!(
                "modified {path}{}",
                summary
                    .map(|s| format!(": {}", truncate_chars(s, 120)))
                    .unwrap_or_default()
            ),
            data: json!({"path": path}),
            subject: Some(format!("write:{path}")),
            freshness: FreshnessClass::Session,
            ttl_secs: None,
            scope: Scope::Session,
        };
        let provenance = format!("file_change|{path}|{}", event.event_id);
        let m = self.build(
            event,
            e,
            EXTRACTOR_VERSION.into(),
            provenance,
            vec![event.event_id.clone()],
            vec![],
            None,
            PrivacyClass::Internal,
            FreshnessClass::Session,
            "tool_output",
            None,
        );
        let new_id = m.memory_id.clone();
        let mut out = self.record(m);
        if out.is_empty() {
            return out;
        }
        // Scoped invalidation: what was read of this file, and only that, is out of date.
        let project = self.project_of(&event.tenant_id, &event.session_id);
        let read = held::digest(&format!("file:{path}"));
        if let Some(index) = self.held.project_mut(&event.tenant_id, &project) {
            for i in index
                .entries
                .iter_mut()
                .filter(|i| !i.superseded && i.subject == read)
            {
                i.superseded = true;
                out.push(supersede(
                    &i.memory_id,
                    &new_id,
                    "file modified after it was read",
                ));
            }
        }
        out
    }

    /// A statement of the user becomes a user-scoped memory only under the explicit
    /// remember rule, with its reason recorded.
    fn user_statement(&mut self, event: &Event, text: &str) -> Vec<Derived> {
        if text.contains(RECALL_MARKER) {
            return vec![];
        }
        let lower = text.trim_start().to_ascii_lowercase();
        let Some(stmt) = [
            "remember:",
            "remember that ",
            "from now on,",
            "from now on ",
        ]
        .iter()
        .find_map(|p| {
            lower
                .starts_with(p)
                .then(|| text.trim_start()[p.len()..].trim())
        }) else {
            return vec![];
        };
        if stmt.is_empty() {
            return vec![];
        }
        let e = Extracted {
            family: "user_statement",
            text: truncate_chars(stmt, MAX_TEXT_CHARS),
            data: json!({}),
            subject: Some(format!(
                "pref:{}",
                truncate_chars(&stmt.to_ascii_lowercase(), 60)
            )),
            freshness: FreshnessClass::Durable,
            ttl_secs: None,
            scope: Scope::User,
        };
        let provenance = format!("user_statement|{}", event.event_id);
        let mut m = self.build(
            event,
            e,
            EXTRACTOR_VERSION.into(),
            provenance,
            vec![event.event_id.clone()],
            vec![],
            None,
            PrivacyClass::Internal,
            FreshnessClass::Durable,
            "user_statement",
            None,
        );
        let user = self
            .held
            .peek_session(&event.tenant_id, &event.session_id)
            .and_then(|s| s.user.clone());
        match user {
            Some(user) => {
                m.user_id = Some(user);
                m.promotion_reason = Some(format!(
                    "{REMEMBER_RULE}: the user asked for it to be remembered in event {}",
                    event.event_id
                ));
            }
            // Whose preference it is cannot be told: it stays with this session.
            None => {
                m.scope = Scope::Session;
                m.promotion_reason = None;
            }
        }
        self.record(m)
    }

    /// A guess of the model ("I think", "probably") is kept as a session-scoped hypothesis
    /// with low confidence: never a user or project fact.
    fn hypotheses(&mut self, event: &Event, text: &str) -> Vec<Derived> {
        if text.contains(RECALL_MARKER) {
            return vec![];
        }
        let Some(sentence) = text.split(['.', '\n']).map(str::trim).find(|s| {
            let l = s.to_ascii_lowercase();
            ["i think", "probably", "i suspect", "my guess", "likely"]
                .iter()
                .any(|w| l.contains(w))
        }) else {
            return vec![];
        };
        let e = Extracted {
            family: "model_guess",
            text: truncate_chars(sentence, MAX_TEXT_CHARS),
            data: json!({}),
            subject: None,
            freshness: FreshnessClass::Session,
            ttl_secs: None,
            scope: Scope::Session,
        };
        let provenance = format!("model_guess|{}", event.event_id);
        let m = self.build(
            event,
            e,
            EXTRACTOR_VERSION.into(),
            provenance,
            vec![event.event_id.clone()],
            vec![],
            None,
            PrivacyClass::Internal,
            FreshnessClass::Session,
            "model_guess",
            None,
        );
        self.record(m)
    }
}

fn supersede(old: &str, new: &str, reason: &str) -> Derived {
    Derived {
        event_id: format!(
            "msup_{}",
            &crate::sha256_hex(format!("{old}\n{new}").as_bytes())[..24]
        ),
        payload: Payload::MemorySuperseded(MemorySuperseded {
            memory_id: old.to_owned(),
            superseded_by: new.to_owned(),
            reason: Some(reason.to_owned()),
            extra: Default::default(),
        }),
    }
}

/// The platform's end user a session serves: `user_id` of its `SessionStarted`, if a non-empty
/// string.
pub fn user_of_start(start: &crate::payload::SessionStarted) -> Option<String> {
    start
        .extra
        .get("user_id")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_owned)
}

/// The project a session's memories are filed under: `project_id` of its `SessionStarted`, else
/// its repo root, else its working directory, else the session itself. The extractor files them
/// so and the snapshot finds them so, before the session has recorded any of its own.
pub fn project_of_start(start: &crate::payload::SessionStarted, session: &str) -> String {
    start
        .extra
        .get("project_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| start.repo_root.clone())
        .or_else(|| start.cwd.clone())
        .unwrap_or_else(|| format!("session:{session}"))
}

/// Whether memory `m` may be retrieved for a request of `tenant`/`project`/`session` by
/// `participant`: tenant and project never cross; a session-scoped memory stays in its
/// session and, when participant-private, with its owner.
pub fn retrievable(
    m: &Memory,
    tenant: &str,
    project: &str,
    session: &str,
    participant: &str,
    user: Option<&str>,
) -> bool {
    if m.tenant_id != tenant {
        return false;
    }
    match m.scope {
        Scope::Session => {
            m.session_id == session
                && (m.visibility != Visibility::Participant || m.owner_participant == participant)
        }
        Scope::Project | Scope::Workspace => m.project_id == project,
        // A user-scoped preference follows its user across their sessions and projects of
        // this tenant, and no one else: a viewer or a memory without a user gets none.
        Scope::User => m.user_id.is_some() && m.user_id.as_deref() == user,
        Scope::Global => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str, session: &str, ts: &str, ty: &str, payload: Value) -> Event {
        Event::from_json(
            json!({"event_id": id, "tenant_id": "t", "session_id": session, "seq": 1,
                "timestamp": ts, "type": ty, "payload": payload}),
            None,
        )
        .unwrap()
    }

    fn start(session: &str, project: &str) -> Event {
        ev(
            &format!("start-{session}"),
            session,
            "2026-06-03T10:00:00Z",
            "SessionStarted",
            json!({"model": {"provider": "openai", "model": "m"}, "context_window_tokens": 1000,
                "reserved_output_tokens": 100, "project_id": project}),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        e: &mut MemoryEngine,
        s: &str,
        id: &str,
        ts: &str,
        name: &str,
        args: Value,
        out: &str,
        err: bool,
    ) -> Vec<Derived> {
        e.observe(&ev(
            &format!("{id}-req"),
            s,
            ts,
            "ToolCallRequested",
            json!({"tool_call_id": id, "name": name, "args": args}),
        ));
        e.observe(&ev(
            &format!("{id}-res"),
            s,
            ts,
            "ToolCallFinished",
            json!({"tool_call_id": id, "output": out, "is_error": err}),
        ))
    }

    fn memories(d: &[Derived]) -> Vec<Memory> {
        d.iter()
            .filter_map(|d| match &d.payload {
                Payload::MemoryRecorded(p) => Some(Memory::from_payload(p).unwrap()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn test_runner_output_becomes_a_compact_tool_memory() {
        let mut e = MemoryEngine::default();
        e.observe(&start("s", "p"));
        let out = "running 3 tests\ntest a::ok ... ok\ntest a::bad ... FAILED\n\n---- a::bad stdout ----\nthread 'a::bad' panicked at src/lib.rs:10:5:\nassertion failed\n\ntest result: FAILED. 2 passed; 1 failed; 0 ignored\n".repeat(20);
        let d = call(
            &mut e,
            "s",
            "c1",
            "2026-06-03T10:01:00Z",
            "bash",
            json!({"command": "cargo test"}),
            &out,
            true,
        );
        let m = &memories(&d)[0];
        assert_eq!(m.family, "test_runner");
        assert!(m.text.contains("2 passed, 1 failed"), "{}", m.text);
        assert!(m.text.contains("a::bad"));
        assert!(m.text.contains("src/lib.rs:10:5"));
        assert_eq!(m.source_refs, vec!["c1-req", "c1-res"]);
        let size = m.text.len() + m.data.to_string().len();
        assert!(size <= MAX_TEXT_CHARS + MAX_PAYLOAD_BYTES, "{size}");
        assert!(m.stale_after.is_some());
        assert_eq!(m.revalidate_with.as_deref(), Some("bash"));
    }

    #[test]
    fn each_family_is_recognised() {
        let cases = [
            (
                "bash",
                json!({"command": "make build"}),
                "gcc: error: foo.c: no such file\nexit code 2",
                "shell",
            ),
            (
                "read_file",
                json!({"path": "src/main.rs"}),
                "fn main() {}\n",
                "file_read",
            ),
            (
                "grep",
                json!({"pattern": "TODO"}),
                "a.rs:1: TODO\nb.rs:2: TODO\n",
                "search",
            ),
            (
                "crm.get_order",
                json!({"id": 42}),
                r#"{"order_id": "42", "status": "shipped"}"#,
                "http",
            ),
            (
                "write_file",
                json!({"path": "a.rs", "content": "x"}),
                "ok",
                "file_write",
            ),
            ("weather", json!({}), "sunny", "generic"),
        ];
        for (i, (tool, args, out, family)) in cases.into_iter().enumerate() {
            let mut e = MemoryEngine::default();
            e.observe(&start("s", "p"));
            let d = call(
                &mut e,
                "s",
                &format!("c{i}"),
                "2026-06-03T10:01:00Z",
                tool,
                args,
                out,
                false,
            );
            assert_eq!(memories(&d)[0].family, family, "{tool}");
        }
    }

    #[test]
    fn same_call_later_supersedes_and_different_source_conflicts() {
        let mut e = MemoryEngine::default();
        e.observe(&start("s", "p"));
        let a = memories(&call(
            &mut e,
            "s",
            "c1",
            "2026-06-03T10:01:00Z",
            "crm.get_order",
            json!({"id": 42}),
            r#"{"order_id": "42", "status": "pending"}"#,
            false,
        ))[0]
            .clone();
        let d = call(
            &mut e,
            "s",
            "c2",
            "2026-06-03T11:01:00Z",
            "crm.get_order",
            json!({"id": 42}),
            r#"{"order_id": "42", "status": "shipped"}"#,
            false,
        );
        let b = memories(&d)[0].clone();
        assert_eq!(b.supersedes, vec![a.memory_id.clone()]);
        assert!(
            b.conflicts_with.is_empty(),
            "supersession is not a conflict"
        );
        assert!(d
            .iter()
            .any(|x| matches!(&x.payload, Payload::MemorySuperseded(s)
            if s.memory_id == a.memory_id && s.superseded_by == b.memory_id)));
        // Another source says otherwise: both kept, linked.
        let c = memories(&call(
            &mut e,
            "s",
            "c3",
            "2026-06-03T11:02:00Z",
            "erp.fetch_order",
            json!({"order": "42"}),
            r#"{"order_id": "42", "status": "cancelled"}"#,
            false,
        ))[0]
            .clone();
        assert_eq!(c.conflicts_with, vec![b.memory_id.clone()]);
        assert!(c.supersedes.is_empty());
    }

    #[test]
    fn a_write_invalidates_only_reads_of_that_file() {
        let mut e = MemoryEngine::default();
        e.observe(&start("s", "p"));
        let a = memories(&call(
            &mut e,
            "s",
            "r1",
            "2026-06-03T10:01:00Z",
            "read_file",
            json!({"path": "a.rs"}),
            "A",
            false,
        ))[0]
            .clone();
        let _b = memories(&call(
            &mut e,
            "s",
            "r2",
            "2026-06-03T10:01:00Z",
            "read_file",
            json!({"path": "b.rs"}),
            "B",
            false,
        ))[0]
            .clone();
        let d = e.observe(&ev(
            "w1",
            "s",
            "2026-06-03T10:02:00Z",
            "FileWritten",
            json!({"path": "a.rs"}),
        ));
        let sup: Vec<&MemorySuperseded> = d
            .iter()
            .filter_map(|x| match &x.payload {
                Payload::MemorySuperseded(s) => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(sup.len(), 1);
        assert_eq!(sup[0].memory_id, a.memory_id);
    }

    #[test]
    fn guesses_stay_in_session_and_remember_needs_the_rule() {
        let mut e = MemoryEngine::default();
        let mut started = start("s", "p");
        if let Payload::SessionStarted(p) = &mut started.payload {
            p.extra.insert("user_id".into(), json!("alice"));
        }
        e.observe(&started);
        let d = e.observe(&ev(
            "m1",
            "s",
            "2026-06-03T10:01:00Z",
            "ModelResponseReceived",
            json!({"message_id": "m1", "text": "I think the user prefers tabs. Let me check."}),
        ));
        let g = &memories(&d)[0];
        assert_eq!(g.scope, Scope::Session);
        assert_eq!(g.kind, "hypothesis");
        assert!(g.confidence < 0.5);
        assert!(g.promotion_reason.is_none());
        let d = e.observe(&ev(
            "u1",
            "s",
            "2026-06-03T10:01:00Z",
            "UserPromptSubmitted",
            json!({"message_id": "u1", "text": "Remember: I use tabs, never spaces"}),
        ));
        let u = &memories(&d)[0];
        assert_eq!(u.scope, Scope::User);
        assert_eq!(u.user_id.as_deref(), Some("alice"));
        assert!(u
            .promotion_reason
            .as_deref()
            .unwrap()
            .starts_with(REMEMBER_RULE));
        // Alice's preference is hers: not another user's, nor a session that names no user.
        assert!(retrievable(u, "t", "q", "s9", "agent", Some("alice")));
        assert!(!retrievable(u, "t", "q", "s9", "agent", Some("bob")));
        assert!(!retrievable(u, "t", "q", "s9", "agent", None));
        // A session that names no end user keeps "remember" to itself.
        e.observe(&start("anon", "p"));
        let d = e.observe(&ev(
            "u9",
            "anon",
            "2026-06-03T10:01:00Z",
            "UserPromptSubmitted",
            json!({"message_id": "u9", "text": "Remember: answer in French"}),
        ));
        let anon = &memories(&d)[0];
        assert_eq!(anon.scope, Scope::Session);
        assert!(anon.user_id.is_none() && anon.promotion_reason.is_none());
        // Plain prompts and recalled memories are not memories.
        assert!(e
            .observe(&ev(
                "u2",
                "s",
                "2026-06-03T10:01:00Z",
                "UserPromptSubmitted",
                json!({"message_id": "u2", "text": "fix the test"})
            ))
            .is_empty());
        assert!(e
            .observe(&ev(
                "u3",
                "s",
                "2026-06-03T10:01:00Z",
                "UserPromptSubmitted",
                json!({"message_id": "u3", "text": "remember: [memory mem_abc] I use tabs"})
            ))
            .is_empty());
    }

    #[test]
    fn derived_events_are_learned_not_extracted_and_ids_are_stable() {
        let mut e1 = MemoryEngine::default();
        e1.observe(&start("s", "p"));
        let d1 = call(
            &mut e1,
            "s",
            "c1",
            "2026-06-03T10:01:00Z",
            "read_file",
            json!({"path": "a.rs"}),
            "A",
            false,
        );
        let mut e2 = MemoryEngine::default();
        e2.observe(&start("s", "p"));
        let d2 = call(
            &mut e2,
            "s",
            "c1",
            "2026-06-03T10:01:00Z",
            "read_file",
            json!({"path": "a.rs"}),
            "A",
            false,
        );
        assert_eq!(d1, d2, "same log, same memories");
        // A third engine that sees the recorded memory first records nothing new for it.
        let mut e3 = MemoryEngine::default();
        e3.observe(&start("s", "p"));
        let rec = Event {
            payload: d1[0].payload.clone(),
            ..ev(
                "x",
                "s",
                "2026-06-03T10:01:00Z",
                "FileRead",
                json!({"path": "a"}),
            )
        };
        assert!(e3.observe(&rec).is_empty());
        assert!(call(
            &mut e3,
            "s",
            "c1",
            "2026-06-03T10:01:00Z",
            "read_file",
            json!({"path": "a.rs"}),
            "A",
            false
        )
        .is_empty());
    }

    #[test]
    fn invariants_10_and_11_reject_ungoverned_memories() {
        let mut e = MemoryEngine::default();
        e.observe(&start("s", "p"));
        let d = call(
            &mut e,
            "s",
            "c1",
            "2026-06-03T10:01:00Z",
            "read_file",
            json!({"path": "a.rs"}),
            "A",
            false,
        );
        let Payload::MemoryRecorded(good) = &d[0].payload else {
            panic!()
        };
        let mut p = good.clone();
        p.source_refs.clear();
        assert!(matches!(
            Memory::from_payload(&p),
            Err(MemoryError::NoSourceRefs(_))
        ));
        let mut p = good.clone();
        p.scope = "everywhere".into();
        assert!(matches!(
            Memory::from_payload(&p),
            Err(MemoryError::NoScope(_))
        ));
        let mut p = good.clone();
        p.extra.remove("update_policy");
        assert!(matches!(
            Memory::from_payload(&p),
            Err(MemoryError::NoUpdatePolicy(_))
        ));
        let mut p = good.clone();
        p.scope = "user".into();
        p.kind = "user_preference".into();
        assert!(matches!(
            Memory::from_payload(&p),
            Err(MemoryError::UnreasonedPromotion(_))
        ));
    }

    #[test]
    fn scope_isolation_between_projects_and_tenants() {
        let mut e = MemoryEngine::default();
        e.observe(&start("s1", "alpha"));
        e.observe(&start("s2", "beta"));
        let d = e.observe(&ev(
            "m1",
            "s1",
            "2026-06-03T10:01:00Z",
            "ModelResponseReceived",
            json!({"message_id": "m1", "text": "Probably the cache is stale"}),
        ));
        let guess = &memories(&d)[0];
        let api = memories(&call(
            &mut e,
            "s1",
            "c1",
            "2026-06-03T10:01:00Z",
            "crm.get_order",
            json!({"id": 1}),
            r#"{"order_id": "1", "status": "x"}"#,
            false,
        ))[0]
            .clone();
        assert!(retrievable(guess, "t", "alpha", "s1", "agent", None));
        assert!(!retrievable(guess, "t", "beta", "s2", "agent", None));
        assert!(
            !retrievable(guess, "t", "alpha", "s3", "agent", None),
            "a guess stays in its session"
        );
        assert!(
            retrievable(&api, "t", "alpha", "s3", "agent", None),
            "project facts reach the project"
        );
        assert!(!retrievable(&api, "t", "beta", "s2", "agent", None));
        assert!(!retrievable(&api, "other", "alpha", "s1", "agent", None));
        // The same call in another project does not supersede.
        let other = memories(&call(
            &mut e,
            "s2",
            "c9",
            "2026-06-03T11:01:00Z",
            "crm.get_order",
            json!({"id": 1}),
            r#"{"order_id": "1", "status": "y"}"#,
            false,
        ))[0]
            .clone();
        assert!(other.supersedes.is_empty() && other.conflicts_with.is_empty());
    }

    fn small(sessions: usize, memories_per_project: usize) -> MemoryEngine {
        MemoryEngine::with_limits(
            vec![Box::new(RuleExtractor)],
            MemoryLimits {
                sessions,
                memories_per_project,
                ..MemoryLimits::default()
            },
        )
    }

    fn request(session: &str, id: &str) -> Event {
        ev(
            &format!("{id}-req"),
            session,
            "2026-06-03T10:01:00Z",
            "ToolCallRequested",
            json!({"tool_call_id": id, "name": "read_file", "args": {"path": "src/a.rs"}}),
        )
    }

    fn finish(session: &str, id: &str) -> Event {
        ev(
            &format!("{id}-res"),
            session,
            "2026-06-03T10:01:00Z",
            "ToolCallFinished",
            json!({"tool_call_id": id, "output": "fn a() {}\n", "is_error": false}),
        )
    }

    #[test]
    fn an_evicted_session_is_restored_and_derives_what_it_would_have() {
        let mut bounded = small(2, 64);
        let mut whole = MemoryEngine::default();
        for e in [start("s1", "p1"), request("s1", "c1")] {
            bounded.observe(&e);
            whole.observe(&e);
        }
        for s in ["s2", "s3"] {
            bounded.observe(&start(s, "other"));
        }
        assert_eq!(bounded.evictions().0, 1, "s1 was the least recently seen");
        let result = finish("s1", "c1");
        assert!(bounded.needs_session(&result));
        assert!(!whole.needs_session(&result));
        // Without the restore the result has no call to pair with, and no project.
        assert!(small(2, 64).observe(&result).is_empty());

        let started = match start("s1", "p1").payload {
            Payload::SessionStarted(p) => p,
            _ => unreachable!(),
        };
        bounded.restore_session("t", "s1", Some(&started), &[request("s1", "c1")]);
        assert!(!bounded.needs_session(&result));
        let got = memories(&bounded.observe(&result));
        let want = memories(&whole.observe(&result));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].memory_id, want[0].memory_id);
        assert_eq!(got[0].project_id, "p1");
        assert_eq!(got[0].text, want[0].text);
    }

    #[test]
    fn the_index_of_a_project_holds_at_most_its_limit_and_still_supersedes_recent_calls() {
        let mut e = small(16, 3);
        e.observe(&start("s", "p"));
        let run = |e: &mut MemoryEngine, id: &str, cmd: &str| {
            call(
                e,
                "s",
                id,
                "2026-06-03T10:01:00Z",
                "bash",
                json!({"command": cmd}),
                "ok\n",
                false,
            )
        };
        for i in 0..10 {
            run(&mut e, &format!("c{i}"), &format!("echo {i}"));
        }
        assert_eq!(e.memory_count(), 3);
        // The newest are still compared: the same call again supersedes its memory.
        let again = run(&mut e, "c10", "echo 9");
        assert!(again
            .iter()
            .any(|d| matches!(&d.payload, Payload::MemorySuperseded(_))));
        // The oldest dropped out of comparison: the same call records without superseding.
        let old = run(&mut e, "c11", "echo 0");
        assert_eq!(old.len(), 1);
    }

    #[test]
    fn open_calls_are_bounded_in_bytes_by_evicting_sessions() {
        let mut e = MemoryEngine::with_limits(
            vec![Box::new(RuleExtractor)],
            MemoryLimits {
                open_call_bytes: 10_000,
                ..MemoryLimits::default()
            },
        );
        let big = "x".repeat(4_000);
        for s in 0..10 {
            e.observe(&ev(
                &format!("r{s}"),
                &format!("s{s}"),
                "2026-06-03T10:01:00Z",
                "ToolCallRequested",
                json!({"tool_call_id": "c", "name": "write_file", "args": {"content": big}}),
            ));
        }
        assert!(e.held.open_call_bytes() <= 10_000);
        assert_eq!(e.evictions().0, 8);
    }
}

#[cfg(test)]
mod leading_scalars_tests {
    use super::leading_scalars;
    use serde_json::json;

    #[test]
    fn reads_the_scalars_of_a_cut_object_and_stops_where_it_stops() {
        let cut = r#"{"deal_id":"D-1","name":"Globex \"FY27\"","amount":134975,"ok":true,
            "items":[{"a":1},{"b":[2,3]}],"currency":"USD","history":[{"x":"#;
        let m = leading_scalars(cut);
        assert_eq!(m["deal_id"], json!("D-1"));
        assert_eq!(m["name"], json!("Globex \"FY27\""));
        assert_eq!(m["amount"], json!(134975));
        assert_eq!(m["ok"], json!(true));
        assert_eq!(m["currency"], json!("USD"));
        assert!(!m.contains_key("items") && !m.contains_key("history"));
        assert!(leading_scalars("not json").is_empty());
        assert_eq!(
            leading_scalars(r#"{"a": 12"#).len(),
            0,
            "a cut number is not a value"
        );
    }
}
