"""Strata as the OpenAI Agents SDK's session memory, and as its context.

:class:`StrataSession` implements the SDK's ``Session`` protocol (``openai-agents`` on PyPI): the
items a run adds become events on Strata's log (one event per item, see
``strata._responses_items``) and read back exactly as they were written. Nothing is ever
deleted from the log: :meth:`StrataSession.pop_item` and :meth:`StrataSession.clear_session`
fork the session (``BranchForked`` with ``kind`` ``retry`` or ``clear``) at the event before the
newest item, or at the session's start, and carry on in the fork. A fork's projected state is
its history's, so the retracted items leave the task state, the open calls and every context
the assembler builds, and the abandoned branch stays on the log for audit.

:func:`strata_context_filter` is a ``RunConfig.call_model_input_filter``: it replaces the SDK's
whole history with the context Strata assembles for the next model call (the Responses
rendering), so an Agents SDK app gets Strata's policy with two arguments to ``Runner.run``::

    session = StrataSession("support-42")
    result = await Runner.run(
        agent, "Where is my order?", session=session,
        run_config=RunConfig(call_model_input_filter=strata_context_filter(session)),
    )

One ``StrataSession`` object is the session's one writer: it learns the branch it writes to
from the log when first used and keeps it. Two processes writing one session at once would
fork it twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from . import _responses_items as items_codec
from ._async_client import AsyncClient
from .builders import EventBuilder, new_id
from .errors import Forbidden, NotFound
from .events import MAIN_BRANCH, BranchForked, Event, SessionStarted
from .models import ContextResponse

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
    from agents.run_config import CallModelData, ModelInputData

__all__ = ["CLEAR_KIND", "RETRY_KIND", "StrataSession", "strata_context_filter"]

#: ``BranchForked.kind`` of the fork :meth:`StrataSession.pop_item` makes.
RETRY_KIND = "retry"
#: ``BranchForked.kind`` of the fork :meth:`StrataSession.clear_session` makes.
CLEAR_KIND = "clear"

#: How long a read waits for the projections to reach this session's own last append.
_READ_YOUR_WRITES_SECONDS = 10.0


@dataclass
class _History:
    """What this session has read of the log so far (all branches), in seq order."""

    events: list[Event] = field(default_factory=list)
    after_seq: int = 0
    fork_seq: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Each fork's parent branch and the seq it was forked at."""

    def add(self, event: Event) -> None:
        self.events.append(event)
        self.after_seq = max(self.after_seq, event.seq or 0)
        payload = event.payload
        if isinstance(payload, BranchForked) and payload.new_branch_id not in self.fork_seq:
            at = next((e.seq for e in self.events if e.event_id == payload.from_event_id), None)
            if at is not None:
                self.fork_seq[payload.new_branch_id] = (event.branch_id, at)

    def lineage(self, branch: str) -> list[Event]:
        """``branch``'s history: its ancestors' events up to each fork point, and its own."""
        bounds: dict[str, int | None] = {branch: None}
        cursor, bound = branch, None
        while cursor in self.fork_seq and len(bounds) < 64:
            parent, at = self.fork_seq[cursor]
            bound = at if bound is None else min(bound, at)
            bounds.setdefault(parent, bound)
            cursor = parent
        return [e for e in self.events if _within(bounds, e)]


def _within(bounds: dict[str, int | None], event: Event) -> bool:
    if event.branch_id not in bounds:
        return False
    bound = bounds[event.branch_id]
    return bound is None or (event.seq or 0) <= bound


class StrataSession:
    """An Agents SDK ``Session`` kept on Strata's log.

    ``client`` is an :class:`AsyncClient` (one is made from ``url`` and ``api_key``, which fall
    back to ``STRATA_URL`` and ``STRATA_API_KEY``, when it is not given). ``branch`` is where
    the session starts writing (``main``). When the session has no events yet, the first
    :meth:`add_items` starts it with a ``SessionStarted`` naming ``model`` (``provider``),
    its window and reserved output, and ``instructions`` as the system prompt; a session that
    the platform started keeps its own.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        client: AsyncClient | None = None,
        url: str | None = None,
        api_key: str | None = None,
        branch: str = MAIN_BRANCH,
        participant_id: str | None = None,
        provider: str = "openai",
        model: str = "gpt-4o",
        context_window_tokens: int = 128_000,
        reserved_output_tokens: int = 16_384,
        instructions: str | None = None,
    ) -> None:
        if not session_id:
            raise ValueError("session_id must not be empty")
        self.session_id = session_id
        self._owns_client = client is None
        self._client = client if client is not None else AsyncClient(url, api_key)
        self._start_branch = branch
        self._participant_id = participant_id
        self._start = {
            "provider": provider,
            "model": model,
            "context_window_tokens": context_window_tokens,
            "reserved_output_tokens": reserved_output_tokens,
            "system_prompt": instructions,
        }
        self._branch: str | None = None
        self._history = _History()
        self._written_seq = 0
        self._outputs: dict[str, str] = {}
        self._lock = asyncio.Lock()

    @property
    def client(self) -> AsyncClient:
        """The client this session talks through."""
        return self._client

    async def branch(self) -> str:
        """The branch the session writes to now (it changes on every pop and clear)."""
        async with self._lock:
            await self._refresh()
            return self._current_branch()

    async def aclose(self) -> None:
        """Closes the client if this session made it."""
        if self._owns_client:
            await self._client.aclose()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation's items, oldest first; with ``limit``, the newest ``limit``."""
        async with self._lock:
            await self._refresh()
            found: list[dict[str, Any]] = []
            for event in self._item_events():
                found.extend(await self._items_of(event))
        if limit is not None:
            found = found[-limit:] if limit > 0 else []
        return cast("list[TResponseInputItem]", found)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends one event per item, in order, as one all-or-nothing batch."""
        if not items:
            return
        async with self._lock:
            await self._refresh()
            events = self._builder()
            batch = [] if self._history.lineage(self._current_branch()) else [self._started()]
            batch += [items_codec.event_for_item(events, cast("Any", item)) for item in items]
            await self._append(batch)

    async def pop_item(self) -> TResponseInputItem | None:
        """Retracts the newest item and returns it (``None`` when there is none): the session
        continues on a fork made at the event before it."""
        async with self._lock:
            await self._refresh()
            lineage = self._history.lineage(self._current_branch())
            item_events = [e for e in lineage if self._is_item(e)]
            if not item_events:
                return None
            newest = item_events[-1]
            items = await self._items_of(newest)
            before = lineage[: lineage.index(newest)]
            if not before:
                raise RuntimeError(
                    f"session {self.session_id!r}: the newest item is its first event, so no"
                    " fork can leave it out (a session StrataSession starts has a"
                    " SessionStarted first)"
                )
            await self._fork(before[-1].event_id, RETRY_KIND)
            return cast("TResponseInputItem", items[-1]) if items else None

    async def clear_session(self) -> None:
        """Retracts every item: the session continues on a fork made at its start."""
        async with self._lock:
            await self._refresh()
            lineage = self._history.lineage(self._current_branch())
            if not any(self._is_item(e) for e in lineage):
                return
            start = next((e for e in lineage if isinstance(e.payload, SessionStarted)), None)
            if start is None:
                raise RuntimeError(
                    f"session {self.session_id!r} has no SessionStarted to clear back to"
                )
            await self._fork(start.event_id, CLEAR_KIND)

    async def context(self, **options: Any) -> ContextResponse:
        """The context Strata assembles for the next model call on this session's branch, as
        a Responses API request (``options`` as :meth:`AsyncClient.context` takes them)."""
        branch = await self.branch()
        options.setdefault("provider", "openai-responses")
        return await self._client.context(self.session_id, branch=branch, **options)

    # --- internals -------------------------------------------------------------------------

    def _current_branch(self) -> str:
        if self._branch is None:
            self._branch = self._start_branch
            # Replays the session's own pops and clears: each forked from the branch then in use.
            for event in self._history.events:
                payload = event.payload
                if (
                    isinstance(payload, BranchForked)
                    and payload.kind in (RETRY_KIND, CLEAR_KIND)
                    and event.branch_id == self._branch
                ):
                    self._branch = payload.new_branch_id
        return self._branch

    def _builder(self) -> EventBuilder:
        return EventBuilder(
            self.session_id, branch_id=self._current_branch(), participant_id=self._participant_id
        )

    def _started(self) -> Event:
        start = self._start
        return self._builder().session_started(
            provider=str(start["provider"]),
            model=str(start["model"]),
            context_window_tokens=cast("int", start["context_window_tokens"]),
            reserved_output_tokens=cast("int", start["reserved_output_tokens"]),
            system_prompt=cast("str | None", start["system_prompt"]),
        )

    async def _fork(self, from_event_id: str, kind: str) -> None:
        branch = new_id(kind)
        await self._append([self._builder().fork(branch, from_event_id, kind=kind)])
        self._branch = branch
        # The fork's history is known once the projection has the fork event.
        await self._refresh()

    async def _append(self, batch: list[Event]) -> None:
        outcomes = await self._client.append(batch)
        self._written_seq = max([self._written_seq, *(o.seq or 0 for o in outcomes)])

    async def _refresh(self) -> None:
        """Reads the events after the last one read, waiting (briefly) for the projections to
        reach this session's own last append."""
        deadline = time.monotonic() + _READ_YOUR_WRITES_SECONDS
        while True:
            try:
                async for event in self._client.events(
                    self.session_id, after_seq=self._history.after_seq
                ):
                    self._history.add(event)
            except NotFound:
                pass  # no events yet
            if self._history.after_seq >= self._written_seq:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"session {self.session_id!r}: the projections did not reach seq "
                    f"{self._written_seq} within {_READ_YOUR_WRITES_SECONDS:.0f} s"
                )
            await asyncio.sleep(0.01)

    def _item_events(self) -> list[Event]:
        return [e for e in self._history.lineage(self._current_branch()) if self._is_item(e)]

    @staticmethod
    def _is_item(event: Event) -> bool:
        return bool(items_codec.items_for_event(event, lambda _ref: ""))

    async def _items_of(self, event: Event) -> list[dict[str, Any]]:
        ref = getattr(event.payload, "output_ref", None)
        if isinstance(ref, str) and ref not in self._outputs:
            try:
                raw = await self._client.artifact(ref)
                self._outputs[ref] = raw.decode("utf-8", errors="replace")
            except Forbidden:
                # Privacy policy withholds the bytes (restricted, or confidential): the history
                # says so instead of quoting them, as the assembled context does.
                self._outputs[ref] = f"[output withheld by privacy policy: {ref}]"
        return items_codec.items_for_event(event, lambda r: self._outputs.get(r, ""))


def strata_context_filter(
    session: StrataSession, **options: Any
) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """A ``RunConfig.call_model_input_filter`` sending Strata's assembled context instead of the
    SDK's whole history. ``options`` go to :meth:`StrataSession.context` (``budget``,
    ``policy``, ``target_tokens``…). Every model call is recorded: the filter's answer carries
    the assembly id, and ``GET /v1/assemblies/{id}`` says why each item is in or out.
    """
    from agents.run_config import ModelInputData

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        answer = await session.context(**options)
        payload = answer.payload
        return ModelInputData(
            input=cast("list[TResponseInputItem]", payload.get("input", [])),
            instructions=_instructions(data.model_data.instructions, payload.get("instructions")),
        )

    return call_model_input_filter


def _instructions(agent: str | None, strata: Any) -> str | None:
    """The agent's instructions first (the SDK's live truth), then what Strata adds (task state,
    memories, a compaction summary) unless it only repeats them."""
    ours = strata if isinstance(strata, str) and strata else None
    if agent is None or ours is None:
        return agent if ours is None else ours
    if ours.startswith(agent):
        return ours
    return f"{agent}\n\n{ours}"
