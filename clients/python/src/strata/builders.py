"""Builders for the events a platform publishes most, so it never assembles raw dicts.

Every builder fills the envelope the session's events share (session, branch, participant,
tenant) and gives each event a fresh id and the current UTC time unless told otherwise. Build an
event once and keep it until the server acknowledged it: re-sending the same object is safe (the
server recognises its ``event_id`` as a duplicate), building it again makes a new event.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TypedDict

from pydantic import JsonValue
from typing_extensions import Unpack

from .events import (
    MAIN_BRANCH,
    BranchForked,
    Causality,
    Event,
    FileWritten,
    FreshnessClass,
    ModelRef,
    ModelResponseReceived,
    Payload,
    PrivacyClass,
    SessionStarted,
    SubagentFinished,
    SubagentStarted,
    ToolCall,
    ToolCallFailed,
    ToolCallFinished,
    ToolSpec,
    Usage,
    UserPromptSubmitted,
)

__all__ = ["EnvelopeOptions", "EventBuilder", "new_id", "tool_call"]


class EnvelopeOptions(TypedDict, total=False):
    """Envelope fields any builder accepts; each one left out is generated or omitted."""

    event_id: str
    """Defaults to a new ``evt_<uuid4>``."""
    timestamp: datetime
    """Defaults to now; must carry a time zone."""
    actor: str
    """Defaults to the builder's own (``user``, ``assistant``, ``tool``, ``platform``)."""
    parent_event_id: str
    causality: Causality
    seq: int
    expected_seq: int


def new_id(prefix: str) -> str:
    """A fresh random id, ``<prefix>_<32 hex digits>`` (a UUID4)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def tool_call(name: str, args: JsonValue = None, *, tool_call_id: str | None = None) -> ToolCall:
    """A tool call for :meth:`EventBuilder.model_response`, with a new ``call_…`` id unless
    given (pass the provider's id when it made one: results are paired with calls by it)."""
    call_id = new_id("call") if tool_call_id is None else tool_call_id
    return ToolCall(tool_call_id=call_id, name=name, args=args)


class EventBuilder:
    """Makes the events of one session (and one branch of it).

    >>> events = EventBuilder("sess-1", participant_id="coder")
    >>> prompt = events.user_prompt("Fix the failing test")
    >>> call = tool_call("run_tests", {"filter": "invoice"})
    >>> response = events.model_response("Running the tests.", tool_calls=[call])
    >>> result = events.tool_result(call.tool_call_id, "1 failed, 41 passed", is_error=True)
    """

    def __init__(
        self,
        session_id: str,
        *,
        branch_id: str = MAIN_BRANCH,
        participant_id: str | None = None,
        tenant_id: str | None = None,
    ) -> None:
        if not session_id:
            raise ValueError("session_id must not be empty")
        self.session_id = session_id
        self.branch_id = branch_id
        self.participant_id = participant_id
        self.tenant_id = tenant_id

    def __repr__(self) -> str:
        return (
            f"EventBuilder(session_id={self.session_id!r}, branch_id={self.branch_id!r}, "
            f"participant_id={self.participant_id!r}, tenant_id={self.tenant_id!r})"
        )

    def on_branch(self, branch_id: str) -> EventBuilder:
        """A builder for another branch of this session (after :meth:`fork`)."""
        return EventBuilder(
            self.session_id,
            branch_id=branch_id,
            participant_id=self.participant_id,
            tenant_id=self.tenant_id,
        )

    def for_child(
        self, child_session_id: str, *, participant_id: str | None = None
    ) -> EventBuilder:
        """A builder for a subagent's own session (see :meth:`subagent_started`), with the
        child's own participant (none unless given)."""
        return EventBuilder(
            child_session_id, participant_id=participant_id, tenant_id=self.tenant_id
        )

    def event(self, payload: Payload, **options: Unpack[EnvelopeOptions]) -> Event:
        """An event of this session carrying any typed payload (``actor`` unset unless given)."""
        return self._event(payload, None, options)

    def _event(self, payload: Payload, actor: str | None, options: EnvelopeOptions) -> Event:
        unknown = options.keys() - EnvelopeOptions.__annotations__.keys()
        if unknown:
            # `**options` would otherwise swallow a misspelt field silently.
            raise TypeError(f"unexpected envelope option(s): {', '.join(sorted(unknown))}")
        event_id = options.get("event_id")
        timestamp = options.get("timestamp")
        return Event(
            event_id=new_id("evt") if event_id is None else event_id,
            timestamp=datetime.now(timezone.utc) if timestamp is None else timestamp,
            session_id=self.session_id,
            branch_id=self.branch_id,
            participant_id=self.participant_id,
            tenant_id=self.tenant_id,
            actor=options.get("actor", actor),
            parent_event_id=options.get("parent_event_id"),
            causality=options.get("causality"),
            seq=options.get("seq"),
            expected_seq=options.get("expected_seq"),
            type=payload.event_type,
            payload=payload,
        )

    def session_started(
        self,
        *,
        provider: str,
        model: str,
        context_window_tokens: int,
        reserved_output_tokens: int,
        system_prompt: str | None = None,
        tools: Sequence[ToolSpec | Mapping[str, JsonValue]] = (),
        cwd: str | None = None,
        repo_root: str | None = None,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``SessionStarted``: the model, its window and what the model is told first.

        ``tools`` take ``{"name", "description", "schema"}`` (``schema`` the arguments' JSON
        Schema). The context is assembled within ``context_window_tokens`` minus
        ``reserved_output_tokens``, which must be the smaller.
        """
        payload = SessionStarted(
            model=ModelRef(provider=provider, model=model),
            context_window_tokens=context_window_tokens,
            reserved_output_tokens=reserved_output_tokens,
            system_prompt=system_prompt,
            tools=[t if isinstance(t, ToolSpec) else ToolSpec.model_validate(t) for t in tools]
            or None,
            cwd=cwd,
            repo_root=repo_root,
        )
        return self._event(payload, "platform", options)

    def user_prompt(
        self, text: str, *, message_id: str | None = None, **options: Unpack[EnvelopeOptions]
    ) -> Event:
        """``UserPromptSubmitted``: what the user asked. Pass ``actor="platform"`` for text the
        harness writes into the user's turn (a reminder, an environment note): it is sent as
        the model read it but never taken for the user's request."""
        payload = UserPromptSubmitted(message_id=message_id or new_id("msg"), text=text)
        return self._event(payload, "user", options)

    def model_response(
        self,
        text: str = "",
        *,
        tool_calls: Sequence[ToolCall] = (),
        message_id: str | None = None,
        usage: Usage | None = None,
        model_run_id: str | None = None,
        assembly_id: str | None = None,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``ModelResponseReceived``: the model's text and the tool calls it asked for (make
        them with :func:`tool_call`); each call stays open until its result or failure.

        ``assembly_id`` links the response to the context it answered (the context answer's
        ``assembly.assembly_id``): "why did the model say this" is then one
        :meth:`Client.assembly` lookup."""
        link = {"assembly_id": assembly_id} if assembly_id is not None else {}
        payload = ModelResponseReceived(
            message_id=message_id or new_id("msg"),
            text=text,
            tool_calls=list(tool_calls),
            usage=usage,
            model_run_id=model_run_id,
            **link,
        )
        return self._event(payload, "assistant", options)

    def tool_result(
        self,
        tool_call_id: str,
        output: str,
        *,
        is_error: bool = False,
        privacy_class: PrivacyClass | None = None,
        freshness_class: FreshnessClass | None = None,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``ToolCallFinished``: what a call returned. ``is_error`` marks a result the tool
        reported as failed (a failing test run); an output over 8 KiB is stored by the server
        as an artifact. ``privacy_class`` keeps ``restricted`` or ``confidential`` output from
        the providers that may not see it."""
        payload = ToolCallFinished(
            tool_call_id=tool_call_id,
            output=output,
            is_error=is_error,
            privacy_class=privacy_class,
            freshness_class=freshness_class,
        )
        return self._event(payload, "tool", options)

    def tool_failure(
        self,
        tool_call_id: str,
        error: str,
        *,
        retryable: bool = False,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``ToolCallFailed``: the call could not run or crashed. It stays in every context as
        an unresolved error until a later success of the same tool."""
        payload = ToolCallFailed(tool_call_id=tool_call_id, error=error, retryable=retryable)
        return self._event(payload, "tool", options)

    def file_written(
        self,
        path: str,
        *,
        bytes: int | None = None,
        summary: str | None = None,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``FileWritten``: the agent wrote a file (it joins the task state's modified files and
        invalidates the memories of that file)."""
        payload = FileWritten(path=path, bytes=bytes, summary=summary)
        return self._event(payload, "tool", options)

    def fork(
        self,
        new_branch_id: str,
        from_event_id: str,
        *,
        kind: str | None = None,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``BranchForked``, on this builder's branch: ``new_branch_id`` starts after
        ``from_event_id`` (``kind``: ``fork``, the default, or ``what_if``). Continue it with
        :meth:`on_branch`; sibling branches never enter each other's context."""
        payload = BranchForked(new_branch_id=new_branch_id, from_event_id=from_event_id, kind=kind)
        return self._event(payload, "platform", options)

    def subagent_started(
        self,
        child_session_id: str,
        *,
        task: str | None = None,
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``SubagentStarted``: a child session runs a subagent. Its events go to the child's
        own session (:meth:`for_child`); the parent's context learns its results only from
        :meth:`subagent_finished`."""
        payload = SubagentStarted(child_session_id=child_session_id, task=task)
        return self._event(payload, "platform", options)

    def subagent_finished(
        self,
        child_session_id: str,
        report: str,
        *,
        status: str = "succeeded",
        artifacts: Sequence[str] = (),
        **options: Unpack[EnvelopeOptions],
    ) -> Event:
        """``SubagentFinished``: the child's report (and artifact refs) reach the parent."""
        payload = SubagentFinished(
            child_session_id=child_session_id,
            report=report,
            status=status,
            artifacts=list(artifacts),
        )
        return self._event(payload, "platform", options)
