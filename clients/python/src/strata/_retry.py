"""When a failed request is sent again, and after how long."""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

from .errors import APIError

#: Statuses that mean the server did nothing with the request: re-sending is always safe.
#: 503: a backend is unavailable ("nothing of this batch was accepted"); 429: a failed
#: authentication past the address's allowance, or the tenant's events in flight, before
#: anything of the request was done.
RETRYABLE_STATUSES = frozenset({429, 503})

#: Transport failures that happen before any byte of the request reaches the server.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """How the clients retry.

    A request is retried when the server answers 503 or 429, when it could not be sent at all
    (connection refused, connect timeout), and — only for requests that are safe to repeat —
    when the connection failed after it was sent (reset, read timeout). Appending is safe to
    repeat: the server recognises each ``event_id`` and answers ``duplicate`` for an event it
    already has. Compacting is not, and is never re-sent once it may have reached the server.

    The wait before retry ``n`` (from 0) is the server's ``Retry-After`` when it sent one, else
    an exponential backoff ``initial_backoff * 2**n`` capped at ``max_backoff``, with jitter.
    A ``Retry-After`` longer than ``max_retry_after`` is not waited for: the error is raised at
    once, with ``retry_after`` set, for the caller to schedule.
    """

    max_retries: int = 2
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, not {self.max_retries}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("need 0 <= initial_backoff <= max_backoff")
        if self.max_retry_after < 0:
            raise ValueError(f"max_retry_after must be >= 0, not {self.max_retry_after}")

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based), with half of it jittered so
        that clients failing together do not retry together."""
        ceiling = min(self.max_backoff, self.initial_backoff * 2.0**retry)
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def delay_after_error(self, error: APIError, retry: int) -> float | None:
        """The wait before re-sending a request the server refused, or ``None`` to give up."""
        if retry >= self.max_retries or error.status not in RETRYABLE_STATUSES:
            return None
        if error.retry_after is None:
            return self.backoff(retry)
        return error.retry_after if error.retry_after <= self.max_retry_after else None

    def delay_after_transport_error(
        self, error: httpx.TransportError, retry: int, *, idempotent: bool
    ) -> float | None:
        """The wait before re-sending a request whose connection failed, or ``None`` to give
        up. A request that may have reached the server is re-sent only when ``idempotent``."""
        if retry >= self.max_retries:
            return None
        if not idempotent and not isinstance(error, _NOT_SENT):
            return None
        return self.backoff(retry)
