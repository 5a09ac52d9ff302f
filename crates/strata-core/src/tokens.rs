//! Token counting with a real tokenizer (o200k_base, bundled: nothing is downloaded at run time).

/// Counts tokens of text. Behind a trait so a provider-specific tokenizer can be plugged in.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> u64;
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
    capacity: usize,
}

impl<C: TokenCounter> CachedCounter<C> {
    /// Caches up to `capacity` counts.
    pub fn new(inner: C, capacity: usize) -> Self {
        Self {
            inner,
            cache: std::sync::Mutex::new(std::collections::HashMap::new()),
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

    fn name(&self) -> &'static str {
        self.inner.name()
    }
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
}
