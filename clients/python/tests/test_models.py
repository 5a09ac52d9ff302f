"""Events and builders without a server: ids, timestamps, typed payloads, unknown fields."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

import strata
from strata.events import (
    PAYLOAD_TYPES,
    BranchForked,
    Causality,
    ModelResponseReceived,
    StateUpdated,
    ToolCallFailed,
    ToolCallFinished,
    UserPromptSubmitted,
)

T0 = datetime(2026, 6, 3, 10, 0, tzinfo=timezone.utc)


class TestBuilder:
    def test_ids_and_timestamps_are_generated(self) -> None:
        b = strata.EventBuilder("s1")
        before = datetime.now(timezone.utc)

        events = [b.user_prompt("a"), b.user_prompt("a")]

        assert events[0].event_id != events[1].event_id
        assert all(e.event_id.startswith("evt_") for e in events)
        assert all(before <= e.timestamp <= datetime.now(timezone.utc) for e in events)
        first = events[0].payload
        assert isinstance(first, UserPromptSubmitted) and first.message_id.startswith("msg_")

    def test_given_values_are_kept(self) -> None:
        b = strata.EventBuilder("s1", branch_id="alt", participant_id="coder", tenant_id="acme")

        e = b.user_prompt(
            "hi",
            message_id="m-1",
            event_id="e-1",
            timestamp=T0,
            actor="platform",
            parent_event_id="e-0",
            causality=Causality(message_id="m-1"),
            seq=4,
        )

        assert e.to_json() == {
            "event_id": "e-1",
            "tenant_id": "acme",
            "session_id": "s1",
            "branch_id": "alt",
            "seq": 4,
            "parent_event_id": "e-0",
            "timestamp": "2026-06-03T10:00:00Z",
            "type": "UserPromptSubmitted",
            "actor": "platform",
            "participant_id": "coder",
            "payload": {"message_id": "m-1", "text": "hi"},
            "causality": {"message_id": "m-1"},
        }

    def test_each_builder_makes_its_type_with_its_actor(self) -> None:
        b = strata.EventBuilder("s1")
        call = strata.tool_call("bash", {"cmd": "ls"}, tool_call_id="call-1")
        made = {
            "SessionStarted": b.session_started(
                provider="openai",
                model="gpt-4o",
                context_window_tokens=1000,
                reserved_output_tokens=100,
            ),
            "UserPromptSubmitted": b.user_prompt("hi"),
            "ModelResponseReceived": b.model_response("ok", tool_calls=[call]),
            "ToolCallFinished": b.tool_result("call-1", "out", is_error=True),
            "ToolCallFailed": b.tool_failure("call-1", "boom", retryable=True),
            "FileWritten": b.file_written("a.py", bytes=3),
            "BranchForked": b.fork("alt", "e-0"),
            "SubagentStarted": b.subagent_started("s1.sub", task="look"),
            "SubagentFinished": b.subagent_finished("s1.sub", "done"),
        }
        actors = {
            "SessionStarted": "platform",
            "UserPromptSubmitted": "user",
            "ModelResponseReceived": "assistant",
            "ToolCallFinished": "tool",
            "ToolCallFailed": "tool",
            "FileWritten": "tool",
            "BranchForked": "platform",
            "SubagentStarted": "platform",
            "SubagentFinished": "platform",
        }

        for event_type, event in made.items():
            assert event.type == event_type
            assert isinstance(event.payload, PAYLOAD_TYPES[event_type])
            assert event.actor == actors[event_type]
        response = made["ModelResponseReceived"].to_json()["payload"]
        assert response["tool_calls"] == [
            {"tool_call_id": "call-1", "name": "bash", "args": {"cmd": "ls"}}
        ]
        assert made["ToolCallFailed"].to_json()["payload"] == {
            "tool_call_id": "call-1",
            "error": "boom",
            "retryable": True,
        }

    def test_branch_and_child_builders(self) -> None:
        b = strata.EventBuilder("s1", participant_id="coder", tenant_id="acme")

        alt, child = b.on_branch("alt"), b.for_child("s1.sub", participant_id="helper")

        assert (alt.session_id, alt.branch_id, alt.participant_id, alt.tenant_id) == (
            "s1",
            "alt",
            "coder",
            "acme",
        )
        assert (child.session_id, child.branch_id, child.participant_id, child.tenant_id) == (
            "s1.sub",
            "main",
            "helper",
            "acme",
        )
        fork = b.fork("alt", "e-1", kind="what_if")
        assert fork.branch_id == "main" and isinstance(fork.payload, BranchForked)

    def test_tool_calls_get_ids(self) -> None:
        assert strata.tool_call("a").tool_call_id != strata.tool_call("a").tool_call_id
        assert strata.tool_call("a", tool_call_id="toolu_1").tool_call_id == "toolu_1"

    def test_bad_input_is_refused(self) -> None:
        b = strata.EventBuilder("s1")
        with pytest.raises(TypeError, match="parnt_event_id"):
            b.user_prompt("hi", parnt_event_id="e")  # type: ignore[call-arg]
        with pytest.raises(ValidationError, match="timezone"):
            b.user_prompt("hi", timestamp=datetime(2026, 1, 1))
        with pytest.raises(ValueError, match="session_id"):
            strata.EventBuilder("")
        with pytest.raises(ValidationError, match="event_id"):
            b.user_prompt("hi", event_id="")


class TestEvent:
    WIRE: ClassVar[dict[str, Any]] = {
        "event_id": "e1",
        "session_id": "s1",
        "timestamp": "2026-06-03T12:00:00.5+02:00",
        "type": "ToolCallFinished",
        "payload": {"tool_call_id": "c1", "output": "ok", "exit_code": 0},
        "ingest_node": "ingest-1",
    }

    def test_the_payload_is_parsed_as_its_type(self) -> None:
        e = strata.Event.model_validate(self.WIRE)

        assert isinstance(e.payload, ToolCallFinished)
        assert e.payload.output == "ok" and e.payload.is_error is False
        assert e.timestamp == T0 + timedelta(milliseconds=500)

    def test_unknown_fields_survive_a_round_trip(self) -> None:
        wire = strata.Event.model_validate(self.WIRE).to_json()

        assert wire["ingest_node"] == "ingest-1"
        assert wire["payload"]["exit_code"] == 0
        assert wire["timestamp"] == "2026-06-03T12:00:00.500000+02:00"
        assert strata.Event.model_validate(wire).to_json() == wire

    def test_absent_state_fields_stay_absent(self) -> None:
        # StateUpdated: an absent field keeps the branch's value, so it must never go as null.
        e = strata.EventBuilder("s1").event(
            StateUpdated(goal="ship it"), event_id="e", timestamp=T0
        )

        assert e.to_json()["payload"] == {"goal": "ship it"}

    def test_a_payload_of_another_type_is_refused(self) -> None:
        with pytest.raises(ValidationError, match="cannot be the payload of a ToolCallFinished"):
            strata.Event(
                event_id="e",
                session_id="s",
                timestamp=T0,
                type="ToolCallFinished",
                payload=ToolCallFailed(tool_call_id="c", error="x"),
            )

    def test_the_type_comes_from_a_typed_payload(self) -> None:
        e = strata.Event.model_validate(
            {
                "event_id": "e",
                "session_id": "s",
                "timestamp": T0,
                "payload": ModelResponseReceived(message_id="m"),
            }
        )

        assert e.type == "ModelResponseReceived"

    def test_errors_name_the_field(self) -> None:
        wire = {**self.WIRE, "payload": {"output": "no call id"}}
        with pytest.raises(ValidationError) as caught:
            strata.Event.model_validate(wire)
        assert [err["loc"] for err in caught.value.errors()] == [("payload", "tool_call_id")]

        with pytest.raises(ValidationError) as caught:
            strata.Event.model_validate({**self.WIRE, "type": "ToolCallDone", "payload": [1]})
        # One error, the type's; not one per payload shape the value does not fit.
        assert [err["loc"] for err in caught.value.errors()] == [("type",)]

    def test_tool_specs_keep_their_schema_under_its_wire_name(self) -> None:
        spec = strata.ToolSpec.model_validate({"name": "bash", "schema": {"type": "object"}})

        assert spec.json_schema == {"type": "object"}
        assert spec.model_dump(by_alias=True) == {
            "name": "bash",
            "description": "",
            "schema": {"type": "object"},
        }
