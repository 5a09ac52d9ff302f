"""`strata.agents.StrataSession` and `strata_context_filter` with the OpenAI Agents SDK, against a
real `strata dev`: the items round-trip, pop and clear are forks the projection honours, and a
real `Agent` runs through `Runner.run` with a scripted model (no network)."""

from __future__ import annotations

import json
import typing
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from conftest import Server
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_input_item_param import ResponseInputItemParam
from openai.types.responses.response_reasoning_item import Summary

import strata
from strata.agents import CLEAR_KIND, RETRY_KIND, StrataSession, strata_context_filter

pytestmark = pytest.mark.anyio

BIG_OUTPUT = "".join(f"line {i}: value {i * 7}\n" for i in range(1_200))  # > 8 KiB: an artifact

#: One item of every kind the SDK's input items can be (``ResponseInputItemParam``), several of
#: the common ones in the shapes the SDK writes them.
ITEMS: list[dict[str, Any]] = [
    {"content": "What is 6 times 7?", "role": "user"},
    {"content": "Answer in one line.", "role": "system"},
    {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "Be terse."}],
    },
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this picture?"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
                "detail": "auto",
            },
        ],
    },
    {
        "id": "rs_1",
        "summary": [{"text": "Multiply first.", "type": "summary_text"}],
        "type": "reasoning",
        "encrypted_content": "gAAAAB-opaque",
    },
    {
        "arguments": '{"a":6,"b":7}',
        "call_id": "call_mul",
        "name": "multiply",
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
    },
    {"call_id": "call_mul", "output": "42", "type": "function_call_output"},
    {
        "arguments": '{ "a": 1 }',
        "call_id": "call_spaced",
        "name": "multiply",
        "type": "function_call",
    },
    {"arguments": "not json", "call_id": "call_text", "name": "echo", "type": "function_call"},
    {
        "call_id": "call_spaced",
        "output": [
            {"type": "input_text", "text": "1"},
            {"type": "input_image", "image_url": "https://example.invalid/x.png"},
        ],
        "type": "function_call_output",
    },
    {"call_id": "call_text", "output": BIG_OUTPUT, "type": "function_call_output"},
    {
        "id": "msg_1",
        "content": [
            {"annotations": [], "text": "6 \u00d7 7 = 42", "type": "output_text", "logprobs": []}
        ],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {
        "id": "msg_2",
        "content": [
            {"annotations": [], "text": "Part one.", "type": "output_text"},
            {"annotations": [], "text": "Part two.", "type": "output_text"},
            {"refusal": "Not that.", "type": "refusal"},
        ],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {
        "id": "ws_1",
        "status": "completed",
        "type": "web_search_call",
        "action": {"type": "search", "query": "six times seven"},
    },
    {
        "id": "fs_1",
        "queries": ["multiplication"],
        "status": "completed",
        "type": "file_search_call",
        "results": None,
    },
    {
        "id": "cu_1",
        "call_id": "call_cu",
        "action": {"type": "click", "button": "left", "x": 3, "y": 4},
        "pending_safety_checks": [],
        "status": "completed",
        "type": "computer_call",
    },
    {
        "call_id": "call_cu",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA=="},
        "type": "computer_call_output",
    },
    {
        "id": "ci_1",
        "code": "print(6*7)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "42"}],
        "status": "completed",
        "type": "code_interpreter_call",
    },
    {"id": "ig_1", "result": None, "status": "generating", "type": "image_generation_call"},
    {
        "id": "ls_1",
        "call_id": "call_ls",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
        "type": "local_shell_call",
    },
    {"id": "call_ls", "output": "README.md\n", "type": "local_shell_call_output"},
    {
        "id": "sh_1",
        "call_id": "call_sh",
        "action": {"commands": ["pwd"]},
        "type": "shell_call",
        "status": "completed",
    },
    {
        "call_id": "call_sh",
        "output": [{"stdout": "/\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        "type": "shell_call_output",
    },
    {
        "id": "ap_1",
        "call_id": "call_ap",
        "operation": {"type": "delete_file", "path": "old.txt"},
        "status": "completed",
        "type": "apply_patch_call",
    },
    {
        "call_id": "call_ap",
        "status": "completed",
        "type": "apply_patch_call_output",
        "output": "deleted",
    },
    {
        "id": "ml_1",
        "server_label": "docs",
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
        "type": "mcp_list_tools",
    },
    {
        "id": "ma_1",
        "arguments": "{}",
        "name": "search",
        "server_label": "docs",
        "type": "mcp_approval_request",
    },
    {"approval_request_id": "ma_1", "approve": True, "type": "mcp_approval_response"},
    {
        "id": "mc_1",
        "arguments": "{}",
        "name": "search",
        "server_label": "docs",
        "type": "mcp_call",
        "output": "found",
    },
    {
        "call_id": "call_cust",
        "input": "raw input",
        "name": "grammar_tool",
        "type": "custom_tool_call",
    },
    {"call_id": "call_cust", "output": "ok", "type": "custom_tool_call_output"},
    {"id": "msg_1", "type": "item_reference"},
    {"id": "cmp_1", "encrypted_content": "opaque-compaction", "type": "compaction"},
    {
        "call_id": "call_ts",
        "arguments": {"query": "math"},
        "execution": "client",
        "type": "tool_search_call",
    },
    {"call_id": "call_ts", "tools": [], "execution": "client", "type": "tool_search_output"},
    {"role": "developer", "tools": [{"type": "web_search"}], "type": "additional_tools"},
    {"type": "configuration_update", "reasoning": {"effort": "low"}, "text": {"verbosity": "low"}},
    {"type": "compaction_trigger"},
    {"id": "pg_1", "call_id": "call_pg", "code": "x = 1", "fingerprint": "f1", "type": "program"},
    {
        "id": "po_1",
        "call_id": "call_pg",
        "result": "1",
        "status": "completed",
        "type": "program_output",
    },
]


def _as_items(items: list[dict[str, Any]]) -> list[TResponseInputItem]:
    return typing.cast("list[TResponseInputItem]", items)


def _field(item: TResponseInputItem | None, name: str) -> Any:
    assert item is not None
    return typing.cast("dict[str, Any]", item)[name]


def _literals(hint: Any) -> set[str]:
    if typing.get_origin(hint) is typing.Literal:
        return {a for a in typing.get_args(hint) if isinstance(a, str)}
    return set().union(*(_literals(a) for a in typing.get_args(hint)))


def _sdk_item_types() -> set[str]:
    """The ``type`` values of every item the SDK's input union holds."""
    members = typing.get_args(ResponseInputItemParam)
    return set().union(*(_literals(typing.get_type_hints(m).get("type")) for m in members))


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[strata.AsyncClient]:
    async with strata.AsyncClient(server.url, server.api_key) as c:
        yield c


def test_the_fixture_holds_every_item_type_the_sdk_has() -> None:
    written = {item.get("type", "message") for item in ITEMS}
    missing = _sdk_item_types() - written
    assert not missing, f"add an item of each type to ITEMS: {sorted(missing)}"


async def test_every_item_type_reads_back_as_written(
    aclient: strata.AsyncClient, session_id: str
) -> None:
    session = StrataSession(session_id, client=aclient)
    assert isinstance(session, Session)

    await session.add_items(_as_items(ITEMS[:10]))
    await session.add_items(_as_items(ITEMS[10:]))

    assert await session.get_items() == ITEMS
    assert await session.get_items(limit=3) == ITEMS[-3:]
    # A new object on the same session (a restarted worker) reads the same from the log.
    assert await StrataSession(session_id, client=aclient).get_items() == ITEMS
    kinds = [e.type async for e in aclient.events(session_id)]
    assert kinds[0] == "SessionStarted"
    assert kinds.count("ProviderItemRecorded") == sum(
        1
        for i in ITEMS
        if i.get("type", "message") not in ("message", "function_call", "function_call_output")
    )
    big = [
        e
        async for e in aclient.events(session_id)
        if e.type == "ToolCallFinished" and getattr(e.payload, "output_ref", None)
    ]
    assert len(big) == 1, "the big output is stored as an artifact and still reads back whole"
    # Provider items are kept for the SDK's history, never sent in an assembled context.
    context = json.dumps((await session.context()).payload)
    assert "gAAAAB-opaque" not in context and "opaque-compaction" not in context
    assert "What is 6 times 7?" in context


async def test_pop_item_forks_and_the_projection_forgets_the_item(
    aclient: strata.AsyncClient, session_id: str
) -> None:
    session = StrataSession(session_id, client=aclient)
    first = [
        {"content": "Run the tests.", "role": "user"},
        {
            "arguments": '{"filter":"all"}',
            "call_id": "call_t",
            "name": "run_tests",
            "type": "function_call",
        },
    ]
    await session.add_items(_as_items(first))
    assert await session.get_items() == first  # waits for the projection to have them
    assert (await aclient.state(session_id)).open_tool_calls

    popped = await session.pop_item()

    assert popped == first[-1]
    assert await session.get_items() == first[:1]
    branch = await session.branch()
    assert branch != "main"
    forks = [e async for e in aclient.events(session_id) if e.type == "BranchForked"]
    assert [getattr(f.payload, "kind", None) for f in forks] == [RETRY_KIND]
    # The call the popped item opened is not open on the fork: its state is its history's.
    context = await session.context()
    assert context.assembly.branch_id == branch
    assert "call_t" not in json.dumps(context.payload)
    # Nothing was deleted: the log still holds the item, on the abandoned branch.
    requested = [e async for e in aclient.events(session_id) if e.type == "ToolCallRequested"]
    assert [e.branch_id for e in requested] == ["main"]
    # A restarted worker finds the branch the session continues on.
    again = StrataSession(session_id, client=aclient)
    assert await again.branch() == branch
    assert await again.get_items() == first[:1]

    assert await session.pop_item() == first[0]
    assert await session.get_items() == []
    assert await session.pop_item() is None


async def test_clear_session_forks_at_the_start(
    aclient: strata.AsyncClient, session_id: str
) -> None:
    session = StrataSession(session_id, client=aclient, instructions="You are terse.")
    await session.add_items(_as_items([{"content": "hello", "role": "user"}]))

    await session.clear_session()

    assert await session.get_items() == []
    await session.add_items(_as_items([{"content": "again", "role": "user"}]))
    assert await session.get_items() == [{"content": "again", "role": "user"}]
    kinds = [
        getattr(e.payload, "kind", None)
        async for e in aclient.events(session_id)
        if e.type == "BranchForked"
    ]
    assert kinds == [CLEAR_KIND]
    context = await session.context()
    assert "hello" not in json.dumps(context.payload)
    assert "again" in json.dumps(context.payload)
    assert str(context.payload["instructions"]).startswith("You are terse.")


# --- a real Agent through Runner.run, with a scripted model ----------------------------------


class ScriptedModel(Model):
    """Returns canned outputs in order, and keeps the input of every call."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[TResponseInputItem]] = []
        self.instructions: list[str | None] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        self.inputs.append(
            list(input) if isinstance(input, list) else [{"role": "user", "content": input}]
        )
        self.instructions.append(system_instructions)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests do not stream")


def _message(text: str, item_id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _call(call_id: str, name: str, args: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        type="function_call",
        call_id=call_id,
        name=name,
        arguments=json.dumps(args, separators=(",", ":")),
        status="completed",
    )


@function_tool
def read_log(service: str) -> str:
    """Reads a service's log."""
    return f"{service}: ERROR connection refused to db:5432\n" + "ok\n" * 400


@function_tool
def restart(service: str) -> str:
    """Restarts a service."""
    return f"{service} restarted"


async def test_a_multi_turn_run_with_tools_a_resume_and_a_retried_turn(
    aclient: strata.AsyncClient, session_id: str
) -> None:
    model = ScriptedModel(
        [
            [
                ResponseReasoningItem(
                    id="rs_a",
                    type="reasoning",
                    summary=[Summary(type="summary_text", text="Read the log.")],
                ),
                _call("call_log", "read_log", {"service": "api"}),
            ],
            [_call("call_restart", "restart", {"service": "db"})],
            [_message("The database was down; I restarted it.", "msg_a")],
            [_message("It was refusing connections on 5432.", "msg_b")],
            [_message("Refused on port 5432.", "msg_c")],
        ]
    )
    agent = Agent(
        name="ops", instructions="You keep services up.", model=model, tools=[read_log, restart]
    )
    session = StrataSession(session_id, client=aclient)
    config = RunConfig(
        call_model_input_filter=strata_context_filter(session), tracing_disabled=True
    )

    first = await Runner.run(agent, "The API is failing.", session=session, run_config=config)

    assert first.final_output == "The database was down; I restarted it."
    assert len(model.inputs) == 3
    # Each call got Strata's context: the request and, by the third, both results.
    assert "The API is failing." in json.dumps(model.inputs[0])
    third = json.dumps(model.inputs[2])
    assert "connection refused" in third and "db restarted" in third
    assert all(i is not None and i.startswith("You keep services up.") for i in model.instructions)
    history = await session.get_items()
    assert [i.get("type", "message") for i in history] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]

    # A resumed run: a new session object (a restarted worker) carries on from the log.
    resumed = StrataSession(session_id, client=aclient)
    config = RunConfig(
        call_model_input_filter=strata_context_filter(resumed), tracing_disabled=True
    )
    second = await Runner.run(agent, "Why was it down?", session=resumed, run_config=config)
    assert second.final_output == "It was refusing connections on 5432."
    assert "The database was down" in json.dumps(model.inputs[3])

    # A retried turn: pop the answer and the question, ask again.
    assert _field(await resumed.pop_item(), "role") == "assistant"
    assert _field(await resumed.pop_item(), "content") == "Why was it down?"
    third_run = await Runner.run(agent, "Which port?", session=resumed, run_config=config)
    assert third_run.final_output == "Refused on port 5432."
    retried = json.dumps(model.inputs[4])
    assert "Which port?" in retried and "Why was it down?" not in retried
    texts = json.dumps(await resumed.get_items())
    assert "Why was it down?" not in texts and "Which port?" in texts
    assert len(await resumed.get_items()) == len(history) + 2
