"""What the sync and the async client share: configuration and the reading of one answer."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx

from . import _api
from ._retry import RetryPolicy
from .errors import APIConnectionError, APIError, APITimeoutError, error_from_response

T = TypeVar("T")

#: Seconds a request may take unless the client is told otherwise. Generous because a context
#: assembly waits (up to 5 s by default) for the projections to reach the session's head.
DEFAULT_TIMEOUT = 30.0


class BaseClient:
    """Configuration resolved once: URL, key, timeout and retry policy."""

    def __init__(
        self,
        url: str | None,
        api_key: str | None,
        timeout: float | httpx.Timeout,
        retry: RetryPolicy,
    ) -> None:
        self.url = _api.resolve_url(url)
        self._headers = _api.headers(_api.resolve_api_key(api_key))
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = retry

    def __repr__(self) -> str:
        # Never the key: reprs end up in logs.
        return f"{type(self).__name__}(url={self.url!r})"

    def _request_args(self, call: _api.Call[Any]) -> dict[str, Any]:
        return {
            "method": call.method,
            "url": self.url + call.path,
            "params": call.params,
            "json": call.body,
            "headers": self._headers,
            "timeout": self._timeout,
        }

    @staticmethod
    def _answer(call: _api.Call[T], response: httpx.Response) -> T | APIError:
        """The parsed answer, or the error the server answered instead (for the retry loop to
        raise or retry)."""
        if response.status_code in call.accept:
            return call.parse(response)
        return error_from_response(response)

    def _connection_error(
        self, call: _api.Call[Any], error: httpx.TransportError
    ) -> APIConnectionError:
        where = f"{call.method} {self.url}{call.path}"
        if isinstance(error, httpx.TimeoutException):
            return APITimeoutError(f"{where}: no answer within the timeout ({error!r})")
        return APIConnectionError(f"{where}: {error!r}")
