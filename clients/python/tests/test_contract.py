"""The models against the server's own documents: fails when either drifts from the other.

`strata dev` serves no OpenAPI document (no route answers one), so the document checked is the
repository's `docs/openapi.yaml`. Payload shapes are checked against `schemas/event.avsc`, the
schema the log itself is written with (the document's payload schemas are generated from the
server's Rust types, and a Rust test holds them to the same Avro field names). Required and
optional fields are checked by behaviour: a valid object minus one field must fail to validate
exactly when the document requires that field.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, get_args

import httpx
import pytest
import yaml
from conftest import REPO_ROOT, Server
from pydantic import BaseModel, ValidationError

import strata
from strata import _api
from strata.events import (
    PAYLOAD_TYPES,
    Causality,
    EventType,
    FreshnessClass,
    ModelRef,
    PrivacyClass,
    ToolCall,
    ToolSpec,
    Usage,
)
from strata.models import (
    AppendOutcome,
    BranchHead,
    ContextAssembly,
    ContextRequest,
    ContextResponse,
    ErrorInfo,
    Provider,
    Rehydration,
    ResumeModel,
    ResumeSubagent,
    Segment,
    SessionResume,
    SessionStatus,
    SessionSummary,
    Tier,
)

OPENAPI = yaml.safe_load((REPO_ROOT / "docs/openapi.yaml").read_text())
AVRO = json.loads((REPO_ROOT / "schemas/event.avsc").read_text())
SCHEMAS = OPENAPI["components"]["schemas"]


def wire_fields(model: type[BaseModel]) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def operation(method: str, path: str) -> dict[str, Any]:
    op: dict[str, Any] = OPENAPI["paths"][path][method.lower()]
    return op


def json_body(op: dict[str, Any], status: str = "200") -> dict[str, Any]:
    schema: dict[str, Any] = op["responses"][status]["content"]["application/json"]["schema"]
    return schema


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return resolve(SCHEMAS[ref.rsplit("/", 1)[1]]) if ref else schema


def check_required(model: type[BaseModel], full: dict[str, Any], required: set[str]) -> None:
    """``full`` validates, and ``full`` minus one field validates unless that field is required."""
    model.model_validate(full)
    for field in full:
        partial = {k: v for k, v in full.items() if k != field}
        try:
            model.model_validate(partial)
            accepted = True
        except ValidationError:
            accepted = False
        documented = "required" if field in required else "optional"
        behaviour = "accepts" if accepted else "refuses"
        assert accepted != (field in required), (
            f"{model.__name__}.{field}: the document says {documented}, "
            f"the model {behaviour} an object without it"
        )


class TestEnvelope:
    schema = SCHEMAS["EventEnvelope"]

    def full_event(self) -> dict[str, Any]:
        return {
            "event_id": "e1",
            "tenant_id": "acme",
            "session_id": "s1",
            "branch_id": "main",
            "seq": 1,
            "expected_seq": 0,
            "parent_event_id": "e0",
            "timestamp": "2026-06-03T10:00:00Z",
            "type": "StateUpdated",
            "actor": "agent",
            "participant_id": "coder",
            "payload": {"goal": "g"},
            "causality": {"message_id": "m", "tool_call_id": "c", "artifact_id": "a"},
        }

    def test_fields(self) -> None:
        assert wire_fields(strata.Event) == set(self.schema["properties"])
        assert set(self.full_event()) == set(self.schema["properties"])

    def test_required_fields(self) -> None:
        check_required(strata.Event, self.full_event(), set(self.schema["required"]))

    def test_event_types(self) -> None:
        documented = list(SCHEMAS["Event"]["discriminator"]["mapping"])
        assert list(get_args(EventType)) == documented
        assert list(PAYLOAD_TYPES) == documented

    def test_limits(self) -> None:
        props = self.schema["properties"]
        limits = {
            "event_id": "x" * props["event_id"]["maxLength"],
            "seq": props["seq"]["minimum"],
            "expected_seq": props["expected_seq"]["minimum"],
            "tenant_id": "a-Z_9",
        }
        strata.Event.model_validate({**self.full_event(), **limits})
        beyond = {
            "event_id": limits["event_id"] + "x",
            "seq": props["seq"]["minimum"] - 1,
            "expected_seq": props["expected_seq"]["minimum"] - 1,
            "tenant_id": "a.b",
        }
        for field, value in beyond.items():
            with pytest.raises(ValidationError):
                strata.Event.model_validate({**self.full_event(), field: value})

    def test_causality(self) -> None:
        documented = set(self.schema["properties"]["causality"]["properties"])
        assert wire_fields(Causality) == documented
        assert avro_fields(avro_named()["Causality"]) == documented


def avro_named() -> dict[str, dict[str, Any]]:
    """Every named type (record, enum) of the event schema, by name."""
    named: dict[str, dict[str, Any]] = {}

    def walk(t: Any) -> None:
        if isinstance(t, list):
            for member in t:
                walk(member)
        elif isinstance(t, dict):
            if "name" in t and t.get("type") in ("record", "enum"):
                named[t["name"]] = t
            for f in t.get("fields", []):
                walk(f["type"])
            walk(t.get("items"))

    walk(AVRO)
    return named


def avro_fields(record: dict[str, Any]) -> set[str]:
    # `extra` is the binary form's holder of unknown fields, not a JSON field.
    return {f["name"] for f in record["fields"] if f["name"] != "extra"}


def sample(t: Any, named: dict[str, dict[str, Any]]) -> Any:
    """A valid JSON value of Avro type ``t``."""
    if isinstance(t, list):
        return sample(next(m for m in t if m != "null"), named)
    if isinstance(t, str):
        if t in named:
            return sample(named[t], named)
        return {"string": "x", "long": 1, "int": 1, "boolean": True, "double": 0.5}[t]
    if t["type"] == "record":
        return {f["name"]: sample_field(f, named) for f in t["fields"] if f["name"] != "extra"}
    if t["type"] == "enum":
        return t["symbols"][0]
    if t["type"] == "array":
        return [sample(t["items"], named)]
    return sample(t["type"], named)


def sample_field(field: dict[str, Any], named: dict[str, dict[str, Any]]) -> Any:
    # A free-form JSON value travels as JSON text in Avro; in JSON it is the value itself.
    if field["type"] == "string" and "as JSON text" in field.get("doc", ""):
        return {"type": "x"}
    return sample(field["type"], named)


NESTED: dict[str, type[BaseModel]] = {
    "ModelRef": ModelRef,
    "ToolSpec": ToolSpec,
    "ToolCall": ToolCall,
    "Usage": Usage,
    "Causality": Causality,
}


MODELS: dict[str, type[BaseModel]] = {**dict(PAYLOAD_TYPES.items()), **NESTED}
NAMED = avro_named()
# The log's own record of a sealed event (a deployment seals by default): not an event type.
LOG_ONLY_RECORDS = {"Sealed"}
PAYLOAD_RECORDS = {
    r["name"]: r
    for r in next(f for f in AVRO["fields"] if f["name"] == "payload")["type"]
    if r["name"] not in LOG_ONLY_RECORDS
}


class TestPayloads:
    def test_every_type_has_a_payload_record(self) -> None:
        assert list(PAYLOAD_RECORDS) == list(get_args(EventType))

    @pytest.mark.parametrize("name", list(PAYLOAD_TYPES) + list(NESTED))
    def test_fields_and_required_fields(self, name: str) -> None:
        record = PAYLOAD_RECORDS.get(name) or NAMED[name]
        model = MODELS[name]
        assert wire_fields(model) == avro_fields(record)
        required = {f["name"] for f in record["fields"] if "default" not in f}
        check_required(model, sample(record, NAMED), required)

    @pytest.mark.parametrize(
        ("name", "literal"), [("PrivacyClass", PrivacyClass), ("FreshnessClass", FreshnessClass)]
    )
    def test_enums(self, name: str, literal: Any) -> None:
        assert list(get_args(literal)) == NAMED[name]["symbols"]


class TestRequests:
    def test_context_request(self) -> None:
        schema = operation("POST", "/v1/sessions/{session}/context")["requestBody"]["content"][
            "application/json"
        ]["schema"]
        assert wire_fields(ContextRequest) == set(schema["properties"])
        assert schema["additionalProperties"] is False
        assert ContextRequest.model_config.get("extra") == "forbid"
        # null is the server's default provider, as an absent field is.
        assert [*get_args(Provider), None] == schema["properties"]["provider"]["enum"]
        for field in ("budget", "target_tokens"):
            minimum = schema["properties"][field]["minimum"]
            ContextRequest.model_validate({field: minimum})
            with pytest.raises(ValidationError):
                ContextRequest.model_validate({field: minimum - 1})

    @pytest.mark.parametrize("method", [strata.Client.context, strata.AsyncClient.context])
    def test_context_takes_every_request_field(self, method: Callable[..., Any]) -> None:
        assert keyword_only(method) == wire_fields(ContextRequest)

    @pytest.mark.parametrize("method", [strata.Client.compact, strata.AsyncClient.compact])
    def test_compact_takes_every_request_field(self, method: Callable[..., Any]) -> None:
        schema = operation("POST", "/v1/sessions/{session}/compact")["requestBody"]["content"][
            "application/json"
        ]["schema"]
        assert keyword_only(method) == set(schema["properties"])

    def test_page_sizes(self) -> None:
        events = {
            p["name"]: p
            for p in operation("GET", "/v1/sessions/{session}/events")["parameters"]
            if "name" in p
        }
        sessions = {p["name"]: p for p in operation("GET", "/v1/sessions")["parameters"]}
        assert events["limit"]["schema"]["maximum"] == _api.MAX_EVENTS_PAGE
        assert sessions["limit"]["schema"]["maximum"] == _api.MAX_SESSIONS_PAGE
        for cls in (strata.Client, strata.AsyncClient):
            assert default(cls.events, "page_size") == events["limit"]["schema"]["default"]
            assert default(cls.events, "after_seq") == events["after_seq"]["schema"]["default"]
            assert default(cls.sessions, "page_size") == sessions["limit"]["schema"]["default"]

    def test_every_call_is_a_documented_route(self) -> None:
        event = strata.EventBuilder("s").user_prompt("x")
        calls: list[_api.Call[Any]] = [
            _api.append([event]),
            _api.context("s", ContextRequest()),
            _api.assembly("a"),
            _api.why_not("a", "r"),
            _api.compact("s", None, None),
            _api.session("s"),
            _api.state("s"),
            _api.events_page("s", 0, 10),
            _api.sessions_page(None, 10),
            _api.artifact("0" * 64),
            _api.forget_session("s"),
            _api.forget_user("u"),
        ]
        routes = {(m.upper(), p) for p, ops in OPENAPI["paths"].items() for m in ops}
        for call in calls:
            template = (
                (call.path + "/")
                .replace("/s/", "/{session}/")
                .rstrip("/")
                .replace("/assemblies/a", "/assemblies/{assembly}")
                .replace("0" * 64, "{sha256}")
                .replace("/users/u", "/users/{user}")
            )
            assert (call.method, template) in routes
            documented = {
                p["name"]
                for p in operation(call.method, template).get("parameters", [])
                if "name" in p and p.get("in") == "query"
            }
            assert set(call.params or {}) <= documented


def keyword_only(method: Callable[..., Any]) -> set[str]:
    return {
        p.name for p in inspect.signature(method).parameters.values() if p.kind is p.KEYWORD_ONLY
    }


def default(method: Callable[..., Any], name: str) -> Any:
    return inspect.signature(method).parameters[name].default


class TestResponses:
    def test_append_outcome(self) -> None:
        outcome = resolve(
            json_body(operation("POST", "/v1/events"))["properties"]["results"]["items"]
        )
        assert wire_fields(AppendOutcome) == set(outcome["properties"])
        assert (
            list(get_args(AppendOutcome.model_fields["status"].annotation))
            == outcome["properties"]["status"]["enum"]
        )

    def test_context_response(self) -> None:
        documented = set(
            json_body(operation("POST", "/v1/sessions/{session}/context"))["properties"]
        )
        assert wire_fields(ContextResponse) == documented

    def test_context_assembly(self) -> None:
        schema = SCHEMAS["ContextAssembly"]
        assert set(schema["properties"]) == wire_fields(ContextAssembly)
        items = schema["properties"]["included"]["items"]
        assert wire_fields(Segment) == set(items["properties"])
        assert list(get_args(Tier)) == items["properties"]["tier"]["enum"]
        assert wire_fields(Rehydration) == set(
            schema["properties"]["rehydrations"]["items"]["properties"]
        )

    def test_sessions_page(self) -> None:
        body = json_body(operation("GET", "/v1/sessions"))["properties"]
        assert wire_fields(SessionSummary) == set(body["sessions"]["items"]["properties"])
        assert set(body) == wire_fields(_api._SessionsPage)

    def test_session_resume(self) -> None:
        body = json_body(operation("GET", "/v1/sessions/{session}"))
        props = body["properties"]
        assert wire_fields(SessionResume) == set(props)
        assert list(get_args(SessionStatus)) == props["status"]["enum"]
        assert wire_fields(ResumeModel) == set(props["model"]["properties"])
        assert wire_fields(BranchHead) == set(props["branches"]["items"]["properties"])
        assert wire_fields(ResumeSubagent) == set(props["subagents"]["items"]["properties"])

    def test_error_body(self) -> None:
        inner = SCHEMAS["Error"]["properties"]["error"]
        assert wire_fields(ErrorInfo) == set(inner["properties"])
        check_required(
            ErrorInfo, {"code": "c", "message": "m", "details": {}}, set(inner["required"])
        )


def test_the_server_sends_what_the_document_says(server: Server, session_id: str) -> None:
    with strata.Client(server.url, server.api_key) as client:
        client.append([strata.EventBuilder(session_id).user_prompt("hello")])
    raw = httpx.post(
        f"{server.url}/v1/sessions/{session_id}/context",
        json={},
        headers={"Authorization": f"Bearer {server.api_key}"},
    ).json()

    assert set(raw) == wire_fields(ContextResponse)
    # Every field sent is documented (optional ones are left out when empty).
    assert set(raw["assembly"]) <= set(SCHEMAS["ContextAssembly"]["properties"])


def test_the_document_checked_here_is_the_one_the_server_serves(server: Server) -> None:
    """The models above are checked against the repository's document; the server serves the
    same bytes (built into it), to a key only."""
    assert httpx.get(f"{server.url}/v1/openapi.yaml").status_code == 401
    served = httpx.get(
        f"{server.url}/v1/openapi.yaml",
        headers={"Authorization": f"Bearer {server.api_key}"},
    )
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("application/yaml")
    assert served.text == (REPO_ROOT / "docs/openapi.yaml").read_text()


def test_every_error_answer_has_the_json_error_body(server: Server) -> None:
    """axum's own rejections too: a malformed query string, an unknown route, a wrong method."""
    auth = {"Authorization": f"Bearer {server.api_key}"}
    for method, path, status, code in [
        ("GET", "/v1/sessions?limit=ten", 400, "bad_request"),
        ("GET", "/v1/sessions?bogus=1", 400, "bad_request"),
        ("GET", "/v1/nothing-here", 404, "not_found"),
        ("DELETE", "/v1/events", 405, "method_not_allowed"),
        ("GET", "/v1/sessions/any/events?limit=0", 400, "bad_request"),
        ("GET", "/v1/sessions/any/events?bogus=1", 400, "bad_request"),
        ("POST", "/v1/sessions/no-such-session/compact", 404, "not_found"),
    ]:
        answer = httpx.request(method, server.url + path, headers=auth)
        assert answer.status_code == status, (path, answer.text)
        assert answer.headers["content-type"].startswith("application/json"), path
        error = answer.json()["error"]
        assert error["code"] == code and error["message"], (path, error)
