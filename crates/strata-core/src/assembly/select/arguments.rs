//! Call arguments by their lines. A call's JSON arguments cannot be cut as text, but their string
//! values (a file's new content, an edit's old and new strings, a script) are lines like any
//! other; the JSON around them always goes, so what is sent stays valid JSON.

use serde_json::Value;

/// The string values of `args`, one after another, each ending in a newline: the text whose
/// lines are the arguments' candidates.
pub(super) fn leaves_text(args: &Value) -> String {
    let mut text = String::new();
    walk(args, &mut |leaf| text.push_str(&with_end(leaf)));
    text
}

/// `args` with each string value cut to the lines `keep` says (in [`leaves_text`]'s order), a
/// run of left-out lines marked as a gap; compact JSON.
pub(super) fn rebuild(args: &Value, keep: &[bool]) -> String {
    let mut args = args.clone();
    let mut next = 0;
    walk_mut(&mut args, &mut |leaf| {
        let text = with_end(leaf);
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let kept = &keep[next..next + lines.len()];
        next += lines.len();
        let mut out = super::gaps::kept_lines(lines.iter().copied().zip(kept.iter().copied()));
        if !leaf.ends_with('\n') && out.ends_with('\n') {
            out.pop();
        }
        *leaf = out;
    });
    args.to_string()
}

/// A value's text as its lines count: a newline at its end unless it has one (an empty value
/// has no line).
fn with_end(leaf: &str) -> String {
    match leaf.is_empty() || leaf.ends_with('\n') {
        true => leaf.to_owned(),
        false => format!("{leaf}\n"),
    }
}

fn walk(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|i| walk(i, f)),
        Value::Object(map) => map.values().for_each(|i| walk(i, f)),
        _ => {}
    }
}

fn walk_mut(v: &mut Value, f: &mut impl FnMut(&mut String)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|i| walk_mut(i, f)),
        Value::Object(map) => map.values_mut().for_each(|i| walk_mut(i, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_values_are_cut_by_line_and_the_json_stays_whole() {
        let args = json!({"file_path": "src/a.py", "content": "one\ntwo\nthree\n", "n": 3});
        let text = leaves_text(&args);
        let lines = text.split_inclusive('\n').count();
        assert_eq!(lines, 4, "{text:?}");
        // Keep the path and the last line of the content.
        let keep: Vec<bool> = text
            .split_inclusive('\n')
            .map(|l| l.starts_with("src") || l.starts_with("three"))
            .collect();
        let cut: Value = serde_json::from_str(&rebuild(&args, &keep)).expect("valid JSON");
        assert_eq!(cut["file_path"], "src/a.py");
        assert_eq!(cut["n"], 3);
        assert_eq!(cut["content"], "[…]\nthree\n");
    }
}
