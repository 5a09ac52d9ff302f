//! The names a line carries: what a next action can refer back to. A term is a run of
//! identifier and path characters (`src/lexer.rs:88`, `next_token`, `Decimal('10.01')`'s
//! `10.01`), and each part of a path or dotted name; terms are hashed, and weighed by their
//! shape (code-like names weigh more than plain words).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A term, hashed (FNV-1a: cheap, and deterministic across processes and platforms).
pub(super) type Term = u64;

/// Sets and maps keyed by terms: a term is a hash already, so it is its own hash.
pub(super) type TermSet = HashSet<Term, BuildHasherDefault<TermHasher>>;
pub(super) type TermMap<V> = HashMap<Term, V, BuildHasherDefault<TermHasher>>;

/// The hasher of [`TermSet`] and [`TermMap`]: the term itself.
#[derive(Default)]
pub(super) struct TermHasher(u64);

impl Hasher for TermHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for terms; anything else folds in as FNV-1a would.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, term: u64) {
        self.0 = term;
    }
}

/// Shortest run counted as a term: shorter ones (`a`, `if`, `10`) name nothing in particular.
const MIN_TERM_CHARS: usize = 3;
/// Longest run hashed whole: beyond it (a base64 blob, a minified line) it is noise.
const MAX_TERM_CHARS: usize = 120;

/// Weight of a plain lowercase word against a code-like name: prose words are what every
/// message shares, names are what the next call repeats.
pub(super) const WORD_WEIGHT: f64 = 0.25;

/// The terms of `line`, each with its shape's weight, in order (repeats included).
pub(super) fn terms(line: &str, out: &mut Vec<(Term, f64)>) {
    for run in line.split(|c: char| !is_term_char(c)) {
        let run = run.trim_matches(|c: char| matches!(c, '.' | '-' | '/' | ':'));
        if run.len() < MIN_TERM_CHARS || run.len() > MAX_TERM_CHARS {
            continue;
        }
        out.push((hash(run), weight(run)));
        if run.contains(['/', '.', ':']) {
            for part in run.split(['/', '.', ':']) {
                if part.len() >= MIN_TERM_CHARS {
                    out.push((hash(part), weight(part)));
                }
            }
        }
    }
}

/// The term a short value of a call's arguments is known by as a whole (a command, a pattern,
/// the string an edit replaces), with its weight: a next action that repeats the value needs
/// one copy of it word for word, which its names alone do not ask for.
///
/// Values that differ only in their digits (`make build STEP=61`, `sed -n 200,300p`) are one
/// value: a run of them is a routine the newest copy shows, not a value each to keep.
pub(super) fn value_term(value: &str) -> Option<(Term, f64)> {
    let value = value.trim();
    let chars = value.chars().count();
    if !(MIN_TERM_CHARS..=MAX_TERM_CHARS).contains(&chars) {
        return None;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ VALUE_SALT;
    let mut digits = false;
    for b in value.bytes() {
        // A run of digits hashes as one '0'.
        if b.is_ascii_digit() {
            if digits {
                continue;
            }
            digits = true;
            h = (h ^ u64::from(b'0')).wrapping_mul(0x0100_0000_01b3);
            continue;
        }
        digits = false;
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Some((h, VALUE_WEIGHT))
}

/// Keeps a value's term apart from a name spelled the same.
const VALUE_SALT: u64 = 0x5bd1_e995_0000_0001;

/// Weight of a value's term.
pub(super) const VALUE_WEIGHT: f64 = 0.5;

fn is_term_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '/' | ':')
}

/// Code-like names (an underscore, a digit, an inner capital, a path or dotted name) weigh 1;
/// plain words [`WORD_WEIGHT`].
fn weight(term: &str) -> f64 {
    let mut chars = term.chars();
    let first_upper = chars.next().is_some_and(char::is_uppercase);
    let code_like = term
        .chars()
        .any(|c| c == '_' || c.is_ascii_digit() || matches!(c, '.' | '/' | ':'))
        || chars.any(char::is_uppercase)
        || (first_upper && term.len() > 1 && term.chars().all(|c| c.is_uppercase()));
    if code_like {
        1.0
    } else {
        WORD_WEIGHT
    }
}

fn hash(s: &str) -> Term {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(line: &str) -> Vec<(Term, f64)> {
        let mut out = Vec::new();
        terms(line, &mut out);
        out
    }

    #[test]
    fn a_path_counts_whole_and_by_its_parts() {
        let t = names("error in src/lexer.rs:88 at next_token");
        let has = |s: &str| t.iter().any(|(h, _)| *h == hash(s));
        assert!(has("src/lexer.rs:88"));
        assert!(has("lexer"));
        assert!(has("next_token"));
        assert!(!has("in"), "two letters name nothing");
    }

    #[test]
    fn a_value_is_one_term_whatever_its_digits() {
        let term = |v: &str| value_term(v).map(|(t, _)| t);
        assert_eq!(term("make build STEP=61"), term("  make build STEP=7\n"));
        assert_ne!(term("make build STEP=61"), term("make test STEP=61"));
        assert_ne!(
            term("next_token"),
            Some(hash("next_token")),
            "apart from the name"
        );
        assert_eq!(term("ab"), None, "too short to repeat on purpose");
        assert_eq!(term(&"x".repeat(200)), None, "content, not a value");
    }

    #[test]
    fn names_weigh_more_than_words() {
        assert_eq!(weight("next_token"), 1.0);
        assert_eq!(weight("AssertionError"), 1.0);
        assert_eq!(weight("Decimal"), WORD_WEIGHT);
        assert_eq!(weight("HTTP"), 1.0);
        assert_eq!(weight("error"), WORD_WEIGHT);
    }
}
