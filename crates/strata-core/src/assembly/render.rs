//! Rendering: one message with its tool pairs in the form its age calls for (verbatim, recent,
//! older, digest, aged), outputs as previews, memories or evidence lines, never separated from
//! their calls.

use super::aging;
use super::forms::{is_salient, Rendering};
use super::gates::{CallNote, CallNotes, Gate};
use super::{Aging, BundleMessage, BundleToolCall, TimelineMessage, ToolPair, PEER_ROLE};
use crate::projection::{truncate_chars, ToolStatus, PLATFORM_ROLE};
use crate::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};

/// Characters of an inline output kept when it is shown as a preview.
pub(super) const PREVIEW_HEAD_CHARS: usize = 400;
pub(super) const PREVIEW_TAIL_CHARS: usize = 700;
/// Salient lines (errors, failures) a preview keeps from the part it cuts out.
pub(super) const PREVIEW_SALIENT_LINES: usize = 8;
/// Inline outputs of completed turns longer than this are shown by their salient lines.
pub(super) const COMPACT_INLINE_MAX_CHARS: usize = 1500;
pub(super) const COMPACT_MAX_CHARS: usize = 600;
pub(super) const DIGEST_TEXT_CHARS: usize = 160;

/// Renders one message with its tool pairs. Returns the messages, the source event ids and the
/// tokens. Large outputs are shown as preview + artifact ref in every rendering.
pub(super) fn render_message(
    m: &TimelineMessage,
    mode: Rendering,
    notes: &CallNotes,
    gate: Gate,
    aging: Option<&Aging>,
    tokens: &dyn TokenCounter,
) -> (Vec<BundleMessage>, Vec<String>, u64) {
    let r = MessageRenderer {
        mode,
        notes,
        gate,
        aging,
        tokens,
    };
    let mut sources = vec![m.event_id.clone()];
    let (message, mut t) = if mode == Rendering::Digest {
        r.digest(m, &mut sources)
    } else if is_said(m) {
        (
            BundleMessage::User {
                text: m.text.clone(),
            },
            m.tokens,
        )
    } else {
        r.step(m)
    };
    let mut out = vec![message];
    if mode != Rendering::Digest && !is_said(m) {
        // Only answered calls are sent as calls; open ones are listed as pending.
        for c in m.tool_calls.iter().filter(|c| !c.status.is_open()) {
            sources.push(c.request_event_id.clone());
            sources.extend(c.result_event_id.clone());
            let (content, ct) = r.result(c, m.seq);
            t += ct + MESSAGE_OVERHEAD_TOKENS;
            out.push(BundleMessage::Tool {
                tool_call_id: c.tool_call_id.clone(),
                content,
                is_error: matches!(c.status, ToolStatus::Errored | ToolStatus::Failed),
            });
        }
    }
    sources.dedup();
    (out, sources, t)
}

/// Whether a message is what someone said (a user, a peer, the platform), sent as a user turn.
fn is_said(m: &TimelineMessage) -> bool {
    m.role == "user" || m.role == PEER_ROLE || m.role == PLATFORM_ROLE
}

/// How one message is rendered: its mode, and what decides the form of each result.
struct MessageRenderer<'a> {
    mode: Rendering,
    notes: &'a CallNotes<'a>,
    gate: Gate,
    aging: Option<&'a Aging<'a>>,
    tokens: &'a dyn TokenCounter,
}

impl MessageRenderer<'_> {
    /// An agent's step: its text and its answered calls (results follow as tool messages).
    fn step(&self, m: &TimelineMessage) -> (BundleMessage, u64) {
        let answered: Vec<&ToolPair> = m
            .tool_calls
            .iter()
            .filter(|c| !c.status.is_open())
            .collect();
        let mut t = 0;
        let mut calls = Vec::with_capacity(answered.len());
        for c in &answered {
            let (arguments, at) = self.arguments(c, m.seq);
            t += at;
            calls.push(BundleToolCall {
                id: c.tool_call_id.clone(),
                name: c.name.clone(),
                arguments,
            });
        }
        // An aged step keeps what its text names (code, paths, identifiers), not its prose.
        let text = match self.mode {
            mode if mode.is_aged() => aging::aged_prose(&m.text, &answered),
            _ => None,
        };
        t += match &text {
            Some(short) => self.tokens.count(short),
            None => m.tokens,
        };
        let message = BundleMessage::Assistant {
            text: text.unwrap_or_else(|| m.text.clone()),
            tool_calls: calls,
        };
        (message, t)
    }

    /// A call's arguments and their tokens. Completed turns need what was asked, not every byte
    /// of a long argument (a spreadsheet's rows, a report's body): the event has them all.
    fn arguments(&self, c: &ToolPair, seq: u64) -> (String, u64) {
        if !(self.mode == Rendering::Current || self.mode.is_aged())
            && c.args.chars().count() > MAX_ARGS_CHARS
        {
            let short = serde_json::json!({
                "_shortened": format!(
                    "{} characters of arguments; all of them in event {}",
                    c.args.chars().count(),
                    c.request_event_id
                ),
                "head": truncate_chars(&c.args, ARGS_HEAD_CHARS),
            })
            .to_string();
            let t = self.tokens.count(&short);
            return (short, t);
        }
        let aged = self
            .aging
            .filter(|_| self.mode.is_aged())
            .and_then(|a| aging::aged_arguments(&c.args, seq, &a.salience));
        match aged {
            Some(short) => {
                let t = self.tokens.count(&short);
                (short, t)
            }
            None => (c.args.clone(), c.call_tokens),
        }
    }

    /// A result as sent, and its tokens: the safe summary of a withheld one; what a memory says
    /// instead (superseded, stale, remembered); under aging the note that a later call
    /// superseded it, its evidence lines (or the file view) when aged, its raw bytes when
    /// rehydrated in place; else its content with freshness and conflict marks.
    fn result(&self, c: &ToolPair, seq: u64) -> (String, u64) {
        let counted = |text: String| {
            let t = self.tokens.count(&text);
            (text, t)
        };
        let note = self.notes.get(c.tool_call_id.as_str());
        if self.gate.withholds(c.privacy_class) {
            return counted(self.gate.safe_summary(c));
        }
        if let Some(text) = note.and_then(|n| n.replacement(c, self.mode)) {
            return counted(text);
        }
        if let Some(a) = self.aging {
            if let Some(s) = a.superseded.get(&c.tool_call_id) {
                return counted(aging::superseded_text(s));
            }
            let raw = a.in_place.get(&c.tool_call_id).copied();
            if let Some(path) = a.file_view_in(c, self.mode) {
                return counted(aging::file_view_result(c, raw, path, seq, a));
            }
            if self.mode.is_aged() {
                return counted(aging::aged_result(c, seq, a));
            }
            if let Some(raw) = a.in_place.get(&c.tool_call_id) {
                return counted((*raw).to_owned());
            }
        }
        let (content, ct) = tool_content(c, self.mode != Rendering::Current, self.tokens);
        match note.map(CallNote::marks).filter(|m| !m.is_empty()) {
            Some(marks) => {
                let t = ct + self.tokens.count(&marks);
                (format!("{marks}\n{content}"), t)
            }
            None => (content, ct),
        }
    }

    /// An older turn's message as one line per step with previews and artifact refs.
    fn digest(&self, m: &TimelineMessage, sources: &mut Vec<String>) -> (BundleMessage, u64) {
        let mut line = format!(
            "[{} @{}] {}",
            m.role,
            m.seq,
            match self.aging {
                Some(_) =>
                    aging::digest_text(&m.text, DIGEST_TEXT_CHARS, aging::DIGEST_PROSE_MAX_CHARS),
                None => truncate_chars(&m.text.replace('\n', " "), DIGEST_TEXT_CHARS),
            }
        );
        for c in m.tool_calls.iter().filter(|c| !c.status.is_open()) {
            sources.push(c.request_event_id.clone());
            sources.extend(c.result_event_id.clone());
            line.push_str(&format!(
                "\n  → {}({}) {}: {}{}",
                c.name,
                truncate_chars(&c.args, 80),
                c.status.as_str(),
                self.outcome(c),
                c.output_ref
                    .as_deref()
                    .map(|r| format!(" [full output: {r}]"))
                    .unwrap_or_default()
            ));
        }
        let t = self.tokens.count(&line) + MESSAGE_OVERHEAD_TOKENS;
        let message = if is_said(m) {
            BundleMessage::User { text: line }
        } else {
            BundleMessage::Assistant {
                text: line,
                tool_calls: vec![],
            }
        };
        (message, t)
    }

    /// A digest line's outcome of a call.
    fn outcome(&self, c: &ToolPair) -> String {
        if self.gate.withholds(c.privacy_class) {
            return self.gate.safe_summary(c);
        }
        // Superseded, stale or remembered: the note says it (never the old value).
        let note = self.notes.get(c.tool_call_id.as_str());
        if let Some(text) = note.and_then(|n| n.replacement(c, self.mode)) {
            return text;
        }
        match (&c.error, &c.output_preview, &c.output) {
            (Some(e), _, _) => format!("failed: {}", truncate_chars(e, 120)),
            (None, Some(p), _) => truncate_chars(&one_line(last_lines(p, 2)), 160),
            (None, None, Some(o)) => truncate_chars(&one_line(last_lines(o, 2)), 160),
            _ => String::new(),
        }
    }
}

/// Arguments of a completed call longer than this are sent shortened.
pub(super) const MAX_ARGS_CHARS: usize = 400;
pub(super) const ARGS_HEAD_CHARS: usize = 160;

/// The content a tool result is sent with, and its tokens. `shorten` (completed turns) shows
/// long outputs by their salient lines.
pub(super) fn tool_content(
    c: &ToolPair,
    shorten: bool,
    tokens: &dyn TokenCounter,
) -> (String, u64) {
    if let Some(err) = &c.error {
        let text = format!(
            "tool failed{}: {err}",
            if c.retryable { " (retryable)" } else { "" }
        );
        let t = tokens.count(&text);
        return (text, t);
    }
    match (&c.output, &c.output_ref) {
        (Some(o), None) if !shorten || o.chars().count() <= COMPACT_INLINE_MAX_CHARS => {
            (o.clone(), c.output_tokens)
        }
        (Some(o), None) => {
            let text = format!(
                "[{} bytes of output shortened to its salient lines; full output in event {}]\n{}",
                o.len(),
                c.result_event_id.as_deref().unwrap_or("?"),
                compact(o)
            );
            let t = tokens.count(&text);
            (text, t)
        }
        (_, Some(r)) if shorten => {
            let text = format!(
                "[output stored as artifact {r}: {} bytes, {} tokens; salient lines:]\n{}",
                c.output_bytes.unwrap_or(0),
                c.output_tokens,
                compact(c.output_preview.as_deref().unwrap_or_default())
            );
            let t = tokens.count(&text);
            (text, t)
        }
        (_, Some(r)) => {
            let header = format!(
                "[output stored as artifact {r}: {} bytes, {} tokens; preview follows]\n",
                c.output_bytes.unwrap_or(0),
                c.output_tokens
            );
            let preview = c.output_preview.clone().unwrap_or_default();
            let t = tokens.count(&header) + c.preview_tokens;
            (header + &preview, t)
        }
        (None, None) => (String::new(), 0),
    }
}

/// A preview of a long text: its head, the salient lines (errors, failures, panics) of the part
/// in between, and its tail. Stored with every artifact so that the assembler never needs the
/// raw bytes to show what an output said.
pub fn preview(text: &str) -> String {
    let chars = text.chars().count();
    if chars <= PREVIEW_HEAD_CHARS + PREVIEW_TAIL_CHARS {
        return text.to_owned();
    }
    let head_end = text
        .char_indices()
        .nth(PREVIEW_HEAD_CHARS)
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let tail_start = text
        .char_indices()
        .nth(chars - PREVIEW_TAIL_CHARS)
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let middle = &text[head_end..tail_start];
    let salient: Vec<&str> = middle
        .lines()
        .filter(|l| is_salient(l))
        .take(PREVIEW_SALIENT_LINES)
        .collect();
    let mut out = String::with_capacity(PREVIEW_HEAD_CHARS + PREVIEW_TAIL_CHARS + 400);
    out.push_str(&text[..head_end]);
    out.push_str(&format!(
        "\n… [{} characters omitted",
        chars - PREVIEW_HEAD_CHARS - PREVIEW_TAIL_CHARS
    ));
    if salient.is_empty() {
        out.push_str("] …\n");
    } else {
        out.push_str("; salient lines:]\n");
        for l in salient {
            out.push_str(&truncate_chars(l.trim_end(), 200));
            out.push('\n');
        }
        out.push_str("… […] …\n");
    }
    out.push_str(&text[tail_start..]);
    out
}

/// The lines of an output that matter once its turn is over: the first line, the salient lines
/// and the last two, at most `COMPACT_MAX_CHARS`.
pub(super) fn compact(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut keep: Vec<usize> = Vec::new();
    if !lines.is_empty() {
        keep.push(0);
    }
    keep.extend(
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| is_salient(l))
            .map(|(i, _)| i)
            .take(6),
    );
    keep.extend(lines.len().saturating_sub(2)..lines.len());
    keep.sort_unstable();
    keep.dedup();
    let mut out = String::new();
    let mut prev: Option<usize> = None;
    for i in keep {
        if matches!(prev, Some(p) if i > p + 1) {
            out.push_str("…\n");
        }
        out.push_str(&truncate_chars(lines[i].trim_end(), 200));
        out.push('\n');
        prev = Some(i);
    }
    truncate_chars(out.trim_end(), COMPACT_MAX_CHARS)
}

pub(super) fn last_lines(s: &str, n: usize) -> &str {
    let trimmed = s.trim_end();
    let mut idx = trimmed.len();
    for _ in 0..n {
        match trimmed[..idx].rfind('\n') {
            Some(i) => idx = i,
            None => return trimmed,
        }
    }
    &trimmed[idx + 1..]
}

pub(super) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
