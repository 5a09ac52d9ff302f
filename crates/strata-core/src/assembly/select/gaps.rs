//! How a text cut to some of its lines marks what it leaves out: each run of left-out lines
//! as one `[…]` line, so that the model knows the text has gaps. The marker is as short as a
//! marker can be (2 tokens): a cut context has hundreds, and a count of the lines left out told
//! the model nothing it acts on at three times the price.

/// The kept lines in order, each run of left-out ones marked as a gap.
pub(super) fn kept_lines<'a>(lines: impl Iterator<Item = (&'a str, bool)>) -> String {
    let mut out = String::new();
    let mut gap = 0;
    for (line, k) in lines {
        if !k {
            gap += 1;
            continue;
        }
        push_gap(&mut out, gap);
        gap = 0;
        out.push_str(line);
    }
    push_gap(&mut out, gap);
    out
}

fn push_gap(out: &mut String, gap: usize) {
    if gap == 0 {
        return;
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(GAP_MARKER);
}

/// The line that stands for a run of left-out lines.
pub(super) const GAP_MARKER: &str = "[…]\n";
