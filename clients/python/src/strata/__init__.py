"""Python client for Strata, the event-sourced context manager for LLM agents.

Publish what an agent does with :class:`EventBuilder` and :meth:`Client.append`, then ask
:meth:`Client.context` for the smallest sufficient context of the next model call.
"""

from ._async_client import AsyncClient
from ._client import Client
from ._retry import RetryPolicy
from ._version import __version__
from .builders import EnvelopeOptions, EventBuilder, new_id, tool_call
from .errors import (
    APIConnectionError,
    APIError,
    APIResponseError,
    APITimeoutError,
    BadRequest,
    ConfigurationError,
    Conflict,
    EventIdConflict,
    Forbidden,
    InsufficientStorage,
    InternalServerError,
    InvalidEvents,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    StrataError,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from .events import Event, EventType, ToolCall, ToolSpec, Usage
from .models import (
    AppendOutcome,
    Compaction,
    ContextAssembly,
    ContextResponse,
    ForgetReport,
    NotForgettable,
    SessionResume,
    SessionsForgotten,
    SessionState,
    SessionSummary,
    WhyNot,
)

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIResponseError",
    "APITimeoutError",
    "AppendOutcome",
    "AsyncClient",
    "BadRequest",
    "Client",
    "Compaction",
    "ConfigurationError",
    "Conflict",
    "ContextAssembly",
    "ContextResponse",
    "EnvelopeOptions",
    "Event",
    "EventBuilder",
    "EventIdConflict",
    "EventType",
    "Forbidden",
    "ForgetReport",
    "InsufficientStorage",
    "InternalServerError",
    "InvalidEvents",
    "NotForgettable",
    "NotFound",
    "PayloadTooLarge",
    "RequestTimeout",
    "RetryPolicy",
    "SessionResume",
    "SessionState",
    "SessionSummary",
    "SessionsForgotten",
    "StrataError",
    "TooManyRequests",
    "ToolCall",
    "ToolSpec",
    "Unauthorized",
    "Unavailable",
    "Usage",
    "WhyNot",
    "__version__",
    "new_id",
    "tool_call",
]
