//! The bundled schema versions, parsed once.

use std::collections::HashMap;
use std::sync::LazyLock;

use apache_avro::rabin::Rabin;
use apache_avro::{GenericSingleObjectReader, Schema};
use strata_core::EventType;

/// Text of schema version 1 (`schemas/event.v1.avsc`).
pub const SCHEMA_V1: &str = include_str!("../../../schemas/event.v1.avsc");
/// Text of schema version 2 (`schemas/event.v2.avsc`).
pub const SCHEMA_V2: &str = include_str!("../../../schemas/event.v2.avsc");
/// Text of schema version 3 (`schemas/event.v3.avsc`).
pub const SCHEMA_V3: &str = include_str!("../../../schemas/event.v3.avsc");
/// Text of the current schema, version 4 (`schemas/event.avsc`).
pub const SCHEMA_CURRENT: &str = include_str!("../../../schemas/event.avsc");

/// Version of the schema [`crate::AvroCodec::encode`] writes with.
pub const CURRENT_SCHEMA_VERSION: u32 = 4;

/// Name of the payload record that holds a sealed event (schema version 4 on).
pub(crate) const SEALED_RECORD: &str = "Sealed";

/// Every schema version the codec can read, oldest first, with its text.
const KNOWN: [(u32, &str); 4] = [
    (1, SCHEMA_V1),
    (2, SCHEMA_V2),
    (3, SCHEMA_V3),
    (CURRENT_SCHEMA_VERSION, SCHEMA_CURRENT),
];

/// One known writer schema with everything precomputed that encoding and decoding need.
pub(crate) struct Version {
    /// Position in [`Registry::versions`].
    pub(crate) index: usize,
    pub(crate) version: u32,
    pub(crate) schema: Schema,
    /// CRC-64-AVRO of the specification's Parsing Canonical Form, little-endian, as on the wire:
    /// what Java, Go and fastavro compute, and what the codec writes.
    pub(crate) fingerprint: [u8; 8],
    /// The fingerprint apache-avro 0.21 computes (its canonical form keeps a logical-typed
    /// primitive as `{"type":"long"}`), which records written before the fix carry: still read.
    pub(crate) legacy_fingerprint: [u8; 8],
    /// Decodes a record with the standard header (names resolved once, not per record).
    pub(crate) reader: GenericSingleObjectReader,
    /// Decodes a record with the legacy header.
    pub(crate) legacy_reader: GenericSingleObjectReader,
    /// Event type of each branch of the `payload` union, by position (`None`: not a known type).
    pub(crate) payload_types: Vec<Option<EventType>>,
    /// Position of each event type in the `payload` union.
    pub(crate) payload_index: HashMap<EventType, u32>,
    /// Position of the [`SEALED_RECORD`] in the `payload` union, when the version has one.
    pub(crate) sealed_index: Option<u32>,
}

pub(crate) struct Registry {
    /// Sorted by version; the last one is the current schema.
    pub(crate) versions: Vec<Version>,
}

pub(crate) static REGISTRY: LazyLock<Registry> = LazyLock::new(|| Registry {
    versions: KNOWN
        .iter()
        .enumerate()
        .map(|(index, &(version, text))| {
            Version::parse(index, version, text)
                .unwrap_or_else(|e| panic!("bundled avro schema version {version} is broken: {e}"))
        })
        .collect(),
});

impl Registry {
    pub(crate) fn current(&self) -> &Version {
        // KNOWN is a non-empty constant.
        &self.versions[self.versions.len() - 1]
    }

    pub(crate) fn by_version(&self, version: u32) -> Option<&Version> {
        self.versions.iter().find(|v| v.version == version)
    }

    /// The version whose standard or legacy fingerprint this is, and the reader of that header.
    pub(crate) fn by_fingerprint(
        &self,
        fingerprint: &[u8],
    ) -> Option<(&Version, &GenericSingleObjectReader)> {
        self.versions.iter().find_map(|v| {
            if v.fingerprint.as_slice() == fingerprint {
                Some((v, &v.reader))
            } else if v.legacy_fingerprint.as_slice() == fingerprint {
                Some((v, &v.legacy_reader))
            } else {
                None
            }
        })
    }

    pub(crate) fn known_versions(&self) -> Vec<u32> {
        self.versions.iter().map(|v| v.version).collect()
    }
}

impl Version {
    fn parse(index: usize, version: u32, text: &str) -> Result<Version, String> {
        let schema = Schema::parse_str(text).map_err(|e| e.to_string())?;
        let legacy_fingerprint = rabin(&schema)?;
        // The specification's form strips `logicalType` and writes a bare primitive by its name;
        // re-parsed, that form has no logical type left, so apache-avro fingerprints it right.
        let canonical = Schema::parse_str(&parsing_canonical_form(&schema))
            .map_err(|e| format!("canonical form does not parse: {e}"))?;
        let fingerprint = rabin(&canonical)?;
        let names = payload_record_names(&schema)?;
        let sealed_index = names
            .iter()
            .position(|name| name == SEALED_RECORD)
            .map(|i| u32::try_from(i).map_err(|_| "payload union too large".to_owned()))
            .transpose()?;
        let payload_types = names
            .into_iter()
            .map(|name| EventType::parse(&name))
            .collect::<Vec<_>>();
        let mut payload_index = HashMap::new();
        for (i, ty) in payload_types.iter().enumerate() {
            if let Some(ty) = ty {
                let i = u32::try_from(i).map_err(|_| "payload union too large".to_owned())?;
                payload_index.insert(*ty, i);
            }
        }
        let reader_of = |fingerprint: [u8; 8]| {
            GenericSingleObjectReader::new_with_header_builder(schema.clone(), Header(fingerprint))
                .map_err(|e| e.to_string())
        };
        let reader = reader_of(fingerprint)?;
        let legacy_reader = reader_of(legacy_fingerprint)?;
        Ok(Version {
            index,
            version,
            schema,
            fingerprint,
            legacy_fingerprint,
            reader,
            legacy_reader,
            payload_types,
            payload_index,
            sealed_index,
        })
    }
}

/// The single-object header of a fingerprint.
pub(crate) struct Header(pub(crate) [u8; 8]);

impl apache_avro::headers::HeaderBuilder for Header {
    fn build_header(&self) -> Vec<u8> {
        let mut header = vec![0xC3, 0x01];
        header.extend_from_slice(&self.0);
        header
    }
}

/// CRC-64-AVRO of apache-avro's canonical form of `schema`, in wire order.
fn rabin(schema: &Schema) -> Result<[u8; 8], String> {
    schema
        .fingerprint::<Rabin>()
        .bytes
        .as_slice()
        .try_into()
        .map_err(|_| "rabin fingerprint is not 8 bytes".to_owned())
}

/// The Parsing Canonical Form of the Avro specification: apache-avro's, with every primitive
/// that it leaves as an object (`{"type":"long"}`, once its `logicalType` is stripped) written
/// by its name, as the specification's PRIMITIVES and STRIP rules say.
pub(crate) fn parsing_canonical_form(schema: &Schema) -> String {
    let mut form = schema.canonical_form();
    for primitive in [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ] {
        form = form.replace(
            &format!("{{\"type\":\"{primitive}\"}}"),
            &format!("\"{primitive}\""),
        );
    }
    form
}

/// Names (without namespace) of the records in the `payload` union of an event schema.
fn payload_record_names(schema: &Schema) -> Result<Vec<String>, String> {
    let Schema::Record(record) = schema else {
        return Err("the event schema is not a record".into());
    };
    let field = record
        .fields
        .iter()
        .find(|f| f.name == "payload")
        .ok_or("the event schema has no payload field")?;
    let Schema::Union(union) = &field.schema else {
        return Err("the payload field is not a union".into());
    };
    union
        .variants()
        .iter()
        .map(|branch| match branch {
            Schema::Record(r) => Ok(r.name.name.clone()),
            other => Err(format!("payload union branch is not a record: {other:?}")),
        })
        .collect()
}

/// Formats a fingerprint as 16 lowercase hex digits, bytes in wire order.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(16), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
