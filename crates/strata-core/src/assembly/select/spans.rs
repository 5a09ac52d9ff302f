//! How a piece of text is cut into the lines the selection chooses among: at its newlines, and a
//! line longer than [`MAX_SPAN_BYTES`] (a JSON document on one line, a minified file, a long log
//! record) into spans that end at a separator, so that the one name a next action needs from it
//! does not cost the whole line.

/// Longest span of one line chosen as a unit.
pub(super) const MAX_SPAN_BYTES: usize = 320;

/// Shortest span a long line is cut into: a separator nearer the span's start than this is
/// passed over for a later one.
const MIN_SPAN_BYTES: usize = MAX_SPAN_BYTES / 2;

/// The byte ranges of `text`'s spans, in order, covering it exactly.
pub(super) fn spans(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.len();
        let mut from = start;
        while end - from > MAX_SPAN_BYTES {
            let cut = cut_at(text, from);
            out.push((from, cut));
            from = cut;
        }
        out.push((from, end));
        start = end;
    }
    out
}

/// Where the span starting at `from` ends: after the last separator (a space, a comma, a
/// semicolon, a closing bracket) between its shortest and longest length, so that no name is
/// cut in two; else at the longest length (a run of base64 has no name to keep whole).
fn cut_at(text: &str, from: usize) -> usize {
    let mut limit = from + MAX_SPAN_BYTES;
    while !text.is_char_boundary(limit) {
        limit -= 1;
    }
    let mut shortest = from + MIN_SPAN_BYTES.min(limit - from);
    while !text.is_char_boundary(shortest) {
        shortest += 1;
    }
    let window = &text[shortest..limit];
    match window.rfind([' ', ',', ';', '}', ']', ')', '>', '\t']) {
        Some(i) => limit - window.len() + i + 1,
        None => limit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(text: &str) -> Vec<&str> {
        spans(text).into_iter().map(|(a, b)| &text[a..b]).collect()
    }

    #[test]
    fn short_lines_are_spans_of_their_own() {
        assert_eq!(cut("one\ntwo\nthree"), ["one\n", "two\n", "three"]);
        assert!(cut("").is_empty());
    }

    #[test]
    fn a_long_line_is_cut_after_separators_and_nothing_is_lost() {
        let record: String = (0..60)
            .map(|i| format!("\"field_{i}\": \"value number {i}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!("head\n{{{record}}}\ntail\n");
        let parts = cut(&text);
        assert_eq!(parts.concat(), text);
        assert!(parts.len() >= 8, "{}", parts.len());
        for part in &parts {
            assert!(part.len() <= MAX_SPAN_BYTES, "{part:?}");
            // No name is cut in two: every span ends at a separator or the line's end.
            assert!(
                part.ends_with([' ', ',', '\n', '}']) || text.ends_with(part),
                "{part:?}"
            );
        }
    }

    #[test]
    fn a_run_without_separators_is_cut_at_the_longest_span_on_a_char_boundary() {
        for text in [
            "é".repeat(400),
            "—".repeat(300),
            format!("a{}", "—".repeat(300)),
        ] {
            let parts = cut(&text);
            assert_eq!(parts.concat(), text);
            assert!(parts.iter().all(|p| p.len() <= MAX_SPAN_BYTES));
        }
        let mixed = format!("{} — {}", "word ".repeat(40), "—x ".repeat(200));
        assert_eq!(cut(&mixed).concat(), mixed);
    }
}
