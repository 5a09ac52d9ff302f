"""The API's calls as data, shared by the sync and the async client: what to send for each
method and how to read the answer. The clients only add the I/O and the retries."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from ._version import __version__
from .errors import APIResponseError, ConfigurationError
from .events import Event
from .models import (
    AppendOutcome,
    Compaction,
    ContextAssembly,
    ContextRequest,
    ContextResponse,
    ForgetReport,
    SessionResume,
    SessionsForgotten,
    SessionState,
    SessionSummary,
    WhyNot,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

URL_ENV = "STRATA_URL"
API_KEY_ENV = "STRATA_API_KEY"

#: Page sizes the server accepts: events by up to 10,000, sessions by up to 1,000.
MAX_EVENTS_PAGE = 10_000
MAX_SESSIONS_PAGE = 1_000

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer.

    ``idempotent`` says whether re-sending it after a broken connection is safe;
    ``accept`` lists the statuses whose body ``parse`` reads (any other is an error).
    """

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, str | int] | None = None
    body: Any = None
    idempotent: bool = True
    accept: frozenset[int] = frozenset({200})


def resolve_url(url: str | None) -> str:
    """The server's base URL, from the argument or ``STRATA_URL``, without a trailing slash."""
    raw = url if url is not None else os.environ.get(URL_ENV)
    if not raw:
        raise ConfigurationError(
            f"no Strata URL: pass url= or set {URL_ENV} (e.g. http://127.0.0.1:7700)"
        )
    try:
        parsed = httpx.URL(raw)
    except httpx.InvalidURL as e:
        raise ConfigurationError(f"invalid Strata URL {raw!r}: {e}") from e
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigurationError(
            f"invalid Strata URL {raw!r}: expected http:// or https:// and a host"
        )
    if parsed.query or parsed.fragment:
        raise ConfigurationError(f"invalid Strata URL {raw!r}: no query or fragment allowed")
    return raw.rstrip("/")


def resolve_api_key(api_key: str | None) -> str:
    """The API key, from the argument or ``STRATA_API_KEY``."""
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    if not key or not key.strip():
        raise ConfigurationError(
            f"no Strata API key: pass api_key= or set {API_KEY_ENV} "
            "(`strata dev` prints one; `strata keys create --tenant T` makes more)"
        )
    return key.strip()


def headers(api_key: str) -> dict[str, str]:
    """The headers every request carries."""
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": f"strata-client-python/{__version__}",
    }


def _segment(value: str, what: str) -> str:
    """``value`` as one path segment: ids may hold ``/``, spaces or any character."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, not {value!r}")
    return quote(value, safe="")


def _page_size(value: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValueError(f"page_size must be an integer from 1 to {maximum}, not {value!r}")
    return value


def _model(model: type[M]) -> Callable[[httpx.Response], M]:
    """A parser of a JSON body into ``model``."""

    def parse(response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as e:
            raise APIResponseError(
                f"{response.request.method} {response.request.url.path}: unexpected answer "
                f"({e.error_count()} problem(s); first: {_first_problem(e)})",
                status=response.status_code,
            ) from e

    return parse


def _first_problem(e: ValidationError) -> str:
    first = e.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "body"
    return f"{location}: {first['msg']}"


class _Appended(BaseModel):
    results: list[AppendOutcome]


class _EventsPage(BaseModel):
    events: list[Event]


class _SessionsPage(BaseModel):
    sessions: list[SessionSummary]
    next_after: str | None = None


class _CompactAnswer(BaseModel):
    """``{"status": "nothing_to_compact"}`` or a compaction record."""

    status: str


def append(events: Iterable[Event | Mapping[str, Any]]) -> Call[list[AppendOutcome]]:
    """``POST /v1/events``. Events given as mappings are checked here, so a malformed one fails
    before anything is sent."""
    batch = [e if isinstance(e, Event) else Event.model_validate(e) for e in events]
    if not batch:
        raise ValueError("append needs at least one event")
    read = _model(_Appended)
    return Call(
        "POST",
        "/v1/events",
        parse=lambda r: read(r).results,
        body={"events": [e.to_json() for e in batch]},
    )


def context(session_id: str, request: ContextRequest) -> Call[ContextResponse]:
    """``POST /v1/sessions/{id}/context``. Re-sending it is safe: at worst the server records
    one more assembly of the same context."""
    return Call(
        "POST",
        f"/v1/sessions/{_segment(session_id, 'session_id')}/context",
        parse=_model(ContextResponse),
        body=request.model_dump(exclude_none=True),
    )


def assembly(assembly_id: str) -> Call[ContextAssembly]:
    """``GET /v1/assemblies/{id}``."""
    return Call(
        "GET",
        f"/v1/assemblies/{_segment(assembly_id, 'assembly_id')}",
        parse=_model(ContextAssembly),
    )


def why_not(assembly_id: str, reference: str) -> Call[WhyNot]:
    """``GET /v1/assemblies/{id}?why_not=REF``."""
    if not isinstance(reference, str) or not reference:
        raise ValueError(f"why_not must be a non-empty string, not {reference!r}")
    return Call(
        "GET",
        f"/v1/assemblies/{_segment(assembly_id, 'assembly_id')}",
        parse=_model(WhyNot),
        params={"why_not": reference},
    )


def compact(session_id: str, branch: str | None, keep_turns: int | None) -> Call[Compaction | None]:
    """``POST /v1/sessions/{id}/compact``. Not idempotent (a re-sent request may compact the
    next range too), so it is never re-sent once it may have reached the server."""
    if keep_turns is not None and (
        isinstance(keep_turns, bool) or not isinstance(keep_turns, int) or keep_turns < 0
    ):
        raise ValueError(f"keep_turns must be a non-negative integer, not {keep_turns!r}")
    body = {k: v for k, v in {"branch": branch, "keep_turns": keep_turns}.items() if v is not None}
    read_status = _model(_CompactAnswer)
    read_record = _model(Compaction)

    def parse(response: httpx.Response) -> Compaction | None:
        if read_status(response).status == "nothing_to_compact":
            return None
        return read_record(response)

    return Call(
        "POST",
        f"/v1/sessions/{_segment(session_id, 'session_id')}/compact",
        parse=parse,
        body=body,
        idempotent=False,
        # 422: the record of a compaction whose check failed (recorded, replacing nothing).
        accept=frozenset({200, 422}),
    )


def session(session_id: str) -> Call[SessionResume]:
    """``GET /v1/sessions/{id}``."""
    return Call(
        "GET",
        f"/v1/sessions/{_segment(session_id, 'session_id')}",
        parse=_model(SessionResume),
    )


def state(session_id: str) -> Call[SessionState]:
    """``GET /v1/sessions/{id}/state``."""
    return Call(
        "GET",
        f"/v1/sessions/{_segment(session_id, 'session_id')}/state",
        parse=_model(SessionState),
    )


def forget_session(session_id: str) -> Call[ForgetReport]:
    """``DELETE /v1/sessions/{id}``. Not re-sent: once done, the session is not found."""
    return Call(
        "DELETE",
        f"/v1/sessions/{_segment(session_id, 'session_id')}",
        parse=_model(ForgetReport),
        idempotent=False,
    )


def forget_user(user_id: str) -> Call[SessionsForgotten]:
    """``DELETE /v1/users/{user}``: safe to re-send (what is gone stays gone)."""
    return Call(
        "DELETE",
        f"/v1/users/{_segment(user_id, 'user_id')}",
        parse=_model(SessionsForgotten),
    )


def events_page(session_id: str, after_seq: int, page_size: int) -> Call[list[Event]]:
    """One page of ``GET /v1/sessions/{id}/events``: events with ``seq > after_seq``."""
    read = _model(_EventsPage)
    return Call(
        "GET",
        f"/v1/sessions/{_segment(session_id, 'session_id')}/events",
        parse=lambda r: read(r).events,
        params={"after_seq": after_seq, "limit": page_size},
    )


def check_events_paging(after_seq: int, page_size: int) -> None:
    """Refuses paging arguments before the first page is asked for."""
    if isinstance(after_seq, bool) or not isinstance(after_seq, int) or after_seq < 0:
        raise ValueError(f"after_seq must be a non-negative integer, not {after_seq!r}")
    _page_size(page_size, MAX_EVENTS_PAGE)


def next_after_seq(page: list[Event], after_seq: int) -> int:
    """The cursor of the page after ``page``; refuses a page that would not move it."""
    last = page[-1].seq
    if last is None or last <= after_seq:
        raise APIResponseError(
            f"events page after seq {after_seq} ends at seq {last}: pagination would not advance",
            status=200,
        )
    return last


def check_sessions_paging(page_size: int) -> None:
    """Refuses a page size before the first page is asked for."""
    _page_size(page_size, MAX_SESSIONS_PAGE)


def sessions_page(
    after: str | None, page_size: int, matching: str | None = None
) -> Call[tuple[list[SessionSummary], str | None]]:
    """One page of ``GET /v1/sessions``, and the cursor of the next (``None`` after the last)."""
    params: dict[str, str | int] = {"limit": page_size}
    if after is not None:
        params["after"] = after
    if matching:
        params["q"] = matching
    read = _model(_SessionsPage)

    def parse(response: httpx.Response) -> tuple[list[SessionSummary], str | None]:
        page = read(response)
        return page.sessions, page.next_after

    return Call("GET", "/v1/sessions", parse=parse, params=params)


def artifact(ref: str) -> Call[bytes]:
    """``GET /v1/artifacts/{sha256}``; ``ref`` is the hex digest or an ``artifact:sha256:…``
    ref as ingest hands out."""
    if not isinstance(ref, str):
        raise ValueError(f"artifact needs a SHA-256 or an artifact ref, not {ref!r}")
    digest = ref.removeprefix("artifact:").removeprefix("sha256:").lower()
    if not _SHA256.fullmatch(digest):
        raise ValueError(
            f"not an artifact: {ref!r} (expected 64 hex digits or artifact:sha256:<hex>)"
        )
    return Call("GET", f"/v1/artifacts/{digest}", parse=lambda r: r.content)
