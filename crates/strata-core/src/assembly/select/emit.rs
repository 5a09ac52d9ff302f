//! From the chosen lines back to messages: a unit per message of the history, in order, each
//! piece whole, by its chosen lines (the gaps marked), or as one line saying what was left out;
//! and an omission for every piece that lost lines, with the tokens it saved.

use super::super::candidates::Cx;
use super::super::{BundleMessage, Omission, OmissionReason, Tier, Unit};
use super::choose::Choice;
use super::gaps::kept_lines;
use super::pieces::{History, Part, Piece};
use super::terms::TermSet;
use crate::tokens::{count_by_lines, message_tokens, tool_call_tokens, MESSAGE_OVERHEAD_TOKENS};

/// The units of the history under `choice`, and what it left out.
pub(super) fn units(
    cx: &Cx<'_>,
    history: &History<'_>,
    choice: &Choice,
    why: &str,
) -> (Vec<Unit>, Vec<Omission>) {
    let mut units = Vec::with_capacity(history.rendered.len());
    let mut omitted = Vec::new();
    let (mut dropped_messages, mut dropped_sources) = (0, Vec::new());
    let request = history.live.iter().rposition(|m| m.role == "user");
    let mut pieces = history.pieces.iter().zip(&choice.keep).peekable();
    for (i, rendered) in history.rendered.iter().enumerate() {
        let mut mine = Vec::new();
        while let Some((p, keep)) = pieces.next_if(|(p, _)| p.message == i) {
            mine.push((p, keep.as_slice()));
        }
        let m = history.live[i];
        // As rendered: every line of its shown form, none of a part's as written twin.
        let whole = mine
            .iter()
            .all(|(p, keep)| keep.iter().all(|&k| k != p.as_written));
        let protected = mine.iter().any(|(p, _)| p.protected);
        let shown = mine.iter().any(|(_, keep)| keep.iter().any(|&k| k));
        if !whole && !shown && !protected {
            dropped_messages += 1;
            dropped_sources.extend(rendered.sources.iter().cloned());
            omitted.push(Omission {
                kind: "message".into(),
                tier: Tier::P3,
                reason: OmissionReason::Budget,
                source_event_ids: rendered.sources.clone(),
                tokens: rendered.tokens,
            });
            continue;
        }
        let (messages, tokens) = if whole {
            (rendered.messages.clone(), rendered.tokens)
        } else if let Some(written) = rendered.written.as_ref().filter(|_| as_written(&mine)) {
            (written.clone(), rendered.written_tokens)
        } else {
            cut_messages(cx, &rendered.messages, &mine)
        };
        let cut = |(p, keep): &&(&Piece, &[bool])| !p.as_written && !keep.iter().all(|&k| k);
        for (p, keep) in mine.iter().filter(cut) {
            omitted.push(left_out(p, keep, &m.event_id));
        }
        units.push(Unit {
            kind: if super::super::is_step(m) {
                "step"
            } else {
                "said"
            },
            tier: if protected { Tier::P0 } else { Tier::P1 },
            reason: match (protected, whole) {
                (true, _) if Some(i) == request => "the current request: sent whole".into(),
                (true, _) => "the newest step or an unresolved error: sent whole".into(),
                (false, true) => format!("{why}: sent whole"),
                (false, false) => format!("{why}: the lines that carry its names"),
            },
            sources: rendered.sources.clone(),
            rendering: match (whole, shown) {
                (true, _) => "verbatim",
                (false, true) => "lines",
                (false, false) => "placeholder",
            },
            messages,
            tokens,
            protected: true,
            order: (2, m.seq, 0),
        });
    }
    units.extend(left_out_note(cx, dropped_messages, dropped_sources));
    (units, omitted)
}

/// Whether a message's pieces are chosen whole as written: every twin whole, and every other
/// part without a twin whole.
fn as_written(mine: &[(&Piece, &[bool])]) -> bool {
    let twinned = |part: Part| mine.iter().any(|(p, _)| p.as_written && p.part == part);
    mine.iter()
        .all(|(p, keep)| (!p.as_written && twinned(p.part)) || keep.iter().all(|&k| k))
}

/// A note that `dropped` messages were left out whole, so the model knows the history has
/// gaps; its sources are theirs (`sources`).
fn left_out_note(cx: &Cx<'_>, dropped: usize, sources: Vec<String>) -> Option<Unit> {
    if dropped == 0 {
        return None;
    }
    let text = format!(
        "[{dropped} earlier messages of this session, with their calls and results, were left \
         out of this context; each is on the log and in the assembly record]"
    );
    Some(Unit {
        kind: "left_out_note",
        tier: Tier::P1,
        reason: "says that the history has gaps".into(),
        sources,
        rendering: "verbatim",
        tokens: message_tokens(&text, cx.tokens),
        messages: vec![BundleMessage::System { text }],
        protected: true,
        order: (1, 0, 5),
    })
}

/// The messages of one history message with each piece cut to its chosen lines, and their
/// tokens, counted as sent.
fn cut_messages(
    cx: &Cx<'_>,
    messages: &[BundleMessage],
    pieces: &[(&Piece, &[bool])],
) -> (Vec<BundleMessage>, u64) {
    let shown = |part: Part| Shown::of(pieces, part);
    let mut out = Vec::with_capacity(messages.len());
    let mut tokens = 0;
    let mut outputs = 0;
    for message in messages {
        let cut = match message {
            BundleMessage::Assistant { text, tool_calls } => {
                let mut calls = tool_calls.clone();
                for (k, c) in calls.iter_mut().enumerate() {
                    tokens += match shown(Part::Arguments(k)).arguments() {
                        Some(args) => {
                            c.arguments = args;
                            cx.tokens.count_line(&c.name)
                                + count_by_lines(&c.arguments, cx.tokens)
                                + MESSAGE_OVERHEAD_TOKENS
                        }
                        None => tool_call_tokens(&c.name, &c.arguments, cx.tokens),
                    };
                }
                let (text, t) = cut_text(cx, shown(Part::Words), text);
                tokens += t;
                BundleMessage::Assistant {
                    text,
                    tool_calls: calls,
                }
            }
            BundleMessage::Tool {
                tool_call_id,
                content,
                is_error,
            } => {
                let (content, t) = cut_text(cx, shown(Part::Output(outputs)), content);
                outputs += 1;
                tokens += t;
                BundleMessage::Tool {
                    tool_call_id: tool_call_id.clone(),
                    content,
                    is_error: *is_error,
                }
            }
            BundleMessage::User { text } => {
                let (text, t) = cut_text(cx, shown(Part::Said), text);
                tokens += t;
                BundleMessage::User { text }
            }
            other => {
                tokens += message_tokens(&super::fixed::message_text(other), cx.tokens);
                other.clone()
            }
        };
        out.push(cut);
    }
    (out, tokens)
}

/// A message's text as `shown`, or `text` when nothing of it is chosen apart, with its tokens.
/// A cut text is counted by its lines: the lines it keeps were counted at earlier calls.
fn cut_text(cx: &Cx<'_>, shown: Shown<'_>, text: &str) -> (String, u64) {
    match shown.text() {
        Some(cut) => {
            let tokens = count_by_lines(&cut, cx.tokens) + MESSAGE_OVERHEAD_TOKENS;
            (cut, tokens)
        }
        None => (text.to_owned(), message_tokens(text, cx.tokens)),
    }
}

/// One part of a message as chosen: its shown form and, where a completed turn shortens it,
/// its twin as written.
struct Shown<'a> {
    short: Option<(&'a Piece, &'a [bool])>,
    written: Option<(&'a Piece, &'a [bool])>,
}

impl<'a> Shown<'a> {
    fn of(pieces: &[(&'a Piece, &'a [bool])], part: Part) -> Self {
        let find = |as_written: bool| {
            pieces
                .iter()
                .find(|(p, _)| p.part == part && p.as_written == as_written)
                .copied()
        };
        Self {
            short: find(false),
            // A twin none of whose lines is chosen leaves the shorter form alone.
            written: find(true).filter(|(_, keep)| keep.iter().any(|&k| k)),
        }
    }

    /// The text sent: the twin whole when all of it is chosen; else the shorter form with the
    /// twin's chosen lines after it (without its placeholder when none of its own is chosen).
    fn text(&self) -> Option<String> {
        let Some((twin, keep)) = self.written else {
            return self.short.map(|(p, keep)| shown_text(p, keep));
        };
        let lines = shown_text(twin, keep);
        let short = self
            .short
            .filter(|(_, own)| own.iter().any(|&k| k) && !keep.iter().all(|&k| k));
        Some(match short {
            Some((p, own)) => format!("{}\n{lines}", shown_text(p, own)),
            None => lines,
        })
    }

    /// Arguments sent: JSON cannot be joined, so a twin with lines chosen replaces the
    /// shortened form.
    fn arguments(&self) -> Option<String> {
        match (self.short, self.written) {
            (Some(short), Some(twin)) => Some(shown_text(twin.0, &with_names_of(twin, short))),
            (None, Some((twin, keep))) => Some(shown_text(twin, keep)),
            (short, None) => short.map(|(p, keep)| shown_text(p, keep)),
        }
    }
}

/// The twin's chosen lines, and the lines of it that carry a code-like name the shorter form's
/// chosen lines carried: the twin replaces that form, and what the selection counted as sent
/// in it goes.
fn with_names_of((twin, keep): (&Piece, &[bool]), (short, chosen): (&Piece, &[bool])) -> Vec<bool> {
    let named: TermSet = short
        .lines
        .iter()
        .zip(chosen)
        .filter(|(_, &k)| k)
        .flat_map(|(l, _)| l.terms.iter())
        .filter(|&&(_, shape)| shape >= 1.0)
        .map(|&(t, _)| t)
        .collect();
    twin.lines
        .iter()
        .zip(keep)
        .map(|(l, &k)| k || l.terms.iter().any(|(t, _)| named.contains(t)))
        .collect()
}

/// A piece as sent: whole, its chosen lines with the gaps marked, or one line.
fn shown_text(p: &Piece, keep: &[bool]) -> String {
    if keep.iter().all(|&k| k) {
        return p.whole.clone().unwrap_or_else(|| p.text.clone());
    }
    let lines = p.text.split_inclusive('\n').count();
    if !keep.iter().any(|&k| k) {
        return placeholder(p, lines);
    }
    if let Some(args) = &p.arguments {
        return super::arguments::rebuild(args, keep);
    }
    kept_lines(
        p.lines
            .iter()
            .map(|l| &p.text[l.start..l.end])
            .zip(keep.iter().copied()),
    )
}

/// What a piece with no line chosen goes as: short, and saying what is missing.
fn placeholder(p: &Piece, lines: usize) -> String {
    match p.part {
        Part::Arguments(_) => {
            serde_json::json!({ "_left_out": format!("{} chars", p.text.len()) }).to_string()
        }
        Part::Words if p.text.trim().is_empty() => String::new(),
        Part::Output(_) => format!("[output left out: {lines} lines]"),
        Part::Words | Part::Said => format!("[left out: {lines} lines]"),
    }
}

fn left_out(p: &Piece, keep: &[bool], event_id: &str) -> Omission {
    let dropped: f64 = p
        .lines
        .iter()
        .zip(keep)
        .filter(|(_, &k)| !k)
        .map(|(l, _)| l.tokens)
        .sum();
    Omission {
        kind: match p.part {
            Part::Said => "message_lines",
            Part::Words => "step_text_lines",
            Part::Arguments(_) => "call_arguments",
            Part::Output(_) => "tool_output_lines",
        }
        .into(),
        tier: Tier::P3,
        reason: OmissionReason::Budget,
        source_event_ids: vec![event_id.to_owned()],
        tokens: dropped.round() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::super::pieces::Line;
    use super::super::terms::terms;
    use super::*;

    fn arguments(as_written: bool, lines: &[&str]) -> Piece {
        let mut text = String::new();
        let lines = lines
            .iter()
            .map(|line| {
                let start = text.len();
                text.push_str(line);
                text.push('\n');
                let mut found = Vec::new();
                terms(line, &mut found);
                Line {
                    start,
                    end: text.len(),
                    tokens: 10.0,
                    terms: found,
                }
            })
            .collect();
        Piece {
            message: 0,
            part: Part::Arguments(0),
            text,
            lines,
            arguments: None,
            whole: None,
            protected: false,
            age: 1,
            in_play: false,
            as_written,
        }
    }

    #[test]
    fn a_twin_that_replaces_the_shorter_arguments_keeps_the_names_they_were_chosen_for() {
        let short = arguments(
            false,
            &[r#"{"path":"src/cache/slru.rs","diff":"+pub struct SegmentedLru {…"#],
        );
        let twin = arguments(
            true,
            &[
                "+pub struct SegmentedLru {",
                "+    protected: Lru, // BRANCH_B_MARKER_4480",
                "+// segment policy note: promote on the second hit",
                "+// segment policy note: demote the protected tail",
            ],
        );
        let chosen_twin = [false, false, false, true];
        // The shorter form's chosen line names `SegmentedLru`: the twin's line that carries it
        // goes too; plain words (`protected`, `policy`) bring nothing back.
        let keep = with_names_of((&twin, &chosen_twin), (&short, &[true]));
        assert_eq!(keep, [true, false, false, true]);
        // The shorter form not chosen: the twin's own choice.
        let keep = with_names_of((&twin, &chosen_twin), (&short, &[false]));
        assert_eq!(keep, chosen_twin);
    }
}
