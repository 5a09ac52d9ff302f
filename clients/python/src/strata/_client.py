"""The synchronous client."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, overload

import httpx

from . import _api
from ._base import DEFAULT_TIMEOUT, BaseClient
from ._retry import RetryPolicy
from .errors import APIError
from .events import Event
from .models import (
    AppendOutcome,
    Compaction,
    ContextAssembly,
    ContextRequest,
    ContextResponse,
    ForgetReport,
    Provider,
    SessionResume,
    SessionsForgotten,
    SessionState,
    SessionSummary,
    WhyNot,
)

T = TypeVar("T")


class Client(BaseClient):
    """A client of Strata's HTTP API.

    ``url`` and ``api_key`` default to ``STRATA_URL`` and ``STRATA_API_KEY``. ``timeout``
    (seconds, or an :class:`httpx.Timeout`) applies to every request; ``retry`` says when a
    failed request is re-sent (see :class:`RetryPolicy`). Pass ``http_client`` to reuse an
    :class:`httpx.Client` of your own (proxies, TLS, event hooks); it is then yours to close.

    Reads (events, state, assemblies, artifacts) come from projections, which trail an append
    by milliseconds; :meth:`context` waits for them to reach the session's head.

    >>> with Client() as client:
    ...     client.append(events)
    ...     ctx = client.context("sess-1", budget=16_000)
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy = RetryPolicy(),
        http_client: httpx.Client | None = None,
    ) -> None:
        super().__init__(url, api_key, timeout, retry)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client()

    def close(self) -> None:
        """Closes the connections (not those of an ``http_client`` passed in)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def append(self, events: Iterable[Event | Mapping[str, Any]]) -> list[AppendOutcome]:
        """Appends a batch of events, all or nothing, and returns one outcome per event.

        Safe to re-send: an event whose ``event_id`` the server has comes back ``duplicate``
        with the seq it got first, so a batch whose answer was lost (and which this client
        re-sends on a broken connection or a 503) is appended once. Raises
        :class:`InvalidEvents` (every field error), :class:`Forbidden`, :class:`Conflict` (an
        ``expected_seq`` that no longer holds) or :class:`PayloadTooLarge` (over 10,000 events
        or 64 MiB); nothing of a refused batch is appended.
        """
        return self._send(_api.append(events))

    def context(
        self,
        session_id: str,
        *,
        branch: str | None = None,
        participant: str | None = None,
        provider: Provider | None = None,
        budget: int | None = None,
        request: str | None = None,
        verbatim_turns: int | None = None,
        policy: str | None = None,
        target_tokens: int | None = None,
        rehydrate: Sequence[str] | None = None,
        trace: bool | None = None,
    ) -> ContextResponse:
        """Assembles the context of the session's next model call: the provider request body
        (``payload``) and the record of why each piece is in or out (``assembly``).

        Arguments left out take the server's defaults (branch ``main``, the provider the session
        started with, else ``openai``, the window minus the reserved output as budget). Raises
        :class:`NotFound` for a session or branch with no events.
        """
        body = ContextRequest(
            branch=branch,
            participant=participant,
            provider=provider,
            budget=budget,
            request=request,
            verbatim_turns=verbatim_turns,
            policy=policy,
            target_tokens=target_tokens,
            rehydrate=rehydrate,
            trace=trace,
        )
        return self._send(_api.context(session_id, body))

    @overload
    def assembly(self, assembly_id: str) -> ContextAssembly: ...

    @overload
    def assembly(self, assembly_id: str, *, why_not: str) -> WhyNot: ...

    def assembly(self, assembly_id: str, *, why_not: str | None = None) -> ContextAssembly | WhyNot:
        """A recorded assembly, or with ``why_not`` (an event id, tool call id or artifact
        ref) why that one record is or is not in it.

        The record is readable once the projector has stored it, milliseconds after
        :meth:`context` returned; until then this raises :class:`NotFound`.
        """
        if why_not is None:
            return self._send(_api.assembly(assembly_id))
        return self._send(_api.why_not(assembly_id, why_not))

    def compact(
        self, session_id: str, *, branch: str | None = None, keep_turns: int | None = None
    ) -> Compaction | None:
        """Compacts the session's branch now, keeping the last ``keep_turns`` user turns
        (default 2) verbatim; ``None`` when there is nothing to compact.

        A compaction whose check fails is returned too (``succeeded`` false): it is recorded
        and replaces nothing. Never re-sent once the request may have reached the server.
        """
        return self._send(_api.compact(session_id, branch, keep_turns))

    def session(self, session_id: str) -> SessionResume:
        """What a restarted worker needs to carry on the session: model configuration, status,
        each branch's head, open calls, subagents and the latest compaction."""
        return self._send(_api.session(session_id))

    def forget_session(self, session_id: str) -> ForgetReport:
        """Forgets the session for real: its data key destroyed (every copy of its events on
        the log unreadable), its projections, hot state and unshared artifacts deleted, its
        subagents' sessions with it, and an audit entry written. Answers once it is done (at
        least 5 s). Raises :class:`NotFound` for an unknown session, and :class:`Conflict` (code
        ``not_forgettable``) when its events were written while sealing was off. Never re-sent
        once the request may have reached the server."""
        return self._send(_api.forget_session(session_id))

    def forget_user(self, user_id: str) -> SessionsForgotten:
        """Forgets every session of this tenant whose ``SessionStarted`` names end user
        ``user_id`` (and the memories they were the source of), as :meth:`forget_session` does.
        A user with nothing left answers with no session."""
        return self._send(_api.forget_user(user_id))

    def state(self, session_id: str) -> SessionState:
        """The session's projected state: branches, agent state per branch, open tool calls."""
        return self._send(_api.state(session_id))

    def events(
        self, session_id: str, *, after_seq: int = 0, page_size: int = 1000
    ) -> Iterator[Event]:
        """The session's events after ``after_seq``, in seq order, all branches, Strata's own
        (memories, compactions, assemblies) included; fetched a page at a time as iterated.
        Iterating raises :class:`NotFound` for a session with no events."""
        _api.check_events_paging(after_seq, page_size)
        return self._events(session_id, after_seq, page_size)

    def _events(self, session_id: str, after_seq: int, page_size: int) -> Iterator[Event]:
        while True:
            page = self._send(_api.events_page(session_id, after_seq, page_size))
            yield from page
            if len(page) < page_size:
                return
            after_seq = _api.next_after_seq(page, after_seq)

    def sessions(
        self, *, after: str | None = None, page_size: int = 100, matching: str | None = None
    ) -> Iterator[SessionSummary]:
        """The tenant's sessions by id (byte order) after ``after``, a page at a time; with
        ``matching``, only those whose id, model or a participant's id contains it. Each says
        when it last moved, who took part and what is unfinished in it (open calls, unresolved
        errors)."""
        _api.check_sessions_paging(page_size)
        return self._sessions(after, page_size, matching)

    def _sessions(
        self, after: str | None, page_size: int, matching: str | None
    ) -> Iterator[SessionSummary]:
        while True:
            page, after = self._send(_api.sessions_page(after, page_size, matching))
            yield from page
            if after is None:
                return

    def artifact(self, ref: str) -> bytes:
        """The raw bytes of a stored tool output, by SHA-256 or ``artifact:sha256:…`` ref.

        Raises :class:`Forbidden` when an event citing it holds it ``restricted`` or
        ``confidential``, and :class:`NotFound` until a projected event of the tenant cites it.
        """
        return self._send(_api.artifact(ref))

    def _send(self, call: _api.Call[T]) -> T:
        retry = 0
        while True:
            try:
                response = self._http.request(**self._request_args(call))
            except httpx.TransportError as e:
                delay = self.retry.delay_after_transport_error(e, retry, idempotent=call.idempotent)
                if delay is None:
                    raise self._connection_error(call, e) from e
            else:
                answer = self._answer(call, response)
                if not isinstance(answer, APIError):
                    return answer
                delay = self.retry.delay_after_error(answer, retry)
                if delay is None:
                    raise answer
            time.sleep(delay)
            retry += 1
