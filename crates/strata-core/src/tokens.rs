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
