//! What a trajectory's model name says about its context window and provider, for the
//! `SessionStarted` of formats that do not record them. `--context-window` overrides it.

/// Window assumed for a model this table does not know.
pub const DEFAULT_WINDOW: u32 = 128_000;

/// Context windows (input and output) by model family, most specific first: the published
/// limits of each family's current models.
const WINDOWS: &[(&str, u32)] = &[
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("codex", 400_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("deepseek", 128_000),
    ("qwen", 131_072),
    ("llama", 128_000),
    ("mistral", 128_000),
    ("devstral", 128_000),
    ("kimi", 131_072),
    ("glm", 128_000),
];

fn family(model: &str) -> String {
    // `anthropic/claude-sonnet-4-20250514`, `openai/gpt-4o`, `bedrock/...`: the last part.
    model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase()
}

/// The context window of `model`.
pub fn window_of(model: &str) -> u32 {
    let name = family(model);
    WINDOWS
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix) || name.contains(&format!("-{prefix}")))
        .map_or(DEFAULT_WINDOW, |(_, w)| *w)
}

/// Output tokens reserved from a window: an eighth, at most 32,000.
pub fn reserved_output(window: u32) -> u32 {
    (window / 8).clamp(1, 32_000)
}

/// The provider of `model`, as far as its name tells.
pub fn provider_of(model: &str) -> &'static str {
    let name = model.to_ascii_lowercase();
    if name.contains("claude") || name.starts_with("anthropic/") {
        "anthropic"
    } else if name.contains("gemini") {
        "google"
    } else if name.starts_with("gpt")
        || name.starts_with("openai/")
        || name.starts_with("o1")
        || name.starts_with("o3")
        || name.starts_with("o4")
        || name.contains("codex")
    {
        "openai"
    } else {
        "unknown"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(window_of("anthropic/claude-sonnet-4-20250514"), 200_000);
        assert_eq!(window_of("gpt-4o-2024-08-06"), 128_000);
        assert_eq!(window_of("gpt-4-0613"), 8_192);
        assert_eq!(window_of("gpt-5-codex"), 400_000);
        assert_eq!(window_of("something-else"), DEFAULT_WINDOW);
        assert_eq!(provider_of("claude-3-5-sonnet"), "anthropic");
        assert_eq!(provider_of("openai/gpt-4o"), "openai");
        assert!(reserved_output(8_192) < 8_192);
    }
}
