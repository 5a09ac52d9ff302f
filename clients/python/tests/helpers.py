"""Helpers of the tests that talk to the server."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

import strata

T = TypeVar("T")

#: Seconds a read may take to show what was appended.
CONVERGENCE_TIMEOUT = 10.0
_POLL = 0.02


def eventually(read: Callable[[], T], done: Callable[[T], bool]) -> T:
    """``read()`` once ``done`` holds for it. Reads come from projections, which trail appends
    by milliseconds, so a test reads until it sees what it wrote; NotFound counts as not yet."""
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    while True:
        last: object
        try:
            value = read()
        except strata.NotFound as e:
            last = e
        else:
            if done(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not done within {CONVERGENCE_TIMEOUT} s; last read: {last!r}")
        time.sleep(_POLL)


async def eventually_async(read: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
    """:func:`eventually` for the async client."""
    deadline = time.monotonic() + CONVERGENCE_TIMEOUT
    while True:
        last: object
        try:
            value = await read()
        except strata.NotFound as e:
            last = e
        else:
            if done(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not done within {CONVERGENCE_TIMEOUT} s; last read: {last!r}")
        await anyio.sleep(_POLL)


def coding_session(session_id: str) -> tuple[list[strata.Event], dict[str, strata.ToolCall]]:
    """A short coding-agent session: a prompt, a response with two tool calls (one fails, one
    returns a failing test log), a file write and a last response with a call still open."""
    b = strata.EventBuilder(session_id, participant_id="coder")
    run_tests = strata.tool_call("run_tests", {"filter": "invoice", "verbose": None})
    read = strata.tool_call("read_file", {"path": "src/invoice.py"})
    rerun = strata.tool_call("run_tests", {"filter": "invoice"})
    events = [
        b.session_started(
            provider="openai",
            model="gpt-4o",
            context_window_tokens=128_000,
            reserved_output_tokens=8_000,
            system_prompt="You are a careful engineer.",
            tools=[
                {"name": "run_tests", "description": "Run the tests", "schema": {"type": "object"}},
                strata.ToolSpec(name="read_file", json_schema={"type": "object"}),
            ],
        ),
        b.user_prompt("The invoice tests fail; fix the rounding bug."),
        b.model_response(
            "Running the tests and reading the code.",
            tool_calls=[run_tests, read],
            usage=strata.Usage(input_tokens=1200, output_tokens=80),
        ),
        b.tool_result(
            run_tests.tool_call_id,
            "FAILED test_total_rounds_half_even: 10.06 != 10.05",
            is_error=True,
        ),
        b.tool_failure(read.tool_call_id, "permission denied: src/invoice.py", retryable=True),
        b.file_written("src/invoice.py", bytes=812, summary="round half to even"),
        b.model_response("Re-running the tests.", tool_calls=[rerun]),
    ]
    return events, {"run_tests": run_tests, "read": read, "rerun": rerun}
