//! Schema evolution: the checked-in version 1 fixture, fingerprints, compatibility and the
//! header errors.

mod common;

use std::path::PathBuf;

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::Schema;
use serde_json::Value;
use strata_codec::{
    AvroCodec, Error, CURRENT_SCHEMA_VERSION, SCHEMA_CURRENT, SCHEMA_V1, SCHEMA_V2, SCHEMA_V3,
};
use strata_core::{Event, EventType, Payload};

/// Fingerprints of released schemas, wire byte order: CRC-64-AVRO of the specification's
/// Parsing Canonical Form, what the codec writes. A schema that wrote records must never change:
/// add a new version instead. Cross-checked with fastavro 1.13.1
/// (`fingerprint(to_parsing_canonical_form(parse_schema(s)), "CRC-64-AVRO")`), as Java and Go
/// compute them; CI checks them against fastavro again (`independent_fingerprints.rs`).
const PINNED: [(u32, &str); 4] = [
    (1, "2479844fe2e620e2"),
    (2, "44e736533d36050b"),
    (3, "b4b48a90e4084ed5"),
    (4, "0a76c36dd4f10bd1"),
];
/// The fingerprints apache-avro 0.21 (and the Python `avro` 1.12 package) computed, which every
/// record written before the fix carries: read, never written.
const LEGACY: [(u32, &str); 2] = [(1, "a5e1daae55a8815e"), (2, "a73c55ec80f3c10f")];

/// Payload types version 3 added: versions 1 and 2 cannot write them.
const ADDED_IN_V3: [EventType; 1] = [EventType::ProviderItemRecorded];

/// Fields version 2 added, by payload record.
const ADDED_IN_V2: [(&str, &str); 3] = [
    ("ToolCallFinished", "output_tokens"),
    ("BranchForked", "kind"),
    ("SubagentStarted", "task"),
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

const FIXTURE_AVRO: &str = "events.v1.avro-so";
const FIXTURE_JSONL: &str = "events.v1.jsonl";

/// The events of the version 1 fixture (no field that only version 2 has).
fn fixture_events() -> Vec<Event> {
    [
        r#"{"event_id": "v1_001", "tenant_id": "acme", "session_id": "sess_v1", "branch_id": "main", "seq": 1,
            "timestamp": "2025-11-20T08:30:00.250Z", "type": "SessionStarted", "actor": "platform",
            "payload": {"model": {"provider": "anthropic", "model": "claude-opus-4"}, "context_window_tokens": 200000,
                        "reserved_output_tokens": 8192, "cwd": "/srv/app",
                        "tools": [{"name": "bash", "description": "Run a command", "schema": {"type": "object"}}]}}"#,
        r#"{"event_id": "v1_002", "tenant_id": "acme", "session_id": "sess_v1", "branch_id": "main", "seq": 2,
            "parent_event_id": "v1_001", "timestamp": "2025-11-20T08:30:05Z", "type": "ToolCallFinished", "actor": "tool",
            "causality": {"tool_call_id": "call_1"},
            "payload": {"tool_call_id": "call_1", "output": "total 8\ndrwxr-xr-x 2 app app 4096 .\n", "output_bytes": 34,
                        "is_error": false, "privacy_class": "internal", "freshness_class": "volatile", "exit_code": 0},
            "ingest_node": "ingest-1"}"#,
        r#"{"event_id": "v1_003", "tenant_id": "acme", "session_id": "sess_v1", "branch_id": "alt", "seq": 3,
            "parent_event_id": "v1_002", "timestamp": "2025-11-20T08:31:00Z", "type": "BranchForked", "actor": "user",
            "payload": {"new_branch_id": "alt", "from_event_id": "v1_002", "note": "try the other fix"}}"#,
        r#"{"event_id": "v1_004", "tenant_id": "acme", "session_id": "sess_v1", "branch_id": "main", "seq": 4,
            "parent_event_id": "v1_002", "timestamp": "2025-11-20T08:32:00Z", "type": "SubagentStarted", "actor": "model",
            "payload": {"child_session_id": "sess_v1.sub_1"}}"#,
        r#"{"event_id": "v1_005", "tenant_id": "acme", "session_id": "sess_v1.sub_1", "branch_id": "main", "seq": 1,
            "timestamp": "2025-11-20T08:32:01Z", "type": "SubagentPromoted", "actor": "model",
            "payload": {"child_session_id": "sess_v1.sub_1"}}"#,
    ]
    .iter()
    .map(|text| common::event(text))
    .collect()
}

/// Writes both fixture files from [`fixture_events`] with schema version 1.
fn regenerate_fixtures(codec: &AvroCodec) {
    let mut avro = Vec::new();
    let mut jsonl = String::new();
    for event in fixture_events() {
        let record = codec
            .encode_with_schema_version(&event, 1)
            .expect("fixture events fit schema version 1");
        let len = u32::try_from(record.len()).expect("small record");
        avro.extend_from_slice(&len.to_le_bytes());
        avro.extend_from_slice(&record);
        jsonl.push_str(&event.to_json().to_string());
        jsonl.push('\n');
    }
    std::fs::create_dir_all(fixture("")).expect("create tests/fixtures");
    std::fs::write(fixture(FIXTURE_AVRO), avro).expect("write avro fixture");
    std::fs::write(fixture(FIXTURE_JSONL), jsonl).expect("write jsonl fixture");
}

/// Splits a file of u32-LE-length-prefixed records.
fn split_records(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes.split_at(4);
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (record, rest) = rest.split_at(len);
        records.push(record);
        bytes = rest;
    }
    records
}

#[test]
fn v1_fixture_decodes_with_the_current_codec() {
    let codec = AvroCodec::new();
    if std::env::var("STRATA_REGEN_FIXTURES").as_deref() == Ok("1") {
        regenerate_fixtures(&codec);
    }
    let avro = std::fs::read(fixture(FIXTURE_AVRO))
        .expect("tests/fixtures/events.v1.avro-so (STRATA_REGEN_FIXTURES=1 writes it)");
    let jsonl = std::fs::read_to_string(fixture(FIXTURE_JSONL)).expect("events.v1.jsonl");
    let expected: Vec<Event> = jsonl
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("jsonl line");
            Event::from_json(value, None).expect("jsonl event")
        })
        .collect();
    assert_eq!(
        expected,
        fixture_events(),
        "fixture_events() changed: regenerate with STRATA_REGEN_FIXTURES=1"
    );

    let records = split_records(&avro);
    assert_eq!(records.len(), expected.len());
    let mut decoded = Vec::new();
    for (record, want) in records.iter().zip(&expected) {
        assert_eq!(codec.schema_version_of(record).expect("header"), 1);
        let event = codec.decode(record).expect("v1 record decodes");
        assert_eq!(&event, want);
        // The fixture carries the legacy header; the version 1 writer now writes the standard
        // one, and the datum byte for byte as before.
        assert_eq!(hex(&record[2..10]), LEGACY[0].1);
        let rewritten = codec
            .encode_with_schema_version(want, 1)
            .expect("encode v1");
        assert_eq!(hex(&rewritten[2..10]), PINNED[0].1);
        assert_eq!(rewritten[10..], record[10..]);
        // And the event carries over to the current schema.
        let current = codec.encode(&event).expect("encode current");
        assert_eq!(
            codec.schema_version_of(&current).expect("header"),
            CURRENT_SCHEMA_VERSION
        );
        assert_eq!(codec.decode(&current).expect("decode current"), event);
        decoded.push(event);
    }

    let finished = decoded
        .iter()
        .find_map(|e| match &e.payload {
            Payload::ToolCallFinished(p) => Some((e, p)),
            _ => None,
        })
        .expect("fixture has a ToolCallFinished");
    let (event, p) = finished;
    assert_eq!(p.tool_call_id, "call_1");
    assert_eq!(
        p.output.as_deref(),
        Some("total 8\ndrwxr-xr-x 2 app app 4096 .\n")
    );
    assert_eq!(p.output_bytes, Some(34));
    assert!(!p.is_error);
    assert_eq!(
        p.privacy_class,
        Some(strata_core::payload::PrivacyClass::Internal)
    );
    assert_eq!(
        p.freshness_class,
        Some(strata_core::payload::FreshnessClass::Volatile)
    );
    assert_eq!(p.output_tokens, None, "v2-only field defaults to null");
    assert_eq!(p.extra["exit_code"], serde_json::json!(0));
    assert_eq!(event.extra["ingest_node"], serde_json::json!("ingest-1"));
    assert_eq!(
        event
            .causality
            .as_ref()
            .and_then(|c| c.tool_call_id.as_deref()),
        Some("call_1")
    );
    assert_eq!(event.timestamp.to_rfc3339(), "2025-11-20T08:30:05+00:00");

    let forked = decoded
        .iter()
        .find_map(|e| match &e.payload {
            Payload::BranchForked(p) => Some(p),
            _ => None,
        })
        .expect("fixture has a BranchForked");
    assert_eq!(forked.new_branch_id, "alt");
    assert_eq!(forked.from_event_id, "v1_002");
    assert_eq!(forked.kind, None, "v2-only field defaults to null");
    assert_eq!(forked.extra["note"], serde_json::json!("try the other fix"));

    let started = decoded
        .iter()
        .find_map(|e| match &e.payload {
            Payload::SubagentStarted(p) => Some(p),
            _ => None,
        })
        .expect("fixture has a SubagentStarted");
    assert_eq!(started.child_session_id, "sess_v1.sub_1");
    assert_eq!(started.task, None, "v2-only field defaults to null");

    // Union branches resolve by name: this is no StateUpdated or SubagentStarted.
    assert!(decoded.iter().any(|e| matches!(
        &e.payload,
        Payload::SubagentPromoted(p) if p.child_session_id == "sess_v1.sub_1"
    )));
}

/// Every sample, written by the version 1 writer, reads back under the current schema.
#[test]
fn every_type_written_with_v1_reads_back() {
    let codec = AvroCodec::new();
    for text in common::FULL.iter().chain(common::MINIMAL) {
        let mut event = common::event(text);
        if ADDED_IN_V3.contains(&event.event_type()) {
            continue;
        }
        match &mut event.payload {
            Payload::ToolCallFinished(p) => p.output_tokens = None,
            Payload::BranchForked(p) => p.kind = None,
            Payload::SubagentStarted(p) => p.task = None,
            _ => {}
        }
        let v1 = codec
            .encode_with_schema_version(&event, 1)
            .unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(codec.schema_version_of(&v1).expect("header"), 1);
        assert_eq!(codec.decode(&v1).expect("decode v1"), event, "{text}");
    }
}

#[test]
fn v1_writer_refuses_to_drop_v2_fields() {
    let codec = AvroCodec::new();
    for (text, field) in [
        (common::FULL[4], "payload.output_tokens"),
        (common::FULL[10], "payload.kind"),
        (common::FULL[11], "payload.task"),
    ] {
        let err = codec
            .encode_with_schema_version(&common::event(text), 1)
            .expect_err("v1 has no such field");
        assert!(
            matches!(&err, Error::InvalidPayload { field: f, .. } if f == field),
            "{err:?}"
        );
    }
    let err = codec
        .encode_with_schema_version(&common::event(common::MINIMAL[0]), 5)
        .expect_err("no version 5");
    assert!(
        matches!(err, Error::UnknownSchemaVersion { version: 5, .. }),
        "{err:?}"
    );
}

#[test]
fn older_writers_refuse_a_type_they_do_not_have() {
    let codec = AvroCodec::new();
    let event = common::event(common::PROVIDER_ITEM);
    for version in [1, 2] {
        let err = codec
            .encode_with_schema_version(&event, version)
            .expect_err("no ProviderItemRecorded before version 3");
        assert!(
            err.to_string().contains("ProviderItemRecorded"),
            "v{version}: {err}"
        );
    }
    for version in [3, 4] {
        let record = codec
            .encode_with_schema_version(&event, version)
            .expect("encode");
        assert_eq!(codec.schema_version_of(&record).expect("header"), version);
        assert_eq!(codec.decode(&record).expect("decode"), event);
    }
}

#[test]
fn fingerprints_are_pinned() {
    let codec = AvroCodec::new();
    assert_eq!(codec.schema_versions(), [1, 2, 3, 4]);
    for (version, hex) in PINNED {
        let bytes = codec.fingerprint_of(version).expect("known version");
        let got: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            got, hex,
            "schema version {version} changed: add a new version instead"
        );
    }
    assert_eq!(codec.fingerprint_hex(), PINNED[3].1);
    // A record with the legacy header of version 2 is read as version 2.
    let event = common::event(common::MINIMAL[0]);
    let mut legacy = codec
        .encode_with_schema_version(&event, 2)
        .expect("encode v2");
    legacy[2..10].copy_from_slice(&unhex(LEGACY[1].1));
    assert_eq!(codec.schema_version_of(&legacy).expect("legacy header"), 2);
    assert_eq!(
        codec.decode(&legacy).expect("legacy record decodes"),
        common::event(common::MINIMAL[0])
    );
    let record = codec
        .encode(&common::event(common::MINIMAL[0]))
        .expect("encode");
    assert_eq!(
        record[2..10],
        codec
            .fingerprint_of(CURRENT_SCHEMA_VERSION)
            .expect("current")
    );
}

#[test]
fn schemas_parse_and_cover_every_event_type() {
    for (version, text) in [
        (1, SCHEMA_V1),
        (2, SCHEMA_V2),
        (3, SCHEMA_V3),
        (4, SCHEMA_CURRENT),
    ] {
        let schema = Schema::parse_str(text).expect("schema parses");
        let Schema::Record(event) = &schema else {
            panic!("v{version}: not a record")
        };
        assert_eq!(event.name.fullname(None), "strata.Event");
        let payload = event
            .fields
            .iter()
            .find(|f| f.name == "payload")
            .expect("payload field");
        let Schema::Union(union) = &payload.schema else {
            panic!("v{version}: payload is not a union")
        };
        let names: Vec<String> = union
            .variants()
            .iter()
            .map(|s| match s {
                Schema::Record(r) => r.name.fullname(None),
                other => panic!("v{version}: payload branch {other:?}"),
            })
            .collect();
        let mut want: Vec<String> = EventType::ALL
            .iter()
            .filter(|t| version >= 3 || !ADDED_IN_V3.contains(t))
            .map(|t| format!("strata.payload.{}", t.as_str()))
            .collect();
        if version >= 4 {
            want.push("strata.payload.Sealed".into());
        }
        assert_eq!(
            names, want,
            "v{version}: one payload record per EventType::ALL entry (and Sealed from v4)"
        );
    }
}

#[test]
fn each_version_reads_the_one_before_per_apache_avro_compatibility_check() {
    let v1 = Schema::parse_str(SCHEMA_V1).expect("v1");
    let v2 = Schema::parse_str(SCHEMA_V2).expect("v2");
    let v3 = Schema::parse_str(SCHEMA_V3).expect("v3");
    let v4 = Schema::parse_str(SCHEMA_CURRENT).expect("v4");
    SchemaCompatibility::can_read(&v1, &v2).expect("v2 can read v1 data");
    // Additions only: v1 readers can still read v2 data (they skip the new fields).
    SchemaCompatibility::can_read(&v2, &v1).expect("v1 can read v2 data");
    SchemaCompatibility::can_read(&v2, &v3).expect("v3 can read v2 data");
    SchemaCompatibility::can_read(&v3, &v4).expect("v4 can read v3 data");
}

/// Version 4 is version 3 plus the `Sealed` payload record, nothing else.
#[test]
fn v4_differs_from_v3_only_by_the_sealed_record() {
    let mut v4: Value = serde_json::from_str(SCHEMA_CURRENT).expect("v4 json");
    let records = v4["fields"]
        .as_array_mut()
        .and_then(|fields| fields.iter_mut().find(|f| f["name"] == "payload"))
        .and_then(|payload| payload["type"].as_array_mut())
        .expect("payload union");
    let i = records
        .iter()
        .position(|r| r["name"] == "Sealed")
        .expect("Sealed in v4");
    assert_eq!(i, records.len() - 1, "Sealed is the last branch");
    records.remove(i);
    let stripped = Schema::parse_str(&v4.to_string()).expect("stripped v4 parses");
    let v3 = Schema::parse_str(SCHEMA_V3).expect("v3");
    assert_eq!(stripped.canonical_form(), v3.canonical_form());
}

/// Version 3 is version 2 plus one payload record, nothing else.
#[test]
fn v3_differs_from_v2_only_by_the_added_record() {
    let mut v3: Value = serde_json::from_str(SCHEMA_V3).expect("v3 json");
    let records = v3["fields"]
        .as_array_mut()
        .and_then(|fields| fields.iter_mut().find(|f| f["name"] == "payload"))
        .and_then(|payload| payload["type"].as_array_mut())
        .expect("payload union");
    for added in ADDED_IN_V3 {
        let i = records
            .iter()
            .position(|r| r["name"] == added.as_str())
            .unwrap_or_else(|| panic!("{} in v3", added.as_str()));
        records.remove(i);
    }
    let stripped = Schema::parse_str(&v3.to_string()).expect("stripped v3 parses");
    let v2 = Schema::parse_str(SCHEMA_V2).expect("v2");
    assert_eq!(stripped.canonical_form(), v2.canonical_form());
}

/// Version 2 is version 1 plus three nullable fields with a null default, nothing else.
#[test]
fn v2_differs_from_v1_only_by_the_added_fields() {
    let mut v2: Value = serde_json::from_str(SCHEMA_V2).expect("v2 json");
    let records = v2["fields"]
        .as_array_mut()
        .and_then(|fields| fields.iter_mut().find(|f| f["name"] == "payload"))
        .and_then(|payload| payload["type"].as_array_mut())
        .expect("payload union");
    for (record, field) in ADDED_IN_V2 {
        let fields = records
            .iter_mut()
            .find(|r| r["name"] == record)
            .and_then(|r| r["fields"].as_array_mut())
            .expect("record");
        let i = fields
            .iter()
            .position(|f| f["name"] == field)
            .unwrap_or_else(|| panic!("{record}.{field} in v2"));
        let added = fields.remove(i);
        assert_eq!(added["default"], Value::Null, "{record}.{field}");
        assert_eq!(added["type"][0], "null", "{record}.{field}");
    }
    let stripped = Schema::parse_str(&v2.to_string()).expect("stripped v2 parses");
    let v1 = Schema::parse_str(SCHEMA_V1).expect("v1");
    assert_eq!(stripped.canonical_form(), v1.canonical_form());
}

#[test]
fn unknown_fingerprint_is_rejected_with_the_fingerprint() {
    let codec = AvroCodec::new();
    let mut record = codec
        .encode(&common::event(common::MINIMAL[1]))
        .expect("encode");
    record[2..10].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x11, 0x22, 0x33]);
    let err = codec.decode(&record).expect_err("unknown fingerprint");
    assert!(
        matches!(&err, Error::UnknownFingerprint { fingerprint, .. } if fingerprint == "deadbeef00112233"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("deadbeef00112233"), "{message}");
    assert!(message.contains(&codec.fingerprint_hex()), "{message}");
}

#[test]
fn malformed_records_are_rejected() {
    let codec = AvroCodec::new();
    let record = codec
        .encode(&common::event(common::FULL[4]))
        .expect("encode");

    let err = codec.decode(&[]).expect_err("empty");
    assert!(matches!(err, Error::Truncated { len: 0, .. }), "{err:?}");

    let err = codec.decode(&record[..7]).expect_err("cut header");
    assert!(matches!(err, Error::Truncated { len: 7, .. }), "{err:?}");

    let mut bad = record.clone();
    bad[0] = 0x4f;
    let err = codec.decode(&bad).expect_err("bad marker");
    assert!(
        matches!(
            err,
            Error::BadMarker {
                found: [0x4f, 0x01]
            }
        ),
        "{err:?}"
    );

    // No proper prefix of any record decodes, not even one cut right before a trailing
    // nullable field (apache-avro alone would read that as null).
    for text in common::FULL.iter().chain(common::MINIMAL) {
        let record = codec.encode(&common::event(text)).expect("encode");
        for cut in 0..record.len() {
            let err = codec.decode(&record[..cut]).expect_err("cut record");
            assert!(
                matches!(err, Error::Truncated { .. }),
                "cut at {cut} of {}: {err:?}",
                record.len()
            );
        }
    }

    let mut long = record.clone();
    long.push(0);
    let err = codec.decode(&long).expect_err("trailing byte");
    assert!(matches!(err, Error::TrailingBytes { count: 1 }), "{err:?}");
}

/// A datum whose `type` disagrees with its payload record is not silently trusted.
#[test]
fn type_and_payload_record_must_agree() {
    use apache_avro::types::Value as Avro;
    // apache-avro's own writer puts the legacy header on the record, which is still read.
    use apache_avro::GenericSingleObjectWriter;

    let codec = AvroCodec::new();
    let schema = codec
        .schema(CURRENT_SCHEMA_VERSION)
        .expect("current")
        .clone();
    let record = codec
        .encode(&common::event(common::MINIMAL[6]))
        .expect("encode");
    let Avro::Record(mut fields) =
        apache_avro::from_avro_datum(&schema, &mut &record[10..], None).expect("generic read")
    else {
        panic!("not a record")
    };
    for (name, value) in &mut fields {
        if name == "type" {
            *value = Avro::String("FileWritten".into());
        }
    }
    let mut tampered = Vec::new();
    GenericSingleObjectWriter::new_with_capacity(&schema, 256)
        .expect("writer")
        .write_value(Avro::Record(fields), &mut tampered)
        .expect("generic write");
    let err = codec.decode(&tampered).expect_err("type mismatch");
    assert!(
        matches!(&err, Error::InvalidPayload { field, .. } if field == "type"),
        "{err:?}"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}
