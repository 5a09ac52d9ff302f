//! Token counting with a real tokenizer (o200k_base, bundled: nothing is downloaded at run time).

/// Counts tokens of text. Behind a trait so a provider-specific tokenizer can be plugged in.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> u64;
    /// Tokens of one line of a longer text. The same as [`TokenCounter::count`]; a counter that
    /// remembers lines makes [`count_by_lines`] cheap for texts cut from lines it has seen.
    fn count_line(&self, line: &str) -> u64 {
        self.count(line)
    }
    /// Name of the encoding, recorded in every assembly.
    fn name(&self) -> &'static str;
}

/// The o200k_base encoding (GPT-4o and later); the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct O200k;

impl TokenCounter for O200k {
    fn count(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64
    }

    fn name(&self) -> &'static str {
        "o200k_base"
    }
}

/// Tokens of `text` as the sum of its lines' tokens, a line ending after a newline or after a
/// newline escaped in JSON (`\\n`, so that a call's arguments count by their lines too). A
/// tokenizer's pre-tokenization splits at line ends, so this is [`TokenCounter::count`] or a
/// little over (a run of blank lines, a word after an escape, counted apart). The assembler
/// counts a message it cuts by lines this way: the lines it keeps are not tokenized again at
/// every call.
pub fn count_by_lines(text: &str, counter: &dyn TokenCounter) -> u64 {
    lines_and_escaped_lines(text)
        .map(|l| counter.count_line(l))
        .sum()
}

fn lines_and_escaped_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let bytes = rest.as_bytes();
        let end = (0..bytes.len())
            .find_map(|i| match bytes[i] {
                b'\n' => Some(i + 1),
                b'\\' if bytes.get(i + 1) == Some(&b'n') => Some(i + 2),
                _ => None,
            })
            .unwrap_or(bytes.len());
        let (line, after) = rest.split_at(end);
        rest = after;
        Some(line)
    })
}

/// Per-message framing overhead of chat formats (role markers), as OpenAI documents it.
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 4;
/// Tokens that prime the reply.
pub const REPLY_PRIMING_TOKENS: u64 = 3;

/// Tokens of one message of `text`: the text and its framing. The projection counts the
/// transcript with this and [`tool_call_tokens`], the assembler its context, and `strata eval` its
/// baselines, so that the same messages cost the same everywhere.
pub fn message_tokens(text: &str, counter: &dyn TokenCounter) -> u64 {
    counter.count(text) + MESSAGE_OVERHEAD_TOKENS
}

/// Tokens of one tool call as a provider is sent it: its name, its JSON arguments and framing.
pub fn tool_call_tokens(name: &str, args_json: &str, counter: &dyn TokenCounter) -> u64 {
    counter.count(name) + counter.count(args_json) + MESSAGE_OVERHEAD_TOKENS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_real_tokens() {
        let t = O200k;
        assert_eq!(t.count(""), 0);
        assert_eq!(t.count("hello world"), 2);
        assert!(t.count(&"error: test failed\n".repeat(100)) > 300);
    }
}

/// A [`TokenCounter`] that remembers counts of the texts it has seen, so that the same segment
/// (a digest line, a preview) assembled again for the next call of a session is not tokenized
/// again. Bounded: when full, it starts over.
#[derive(Debug, Default)]
pub struct CachedCounter<C> {
    inner: C,
    cache: std::sync::Mutex<std::collections::HashMap<[u8; 32], u64>>,
    lines: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
    capacity: usize,
}

impl<C: TokenCounter> CachedCounter<C> {
    /// Caches up to `capacity` counts.
    pub fn new(inner: C, capacity: usize) -> Self {
        Self {
            inner,
            cache: std::sync::Mutex::new(std::collections::HashMap::new()),
            lines: std::sync::Mutex::new(std::collections::HashMap::new()),
            capacity,
        }
    }
}

/// Texts shorter than this are counted directly: hashing would cost about as much.
const CACHE_MIN_LEN: usize = 64;

impl<C: TokenCounter> TokenCounter for CachedCounter<C> {
    fn count(&self, text: &str) -> u64 {
        if text.len() < CACHE_MIN_LEN {
            return self.inner.count(text);
        }
        use sha2::Digest;
        let key: [u8; 32] = sha2::Sha256::digest(text.as_bytes()).into();
        let hit = self.cache.lock().ok().and_then(|c| c.get(&key).copied());
        if let Some(n) = hit {
            return n;
        }
        let n = self.inner.count(text);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= self.capacity {
                cache.clear();
            }
            cache.insert(key, n);
        }
        n
    }

    /// Lines are many and short: remembered under a 64-bit hash of their text (a collision
    /// misstates one line's count, it exposes nothing), each line length of them.
    fn count_line(&self, line: &str) -> u64 {
        if line.len() < LINE_CACHE_MIN_LEN {
            return self.inner.count(line);
        }
        let key = line_key(line);
        let hit = self.lines.lock().ok().and_then(|c| c.get(&key).copied());
        if let Some(n) = hit {
            return u64::from(n);
        }
        let n = self.inner.count(line);
        if let Ok(mut lines) = self.lines.lock() {
            if lines.len() >= self.capacity {
                lines.clear();
            }
            lines.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
        }
        n
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// Lines shorter than this are counted directly: a word or two.
const LINE_CACHE_MIN_LEN: usize = 8;

/// A hash of a line, unseeded: a count never depends on which process made it.
fn line_key(line: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    line.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn cached_counts_equal_direct_counts() {
        let cached = CachedCounter::new(O200k, 2);
        let texts = [
            "short".to_owned(),
            "a longer text that is certainly above the caching threshold of sixty-four bytes"
                .to_owned(),
            "error: test failed at src/lib.rs:10 — and a second line to make it long enough"
                .repeat(3),
        ];
        for _ in 0..3 {
            for t in &texts {
                assert_eq!(cached.count(t), O200k.count(t));
            }
        }
    }

    #[test]
    fn counting_by_lines_is_the_same_with_and_without_the_cache_and_close_to_the_whole() {
        let cached = CachedCounter::new(O200k, 3);
        let text =
            "fn main() {\n    println!(\"hello\");\n}\n\n\nerror[E0425]: cannot find value `x`\n";
        for _ in 0..3 {
            assert_eq!(count_by_lines(text, &cached), count_by_lines(text, &O200k));
        }
        let whole = O200k.count(text);
        let by_lines = count_by_lines(text, &O200k);
        assert!(
            by_lines >= whole && by_lines <= whole + 2,
            "{by_lines} against {whole}"
        );
    }

    #[test]
    fn json_arguments_count_by_their_escaped_lines() {
        let args = r#"{"path":"src/lib.rs","content":"fn a() {}\nfn b() {}\n\\n literal"}"#;
        let lines: Vec<&str> = lines_and_escaped_lines(args).collect();
        assert_eq!(lines.concat(), args);
        assert_eq!(lines.len(), 4, "{lines:?}");
        let whole = O200k.count(args);
        let by_lines = count_by_lines(args, &O200k);
        assert!(
            by_lines >= whole && by_lines <= whole + 4,
            "{by_lines} against {whole}"
        );
    }
}
