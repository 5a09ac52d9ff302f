//! Reading a file as a stream of records, whatever its layout.
//!
//! - JSONL: a record per non-empty line.
//! - A JSON array: a record per element, parsed one at a time.
//! - A JSON object: its small fields first, together, as one header record; then the elements
//!   of the big arrays the converter names ([`crate::Converter::streamed_fields`]), in the order
//!   it names them. Those are spooled to temporary files while the object is parsed (their
//!   elements may come before the fields a converter needs first), one element in memory at a
//!   time.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{Error, Format, Result, Source};

/// Where a record is in its file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Position {
    /// A JSONL line (1-based); shown as `file:12:` like a compiler's message.
    Line(u64),
    /// An element of a top-level array (`field` is `None` when the document is the array).
    Element { field: Option<String>, index: u64 },
    /// A JSON object's small fields.
    Header,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Line(n) => write!(f, "{n}"),
            Position::Element { field: None, index } => write!(f, "element {index}"),
            Position::Element {
                field: Some(field),
                index,
            } => write!(f, "{field}[{index}]"),
            Position::Header => f.write_str("top-level fields"),
        }
    }
}

impl Position {
    /// A short stable key of the position (part of event ids).
    pub fn key(&self) -> String {
        match self {
            Position::Line(n) => format!("L{n}"),
            Position::Element { field: None, index } => format!("E{index}"),
            Position::Element {
                field: Some(f),
                index,
            } => format!("{f}.{index}"),
            Position::Header => "H".into(),
        }
    }
}

/// One record of a file.
#[derive(Debug, Clone)]
pub struct Record {
    pub position: Position,
    pub value: Value,
    /// SHA-256 of the record's bytes (the line as written, or the element re-serialized): part
    /// of the ids of the events it gives.
    pub fingerprint: [u8; 32],
}

impl Record {
    /// Whether this is a document's header (its small fields).
    pub fn is_header(&self) -> bool {
        self.position == Position::Header
    }

    /// The header's fields; empty for other records.
    pub fn header(&self) -> Option<&Map<String, Value>> {
        if self.is_header() {
            self.value.as_object()
        } else {
            None
        }
    }

    fn new(position: Position, value: Value, bytes: &[u8]) -> Self {
        Self {
            position,
            value,
            fingerprint: Sha256::digest(bytes).into(),
        }
    }

    fn element(position: Position, value: Value) -> Self {
        let bytes = serde_json::to_vec(&value).unwrap_or_default();
        Self::new(position, value, &bytes)
    }
}

/// How a format's files are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One JSON value per line.
    Jsonl,
    /// One JSON document (an array or an object).
    Document,
    /// JSONL when the first line is a complete JSON value (and is not an array), else a
    /// document.
    Either,
}

/// The layout of a format's files.
pub fn mode_of(format: Format) -> Mode {
    match format {
        Format::Canonical | Format::ClaudeCode | Format::Codex => Mode::Jsonl,
        Format::SweAgent | Format::MiniSweAgent => Mode::Document,
        Format::OpenaiChat | Format::OpenaiResponses => Mode::Either,
    }
}

fn io_error(source: &Source) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        file: source.name.clone(),
        source: e,
    }
}

/// Calls `each` with every record of `source`, in order; stops at the first error.
pub fn records(
    source: &Source,
    mode: Mode,
    streamed_fields: &[&str],
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    records_with(source, mode, streamed_fields, None, each)
}

/// [`records`], handing a JSONL line that is not JSON to `bad_line` (and going on) instead of
/// stopping, when given.
pub fn records_with(
    source: &Source,
    mode: Mode,
    streamed_fields: &[&str],
    bad_line: Option<&mut dyn FnMut(Error)>,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let mode = match mode {
        Mode::Either if first_line_is_value(source)? => Mode::Jsonl,
        Mode::Either => Mode::Document,
        m => m,
    };
    match mode {
        Mode::Jsonl => jsonl(source, bad_line, each),
        _ => document(source, streamed_fields, each),
    }
}

/// Whether the first non-empty line of `source` is a whole JSON object on its own.
fn first_line_is_value(source: &Source) -> Result<bool> {
    let file = File::open(&source.path).map_err(io_error(source))?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader
            .read_until(b'\n', &mut line)
            .map_err(io_error(source))?
            == 0
        {
            return Ok(false);
        }
        let trimmed = trim(&line);
        if trimmed.is_empty() {
            continue;
        }
        return Ok(
            trimmed.first() == Some(&b'{') && serde_json::from_slice::<IgnoredAny>(trimmed).is_ok()
        );
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

fn jsonl(
    source: &Source,
    mut bad_line: Option<&mut dyn FnMut(Error)>,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let file = File::open(&source.path).map_err(io_error(source))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        if reader
            .read_until(b'\n', &mut line)
            .map_err(io_error(source))?
            == 0
        {
            return Ok(());
        }
        n += 1;
        let bytes = trim(&line);
        if bytes.is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) => {
                let error = Error::Record {
                    file: source.name.clone(),
                    position: Position::Line(n),
                    message: format!("not valid JSON: {e}"),
                };
                match bad_line.as_mut() {
                    Some(report) => {
                        report(error);
                        continue;
                    }
                    None => return Err(error),
                }
            }
        };
        each(Record::new(Position::Line(n), value, bytes))?;
    }
}

/// What a document's top level was.
enum Top {
    /// An array: its elements went to the callback as they were parsed.
    Array,
    /// An object: its small fields, and its big arrays spooled to disk.
    Object {
        header: Map<String, Value>,
        spools: Vec<Spool>,
    },
}

/// The elements of one big array, one JSON value per line of a temporary file.
struct Spool {
    field: String,
    file: File,
}

fn document(
    source: &Source,
    streamed_fields: &[&str],
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    let file = File::open(&source.path).map_err(io_error(source))?;
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 16, file));
    let mut failure: Option<Error> = None;
    let top = de::Deserializer::deserialize_any(
        &mut de,
        TopVisitor {
            streamed_fields,
            each: &mut *each,
            failure: &mut failure,
        },
    )
    .and_then(|top| de.end().map(|()| top));
    if let Some(e) = failure {
        return Err(e);
    }
    let top = top.map_err(|e| Error::File {
        file: source.name.clone(),
        message: format!("not a valid JSON document: {e}"),
    })?;
    let Top::Object { header, mut spools } = top else {
        return Ok(());
    };
    each(Record::element(Position::Header, Value::Object(header)))?;
    spools.sort_by_key(|s| streamed_fields.iter().position(|f| *f == s.field));
    for spool in spools {
        replay_spool(source, spool, each)?;
    }
    Ok(())
}

fn replay_spool(
    source: &Source,
    mut spool: Spool,
    each: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<()> {
    spool
        .file
        .seek(std::io::SeekFrom::Start(0))
        .map_err(io_error(source))?;
    let mut reader = BufReader::with_capacity(1 << 16, spool.file);
    let mut line = Vec::new();
    let mut index = 0u64;
    loop {
        line.clear();
        if reader
            .read_until(b'\n', &mut line)
            .map_err(io_error(source))?
            == 0
        {
            return Ok(());
        }
        let bytes = trim(&line);
        let position = Position::Element {
            field: Some(spool.field.clone()),
            index,
        };
        let value = serde_json::from_slice(bytes).map_err(|e| Error::Record {
            file: source.name.clone(),
            position: position.clone(),
            message: format!("spooled element unreadable: {e}"),
        })?;
        each(Record::new(position, value, bytes))?;
        index += 1;
    }
}

/// The error serde unwinds with when the callback failed (the callback's own error is kept
/// aside and reported instead).
const STOPPED: &str = "stopped by the converter";

struct TopVisitor<'a, 'f> {
    streamed_fields: &'a [&'a str],
    each: &'a mut dyn FnMut(Record) -> Result<()>,
    failure: &'f mut Option<Error>,
}

impl<'de> Visitor<'de> for TopVisitor<'_, '_> {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array or object")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        let mut index = 0u64;
        while let Some(value) = seq.next_element::<Value>()? {
            let record = Record::element(Position::Element { field: None, index }, value);
            if let Err(e) = (self.each)(record) {
                *self.failure = Some(e);
                return Err(de::Error::custom(STOPPED));
            }
            index += 1;
        }
        Ok(Top::Array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut header = Map::new();
        let mut spools = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if self.streamed_fields.contains(&key.as_str()) {
                let file = tempfile::tempfile().map_err(de::Error::custom)?;
                let mut writer = BufWriter::new(file);
                map.next_value_seed(SpoolSeed {
                    writer: &mut writer,
                })?;
                let file = writer
                    .into_inner()
                    .map_err(|e| de::Error::custom(e.error()))?;
                spools.push(Spool { field: key, file });
            } else {
                let value = map.next_value::<Value>()?;
                header.insert(key, value);
            }
        }
        Ok(Top::Object { header, spools })
    }
}

/// Writes the elements of an array, one per line; `null` is an empty array.
struct SpoolSeed<'w> {
    writer: &'w mut BufWriter<File>,
}

impl<'de> DeserializeSeed<'de> for SpoolSeed<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SpoolSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(value) = seq.next_element::<Value>()? {
            serde_json::to_writer(&mut *self.writer, &value).map_err(de::Error::custom)?;
            self.writer.write_all(b"\n").map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

/// The first element of a top-level JSON array, or the top-level keys of an object (with the
/// values of the short string ones), read without holding the document: what detection needs.
#[derive(Debug, Default)]
pub struct Outline {
    /// The document is an array; its first element.
    pub first_element: Option<Value>,
    /// The document is an array; its first elements (up to [`OUTLINE_HEAD`]): a list whose
    /// first element fits two formats is told by the next ones.
    pub head: Vec<Value>,
    pub is_array: bool,
    /// The object's keys, in order, with short string values.
    pub keys: Vec<(String, Option<String>)>,
    /// First element of each array-valued key (an object's `messages[0]`, ...).
    pub first_of: Map<String, Value>,
}

/// Elements of a top-level array an [`Outline`] keeps.
pub const OUTLINE_HEAD: usize = 16;

/// Reads the outline of a JSON document.
pub fn outline(reader: impl Read) -> std::result::Result<Outline, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 16, reader));
    de::Deserializer::deserialize_any(&mut de, OutlineVisitor)
}

struct OutlineVisitor;

impl<'de> Visitor<'de> for OutlineVisitor {
    type Value = Outline;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array or object")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Outline, A::Error> {
        // The first elements; the rest is skipped without being kept.
        let mut head = Vec::new();
        while head.len() < OUTLINE_HEAD {
            match seq.next_element::<Value>()? {
                Some(v) => head.push(v),
                None => break,
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Outline {
            first_element: head.first().cloned(),
            head,
            is_array: true,
            ..Outline::default()
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Outline, A::Error> {
        let mut outline = Outline::default();
        while let Some(key) = map.next_key::<String>()? {
            let first = map.next_value_seed(FirstOf)?;
            match first {
                Peek::Short(s) => outline.keys.push((key, Some(s))),
                Peek::First(v) => {
                    outline.first_of.insert(key.clone(), v);
                    outline.keys.push((key, None));
                }
                Peek::Other => outline.keys.push((key, None)),
            }
        }
        Ok(outline)
    }
}

enum Peek {
    Short(String),
    First(Value),
    Other,
}

/// A value's peek: a short string itself, an array's first element, nothing of the rest.
struct FirstOf;

impl<'de> DeserializeSeed<'de> for FirstOf {
    type Value = Peek;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Peek, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FirstOf {
    type Value = Peek;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Peek, E> {
        Ok(if v.len() <= 256 {
            Peek::Short(v.to_owned())
        } else {
            Peek::Other
        })
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Peek, E> {
        self.visit_str(&v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Peek, A::Error> {
        let first = seq.next_element::<Value>()?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(first.map_or(Peek::Other, Peek::First))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Peek, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Peek::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Peek, E> {
        Ok(Peek::Other)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Peek, E> {
        Ok(Peek::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Peek, E> {
        Ok(Peek::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Peek, E> {
        Ok(Peek::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Peek, E> {
        Ok(Peek::Other)
    }
}
