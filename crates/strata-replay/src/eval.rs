//! `strata eval`: is the context sufficient, and at what cost — at every model call point of
//! recorded sessions.
//!
//! Each session's events go, in order, through what production does to them: ingest's artifact
//! offload (outputs over the threshold become an artifact ref and a preview), the projector's
//! fold into a scratch projection set, and the memory extractor and the compactor (their pure
//! engines, inline, as if the services kept up: their records on the source, if any, are
//! dropped and derived again). At every `ModelResponseReceived` — a model call whose answer is
//! on record — the state just before it is assembled exactly as the assembler would (the
//! policy and request of the `ContextBuilt` that preceded it, or the defaults; `--policy` and
//! `--budget` override) and scored with [`strata_eval`] against that recorded answer, beside
//! the baselines. Nothing is written to the live log or projections.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use serde::Serialize;
use strata_blob::BlobStore;
use strata_core::assembly::{
    assemble_with_policy, is_retired, preview, rehydration_plan_with_policy, retired_replay_note,
    Assembled, AssemblyPolicy, AssemblyRequest, BundleMessage, ContextAssembly, Provider,
};
use strata_core::compaction::planner::{compaction_event, CompactorOptions, Planner};
use strata_core::memory::MemoryEngine;
use strata_core::payload::{ModelResponseReceived, ToolCallFinished, ToolSpec};
use strata_core::projection::LogPosition;
use strata_core::tokens::{O200k, TokenCounter};
use strata_core::{Event, Payload};
use strata_eval::{argument_text, History, PointScore, Role, Totals};
use strata_store::sqlite::SqliteStore;
use strata_store::ProjectionStore;

use crate::fold::Folder;
use crate::replay::{collect, scratch_set, ReplaySource, Selection};
use crate::source::{Progress, Ticker};
use crate::Result;

/// Newest messages of a branch lineage read per snapshot (the assembler's default).
const WINDOW: u32 = 256;

/// Options of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub selection: Selection,
    /// Assemble under this policy instead of each point's recorded one.
    pub policy: Option<AssemblyPolicy>,
    /// Token budget of every assembly (default: the recorded one, or the window).
    pub budget: Option<u64>,
    /// The size every assembly aims for (default: the recorded target, or none).
    pub target_tokens: Option<u64>,
    /// Most raw artifact bytes rehydrated into one context (the deployment's setting).
    pub rehydrate_max_bytes: u64,
    /// Per tenant, the providers allowed `confidential` raw payloads (the deployment's
    /// setting); a point with a recorded assembly keeps the recorded answer.
    pub confidential_providers: BTreeMap<String, BTreeSet<Provider>>,
    /// N of the last-N-observations baseline.
    pub last_n: usize,
    /// Newest messages of a branch lineage read per snapshot (the assembler reads 256).
    pub window: u32,
    /// Aim every point at the last-N baseline's size at that point (its `target_tokens`), so
    /// that the policy and the baseline are compared at equal size.
    pub at_baseline_size: bool,
    /// Tool outputs over this many bytes become artifacts, as ingest does (the live log's
    /// events are offloaded already).
    pub artifact_threshold: usize,
    /// Keep every point's score in the report (`--report`).
    pub keep_points: bool,
    /// Directory for the scratch projection set (default: a temporary directory).
    pub scratch_dir: Option<PathBuf>,
    /// Keep the full record of the assembly at this call point (the response's event id) in
    /// [`EvalReport::assembly`].
    pub assembly_at: Option<String>,
    /// Decodes the log's records (opening sealed ones with their keys).
    pub codec: strata_keys::RecordCodec,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            selection: Selection::default(),
            policy: None,
            budget: None,
            target_tokens: None,
            rehydrate_max_bytes: strata_core::assembly::DEFAULT_REHYDRATE_MAX_BYTES,
            confidential_providers: BTreeMap::new(),
            last_n: strata_eval::DEFAULT_LAST_N,
            at_baseline_size: false,
            window: WINDOW,
            artifact_threshold: 8 * 1024,
            keep_points: false,
            scratch_dir: None,
            assembly_at: None,
            codec: strata_keys::RecordCodec::plain(),
        }
    }
}

/// One session's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SessionResult {
    pub tenant_id: String,
    pub session_id: String,
    /// What its totals are grouped under (the source format, or `log`).
    pub group: String,
    pub events: u64,
    pub totals: Totals,
}

/// One call point's score.
#[derive(Debug, Clone, Serialize)]
pub struct PointResult {
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    /// The recorded response's event.
    pub event_id: String,
    /// Its seq on the source (or its position in the session when the source has none).
    pub seq: u64,
    pub policy: String,
    /// When the point's recorded policy is retired: that policy 8 stood in for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_note: Option<String>,
    /// Tokens of each segment kind of the policy's context.
    pub segments: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub score: PointScore,
}

/// The figures of an evaluation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EvalReport {
    /// The policy assembled under (`recorded` when each point's own).
    pub policy: String,
    pub sessions: Vec<SessionResult>,
    /// Totals by group (source format).
    pub groups: BTreeMap<String, Totals>,
    pub totals: Totals,
    /// Responses with no branch state to assemble from (skipped).
    pub skipped_points: u64,
    /// Call points whose recorded policy is retired, by its version: each was assembled under
    /// policy 8 instead (see [`strata_core::assembly::retired_replay_note`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub retired_policy_points: BTreeMap<String, u64>,
    /// Responses that repeat one already answered on the branch (the same provider message id
    /// and text): a harness's copy, not a model call, so not scored. Claude Code writes a
    /// resumed conversation's earlier responses again under the new prompt.
    pub repeated_points: u64,
    pub events: u64,
    pub elapsed_secs: f64,
    /// Sources that could not be read, with why (left out of the figures).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
    #[serde(skip)]
    pub points: Vec<PointResult>,
    /// The traced record of the assembly at [`EvalOptions::assembly_at`], when reached.
    #[serde(skip)]
    pub assembly: Option<ContextAssembly>,
}

/// Evaluates sessions one at a time into one scratch set.
pub struct Evaluator<'a> {
    options: EvalOptions,
    blobs: Option<&'a BlobStore>,
    scratch: SqliteStore,
    _scratch_dir: Option<tempfile::TempDir>,
    folder: Folder,
    memory: MemoryEngine,
    planner: Planner,
    offset: u64,
    report: EvalReport,
    started: std::time::Instant,
    /// How many times each (tenant, session) was evaluated: a second recording of the same
    /// session id (two files) is evaluated on its own, renamed.
    evaluated: HashMap<(String, String), u32>,
}

impl std::fmt::Debug for Evaluator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// What a session's evaluation keeps while it runs.
#[derive(Default)]
struct SessionRun {
    histories: Histories,
    /// The request recorded by the latest `ContextBuilt` of each branch, until its response.
    recorded: HashMap<String, ContextAssembly>,
    seen: std::collections::HashSet<String>,
    /// The responses answered so far, by (branch, provider message id): a repeat is a copy.
    answered: HashMap<(String, String), String>,
    /// Raw bytes of the session's artifacts by ref: what the assembler reads back from blob
    /// storage when a rehydration is admitted.
    artifacts: HashMap<String, String>,
    seq: u64,
    totals: Totals,
    events: u64,
}

impl SessionRun {
    /// Notes a response as answered; false when it repeats one already answered on the branch.
    /// A response without a provider id is never taken for a copy.
    fn answer(&mut self, branch: &str, response: &ModelResponseReceived) -> bool {
        if response.message_id.is_empty() {
            return true;
        }
        let key = (branch.to_owned(), response.message_id.clone());
        match self.answered.get(&key) {
            Some(text) if *text == response.text => false,
            _ => {
                self.answered.insert(key, response.text.clone());
                true
            }
        }
    }
}

impl<'a> Evaluator<'a> {
    /// `blobs` resolves the artifact refs of events that were offloaded before (the live log):
    /// without it their previews stand in for their bytes in the history.
    pub async fn new(options: EvalOptions, blobs: Option<&'a BlobStore>) -> Result<Self> {
        let (dir, scratch) = scratch_set(options.scratch_dir.as_ref()).await?;
        let policy = options
            .policy
            .map_or_else(|| "recorded".to_owned(), |p| p.version.to_owned());
        Ok(Self {
            options,
            blobs,
            scratch,
            _scratch_dir: dir,
            folder: Folder::new("strata-eval", false, 1),
            memory: MemoryEngine::default(),
            planner: Planner::new(CompactorOptions::default()),
            offset: 0,
            report: EvalReport {
                policy,
                ..EvalReport::default()
            },
            started: std::time::Instant::now(),
            evaluated: HashMap::new(),
        })
    }

    /// Evaluates one session's events (in order), its totals grouped under `group`.
    pub async fn session(&mut self, group: &str, mut events: Vec<Event>) -> Result<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let key = (first.tenant_id.clone(), first.session_id.clone());
        let n = self.evaluated.entry(key.clone()).or_default();
        *n += 1;
        if *n > 1 {
            rename(&mut events, *n);
        }
        let (tenant, session) = (key.0, events[0].session_id.clone());
        let mut run = SessionRun::default();
        for event in events {
            if matches!(
                event.payload,
                Payload::MemoryRecorded(_)
                    | Payload::MemorySuperseded(_)
                    | Payload::CompactionCompleted(_)
            ) || !run.seen.insert(event.event_id.clone())
            {
                continue; // derived again below, or a duplicate the fold would skip
            }
            self.step(&mut run, event).await?;
        }
        self.folder.flush(&self.scratch).await?;
        self.report.events += run.events;
        self.report
            .groups
            .entry(group.to_owned())
            .or_default()
            .merge(&run.totals);
        self.report.totals.merge(&run.totals);
        self.report.sessions.push(SessionResult {
            tenant_id: tenant,
            session_id: session,
            group: group.to_owned(),
            events: run.events,
            totals: run.totals,
        });
        Ok(())
    }

    /// One source event: scored when it is a call point, then folded, with what the services
    /// would derive from it.
    async fn step(&mut self, run: &mut SessionRun, mut event: Event) -> Result<()> {
        let source_seq = event.seq;
        run.seq += 1;
        event.seq = Some(run.seq);
        let raw = raw_output(&mut event, self.blobs, self.options.artifact_threshold).await;
        if let (Payload::ToolCallFinished(p), Some(raw)) = (&event.payload, &raw) {
            if let Some(uri) = &p.output_ref {
                run.artifacts.insert(uri.clone(), raw.clone());
            }
        }
        match &event.payload {
            Payload::ModelResponseReceived(response) => {
                if run.answer(&event.branch_id, response) {
                    self.point(run, &event, source_seq.unwrap_or(run.seq))
                        .await?;
                } else {
                    self.report.repeated_points += 1;
                }
                run.recorded.remove(&event.branch_id);
            }
            Payload::ContextBuilt(cb) => {
                if let Ok(rec) = serde_json::from_value::<ContextAssembly>(cb.assembly.clone()) {
                    run.recorded.insert(event.branch_id.clone(), rec);
                }
            }
            _ => {}
        }
        run.histories.remember(&event, raw);
        run.events += 1;
        self.fold(event.clone()).await?;
        let mut derived: Vec<Event> = self
            .memory
            .observe(&event)
            .into_iter()
            .map(|d| d.into_event(&event))
            .collect();
        if let Some(record) = self.planner.observe(&event) {
            derived.push(compaction_event(&record, &event));
        }
        while let Some(mut d) = derived.pop() {
            run.seq += 1;
            d.seq = Some(run.seq);
            // What the services derive, they also read back (a memory supersedes, a
            // compaction moves the planner's cut).
            self.memory.observe(&d);
            if let Some(record) = self.planner.observe(&d) {
                derived.push(compaction_event(&record, &d));
            }
            self.fold(d).await?;
        }
        Ok(())
    }

    async fn fold(&mut self, event: Event) -> Result<()> {
        let position = LogPosition {
            partition: 0,
            offset: self.offset,
        };
        self.offset += 1;
        self.folder
            .fold(&self.scratch, vec![(position, event)])
            .await?;
        if self.folder.pending >= 5000 {
            self.folder.flush(&self.scratch).await?;
        }
        Ok(())
    }

    async fn point(&mut self, run: &mut SessionRun, event: &Event, seq: u64) -> Result<()> {
        let Payload::ModelResponseReceived(response) = &event.payload else {
            return Ok(());
        };
        self.folder.flush(&self.scratch).await?;
        let Some(snapshot) = self
            .scratch
            .snapshot(
                &event.tenant_id,
                &event.session_id,
                &event.branch_id,
                event.participant_id.as_deref(),
                self.options.window,
            )
            .await?
        else {
            self.report.skipped_points += 1;
            return Ok(());
        };
        let recorded = run.recorded.get(&event.branch_id);
        let (mut request, recorded_policy) =
            recorded_request(recorded, self.options.budget, self.options.target_tokens);
        let retired = recorded
            .map(|r| r.policy_version.as_str())
            .filter(|v| self.options.policy.is_none() && is_retired(v));
        if let Some(version) = retired {
            *self
                .report
                .retired_policy_points
                .entry(version.to_owned())
                .or_default() += 1;
        }
        request.rehydrate_max_bytes = self.options.rehydrate_max_bytes;
        if self.options.at_baseline_size {
            let history = run.histories.branch(&event.branch_id);
            request.target_tokens = Some(history.baselines(self.options.last_n, 0).last_n_tokens);
        }
        if recorded.is_none() {
            request.confidential_allowed = self
                .options
                .confidential_providers
                .get(&event.tenant_id)
                .is_some_and(|p| p.contains(&request.provider));
        }
        // What the assembler reads from blob storage for the rehydrations its plan admits.
        let policy = self.options.policy.unwrap_or(recorded_policy);
        for d in rehydration_plan_with_policy(&snapshot, &request, &policy)
            .into_iter()
            .filter(|d| d.rehydrated)
        {
            if let Some(raw) = d.artifact_ref.as_ref().and_then(|r| run.artifacts.get(r)) {
                request
                    .rehydrated
                    .insert(d.artifact_ref.clone().unwrap_or_default(), raw.clone());
            }
        }
        let assembled = assemble_with_policy(&snapshot, &request, &policy, &O200k);
        let score = score_response(
            run.histories.branch(&event.branch_id),
            response,
            &assembled,
            self.options.last_n,
        );
        run.totals.add(&score);
        if self.options.assembly_at.as_deref() == Some(event.event_id.as_str()) {
            self.report.assembly = Some(assembled.assembly.clone());
        }
        if self.options.keep_points {
            let mut segments: BTreeMap<String, u64> = BTreeMap::new();
            for s in &assembled.assembly.included {
                *segments.entry(s.kind.clone()).or_default() += s.tokens;
            }
            self.report.points.push(PointResult {
                tenant_id: event.tenant_id.clone(),
                session_id: event.session_id.clone(),
                branch_id: event.branch_id.clone(),
                event_id: event.event_id.clone(),
                seq,
                policy: assembled.assembly.policy_version.clone(),
                policy_note: retired.and_then(retired_replay_note),
                segments,
                score,
            });
        }
        Ok(())
    }

    /// Notes a source that could not be read (it is left out of the figures).
    pub fn unreadable(&mut self, why: String) {
        self.report.unreadable.push(why);
    }

    /// The report so far, with the elapsed time.
    pub fn finish(mut self) -> EvalReport {
        self.report.elapsed_secs = self.started.elapsed().as_secs_f64();
        self.report
    }
}

/// The request and policy of a call point: the recorded assembly's (policy 8 for a retired
/// version, see [`AssemblyPolicy::for_replay`]), else the defaults (an OpenAI-style request
/// under the current policy), with `budget` overriding.
pub(crate) fn recorded_request(
    recorded: Option<&ContextAssembly>,
    budget: Option<u64>,
    target_tokens: Option<u64>,
) -> (AssemblyRequest, AssemblyPolicy) {
    let mut request = AssemblyRequest {
        provider: Provider::Openai,
        ..AssemblyRequest::default()
    };
    let mut policy = AssemblyPolicy::default();
    if let Some(rec) = recorded {
        request.provider = rec.provider;
        request.budget = Some(rec.budget_tokens);
        request.confidential_allowed = rec.confidential_allowed;
        request.target_tokens = rec.target_tokens;
        if let Some(p) = AssemblyPolicy::for_replay(&rec.policy_version) {
            policy = p;
        }
    }
    if budget.is_some() {
        request.budget = budget;
    }
    if target_tokens.is_some() {
        request.target_tokens = target_tokens;
    }
    (request, policy)
}

/// Renames the `n`-th recording of a session id, and its events' ids (which the fold would
/// otherwise take for the first recording's), so that it is evaluated on its own.
fn rename(events: &mut [Event], n: u32) {
    let id = |id: &str| format!("{id}~{n}");
    for e in events {
        e.session_id = id(&e.session_id);
        e.event_id = id(&e.event_id);
        if let Some(parent) = &e.parent_event_id {
            e.parent_event_id = Some(id(parent));
        }
        if let Payload::BranchForked(p) = &mut e.payload {
            p.from_event_id = id(&p.from_event_id);
        }
    }
}

/// Offloads an inline output as ingest does: the artifact ref, a preview, the hash, byte and
/// token counts instead of the bytes.
fn offload(p: &mut ToolCallFinished, raw: &str) {
    let sha = strata_core::sha256_hex(raw.as_bytes());
    p.output = None;
    p.output_ref = Some(strata_blob::artifact_uri(&sha));
    p.output_preview = Some(preview(raw));
    p.output_sha256 = Some(sha);
    p.output_bytes = Some(raw.len() as u64);
    p.output_tokens = Some(O200k.count(raw));
}

/// A tool result's full output, for the history; offloads it as ingest would when it is
/// inline and over `threshold`. An output offloaded before is read back from `blobs` (its
/// preview stands in when there are none, or the artifact is gone).
pub(crate) async fn raw_output(
    event: &mut Event,
    blobs: Option<&BlobStore>,
    threshold: usize,
) -> Option<String> {
    let Payload::ToolCallFinished(p) = &mut event.payload else {
        return None;
    };
    if let Some(output) = &p.output {
        let raw = output.clone();
        if raw.len() > threshold {
            offload(p, &raw);
        }
        return Some(raw);
    }
    let (Some(blobs), Some(sha)) = (blobs, p.output_sha256.as_deref()) else {
        return p.output_preview.clone();
    };
    match blobs.get_artifact(&event.tenant_id, sha).await {
        Ok(Some(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        _ => p.output_preview.clone(),
    }
}

/// Scores the context assembled for a recorded response.
pub(crate) fn score_response(
    history: &History,
    response: &ModelResponseReceived,
    assembled: &Assembled,
    last_n: usize,
) -> PointScore {
    let arguments: Vec<String> = response
        .tool_calls
        .iter()
        .map(|c| argument_text(&c.args.to_string()))
        .collect();
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let context_text = context_text(assembled);
    strata_eval::score(
        history,
        strata_eval::Point {
            response_text: &response.text,
            arguments: &arguments,
            context_text: &context_text,
            context_tokens: assembled.assembly.context_tokens,
            stated_tokens: stated_tokens(&assembled.assembly),
        },
        last_n,
    )
}

/// Tokens of the context's state facts, which no message of the session says as such: the task
/// state the platform published and the memories (`task_state` and `memory` segments).
fn stated_tokens(assembly: &strata_core::assembly::ContextAssembly) -> u64 {
    assembly
        .included
        .iter()
        .filter(|s| matches!(s.kind.as_str(), "task_state" | "memory"))
        .map(|s| s.tokens)
        .sum()
}

/// A session's history as the model read it, per branch.
#[derive(Debug, Default)]
pub(crate) struct Histories {
    branches: HashMap<String, History>,
    /// Tool names by call id (for the report's "last seen in").
    tool_names: HashMap<String, String>,
}

impl Histories {
    pub(crate) fn branch(&mut self, branch: &str) -> &mut History {
        self.branches.entry(branch.to_owned()).or_default()
    }

    /// Adds what an event shows the model to its branch's history.
    pub(crate) fn remember(&mut self, event: &Event, raw: Option<String>) {
        if let Payload::BranchForked(p) = &event.payload {
            // The new branch saw its parent's history up to the fork (imported forks come at
            // their fork point).
            let parent = self.branch(&event.branch_id).clone();
            self.branches.insert(p.new_branch_id.clone(), parent);
            return;
        }
        let seq = event.seq.unwrap_or(0);
        if let Payload::SessionStarted(p) = &event.payload {
            let history = self.branch(&event.branch_id);
            if let Some(prompt) = &p.system_prompt {
                history.push(
                    Role::System,
                    &event.event_id,
                    seq,
                    prompt.clone(),
                    None,
                    None,
                    &O200k,
                );
            }
            if let Some(tools) = p.tools.as_ref().filter(|t| !t.is_empty()) {
                // Looked up in their text, counted as the projection counts them (as JSON).
                let count = O200k.count(&serde_json::to_string(tools).unwrap_or_default());
                history.push_counted(
                    Role::Tools,
                    &event.event_id,
                    seq,
                    tools_text(tools),
                    None,
                    None,
                    count,
                );
            }
            return;
        }
        let Some((role, text, call)) = self.message_of(event, raw) else {
            return;
        };
        let tool = call.as_ref().and_then(|c| self.tool_names.get(c).cloned());
        let count = sent_tokens(event)
            .unwrap_or_else(|| strata_core::tokens::message_tokens(&text, &O200k));
        self.branch(&event.branch_id).push_counted(
            role,
            &event.event_id,
            seq,
            text,
            call,
            tool,
            count,
        );
    }

    /// The message an event is to the model, if any: (role, text, tool call id).
    fn message_of(
        &mut self,
        event: &Event,
        raw: Option<String>,
    ) -> Option<(Role, String, Option<String>)> {
        Some(match &event.payload {
            Payload::UserPromptSubmitted(p) => (Role::User, p.text.clone(), None),
            Payload::ModelResponseReceived(p) => {
                let mut text = p.text.clone();
                for c in &p.tool_calls {
                    self.tool_names
                        .insert(c.tool_call_id.clone(), c.name.clone());
                    text.push('\n');
                    text.push_str(&c.name);
                    text.push('\n');
                    text.push_str(&argument_text(&c.args.to_string()));
                }
                (Role::Assistant, text, None)
            }
            Payload::ToolCallRequested(p) => {
                self.tool_names
                    .insert(p.tool_call_id.clone(), p.name.clone());
                (
                    Role::Assistant,
                    format!("{}\n{}", p.name, argument_text(&p.args.to_string())),
                    None,
                )
            }
            Payload::ToolCallFinished(p) => (Role::Tool, raw?, Some(p.tool_call_id.clone())),
            Payload::ToolCallFailed(p) => {
                (Role::Tool, p.error.clone(), Some(p.tool_call_id.clone()))
            }
            _ => return None,
        })
    }
}

/// The tokens of a model response as a provider is sent it when the transcript is replayed —
/// its text, and each call's name and JSON arguments — counted as the projection counts them
/// (`None` for every other event: counted as looked up).
fn sent_tokens(event: &Event) -> Option<u64> {
    use strata_core::tokens::{message_tokens, tool_call_tokens};
    let call =
        |name: &str, args: &serde_json::Value| tool_call_tokens(name, &args.to_string(), &O200k);
    match &event.payload {
        Payload::ModelResponseReceived(p) => Some(
            message_tokens(&p.text, &O200k)
                + p.tool_calls
                    .iter()
                    .map(|c| call(&c.name, &c.args))
                    .sum::<u64>(),
        ),
        Payload::ToolCallRequested(p) => Some(call(&p.name, &p.args)),
        _ => None,
    }
}

fn tools_text(tools: &[ToolSpec]) -> String {
    tools
        .iter()
        .map(|t| format!("{}\n{}\n{}", t.name, t.description, t.schema))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the model reads of an assembled context: every message's text, every call with its
/// arguments, every tool result, the tool schemas.
pub fn context_text(a: &Assembled) -> String {
    let mut out = String::new();
    for m in &a.messages {
        match m {
            BundleMessage::System { text } | BundleMessage::User { text } => out.push_str(text),
            BundleMessage::Data { source, text } => {
                out.push_str(&BundleMessage::data_envelope(source, text))
            }
            BundleMessage::Assistant { text, tool_calls } => {
                out.push_str(text);
                for c in tool_calls {
                    out.push('\n');
                    out.push_str(&c.name);
                    out.push('\n');
                    out.push_str(&argument_text(&c.arguments));
                }
            }
            BundleMessage::Tool { content, .. } => out.push_str(content),
        }
        out.push('\n');
    }
    out.push_str(&tools_text(&a.tools));
    out
}

/// Evaluates the selected sessions of a source (the log, or events in file order), each
/// grouped under `group`.
pub async fn eval(
    source: ReplaySource<'_>,
    group: &str,
    blobs: Option<&BlobStore>,
    options: &EvalOptions,
    progress: Option<&mut (dyn FnMut(Progress) + Send)>,
) -> Result<EvalReport> {
    let mut ticker = Ticker::new(progress);
    let collected = collect(source, &options.selection, &options.codec).await?;
    let mut by_session = collected.by_session;
    let total_events: u64 = by_session.values().map(|v| v.len() as u64).sum();
    let total_sessions = collected.order.len() as u64;
    let mut evaluator = Evaluator::new(options.clone(), blobs).await?;
    let (mut events, mut sessions) = (0u64, 0u64);
    for key in &collected.order {
        let session: Vec<Event> = by_session
            .remove(key)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        events += session.len() as u64;
        evaluator.session(group, session).await?;
        sessions += 1;
        ticker.tick(events, total_events, sessions, total_sessions);
    }
    ticker.finish(events, total_events, sessions, total_sessions);
    Ok(evaluator.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transcript_replay_is_counted_as_sent_and_looked_up_by_value() {
        let script = "line one\n\"quoted\"\n".repeat(50);
        let event = Event::from_json(
            serde_json::json!({"event_id": "e1", "tenant_id": "t", "session_id": "s",
                "timestamp": "2026-06-03T10:00:00Z", "type": "ModelResponseReceived", "seq": 2,
                "payload": {"message_id": "m", "text": "Writing it.", "tool_calls": [
                    {"tool_call_id": "c1", "name": "write_file",
                     "args": {"path": "run_me.sh", "content": script}}]}}),
            None,
        )
        .expect("valid event");
        let mut histories = Histories::default();
        histories.remember(&event, None);
        // As the projection counts it, and the reply's priming: a context that sends the
        // transcript whole costs what the transcript costs.
        let args = serde_json::json!({"path": "run_me.sh", "content": script}).to_string();
        let tokens = histories.branch("main").baselines(5, 0).transcript_tokens;
        assert_eq!(
            tokens,
            strata_core::tokens::message_tokens("Writing it.", &O200k)
                + strata_core::tokens::tool_call_tokens("write_file", &args, &O200k)
                + strata_core::tokens::REPLY_PRIMING_TOKENS
        );
        // Escaped JSON costs more than the values it carries.
        let values = O200k.count(&format!("Writing it.\nwrite_file\nrun_me.sh\n{script}\n"));
        assert!(tokens > values, "{tokens} <= {values}");
        // References are still found by value.
        let found = histories.branch("main").last_seen(&strata_eval::Reference {
            kind: strata_eval::RefKind::Path,
            text: "run_me.sh".into(),
        });
        assert!(found.is_some());
    }
}
