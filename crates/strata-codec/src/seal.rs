//! Sealed records: an event encrypted with its session's data key, so that destroying the key
//! makes every copy of the record unreadable (crypto-shredding, `docs/design/forgetting.md`).
//!
//! A sealed record is a version-4 record whose payload is the `Sealed` branch: the envelope
//! (ids, seq, type, timestamp, actor, participant) stays readable, because the log needs it to
//! stay a log; causality and unknown fields go null; the ciphertext is AES-256-GCM of the event's
//! own unsealed record, with a random 96-bit nonce and the envelope as associated data, so a
//! sealed payload cannot be moved to another event, session or tenant.

use std::fmt;

use aes_gcm::aead::{Aead, KeyInit, Payload as AeadPayload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use chrono::{DateTime, Utc};
use rand::RngCore;
use strata_core::{Event, EventType};
use zeroize::Zeroize;

/// Length of a data key (AES-256).
pub const DATA_KEY_LEN: usize = 32;
/// Length of the nonce of a sealed record (AES-GCM's 96 bits).
pub const NONCE_LEN: usize = 12;
/// Length of the authentication tag appended to every ciphertext.
pub const TAG_LEN: usize = 16;

/// The secret key that seals one subject's events (a session's). Its bytes are wiped when it is
/// dropped and never printed.
#[derive(Clone)]
pub struct DataKey {
    id: String,
    bytes: [u8; DATA_KEY_LEN],
    /// The expanded key schedule, made once: expanding it per record doubled the cost of a seal.
    cipher: Aes256Gcm,
}

impl DataKey {
    /// A fresh random key with a fresh random id (`dk_` and 24 hex digits).
    pub fn generate() -> DataKey {
        let mut rng = rand::rng();
        let mut bytes = [0u8; DATA_KEY_LEN];
        rng.fill_bytes(&mut bytes);
        let mut id = [0u8; 12];
        rng.fill_bytes(&mut id);
        DataKey::from_parts(format!("dk_{}", hex(&id)), bytes)
    }

    /// The key `id` whose secret is `bytes` (as unwrapped from a key store).
    pub fn from_parts(id: impl Into<String>, bytes: [u8; DATA_KEY_LEN]) -> DataKey {
        DataKey {
            id: id.into(),
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)),
            bytes,
        }
    }

    /// The key's id, written into every record it seals.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret, for a key store to wrap.
    pub fn secret(&self) -> &[u8; DATA_KEY_LEN] {
        &self.bytes
    }

    fn cipher(&self) -> &Aes256Gcm {
        &self.cipher
    }

    /// `plaintext` sealed on its own (an artifact's bytes): a random nonce, then AES-256-GCM of
    /// it with `bound` as associated data (what the bytes belong to, so that they cannot be
    /// moved).
    pub fn seal_bytes(&self, bound: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let payload = AeadPayload {
            msg: plaintext,
            aad: bound,
        };
        let sealed = self
            .cipher()
            .encrypt(Nonce::from_slice(&nonce), payload)
            .expect("AES-GCM encrypts any length this process can hold");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what [`DataKey::seal_bytes`] sealed with the same `bound`; `None` when it does not
    /// authenticate (another key, other bytes, another binding).
    pub fn open_bytes(&self, bound: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let payload = AeadPayload {
            msg: ciphertext,
            aad: bound,
        };
        self.cipher()
            .decrypt(Nonce::from_slice(nonce), payload)
            .ok()
    }
}

impl Drop for DataKey {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// What stays readable of a sealed event: enough to order, route and count it, nothing of its
/// content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub event_id: String,
    pub tenant_id: String,
    pub session_id: String,
    pub branch_id: String,
    pub seq: Option<u64>,
    pub parent_event_id: Option<String>,
    pub timestamp: DateTime<Utc>,
    pub event_type: EventType,
    pub actor: Option<String>,
    pub participant_id: Option<String>,
}

impl Envelope {
    /// The envelope of `event`.
    pub fn of(event: &Event) -> Envelope {
        Envelope {
            event_id: event.event_id.clone(),
            tenant_id: event.tenant_id.clone(),
            session_id: event.session_id.clone(),
            branch_id: event.branch_id.clone(),
            seq: event.seq,
            parent_event_id: event.parent_event_id.clone(),
            timestamp: event.timestamp,
            event_type: event.event_type(),
            actor: event.actor.clone(),
            participant_id: event.participant_id.clone(),
        }
    }
}

/// A sealed event as read from the log, before its key opens it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedEvent {
    pub envelope: Envelope,
    /// Id of the data key that sealed it.
    pub key_id: String,
    pub(crate) nonce: [u8; NONCE_LEN],
    pub(crate) ciphertext: Vec<u8>,
}

impl SealedEvent {
    /// Size of the ciphertext, tag included.
    pub fn ciphertext_len(&self) -> usize {
        self.ciphertext.len()
    }
}

/// One record of the log, decoded: a plain event, or a sealed one that needs its key.
// Short-lived (decoded, then moved out at once): boxing the event would cost an allocation per
// record on every consumer's path for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Plain(Event),
    Sealed(SealedEvent),
}

impl Record {
    /// Tenant of the record's event.
    pub fn tenant_id(&self) -> &str {
        match self {
            Record::Plain(e) => &e.tenant_id,
            Record::Sealed(s) => &s.envelope.tenant_id,
        }
    }

    /// Session of the record's event.
    pub fn session_id(&self) -> &str {
        match self {
            Record::Plain(e) => &e.session_id,
            Record::Sealed(s) => &s.envelope.session_id,
        }
    }

    /// Id of the record's event.
    pub fn event_id(&self) -> &str {
        match self {
            Record::Plain(e) => &e.event_id,
            Record::Sealed(s) => &s.envelope.event_id,
        }
    }

    /// Seq of the record's event.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Record::Plain(e) => e.seq,
            Record::Sealed(s) => s.envelope.seq,
        }
    }
}

/// The associated data of a sealed record: the envelope fields that bind it to its place.
/// Length-prefixed, so no two envelopes share one.
pub(crate) fn associated_data(envelope: &Envelope, key_id: &str) -> Vec<u8> {
    let seq = envelope.seq.map(|s| s.to_string()).unwrap_or_default();
    let parts: [&str; 7] = [
        "strata.sealed.v1",
        &envelope.tenant_id,
        &envelope.session_id,
        &envelope.event_id,
        &seq,
        envelope.event_type.as_str(),
        key_id,
    ];
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
    for part in parts {
        // Ids are bounded far below 4 GiB by the event's validation.
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

/// Encrypts `plaintext` (an unsealed record) for `envelope` with `key`.
pub(crate) fn seal(key: &DataKey, envelope: Envelope, plaintext: &[u8]) -> SealedEvent {
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    let aad = associated_data(&envelope, key.id());
    let ciphertext = key
        .cipher()
        .encrypt(
            Nonce::from_slice(&nonce),
            AeadPayload {
                msg: plaintext,
                aad: &aad,
            },
        )
        // AES-GCM encryption fails only for inputs over 64 GiB; records are capped at 16 MiB.
        .expect("a record under the size cap always encrypts");
    SealedEvent {
        envelope,
        key_id: key.id().to_owned(),
        nonce,
        ciphertext,
    }
}

/// Decrypts a sealed record's plaintext; `None` when the key, the envelope or the bytes do not
/// match (a wrong key and a tampered record look the same, by design of the AEAD).
pub(crate) fn unseal(key: &DataKey, sealed: &SealedEvent) -> Option<Vec<u8>> {
    let aad = associated_data(&sealed.envelope, &sealed.key_id);
    key.cipher()
        .decrypt(
            Nonce::from_slice(&sealed.nonce),
            AeadPayload {
                msg: &sealed.ciphertext,
                aad: &aad,
            },
        )
        .ok()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_bytes_open_with_their_key_and_binding_only() {
        let key = DataKey::generate();
        let sealed = key.seal_bytes(b"acme\0abc", b"the artifact's words");
        assert!(
            !sealed.windows(5).any(|w| w == b"words"),
            "no plaintext in the sealed bytes"
        );
        assert_eq!(
            key.open_bytes(b"acme\0abc", &sealed).as_deref(),
            Some(&b"the artifact's words"[..])
        );
        assert_eq!(key.open_bytes(b"globex\0abc", &sealed), None, "moved");
        assert_eq!(DataKey::generate().open_bytes(b"acme\0abc", &sealed), None);
        let mut flipped = sealed.clone();
        flipped[NONCE_LEN + 1] ^= 1;
        assert_eq!(key.open_bytes(b"acme\0abc", &flipped), None, "tampered");
        assert_eq!(
            key.open_bytes(b"acme\0abc", &sealed[..10]),
            None,
            "cut short"
        );
    }
}
