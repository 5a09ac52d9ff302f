//! The sealed record's bytes, written directly. Its shape never varies (the envelope's strings,
//! null causality and extra, the `Sealed` branch of three fields), so it needs neither an Avro
//! `Value` nor apache-avro's validation walk, which together cost about as much as encoding the
//! event inside it. A test checks the bytes against apache-avro's writer for every field shape.

use crate::error::{Error, Result};
use crate::schema::Version;
use crate::seal::SealedEvent;

/// Appends the single-object record of `sealed` in schema `version` (4 or later) to `out`.
pub(crate) fn write(sealed: &SealedEvent, version: &Version, out: &mut Vec<u8>) -> Result<()> {
    let branch = sealed_branch(version)?;
    let e = &sealed.envelope;
    let seq = e
        .seq
        .map(|n| {
            i64::try_from(n)
                .map_err(|_| Error::invalid("seq", format!("{n} does not fit an avro long")))
        })
        .transpose()?;
    out.extend_from_slice(&[0xC3, 0x01]);
    out.extend_from_slice(&version.fingerprint);
    string(out, &e.event_id);
    string(out, &e.tenant_id);
    string(out, &e.session_id);
    string(out, &e.branch_id);
    nullable(out, seq, long);
    nullable(out, e.parent_event_id.as_deref(), string);
    long(out, e.timestamp.timestamp_micros());
    string(out, e.event_type.as_str());
    nullable(out, e.actor.as_deref(), string);
    nullable(out, e.participant_id.as_deref(), string);
    long(out, 0); // causality: null
    long(out, i64::from(branch));
    string(out, &sealed.key_id);
    bytes(out, &sealed.nonce);
    bytes(out, &sealed.ciphertext);
    long(out, 0); // extra: null
    Ok(())
}

/// The payload union's branch of `Sealed` in schema `version`.
pub(crate) fn sealed_branch(version: &Version) -> Result<u32> {
    version.sealed_index.ok_or_else(|| {
        Error::invalid(
            "payload",
            format!(
                "schema version {} cannot hold a sealed event",
                version.version
            ),
        )
    })
}

/// A `["null", T]` union: branch 0 for none, 1 and the value for some.
fn nullable<T>(out: &mut Vec<u8>, value: Option<T>, write: impl Fn(&mut Vec<u8>, T)) {
    match value {
        None => long(out, 0),
        Some(v) => {
            long(out, 1);
            write(out, v);
        }
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    bytes(out, s.as_bytes());
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    long(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// A zig-zag variable-length long, as Avro's binary encoding writes every int and long.
fn long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::REGISTRY;
    use crate::seal::{Envelope, NONCE_LEN};
    use chrono::TimeZone;

    fn sealed(full: bool, seq: Option<u64>, ciphertext_len: usize) -> SealedEvent {
        let text = |s: &str| full.then(|| s.to_owned());
        SealedEvent {
            envelope: Envelope {
                event_id: "ev-1".into(),
                tenant_id: "acme".into(),
                session_id: "s-é".into(),
                branch_id: "main".into(),
                seq,
                parent_event_id: text("ev-0"),
                timestamp: chrono::Utc.timestamp_opt(1_780_000_000, 123_000).unwrap(),
                event_type: strata_core::EventType::ToolCallFinished,
                actor: text("tool"),
                participant_id: text("sub-1"),
            },
            key_id: "dk_0123".into(),
            nonce: [7; NONCE_LEN],
            ciphertext: (0..ciphertext_len).map(|i| i as u8).collect(),
        }
    }

    #[test]
    fn the_direct_bytes_are_apache_avros() {
        let version = REGISTRY.current();
        let cases = [
            sealed(false, None, 0),
            sealed(true, Some(1), 17),
            sealed(true, Some(63), 64),
            sealed(false, Some(64), 200),
            sealed(true, Some(i64::MAX as u64), 70_000),
        ];
        for case in &cases {
            let mut direct = Vec::new();
            write(case, version, &mut direct).expect("write");
            let value = crate::encode::sealed_to_avro(case, version).expect("value");
            let mut avro = Vec::new();
            crate::write_value(version, &value, &mut avro).expect("avro");
            assert_eq!(direct, avro, "{:?}", case.envelope);
        }
    }

    #[test]
    fn a_seq_beyond_an_avro_long_is_refused() {
        let mut out = Vec::new();
        let err = write(
            &sealed(true, Some(u64::MAX), 1),
            REGISTRY.current(),
            &mut out,
        )
        .expect_err("too large");
        assert!(err.to_string().contains("seq"), "{err}");
    }
}
