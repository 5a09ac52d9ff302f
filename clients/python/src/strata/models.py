"""What the HTTP API takes and answers, besides events: context requests and responses, the
assembly record, session state, compaction records, append outcomes and the error body.

Response models keep fields they do not know (a newer server's), so an upgrade of the server
never breaks a reader; request models refuse unknown fields, as the server does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, NonNegativeInt, PositiveInt

from .events import PrivacyClass

__all__ = [
    "AgentState",
    "AppendOutcome",
    "BranchState",
    "Compaction",
    "CompactionProgress",
    "CompactionProvenance",
    "CompressionCheck",
    "ContextAssembly",
    "ContextRequest",
    "ContextResponse",
    "ErrorBody",
    "ErrorInfo",
    "ErrorNote",
    "EventFieldError",
    "InvalidEvent",
    "Omission",
    "OpenError",
    "OpenToolCall",
    "Provider",
    "Rehydration",
    "Segment",
    "SessionState",
    "SessionStats",
    "SessionSummary",
    "Sourced",
    "SubagentState",
    "Tier",
    "ToolResultNote",
    "WhyNot",
]

Provider = Literal["openai", "anthropic", "openai-responses"]
"""The request format a context is rendered in: OpenAI chat completions, the OpenAI Responses
API (`instructions` and `input` items) or Anthropic messages."""

Tier = Literal["P0", "P1", "P2", "P3"]
"""Priority tiers: P0 is never dropped, P3 (digests of older turns) goes first."""


class _Response(BaseModel):
    """Something the server answered; fields this version does not know are kept."""

    model_config = ConfigDict(extra="allow", protected_namespaces=())


class ContextRequest(BaseModel):
    """The body of ``POST /v1/sessions/{id}/context``; every field is optional."""

    model_config = ConfigDict(extra="forbid")

    branch: str | None = None
    """Defaults to ``main``."""
    participant: str | None = None
    """Whose view: another participant's tool steps are private to it."""
    provider: Provider | None = None
    """Defaults to ``openai``."""
    budget: PositiveInt | None = None
    """Token budget, capped by the window minus the reserved output."""
    request: str | None = None
    """The request about to be sent, when it is not on the log yet."""
    verbatim_turns: NonNegativeInt | None = None
    policy: str | None = None
    """Assembly policy version, e.g. ``strata.assembly/8``; defaults to the server's."""
    target_tokens: PositiveInt | None = None
    """The size to aim for below the budget: lower trades recall for cost."""
    rehydrate: Sequence[str] | None = None
    """Artifact refs or tool call ids needed byte for byte (within privacy and byte budget); a
    lone string is refused rather than read as a sequence of characters."""
    trace: bool | None = None
    """Record the full per-candidate trace instead of the compact record."""


class Segment(_Response):
    """One included piece of context and why it is there."""

    id: str
    kind: str
    tier: Tier
    reason: str
    source_event_ids: list[str]
    rendering: str
    """How it was rendered: ``verbatim``, ``aged``, ``digest``, ``summary``, ``memory``,
    ``raw``…"""
    tokens: NonNegativeInt


class Omission(_Response):
    """A candidate left out and why (``reason``: ``budget``, ``stale``, ``other_branch``…)."""

    kind: str
    tier: Tier
    reason: str
    source_event_ids: list[str]
    tokens: NonNegativeInt


class Rehydration(_Response):
    """What became of one artifact asked for byte for byte."""

    target: str
    tool_call_id: str | None = None
    artifact_ref: str | None = None
    bytes: NonNegativeInt | None = None
    rehydrated: bool
    reason: str


class ContextAssembly(_Response):
    """The record of one assembly: every segment included, every candidate left out, and the
    hashes that identify the bundle."""

    assembly_id: str
    tenant_id: str
    session_id: str
    branch_id: str
    participant_id: str
    provider: str
    model: str
    policy_version: str
    assembler_version: str
    tokenizer: str
    snapshot_seq: NonNegativeInt
    budget_tokens: NonNegativeInt
    target_tokens: NonNegativeInt | None = None
    context_tokens: NonNegativeInt
    transcript_tokens: NonNegativeInt
    """What replaying the whole transcript would have cost."""
    over_budget: bool
    """Whether the never-dropped (P0) content alone exceeded the budget."""
    included: list[Segment]
    omitted: dict[str, NonNegativeInt]
    """Candidates left out, counted by reason."""
    omitted_items: list[Omission]
    """Every candidate left out; empty in a compact record (``traced`` false)."""
    bundle_sha256: str = ""
    payload_sha256: str = ""
    timings_us: dict[str, NonNegativeInt] = Field(default_factory=dict)
    projection_complete: bool = True
    """False when the projections had not reached the session's head in time."""
    confidential_allowed: bool = False
    rehydrations: list[Rehydration] = Field(default_factory=list)
    traced: bool = True


class ContextResponse(_Response):
    """The context of the next model call."""

    payload: dict[str, JsonValue]
    """The provider request body (OpenAI chat or Anthropic messages), ready to send."""
    assembly: ContextAssembly
    recorded: bool
    """False when the record could not be appended to the log; the context is still valid."""


class WhyNot(_Response):
    """Why one record (event id, tool call id or artifact ref) is or is not in an assembly."""

    assembly_id: str
    reference: str
    traced: bool
    explanation: list[str]


class AppendOutcome(_Response):
    """What became of one appended event."""

    event_id: str
    status: Literal["accepted", "duplicate"]
    """``duplicate``: the event id was seen before; ``seq`` is the one it got then."""
    seq: PositiveInt
    partition: NonNegativeInt | None = None
    offset: NonNegativeInt | None = None
    output_ref: str | None = None
    """The artifact ingest stored a large tool output as (``artifact:sha256:<hex>``)."""
    warnings: list[str] = Field(default_factory=list)
    """What was accepted but looks wrong: a session whose first event is not
    ``SessionStarted``, a tool result whose call is not open on the log."""


class SessionSummary(_Response):
    """A session as listed by ``GET /v1/sessions``."""

    session_id: str
    head_seq: NonNegativeInt
    event_count: NonNegativeInt
    last_event_at: str | None = None
    model: str | None = None
    participants: list[str] = []
    branches: NonNegativeInt = 0
    open_tool_calls: NonNegativeInt = 0
    unresolved_errors: NonNegativeInt = 0
    subagents: NonNegativeInt = 0


class Sourced(_Response):
    """A statement with the event it came from."""

    text: str
    source_event_id: str


class OpenError(_Response):
    """A tool error no later success of the same tool has resolved."""

    tool_call_id: str
    tool: str
    message: str
    retryable: bool
    source_event_id: str
    privacy_class: PrivacyClass | None = None
    orphan: bool = False
    """The failure's call is not on the log."""


class SubagentState(_Response):
    """A child subagent as its parent knows it."""

    child_session_id: str
    task: str | None = None
    checkpoint: str | None = None
    status: str
    finished: bool
    promoted: bool
    report: str | None = None
    artifacts: list[str] = Field(default_factory=list)
    error: str | None = None
    retryable: bool | None = None
    started_event_id: str
    last_event_id: str


class AgentState(_Response):
    """What the agent is doing on one branch, derived from the log."""

    goal: Sourced | None = None
    current_task: Sourced | None = None
    acceptance_criteria: list[Sourced] = Field(default_factory=list)
    plan: list[Sourced] = Field(default_factory=list)
    constraints: list[Sourced] = Field(default_factory=list)
    facts: list[Sourced] = Field(default_factory=list)
    decisions: list[Sourced] = Field(default_factory=list)
    open_questions: list[Sourced] = Field(default_factory=list)
    files_read: list[Sourced] = Field(default_factory=list)
    files_modified: list[Sourced] = Field(default_factory=list)
    errors: list[OpenError] = Field(default_factory=list)
    last_verifier: Sourced | None = None
    last_compaction_id: str | None = None
    source_event_id: str | None = None
    version: NonNegativeInt = 0
    subagents: list[SubagentState] = Field(default_factory=list)


class BranchState(_Response):
    """One branch of the session tree and its agent state."""

    branch_id: str
    parent_branch_id: str | None = None
    fork_event_id: str | None = None
    fork_seq: NonNegativeInt | None = None
    kind: str
    """``main``, ``fork`` or ``what_if``."""
    state: AgentState
    transcript_tokens: NonNegativeInt


class OpenToolCall(_Response):
    """A tool call that has no result yet."""

    tool_call_id: str
    name: str
    branch_id: str
    participant_id: str
    request_event_id: str
    request_seq: NonNegativeInt
    awaiting_approval: bool


class SessionStats(_Response):
    """Counters of a session."""

    tool_failures: NonNegativeInt
    orphan_results: NonNegativeInt
    """Tool results whose call is not on the log."""


class SessionState(_Response):
    """A session's projected state: its branches, their agent state and the open calls."""

    session_id: str
    head_seq: NonNegativeInt
    event_count: NonNegativeInt
    branches: dict[str, BranchState]
    open_tool_calls: list[OpenToolCall]
    stats: SessionStats


SessionStatus = Literal[
    "new", "awaiting_model", "awaiting_tool_results", "awaiting_approval", "idle"
]
"""Where a session stands: who acts next."""


class ResumeModel(_Response):
    """The model and context configuration a session started with."""

    model: str
    context_window_tokens: NonNegativeInt
    reserved_output_tokens: NonNegativeInt
    system_prompt_tokens: NonNegativeInt
    tools: list[str]
    project_id: str | None = None
    user_id: str | None = None


class BranchHead(_Response):
    """One branch of a session: where it forked and how far it reaches."""

    branch_id: str
    kind: str
    parent_branch_id: str | None = None
    fork_event_id: str | None = None
    fork_seq: NonNegativeInt | None = None
    head_seq: NonNegativeInt | None = None
    events: NonNegativeInt
    last_event_at: str | None = None


class ResumeSubagent(_Response):
    """A subagent of the session, with the parent's checkpoint for it."""

    branch_id: str
    child_session_id: str
    task: str | None = None
    status: str
    checkpoint: str | None = None


class SessionResume(_Response):
    """What a restarted platform worker needs to carry on a session
    (``GET /v1/sessions/{id}``)."""

    session_id: str
    status: SessionStatus
    head_seq: NonNegativeInt
    event_count: NonNegativeInt
    last_event_id: str | None = None
    last_event_at: str | None = None
    model: ResumeModel | None = None
    branches: list[BranchHead]
    open_tool_calls: list[OpenToolCall]
    subagents: list[ResumeSubagent]
    latest_compaction: dict[str, Any] | None = None


class CompactionProgress(_Response):
    """Done and in-progress work, as a compaction summarised it."""

    done: list[str]
    in_progress: list[str]


class ToolResultNote(_Response):
    """A tool result a compaction kept, with where its full output is."""

    tool: str
    tool_call_id: str
    summary: str
    artifact_ref: str | None = None
    event_id: str
    owner_participant: str | None = None
    privacy_class: PrivacyClass | None = None


class ErrorNote(_Response):
    """An error of the compacted range, how often it was retried and whether it was resolved."""

    tool: str
    tool_call_id: str
    message: str
    attempts: NonNegativeInt
    resolved: bool
    event_id: str


class CompactionProvenance(_Response):
    """Where a compaction's content comes from."""

    summarizer: str
    previous_compaction_id: str | None = None
    source_event_ids: list[str]


class CompressionCheck(_Response):
    """The checks a compaction must pass to stand in for its range."""

    passed: bool
    has_task: bool
    has_next_steps: bool
    missing_modified_files: list[str]
    dropped_unresolved_errors: list[str]
    split_tool_calls: list[str]
    failures: list[str]


class Compaction(_Response):
    """A compaction record: the summarised range, the summary and its check."""

    compaction_id: str
    tenant_id: str
    session_id: str
    branch_id: str
    status: str
    """``completed``, or ``failed`` when the check failed (the record then replaces nothing)."""
    first_event_id: str
    last_event_id: str
    first_seq: NonNegativeInt
    last_seq: NonNegativeInt
    first_kept_event_id: str
    first_kept_seq: NonNegativeInt
    tokens_before: NonNegativeInt
    tokens_after: NonNegativeInt
    goal: str | None = None
    current_task: str | None = None
    constraints: list[str]
    progress: CompactionProgress
    decisions: list[str]
    files_read: list[str]
    files_modified: list[str]
    tool_results: list[ToolResultNote]
    errors: list[ErrorNote]
    open_questions: list[str]
    next_steps: list[str]
    provenance: CompactionProvenance
    check: CompressionCheck

    @property
    def succeeded(self) -> bool:
        """Whether the compaction stands in for its range in later contexts."""
        return self.status == "completed" and self.check.passed


class EventFieldError(_Response):
    """One problem with one field of an event."""

    field: str
    """Dotted path, e.g. ``payload.tool_call_id``."""
    message: str


class InvalidEvent(_Response):
    """Every problem found in one event of a refused batch."""

    index: NonNegativeInt
    event_id: str | None = None
    errors: list[EventFieldError]


class ErrorInfo(_Response):
    """The ``error`` object of an error body."""

    code: str
    message: str
    details: dict[str, JsonValue] | None = None


class ErrorBody(_Response):
    """Every error the API answers: ``{"error": {"code", "message", "details"?}}``."""

    error: ErrorInfo


class ForgetReport(_Response):
    """What forgetting one session did (``DELETE /v1/sessions/{id}``): its data key destroyed,
    so every copy of its events on the log is unreadable, and every derived copy deleted."""

    forget_id: str
    tenant_id: str
    session_id: str
    sealed_events: NonNegativeInt
    """The session's events on the log, all sealed and now unreadable."""
    key_destroyed: bool
    """False when an earlier forget had destroyed it."""
    rows: dict[str, NonNegativeInt]
    """Rows deleted, by table, over every projection set."""
    sets: NonNegativeInt
    artifacts_deleted: NonNegativeInt
    subagents: list[ForgetReport] = []
    """The sessions of the subagents it started (and theirs), forgotten with it."""


class NotForgettable(_Response):
    """A session a forget left as it was: some of its events are on the log in the clear."""

    session_id: str
    why: str


class SessionsForgotten(_Response):
    """What forgetting an end user did (``DELETE /v1/users/{user}``)."""

    tenant_id: str
    sessions: list[ForgetReport]
    not_forgettable: list[NotForgettable]
