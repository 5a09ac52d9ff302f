//! Compact JSON text written straight from a `Serialize` value, byte for byte what going through
//! [`serde_json::Value`] and `to_string` writes, without building the `Value`.
//!
//! The two differ in one case only: an object with the same key twice. A `Value` object keeps
//! one entry per key (the first position, the last value), the direct serializer writes both.
//! That happens when a `#[serde(flatten)]` map of unknown fields holds a key its struct also
//! writes (an event built by hand; parsing never puts a known field there). [`to_string`]
//! notices it on the way and answers `None`, and the caller takes the `Value` path then.

use std::io;

use serde::Serialize;
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};

/// The compact JSON text of `value`, or `None` if some object in it would have a key twice (or
/// serializing failed): then only the `Value` path gives the canonical text.
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T, capacity: usize) -> Option<String> {
    let mut out = Vec::with_capacity(capacity);
    let mut keys = KeyCheck::default();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, &mut keys);
    value.serialize(&mut ser).ok()?;
    if keys.duplicate {
        return None;
    }
    // serde_json writes UTF-8 only.
    String::from_utf8(out).ok()
}

/// The compact formatter, recording the keys of every open object to notice a key written twice.
#[derive(Debug, Default)]
struct KeyCheck {
    /// Bytes of the keys of the open objects (escapes as a 0xFF marker and a code: no UTF-8
    /// byte is 0xFF, and the same key always escapes the same way).
    bytes: Vec<u8>,
    /// (start, end) in `bytes` of each key of the open objects, outermost first.
    spans: Vec<(usize, usize)>,
    /// Per open object: its first span and the start of its keys in `bytes`.
    open: Vec<(usize, usize)>,
    /// Start in `bytes` of the key being written, if one is.
    key_start: Option<usize>,
    duplicate: bool,
}

fn escape_code(e: &CharEscape) -> u8 {
    match e {
        CharEscape::Quote => b'"',
        CharEscape::ReverseSolidus => b'\\',
        CharEscape::Solidus => b'/',
        CharEscape::Backspace => b'b',
        CharEscape::FormFeed => b'f',
        CharEscape::LineFeed => b'n',
        CharEscape::CarriageReturn => b'r',
        CharEscape::Tab => b't',
        // Control characters are below 0x20: keep them apart from the letters above.
        CharEscape::AsciiControl(b) => 0x80 | *b,
    }
}

impl Formatter for &mut KeyCheck {
    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open.push((self.spans.len(), self.bytes.len()));
        CompactFormatter.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        if let Some((span, start)) = self.open.pop() {
            self.spans.truncate(span);
            self.bytes.truncate(start);
        }
        CompactFormatter.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.key_start = Some(self.bytes.len());
        CompactFormatter.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        if let Some(start) = self.key_start.take() {
            let end = self.bytes.len();
            let first = self.open.last().map_or(0, |(span, _)| *span);
            let key = &self.bytes[start..end];
            if self.spans[first..]
                .iter()
                .any(|&(s, e)| &self.bytes[s..e] == key)
            {
                self.duplicate = true;
            }
            self.spans.push((start, end));
        }
        CompactFormatter.end_object_key(writer)
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if self.key_start.is_some() {
            self.bytes.extend_from_slice(fragment.as_bytes());
        }
        CompactFormatter.write_string_fragment(writer, fragment)
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        char_escape: CharEscape,
    ) -> io::Result<()> {
        if self.key_start.is_some() {
            self.bytes
                .extend_from_slice(&[0xFF, escape_code(&char_escape)]);
        }
        CompactFormatter.write_char_escape(writer, char_escape)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::to_string;

    #[test]
    fn same_text_as_through_value() {
        for v in [
            json!({}),
            json!([]),
            json!({"a": {"b": [1, 2.5, -3, null, true]}, "\u{0}k\"\n": "\u{0}é\u{1F600}\u{7f}\\/"}),
            json!({"x": {"x": {"x": 1}}, "y": [{"x": 1}, {"x": 2}]}),
            json!(1e300),
            json!("plain"),
        ] {
            assert_eq!(to_string(&v, 0).as_deref(), Some(v.to_string().as_str()));
        }
    }

    #[test]
    fn a_key_twice_in_one_object_is_noticed() {
        #[derive(serde::Serialize)]
        struct S {
            a: u32,
            #[serde(flatten)]
            extra: serde_json::Map<String, Value>,
        }
        let mut extra = serde_json::Map::new();
        extra.insert("b".into(), json!({"a": 1}));
        assert_eq!(
            to_string(
                &S {
                    a: 1,
                    extra: extra.clone()
                },
                0
            )
            .as_deref(),
            Some(r#"{"a":1,"b":{"a":1}}"#),
            "the same key in different objects is fine"
        );
        extra.insert("a".into(), json!(2));
        assert_eq!(to_string(&S { a: 1, extra }, 0), None);
        // Keys that differ only by an escape are different keys.
        let mut extra = serde_json::Map::new();
        extra.insert("b\n".into(), json!(2));
        extra.insert("b\t".into(), json!(3));
        assert!(to_string(&S { a: 1, extra }, 0).is_some());
    }
}
