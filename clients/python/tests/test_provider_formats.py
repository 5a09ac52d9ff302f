"""The payloads Strata renders, checked against the request types of the providers' own SDKs
(`openai` and `anthropic` from PyPI): a payload is accepted only when the SDK type validates it
and keeps every field it has (pydantic drops keys a TypedDict does not know, so a misspelled or
unknown field shows as a difference)."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from anthropic.types import (
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
)
from helpers import coding_session
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.responses import FunctionToolParam, ResponseInputParam
from pydantic import TypeAdapter
from typing_extensions import TypedDict

import strata
from strata.models import Provider


def conforms(kind: Any, value: list[Any]) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(kind)
    # JSON mode walks the SDK's `Iterable` fields, which pydantic validates lazily.
    kept = adapter.dump_python(adapter.validate_python(value), mode="json")
    assert len(kept) == len(value)
    for sent, typed in zip(value, kept, strict=True):
        assert typed == sent, f"the SDK type keeps {typed!r} of {sent!r}"


def payload_of(client: strata.Client, session_id: str, provider: Provider) -> dict[str, Any]:
    payload = client.context(session_id, provider=provider).payload
    assert isinstance(payload, dict)
    return payload


@pytest.fixture
def answered(client: strata.Client, session_id: str) -> str:
    """The coding session, with its last call answered and a follow-up request."""
    events, calls = coding_session(session_id)
    b = strata.EventBuilder(session_id, participant_id="coder")
    events += [
        b.tool_result(calls["rerun"].tool_call_id, "4 passed"),
        b.model_response("The tests pass now."),
        b.user_prompt("Add a regression test."),
    ]
    client.append(events)
    return session_id


def test_chat_completions(client: strata.Client, answered: str) -> None:
    payload = payload_of(client, answered, "openai")
    conforms(list[ChatCompletionMessageParam], payload["messages"])
    conforms(list[ChatCompletionFunctionToolParam], payload["tools"])


def test_responses_api(client: strata.Client, answered: str) -> None:
    payload = payload_of(client, answered, "openai-responses")
    assert set(payload) == {"model", "instructions", "input", "tools"}
    assert "careful engineer" in payload["instructions"]
    conforms(ResponseInputParam, payload["input"])
    conforms(list[FunctionToolParam], payload["tools"])
    kinds = [item["type"] for item in payload["input"]]
    assert {"message", "function_call", "function_call_output"} <= set(kinds)
    calls = {i["call_id"] for i in payload["input"] if i["type"] == "function_call"}
    outputs = {i["call_id"] for i in payload["input"] if i["type"] == "function_call_output"}
    assert calls == outputs, "every call paired with its output by call_id"
    assert payload["input"][-1] == {
        "type": "message",
        "role": "user",
        "content": "Add a regression test.",
    }


def test_anthropic_messages(client: strata.Client, answered: str) -> None:
    payload = payload_of(client, answered, "anthropic")
    assert isinstance(payload["system"], str)
    messages = payload["messages"]
    assert isinstance(messages, list)
    TypeAdapter(list[MessageParam]).validate_python(messages)
    # A message's `content` is an `Iterable` inside a union, which pydantic does not give back
    # when dumped: the turns and their blocks are checked apart.
    conforms(list[TurnKeys], [{k: v for k, v in m.items() if k != "content"} for m in messages])
    blocks = [b for m in messages for b in m["content"]]
    conforms(list[TextBlockParam | ToolUseBlockParam | ToolResultBlockParam], blocks)
    assert {b["type"] for b in blocks} == {"text", "tool_use", "tool_result"}
    conforms(list[ToolParam], payload["tools"])


class TurnKeys(TypedDict):
    role: Literal["user", "assistant"]
