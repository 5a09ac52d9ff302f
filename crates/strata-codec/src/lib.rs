//! Strata's wire format: the Avro schemas of the event and the codec the log uses.
//!
//! # Record layout
//!
//! Every record is one event in Avro [single-object encoding]:
//!
//! | bytes | content |
//! | --- | --- |
//! | 2 | marker `C3 01` |
//! | 8 | CRC-64-AVRO (Rabin) fingerprint of the writer schema's Parsing Canonical Form, little-endian |
//! | rest | the Avro binary datum of a `strata.Event` |
//!
//! so any consumer can tell which schema wrote a record. [`AvroCodec::fingerprint_hex`] is the
//! current fingerprint as it goes into the Kafka header. The fingerprint is the specification's,
//! as Java, Go and fastavro compute it (`schemas/event.avsc`, version 4: `0a76c36dd4f10bd1` in
//! wire order; version 3 `b4b48a90e4084ed5`, version 2 `44e736533d36050b`): apache-avro 0.21's own canonical form keeps the
//! logical-typed `timestamp` as `{"type":"long"}`, so records written before this fix carry its
//! fingerprint (`a73c55ec80f3c10f` for version 2, `a5e1daae55a8815e` for version 1); those are
//! still read.
//!
//! # Schemas and versions
//!
//! The schemas live in `schemas/` at the workspace root and are compiled in:
//! `event.avsc` is the current version ([`CURRENT_SCHEMA_VERSION`]), `event.vN.avsc` are the
//! older ones, kept verbatim so old records stay readable. Envelope and payload fields are typed;
//! unknown JSON fields (the `extra` maps of the core model) and free-form JSON values (tool
//! arguments and schemas, summaries, assemblies) travel as JSON text, so
//! `decode(encode(e)) == e` for every event.
//!
//! Decoding picks the writer schema by fingerprint and resolves it to the current one by name:
//! fields the writer lacks get the current schema's defaults (all additions are nullable with a
//! `null` default), and the payload union branch is chosen by record name. apache-avro's own
//! `Value::resolve` (0.21) is not used: it picks a union branch by shape, not by name, and
//! all-optional records fit almost anything (it turns a version 1 `SubagentPromoted` into a
//! `StateUpdated` and drops `child_session_id`); it also re-resolves the schema for every record,
//! about 100 µs each. When the writer schema is the current one the same code runs with nothing
//! to fill in.
//!
//! To evolve the schema: copy `event.avsc` to `event.v{N}.avsc` unchanged, make only
//! backward-compatible changes (new fields with defaults) in `event.avsc`, bump
//! [`CURRENT_SCHEMA_VERSION`], add the old text to the known versions in `schema.rs`, and pin the
//! new fingerprint in the tests. A schema that has written records must never be edited. A new
//! version must be readable before it is written: deploy the consumers before the producers.
//!
//! # Example
//!
//! ```
//! use strata_codec::AvroCodec;
//! use strata_core::Event;
//!
//! let event = Event::from_json(
//!     serde_json::json!({
//!         "event_id": "evt_1", "tenant_id": "acme", "session_id": "s1",
//!         "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
//!         "payload": {"message_id": "m1", "text": "fix the build", "priority": "high"}
//!     }),
//!     None,
//! )?;
//! let codec = AvroCodec::new();
//! let bytes = codec.encode(&event)?;
//! assert_eq!(&bytes[..2], &[0xC3, 0x01]);
//! assert_eq!(codec.decode(&bytes)?, event);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Sealed records
//!
//! From version 4 a record's payload may be the `Sealed` branch: the event encrypted with its
//! session's data key ([`AvroCodec::encode_sealed`], [`AvroCodec::open`]), the envelope left
//! readable. [`AvroCodec::decode_record`] tells the two kinds apart; [`AvroCodec::decode`] reads
//! plain records only. Keys and their storage are `strata-keys`' concern.
//!
//! [single-object encoding]: https://avro.apache.org/docs/1.12.0/specification/#single-object-encoding

mod decode;
mod encode;
mod error;
mod schema;
mod seal;
mod sealed_record;

use std::cell::RefCell;
use std::fmt;
use std::io::Read;

use apache_avro::{GenericSingleObjectReader, GenericSingleObjectWriter, Schema};
use strata_core::Event;

pub use error::{Error, Result};
pub use schema::{CURRENT_SCHEMA_VERSION, SCHEMA_CURRENT, SCHEMA_V1, SCHEMA_V2, SCHEMA_V3};
pub use seal::{DataKey, Envelope, Record, SealedEvent, DATA_KEY_LEN, NONCE_LEN, TAG_LEN};

use schema::{Version, REGISTRY};

/// The two bytes every single-object encoded record starts with.
pub const SINGLE_OBJECT_MARKER: [u8; 2] = [0xC3, 0x01];

/// Length of the single-object header: marker plus 8-byte fingerprint.
pub const HEADER_LEN: usize = 10;

/// Encodes events to and decodes them from Avro single-object records.
///
/// The schemas are parsed once per process; the codec itself is a zero-cost handle, cheap to
/// clone and to share between threads.
#[derive(Clone, Copy)]
pub struct AvroCodec {
    _private: (),
}

impl fmt::Debug for AvroCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AvroCodec")
            .field("schema_version", &CURRENT_SCHEMA_VERSION)
            .field("fingerprint", &self.fingerprint_hex())
            .field("readable_versions", &REGISTRY.known_versions())
            .finish()
    }
}

impl Default for AvroCodec {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    /// One single-object writer per schema version and thread: apache-avro's writer needs
    /// `&mut self` and pre-resolves the schema's names, which `to_avro_datum` would redo for
    /// every record.
    static WRITERS: RefCell<Vec<Option<GenericSingleObjectWriter>>> = const { RefCell::new(Vec::new()) };
}

/// The largest record the codec writes or reads. Every length inside a record (a string, an
/// array's item count) is at most the record's size, so capping apache-avro's allocations at it
/// makes a forged length an error instead of an allocation: a 40-byte record claiming a
/// 500-million-item array would otherwise ask for 28 GB and abort the process.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// Caps apache-avro's allocations at [`MAX_RECORD_BYTES`] before anything is decoded (the limit
/// is set once per process; a decode before this call would fix it at the library's 512 MiB).
fn cap_allocations() {
    static CAPPED: std::sync::Once = std::sync::Once::new();
    CAPPED.call_once(|| {
        apache_avro::util::max_allocation_bytes(MAX_RECORD_BYTES);
    });
}

impl AvroCodec {
    /// A codec writing the current schema and reading every known version.
    ///
    /// The first call in a process parses the bundled schemas.
    ///
    /// # Panics
    ///
    /// If a bundled schema does not parse, which the crate's tests rule out.
    pub fn new() -> Self {
        cap_allocations();
        let _ = REGISTRY.current();
        AvroCodec { _private: () }
    }

    /// Encodes `event` with the current schema.
    pub fn encode(&self, event: &Event) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(256);
        self.encode_into(event, &mut out)?;
        Ok(out)
    }

    /// Appends the record of `event`, written with the current schema, to `out`.
    pub fn encode_into(&self, event: &Event, out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        write(REGISTRY.current(), event, out)?;
        let bytes = out.len() - start;
        if bytes > MAX_RECORD_BYTES {
            out.truncate(start);
            return Err(Error::TooLarge {
                bytes,
                max: MAX_RECORD_BYTES,
            });
        }
        Ok(())
    }

    /// Encodes `event` with schema `version` (one of [`AvroCodec::schema_versions`]); for
    /// fixtures and compatibility tests. Fails with [`Error::InvalidPayload`] rather than drop a
    /// field the older schema cannot hold.
    pub fn encode_with_schema_version(&self, event: &Event, version: u32) -> Result<Vec<u8>> {
        let v = REGISTRY
            .by_version(version)
            .ok_or_else(|| Error::UnknownSchemaVersion {
                version,
                known: REGISTRY.known_versions(),
            })?;
        let mut out = Vec::with_capacity(256);
        write(v, event, &mut out)?;
        Ok(out)
    }

    /// Seals `event` with `key` (its session's data key) and encodes the sealed record with the
    /// current schema: the envelope readable, the rest AES-256-GCM encrypted
    /// (`docs/design/forgetting.md`).
    pub fn encode_sealed(&self, event: &Event, key: &DataKey) -> Result<Vec<u8>> {
        let plaintext = self.encode(event)?;
        let sealed = seal::seal(key, Envelope::of(event), &plaintext);
        let mut out = Vec::with_capacity(plaintext.len() + 128);
        sealed_record::write(&sealed, REGISTRY.current(), &mut out)?;
        if out.len() > MAX_RECORD_BYTES {
            return Err(Error::TooLarge {
                bytes: out.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        Ok(out)
    }

    /// Opens a sealed record with its key: the event as it was sealed. Fails with
    /// [`Error::Unseal`] when `key` is not the record's or the record was altered, and when
    /// what the seal holds is not the event its envelope names.
    pub fn open(&self, sealed: &SealedEvent, key: &DataKey) -> Result<Event> {
        let unseal_error = |what| Error::Unseal {
            event_id: sealed.envelope.event_id.clone(),
            key_id: key.id().to_owned(),
            what,
        };
        if key.id() != sealed.key_id {
            return Err(unseal_error("the record names another key"));
        }
        let plaintext = seal::unseal(key, sealed)
            .ok_or_else(|| unseal_error("authentication failed (wrong key or altered record)"))?;
        let event = match self.decode_record(&plaintext)? {
            Record::Plain(event) => event,
            Record::Sealed(_) => return Err(unseal_error("the seal holds another sealed record")),
        };
        if Envelope::of(&event) != sealed.envelope {
            return Err(unseal_error("the sealed event does not match its envelope"));
        }
        Ok(event)
    }

    /// Decodes one record written with any known schema version; a sealed record is an
    /// [`Error::Sealed`] (use [`AvroCodec::decode_record`] where records may be sealed).
    pub fn decode(&self, bytes: &[u8]) -> Result<Event> {
        match self.decode_record(bytes)? {
            Record::Plain(event) => Ok(event),
            Record::Sealed(sealed) => Err(Error::Sealed {
                event_id: sealed.envelope.event_id,
                key_id: sealed.key_id,
            }),
        }
    }

    /// Decodes one record written with any known schema version: a plain event, or a sealed one
    /// to [`open`](AvroCodec::open) with its key.
    pub fn decode_record(&self, bytes: &[u8]) -> Result<Record> {
        cap_allocations();
        if bytes.len() > MAX_RECORD_BYTES {
            return Err(Error::TooLarge {
                bytes: bytes.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        let (version, reader) = writer_version(bytes)?;
        let mut input = Guarded {
            rest: bytes,
            hit_end: false,
        };
        let value = reader.read_value(&mut input);
        // apache-avro reads a union index at end of input as branch 0 (null) instead of failing,
        // so a record cut before a trailing nullable field would decode; the guard catches it.
        if input.hit_end {
            return Err(Error::Truncated {
                len: bytes.len(),
                what: "the datum ends before its last field",
            });
        }
        let value = value.map_err(|source| Error::Schema {
            version: version.version,
            source,
        })?;
        if !input.rest.is_empty() {
            return Err(Error::TrailingBytes {
                count: input.rest.len(),
            });
        }
        decode::record_from_avro(value, version)
    }

    /// The version of the schema that wrote `bytes`, read from its header.
    pub fn schema_version_of(&self, bytes: &[u8]) -> Result<u32> {
        writer_version(bytes).map(|(v, _)| v.version)
    }

    /// Fingerprint of the current schema as 16 lowercase hex digits, in wire (little-endian)
    /// byte order: the bytes after the marker, as apache-avro's `SchemaFingerprint` prints them.
    pub fn fingerprint_hex(&self) -> String {
        schema::hex(&REGISTRY.current().fingerprint)
    }

    /// Fingerprint of schema `version` as it appears in the record header.
    pub fn fingerprint_of(&self, version: u32) -> Option<[u8; 8]> {
        REGISTRY.by_version(version).map(|v| v.fingerprint)
    }

    /// The parsed schema `version`.
    pub fn schema(&self, version: u32) -> Option<&'static Schema> {
        REGISTRY.by_version(version).map(|v| &v.schema)
    }

    /// Every schema version this codec can read, oldest first.
    pub fn schema_versions(&self) -> Vec<u32> {
        REGISTRY.known_versions()
    }
}

fn write(version: &'static Version, event: &Event, out: &mut Vec<u8>) -> Result<()> {
    let value = encode::event_to_avro(event, version)?;
    write_value(version, &value, out)
}

fn write_value(
    version: &'static Version,
    value: &apache_avro::types::Value,
    out: &mut Vec<u8>,
) -> Result<()> {
    let index = version.index;
    WRITERS.with_borrow_mut(|writers| {
        if writers.len() <= index {
            writers.resize_with(index + 1, || None);
        }
        let writer = match &mut writers[index] {
            Some(w) => w,
            slot => slot.insert(
                GenericSingleObjectWriter::new_with_capacity_and_header_builder(
                    &version.schema,
                    1024,
                    schema::Header(version.fingerprint),
                )
                .map_err(|source| Error::Schema {
                    version: version.version,
                    source,
                })?,
            ),
        };
        let result = writer.write_value_ref(value, out).map(drop);
        if result.is_err() {
            // A failed write can leave part of the datum in the writer's buffer, which would
            // be prepended to the next record: start over with a fresh writer.
            writers[index] = None;
        }
        result.map_err(|source| Error::Schema {
            version: version.version,
            source,
        })
    })
}

/// The known schema whose fingerprint is in the header of `bytes`, and the reader of that header
/// (the standard fingerprint's, or the legacy one's).
fn writer_version(bytes: &[u8]) -> Result<(&'static Version, &'static GenericSingleObjectReader)> {
    if bytes.len() < 2 {
        return Err(Error::Truncated {
            len: bytes.len(),
            what: "shorter than the 2-byte single-object marker",
        });
    }
    if bytes[..2] != SINGLE_OBJECT_MARKER {
        return Err(Error::BadMarker {
            found: [bytes[0], bytes[1]],
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(Error::Truncated {
            len: bytes.len(),
            what: "shorter than the 10-byte single-object header",
        });
    }
    let fingerprint = &bytes[2..HEADER_LEN];
    REGISTRY
        .by_fingerprint(fingerprint)
        .ok_or_else(|| Error::UnknownFingerprint {
            fingerprint: schema::hex(fingerprint),
            known: REGISTRY
                .versions
                .iter()
                .map(|v| {
                    format!(
                        "{} (v{}; also read: {})",
                        schema::hex(&v.fingerprint),
                        v.version,
                        schema::hex(&v.legacy_fingerprint)
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// A byte slice reader that remembers whether anyone tried to read past its end.
struct Guarded<'a> {
    rest: &'a [u8],
    hit_end: bool,
}

impl Read for Guarded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() && !buf.is_empty() {
            self.hit_end = true;
        }
        self.rest.read(buf)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        if buf.len() > self.rest.len() {
            self.hit_end = true;
        }
        self.rest.read_exact(buf)
    }
}
