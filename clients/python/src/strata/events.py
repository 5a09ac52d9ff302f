"""The canonical event (JSON contract v1): the envelope and one typed payload per event type.

The shapes follow the server's (``crates/strata-core/src/event.rs`` and ``payload.rs``, with the
binary twin in ``schemas/event.avsc``); ``tests/test_contract.py`` fails when they drift apart.
Unknown fields are kept, in the envelope and in payloads, exactly as the server keeps them, so
fields a newer server adds survive a read and a re-send through this client.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    NonNegativeInt,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

__all__ = [
    "DERIVED_EVENT_TYPES",
    "MAIN_BRANCH",
    "PAYLOAD_TYPES",
    "AnyPayload",
    "ApprovalDenied",
    "ApprovalGranted",
    "ApprovalRequested",
    "BranchForked",
    "Causality",
    "CompactionCompleted",
    "ContextBuilt",
    "DiffApplied",
    "Event",
    "EventType",
    "FileRead",
    "FileWritten",
    "FreshnessClass",
    "MemoryRecorded",
    "MemorySuperseded",
    "ModelRef",
    "ModelResponseReceived",
    "Payload",
    "PrivacyClass",
    "ProviderItemRecorded",
    "SessionStarted",
    "StateUpdated",
    "SubagentFinished",
    "SubagentPromoted",
    "SubagentStarted",
    "ToolCall",
    "ToolCallFailed",
    "ToolCallFinished",
    "ToolCallRequested",
    "ToolSpec",
    "Usage",
    "UserPromptSubmitted",
    "VerifierFinished",
]

#: The branch every session starts on.
MAIN_BRANCH = "main"

EventType = Literal[
    "SessionStarted",
    "UserPromptSubmitted",
    "ModelResponseReceived",
    "ToolCallRequested",
    "ToolCallFinished",
    "ToolCallFailed",
    "FileRead",
    "FileWritten",
    "DiffApplied",
    "StateUpdated",
    "BranchForked",
    "SubagentStarted",
    "SubagentFinished",
    "SubagentPromoted",
    "ApprovalRequested",
    "ApprovalGranted",
    "ApprovalDenied",
    "VerifierFinished",
    "ProviderItemRecorded",
    "MemoryRecorded",
    "MemorySuperseded",
    "CompactionCompleted",
    "ContextBuilt",
]
"""The ``type`` of an event; it names the payload's shape."""

#: Types only Strata's own services write: ingest refuses them from an API key (403), but they
#: are on the log, so reading a session's events returns them.
DERIVED_EVENT_TYPES: frozenset[EventType] = frozenset(
    {"MemoryRecorded", "MemorySuperseded", "CompactionCompleted", "ContextBuilt"}
)

PrivacyClass = Literal["public", "internal", "confidential", "restricted"]
"""Privacy classes, least to most protected: ``restricted`` output never reaches a provider,
``confidential`` only providers on the tenant's allow-list."""

FreshnessClass = Literal["volatile", "session", "time_bounded", "durable", "permanent"]
"""How long an observation stays true, which decides when its memory goes stale."""


class _Open(BaseModel):
    """An object of the contract: fields this version does not know are kept and re-sent."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())


class ModelRef(_Open):
    """Provider and model name."""

    provider: str
    model: str


class ToolSpec(_Open):
    """A tool the model may call."""

    name: str
    description: str = ""
    # Called `schema` on the wire; renamed here because `BaseModel.schema` is taken.
    json_schema: JsonValue = Field(default=None, alias="schema")
    """JSON Schema of the arguments."""


def tool_arguments(value: Any) -> Any:
    """Tool-call arguments as the server keeps them: a JSON object, or ``None``.

    OpenAI's ``function.arguments`` is the object's JSON text; such a string is taken as the
    object, as the server takes it. Anything else (other text, a number, a list) is refused, as
    the server refuses it with a 400 naming the field."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise ValueError(
                "expected a JSON object (or its JSON text), found a string that is not JSON"
            ) from None
        if isinstance(parsed, dict):
            return parsed
        raise ValueError(
            f"expected a JSON object (or its JSON text), found a string holding "
            f"{type(parsed).__name__}"
        )
    raise ValueError(f"expected a JSON object (or its JSON text), found {type(value).__name__}")


class ToolCall(_Open):
    """One tool call requested inside a model response."""

    tool_call_id: str
    name: str
    args: JsonValue = None
    """A JSON object, or ``None``; the object's JSON text is taken as the object."""

    _args = field_validator("args", mode="before")(tool_arguments)


class Usage(_Open):
    """Tokens a model call consumed."""

    input_tokens: NonNegativeInt
    output_tokens: NonNegativeInt


class Causality(_Open):
    """Links of an event to the message, tool call or artifact it belongs to."""

    message_id: str | None = None
    tool_call_id: str | None = None
    artifact_id: str | None = None


class Payload(_Open):
    """Base of the typed payloads; each subclass is the payload of the event type it names."""

    event_type: ClassVar[EventType]


class SessionStarted(Payload):
    """A session begins: model, window, system prompt and tools.

    The session's privacy rule (``privacy``), its end user (``user_id``) and project
    (``project_id``) travel as further fields of this payload.
    """

    event_type: ClassVar[EventType] = "SessionStarted"
    model: ModelRef
    context_window_tokens: NonNegativeInt
    reserved_output_tokens: NonNegativeInt
    cwd: str | None = None
    repo_root: str | None = None
    system_prompt: str | None = None
    tools: list[ToolSpec] | None = None


class UserPromptSubmitted(Payload):
    """The user asks for something (or, with actor ``platform``, the harness writes into the
    user's turn)."""

    event_type: ClassVar[EventType] = "UserPromptSubmitted"
    message_id: str
    text: str


class ModelResponseReceived(Payload):
    """The model answered, possibly requesting tool calls."""

    event_type: ClassVar[EventType] = "ModelResponseReceived"
    message_id: str
    model_run_id: str | None = None
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None


class ToolCallRequested(Payload):
    """A tool call was requested outside a model response (a response's own ``tool_calls``
    need no separate event)."""

    event_type: ClassVar[EventType] = "ToolCallRequested"
    tool_call_id: str
    name: str
    args: JsonValue = None
    """A JSON object, or ``None``; the object's JSON text is taken as the object."""

    _args = field_validator("args", mode="before")(tool_arguments)


class ToolCallFinished(Payload):
    """A tool call returned, successfully or with ``is_error``.

    Send ``output``; ingest stores an output over 8 KiB as an artifact and answers with
    ``output_ref``, ``output_preview``, ``output_sha256``, ``output_bytes`` and ``output_tokens``
    in its place. Those fields are ingest's own: an event that sets ``output_ref`` or
    ``output_sha256`` is refused.
    """

    event_type: ClassVar[EventType] = "ToolCallFinished"
    tool_call_id: str
    output: str | None = None
    output_ref: str | None = None
    output_preview: str | None = None
    output_sha256: str | None = None
    output_bytes: NonNegativeInt | None = None
    output_tokens: NonNegativeInt | None = None
    is_error: bool = False
    privacy_class: PrivacyClass | None = None
    freshness_class: FreshnessClass | None = None


class ToolCallFailed(Payload):
    """A tool call could not run or crashed (no output to report)."""

    event_type: ClassVar[EventType] = "ToolCallFailed"
    tool_call_id: str
    error: str
    retryable: bool = False


class FileRead(Payload):
    """The agent read a file."""

    event_type: ClassVar[EventType] = "FileRead"
    path: str
    bytes: NonNegativeInt | None = None


class FileWritten(Payload):
    """The agent wrote a file."""

    event_type: ClassVar[EventType] = "FileWritten"
    path: str
    bytes: NonNegativeInt | None = None
    summary: str | None = None


class DiffApplied(Payload):
    """The agent applied a diff to a file."""

    event_type: ClassVar[EventType] = "DiffApplied"
    path: str
    diff: str


class StateUpdated(Payload):
    """The agent states its task state: present fields replace the branch's value, absent ones
    keep it."""

    event_type: ClassVar[EventType] = "StateUpdated"
    goal: str | None = None
    current_task: str | None = None
    acceptance_criteria: list[str] | None = None
    plan: list[str] | None = None
    constraints: list[str] | None = None
    facts: list[str] | None = None
    decisions: list[str] | None = None
    open_questions: list[str] | None = None


class BranchForked(Payload):
    """A new branch starts at an event of an existing one (``kind``: ``fork`` or
    ``what_if``)."""

    event_type: ClassVar[EventType] = "BranchForked"
    new_branch_id: str
    from_event_id: str
    kind: str | None = None


class SubagentStarted(Payload):
    """A child session was started for a subagent; its work is its own session."""

    event_type: ClassVar[EventType] = "SubagentStarted"
    child_session_id: str
    task: str | None = None


class SubagentFinished(Payload):
    """A child session finished and reported to its parent."""

    event_type: ClassVar[EventType] = "SubagentFinished"
    child_session_id: str
    report: str
    artifacts: list[str] = Field(default_factory=list)
    status: str


class SubagentPromoted(Payload):
    """A child session's results were promoted to its parent before it finished."""

    event_type: ClassVar[EventType] = "SubagentPromoted"
    child_session_id: str


class ApprovalRequested(Payload):
    """A human approval was asked for (a call awaiting it stays pending)."""

    event_type: ClassVar[EventType] = "ApprovalRequested"
    approval_id: str
    tool_call_id: str | None = None
    reason: str | None = None


class ApprovalGranted(Payload):
    """A human approval was granted."""

    event_type: ClassVar[EventType] = "ApprovalGranted"
    approval_id: str
    tool_call_id: str | None = None
    reason: str | None = None


class ApprovalDenied(Payload):
    """A human approval was denied."""

    event_type: ClassVar[EventType] = "ApprovalDenied"
    approval_id: str
    tool_call_id: str | None = None
    reason: str | None = None


class VerifierFinished(Payload):
    """A verifier (tests, linter, reviewer) reached a verdict."""

    event_type: ClassVar[EventType] = "VerifierFinished"
    check: str
    result: str
    evidence_refs: list[str] = Field(default_factory=list)


class ProviderItemRecorded(Payload):
    """An item of a provider's conversation format that the other types do not model (a
    reasoning item, a hosted tool's call), kept whole; assembled contexts leave it out."""

    event_type: ClassVar[EventType] = "ProviderItemRecorded"
    format: str
    item: dict[str, JsonValue]


class MemoryRecorded(Payload):
    """A governed memory was recorded (written by Strata's memory extractor)."""

    event_type: ClassVar[EventType] = "MemoryRecorded"
    memory_id: str
    scope: str
    kind: str
    text: str
    source_refs: list[str]
    confidence: float | None = None
    privacy_class: PrivacyClass | None = None
    freshness_class: FreshnessClass | None = None


class MemorySuperseded(Payload):
    """A memory was replaced by another (written by Strata's memory extractor)."""

    event_type: ClassVar[EventType] = "MemorySuperseded"
    memory_id: str
    superseded_by: str
    reason: str | None = None


class CompactionCompleted(Payload):
    """A compaction record was written (by Strata's compactor); ``status`` and ``check`` say
    whether it stands in for its range."""

    event_type: ClassVar[EventType] = "CompactionCompleted"
    compaction_id: str
    first_event_id: str
    last_event_id: str
    first_kept_event_id: str
    tokens_before: NonNegativeInt
    tokens_after: NonNegativeInt
    summary: JsonValue = None


class ContextBuilt(Payload):
    """A context was assembled for a model call (by Strata's assembler); ``assembly`` is its
    record."""

    event_type: ClassVar[EventType] = "ContextBuilt"
    assembly_id: str
    context_tokens: NonNegativeInt
    transcript_tokens: NonNegativeInt
    assembly: JsonValue = None


AnyPayload = (
    SessionStarted
    | UserPromptSubmitted
    | ModelResponseReceived
    | ToolCallRequested
    | ToolCallFinished
    | ToolCallFailed
    | FileRead
    | FileWritten
    | DiffApplied
    | StateUpdated
    | BranchForked
    | SubagentStarted
    | SubagentFinished
    | SubagentPromoted
    | ApprovalRequested
    | ApprovalGranted
    | ApprovalDenied
    | VerifierFinished
    | ProviderItemRecorded
    | MemoryRecorded
    | MemorySuperseded
    | CompactionCompleted
    | ContextBuilt
)
"""Any typed payload."""

#: The payload class of every event type.
PAYLOAD_TYPES: dict[EventType, type[Payload]] = {
    cls.event_type: cls for cls in get_args(AnyPayload)
}


class Event(_Open):
    """One fact of an agent's work, as published to the log.

    ``event_id`` is the idempotency key: publishing the same event twice has one effect, so a
    batch whose answer was lost can be re-sent as it is. ``type`` may be left out when
    ``payload`` is a typed payload; it is then the payload's. ``tenant_id`` defaults to the API
    key's tenant, ``seq`` is assigned by ingest when absent, and an absent ``payload`` is
    ``{}`` (enough for a ``StateUpdated``).
    """

    event_id: str = Field(min_length=1, max_length=256)
    tenant_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$")
    session_id: str = Field(min_length=1, max_length=256)
    branch_id: str = Field(default=MAIN_BRANCH, min_length=1, max_length=256)
    seq: int | None = Field(default=None, ge=1)
    expected_seq: int | None = Field(default=None, ge=0)
    """Request-only: the session's current head seq, for optimistic concurrency (409 when it
    moved)."""
    parent_event_id: str | None = None
    timestamp: AwareDatetime
    type: EventType
    actor: str | None = None
    participant_id: str | None = None
    payload: AnyPayload
    causality: Causality | None = None

    def to_json(self) -> dict[str, Any]:
        """The canonical JSON object the server accepts: wire names, unset fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @model_validator(mode="before")
    @classmethod
    def _fill_in(cls, data: Any) -> Any:
        """Fills what may be left out: ``type`` from a typed payload (so an event is never
        told its type twice), and an absent payload as ``{}``, as the server reads it."""
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("payload"), Payload):
            return {"type": data["payload"].event_type, **data}
        if "payload" not in data:
            return {**data, "payload": {}}
        return data

    @field_validator("payload", mode="wrap")
    @classmethod
    def _payload_of_type(
        cls, value: Any, _handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        """Parses the payload as the shape its event's ``type`` names, instead of trying every
        shape of the union (the default handler, never called): payloads carry no tag of their
        own and keep unknown fields, so without the type a payload could pass for several."""
        event_type = info.data.get("type")
        if event_type is None:
            # `type` itself failed to validate, which fails the event: that is the error worth
            # reporting, not one per payload shape the value does not fit.
            return value
        expected = PAYLOAD_TYPES[event_type]
        if isinstance(value, Payload):
            if not isinstance(value, expected):
                raise ValueError(
                    f"a {type(value).__name__} payload cannot be the payload of a "
                    f"{event_type} event"
                )
            return value
        return expected.model_validate(value)
