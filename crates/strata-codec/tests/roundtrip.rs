//! JSON and Avro round trips for every event type.

mod common;

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};
use strata_codec::{AvroCodec, Error, CURRENT_SCHEMA_VERSION};
use strata_core::{Event, EventType};

fn all_samples() -> Vec<(&'static str, Event)> {
    common::FULL
        .iter()
        .chain(common::MINIMAL)
        .map(|text| (*text, common::event(text)))
        .collect()
}

#[test]
fn samples_cover_every_event_type_fully_and_minimally() {
    let all: BTreeSet<EventType> = EventType::ALL.iter().copied().collect();
    for (name, samples) in [("FULL", common::FULL), ("MINIMAL", common::MINIMAL)] {
        let covered: BTreeSet<EventType> = samples
            .iter()
            .map(|text| common::event(text).event_type())
            .collect();
        assert_eq!(
            covered, all,
            "{name} must hold one sample per EventType::ALL entry"
        );
        assert_eq!(samples.len(), all.len(), "{name} has a duplicate type");
    }
}

#[test]
fn json_round_trip_for_every_type() {
    for (text, event) in all_samples() {
        let back =
            Event::from_json(event.to_json(), None).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(back, event, "json round trip of {text}");
    }
    // The full samples hold every field in canonical form: export writes them back unchanged.
    for text in common::FULL {
        let input: Value = serde_json::from_str(text).expect("sample is JSON");
        assert_eq!(
            common::event(text).to_json(),
            input,
            "canonical json of {text}"
        );
    }
}

#[test]
fn avro_round_trip_for_every_type() {
    let codec = AvroCodec::new();
    for (text, event) in all_samples() {
        let bytes = codec
            .encode(&event)
            .unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(bytes[..2], [0xC3, 0x01]);
        assert_eq!(
            codec.schema_version_of(&bytes).expect("header"),
            CURRENT_SCHEMA_VERSION
        );
        let back = codec
            .decode(&bytes)
            .unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(back, event, "avro round trip of {text}");
        // Map equality ignores key order; the text form does not.
        assert_eq!(back.to_json().to_string(), event.to_json().to_string());
        // And the binary form is a pure function of the event.
        assert_eq!(codec.encode(&back).expect("re-encode"), bytes);
    }
}

#[test]
fn unknown_fields_survive_at_every_level() {
    let codec = AvroCodec::new();
    let event = common::event(common::FULL[0]);
    let back = codec
        .decode(&codec.encode(&event).expect("encode"))
        .expect("decode");
    assert_eq!(back.extra["trace_id"], json!("4bf92f3577b34da6"));
    assert_eq!(
        back.extra["labels"],
        json!(["a", 1, 2.5, null, true, {"k": [1, [2, [3]]]}])
    );
    // Key order of unknown fields is kept too (map equality alone ignores order).
    assert!(back.extra.keys().eq(event.extra.keys()));
    let causality = back.causality.expect("causality");
    assert_eq!(causality.extra["trace"], json!({"span": 7}));
    let strata_core::Payload::SessionStarted(p) = back.payload else {
        panic!("wrong payload {:?}", back.payload);
    };
    assert_eq!(
        p.extra["client"],
        json!({"name": "claude-code", "version": "1.2.3"})
    );
    assert_eq!(p.model.extra["region"], json!("us-east-1"));
    let tools = p.tools.expect("tools");
    assert_eq!(tools[0].extra["x-cost"], json!(1));
    assert_eq!(tools[1].schema, Value::Null);
}

#[test]
fn empty_and_absent_are_told_apart() {
    let codec = AvroCodec::new();
    let with_empty = common::event(
        r#"{"event_id": "e", "tenant_id": "t", "session_id": "s", "timestamp": "2026-01-01T00:00:00Z",
            "type": "StateUpdated", "causality": {}, "payload": {"facts": [], "goal": ""}}"#,
    );
    let back = codec
        .decode(&codec.encode(&with_empty).expect("encode"))
        .expect("decode");
    assert_eq!(back, with_empty);
    assert!(back.causality.is_some());
}

/// Free-form JSON travels as text; numbers must come back bit for bit.
#[test]
fn json_numbers_round_trip_exactly() {
    let codec = AvroCodec::new();
    // A fixed-seed xorshift over raw f64 bit patterns: subnormals, huge exponents, 17-digit
    // mantissas.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut floats = Vec::new();
    while floats.len() < 2000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let f = f64::from_bits(state);
        if f.is_finite() {
            floats.push(json!(f));
        }
    }
    floats.extend([
        json!(0.1 + 0.2),
        json!(f64::MAX),
        json!(f64::MIN_POSITIVE),
        json!(5e-324),
        json!(-0.0),
        json!(u64::MAX),
        json!(i64::MIN),
    ]);
    let mut args = Map::new();
    args.insert("floats".into(), Value::Array(floats));
    let mut event = common::event(common::MINIMAL[3]);
    let strata_core::Payload::ToolCallRequested(p) = &mut event.payload else {
        panic!("MINIMAL[3] is ToolCallRequested");
    };
    p.args = Value::Object(args.clone());
    p.extra = args;
    let back = codec
        .decode(&codec.encode(&event).expect("encode"))
        .expect("decode");
    assert_eq!(back, event);
}

#[test]
fn integers_beyond_avro_long_are_rejected_not_wrapped() {
    let codec = AvroCodec::new();
    let mut event = common::event(common::MINIMAL[6]);
    let strata_core::Payload::FileRead(p) = &mut event.payload else {
        panic!("MINIMAL[6] is FileRead");
    };
    p.bytes = Some(u64::MAX);
    let err = codec.encode(&event).expect_err("u64::MAX does not fit");
    assert!(
        matches!(&err, Error::InvalidPayload { field, .. } if field == "payload.bytes"),
        "{err:?}"
    );
}

#[test]
fn sub_microsecond_timestamps_are_truncated_like_the_json_path() {
    let codec = AvroCodec::new();
    let mut event = common::event(common::MINIMAL[1]);
    event.timestamp += chrono::Duration::nanoseconds(1_234_567);
    let back = codec
        .decode(&codec.encode(&event).expect("encode"))
        .expect("decode");
    assert_eq!(
        back.timestamp,
        strata_core::event::truncate_to_micros(event.timestamp)
    );
}

/// A record whose array or string length claims far more than the record holds is an error, not
/// an allocation: a 40-byte record claiming a 500-million-element array once aborted the
/// projector, which then re-read it forever.
#[test]
fn lengths_beyond_the_record_are_refused_without_allocating_them() {
    let codec = AvroCodec::new();
    let event = Event::from_json(
        json!({"event_id": "e1", "tenant_id": "t", "session_id": "s", "seq": 1,
            "timestamp": "2026-06-03T10:00:00Z", "type": "ModelResponseReceived",
            "payload": {"message_id": "m", "text": "MARKMARK", "tool_calls": []}}),
        None,
    )
    .unwrap();
    let bytes = codec.encode(&event).unwrap();
    let at = bytes
        .windows(8)
        .position(|w| w == b"MARKMARK")
        .expect("the text is in the record")
        + 8;
    assert_eq!(bytes[at], 0, "an empty array follows the text");
    for count in [500_000_000u64, 100_000_000, 1 << 40] {
        // The array's item count, zigzag varint encoded.
        let mut zigzag = count << 1;
        let mut varint = Vec::new();
        while zigzag >= 0x80 {
            varint.push((zigzag as u8) | 0x80);
            zigzag >>= 7;
        }
        varint.push(zigzag as u8);
        let mut forged = bytes[..at].to_vec();
        forged.extend_from_slice(&varint);
        forged.extend_from_slice(&bytes[at + 1..]);
        let err = codec
            .decode(&forged)
            .expect_err("a forged length is refused");
        let text = err.to_string();
        assert!(!text.is_empty(), "{count}: {text}");
    }
}
