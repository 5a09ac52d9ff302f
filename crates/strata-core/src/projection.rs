//! The projection fold: a pure function from (session fold, event) to the session fold
//! after it plus the row changes a projection store must write.
//!
//! The fold is the only place that decides what an event means for state; stores only persist
//! what it says. It keeps, per session, what later events need to be interpreted (branches and
//! their agent state, open tool calls, counters) and is itself persisted with every batch, so a
//! projector can resume anywhere.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Event, MAIN_BRANCH};
use crate::payload::*;
use crate::privacy::PrivacyDefaults;
use crate::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};

/// Participant assumed when neither the event nor the session names one.
pub const DEFAULT_PARTICIPANT: &str = "agent";

/// Where an event sits on the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPosition {
    pub partition: u32,
    pub offset: u64,
}

/// A statement with the event it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sourced {
    pub text: String,
    pub source_event_id: String,
}

/// A tool error not yet followed by a success of the same tool (recovery state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenError {
    pub tool_call_id: String,
    pub tool: String,
    /// The error's first line, taken from the tool's output: as private as that output.
    pub message: String,
    pub retryable: bool,
    pub source_event_id: String,
    /// The privacy class of the output the message was taken from (none for a harness failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privacy_class: Option<crate::payload::PrivacyClass>,
    /// The failure's call is not on the log (broken provenance): kept and marked, never dropped,
    /// and never paired with an invented call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphan: bool,
}

/// What the agent is doing on one branch, derived from the log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    pub goal: Option<Sourced>,
    pub current_task: Option<Sourced>,
    pub acceptance_criteria: Vec<Sourced>,
    pub plan: Vec<Sourced>,
    pub constraints: Vec<Sourced>,
    pub facts: Vec<Sourced>,
    pub decisions: Vec<Sourced>,
    pub open_questions: Vec<Sourced>,
    /// Paths in first-seen order, each with the latest event that touched it.
    pub files_read: Vec<Sourced>,
    pub files_modified: Vec<Sourced>,
    pub errors: Vec<OpenError>,
    pub last_verifier: Option<Sourced>,
    pub last_compaction_id: Option<String>,
    pub source_event_id: Option<String>,
    pub version: u64,
    /// Child subagents started on this branch, in start order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentState>,
}

/// A child subagent as its parent knows it: what it was asked, the parent's checkpoint at the
/// start, and what reached the parent when it finished or was promoted. The child's own events
/// are its own session and never part of the parent's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubagentState {
    pub child_session_id: String,
    pub task: Option<String>,
    /// The parent's recorded resume point (compact JSON), from `SubagentStarted.checkpoint`.
    pub checkpoint: Option<String>,
    /// `running` until `SubagentFinished`, then its status (`succeeded`, `failed`, ...).
    pub status: String,
    pub finished: bool,
    pub promoted: bool,
    pub report: Option<String>,
    pub artifacts: Vec<String>,
    pub error: Option<String>,
    pub retryable: Option<bool>,
    pub started_event_id: String,
    /// The latest of its events on the parent's log.
    pub last_event_id: String,
    /// The log position of that event (0 in state folded before it was recorded), so that the
    /// assembler can tell how many steps came after the report.
    #[serde(default)]
    pub last_seq: u64,
}

impl SubagentState {
    /// Whether its results reach the parent.
    pub fn released(&self) -> bool {
        self.finished || self.promoted
    }
}

/// A tool call that has no result yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenToolCall {
    pub tool_call_id: String,
    pub name: String,
    pub branch_id: String,
    pub participant_id: String,
    pub request_event_id: String,
    pub request_seq: u64,
    pub awaiting_approval: bool,
}

/// One branch of the session tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BranchFold {
    pub branch_id: String,
    pub parent_branch_id: Option<String>,
    pub fork_event_id: Option<String>,
    /// Ancestor events with `seq <= fork_seq` belong to this branch's history.
    pub fork_seq: Option<u64>,
    /// `main`, `fork` or `what_if`.
    pub kind: String,
    pub state: AgentState,
    /// Tokens a transcript replay of this branch's lineage would cost.
    pub transcript_tokens: u64,
}

/// Everything the fold keeps per session between events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFold {
    pub tenant_id: String,
    pub session_id: String,
    pub head_seq: u64,
    pub event_count: u64,
    pub primary_participant: Option<String>,
    pub branches: BTreeMap<String, BranchFold>,
    pub open_tool_calls: BTreeMap<String, OpenToolCall>,
    /// Event id → (seq, branch) of recent fork targets is not kept; forks name their source by
    /// event id, which the store resolves. This keeps the fold small.
    pub tool_failures: u64,
    pub orphan_results: u64,
    pub last_event_id: Option<String>,
    /// How unlabelled tool outputs are classed, from `SessionStarted`.
    #[serde(default, skip_serializing_if = "PrivacyDefaults::is_empty")]
    pub privacy: PrivacyDefaults,
}

/// The branches whose records make up one branch's history, each with the highest seq of it that
/// belongs there (`None`: all of it): the branch itself first, then each ancestor up to its fork
/// point (a fork of a fork sees the grandparent up to the lower of the two bounds).
pub type Lineage = Vec<(String, Option<u64>)>;

/// Whether a record of `branch` at `seq` (when known) belongs to the history `lineage` describes.
pub fn lineage_contains(lineage: &[(String, Option<u64>)], branch: &str, seq: Option<u64>) -> bool {
    lineage.iter().any(|(b, bound)| {
        b == branch
            && match (bound, seq) {
                (Some(bound), Some(seq)) => seq <= *bound,
                _ => true,
            }
    })
}

/// How many ancestors a lineage follows at most (a guard against a cycle in stored rows).
const MAX_LINEAGE_DEPTH: usize = 64;

impl SessionFold {
    /// The lineage of `branch` ([`Lineage`]); `None` for a branch the fold does not know.
    pub fn lineage(&self, branch: &str) -> Option<Lineage> {
        let mut cursor = self.branches.get(branch)?;
        let mut lineage: Lineage = vec![(branch.to_owned(), None)];
        while let (Some(parent), Some(fork_seq)) = (&cursor.parent_branch_id, cursor.fork_seq) {
            let bound = match lineage.last() {
                Some((_, Some(b))) => (*b).min(fork_seq),
                _ => fork_seq,
            };
            lineage.push((parent.clone(), Some(bound)));
            match self.branches.get(parent) {
                Some(p) if lineage.len() <= MAX_LINEAGE_DEPTH => cursor = p,
                _ => break,
            }
        }
        Some(lineage)
    }

    pub fn new(tenant_id: &str, session_id: &str) -> Self {
        Self {
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.to_owned(),
            head_seq: 0,
            event_count: 0,
            primary_participant: None,
            branches: BTreeMap::new(),
            open_tool_calls: BTreeMap::new(),
            tool_failures: 0,
            orphan_results: 0,
            last_event_id: None,
            privacy: PrivacyDefaults::default(),
        }
    }

    /// The branch, creating `main` on first use (events may precede `SessionStarted`).
    fn branch_mut(&mut self, branch_id: &str) -> &mut BranchFold {
        if !self.branches.contains_key(branch_id) {
            let kind = if branch_id == MAIN_BRANCH {
                "main"
            } else {
                "fork"
            };
            self.branches.insert(
                branch_id.to_owned(),
                BranchFold {
                    branch_id: branch_id.to_owned(),
                    parent_branch_id: None,
                    fork_event_id: None,
                    fork_seq: None,
                    kind: kind.to_owned(),
                    state: AgentState::default(),
                    transcript_tokens: 0,
                },
            );
        }
        self.branches.get_mut(branch_id).expect("inserted above")
    }

    /// The participant an event is attributed to.
    pub fn participant_of(&self, event: &Event) -> String {
        event
            .participant_id
            .clone()
            .or_else(|| self.primary_participant.clone())
            .unwrap_or_else(|| DEFAULT_PARTICIPANT.to_owned())
    }
}

/// Static facts of a session, written once from `SessionStarted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRow {
    pub tenant_id: String,
    pub session_id: String,
    pub started_event_id: String,
    pub provider: String,
    pub model: String,
    pub context_window_tokens: u32,
    pub reserved_output_tokens: u32,
    pub system_prompt: Option<String>,
    pub system_prompt_tokens: u64,
    /// JSON array of tool specs.
    pub tools: Vec<ToolSpec>,
    pub tools_tokens: u64,
    pub parent_session_id: Option<String>,
}

/// A branch of the session tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchRow {
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    pub parent_branch_id: Option<String>,
    pub fork_event_id: Option<String>,
    pub kind: String,
    pub created_event_id: String,
}

/// Every event, as accepted (the store keeps the canonical JSON for export and audit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRow {
    pub tenant_id: String,
    pub session_id: String,
    pub seq: u64,
    pub event_id: String,
    pub branch_id: String,
    pub participant_id: String,
    pub event_type: String,
    pub timestamp: String,
    pub position: LogPosition,
    /// Tokens this event costs in a transcript replay.
    pub transcript_tokens: u64,
    pub json: String,
}

/// A user or assistant message as a typed block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRow {
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    pub seq: u64,
    pub event_id: String,
    pub message_id: String,
    /// `user` or `assistant`.
    pub role: String,
    pub participant_id: String,
    pub text: String,
    pub tokens: u64,
}

/// A requested tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRow {
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    pub tool_call_id: String,
    pub name: String,
    /// Arguments as compact JSON.
    pub args: String,
    pub participant_id: String,
    pub request_event_id: String,
    pub request_seq: u64,
    /// The assistant message that asked for it, when there was one.
    pub message_id: Option<String>,
    pub call_tokens: u64,
}

/// Status of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Pending,
    AwaitingApproval,
    Succeeded,
    /// Returned with `is_error`.
    Errored,
    /// `ToolCallFailed`: could not run.
    Failed,
    Denied,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Pending => "pending",
            ToolStatus::AwaitingApproval => "awaiting_approval",
            ToolStatus::Succeeded => "succeeded",
            ToolStatus::Errored => "errored",
            ToolStatus::Failed => "failed",
            ToolStatus::Denied => "denied",
        }
    }

    pub fn parse(s: &str) -> Option<ToolStatus> {
        Some(match s {
            "pending" => ToolStatus::Pending,
            "awaiting_approval" => ToolStatus::AwaitingApproval,
            "succeeded" => ToolStatus::Succeeded,
            "errored" => ToolStatus::Errored,
            "failed" => ToolStatus::Failed,
            "denied" => ToolStatus::Denied,
            _ => return None,
        })
    }

    pub fn is_open(self) -> bool {
        matches!(self, ToolStatus::Pending | ToolStatus::AwaitingApproval)
    }
}

/// The result (or failure) of a tool call, paired with its request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultRow {
    pub tenant_id: String,
    pub session_id: String,
    pub tool_call_id: String,
    pub status: ToolStatus,
    pub result_event_id: String,
    pub result_seq: u64,
    /// Inline output (small outputs only; large ones are artifacts).
    pub output: Option<String>,
    pub output_ref: Option<String>,
    pub output_preview: Option<String>,
    pub output_sha256: Option<String>,
    pub output_bytes: Option<u64>,
    /// Tokens of the full output.
    pub output_tokens: u64,
    /// Tokens of the preview (0 without one).
    pub preview_tokens: u64,
    pub error: Option<String>,
    pub retryable: bool,
    pub privacy_class: Option<PrivacyClass>,
}

/// An artifact stored in blob storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRow {
    pub tenant_id: String,
    pub session_id: String,
    pub artifact_id: String,
    pub uri: String,
    pub sha256: String,
    pub bytes: u64,
    pub kind: String,
    pub source_event_id: String,
    pub privacy_class: Option<PrivacyClass>,
    pub owner_participant: String,
}

/// A derived record (memory, compaction, assembly) kept by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerivedRow {
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    pub id: String,
    pub event_id: String,
    pub seq: u64,
    pub record: Value,
}

/// A row change the store must write for one event.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Change {
    Session(SessionRow),
    Branch(BranchRow),
    Event(EventRow),
    Message(MessageRow),
    ToolCall(ToolCallRow),
    ToolResult(ToolResultRow),
    /// A tool call's status changed without a result (approval asked, granted).
    ToolStatus {
        tenant_id: String,
        session_id: String,
        tool_call_id: String,
        status: ToolStatus,
    },
    Artifact(ArtifactRow),
    Memory(DerivedRow),
    MemorySuperseded {
        tenant_id: String,
        memory_id: String,
        superseded_by: String,
    },
    Compaction(DerivedRow),
    Assembly(DerivedRow),
}

/// Folds one event into `fold` and returns the rows to write.
///
/// `event.seq` must be set (ingest assigns it). `fork_seq` resolves a `BranchForked` event's
/// `from_event_id` to its seq (the store knows it); `None` forks at the current head. A fork the
/// parent may have moved on from ([`fork_needs_history`]) is folded with [`apply_forked`]
/// instead.
pub fn apply(
    fold: &mut SessionFold,
    event: &Event,
    position: LogPosition,
    fork_seq: Option<u64>,
    tokens: &dyn TokenCounter,
) -> Vec<Change> {
    apply_forked(fold, event, position, fork_seq, None, tokens)
}

/// A branch's derived state as of one of the session's events: what a fork from that event
/// starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchAt {
    pub state: AgentState,
    pub transcript_tokens: u64,
}

/// Whether `event` forks a new branch from an event other than the session's latest: then the
/// parent's state now may hold what the parent did after the fork point (a goal, decisions,
/// files, errors), and the new branch must start from [`branch_at`] the fork point instead.
pub fn fork_needs_history(fold: &SessionFold, event: &Event) -> bool {
    match &event.payload {
        Payload::BranchForked(p) => {
            !fold.branches.contains_key(&p.new_branch_id)
                && fold.last_event_id.as_deref() != Some(p.from_event_id.as_str())
        }
        _ => false,
    }
}

/// The state of `branch` as of seq `at`, folded again from the session's events (`history`,
/// in seq order, every branch; events after `at` are ignored). A fork inside the history starts
/// from its own fork point in turn. `None` when the branch has no event by then.
pub fn branch_at(
    history: &[Event],
    branch: &str,
    at: u64,
    tokens: &dyn TokenCounter,
) -> Option<BranchAt> {
    let history = &history[..history.partition_point(|e| e.seq.unwrap_or(0) <= at)];
    let first = history.first()?;
    let mut fold = SessionFold::new(&first.tenant_id, &first.session_id);
    let seqs: HashMap<&str, u64> = history
        .iter()
        .filter_map(|e| Some((e.event_id.as_str(), e.seq?)))
        .collect();
    for event in history {
        let (fork_seq, base) = match &event.payload {
            Payload::BranchForked(p) => {
                let seq = event.seq.unwrap_or(0);
                let fork_seq = seqs
                    .get(p.from_event_id.as_str())
                    .copied()
                    .filter(|&f| f < seq);
                let base = match fork_seq {
                    Some(f) if fork_needs_history(&fold, event) => {
                        branch_at(history, &event.branch_id, f, tokens)
                    }
                    _ => None,
                };
                (fork_seq, base)
            }
            _ => (None, None),
        };
        let position = LogPosition {
            partition: 0,
            offset: 0,
        };
        apply_forked(&mut fold, event, position, fork_seq, base, tokens);
    }
    fold.branches.remove(branch).map(|b| BranchAt {
        state: b.state,
        transcript_tokens: b.transcript_tokens,
    })
}

/// [`apply`], with `fork_base`: the parent's state at the fork point of a `BranchForked` event
/// (from [`branch_at`]), which the new branch starts from instead of the parent's state now.
pub fn apply_forked(
    fold: &mut SessionFold,
    event: &Event,
    position: LogPosition,
    fork_seq: Option<u64>,
    fork_base: Option<BranchAt>,
    tokens: &dyn TokenCounter,
) -> Vec<Change> {
    let seq = event.seq.unwrap_or(fold.head_seq + 1);
    let participant = fold.participant_of(event);
    let branch_id = event.branch_id.clone();
    let tenant = fold.tenant_id.clone();
    let session = fold.session_id.clone();
    let mut changes = Vec::new();
    let mut transcript = 0u64;

    fold.head_seq = fold.head_seq.max(seq);
    fold.event_count += 1;
    fold.last_event_id = Some(event.event_id.clone());
    if !fold.branches.contains_key(&branch_id) {
        fold.branch_mut(&branch_id);
        changes.push(Change::Branch(BranchRow {
            tenant_id: tenant.clone(),
            session_id: session.clone(),
            branch_id: branch_id.clone(),
            parent_branch_id: None,
            fork_event_id: None,
            kind: fold.branches[&branch_id].kind.clone(),
            created_event_id: event.event_id.clone(),
        }));
    }
    let sourced = |text: &str| Sourced {
        text: text.to_owned(),
        source_event_id: event.event_id.clone(),
    };

    match &event.payload {
        Payload::SessionStarted(p) => {
            fold.privacy = PrivacyDefaults::folded_from(p);
            if fold.primary_participant.is_none() {
                fold.primary_participant = Some(participant.clone());
            }
            let system_prompt_tokens = p
                .system_prompt
                .as_deref()
                .map(|s| tokens.count(s) + MESSAGE_OVERHEAD_TOKENS)
                .unwrap_or(0);
            let tools = p.tools.clone().unwrap_or_default();
            let tools_tokens = if tools.is_empty() {
                0
            } else {
                tokens.count(&serde_json::to_string(&tools).unwrap_or_default())
            };
            transcript += system_prompt_tokens + tools_tokens;
            changes.push(Change::Session(SessionRow {
                tenant_id: tenant.clone(),
                session_id: session.clone(),
                started_event_id: event.event_id.clone(),
                provider: p.model.provider.clone(),
                model: p.model.model.clone(),
                context_window_tokens: p.context_window_tokens,
                reserved_output_tokens: p.reserved_output_tokens,
                system_prompt: p.system_prompt.clone(),
                system_prompt_tokens,
                tools,
                tools_tokens,
                parent_session_id: p
                    .extra
                    .get("parent_session_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }));
        }
        Payload::UserPromptSubmitted(p) => {
            let t = tokens.count(&p.text) + MESSAGE_OVERHEAD_TOKENS;
            transcript += t;
            changes.push(Change::Message(MessageRow {
                tenant_id: tenant.clone(),
                session_id: session.clone(),
                branch_id: branch_id.clone(),
                seq,
                event_id: event.event_id.clone(),
                message_id: p.message_id.clone(),
                // What the platform or harness wrote into the user's turn (an environment note, a
                // format reminder) is not a request: it does not open a turn.
                role: if event.actor.as_deref() == Some(PLATFORM_ACTOR) {
                    PLATFORM_ROLE
                } else {
                    "user"
                }
                .into(),
                participant_id: participant.clone(),
                text: p.text.clone(),
                tokens: t,
            }));
        }
        Payload::ModelResponseReceived(p) => {
            let t = tokens.count(&p.text) + MESSAGE_OVERHEAD_TOKENS;
            transcript += t;
            changes.push(Change::Message(MessageRow {
                tenant_id: tenant.clone(),
                session_id: session.clone(),
                branch_id: branch_id.clone(),
                seq,
                event_id: event.event_id.clone(),
                message_id: p.message_id.clone(),
                role: "assistant".into(),
                participant_id: participant.clone(),
                text: p.text.clone(),
                tokens: t,
            }));
            for call in &p.tool_calls {
                if let Some(row) = open_call(
                    fold,
                    event,
                    seq,
                    &branch_id,
                    &participant,
                    &call.tool_call_id,
                    &call.name,
                    &call.args,
                    Some(p.message_id.clone()),
                    tokens,
                ) {
                    transcript += row.call_tokens;
                    changes.push(Change::ToolCall(row));
                }
            }
        }
        Payload::ToolCallRequested(p) => {
            if let Some(row) = open_call(
                fold,
                event,
                seq,
                &branch_id,
                &participant,
                &p.tool_call_id,
                &p.name,
                &p.args,
                None,
                tokens,
            ) {
                transcript += row.call_tokens;
                changes.push(Change::ToolCall(row));
            }
        }
        Payload::ToolCallFinished(p) => match fold.open_tool_calls.remove(&p.tool_call_id) {
            None => {
                fold.orphan_results += 1;
                if p.is_error {
                    let message =
                        first_error_line(p.output.as_deref().or(p.output_preview.as_deref()));
                    let error = orphan_error(event, &p.tool_call_id, &p.extra, message, true);
                    let privacy_class = fold.privacy.class_of(p.privacy_class, &error.tool);
                    fold.branch_mut(&branch_id).state.errors.push(OpenError {
                        privacy_class,
                        ..error
                    });
                }
            }
            Some(call) => {
                let privacy_class = fold.privacy.class_of(p.privacy_class, &call.name);
                let output_tokens = match (&p.output, p.output_tokens, p.output_bytes) {
                    (Some(o), _, _) => tokens.count(o),
                    (None, Some(t), _) => t,
                    // Written straight to the log without a count: estimate from the size.
                    (None, None, Some(b)) => b.div_ceil(4),
                    (None, None, None) => 0,
                };
                let preview_tokens = p
                    .output_preview
                    .as_deref()
                    .map(|s| tokens.count(s))
                    .unwrap_or(0);
                transcript += output_tokens + MESSAGE_OVERHEAD_TOKENS;
                let status = if p.is_error {
                    ToolStatus::Errored
                } else {
                    ToolStatus::Succeeded
                };
                let state = &mut fold.branch_mut(&call.branch_id).state;
                if p.is_error {
                    state.errors.push(OpenError {
                        tool_call_id: call.tool_call_id.clone(),
                        tool: call.name.clone(),
                        message: first_error_line(
                            p.output.as_deref().or(p.output_preview.as_deref()),
                        ),
                        retryable: true,
                        source_event_id: event.event_id.clone(),
                        privacy_class,
                        orphan: false,
                    });
                } else {
                    // A success of the tool resolves its errors; one of any tool resolves the
                    // orphan failures that named none.
                    state.errors.retain(|e| {
                        e.tool != call.name && !(e.orphan && e.tool == UNNAMED_ORPHAN_TOOL)
                    });
                }
                if p.is_error {
                    fold.tool_failures += 1;
                }
                if let (Some(uri), Some(sha), Some(bytes)) =
                    (&p.output_ref, &p.output_sha256, p.output_bytes)
                {
                    changes.push(Change::Artifact(ArtifactRow {
                        tenant_id: tenant.clone(),
                        session_id: session.clone(),
                        artifact_id: format!("sha256:{sha}"),
                        uri: uri.clone(),
                        sha256: sha.clone(),
                        bytes,
                        kind: "tool_output".into(),
                        source_event_id: event.event_id.clone(),
                        privacy_class,
                        owner_participant: call.participant_id.clone(),
                    }));
                }
                changes.push(Change::ToolResult(ToolResultRow {
                    tenant_id: tenant.clone(),
                    session_id: session.clone(),
                    tool_call_id: p.tool_call_id.clone(),
                    status,
                    result_event_id: event.event_id.clone(),
                    result_seq: seq,
                    output: p.output.clone(),
                    output_ref: p.output_ref.clone(),
                    output_preview: p.output_preview.clone(),
                    output_sha256: p.output_sha256.clone(),
                    output_bytes: p.output_bytes.or(p.output.as_ref().map(|o| o.len() as u64)),
                    output_tokens,
                    preview_tokens,
                    error: None,
                    retryable: false,
                    privacy_class,
                }));
            }
        },
        Payload::ToolCallFailed(p) => match fold.open_tool_calls.remove(&p.tool_call_id) {
            None => {
                fold.orphan_results += 1;
                let message = first_error_line(Some(&p.error));
                let error = orphan_error(event, &p.tool_call_id, &p.extra, message, p.retryable);
                fold.branch_mut(&branch_id).state.errors.push(error);
            }
            Some(call) => {
                let t = tokens.count(&p.error) + MESSAGE_OVERHEAD_TOKENS;
                transcript += t;
                fold.tool_failures += 1;
                fold.branch_mut(&call.branch_id)
                    .state
                    .errors
                    .push(OpenError {
                        tool_call_id: call.tool_call_id.clone(),
                        tool: call.name.clone(),
                        message: first_error_line(Some(&p.error)),
                        retryable: p.retryable,
                        source_event_id: event.event_id.clone(),
                        privacy_class: None,
                        orphan: false,
                    });
                changes.push(Change::ToolResult(ToolResultRow {
                    tenant_id: tenant.clone(),
                    session_id: session.clone(),
                    tool_call_id: p.tool_call_id.clone(),
                    status: ToolStatus::Failed,
                    result_event_id: event.event_id.clone(),
                    result_seq: seq,
                    output: None,
                    output_ref: None,
                    output_preview: None,
                    output_sha256: None,
                    output_bytes: None,
                    output_tokens: t,
                    preview_tokens: 0,
                    error: Some(p.error.clone()),
                    retryable: p.retryable,
                    privacy_class: None,
                }));
            }
        },
        Payload::FileRead(p) => {
            transcript += tokens.count(&p.path) + MESSAGE_OVERHEAD_TOKENS;
            touch(
                &mut fold.branch_mut(&branch_id).state.files_read,
                sourced(&p.path),
            );
        }
        Payload::FileWritten(p) => {
            transcript += tokens.count(&p.path)
                + p.summary.as_deref().map(|s| tokens.count(s)).unwrap_or(0)
                + MESSAGE_OVERHEAD_TOKENS;
            touch(
                &mut fold.branch_mut(&branch_id).state.files_modified,
                sourced(&p.path),
            );
        }
        Payload::DiffApplied(p) => {
            transcript += tokens.count(&p.diff) + MESSAGE_OVERHEAD_TOKENS;
            touch(
                &mut fold.branch_mut(&branch_id).state.files_modified,
                sourced(&p.path),
            );
        }
        Payload::StateUpdated(p) => {
            transcript += tokens.count(&event.payload.to_json_string());
            let state = &mut fold.branch_mut(&branch_id).state;
            let list = |v: &Vec<String>| v.iter().map(|s| sourced(s)).collect::<Vec<_>>();
            if let Some(g) = &p.goal {
                state.goal = Some(sourced(g));
            }
            if let Some(t) = &p.current_task {
                state.current_task = Some(sourced(t));
            }
            if let Some(v) = &p.acceptance_criteria {
                state.acceptance_criteria = list(v);
            }
            if let Some(v) = &p.plan {
                state.plan = list(v);
            }
            if let Some(v) = &p.constraints {
                state.constraints = list(v);
            }
            if let Some(v) = &p.facts {
                state.facts = list(v);
            }
            if let Some(v) = &p.decisions {
                state.decisions = list(v);
            }
            if let Some(v) = &p.open_questions {
                state.open_questions = list(v);
            }
        }
        Payload::BranchForked(p) => {
            let parent = fold.branch_mut(&branch_id).clone();
            if !fold.branches.contains_key(&p.new_branch_id) {
                let kind = p.kind.clone().unwrap_or_else(|| "fork".into());
                // What the parent did after the fork point is not the new branch's.
                let base = fork_base.unwrap_or(BranchAt {
                    state: parent.state,
                    transcript_tokens: parent.transcript_tokens,
                });
                fold.branches.insert(
                    p.new_branch_id.clone(),
                    BranchFold {
                        branch_id: p.new_branch_id.clone(),
                        parent_branch_id: Some(branch_id.clone()),
                        fork_event_id: Some(p.from_event_id.clone()),
                        fork_seq: Some(fork_seq.unwrap_or(seq)),
                        kind: kind.clone(),
                        // Derived state starts from the parent's at the fork point; the parent's
                        // history is referenced by lineage, never copied.
                        state: base.state,
                        transcript_tokens: base.transcript_tokens,
                    },
                );
                changes.push(Change::Branch(BranchRow {
                    tenant_id: tenant.clone(),
                    session_id: session.clone(),
                    branch_id: p.new_branch_id.clone(),
                    parent_branch_id: Some(branch_id.clone()),
                    fork_event_id: Some(p.from_event_id.clone()),
                    kind,
                    created_event_id: event.event_id.clone(),
                }));
            }
        }
        Payload::SubagentStarted(p) => {
            let state = &mut fold.branch_mut(&branch_id).state;
            state
                .subagents
                .retain(|c| c.child_session_id != p.child_session_id);
            state.subagents.push(SubagentState {
                child_session_id: p.child_session_id.clone(),
                task: p.task.clone(),
                checkpoint: p.extra.get("checkpoint").map(compact_json),
                status: "running".into(),
                started_event_id: event.event_id.clone(),
                last_event_id: event.event_id.clone(),
                last_seq: event.seq.unwrap_or_default(),
                ..SubagentState::default()
            });
        }
        Payload::SubagentPromoted(p) => {
            let child = subagent_mut(fold.branch_mut(&branch_id), &p.child_session_id, event);
            child.promoted = true;
            if let Some(report) = p.extra.get("report").and_then(Value::as_str) {
                child.report = Some(report.to_owned());
            }
            child
                .artifacts
                .extend(string_list(p.extra.get("artifacts")));
            child.artifacts.dedup();
            child.last_event_id = event.event_id.clone();
            child.last_seq = event.seq.unwrap_or_default();
        }
        Payload::SubagentFinished(p) => {
            transcript += tokens.count(&p.report) + MESSAGE_OVERHEAD_TOKENS;
            let child = subagent_mut(fold.branch_mut(&branch_id), &p.child_session_id, event);
            child.finished = true;
            child.status = p.status.clone();
            child.report = Some(p.report.clone());
            add_artifacts(&mut child.artifacts, p.artifacts.iter().cloned());
            child.error = p
                .extra
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_owned);
            child.retryable = p.extra.get("retryable").and_then(Value::as_bool);
            child.last_event_id = event.event_id.clone();
            child.last_seq = event.seq.unwrap_or_default();
        }
        Payload::ApprovalRequested(p) => {
            if let Some(id) = &p.tool_call_id {
                if let Some(call) = fold.open_tool_calls.get_mut(id) {
                    call.awaiting_approval = true;
                    changes.push(Change::ToolStatus {
                        tenant_id: tenant.clone(),
                        session_id: session.clone(),
                        tool_call_id: id.clone(),
                        status: ToolStatus::AwaitingApproval,
                    });
                }
            }
        }
        Payload::ApprovalGranted(p) => {
            if let Some(id) = &p.tool_call_id {
                if let Some(call) = fold.open_tool_calls.get_mut(id) {
                    call.awaiting_approval = false;
                    changes.push(Change::ToolStatus {
                        tenant_id: tenant.clone(),
                        session_id: session.clone(),
                        tool_call_id: id.clone(),
                        status: ToolStatus::Pending,
                    });
                }
            }
        }
        Payload::ApprovalDenied(p) => {
            if let Some(id) = &p.tool_call_id {
                if fold.open_tool_calls.remove(id).is_some() {
                    changes.push(Change::ToolStatus {
                        tenant_id: tenant.clone(),
                        session_id: session.clone(),
                        tool_call_id: id.clone(),
                        status: ToolStatus::Denied,
                    });
                }
            }
        }
        Payload::VerifierFinished(p) => {
            let text = format!("{}: {}", p.check, p.result);
            transcript += tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS;
            fold.branch_mut(&branch_id).state.last_verifier = Some(sourced(&text));
        }
        // Kept for the platform's own history (its event row); no projection reads it, and a
        // replayed transcript would not carry it either.
        Payload::ProviderItemRecorded(_) => {}
        Payload::MemoryRecorded(p) => changes.push(Change::Memory(DerivedRow {
            tenant_id: tenant.clone(),
            session_id: session.clone(),
            branch_id: branch_id.clone(),
            id: p.memory_id.clone(),
            event_id: event.event_id.clone(),
            seq,
            record: event.payload.to_json(),
        })),
        Payload::MemorySuperseded(p) => changes.push(Change::MemorySuperseded {
            tenant_id: tenant.clone(),
            memory_id: p.memory_id.clone(),
            superseded_by: p.superseded_by.clone(),
        }),
        Payload::CompactionCompleted(p) => {
            // A failed compaction is recorded (with its reasons) but replaces nothing.
            let failed = p.extra.get("status").and_then(Value::as_str) == Some("failed");
            if !failed {
                fold.branch_mut(&branch_id).state.last_compaction_id =
                    Some(p.compaction_id.clone());
            }
            changes.push(Change::Compaction(DerivedRow {
                tenant_id: tenant.clone(),
                session_id: session.clone(),
                branch_id: branch_id.clone(),
                id: p.compaction_id.clone(),
                event_id: event.event_id.clone(),
                seq,
                record: event.payload.to_json(),
            }));
        }
        Payload::ContextBuilt(p) => changes.push(Change::Assembly(DerivedRow {
            tenant_id: tenant.clone(),
            session_id: session.clone(),
            branch_id: branch_id.clone(),
            id: p.assembly_id.clone(),
            event_id: event.event_id.clone(),
            seq,
            record: p.assembly.clone(),
        })),
    }

    let branch = fold.branch_mut(&branch_id);
    branch.transcript_tokens += transcript;
    if !event.is_derived() {
        branch.state.source_event_id = Some(event.event_id.clone());
        branch.state.version += 1;
    }
    changes.insert(
        0,
        Change::Event(EventRow {
            tenant_id: tenant,
            session_id: session,
            seq,
            event_id: event.event_id.clone(),
            branch_id,
            participant_id: participant,
            event_type: event.event_type().as_str().to_owned(),
            timestamp: crate::event::format_timestamp(&event.timestamp),
            position,
            transcript_tokens: transcript,
            json: event.to_json_string(),
        }),
    );
    changes
}

#[allow(clippy::too_many_arguments)]
fn open_call(
    fold: &mut SessionFold,
    event: &Event,
    seq: u64,
    branch_id: &str,
    participant: &str,
    tool_call_id: &str,
    name: &str,
    args: &Value,
    message_id: Option<String>,
    tokens: &dyn TokenCounter,
) -> Option<ToolCallRow> {
    if fold.open_tool_calls.contains_key(tool_call_id) {
        // Announced twice (a response's tool_calls and a ToolCallRequested): one call.
        return None;
    }
    let args = serde_json::to_string(args).unwrap_or_default();
    let call_tokens = crate::tokens::tool_call_tokens(name, &args, tokens);
    fold.open_tool_calls.insert(
        tool_call_id.to_owned(),
        OpenToolCall {
            tool_call_id: tool_call_id.to_owned(),
            name: name.to_owned(),
            branch_id: branch_id.to_owned(),
            participant_id: participant.to_owned(),
            request_event_id: event.event_id.clone(),
            request_seq: seq,
            awaiting_approval: false,
        },
    );
    Some(ToolCallRow {
        tenant_id: fold.tenant_id.clone(),
        session_id: fold.session_id.clone(),
        branch_id: branch_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        name: name.to_owned(),
        args,
        participant_id: participant.to_owned(),
        request_event_id: event.event_id.clone(),
        request_seq: seq,
        message_id,
        call_tokens,
    })
}

/// Records a path, keeping first-seen order and the latest source.
/// The subagent of a branch, recorded on first sight when its start was not seen.
fn subagent_mut<'a>(
    branch: &'a mut BranchFold,
    child: &str,
    event: &Event,
) -> &'a mut SubagentState {
    let subagents = &mut branch.state.subagents;
    let at = match subagents.iter().position(|c| c.child_session_id == child) {
        Some(i) => i,
        None => {
            subagents.push(SubagentState {
                child_session_id: child.to_owned(),
                status: "running".into(),
                started_event_id: event.event_id.clone(),
                last_event_id: event.event_id.clone(),
                last_seq: event.seq.unwrap_or_default(),
                ..SubagentState::default()
            });
            subagents.len() - 1
        }
    };
    &mut subagents[at]
}

fn add_artifacts(list: &mut Vec<String>, new: impl IntoIterator<Item = String>) {
    for a in new {
        if !list.contains(&a) {
            list.push(a);
        }
    }
}

fn compact_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn touch(list: &mut Vec<Sourced>, item: Sourced) {
    match list.iter_mut().find(|s| s.text == item.text) {
        Some(existing) => existing.source_event_id = item.source_event_id,
        None => list.push(item),
    }
}

/// The most telling line of an error output: the first line mentioning an error or failure,
/// else the first non-empty line; at most 240 characters.
/// The actor of what the platform or the harness writes (importers set it on injected context).
pub const PLATFORM_ACTOR: &str = "platform";
/// The timeline role of a user-turn message the platform wrote: sent like a user message, but
/// never a request and never the start of a turn.
pub const PLATFORM_ROLE: &str = "platform";

/// The tool an orphan failure is filed under when its event names none.
pub const UNNAMED_ORPHAN_TOOL: &str = "unknown tool";

/// An unresolved error for a failure whose call is not on the log. The tool is the one the
/// event names (`name` or `tool`, as platforms write them), if any.
fn orphan_error(
    event: &Event,
    tool_call_id: &str,
    extra: &serde_json::Map<String, serde_json::Value>,
    message: String,
    retryable: bool,
) -> OpenError {
    let tool = ["name", "tool", "tool_name"]
        .iter()
        .find_map(|k| extra.get(*k).and_then(|v| v.as_str()))
        .filter(|t| !t.trim().is_empty())
        .map(|t| truncate_chars(t.trim(), 120))
        .unwrap_or_else(|| UNNAMED_ORPHAN_TOOL.to_owned());
    OpenError {
        tool_call_id: tool_call_id.to_owned(),
        tool,
        message,
        retryable,
        source_event_id: event.event_id.clone(),
        privacy_class: None,
        orphan: true,
    }
}

pub fn first_error_line(output: Option<&str>) -> String {
    let output = output.unwrap_or_default();
    let line = output
        .lines()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("fail") || l.contains("panic")
        })
        .or_else(|| output.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("");
    truncate_chars(line.trim(), 240)
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}
