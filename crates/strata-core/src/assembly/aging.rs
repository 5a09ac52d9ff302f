//! How steps age under the long-turn policy ([`super::POLICY_VERSION_OWN_WORDS`]): which results a
//! later call supersedes, which terms the session keeps coming back to, and the compact forms of
//! an older step that keep its evidence — the lines a later step may quote back — whole.
//!
//! Real agents run one long turn of tens to hundreds of tool calls. What the next call needs
//! from an older step is rarely its bytes: it is the path and line it found, the definition it
//! read, the error it hit, and the names the model itself went on to use. So an aged result is
//! its salient lines, ranked by how much of what they name the session mentioned *after* the
//! step (in the model's own words and calls, and in the user's requests), plus definitions,
//! failures and `path:line` hits; the raw bytes stay one rehydration away.

use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use super::forms::is_salient;
use super::{AssemblyRequest, TimelineMessage, ToolPair};
use crate::projection::truncate_chars;

/// Outputs up to this many characters are sent whole even when aged: their evidence lines would
/// not be much shorter.
pub(super) const AGED_INLINE_MAX_CHARS: usize = 300;
/// Most evidence lines kept of an aged output, and their characters in all. Measured on public
/// trajectories: a few lines of older steps and more of the newest steps verbatim hold more of
/// what the next call names than many lines of every step (see `docs/BENCHMARKS.md`).
const EVIDENCE_MAX_LINES: usize = 6;
const EVIDENCE_MAX_CHARS: usize = 500;
/// Arguments of an aged call longer than this have their long strings reduced to evidence.
const AGED_ARGS_MAX_CHARS: usize = 300;
/// An aged call's string arguments longer than this go by their evidence lines.
const AGED_ARG_STRING_CHARS: usize = 3_000;
/// Most characters of a digested step's text: its opening and the sentences that name code
/// ([`digest_text`]).
pub(super) const DIGEST_PROSE_MAX_CHARS: usize = 3_000;
/// Assistant texts up to this many characters are kept whole when aged.
const PROSE_INLINE_MAX_CHARS: usize = 600;
/// A kept line is cut to this many characters.
const EVIDENCE_LINE_CHARS: usize = 200;
/// Lines of one output scanned for evidence (the cost stays bounded by what is selected).
const EVIDENCE_SCAN_LINES: usize = 5000;
/// Outputs at least this long that a later call repeats byte for byte are sent once.
const REPEATED_OUTPUT_MIN_CHARS: usize = 200;

/// How many of the newest steps (assistant messages, newest first) go verbatim: at least `min`,
/// and more while their tokens fit `window`.
pub(super) fn verbatim_steps<'m>(
    newest_first: impl Iterator<Item = &'m &'m TimelineMessage>,
    min: usize,
    window: u64,
) -> usize {
    let mut used = 0;
    let mut n = 0;
    for m in newest_first.filter(|m| super::is_step(m)) {
        let t = message_tokens(m);
        if n >= min && used + t > window {
            break;
        }
        used += t;
        n += 1;
    }
    n
}

/// The tokens of a message sent whole: its text, its calls and their full outputs.
pub(super) fn message_tokens(m: &TimelineMessage) -> u64 {
    m.tokens
        + m.tool_calls
            .iter()
            .map(|c| c.call_tokens + c.output_tokens)
            .sum::<u64>()
}

/// Whether a term looks like code rather than prose: a path or file name, an identifier with an
/// underscore, an inner capital or a digit beside letters, a dotted or `::` name.
fn is_code_term(term: &str) -> bool {
    if term.len() < 3 || !term.chars().any(char::is_alphabetic) {
        return false;
    }
    term.contains(['_', '/', '.', ':'])
        || term.chars().any(|c| c.is_ascii_digit())
        || term
            .chars()
            .zip(term.chars().skip(1))
            .any(|(a, b)| a.is_lowercase() && b.is_uppercase())
}

/// The code-like terms of a text (see [`is_code_term`]), and for a dotted, slashed or `::`
/// term also its last part (`src/app.py` names `app.py`, `a.b.run` names `run`).
fn code_terms<'t>(text: &'t str, each: &mut dyn FnMut(&'t str)) {
    let terms = text
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '/' | ':' | '-')))
        .map(|t| t.trim_matches(|c: char| matches!(c, '.' | ':' | '-' | '/')));
    for term in terms.filter(|t| is_code_term(t)) {
        each(term);
        if let Some(last) = term.rsplit(['/', ':']).next().filter(|l| *l != term) {
            if is_code_term(last) {
                each(last);
            }
        }
    }
}

/// Which code-like terms the session mentioned, and when last: in the model's text and calls
/// and in the user's messages. A line of an older output that names a term mentioned *after*
/// it is one the session went on to use.
#[derive(Debug, Default)]
pub(super) struct Salience {
    newest_mention: HashMap<String, u64>,
}

impl Salience {
    /// Collects the mentions of `messages`; the `request` about to be sent counts as newest.
    pub(super) fn of(messages: &[&TimelineMessage], request: Option<&str>) -> Self {
        let mut newest_mention: HashMap<String, u64> = HashMap::new();
        let mut note = |text: &str, seq: u64| {
            code_terms(text, &mut |t| {
                let at = newest_mention.entry(t.to_owned()).or_default();
                *at = (*at).max(seq);
            })
        };
        for m in messages {
            note(&m.text, m.seq);
            for c in &m.tool_calls {
                note(&c.args, c.request_seq.max(m.seq));
            }
        }
        if let Some(text) = request {
            note(text, u64::MAX);
        }
        Self { newest_mention }
    }

    /// How many distinct terms of `line` the session mentioned after `seq`.
    fn mentioned_after(&self, line: &str, seq: u64) -> usize {
        let mut hits: Vec<&str> = Vec::new();
        code_terms(line, &mut |t| {
            if self.newest_mention.get(t).is_some_and(|at| *at > seq) && !hits.contains(&t) {
                hits.push(t);
            }
        });
        hits.len()
    }
}

/// Why an older result is left out for a newer one: the later call that supersedes it, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Superseded {
    pub by_call: String,
    pub by_seq: u64,
    pub how: &'static str,
}

/// The path a file tool names in its arguments, if any.
fn file_path(args: &str) -> Option<String> {
    // Most calls name no path: skip parsing their arguments (this runs per call per assembly).
    if !args.contains("path") && !args.contains("filename") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(args).ok()?;
    ["file_path", "path", "filename", "notebook_path"]
        .iter()
        .find_map(|k| v.get(k).and_then(|p| p.as_str()).map(str::to_owned))
}

fn writes_whole_file(c: &ToolPair) -> bool {
    let name = c.name.to_lowercase();
    let command = serde_json::from_str::<serde_json::Value>(&c.args)
        .ok()
        .and_then(|v| v.get("command").and_then(|x| x.as_str()).map(str::to_owned))
        .unwrap_or_default();
    name.contains("write") || name == "create" || command == "create"
}

/// The answered results a later call supersedes: the same call made again (a re-read, a re-run
/// of the same test), a file written whole after it was read, the same output repeated byte for
/// byte. The newest stands; each older one is sent as a pointer to it.
pub(super) fn superseded(messages: &[&TimelineMessage]) -> BTreeMap<String, Superseded> {
    let mut out = BTreeMap::new();
    let mut newest_call: HashMap<(&str, &str), (&str, u64)> = HashMap::new();
    let mut newest_write: HashMap<String, (&str, u64)> = HashMap::new();
    let mut newest_output: HashMap<&str, (&str, u64)> = HashMap::new();
    let pairs = messages
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter().rev().map(move |c| (m.seq, c)))
        .filter(|(_, c)| !c.status.is_open());
    for (seq, c) in pairs {
        let id = c.tool_call_id.as_str();
        let path = file_path(&c.args);
        let output = c.output.as_deref().filter(|_| c.error.is_none());
        let found = if let Some((by, at)) = newest_call.get(&(c.name.as_str(), c.args.as_str())) {
            Some((*by, *at, "the same call was made again later"))
        } else if let Some((by, at)) = path.as_ref().and_then(|p| newest_write.get(p)) {
            Some((*by, *at, "the file was written whole later"))
        } else if let Some((by, at)) = output
            .filter(|o| o.len() >= REPEATED_OUTPUT_MIN_CHARS)
            .and_then(|o| newest_output.get(o))
        {
            Some((*by, *at, "a later call returned the same output"))
        } else {
            None
        };
        if let Some((by, at, how)) = found {
            out.insert(
                id.to_owned(),
                Superseded {
                    by_call: by.to_owned(),
                    by_seq: at,
                    how,
                },
            );
        }
        newest_call
            .entry((c.name.as_str(), c.args.as_str()))
            .or_insert((id, seq));
        if path.is_some() && writes_whole_file(c) {
            if let Some(p) = path {
                newest_write.entry(p).or_insert((id, seq));
            }
        }
        if let Some(o) = output.filter(|o| o.len() >= REPEATED_OUTPUT_MIN_CHARS) {
            newest_output.entry(o).or_insert((id, seq));
        }
    }
    out
}

/// Files the agent touched most recently (read, written or edited) whose newest read goes
/// whole even when its step has aged: the next edit of a file quotes the lines it read, and
/// its evidence lines cannot know which ones.
const FILES_IN_PLAY: usize = 4;
/// Characters of a file in play's newest read sent; past them, its evidence lines.
const FILE_VIEW_MAX_CHARS: usize = 6_000;

/// Whether a call reads a file its arguments name: a view of the work, not a fetched payload.
pub(super) fn reads_named_file(c: &ToolPair) -> bool {
    reads_file(c) && file_path(&c.args).is_some()
}

/// Whether a call reads a file (Claude Code's `Read`, an editor's `view`).
fn reads_file(c: &ToolPair) -> bool {
    let name = c.name.to_lowercase();
    name.contains("read")
        || name.contains("view")
        || (name.contains("edit") && c.args.contains(r#""command":"view""#))
}

/// The newest reads of the files in play: call id to path. Files are ranked by the newest
/// answered call that names them; of the first [`FILES_IN_PLAY`], the newest successful read
/// stands for the file.
pub(super) fn file_views(messages: &[&TimelineMessage]) -> BTreeMap<String, String> {
    let mut touched: Vec<String> = Vec::new();
    let mut views = BTreeMap::new();
    let pairs = messages
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter().rev())
        .filter(|c| !c.status.is_open());
    for c in pairs {
        let Some(path) = file_path(&c.args) else {
            continue;
        };
        if !touched.contains(&path) {
            if touched.len() == FILES_IN_PLAY {
                continue;
            }
            touched.push(path.clone());
        }
        let read =
            reads_file(c) && c.error.is_none() && (c.output.is_some() || c.output_ref.is_some());
        if read && !views.values().any(|p| *p == path) {
            views.insert(c.tool_call_id.clone(), path);
        }
    }
    views
}

/// An aged read of a file in play: as returned, up to [`FILE_VIEW_MAX_CHARS`], then its
/// evidence lines.
pub(super) fn file_view_result(
    c: &ToolPair,
    rehydrated: Option<&str>,
    path: &str,
    seq: u64,
    aging: &Aging<'_>,
) -> String {
    let Some(raw) = rehydrated.or(c.output.as_deref()) else {
        return aged_result(c, seq, aging);
    };
    let mut out = format!("[the newest read of {path}, a file in play: as returned]\n");
    let cut = raw
        .char_indices()
        .nth(FILE_VIEW_MAX_CHARS)
        .map_or(raw.len(), |(i, _)| i);
    if cut == raw.len() {
        out.push_str(raw);
        return out;
    }
    // Whole lines: an edit quotes lines, not a line's first half.
    let cut = raw[..cut].rfind('\n').map_or(cut, |i| i + 1);
    let (head, rest) = raw.split_at(cut);
    out.push_str(head);
    out.push_str(&format!(
        "[… {} more characters; their evidence lines:]\n",
        rest.len()
    ));
    out.push_str(&evidence_lines(
        rest,
        seq,
        &aging.salience,
        EVIDENCE_MAX_LINES,
    ));
    out
}

/// What stands in for a superseded result.
pub(super) fn superseded_text(s: &Superseded) -> String {
    format!(
        "[result left out: {} ({} at seq {}); see its result]",
        s.how, s.by_call, s.by_seq
    )
}

/// Whether a line defines something a later step may name: a function, a class, a type.
fn is_definition(line: &str) -> bool {
    const DEFINITIONS: [&str; 16] = [
        "def ",
        "async def ",
        "class ",
        "fn ",
        "pub fn ",
        "pub(crate) fn ",
        "async fn ",
        "function ",
        "func ",
        "impl ",
        "struct ",
        "enum ",
        "interface ",
        "type ",
        "export ",
        "pub struct ",
    ];
    // Numbered listings (`  12\tdef run():`, `12: def run():`) define too.
    let code = line
        .trim_start()
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start_matches([':', '\t', ' ', '|', '→']);
    DEFINITIONS.iter().any(|d| code.starts_with(d))
}

/// Whether a line is a `path:line` hit of grep, a compiler or a test runner.
fn is_location(line: &str) -> bool {
    line.split_whitespace().next().is_some_and(|w| {
        let mut parts = w.split(':');
        let path = parts.next().unwrap_or_default();
        let num = parts.next().unwrap_or_default();
        path.contains('.') && !num.is_empty() && num.chars().all(|c| c.is_ascii_digit())
    })
}

/// The evidence lines of a text written at `seq`, whole (cut only past
/// [`EVIDENCE_LINE_CHARS`]): its first and last lines, and the best-ranked of the rest — lines
/// naming terms the session mentioned later rank highest, then failures, definitions and
/// `path:line` hits — at most `max_lines` and [`EVIDENCE_MAX_CHARS`], in their order; a gap is
/// `…`.
pub(super) fn evidence_lines(
    text: &str,
    seq: u64,
    salience: &Salience,
    max_lines: usize,
) -> String {
    evidence_lines_within(text, seq, salience, max_lines, EVIDENCE_MAX_CHARS)
}

/// [`evidence_lines`] with its own character ceiling `max_chars`.
pub(super) fn evidence_lines_within(
    text: &str,
    seq: u64,
    salience: &Salience,
    max_lines: usize,
    max_chars: usize,
) -> String {
    let lines = evidence_candidates(text);
    let mut ranked: Vec<(usize, usize)> = lines
        .iter()
        .enumerate()
        .skip(1)
        .filter_map(|(i, l)| {
            let score = 3 * salience.mentioned_after(l, seq).min(3) + shape_score(l);
            (score > 0).then_some((score, i))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut keep = first_and_last(&lines);
    let mut chars: usize = keep.iter().map(|i| line_chars(lines[*i])).sum();
    for (_, i) in ranked {
        if keep.len() >= max_lines {
            break;
        }
        let len = line_chars(lines[i]);
        if chars + len > max_chars {
            continue;
        }
        chars += len;
        keep.push(i);
    }
    render_kept(&lines, keep)
}

/// The non-empty lines of a text scanned for evidence.
fn evidence_candidates(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .take(EVIDENCE_SCAN_LINES)
        .collect()
}

/// How much a line's shape alone says it matters: a failure, a definition, a `path:line` hit.
fn shape_score(line: &str) -> usize {
    2 * usize::from(is_salient(line))
        + 2 * usize::from(is_definition(line))
        + usize::from(is_location(line))
}

/// The characters a kept line costs.
fn line_chars(line: &str) -> usize {
    line.len().min(EVIDENCE_LINE_CHARS)
}

/// The first and the last line, always kept: what ran and how it ended.
fn first_and_last(lines: &[&str]) -> Vec<usize> {
    let mut keep: Vec<usize> = Vec::new();
    keep.extend((!lines.is_empty()).then_some(0));
    keep.extend(lines.len().saturating_sub(1)..lines.len());
    keep.dedup();
    keep
}

/// The kept lines in their order, each cut past [`EVIDENCE_LINE_CHARS`]; a gap is `…`.
fn render_kept(lines: &[&str], mut keep: Vec<usize>) -> String {
    keep.sort_unstable();
    keep.dedup();
    let mut out = String::new();
    let mut prev: Option<usize> = None;
    for i in keep {
        if matches!(prev, Some(p) if i > p + 1) {
            out.push_str("…\n");
        }
        out.push_str(&truncate_chars(lines[i].trim_end(), EVIDENCE_LINE_CHARS));
        out.push('\n');
        prev = Some(i);
    }
    out.trim_end().to_owned()
}

/// Most lines kept of an aged output chosen with the others ([`novel_evidence_lines`]), and
/// their characters in all: more than [`EVIDENCE_MAX_LINES`], since every line kept past the first and
/// last must name something the context does not already carry.
const NOVEL_MAX_LINES: usize = 8;
const NOVEL_MAX_CHARS: usize = 700;

/// The names a text carries, as a later step would refer back to them: its code-like terms
/// ([`code_terms`]) and its numbers of three digits or more.
fn names<'t>(text: &'t str, each: &mut dyn FnMut(&'t str)) {
    code_terms(text, each);
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|n| n.len() >= 3)
        .for_each(each);
}

/// The names a context carries so far.
#[derive(Debug, Default)]
pub(super) struct Covered(HashSet<String>);

impl Covered {
    pub(super) fn add(&mut self, text: &str) {
        names(text, &mut |n| {
            if !self.0.contains(n) {
                self.0.insert(n.to_owned());
            }
        });
    }

    fn holds(&self, name: &str) -> bool {
        self.0.contains(name)
    }
}

/// One candidate line of an output: its distinct names, how many of them the session mentioned
/// later, and its shape.
struct NovelLine<'t> {
    names: Vec<&'t str>,
    mentioned_after: usize,
    shape: usize,
}

/// The lines of an aged output that add to what the context carries: its first and last, then,
/// greedily, the line naming the most names `covered` does not hold yet (ranked as
/// [`evidence_lines`] ranks, a name the session mentioned later first), at most
/// [`NOVEL_MAX_LINES`] and [`NOVEL_MAX_CHARS`]; a line adding nothing goes only for its shape
/// (a failure, a definition). What it keeps is added to `covered`, so an older output does not
/// repeat what a newer one already shows.
pub(super) fn novel_evidence_lines(
    text: &str,
    seq: u64,
    salience: &Salience,
    covered: &mut Covered,
) -> String {
    let lines = evidence_candidates(text);
    let mut candidates: Vec<(usize, NovelLine<'_>)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let mut line_names: Vec<&str> = Vec::new();
            names(l, &mut |n| {
                if !line_names.contains(&n) {
                    line_names.push(n);
                }
            });
            let shape = shape_score(l);
            (!line_names.is_empty() || shape > 0).then(|| {
                let mentioned_after = salience.mentioned_after(l, seq).min(3);
                let line = NovelLine {
                    names: line_names,
                    mentioned_after,
                    shape,
                };
                (i, line)
            })
        })
        .collect();
    let mut kept = first_and_last(&lines);
    let mut chars: usize = kept.iter().map(|i| line_chars(lines[*i])).sum();
    for i in &kept {
        covered.add(lines[*i]);
    }
    candidates.retain(|(i, _)| !kept.contains(i));
    while kept.len() < NOVEL_MAX_LINES {
        let best = candidates
            .iter()
            .enumerate()
            .filter(|(_, (i, _))| chars + line_chars(lines[*i]) <= NOVEL_MAX_CHARS)
            .filter_map(|(at, (_, l))| {
                let novel = l.names.iter().filter(|n| !covered.holds(n)).count();
                let score = 3 * novel.min(4) + l.mentioned_after + l.shape;
                (novel > 0 || l.shape >= 2).then_some((score, at))
            })
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let Some((_, at)) = best else { break };
        let (i, _) = candidates.remove(at);
        chars += line_chars(lines[i]);
        covered.add(lines[i]);
        kept.push(i);
    }
    render_kept(&lines, kept)
}

/// An aged step's result: its evidence lines, with the handle to rehydrate the rest; a failure
/// and a short output whole. (Not its tool memory: measured, the memory line cost more than the
/// evidence it added, and `why_not` finds it.)
pub(super) fn aged_result(c: &ToolPair, seq: u64, aging: &Aging<'_>) -> String {
    if let Some(err) = &c.error {
        return format!(
            "tool failed{}: {err}",
            if c.retryable { " (retryable)" } else { "" }
        );
    }
    let raw = c
        .output
        .as_deref()
        .or(c.output_preview.as_deref())
        .unwrap_or_default();
    if c.output_ref.is_none() && raw.chars().count() <= AGED_INLINE_MAX_CHARS {
        return raw.to_owned();
    }
    let handle = match &c.output_ref {
        Some(r) => format!(
            "{}, rehydrate by {}",
            truncate_chars(r, "artifact:sha256:".len() + 12),
            c.tool_call_id
        ),
        None => format!("event {}", c.result_event_id.as_deref().unwrap_or("?")),
    };
    let mut out = format!(
        "[older step: {} bytes, {} lines{}; its evidence lines — all of it: {handle}]\n",
        c.output_bytes.unwrap_or(raw.len() as u64),
        raw.lines().count(),
        if c.output_ref.is_some() {
            " of its preview"
        } else {
            ""
        },
    );
    match aging.novel.get().and_then(|n| n.get(&c.tool_call_id)) {
        Some(lines) => out.push_str(lines),
        None => out.push_str(&evidence_lines(
            raw,
            seq,
            &aging.salience,
            EVIDENCE_MAX_LINES,
        )),
    }
    out
}

/// Whether an aged result goes by its evidence lines (not whole, not as an error).
fn goes_by_evidence(c: &ToolPair) -> bool {
    c.error.is_none()
        && (c.output_ref.is_some()
            || c.output
                .as_deref()
                .or(c.output_preview.as_deref())
                .is_some_and(|o| o.chars().count() > AGED_INLINE_MAX_CHARS))
}

/// An aged call's arguments: as made, but each string longer than [`AGED_ARG_STRING_CHARS`] (a
/// file's new content, a long script) by its evidence lines; `None` when they are short or not a
/// JSON object.
pub(super) fn aged_arguments(args: &str, seq: u64, salience: &Salience) -> Option<String> {
    if args.len() <= AGED_ARGS_MAX_CHARS {
        return None;
    }
    let mut value: serde_json::Value = serde_json::from_str(args).ok()?;
    let object = value.as_object_mut()?;
    let mut changed = false;
    for v in object.values_mut() {
        let Some(s) = v.as_str().filter(|s| s.len() > AGED_ARG_STRING_CHARS) else {
            continue;
        };
        let lines = s.lines().count();
        let kept = evidence_lines(s, seq, salience, EVIDENCE_MAX_LINES / 2);
        *v = serde_json::Value::String(format!(
            "[{} characters, {lines} lines; its evidence lines:]\n{kept}",
            s.len()
        ));
        changed = true;
    }
    changed.then(|| value.to_string())
}

/// Whether a sentence names something a later step may refer back to: code, a path, an
/// identifier.
fn names_code(sentence: &str) -> bool {
    if sentence.contains('`') || sentence.contains("()") {
        return true;
    }
    let mut found = false;
    code_terms(sentence, &mut |_| found = true);
    found
}

/// Whether call `c` carries `block`, a code block of its step's text: in its arguments as sent,
/// or in one of their string values (the JSON of a multi-line command escapes its newlines and
/// quotes, so the text's block never matches the arguments as sent).
fn carries(c: &ToolPair, block: &str) -> bool {
    fn in_strings(v: &serde_json::Value, block: &str) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains(block),
            serde_json::Value::Array(a) => a.iter().any(|v| in_strings(v, block)),
            serde_json::Value::Object(o) => o.values().any(|v| in_strings(v, block)),
            _ => false,
        }
    }
    c.args.contains(block)
        || serde_json::from_str::<serde_json::Value>(&c.args).is_ok_and(|v| in_strings(&v, block))
}

/// An aged step's text: of its prose the sentences that name code; of its code blocks those the
/// step's calls do not already carry (see [`carries`]); `None` when it is short, or nothing
/// would be saved.
pub(super) fn aged_prose(text: &str, calls: &[&ToolPair]) -> Option<String> {
    if text.chars().count() <= PROSE_INLINE_MAX_CHARS {
        return None;
    }
    let mut out = String::new();
    let mut dropped = false;
    let mut fence: Option<String> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            match fence.take() {
                Some(block) => {
                    // A block that is the call itself (mini-swe-agent writes its command both
                    // ways) goes once, as the call.
                    let body = block.trim();
                    if calls.iter().any(|c| carries(c, body)) || body.is_empty() {
                        dropped = true;
                    } else {
                        out.push_str(&format!("```\n{body}\n```\n"));
                    }
                }
                None => fence = Some(String::new()),
            }
            continue;
        }
        if let Some(block) = fence.as_mut() {
            block.push_str(line);
            block.push('\n');
            continue;
        }
        let kept: Vec<&str> = line
            .split_inclusive(". ")
            .filter(|sentence| {
                let keep = names_code(sentence);
                dropped |= !keep && !sentence.trim().is_empty();
                keep
            })
            .collect();
        if !kept.is_empty() {
            out.push_str(kept.concat().trim_end());
            out.push('\n');
        }
    }
    if let Some(block) = fence {
        out.push_str(&format!("```\n{}", block.trim_end()));
    }
    dropped.then(|| format!("[older step; what its text named:]\n{}", out.trim_end()))
}

/// A digested step's text under aging: its opening up to `head`
/// characters, then the sentences of the rest that name code (what the model went on to refer
/// back to: a digest line's first characters rarely hold it), at most `max_chars` in all, on
/// one line.
pub(super) fn digest_text(text: &str, head: usize, max_chars: usize) -> String {
    if text.chars().count() <= head {
        return text.replace('\n', " ");
    }
    let cut = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let (opening, rest) = text.split_at(cut);
    let mut out = format!("{}…", opening.replace('\n', " "));
    let mut chars = out.chars().count();
    // Lines and sentences: a list of names is one line each, prose a sentence each.
    let pieces = rest
        .lines()
        .flat_map(|l| l.split_inclusive(". "))
        .map(str::trim)
        .filter(|p| names_code(p));
    for piece in pieces {
        let piece = truncate_chars(piece, EVIDENCE_LINE_CHARS);
        let len = piece.chars().count() + 1;
        if chars + len > max_chars {
            continue;
        }
        chars += len;
        out.push(' ');
        out.push_str(&piece);
    }
    out
}

/// The long-turn policy's view of a session while rendering it.
pub(super) struct Aging<'a> {
    pub salience: Salience,
    pub superseded: BTreeMap<String, Superseded>,
    /// The newest reads of the files in play: call id to path.
    pub file_views: BTreeMap<String, String>,
    /// Outputs of the working set rehydrated in place: raw bytes by call id.
    pub in_place: BTreeMap<String, &'a str>,
    /// The lines each aged result keeps, by call id: set once the turns are split
    /// ([`Aging::choose_novel_evidence`]).
    pub novel: OnceCell<BTreeMap<String, String>>,
}

impl<'a> Aging<'a> {
    /// `in_place`: the working set's outputs rehydrated in place, raw bytes by call id.
    pub(super) fn new(
        visible: &[TimelineMessage],
        request: &'a AssemblyRequest,
        in_place: BTreeMap<String, &'a str>,
    ) -> Self {
        let messages: Vec<&TimelineMessage> = visible.iter().collect();
        let request_text = request.request.as_deref();
        Aging {
            salience: Salience::of(&messages, request_text),
            superseded: superseded(&messages),
            file_views: file_views(&messages),
            in_place,
            novel: OnceCell::new(),
        }
    }

    /// The file a result is the newest read of, when it goes as read: in an aged step (a
    /// verbatim step sends it as it sends every result).
    pub(super) fn file_view_in(&self, c: &ToolPair, mode: super::forms::Rendering) -> Option<&str> {
        mode.is_aged()
            .then(|| self.file_views.get(&c.tool_call_id).map(String::as_str))
            .flatten()
    }

    /// Chooses, newest first, the lines each aged result keeps so that together they carry the
    /// most names the rest of the context does not. `covered` holds what the context carries
    /// whole (what was said, the calls, the verbatim results); `aged` are the aged steps'
    /// results that go by their evidence lines and may be shown, in any order. A superseded
    /// result or a file in play goes its own way and is skipped.
    pub(super) fn choose_novel_evidence(
        &self,
        mut covered: Covered,
        mut aged: Vec<(u64, &ToolPair)>,
    ) {
        aged.sort_by_key(|(seq, c)| std::cmp::Reverse((*seq, c.request_seq)));
        let mut chosen = BTreeMap::new();
        for (seq, c) in aged {
            if self.superseded.contains_key(&c.tool_call_id)
                || self.file_views.contains_key(&c.tool_call_id)
            {
                continue;
            }
            if !goes_by_evidence(c) {
                covered.add(c.error.as_deref().or(c.output.as_deref()).unwrap_or(""));
                continue;
            }
            let raw = c
                .output
                .as_deref()
                .or(c.output_preview.as_deref())
                .unwrap_or_default();
            let lines = novel_evidence_lines(raw, seq, &self.salience, &mut covered);
            chosen.insert(c.tool_call_id.clone(), lines);
        }
        // Set once per assembly; a second call would choose the same.
        let _ = self.novel.set(chosen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Aging<'_> {
        /// An aging that knows nothing of the session: no salience, nothing superseded.
        fn plain() -> Self {
            Aging {
                salience: Salience::default(),
                superseded: BTreeMap::new(),
                file_views: BTreeMap::new(),
                in_place: BTreeMap::new(),
                novel: OnceCell::new(),
            }
        }
    }

    fn message(seq: u64, text: &str, args: &str) -> TimelineMessage {
        TimelineMessage {
            seq,
            event_id: format!("e{seq}"),
            role: "assistant".into(),
            participant_id: "main".into(),
            text: text.into(),
            tokens: 1,
            tool_calls: vec![ToolPair {
                tool_call_id: format!("c{seq}"),
                name: "bash".into(),
                args: args.into(),
                call_tokens: 1,
                request_event_id: format!("e{seq}"),
                request_seq: seq,
                status: crate::projection::ToolStatus::Succeeded,
                result_event_id: Some(format!("r{seq}")),
                output: Some("x".repeat(300)),
                output_ref: None,
                output_preview: None,
                output_bytes: None,
                output_tokens: 1,
                preview_tokens: 0,
                error: None,
                retryable: false,
                privacy_class: None,
                participant_id: "main".into(),
            }],
        }
    }

    #[test]
    fn lines_the_session_went_on_to_name_outrank_the_rest() {
        let later = message(9, "Now fix `parse_header` in src/http.py", "{}");
        let salience = Salience::of(&[&later], None);
        let output = (0..200)
            .map(|i| format!("{i:4}  x = compute_{i}(y)"))
            .chain(["  57  def parse_header(raw):".to_owned()])
            .collect::<Vec<_>>()
            .join("\n");
        let kept = evidence_lines(&output, 3, &salience, 4);
        assert!(kept.contains("def parse_header(raw)"), "{kept}");
        assert!(kept.lines().count() <= 6, "{kept}");
        // Mentioned only before the output: not a reason to keep a line.
        let kept = evidence_lines(&output, 10, &Salience::default(), 3);
        assert!(!kept.contains("compute_100"), "{kept}");
    }

    fn tool(seq: u64, name: &str, args: &str, output: &str) -> TimelineMessage {
        let mut m = message(seq, "", args);
        m.tool_calls[0].name = name.into();
        m.tool_calls[0].output = Some(output.into());
        m
    }

    #[test]
    fn the_newest_read_of_each_file_in_play_goes_whole_and_older_files_do_not() {
        let body = (1..=400)
            .map(|i| format!("{i:6}\u{2192}    value_{i} = compute({i})"))
            .collect::<Vec<_>>()
            .join("\n");
        let path = |p: &str| format!(r#"{{"file_path":"{p}"}}"#);
        let mut steps = vec![
            tool(1, "Read", &path("src/old.py"), &body),
            tool(2, "Read", &path("src/app.py"), "stale"),
            tool(3, "Read", &path("src/app.py"), &body),
        ];
        for (i, f) in ["a", "b", "c"].iter().enumerate() {
            steps.push(tool(
                4 + i as u64,
                "Edit",
                &path(&format!("src/{f}.py")),
                "ok",
            ));
        }
        let refs: Vec<&TimelineMessage> = steps.iter().collect();
        let views = file_views(&refs);
        // Four files in play: a, b, c and app.py (its newest read); old.py fell out.
        assert_eq!(views.get("c3").map(String::as_str), Some("src/app.py"));
        assert_eq!(views.len(), 1, "{views:?}");
        let shown = file_view_result(
            &steps[2].tool_calls[0],
            None,
            "src/app.py",
            3,
            &Aging::plain(),
        );
        assert!(shown.contains("value_150 = compute(150)"), "{shown}");
        assert!(
            shown.chars().count() < FILE_VIEW_MAX_CHARS + 1_000,
            "{}",
            shown.len()
        );
        assert!(
            shown.contains("more characters; their evidence lines"),
            "{shown}"
        );
        // The file that fell out goes by its evidence lines.
        let aged = aged_result(&steps[0].tool_calls[0], 1, &Aging::plain());
        assert!(!aged.contains("value_150 ="), "{aged}");
    }

    #[test]
    fn a_repeated_call_and_a_whole_file_write_supersede_older_results() {
        let a = message(1, "", r#"{"command":"pytest -x"}"#);
        let b = message(2, "", r#"{"command":"ls"}"#);
        let c = message(3, "", r#"{"command":"pytest -x"}"#);
        let gone = superseded(&[&a, &b, &c]);
        assert_eq!(gone.get("c1").map(|s| s.by_call.as_str()), Some("c3"));
        // b's output equals a's and c's (same 300 bytes): repeated output, newest stands.
        assert_eq!(gone.get("c2").map(|s| s.by_call.as_str()), Some("c3"));
        assert!(!gone.contains_key("c3"));
    }

    #[test]
    fn aged_prose_keeps_what_names_code_and_drops_a_block_the_call_carries() {
        let text = format!(
            "THOUGHT: {} The bug is in `MiddlewareMixin.__acall__`. Let me look again.\n\n```bash\ngrep -n acall django/utils/deprecation.py\n```",
            "I am thinking about this at length. ".repeat(20)
        );
        let m = message(
            4,
            &text,
            r#"{"command":"grep -n acall django/utils/deprecation.py"}"#,
        );
        let calls: Vec<&ToolPair> = m.tool_calls.iter().collect();
        let short = aged_prose(&text, &calls).expect("shortened");
        assert!(short.contains("MiddlewareMixin.__acall__"), "{short}");
        assert!(!short.contains("at length"), "{short}");
        assert!(!short.contains("grep -n"), "{short}");
    }

    #[test]
    fn novel_evidence_keeps_the_lines_that_add_a_name_and_not_those_already_carried() {
        // Two test runs of the same suite: the newer one reports the same failure and a new one.
        let older = (0..60)
            .map(|i| format!("tests/test_http.py::test_case_{i} PASSED"))
            .chain([
                "tests/test_http.py::test_parse_header FAILED".to_owned(),
                "E   assert parse_header(b'x') == 4021".to_owned(),
                "tests/test_cookies.py::test_expiry_window FAILED".to_owned(),
                "2 failed, 60 passed".to_owned(),
            ])
            .collect::<Vec<_>>()
            .join("\n");
        let newer = "tests/test_http.py::test_parse_header FAILED\n\
                     E   assert parse_header(b'x') == 4021\n1 failed, 61 passed";
        let mut covered = Covered::default();
        covered.add("Run the suite again; `parse_header` still fails.");
        let salience = Salience::default();
        let newest = novel_evidence_lines(newer, 8, &salience, &mut covered);
        assert!(newest.contains("== 4021"), "{newest}");
        let oldest = novel_evidence_lines(&older, 3, &salience, &mut covered);
        // What only the older run shows is kept ...
        assert!(oldest.contains("test_expiry_window"), "{oldest}");
        // ... and what the newer run already carries is not said again.
        assert!(!oldest.contains("== 4021"), "{oldest}");
        assert!(oldest.lines().count() <= NOVEL_MAX_LINES + 2, "{oldest}");
        // Each evidence line of its own would spend its lines on passing cases instead.
        let alone = evidence_lines(&older, 3, &salience, EVIDENCE_MAX_LINES);
        assert!(alone.contains("== 4021"), "{alone}");
    }

    #[test]
    fn a_digested_step_keeps_the_names_its_text_lists_past_its_opening() {
        let text = format!(
            "Here is what the migration touches, {}\n- `be_payees`\n- entities_payee_locations\nI think that is a good start for today.",
            "as far as I can tell from the schema dump and the notes. ".repeat(4)
        );
        let short = digest_text(&text, 160, 800);
        assert!(short.contains("be_payees"), "{short}");
        assert!(short.contains("entities_payee_locations"), "{short}");
        assert!(!short.contains("good start"), "{short}");
        assert!(!short.contains('\n'), "{short}");
        assert!(short.chars().count() <= 800, "{short}");
        assert_eq!(digest_text("short\ntext", 160, 800), "short text");
    }
}
