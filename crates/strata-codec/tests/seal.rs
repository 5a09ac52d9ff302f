//! Sealed records (`docs/design/forgetting.md`): the envelope stays readable, the content opens
//! only with the key that sealed it, and only in the place it was sealed for.

mod common;

use strata_codec::{AvroCodec, DataKey, Error, Record};

fn sealed_of(codec: &AvroCodec, text: &str, key: &DataKey) -> (strata_core::Event, Vec<u8>) {
    let event = common::event(text);
    let bytes = codec.encode_sealed(&event, key).expect("seal");
    (event, bytes)
}

#[test]
fn every_event_seals_and_opens_to_itself() {
    let codec = AvroCodec::new();
    let key = DataKey::generate();
    for text in common::FULL.iter().chain(common::MINIMAL) {
        let (event, bytes) = sealed_of(&codec, text, &key);
        let Record::Sealed(sealed) = codec.decode_record(&bytes).expect("decode") else {
            panic!("not sealed: {text}")
        };
        assert_eq!(sealed.envelope.event_id, event.event_id);
        assert_eq!(sealed.envelope.session_id, event.session_id);
        assert_eq!(sealed.envelope.seq, event.seq);
        assert_eq!(sealed.envelope.event_type, event.event_type());
        assert_eq!(sealed.key_id, key.id());
        assert_eq!(codec.open(&sealed, &key).expect("open"), event, "{text}");
    }
}

#[test]
fn the_content_is_not_in_the_record_and_the_plain_decoder_refuses_it() {
    let codec = AvroCodec::new();
    let key = DataKey::generate();
    let text = r#"{"event_id": "e1", "tenant_id": "acme", "session_id": "s1", "seq": 1,
        "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
        "causality": {"message_id": "m1", "custom": "MARKER-IN-CAUSALITY"},
        "payload": {"message_id": "m1", "text": "the secret is MARKER-IN-TEXT"},
        "note": "MARKER-IN-EXTRA"}"#;
    let (event, bytes) = sealed_of(&codec, text, &key);
    let plain = codec.encode(&event).expect("plain");
    for marker in ["MARKER-IN-TEXT", "MARKER-IN-CAUSALITY", "MARKER-IN-EXTRA"] {
        assert!(contains(&plain, marker), "the plain record holds {marker}");
        assert!(
            !contains(&bytes, marker),
            "the sealed record leaks {marker}"
        );
    }
    // Two seals of one event differ (a fresh nonce each time).
    assert_ne!(bytes, codec.encode_sealed(&event, &key).expect("seal"));
    let err = codec.decode(&bytes).expect_err("sealed");
    assert!(
        matches!(&err, Error::Sealed { event_id, key_id } if event_id == "e1" && key_id == key.id()),
        "{err:?}"
    );
    assert_eq!(
        codec.schema_version_of(&bytes).expect("header"),
        strata_codec::CURRENT_SCHEMA_VERSION
    );
}

#[test]
fn another_key_an_altered_record_or_a_moved_envelope_does_not_open() {
    let codec = AvroCodec::new();
    let key = DataKey::generate();
    let (_, bytes) = sealed_of(&codec, common::FULL[1], &key);
    let Record::Sealed(sealed) = codec.decode_record(&bytes).expect("decode") else {
        panic!("not sealed")
    };

    // A key with the same id and other bytes (a restored or forged key row).
    let impostor = DataKey::from_parts(key.id(), [7u8; 32]);
    assert_unseal(codec.open(&sealed, &impostor));
    // A key with another id: refused before decryption.
    assert_unseal(codec.open(&sealed, &DataKey::generate()));

    // The record ends with the tag and the null union index of `extra`.
    let mut altered = bytes.clone();
    let at = altered.len() - 2;
    altered[at] ^= 1;
    let Record::Sealed(altered) = codec.decode_record(&altered).expect("still avro") else {
        panic!("not sealed")
    };
    assert_unseal(codec.open(&altered, &key));

    // The same ciphertext under another session, seq or event id.
    for moved in [
        |s: &mut strata_codec::SealedEvent| s.envelope.session_id.push('x'),
        |s: &mut strata_codec::SealedEvent| s.envelope.tenant_id.push('x'),
        |s: &mut strata_codec::SealedEvent| s.envelope.event_id.push('x'),
        |s: &mut strata_codec::SealedEvent| s.envelope.seq = s.envelope.seq.map(|n| n + 1),
    ] {
        let mut copy = sealed.clone();
        moved(&mut copy);
        assert_unseal(codec.open(&copy, &key));
    }
    assert!(codec.open(&sealed, &key).is_ok());
}

#[test]
fn a_key_prints_its_id_never_its_secret() {
    let key = DataKey::from_parts("dk_test", [0xAB; 32]);
    let printed = format!("{key:?}");
    assert!(printed.contains("dk_test"), "{printed}");
    assert!(!printed.to_lowercase().contains("abab"), "{printed}");
    assert!(!printed.contains("171"), "{printed}");
}

fn assert_unseal(result: strata_codec::Result<strata_core::Event>) {
    let err = result.expect_err("must not open");
    assert!(matches!(err, Error::Unseal { .. }), "{err:?}");
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}
