"""Produce Strata events straight to a tenant's inbound Kafka topic.

A platform that already runs Kafka writes its agents' events to `<topic>.inbound.<tenant>`
(for example `strata-events.inbound.acme`) instead of posting them to `POST /v1/events`;
`strata-ingest --inbound-tenants acme` relays that topic to the log with the same checks as
HTTP (see docs/direct-producers.md). Each record is one canonical event (the JSON that
`POST /v1/events` takes) in Avro single-object encoding of `schemas/event.avsc`, keyed by its
session id, with librdkafka's `murmur2_random` partitioner (Java's default, so a session's
records stay in order on one partition).

    pip install confluent-kafka fastavro
    python direct_producer.py --brokers 127.0.0.1:9092 --topic strata-events.inbound.acme \
        --schema schemas/event.avsc < events.jsonl

Reads one JSON event per line on standard input; prints how many records were delivered.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from datetime import datetime
from typing import Any

from confluent_kafka import Producer
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

SINGLE_OBJECT_MARKER = b"\xc3\x01"


class Encoder:
    """Canonical JSON events to Avro single-object records of one schema version."""

    def __init__(self, schema_text: str) -> None:
        self.raw = json.loads(schema_text)
        self.schema = parse_schema(self.raw)
        canonical = to_parsing_canonical_form(self.schema)
        self.header = SINGLE_OBJECT_MARKER + bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        self.named: dict[str, dict[str, Any]] = {}
        self._collect(self.raw)
        # Full names of the payload records (`strata.payload.UserPromptSubmitted`), by type.
        payload = next(f for f in self.schema["fields"] if f["name"] == "payload")
        self.payload_names = {t["name"].rsplit(".", 1)[-1]: t["name"] for t in payload["type"]}

    def encode(self, event: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(self.header)
        schemaless_writer(out, self.schema, self._record(self.raw, event))
        return out.getvalue()

    # The schema's named types, so that a reference by name can be followed.
    def _collect(self, node: Any) -> None:
        if isinstance(node, list):
            for n in node:
                self._collect(n)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum") and "name" in node:
                self.named[node["name"]] = node
            for key in ("fields", "type", "items"):
                if key in node:
                    self._collect(node[key])

    def _record(self, schema: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
        known = {f["name"] for f in schema["fields"]}
        datum: dict[str, Any] = {}
        for field in schema["fields"]:
            name = field["name"]
            if name == "extra":
                # Fields the schema does not type travel as one JSON object text.
                unknown = {k: v for k, v in value.items() if k not in known and k != "type"}
                datum["extra"] = json.dumps(unknown) if unknown else None
            elif name == "payload":
                datum["payload"] = self._payload(field["type"], value["payload"], value["type"])
            elif name in value:
                datum[name] = self._value(field["type"], value[name], name)
            elif "default" in field:
                datum[name] = field["default"]
        return datum

    def _payload(
        self, union: list[Any], payload: dict[str, Any], event_type: str
    ) -> tuple[str, dict[str, Any]]:
        for branch in union:
            if isinstance(branch, dict) and branch.get("name") == event_type:
                # fastavro's tuple notation picks the union branch by its full name.
                full_name = self.payload_names[event_type]
                return (full_name, self._record(branch, payload))
        raise ValueError(f"unknown event type {event_type!r}")

    def _value(self, schema: Any, value: Any, name: str) -> Any:
        if isinstance(schema, list):  # a nullable field: ["null", T]
            if value is None:
                return None
            return self._value(next(s for s in schema if s != "null"), value, name)
        if isinstance(schema, str) and schema in self.named:
            schema = self.named[schema]
        if isinstance(schema, dict):
            kind = schema.get("type")
            if kind == "record":
                return self._record(schema, value)
            if kind == "array":
                return [self._value(schema["items"], v, name) for v in value]
            if kind == "enum":
                return value
            if kind == "long" and schema.get("logicalType") == "timestamp-micros":
                return datetime.fromisoformat(value)  # RFC 3339, `Z` included (3.11+)
            return self._value(kind, value, name)
        if schema == "string" and not isinstance(value, str):
            return json.dumps(value)  # free-form JSON (tool arguments, schemas) as JSON text
        return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--topic", required=True, help="the tenant's inbound topic")
    parser.add_argument("--schema", required=True, help="path of schemas/event.avsc")
    args = parser.parse_args()

    with open(args.schema, encoding="utf-8") as f:
        encoder = Encoder(f.read())
    producer = Producer(
        {
            "bootstrap.servers": args.brokers,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "acks": "all",
        }
    )
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    sent = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        event = json.loads(line)
        producer.produce(
            args.topic,
            key=event["session_id"].encode(),
            value=encoder.encode(event),
            headers={"event_type": event["type"], "tenant_id": event["tenant_id"]},
            on_delivery=delivered,
        )
        sent += 1
        producer.poll(0)
    producer.flush(30)
    if failures:
        print(f"{len(failures)} of {sent} records failed: {failures[0]}", file=sys.stderr)
        return 1
    print(f"delivered {sent} records to {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
