"""The synchronous client against a real `strata dev`: every method, for real."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest
from conftest import Server
from helpers import coding_session, eventually

import strata
from strata.events import ModelResponseReceived, ToolCallFinished, UserPromptSubmitted


def test_append_then_read_back_events(client: strata.Client, session_id: str) -> None:
    events, calls = coding_session(session_id)

    outcomes = client.append(events)

    assert [o.event_id for o in outcomes] == [e.event_id for e in events]
    assert [o.status for o in outcomes] == ["accepted"] * len(events)
    assert [o.seq for o in outcomes] == list(range(1, len(events) + 1))
    read = eventually(lambda: list(client.events(session_id)), lambda r: len(r) >= len(events))
    mine = [e for e in read if e.event_id in {x.event_id for x in events}]
    assert [e.event_id for e in mine] == [e.event_id for e in events]
    for sent, got in zip(events, mine, strict=True):
        assert got.type == sent.type
        assert got.timestamp == sent.timestamp
        assert got.tenant_id == "dev"
        assert got.participant_id == "coder"
        assert got.payload == sent.payload
    response = mine[2].payload
    assert isinstance(response, ModelResponseReceived)
    # A JSON null inside tool arguments survives the round trip.
    assert response.tool_calls[0].args == {"filter": "invoice", "verbose": None}
    assert response.tool_calls[1].tool_call_id == calls["read"].tool_call_id


def test_state_follows_the_tool_calls(client: strata.Client, session_id: str) -> None:
    events, calls = coding_session(session_id)
    client.append(events)

    state = eventually(lambda: client.state(session_id), lambda s: s.head_seq >= len(events))

    assert state.session_id == session_id
    assert [c.tool_call_id for c in state.open_tool_calls] == [calls["rerun"].tool_call_id]
    assert state.open_tool_calls[0].name == "run_tests"
    main = state.branches["main"]
    assert [f.text for f in main.state.files_modified] == ["src/invoice.py"]
    errors = {e.tool_call_id: e for e in main.state.errors}
    assert errors[calls["read"].tool_call_id].retryable is True
    assert state.stats.tool_failures >= 1


def test_a_restarted_worker_resumes_from_the_session(
    client: strata.Client, session_id: str
) -> None:
    events, calls = coding_session(session_id)
    client.append(events)

    resumed = eventually(lambda: client.session(session_id), lambda s: s.head_seq >= len(events))

    assert resumed.session_id == session_id
    assert resumed.status == "awaiting_tool_results"
    assert [c.tool_call_id for c in resumed.open_tool_calls] == [calls["rerun"].tool_call_id]
    assert resumed.model is not None
    assert resumed.model.context_window_tokens > 0
    (main,) = resumed.branches
    assert main.branch_id == "main"
    assert main.head_seq == resumed.head_seq
    assert main.events >= len(events)  # and what the services derived on it
    with pytest.raises(strata.NotFound):
        client.session(f"{session_id}-never-started")


def test_context_of_a_session_with_tool_calls(client: strata.Client, session_id: str) -> None:
    events, calls = coding_session(session_id)
    client.append(events)

    ctx = client.context(session_id, budget=8_000, request="Did the fix work?")

    assert ctx.recorded is True
    assert ctx.assembly.session_id == session_id
    assert ctx.assembly.budget_tokens == 8_000
    assert 0 < ctx.assembly.context_tokens <= 8_000
    messages = ctx.payload["messages"]
    assert isinstance(messages, list)
    sent = json.dumps(messages)
    assert calls["run_tests"].tool_call_id in sent
    assert "10.06 != 10.05" in sent
    assert "Did the fix work?" in sent
    kinds = {s.kind for s in ctx.assembly.included}
    assert "system_prompt" in kinds
    assert all(s.tier in ("P0", "P1", "P2", "P3") for s in ctx.assembly.included)


def test_context_in_the_anthropic_format(client: strata.Client, session_id: str) -> None:
    events, _ = coding_session(session_id)
    client.append(events)

    ctx = client.context(session_id, provider="anthropic")

    assert ctx.assembly.provider == "anthropic"
    # Anthropic's messages API takes the system prompt apart from the messages.
    assert "system" in ctx.payload
    messages = ctx.payload["messages"]
    assert isinstance(messages, list) and messages
    assert {m["role"] for m in messages if isinstance(m, dict)} <= {"user", "assistant"}


def test_assembly_lookup_and_why_not(client: strata.Client, session_id: str) -> None:
    events, calls = coding_session(session_id)
    client.append(events)
    ctx = client.context(session_id, trace=True)
    assembly_id = ctx.assembly.assembly_id

    record = eventually(lambda: client.assembly(assembly_id), lambda a: True)

    assert record.assembly_id == assembly_id
    assert record.traced is True
    assert record.bundle_sha256 == ctx.assembly.bundle_sha256
    assert [s.id for s in record.included] == [s.id for s in ctx.assembly.included]
    why = client.assembly(assembly_id, why_not=calls["run_tests"].tool_call_id)
    assert isinstance(why, strata.WhyNot)
    assert why.reference == calls["run_tests"].tool_call_id
    assert why.explanation and any("included in" in line for line in why.explanation)


def test_a_response_links_to_the_context_it_answered(
    client: strata.Client, session_id: str
) -> None:
    events, calls = coding_session(session_id)
    b = strata.EventBuilder(session_id, participant_id="coder")
    client.append([*events, b.tool_result(calls["rerun"].tool_call_id, "4 passed")])
    ctx = client.context(session_id)

    answer = b.model_response("All green.", assembly_id=ctx.assembly.assembly_id)
    client.append([answer])

    logged = eventually(
        lambda: [e for e in client.events(session_id) if e.event_id == answer.event_id],
        lambda found: len(found) == 1,
    )[0]
    linked = logged.payload.model_dump()["assembly_id"]
    assert linked == ctx.assembly.assembly_id
    record = eventually(lambda: client.assembly(linked), lambda a: True)
    assert record.session_id == session_id


def test_events_follow_pagination(server: Server, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    events = [b.user_prompt(f"prompt {i}") for i in range(25)]
    pages: list[httpx.Request] = []

    def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/events"):
            pages.append(request)

    with (
        httpx.Client(event_hooks={"request": [record]}) as http,
        strata.Client(server.url, server.api_key, http_client=http) as client,
    ):
        client.append(events)
        eventually(lambda: client.state(session_id), lambda s: s.head_seq >= 25)
        pages.clear()

        read = list(client.events(session_id, page_size=10))

    assert [e.event_id for e in read] == [e.event_id for e in events]
    assert [e.seq for e in read] == list(range(1, 26))
    assert [p.url.params["after_seq"] for p in pages] == ["0", "10", "20"]
    assert {p.url.params["limit"] for p in pages} == {"10"}


def test_events_after_a_seq(client: strata.Client, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    client.append([b.user_prompt(f"prompt {i}") for i in range(5)])
    eventually(lambda: client.state(session_id), lambda s: s.head_seq >= 5)

    assert [e.seq for e in client.events(session_id, after_seq=3)] == [4, 5]


def test_sessions_follow_pagination(client: strata.Client) -> None:
    prefix = f"py-list-{strata.new_id('s')[2:12]}"
    ids = [f"{prefix}-{i}" for i in range(3)]
    for sid in ids:
        client.append([strata.EventBuilder(sid).user_prompt("hello")])

    listed = eventually(
        lambda: [s.session_id for s in client.sessions(page_size=2)],
        lambda listed: set(ids) <= set(listed),
    )

    assert listed == sorted(listed, key=lambda s: s.encode())
    assert len(listed) == len(set(listed))
    after = [s.session_id for s in client.sessions(after=ids[0], page_size=1)]
    assert ids[0] not in after and ids[1] in after and ids[2] in after
    found = list(client.sessions(matching=prefix, page_size=2))
    assert [s.session_id for s in found] == ids
    assert all(s.event_count == 1 and s.last_event_at for s in found)


def test_compact_a_long_session(client: strata.Client, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    events = [
        b.session_started(
            provider="openai",
            model="gpt-4o",
            context_window_tokens=128_000,
            reserved_output_tokens=8_000,
        )
    ]
    for i in range(5):
        call = strata.tool_call("shell", {"cmd": f"make step-{i}"})
        events += [
            b.user_prompt(f"Do step {i}."),
            b.model_response(f"Doing step {i}.", tool_calls=[call]),
            b.tool_result(call.tool_call_id, f"step {i} done\n" * 20),
            b.file_written(f"src/step_{i}.py"),
        ]
    client.append(events)
    eventually(lambda: client.state(session_id), lambda s: s.head_seq >= len(events))

    record = client.compact(session_id, keep_turns=2)

    assert record is not None
    assert record.succeeded and record.check.passed
    assert record.session_id == session_id
    assert record.tokens_after < record.tokens_before
    assert {"src/step_0.py", "src/step_1.py", "src/step_2.py"} <= set(record.files_modified)
    assert record.first_kept_event_id == events[1 + 4 * 3].event_id
    assert client.compact(session_id, keep_turns=2) is None

    # A failed check is answered 422 with the record, which is returned, not raised. The
    # deterministic summarizer cannot be made to fail on demand, so this answer is scripted
    # from the real record.
    failed = record.model_dump(mode="json")
    failed["status"] = "failed"
    failed["check"] |= {"passed": False, "failures": ["drops the modified file src/step_0.py"]}
    answer = httpx.MockTransport(lambda request: httpx.Response(422, json=failed))
    with httpx.Client(transport=answer) as http:
        rejected = strata.Client(client.url, "sk", http_client=http).compact(session_id)
    assert rejected is not None and not rejected.succeeded
    assert rejected.check.failures == ["drops the modified file src/step_0.py"]


def test_artifact_of_a_large_output(client: strata.Client, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    call = strata.tool_call("cat", {"path": "big.log"})
    output = "".join(f"line {i}: {'x' * 60}\n" for i in range(400))
    outcomes = client.append(
        [
            b.model_response(tool_calls=[call]),
            b.tool_result(call.tool_call_id, output),
        ]
    )
    ref = outcomes[1].output_ref
    digest = hashlib.sha256(output.encode()).hexdigest()
    assert ref == f"artifact:sha256:{digest}"

    data = eventually(lambda: client.artifact(ref), lambda d: True)

    assert data == output.encode()
    assert client.artifact(digest) == data
    stored = eventually(lambda: list(client.events(session_id)), lambda r: len(r) >= 2)[1].payload
    assert isinstance(stored, ToolCallFinished)
    assert stored.output is None and stored.output_sha256 == digest
    assert stored.output_bytes == len(output.encode())


def test_context_rehydrates_an_output_byte_for_byte(client: strata.Client, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    call = strata.tool_call("export_csv", {"table": "invoices"})
    rows = "".join(f"{i},invoice-{i},{i * 3.25:.2f}\n" for i in range(600))
    client.append(
        [
            b.user_prompt("Export the invoices."),
            b.model_response(tool_calls=[call]),
            b.tool_result(call.tool_call_id, rows),
        ]
    )

    # Policy 3: the default (the long-turn policy) rehydrates the newest observation unasked.
    plain = client.context(session_id, policy="strata.assembly/3")
    exact = client.context(session_id, policy="strata.assembly/3", rehydrate=[call.tool_call_id])
    unasked = client.context(session_id)

    encoded = json.dumps(rows.strip())[1:-1]  # as it appears inside the JSON payload
    assert encoded not in json.dumps(plain.payload)
    assert encoded in json.dumps(exact.payload)
    [decision] = exact.assembly.rehydrations
    assert decision.rehydrated is True and decision.tool_call_id == call.tool_call_id
    assert decision.bytes == len(rows.encode())
    assert encoded in json.dumps(unasked.payload)
    [working_set] = unasked.assembly.rehydrations
    assert working_set.rehydrated is True and "newest observation" in working_set.reason


def test_artifact_withheld_by_privacy(client: strata.Client, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    call = strata.tool_call("vault.read", {"key": "db"})
    outcomes = client.append(
        [
            b.model_response(tool_calls=[call]),
            b.tool_result(call.tool_call_id, "secret\n" * 2_000, privacy_class="restricted"),
        ]
    )
    ref = outcomes[1].output_ref
    assert ref is not None
    eventually(lambda: client.state(session_id), lambda s: s.head_seq >= 2)

    with pytest.raises(strata.Forbidden) as caught:
        client.artifact(ref)

    assert caught.value.status == 403 and caught.value.code == "forbidden"
    assert "privacy" in caught.value.message


def test_resending_a_batch_appends_it_once(client: strata.Client, session_id: str) -> None:
    events, _ = coding_session(session_id)
    first = client.append(events)

    again = client.append(events)

    assert [o.status for o in again] == ["duplicate"] * len(events)
    assert [o.seq for o in again] == [o.seq for o in first]
    read = eventually(lambda: list(client.events(session_id)), lambda r: len(r) >= len(events))
    ids = [e.event_id for e in read]
    assert len(ids) == len(set(ids))
    assert sum(e.type == "UserPromptSubmitted" for e in read) == 1


def test_ids_with_any_character_round_trip(client: strata.Client) -> None:
    session_id = f"py/{strata.new_id('s')} with spaces/é"
    client.append([strata.EventBuilder(session_id).user_prompt("hi")])

    read = eventually(lambda: list(client.events(session_id)), lambda r: len(r) == 1)

    assert read[0].session_id == session_id
    assert isinstance(read[0].payload, UserPromptSubmitted)
    assert client.state(session_id).session_id == session_id


def test_fork_and_subagent_events(client: strata.Client, session_id: str) -> None:
    b = strata.EventBuilder(session_id)
    prompt = b.user_prompt("Try two fixes.")
    child_id = f"{session_id}.sub"
    child = b.for_child(child_id)
    alt = b.on_branch("alt")
    events = [
        prompt,
        b.fork("alt", prompt.event_id, kind="what_if"),
        alt.user_prompt("Try the other fix on this branch."),
        b.subagent_started(child_id, task="find the rounding code"),
        b.subagent_finished(child_id, "found it in src/invoice.py", artifacts=["artifact:x"]),
    ]
    client.append(events)
    client.append([child.user_prompt("find the rounding code")])

    state = eventually(lambda: client.state(session_id), lambda s: s.head_seq >= len(events))

    assert state.branches["alt"].kind == "what_if"
    assert state.branches["alt"].parent_branch_id == "main"
    assert state.branches["alt"].fork_event_id == prompt.event_id
    [sub] = state.branches["main"].state.subagents
    assert sub.child_session_id == child_id and sub.finished and sub.status == "succeeded"
    assert sub.report == "found it in src/invoice.py"
    on_alt = client.context(session_id, branch="alt")
    assert "Try the other fix" in json.dumps(on_alt.payload)
    assert "Try the other fix" not in json.dumps(client.context(session_id).payload)


class TestErrors:
    def test_invalid_events_list_every_field_error(
        self, client: strata.Client, session_id: str
    ) -> None:
        b = strata.EventBuilder(session_id)
        good = b.user_prompt("hi")
        no_output = b.event(ToolCallFinished(tool_call_id="call-1"))

        with pytest.raises(strata.InvalidEvents) as caught:
            client.append([good, no_output])

        error = caught.value
        assert isinstance(error, strata.BadRequest)
        assert (error.status, error.code) == (400, "invalid_events")
        [invalid] = error.events
        assert invalid.index == 1 and invalid.event_id == no_output.event_id
        assert [f.field for f in invalid.errors] == ["payload.output"]
        # All or nothing: the valid event was not appended either.
        with pytest.raises(strata.NotFound):
            client.state(session_id)

    def test_a_malformed_mapping_fails_before_sending(self, client: strata.Client) -> None:
        with pytest.raises(ValueError, match="timestamp"):
            client.append(
                [
                    {
                        "event_id": "e1",
                        "session_id": "s",
                        "type": "UserPromptSubmitted",
                        "payload": {"message_id": "m", "text": "t"},
                    }
                ]
            )
        with pytest.raises(ValueError, match="at least one event"):
            client.append([])

    def test_wrong_key_is_unauthorized(self, server: Server) -> None:
        with (
            strata.Client(server.url, "sk_not_a_key") as c,
            pytest.raises(strata.Unauthorized) as caught,
        ):
            c.state("anything")

        assert (caught.value.status, caught.value.code) == (401, "unauthorized")
        assert caught.value.message == "unknown api key"

    def test_unknown_session_is_not_found(self, client: strata.Client) -> None:
        for read in (
            lambda: client.state("py-no-such-session"),
            lambda: list(client.events("py-no-such-session")),
            lambda: client.context("py-no-such-session"),
        ):
            with pytest.raises(strata.NotFound) as caught:
                read()
            assert caught.value.status == 404 and "py-no-such-session" in caught.value.message

    def test_unknown_assembly_and_artifact_are_not_found(self, client: strata.Client) -> None:
        with pytest.raises(strata.NotFound):
            client.assembly("asm_nope")
        with pytest.raises(strata.NotFound):
            client.artifact("0" * 64)
        with pytest.raises(ValueError, match="not an artifact"):
            client.artifact("not-a-digest")

    def test_another_tenant_sees_nothing(
        self, server: Server, client: strata.Client, session_id: str
    ) -> None:
        client.append([strata.EventBuilder(session_id).user_prompt("mine")])
        eventually(lambda: client.state(session_id), lambda s: True)

        with strata.Client(server.url, server.other_api_key) as other:
            with pytest.raises(strata.NotFound):
                other.state(session_id)
            # An event naming another tenant than the key's is refused.
            foreign = strata.EventBuilder(session_id, tenant_id="dev").user_prompt("not yours")
            with pytest.raises(strata.Forbidden) as caught:
                other.append([foreign])
        assert "tenant" in caught.value.message

    def test_derived_types_are_forbidden(self, client: strata.Client, session_id: str) -> None:
        built = strata.EventBuilder(session_id).event(
            strata.events.ContextBuilt(assembly_id="asm_x", context_tokens=1, transcript_tokens=1)
        )
        with pytest.raises(strata.Forbidden, match="ContextBuilt"):
            client.append([built])

    def test_stale_expected_seq_is_a_conflict(self, client: strata.Client, session_id: str) -> None:
        b = strata.EventBuilder(session_id)
        client.append([b.user_prompt("one"), b.user_prompt("two")])

        with pytest.raises(strata.Conflict) as caught:
            client.append([b.user_prompt("three", expected_seq=1)])

        assert caught.value.status == 409 and "expected seq 1" in caught.value.message
        assert client.append([b.user_prompt("three", expected_seq=2)])[0].seq == 3

    def test_server_side_bad_request(self, client: strata.Client, session_id: str) -> None:
        b = strata.EventBuilder(session_id)
        client.append([b.user_prompt("hi")])
        eventually(lambda: client.state(session_id), lambda s: s.head_seq >= 1)

        # A bidi override makes two branch names that print alike differ: the server refuses it.
        with pytest.raises(strata.BadRequest) as caught:
            client.context(session_id, branch="main\u202e")

        assert caught.value.code == "bad_request" and "branch" in caught.value.message

    def test_compacting_a_branch_the_session_lacks_is_not_found(
        self, client: strata.Client, session_id: str
    ) -> None:
        b = strata.EventBuilder(session_id)
        client.append([b.user_prompt("hi"), b.fork("alt", "whatever")])
        # Compaction reads the projections, which trail the append.
        eventually(lambda: client.state(session_id), lambda s: s.head_seq >= 2)

        assert client.compact(session_id, branch="alt") is None, "nothing to compact yet"
        with pytest.raises(strata.NotFound) as caught:
            client.compact(session_id, branch="nope")

        assert "nope" in caught.value.message

    def test_client_side_validation_of_context_arguments(self, client: strata.Client) -> None:
        with pytest.raises(ValueError, match="provider"):
            client.context("s", provider="gemini")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="budget"):
            client.context("s", budget=0)
        with pytest.raises(ValueError, match="Sequence"):
            client.context("s", rehydrate="call_1")
        with pytest.raises(ValueError, match="page_size"):
            client.events("s", page_size=10_001)
        with pytest.raises(ValueError, match="session_id"):
            client.state("")


def test_tool_arguments_as_json_text_are_stored_as_the_object(
    server: Server, client: strata.Client, session_id: str
) -> None:
    """OpenAI's `function.arguments` is JSON text; the server stores the object it holds, and
    refuses other text with a 400 that names the field."""
    from pydantic import ValidationError

    from strata.events import ToolCall

    assert ToolCall(tool_call_id="c", name="run", args='{"cmd": "ls -la"}').args == {
        "cmd": "ls -la"
    }
    with pytest.raises(ValidationError, match="args"):
        ToolCall(tool_call_id="c", name="run", args="ls -la")
    raw = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.api_key}"})

    def event(n: int, args: object) -> dict[str, object]:
        return {
            "event_id": f"{session_id}-args-{n}",
            "session_id": session_id,
            "timestamp": "2026-06-03T10:00:00Z",
            "type": "ModelResponseReceived",
            "payload": {
                "message_id": f"m{n}",
                "tool_calls": [{"tool_call_id": f"c{n}", "name": "shell", "args": args}],
            },
        }

    accepted = raw.post("/v1/events", json={"events": [event(1, '{"cmd": "ls -la"}')]})
    assert accepted.status_code == 200, accepted.text
    refused = raw.post("/v1/events", json={"events": [event(2, "ls -la"), event(3, 42)]})
    assert refused.status_code == 400, refused.text
    invalid = refused.json()["error"]["details"]["events"]
    fields = [e["field"] for ev in invalid for e in ev["errors"]]
    assert fields == ["payload.tool_calls[0].args", "payload.tool_calls[0].args"]
    read = eventually(lambda: list(client.events(session_id)), lambda r: len(r) >= 1)
    (response,) = [e.payload for e in read if e.event_id == f"{session_id}-args-1"]
    assert isinstance(response, ModelResponseReceived)
    assert response.tool_calls[0].args == {"cmd": "ls -la"}
    raw.close()


def test_an_event_id_resent_with_other_content_is_a_conflict(
    client: strata.Client, session_id: str
) -> None:
    prompt = UserPromptSubmitted(message_id="m1", text="first words")
    first = strata.EventBuilder(session_id).event(prompt)
    (outcome,) = client.append([first])
    assert outcome.status == "accepted"
    (again,) = client.append([first])
    assert again.status == "duplicate"

    changed = first.model_copy(
        update={"payload": UserPromptSubmitted(message_id="m1", text="OTHER words")}
    )
    with pytest.raises(strata.EventIdConflict) as caught:
        client.append([changed])
    (conflict,) = caught.value.events
    assert conflict["event_id"] == first.event_id
    assert [d["field"] for d in conflict["differs"]] in (["event"], ["payload.text"])
    assert "OTHER" not in str(caught.value.details)


def test_a_session_and_an_end_user_are_forgotten(client: strata.Client, session_id: str) -> None:
    events, _ = coding_session(session_id)
    client.append(events)
    eventually(lambda: client.state(session_id), lambda s: s.head_seq >= len(events))

    report = client.forget_session(session_id)

    assert report.session_id == session_id
    assert report.key_destroyed
    assert report.sealed_events >= len(events)
    with pytest.raises(strata.NotFound):
        client.session(session_id)
    with pytest.raises(strata.NotFound):
        client.forget_session(session_id)

    user, served = f"user-{session_id}", f"{session_id}-served"
    start = {
        "event_id": f"{served}-1",
        "session_id": served,
        "timestamp": "2026-06-03T10:00:00Z",
        "type": "SessionStarted",
        "payload": {
            "model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 32_000,
            "reserved_output_tokens": 4_000,
            "user_id": user,
        },
    }
    client.append([start])
    eventually(lambda: client.state(served), lambda s: s.head_seq >= 1)

    forgotten = client.forget_user(user)

    assert [r.session_id for r in forgotten.sessions] == [served]
    assert forgotten.not_forgettable == []
    with pytest.raises(strata.NotFound):
        client.session(served)
    assert client.forget_user(user).sessions == [], "what is gone stays gone"
