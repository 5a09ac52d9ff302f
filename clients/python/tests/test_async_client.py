"""The asynchronous client against a real `strata dev`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from conftest import Server
from helpers import coding_session, eventually_async

import strata

pytestmark = pytest.mark.anyio


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[strata.AsyncClient]:
    async with strata.AsyncClient(server.url, server.api_key) as c:
        yield c


async def _events(
    client: strata.AsyncClient, session_id: str, page_size: int = 1000
) -> list[strata.Event]:
    return [e async for e in client.events(session_id, page_size=page_size)]


async def test_append_read_back_and_state(aclient: strata.AsyncClient, session_id: str) -> None:
    events, calls = coding_session(session_id)

    outcomes = await aclient.append(events)

    assert [o.status for o in outcomes] == ["accepted"] * len(events)
    read = await eventually_async(
        lambda: _events(aclient, session_id, page_size=3), lambda r: len(r) >= len(events)
    )
    assert [e.event_id for e in read[: len(events)]] == [e.event_id for e in events]
    state = await aclient.state(session_id)
    assert [c.tool_call_id for c in state.open_tool_calls] == [calls["rerun"].tool_call_id]


async def test_context_assembly_and_why_not(aclient: strata.AsyncClient, session_id: str) -> None:
    events, calls = coding_session(session_id)
    await aclient.append(events)

    ctx = await aclient.context(session_id, budget=6_000)

    assert calls["run_tests"].tool_call_id in json.dumps(ctx.payload)
    assembly_id = ctx.assembly.assembly_id
    record = await eventually_async(lambda: aclient.assembly(assembly_id), lambda a: True)
    assert record.context_tokens == ctx.assembly.context_tokens
    why = await aclient.assembly(assembly_id, why_not=events[1].event_id)
    assert why.reference == events[1].event_id
    assert any("current request" in line for line in why.explanation)


async def test_resend_compact_sessions_and_artifact(
    aclient: strata.AsyncClient, session_id: str
) -> None:
    b = strata.EventBuilder(session_id)
    call = strata.tool_call("cat", {"path": "big.log"})
    events = [b.model_response(tool_calls=[call]), b.tool_result(call.tool_call_id, "y" * 9_000)]
    first = await aclient.append(events)

    again = await aclient.append(events)

    assert [o.status for o in again] == ["duplicate", "duplicate"]
    assert [o.seq for o in again] == [o.seq for o in first]
    ref = first[1].output_ref
    assert ref is not None
    assert await eventually_async(lambda: aclient.artifact(ref), lambda d: True) == b"y" * 9_000
    assert await aclient.compact(session_id) is None
    listed = [s.session_id async for s in aclient.sessions(page_size=1000)]
    assert session_id in listed


async def test_errors_are_typed(server: Server, aclient: strata.AsyncClient) -> None:
    with pytest.raises(strata.NotFound):
        await aclient.state("py-no-such-session")
    async with strata.AsyncClient(server.url, "sk_wrong") as wrong:
        with pytest.raises(strata.Unauthorized):
            await wrong.state("py-no-such-session")
    with pytest.raises(ValueError, match="page_size"):
        aclient.events("s", page_size=0)


async def test_forget_a_session_and_an_unknown_user(
    aclient: strata.AsyncClient, session_id: str
) -> None:
    events, _ = coding_session(session_id)
    await aclient.append(events)
    await eventually_async(lambda: aclient.state(session_id), lambda s: s.head_seq >= len(events))

    report = await aclient.forget_session(session_id)

    assert report.session_id == session_id
    assert report.key_destroyed
    with pytest.raises(strata.NotFound):
        await aclient.session(session_id)
    nobody = await aclient.forget_user(f"nobody-{session_id}")
    assert nobody.sessions == []
    assert nobody.not_forgettable == []
