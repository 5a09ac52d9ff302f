//! References: what a model response names that it could only have read earlier — file paths,
//! identifiers and symbols, line numbers and other long numbers, quoted values — and the terms
//! texts are looked up by.
//!
//! Both sides use one tokenizer ([`terms`]), so "does this context hold that reference" is a
//! set lookup, not a substring scan of megabytes per reference. A term is a run of
//! letters, digits and `_ . / : -`, trimmed of the punctuation that ends sentences; it is
//! indexed whole, by each of its path suffixes (`/testbed/src/a.py` also as `src/a.py` and
//! `a.py`), and by its atoms (split on `. / : -`). Quoted values with spaces are matched as
//! substrings.
//!
//! Which words of a response count is a heuristic, kept deliberately conservative so that what
//! it counts is evidence rather than vocabulary: paths and file names; identifiers that look
//! like code (an underscore, a digit beside letters, an inner capital, or all capitals); plain
//! words of four letters or more only where the response uses them as code (in tool-call
//! arguments and backtick spans) and not common English or shell words; numbers of three digits
//! or more (shorter ones occur by chance in almost any text); quoted values of 3 to 120
//! characters. And only those that occur in earlier events of the session count at all.

use std::collections::BTreeSet;

use serde::Serialize;

/// What kind of reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefKind {
    /// A file path or file name.
    Path,
    /// An identifier or symbol.
    Identifier,
    /// A line number or another long number (ids, counts, values).
    Number,
    /// A quoted value with spaces or punctuation (an error message, a string literal).
    Quoted,
    /// A plain word the response uses as code (in tool-call arguments or a backtick span) with
    /// no shape of code of its own: a name the session may have defined (`classify`), but as
    /// often the language's or English vocabulary (`split`, `details`) that a model writes
    /// without having read it. Counted apart so that recall on both can be read.
    Word,
}

impl RefKind {
    pub const ALL: [RefKind; 5] = [
        RefKind::Path,
        RefKind::Identifier,
        RefKind::Number,
        RefKind::Quoted,
        RefKind::Word,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RefKind::Path => "path",
            RefKind::Identifier => "identifier",
            RefKind::Number => "number",
            RefKind::Quoted => "quoted",
            RefKind::Word => "word",
        }
    }
}

/// One reference of a response.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Reference {
    pub kind: RefKind,
    pub text: String,
}

fn is_term_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | '/' | ':' | '-')
}

fn trim_term(raw: &str) -> &str {
    raw.trim_matches(|c: char| matches!(c, '.' | ':' | '-' | '/'))
}

/// The raw terms of a text, trimmed.
fn raw_terms(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !is_term_char(c))
        .map(trim_term)
        .filter(|t| !t.is_empty())
}

/// The atoms of a term (split on `. / : -`).
fn atoms(term: &str) -> impl Iterator<Item = &str> {
    term.split(['.', '/', ':', '-']).filter(|a| !a.is_empty())
}

/// Every key a text is indexed by: each term whole, its path suffixes and its atoms.
pub fn terms(text: &str, each: &mut dyn FnMut(&str)) {
    for term in raw_terms(text) {
        each(term);
        let (term, line) = split_line_suffix(term);
        if let Some(line) = line {
            each(term);
            each(line);
        }
        if term.contains('/') {
            let mut rest = term;
            while let Some(i) = rest.find('/') {
                rest = trim_term(&rest[i + 1..]);
                if !rest.is_empty() {
                    each(rest);
                }
            }
        }
        if term.contains(['.', '/', ':', '-']) {
            for atom in atoms(term) {
                each(atom);
            }
        }
    }
}

/// The terms of a text as a set.
pub fn term_set(text: &str) -> std::collections::HashSet<String> {
    let mut set = std::collections::HashSet::new();
    terms(text, &mut |t| {
        if !set.contains(t) {
            set.insert(t.to_owned());
        }
    });
    set
}

/// Common English and shell words that are never evidence on their own.
const STOP_WORDS: &[&str] = &[
    "about",
    "above",
    "after",
    "again",
    "also",
    "always",
    "another",
    "anything",
    "args",
    "based",
    "bash",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "call",
    "calls",
    "case",
    "cases",
    "change",
    "changes",
    "check",
    "class",
    "code",
    "command",
    "could",
    "create",
    "current",
    "data",
    "default",
    "does",
    "done",
    "each",
    "echo",
    "else",
    "error",
    "errors",
    "even",
    "every",
    "example",
    "exit",
    "false",
    "file",
    "files",
    "find",
    "first",
    "following",
    "found",
    "from",
    "function",
    "further",
    "given",
    "going",
    "good",
    "grep",
    "have",
    "here",
    "however",
    "import",
    "instead",
    "into",
    "issue",
    "just",
    "know",
    "last",
    "least",
    "like",
    "line",
    "lines",
    "list",
    "look",
    "looks",
    "main",
    "make",
    "many",
    "method",
    "might",
    "more",
    "most",
    "much",
    "must",
    "name",
    "need",
    "needs",
    "never",
    "next",
    "none",
    "note",
    "nothing",
    "null",
    "number",
    "only",
    "other",
    "output",
    "over",
    "pass",
    "passed",
    "path",
    "print",
    "problem",
    "python",
    "python3",
    "really",
    "result",
    "return",
    "returns",
    "right",
    "same",
    "script",
    "see",
    "self",
    "should",
    "show",
    "since",
    "some",
    "something",
    "still",
    "such",
    "sure",
    "take",
    "test",
    "tests",
    "than",
    "that",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "thing",
    "think",
    "this",
    "those",
    "through",
    "true",
    "type",
    "under",
    "until",
    "used",
    "using",
    "value",
    "values",
    "very",
    "want",
    "well",
    "were",
    "what",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "will",
    "with",
    "within",
    "without",
    "work",
    "works",
    "would",
    "write",
    "your",
];

fn is_stop_word(w: &str) -> bool {
    let lower = w.to_ascii_lowercase();
    STOP_WORDS.binary_search(&lower.as_str()).is_ok()
}

/// Whether a word looks like code on its own: an underscore, a digit beside letters, an inner
/// capital, or all capitals.
fn looks_like_code(w: &str) -> bool {
    let has_alpha = w.chars().any(char::is_alphabetic);
    let has_digit = w.chars().any(|c| c.is_ascii_digit());
    let inner_capital = w
        .chars()
        .zip(w.chars().skip(1))
        .any(|(a, b)| a.is_lowercase() && b.is_uppercase());
    let all_caps = w.chars().filter(|c| c.is_alphabetic()).count() >= 3
        && w.chars().all(|c| !c.is_lowercase());
    has_alpha && (w.contains('_') || has_digit || inner_capital || all_caps)
}

/// Whether a term is a path or a file name (`src/a.py`, `Cargo.toml`), not a number or a
/// dotted identifier chain.
fn looks_like_path(term: &str) -> bool {
    if term.contains("://") {
        return false;
    }
    if term.contains('/') {
        return term.split('/').filter(|s| !s.is_empty()).count() >= 2
            && term.chars().any(char::is_alphabetic);
    }
    match term.rsplit_once('.') {
        Some((name, ext)) => {
            !name.is_empty()
                && !name.contains('.')
                && (1..=5).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && ext.chars().any(|c| c.is_ascii_alphabetic())
                && ext.chars().all(|c| !c.is_uppercase())
                && name.chars().any(char::is_alphabetic)
        }
        None => false,
    }
}

/// Splits `path:12` / `path:12:5` into the path and its line number.
fn split_line_suffix(term: &str) -> (&str, Option<&str>) {
    let mut parts = term.rsplitn(3, ':');
    let last = parts.next().unwrap_or(term);
    let is_num = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    match (parts.next(), parts.next()) {
        (Some(mid), Some(path)) if is_num(last) && is_num(mid) => (path, Some(mid)),
        (Some(path), None) if is_num(last) => (path, Some(last)),
        (Some(mid), Some(head)) if is_num(last) => {
            let path = &term[..head.len() + 1 + mid.len()];
            (path, Some(last))
        }
        _ => (term, None),
    }
}

/// Collects references from text; `code` says whether the text is code (tool-call arguments,
/// a backtick span), where plain words count too.
fn collect(text: &str, code: bool, out: &mut BTreeSet<Reference>) {
    for term in raw_terms(text) {
        let (term, line) = split_line_suffix(term);
        if let Some(line) = line {
            push_number(line, out);
        }
        if looks_like_path(term) {
            out.insert(Reference {
                kind: RefKind::Path,
                text: term.to_owned(),
            });
            continue;
        }
        for atom in term.split("::").flat_map(atoms) {
            if atom.chars().all(|c| c.is_ascii_digit()) {
                push_number(atom, out);
            } else if atom.chars().count() >= 3 && looks_like_code(atom) {
                out.insert(Reference {
                    kind: RefKind::Identifier,
                    text: atom.to_owned(),
                });
            } else if code
                && atom.chars().count() >= 4
                && atom.chars().all(char::is_alphabetic)
                && !is_stop_word(atom)
            {
                out.insert(Reference {
                    kind: RefKind::Word,
                    text: atom.to_owned(),
                });
            }
        }
    }
}

fn push_number(n: &str, out: &mut BTreeSet<Reference>) {
    if n.len() >= 3 {
        out.insert(Reference {
            kind: RefKind::Number,
            text: n.to_owned(),
        });
    }
}

/// Quoted spans of a text (`"…"`, `'…'`, `` `…` ``) on one line. A quote opens only after a
/// non-word character and closes only before one, so apostrophes (`don't … it's`) are no
/// quotes.
fn quoted_spans(text: &str) -> Vec<(&str, char)> {
    let mut spans = Vec::new();
    for line in text.lines() {
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let word = |i: usize| chars.get(i).is_some_and(|(_, c)| c.is_alphanumeric());
        for quote in ['"', '\'', '`'] {
            let mut open: Option<usize> = None;
            for (k, &(_, c)) in chars.iter().enumerate() {
                if c != quote {
                    continue;
                }
                match open {
                    Some(o) if !word(k + 1) => {
                        let start = chars[o].0 + quote.len_utf8();
                        spans.push((&line[start..chars[k].0], quote));
                        open = None;
                    }
                    None if k == 0 || !word(k - 1) => open = Some(k),
                    _ => {}
                }
            }
        }
    }
    spans
}

fn collect_quoted(text: &str, out: &mut BTreeSet<Reference>) {
    for (span, quote) in quoted_spans(text) {
        let span = span.trim();
        let n = span.chars().count();
        if quote == '`' {
            collect(span, true, out);
        }
        if (3..=120).contains(&n) && span.contains(|c: char| !is_term_char(c)) {
            out.insert(Reference {
                kind: RefKind::Quoted,
                text: span.to_owned(),
            });
        }
    }
}

/// The references of a model response: its text and its tool calls' arguments (their string
/// leaves, see [`crate::argument_text`]; tool names are not references: every context has the
/// tools).
pub fn references(text: &str, arguments: &[&str]) -> Vec<Reference> {
    let mut out = BTreeSet::new();
    collect(text, false, &mut out);
    collect_quoted(text, &mut out);
    for args in arguments {
        collect(args, true, &mut out);
        collect_quoted(args, &mut out);
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(text: &str, args: &[&str]) -> Vec<(RefKind, String)> {
        references(text, args)
            .into_iter()
            .map(|r| (r.kind, r.text))
            .collect()
    }

    #[test]
    fn stop_words_are_sorted() {
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, STOP_WORDS);
    }

    #[test]
    fn paths_identifiers_numbers_and_quotes() {
        let r = refs(
            "The bug is in `parse_header` at src/http/parser.rs:142; see Cargo.toml.",
            &["sed -n 130,160p src/http/parser.rs"],
        );
        assert!(r.contains(&(RefKind::Path, "src/http/parser.rs".into())));
        assert!(r.contains(&(RefKind::Path, "Cargo.toml".into())));
        assert!(r.contains(&(RefKind::Identifier, "parse_header".into())));
        assert!(r.contains(&(RefKind::Number, "142".into())));
        assert!(r.contains(&(RefKind::Number, "130".into())));
        // Plain English is not evidence; a sentence's last word is not a file name.
        assert!(!r
            .iter()
            .any(|(_, t)| t == "bug" || t == "The" || t == "see"));
    }

    #[test]
    fn code_words_count_only_in_code() {
        let prose = refs("We should rename the tokenizer here.", &[]);
        assert!(prose.is_empty(), "{prose:?}");
        let code = refs("", &["fn tokenizer(input: &str)"]);
        assert!(code.contains(&(RefKind::Word, "tokenizer".into())));
        assert!(code.contains(&(RefKind::Word, "input".into())));
    }

    #[test]
    fn quoted_values_with_spaces() {
        let r = refs(r#"It fails with "invalid literal for int()" on input"#, &[]);
        assert!(r.contains(&(RefKind::Quoted, "invalid literal for int()".into())));
    }

    #[test]
    fn terms_index_suffixes_and_atoms() {
        let set = term_set("cat /testbed/django/db/models/query.py:10 QuerySet.filter");
        for t in [
            "testbed/django/db/models/query.py",
            "django/db/models/query.py",
            "query.py",
            "QuerySet",
            "filter",
            "10",
        ] {
            assert!(set.contains(t), "{t} missing from {set:?}");
        }
    }

    #[test]
    fn line_suffixes_split() {
        assert_eq!(split_line_suffix("a.py:12"), ("a.py", Some("12")));
        assert_eq!(split_line_suffix("a.py:12:5"), ("a.py", Some("12")));
        assert_eq!(split_line_suffix("a::b"), ("a::b", None));
    }
}
