//! The codec's error type.

/// Everything that can go wrong while encoding or decoding an event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The record does not start with the Avro single-object marker `C3 01`.
    #[error("not an avro single-object record: marker is {found:02x?}, expected [c3, 01]")]
    BadMarker {
        /// The first two bytes of the record.
        found: [u8; 2],
    },
    /// The record ends before its header or its datum is complete.
    #[error("truncated record of {len} bytes: {what}")]
    Truncated {
        /// Length of the record that was given.
        len: usize,
        /// Which part is incomplete.
        what: &'static str,
    },
    /// The writer-schema fingerprint in the header matches no schema version this codec knows.
    #[error("unknown writer schema fingerprint {fingerprint} (known: {known})")]
    UnknownFingerprint {
        /// The fingerprint found, as 16 hex digits in wire order.
        fingerprint: String,
        /// The fingerprints this codec can read, with their versions.
        known: String,
    },
    /// A schema version was asked for that this codec does not have.
    #[error("unknown schema version {version} (known: {known:?})")]
    UnknownSchemaVersion {
        /// The version asked for.
        version: u32,
        /// The versions this codec has.
        known: Vec<u32>,
    },
    /// The datum does not match its schema: Avro decoding or encoding failed.
    #[error("avro datum does not match schema version {version}")]
    Schema {
        /// Version of the schema the datum was read or written with.
        version: u32,
        /// What apache-avro reported.
        #[source]
        source: apache_avro::Error,
    },
    /// Bytes are left over after the datum.
    #[error("{count} trailing bytes after the datum")]
    TrailingBytes {
        /// How many bytes are left.
        count: usize,
    },
    /// The record would be larger than [`crate::MAX_RECORD_BYTES`].
    #[error("the record is {bytes} bytes, more than the {max} bytes a log record may hold")]
    TooLarge {
        /// Size of the encoded record.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The record is sealed and was read without its key ([`crate::AvroCodec::decode_record`]
    /// and [`crate::AvroCodec::open`] read it).
    #[error("the record of event {event_id} is sealed with data key {key_id}: open it with its session's key")]
    Sealed {
        /// Id of the sealed event (the envelope is readable).
        event_id: String,
        /// Id of the key that sealed it.
        key_id: String,
    },
    /// A sealed record did not open: the key is not the one that sealed it, or the record was
    /// altered (AES-GCM does not tell the two apart).
    #[error("the sealed record of event {event_id} does not open with data key {key_id}: {what}")]
    Unseal {
        /// Id of the sealed event.
        event_id: String,
        /// Id of the key that was tried.
        key_id: String,
        /// What went wrong.
        what: &'static str,
    },
    /// The datum is valid Avro but not a valid event, or a field of the event cannot be written
    /// with the chosen schema version.
    #[error("invalid payload at {field}: {message}")]
    InvalidPayload {
        /// Dotted path of the field, e.g. `payload.output_bytes`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

/// The codec's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidPayload {
            field: field.into(),
            message: message.into(),
        }
    }
}
