"""Exceptions: one class per error code the server answers, under a common base.

Catch :class:`StrataError` for everything this package raises, :class:`APIError` for every
answer the server refused, or a subclass for one case (``except NotFound``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx
from pydantic import ValidationError

from .models import ErrorBody, InvalidEvent

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseError",
    "APITimeoutError",
    "BadRequest",
    "ConfigurationError",
    "Conflict",
    "EventIdConflict",
    "Forbidden",
    "InsufficientStorage",
    "InternalServerError",
    "InvalidEvents",
    "NotFound",
    "PayloadTooLarge",
    "RequestTimeout",
    "StrataError",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
]


class StrataError(Exception):
    """Base of every error this package raises.

    ``status`` is the HTTP status when the server answered, else ``None``; ``code`` is the
    server's error code (``not_found``, ``invalid_events``…) or this package's own
    (``connection``, ``timeout``, ``configuration``, ``invalid_response``).
    """

    def __init__(self, message: str, *, status: int | None, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self) -> str:
        prefix = f"{self.status} {self.code}" if self.status is not None else self.code
        return f"{prefix}: {self.message}"


class ConfigurationError(StrataError, ValueError):
    """The client cannot be set up as asked (no URL or API key, a malformed URL)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=None, code="configuration")


class APIConnectionError(StrataError):
    """No answer from the server: it could not be reached, or the connection broke."""

    def __init__(self, message: str, *, code: str = "connection") -> None:
        super().__init__(message, status=None, code=code)


class APITimeoutError(APIConnectionError):
    """The server did not answer within the client's timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="timeout")


class APIResponseError(StrataError):
    """The server answered success with a body this client cannot read (a proxy's page, or a
    server of another version)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, status=status, code="invalid_response")


class APIError(StrataError):
    """The server refused the request; ``details`` carries the error body's ``details``."""

    status: int
    #: The status a subclass stands for, to pick it when the body names no known code.
    default_status: ClassVar[int | None] = None

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.details = details
        self.retry_after = retry_after
        """Seconds the server asked to wait before retrying (``Retry-After``), if it did."""


class BadRequest(APIError):
    """400: the request is malformed (an unknown field, a value out of range)."""

    default_status = 400


class InvalidEvents(BadRequest):
    """400: events of the batch are invalid; nothing of it was appended.

    ``events`` lists every field error of the first 100 invalid events, and
    ``more_invalid_events`` counts the rest.
    """

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        details = self.details or {}
        self.events = [InvalidEvent.model_validate(e) for e in details.get("events", [])]
        self.more_invalid_events: int = details.get("more_invalid_events", 0)


class Unauthorized(APIError):
    """401: the API key is missing, unknown, revoked or expired."""

    default_status = 401


class Forbidden(APIError):
    """403: the key may not do this (another tenant's event, a type only Strata's services
    write, an artifact withheld by privacy policy)."""

    default_status = 403


class NotFound(APIError):
    """404: no such session, assembly or artifact for this tenant (or not projected yet)."""

    default_status = 404


class RequestTimeout(APIError):
    """408: the body did not reach the server in time; nothing of it was accepted."""

    default_status = 408


class Conflict(APIError):
    """409: a ``seq`` or ``expected_seq`` does not match the session's head; nothing of the
    batch was appended."""

    default_status = 409


class EventIdConflict(Conflict):
    """409: an event id already accepted (or earlier in the batch) was sent with other content;
    nothing of the batch was appended. A retry must re-send the same event; a new event needs a
    new id.

    ``events`` lists each such event: ``index``, ``event_id`` and ``differs``, the fields that
    differ with the SHA-256 of each version (``stored_sha256``, ``sent_sha256``), never the
    content. A single ``event`` field compares whole events (the earlier one not projected
    yet)."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        details = self.details or {}
        self.events: list[dict[str, Any]] = list(details.get("events", []))


class PayloadTooLarge(APIError):
    """413: the body is over 64 MiB or the batch over 10,000 events; send smaller batches."""

    default_status = 413


class TooManyRequests(APIError):
    """429: this request's key failed, and its address had too many failed authentications this
    minute; ``retry_after`` says when failures are answered with 401 again (a valid key is always
    served). Also: the tenant has too many events in flight."""

    default_status = 429


class InternalServerError(APIError):
    """500: the server failed; its log has the cause."""

    default_status = 500


class Unavailable(APIError):
    """503: a backend is unavailable; nothing was done, so the request may be re-sent."""

    default_status = 503


class InsufficientStorage(APIError):
    """507: the blob store is full; nothing of the batch was accepted."""

    default_status = 507


_BY_CODE: dict[str, type[APIError]] = {
    "bad_request": BadRequest,
    "invalid_events": InvalidEvents,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "request_timeout": RequestTimeout,
    # Before `conflict`, so that a bare 409 maps to the general class.
    "event_id_conflict": EventIdConflict,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "too_many_requests": TooManyRequests,
    "internal": InternalServerError,
    "unavailable": Unavailable,
    "insufficient_storage": InsufficientStorage,
}

_BY_STATUS: dict[int, type[APIError]] = {
    cls.default_status: cls for cls in _BY_CODE.values() if cls.default_status is not None
}

#: Most characters of a body that is not an error body quoted in the message.
_MAX_QUOTED = 500


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header as seconds, when it is a number (the form Strata sends)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_response(response: httpx.Response) -> APIError:
    """The typed error of a refused request.

    Strata answers ``{"error": {"code", "message", "details"?}}``; some refusals come from the
    HTTP layer before Strata's handlers (a malformed query string, an unknown route) as plain
    text or nothing, and get the class of their status instead.
    """
    status = response.status_code
    retry_after = retry_after_seconds(response)
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        text = response.text.strip()[:_MAX_QUOTED] or response.reason_phrase
        cls = _BY_STATUS.get(status, APIError)
        return cls(text, status=status, code=f"http_{status}", retry_after=retry_after)
    info = body.error
    cls = _BY_CODE.get(info.code) or _BY_STATUS.get(status, APIError)
    return cls(
        info.message,
        status=status,
        code=info.code,
        details=info.details,
        retry_after=retry_after,
    )
