//! Importers: agent trajectories in the formats agent platforms already write, turned into
//! canonical events.
//!
//! Every importer
//! - streams: it reads a file record by record (a JSONL line, or an element of a JSON document's
//!   big arrays, see [`read`]), so a 200 MB file never sits whole in memory;
//! - pairs tool calls with their results by the ids the source gives, and never invents a call
//!   for a result: a result whose call is missing is kept as it is, and the projector marks it
//!   an orphan;
//! - derives each event's id from the target session, the record's position and its bytes
//!   ([`emit::event_id`]), so importing a file twice has one effect, and a file that grew
//!   (a live Claude Code session) adds only its new records;
//! - reports what it could not map, by kind ([`Report::unmapped`]), instead of dropping it
//!   silently;
//! - fails on a malformed record with an error naming the file and the line (or element).
//!
//! The crate converts; it does not append. `strata import` runs a conversion twice: once to
//! validate every event of every file (nothing is appended when one is refused), then again to
//! ingest.

pub mod canonical;
pub mod claude_code;
pub mod codex;
pub mod detect;
pub mod emit;
pub mod models;
pub mod openai;
pub mod read;
pub mod swe_agent;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;
use strata_core::Event;

pub use detect::detect;
pub use emit::Emitter;
pub use read::{Position, Record};

/// A source format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Strata's own canonical JSONL (what `strata export` writes).
    Canonical,
    /// Claude Code session JSONL (`~/.claude/projects/<project>/<uuid>.jsonl`).
    ClaudeCode,
    /// Codex CLI rollout JSONL (`~/.codex/sessions/.../rollout-*.jsonl`).
    Codex,
    /// OpenAI Chat Completions message lists (a JSON array, `{"messages": [...]}`, or JSONL).
    OpenaiChat,
    /// OpenAI Responses API / Agents SDK items (a JSON array or JSONL).
    OpenaiResponses,
    /// SWE-agent `.traj` (legacy and 1.0 tool-calling).
    SweAgent,
    /// mini-swe-agent `.traj.json`.
    MiniSweAgent,
}

impl Format {
    /// Every format, in the order `--format` lists them.
    pub const ALL: [Format; 7] = [
        Format::Canonical,
        Format::ClaudeCode,
        Format::Codex,
        Format::OpenaiChat,
        Format::OpenaiResponses,
        Format::SweAgent,
        Format::MiniSweAgent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Canonical => "canonical",
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
            Format::OpenaiChat => "openai-chat",
            Format::OpenaiResponses => "openai-responses",
            Format::SweAgent => "swe-agent",
            Format::MiniSweAgent => "mini-swe-agent",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown format {s:?}: expected auto or one of {}",
                    Format::ALL.map(Format::as_str).join(", ")
                )
            })
    }
}

/// How imported events are addressed.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// Tenant of every event (a canonical event that names its own keeps it unless
    /// `force_tenant`).
    pub tenant: String,
    /// Replace the tenant canonical events name.
    pub force_tenant: bool,
    /// Session id of a file's (main) session, instead of the one the source gives or the file
    /// name. Child sessions (subagents) and the conversations of a multi-conversation file are
    /// named after it.
    pub session: Option<String>,
    /// Time of the first record of a format that has no clock (OpenAI message lists, SWE-agent
    /// trajectories); later records follow one second apart. Default: the file's modification
    /// time.
    pub base_time: Option<DateTime<Utc>>,
    /// Context window of the sessions, instead of the one known for their model
    /// ([`models::window_of`]).
    pub context_window: Option<u32>,
}

impl ImportOptions {
    pub fn new(tenant: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            force_tenant: false,
            session: None,
            base_time: None,
            context_window: None,
        }
    }
}

/// What one file gave.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Records read (lines, or array elements).
    pub records: u64,
    /// Events produced, by type.
    pub events: BTreeMap<String, u64>,
    /// Sessions the events belong to, in first-seen order.
    pub sessions: Vec<String>,
    /// What could not be mapped, by kind (`line type "queue-operation"`, `content block
    /// "image"`...): counted, never silently dropped.
    pub unmapped: BTreeMap<String, u64>,
    /// Tool results whose call the source does not have (kept, and marked orphans by the
    /// projector).
    pub orphan_results: u64,
    /// Tool calls without a result in the source.
    pub calls_without_result: u64,
}

impl Report {
    /// Events produced.
    pub fn event_count(&self) -> u64 {
        self.events.values().sum()
    }

    /// Counts one thing that could not be mapped.
    pub fn unmapped(&mut self, kind: impl Into<String>) {
        *self.unmapped.entry(kind.into()).or_default() += 1;
    }
}

/// Why a file cannot be imported. Nothing of it is appended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// A record is malformed, or cannot be mapped to a valid event.
    #[error("{file}:{position}: {message}")]
    Record {
        file: String,
        position: Position,
        message: String,
    },
    /// The file as a whole is not of the format.
    #[error("{file}: {message}")]
    File { file: String, message: String },
    /// The consumer of the events refused one (`strata import`'s ingest).
    #[error("{0}")]
    Sink(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One format's conversion: fed a file's records in order, it emits events.
pub trait Converter {
    /// Top-level fields of a JSON document whose elements are streamed as records (the big
    /// arrays); other fields come first, together, as [`read::Record::header`].
    fn streamed_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Converts one record. An `Err` is a malformed record: it names what and where (the
    /// caller adds the file and position).
    fn record(&mut self, record: Record, out: &mut Emitter<'_>) -> Result<(), String>;

    /// The end of the file: emits what was held back (an unfinished message group).
    fn finish(&mut self, out: &mut Emitter<'_>) -> Result<(), String> {
        let _ = out;
        Ok(())
    }
}

/// A file to import.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    /// How it is named in messages.
    pub name: String,
}

impl Source {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self {
            name: path.display().to_string(),
            path,
        }
    }

    /// The file name without its extensions (`django__django-11099.traj.json` →
    /// `django__django-11099`): the session id of a format that has none.
    pub fn stem(&self) -> String {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "stdin".into());
        let stem = name.split('.').next().unwrap_or(&name);
        if stem.is_empty() {
            name
        } else {
            stem.to_owned()
        }
    }
}

/// The converter of a format.
pub fn converter(format: Format, source: &Source) -> Box<dyn Converter> {
    match format {
        Format::Canonical => Box::new(canonical::Canonical),
        Format::ClaudeCode => Box::new(claude_code::ClaudeCode::new(source)),
        Format::Codex => Box::new(codex::Codex::new(source)),
        Format::OpenaiChat => Box::new(openai::Chat::new(source)),
        Format::OpenaiResponses => Box::new(openai::Responses::new(source)),
        Format::SweAgent => Box::new(swe_agent::SweAgent::new(source)),
        Format::MiniSweAgent => Box::new(swe_agent::MiniSweAgent::new(source)),
    }
}

/// Converts one file, handing every event to `sink` in order; returns what it gave. Stops at
/// the first malformed record.
pub fn convert(
    source: &Source,
    format: Format,
    options: &ImportOptions,
    sink: &mut dyn FnMut(Event) -> Result<(), String>,
) -> Result<Report> {
    run(source, format, options, sink, None)
}

/// Converts one file as [`convert`] does, but goes on past malformed records (skipping them),
/// collecting up to `max_errors` of their errors: what a check of a file reports before
/// anything of it is imported.
pub fn check(
    source: &Source,
    format: Format,
    options: &ImportOptions,
    sink: &mut dyn FnMut(Event) -> Result<(), String>,
    max_errors: usize,
) -> (Result<Report>, Vec<Error>) {
    let mut errors = Vec::new();
    let report = run(
        source,
        format,
        options,
        sink,
        Some((&mut errors, max_errors)),
    );
    (report, errors)
}

type Collect<'a> = Option<(&'a mut Vec<Error>, usize)>;

fn run(
    source: &Source,
    format: Format,
    options: &ImportOptions,
    sink: &mut dyn FnMut(Event) -> Result<(), String>,
    mut collect: Collect<'_>,
) -> Result<Report> {
    let mut converter = converter(format, source);
    let base_time = match options.base_time {
        Some(t) => t,
        None => modified_time(&source.path),
    };
    let mut out = Emitter::new(options, source, base_time, sink);
    let fields = converter.streamed_fields();
    let mut skipped = 0u64;
    let mut bad_lines: Vec<Error> = Vec::new();
    let mut on_bad_line = |e: Error| bad_lines.push(e);
    let bad_line: Option<&mut dyn FnMut(Error)> = match collect {
        Some(_) => Some(&mut on_bad_line),
        None => None,
    };
    read::records_with(
        source,
        read::mode_of(format),
        fields,
        bad_line,
        &mut |record| {
            let position = record.position.clone();
            out.report.records += 1;
            if let Err(message) = converter.record(record, &mut out) {
                let error = Error::Record {
                    file: source.name.clone(),
                    position,
                    message,
                };
                match collect.as_mut() {
                    Some((errors, max)) => {
                        skipped += 1;
                        if errors.len() < *max {
                            errors.push(error);
                        }
                    }
                    None => return Err(error),
                }
            }
            out.take_sink_error().map_or(Ok(()), Err)
        },
    )?;
    converter.finish(&mut out).map_err(|message| Error::File {
        file: source.name.clone(),
        message,
    })?;
    if let Some(e) = out.take_sink_error() {
        return Err(e);
    }
    let mut report = out.finish();
    if let Some((errors, max)) = collect {
        skipped += bad_lines.len() as u64;
        for e in bad_lines {
            if errors.len() < max {
                errors.push(e);
            }
        }
        errors.sort_by_key(|e| match e {
            Error::Record {
                position: Position::Line(n),
                ..
            } => *n,
            _ => u64::MAX,
        });
    }
    if skipped > 0 {
        *report
            .unmapped
            .entry("malformed record (skipped by the check)".into())
            .or_default() += skipped;
    }
    Ok(report)
}

/// A file's modification time (now, for standard input or when unknown).
fn modified_time(path: &Path) -> DateTime<Utc> {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .map(DateTime::<Utc>::from)
        .unwrap_or_else(|_| Utc::now())
}
