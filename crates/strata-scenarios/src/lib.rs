//! The scenario suite (`tests/scenarios/README.md`): each scenario is a session of canonical events
//! (`<name>.jsonl`, the JSON contract of `docs/openapi.yaml`, one event a line) and what the assembled
//! context must hold (`<name>.expect.json`). [`run`] plays a scenario end to end on a scratch
//! embedded data directory — ingest, projector, memory extractor, compactor when asked,
//! projector again, assembler — and checks the provider payload and the assembly record against
//! the expectations; it also measures the context's tokens against transcript replay.
//!
//! An expectation file:
//!
//! ```json
//! {"description": "…",
//!  "request": {"branch": "b", "participant": "agent-a", "provider": "anthropic",
//!              "budget": 16000, "request": "…", "rehydrate": ["call_7"], "policy": "…"},
//!  "confidential_providers": {"acme": ["anthropic"]},
//!  "compact": true,
//!  "must_keep": ["substring of the payload", "…"],
//!  "must_not": ["substring that must not reach the provider", "…"],
//!  "omission_reasons": ["other_branch", "…"],
//!  "included_kinds": ["pending_tool_calls"],
//!  "rehydrated": ["call_7"],
//!  "measured": true}
//! ```
//!
//! `request` is the assembler's [`ContextRequest`]; `must_keep` and `must_not` are substrings of
//! the serialized provider payload (the request body); every reason of `omission_reasons` must
//! have been counted at least once; every id of `rehydrated` must have been rehydrated.
//! `measured` marks the scenarios the seeds measured (their reduction is held to a bar).
//! `tenant` and `session` name the session to assemble when it is not the first event's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use strata_assembler::Rendered as Assembled;
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest, PolicyOpts};
use strata_core::assembly::{OmissionReason, Provider};
use strata_core::tokens::{O200k, TokenCounter};
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

/// Where the scenarios live, relative to the repository root.
pub const DEFAULT_DIR: &str = "tests/scenarios";
/// Suffix of an expectation file.
pub const EXPECT_SUFFIX: &str = ".expect.json";
/// Suffix of a fixture file.
pub const EVENTS_SUFFIX: &str = ".jsonl";
/// Events per ingest batch.
const BATCH: usize = 1000;

/// Errors of loading or running scenarios (a failed expectation is not an error: it is in
/// [`ScenarioResult::failures`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A line of a fixture is not a canonical event.
    #[error("{path}:{line}: {message}")]
    Fixture {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// An expectation file is malformed or does not fit its fixture.
    #[error("{path}: {message}")]
    Expect { path: PathBuf, message: String },
    /// The pipeline failed while running a scenario.
    #[error("scenario {scenario}: {message}")]
    Run { scenario: String, message: String },
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a scenario's assembled context must hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// What the scenario is about.
    pub description: String,
    /// Tenant of the session to assemble (default: the first event's).
    #[serde(default)]
    pub tenant: Option<String>,
    /// Session to assemble (default: the first event's).
    #[serde(default)]
    pub session: Option<String>,
    /// The context request.
    #[serde(default)]
    pub request: ContextRequest,
    /// Per tenant, the providers allowed to receive `confidential` raw payloads.
    #[serde(default)]
    pub confidential_providers: BTreeMap<String, BTreeSet<Provider>>,
    /// Whether the compactor runs before the assembly.
    #[serde(default)]
    pub compact: bool,
    /// Substrings the provider payload must contain.
    #[serde(default)]
    pub must_keep: Vec<String>,
    /// Substrings the provider payload must not contain.
    #[serde(default)]
    pub must_not: Vec<String>,
    /// Omission reasons the assembly must have counted at least once.
    #[serde(default)]
    pub omission_reasons: Vec<OmissionReason>,
    /// Segment kinds the assembly must include.
    #[serde(default)]
    pub included_kinds: Vec<String>,
    /// Tool call ids or artifact refs that must have been rehydrated byte for byte.
    #[serde(default)]
    pub rehydrated: Vec<String>,
    /// One of the scenarios the seeds measured.
    #[serde(default)]
    pub measured: bool,
}

/// A scenario: its events and its expectations.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// File name without suffix.
    pub name: String,
    /// The fixture file.
    pub events_path: PathBuf,
    /// Its events, in file order.
    pub events: Vec<Event>,
    pub expect: Expect,
    /// Tenant and session assembled.
    pub tenant: String,
    pub session: String,
}

/// What running a scenario measured and found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioResult {
    pub name: String,
    pub description: String,
    pub measured: bool,
    pub events: usize,
    /// Tokens of a transcript replay of the branch lineage (system prompt, tool specs, every
    /// message, call and raw output; o200k), as the assembly record states it.
    pub transcript_tokens: u64,
    /// Tokens of the assembled context, as the assembly record states it.
    pub context_tokens: u64,
    /// o200k tokens of the serialized provider payload (JSON syntax included), for reference.
    pub payload_tokens: u64,
    /// `1 - context_tokens / transcript_tokens`.
    pub reduction: f64,
    /// Whether every expectation held.
    pub facts_ok: bool,
    /// Every expectation that did not hold, one line each.
    pub failures: Vec<String>,
    /// Omission counts of the assembly, by reason.
    pub omitted: BTreeMap<OmissionReason, u64>,
    pub assembly_id: String,
}

/// Loads every scenario of `dir`: each `<name>.jsonl` with its `<name>.expect.json`, by name.
pub fn load(dir: impl AsRef<Path>) -> Result<Vec<Scenario>> {
    let dir = dir.as_ref();
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut expects: BTreeSet<String> = BTreeSet::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        if let Some(name) = file.strip_suffix(EXPECT_SUFFIX) {
            expects.insert(name.to_owned());
        } else if let Some(name) = file.strip_suffix(EVENTS_SUFFIX) {
            names.insert(name.to_owned());
        }
    }
    if let Some(orphan) = expects.difference(&names).next() {
        let path = dir.join(format!("{orphan}{EXPECT_SUFFIX}"));
        return Err(Error::Expect {
            message: format!("no fixture {orphan}{EVENTS_SUFFIX} beside it"),
            path,
        });
    }
    names
        .iter()
        .map(|name| load_one(dir, name))
        .collect::<Result<Vec<_>>>()
}

/// Loads scenario `name` of `dir`.
pub fn load_one(dir: &Path, name: &str) -> Result<Scenario> {
    let events_path = dir.join(format!("{name}{EVENTS_SUFFIX}"));
    let expect_path = dir.join(format!("{name}{EXPECT_SUFFIX}"));
    let events = read_events(&events_path)?;
    let text = std::fs::read_to_string(&expect_path).map_err(|source| Error::Io {
        path: expect_path.clone(),
        source,
    })?;
    let expect: Expect = serde_json::from_str(&text).map_err(|e| Error::Expect {
        path: expect_path.clone(),
        message: format!("line {}, column {}: {e}", e.line(), e.column()),
    })?;
    let first = events.first().ok_or_else(|| Error::Fixture {
        path: events_path.clone(),
        line: 1,
        message: "no events".into(),
    })?;
    let tenant = expect
        .tenant
        .clone()
        .unwrap_or_else(|| first.tenant_id.clone());
    let session = expect
        .session
        .clone()
        .unwrap_or_else(|| first.session_id.clone());
    if !events
        .iter()
        .any(|e| e.tenant_id == tenant && e.session_id == session)
    {
        return Err(Error::Expect {
            path: expect_path,
            message: format!(
                "the fixture has no event of session {session:?} of tenant {tenant:?}"
            ),
        });
    }
    let problems = expect_problems(&expect);
    if !problems.is_empty() {
        return Err(Error::Expect {
            path: expect_path,
            message: problems.join("; "),
        });
    }
    Ok(Scenario {
        name: name.to_owned(),
        events_path,
        events,
        expect,
        tenant,
        session,
    })
}

/// What is wrong with an expectation on its own: empty or blank needles can never fail.
fn expect_problems(expect: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    if expect.description.trim().is_empty() {
        out.push("description is empty".to_owned());
    }
    for (field, list) in [
        ("must_keep", &expect.must_keep),
        ("must_not", &expect.must_not),
        ("included_kinds", &expect.included_kinds),
        ("rehydrated", &expect.rehydrated),
    ] {
        if let Some(i) = list.iter().position(|s| s.trim().is_empty()) {
            out.push(format!("{field}[{i}] is blank"));
        }
    }
    out
}

/// Reads a fixture: one canonical event per non-blank line.
fn read_events(path: &Path) -> Result<Vec<Event>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut events = Vec::new();
    let mut ids: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fixture = |message: String| Error::Fixture {
            path: path.to_owned(),
            line: i + 1,
            message,
        };
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| fixture(format!("not valid JSON (column {}): {e}", e.column())))?;
        let event = Event::from_json(value, None).map_err(|e| {
            fixture(
                e.0.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
        if let Some(first) = ids.insert((event.tenant_id.clone(), event.event_id.clone()), i + 1) {
            return Err(fixture(format!(
                "event id {:?} already used on line {first}",
                event.event_id
            )));
        }
        events.push(event);
    }
    Ok(events)
}

/// Runs a scenario end to end on a scratch embedded data directory and checks its
/// expectations.
pub async fn run(scenario: &Scenario) -> Result<ScenarioResult> {
    Ok(evaluate(scenario, &assemble(scenario).await?))
}

/// Plays a scenario's events through the pipeline on a scratch embedded data directory and
/// assembles the context its expectation asks for.
pub async fn assemble(scenario: &Scenario) -> Result<Assembled> {
    let fail = |what: &str, e: &dyn Display| Error::Run {
        scenario: scenario.name.clone(),
        message: format!("{what}: {e}"),
    };
    let dir = tempfile::tempdir().map_err(|e| fail("cannot create a scratch directory", &e))?;
    let opts = BackendOpts {
        fsync: FsyncPolicy::Never,
        ..BackendOpts::embedded(dir.path())
    };
    let backends = Backends::open(&opts, "strata-scenarios")
        .await
        .map_err(|e| fail("cannot open the embedded backends", &e))?;
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    for chunk in scenario.events.chunks(BATCH) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await
            .map_err(|e| fail("ingest refused the fixture", &e))?;
    }
    derive(&backends, scenario.expect.compact)
        .await
        .map_err(|e| fail("deriving", &e))?;
    let policy = PolicyOpts {
        confidential_providers: scenario.expect.confidential_providers.clone(),
        rehydrate_max_bytes: strata_core::assembly::DEFAULT_REHYDRATE_MAX_BYTES,
        target_tokens: None,
    };
    let assembler = Assembler::new(
        backends.clone(),
        ingestor,
        policy.apply(AssemblerOptions {
            record_assemblies: false,
            ..AssemblerOptions::default()
        }),
    );
    assembler
        .context(
            &scenario.tenant,
            &scenario.session,
            &scenario.expect.request,
        )
        .await
        .map_err(|e| fail("assembly failed", &e))
}

/// Brings every derivation of the log up to date, as the services of `strata dev` would: the
/// projections, the memories (and, with `compact`, the compactions), then the projections of
/// what they appended.
async fn derive(backends: &Backends, compact: bool) -> Result<(), Box<dyn std::error::Error>> {
    strata_projector::catch_up(backends).await?;
    strata_memory::catch_up(backends).await?;
    if compact {
        strata_compactor::catch_up(backends).await?;
    }
    strata_projector::catch_up(backends).await?;
    Ok(())
}

/// Checks an assembled context against a scenario's expectations and measures it.
pub fn evaluate(scenario: &Scenario, assembled: &Assembled) -> ScenarioResult {
    let expect = &scenario.expect;
    let a = &assembled.assembly;
    let payload = serde_json::to_string(&assembled.payload).unwrap_or_default();
    let mut failures = Vec::new();
    for needle in &expect.must_keep {
        if !payload.contains(needle.as_str()) {
            failures.push(format!("must_keep missing: {needle:?}"));
        }
    }
    for needle in &expect.must_not {
        if payload.contains(needle.as_str()) {
            failures.push(format!("must_not present: {needle:?}"));
        }
    }
    for reason in &expect.omission_reasons {
        if a.omitted.get(reason).copied().unwrap_or(0) == 0 {
            failures.push(format!(
                "omission reason not counted: {}",
                reason_name(*reason)
            ));
        }
    }
    for kind in &expect.included_kinds {
        if !a.included.iter().any(|s| &s.kind == kind) {
            failures.push(format!("included kind missing: {kind}"));
        }
    }
    for id in &expect.rehydrated {
        let decisions: Vec<_> = a
            .rehydrations
            .iter()
            .filter(|d| {
                &d.target == id
                    || d.tool_call_id.as_ref() == Some(id)
                    || d.artifact_ref.as_ref() == Some(id)
            })
            .collect();
        if !decisions.iter().any(|d| d.rehydrated) {
            failures.push(match decisions.first() {
                Some(d) => format!("not rehydrated: {id} ({})", d.reason),
                None => format!("not rehydrated: {id} (no rehydration decision recorded)"),
            });
        }
    }
    let reduction = if a.transcript_tokens == 0 {
        0.0
    } else {
        1.0 - a.context_tokens as f64 / a.transcript_tokens as f64
    };
    ScenarioResult {
        name: scenario.name.clone(),
        description: expect.description.clone(),
        measured: expect.measured,
        events: scenario.events.len(),
        transcript_tokens: a.transcript_tokens,
        context_tokens: a.context_tokens,
        payload_tokens: O200k.count(&payload),
        reduction,
        facts_ok: failures.is_empty(),
        failures,
        omitted: a.omitted.clone(),
        assembly_id: a.assembly_id.clone(),
    }
}

/// The wire name of an omission reason (`other_branch`).
pub fn reason_name(reason: OmissionReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{reason:?}"))
}

/// Runs every scenario in order (one at a time: each has its own data directory).
pub async fn run_all(scenarios: &[Scenario]) -> Result<Vec<ScenarioResult>> {
    let mut out = Vec::with_capacity(scenarios.len());
    for s in scenarios {
        out.push(run(s).await?);
    }
    Ok(out)
}

/// Mean reduction of `results` (0 without any).
pub fn average_reduction(results: &[ScenarioResult]) -> f64 {
    if results.is_empty() {
        return 0.0;
    }
    results.iter().map(|r| r.reduction).sum::<f64>() / results.len() as f64
}

/// The scenarios directory of this repository: `./tests/scenarios` when it exists (run from
/// the repository root), else the one beside this crate's sources at build time.
pub fn default_dir() -> PathBuf {
    let here = PathBuf::from(DEFAULT_DIR);
    if here.is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(DEFAULT_DIR)
}

/// A fixed-width table of results, with the average and the failures listed under it.
pub fn table(results: &[ScenarioResult]) -> String {
    let mut out = String::new();
    let width = results
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    out.push_str(&format!(
        "{:<width$}  {:>10}  {:>8}  {:>9}  {:>5}  {:>8}\n",
        "scenario", "transcript", "context", "reduction", "facts", "failures"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<width$}  {:>10}  {:>8}  {:>8.1}%  {:>5}  {:>8}\n",
            format!("{}{}", r.name, if r.measured { "*" } else { "" }),
            r.transcript_tokens,
            r.context_tokens,
            100.0 * r.reduction,
            if r.facts_ok { "ok" } else { "FAIL" },
            r.failures.len()
        ));
    }
    let measured: Vec<ScenarioResult> = results.iter().filter(|r| r.measured).cloned().collect();
    out.push_str(&format!(
        "average reduction {:.1}% over {} scenarios ({:.1}% over the {} the seeds measured, marked *); facts ok in {} of {}\n",
        100.0 * average_reduction(results),
        results.len(),
        100.0 * average_reduction(&measured),
        measured.len(),
        results.iter().filter(|r| r.facts_ok).count(),
        results.len()
    ));
    for r in results.iter().filter(|r| !r.facts_ok) {
        out.push_str(&format!("\n{}:\n", r.name));
        for f in &r.failures {
            out.push_str(&format!("  - {f}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        std::fs::write(
            &path,
            "{\"event_id\":\"e1\",\"tenant_id\":\"t\",\"session_id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"UserPromptSubmitted\",\"payload\":{\"message_id\":\"m\",\"text\":\"hi\"}}\n\n{not json\n",
        )
        .unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(err.contains("x.jsonl:3: not valid JSON"), "{err}");
        std::fs::write(
            &path,
            "{\"event_id\":\"e1\",\"tenant_id\":\"t\",\"session_id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"ToolCallFinished\",\"payload\":{}}\n",
        )
        .unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(err.contains("x.jsonl:1: payload.tool_call_id"), "{err}");
    }

    #[test]
    fn an_expectation_without_fixture_or_with_unknown_fields_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.expect.json"), "{\"description\":\"d\"}").unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("no fixture a.jsonl"), "{err}");
        std::fs::write(
            dir.path().join("a.jsonl"),
            "{\"event_id\":\"e1\",\"tenant_id\":\"t\",\"session_id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"UserPromptSubmitted\",\"payload\":{\"message_id\":\"m\",\"text\":\"hi\"}}\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("a.expect.json"),
            "{\"description\":\"d\",\"must_kep\":[\"x\"]}",
        )
        .unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("a.expect.json: line 1") && err.contains("must_kep"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("a.expect.json"),
            "{\"description\":\"d\",\"must_keep\":[\" \"]}",
        )
        .unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("must_keep[0] is blank"), "{err}");
    }
}
