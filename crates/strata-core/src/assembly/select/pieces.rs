//! The history as candidates: every message of the live history rendered whole (privacy gates
//! and artifact previews applied, as transcript replay would send it), then cut into pieces —
//! what a user said, the model's words, each call's arguments, each result — and each piece into
//! lines, with their terms and an estimate of their tokens.

use std::collections::{BTreeMap, BTreeSet};

use super::super::aging;
use super::super::candidates::Cx;
use super::super::forms::Rendering;
use super::super::gates::CallNotes;
use super::super::render::render_message;
use super::super::{is_step, BundleMessage, TimelineMessage};
use super::terms::{terms, Term};
use super::Valuation;
use crate::tokens::MESSAGE_OVERHEAD_TOKENS;

/// Which part of a message a piece is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// What a user, a peer or the platform said.
    Said,
    /// The model's own text.
    Words,
    /// The arguments of the message's `k`th answered call: whole or left out, never cut (they
    /// are JSON).
    Arguments(usize),
    /// The result of the message's `k`th answered call.
    Output(usize),
}

/// One line of a piece: a byte range of its text, its estimated tokens and its terms.
pub(super) struct Line {
    pub start: usize,
    pub end: usize,
    pub tokens: f64,
    /// Distinct terms with their shape's weight.
    pub terms: Vec<(Term, f64)>,
}

pub(super) struct Piece {
    /// Index of its message in the live history.
    pub message: usize,
    pub part: Part,
    /// The text its lines are cut from (for arguments, their string values).
    pub text: String,
    pub lines: Vec<Line>,
    /// Arguments: the parsed JSON, rebuilt around the chosen lines, and the text as sent whole.
    pub arguments: Option<serde_json::Value>,
    pub whole: Option<String>,
    /// Sent whole whatever the target: the newest step, the request, an unresolved error.
    pub protected: bool,
    /// Steps (assistant messages) after its message.
    pub age: u32,
    /// A result of a call on a file the agent modified: the file in play.
    pub in_play: bool,
    /// The part as written, beside the shorter form a completed turn sends it in (a memory, a
    /// note, shortened arguments): its lines are bought back only with room to spare, and with
    /// none chosen the shorter form goes alone.
    pub as_written: bool,
}

/// A message of the live history rendered whole.
pub(super) struct Rendered {
    pub messages: Vec<BundleMessage>,
    pub sources: Vec<String>,
    pub tokens: u64,
    /// Its messages as written, where a completed turn sends it shorter.
    pub written: Option<Vec<BundleMessage>>,
    /// Its tokens as written (`tokens` when it is sent as written).
    pub written_tokens: u64,
    /// Its framing: what its messages and calls cost with every line left out.
    pub frame: u64,
}

/// The live history, rendered whole and cut into pieces.
pub(super) struct History<'v> {
    pub live: &'v [&'v TimelineMessage],
    pub rendered: Vec<Rendered>,
    pub pieces: Vec<Piece>,
}

impl History<'_> {
    /// Tokens of every message sent whole.
    pub(super) fn whole_tokens(&self) -> u64 {
        self.rendered.iter().map(|r| r.tokens).sum()
    }

    /// Tokens of every message as written, the parts a completed turn shortens included.
    pub(super) fn written_tokens(&self) -> u64 {
        self.rendered.iter().map(|r| r.written_tokens).sum()
    }

    /// Whether some part goes shorter than written unless room buys its lines back.
    pub(super) fn has_shortened(&self) -> bool {
        self.pieces.iter().any(|p| p.as_written)
    }

    /// The messages with a protected piece, each once.
    pub(super) fn protected_messages(&self) -> impl Iterator<Item = usize> + '_ {
        let mut last = None;
        self.pieces
            .iter()
            .filter(|p| p.protected)
            .map(|p| p.message)
            .filter(move |&m| last.replace(m) != Some(m))
    }
}

/// Renders `live` whole and cuts it into pieces.
/// `in_place` holds the raw bytes of offloaded outputs admitted for the working set: they are
/// candidates whole, where other offloaded outputs are their previews; `asked` are results asked
/// for byte for byte whose bytes are inline: they go whole. Under the default
/// valuation a completed turn's results go as the product's rules have them (a superseded or
/// stale result as the note that says so, a long one as its memory); the baselines see every
/// result as it was.
pub(super) fn split<'v>(
    cx: &Cx<'_>,
    live: &'v [&'v TimelineMessage],
    in_place: &BTreeMap<String, &str>,
    asked: &BTreeSet<String>,
    valuation: Valuation,
) -> History<'v> {
    let ages = step_ages(live);
    let current_turn = match valuation {
        Valuation::Evidence => live.iter().rposition(|m| m.role == "user").unwrap_or(0),
        _ => 0,
    };
    let protected = protected_messages(live);
    let unresolved: BTreeSet<&str> = cx
        .snapshot
        .state
        .errors
        .iter()
        .map(|e| e.tool_call_id.as_str())
        .collect();
    let modified: Vec<&str> = cx
        .snapshot
        .state
        .files_modified
        .iter()
        .map(|f| f.text.as_str())
        .collect();
    let as_written: CallNotes<'_> = live
        .iter()
        .flat_map(|m| &m.tool_calls)
        .filter_map(|c| {
            let (&call, note) = cx.notes.get_key_value(c.tool_call_id.as_str())?;
            Some((call, note.as_written(c)))
        })
        .collect();
    let mut rendered = Vec::with_capacity(live.len());
    let mut pieces = Vec::new();
    for (i, m) in live.iter().enumerate() {
        // A message with an unresolved error goes as written: the error keeps its text.
        let failed = m
            .tool_calls
            .iter()
            .any(|c| unresolved.contains(c.tool_call_id.as_str()));
        let mode = if i < current_turn && !failed && bulky_or_outdated(m, cx) {
            Rendering::Recent
        } else {
            Rendering::Current
        };
        let cut = |rendered: &Rendered| Cut {
            message: i,
            protected: protected.contains(&i),
            age: ages[i],
            per_byte: rendered.per_byte(),
        };
        let facts = Facts {
            m,
            unresolved: &unresolved,
            modified: &modified,
            asked,
        };
        // A result shown as written goes as written: its freshness and conflict marks go where
        // its memory stands in for it.
        let notes = match mode {
            Rendering::Current => &as_written,
            _ => cx.notes,
        };
        let mut shown = render(m, mode, notes, in_place, cx);
        let mut written = None;
        if mode != Rendering::Current {
            let whole = render(m, Rendering::Current, &as_written, in_place, cx);
            // A shorter form that is not shorter is no saving: the message goes as written.
            if whole.tokens <= shown.tokens {
                shown = whole;
            } else {
                written = Some(whole);
            }
        }
        let mine = message_pieces(&cut(&shown), &shown.messages, &facts);
        if let Some(written) = written {
            let twins = message_pieces(&cut(&written), &written.messages, &facts);
            pieces.extend(twins_of(&mine, twins));
            shown.written_tokens = written.tokens;
            shown.written = Some(written.messages);
        }
        pieces.extend(mine);
        rendered.push(shown);
    }
    History {
        live,
        rendered,
        pieces,
    }
}

/// The parts of `written` that differ from their shorter form in `short`, marked as its twins:
/// candidates never protected, bought back with room to spare.
fn twins_of(short: &[Piece], written: Vec<Piece>) -> impl Iterator<Item = Piece> + '_ {
    short.iter().zip(written).filter_map(|(short, mut twin)| {
        (twin.text != short.text).then(|| {
            twin.as_written = true;
            twin.protected = false;
            twin
        })
    })
}

/// Message `m` rendered in `mode`, with the raw bytes of `in_place` outputs where their
/// previews are.
fn render(
    m: &TimelineMessage,
    mode: Rendering,
    notes: &CallNotes<'_>,
    in_place: &BTreeMap<String, &str>,
    cx: &Cx<'_>,
) -> Rendered {
    let (mut messages, sources, tokens) = render_message(m, mode, notes, cx.gate, None, cx.tokens);
    let tokens = raw_in_place(&mut messages, tokens, in_place, cx);
    Rendered {
        frame: frame_tokens(&messages),
        messages,
        sources,
        tokens,
        written: None,
        written_tokens: tokens,
    }
}

impl Rendered {
    /// Tokens per byte of its text, its framing aside: what a line of it is estimated at.
    fn per_byte(&self) -> f64 {
        let bytes: usize = self.messages.iter().map(message_bytes).sum();
        self.tokens.saturating_sub(self.frame) as f64 / bytes.max(1) as f64
    }
}

/// What the pieces of one history message are marked by.
struct Facts<'a> {
    m: &'a TimelineMessage,
    unresolved: &'a BTreeSet<&'a str>,
    modified: &'a [&'a str],
    asked: &'a BTreeSet<String>,
}

/// The pieces of one history message as rendered in `messages`.
fn message_pieces(cut: &Cut, messages: &[BundleMessage], facts: &Facts<'_>) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut outputs = 0;
    for message in messages {
        match message {
            BundleMessage::Assistant { text, tool_calls } => {
                // What the model quoted as code (`a span`) is a value it may write again.
                let mut words = cut.piece(Part::Words, text);
                for line in &mut words.lines {
                    let spans = words.text[line.start..line.end]
                        .split('`')
                        .skip(1)
                        .step_by(2);
                    line.terms
                        .extend(spans.filter_map(super::terms::value_term));
                    line.terms.sort_by_key(|&(t, _)| t);
                    line.terms.dedup_by_key(|&mut (t, _)| t);
                }
                pieces.push(words);
                for (k, c) in tool_calls.iter().enumerate() {
                    pieces.push(cut.arguments(k, &c.arguments));
                }
            }
            BundleMessage::Tool {
                tool_call_id,
                content,
                ..
            } => {
                let mut piece = cut.piece(Part::Output(outputs), content);
                piece.protected |= facts.unresolved.contains(tool_call_id.as_str())
                    || facts.asked.contains(tool_call_id);
                piece.in_play = facts
                    .m
                    .tool_calls
                    .iter()
                    .find(|c| &c.tool_call_id == tool_call_id)
                    .is_some_and(|c| facts.modified.iter().any(|f| c.args.contains(f)));
                pieces.push(piece);
                outputs += 1;
            }
            BundleMessage::User { text }
            | BundleMessage::System { text }
            | BundleMessage::Data { text, .. } => pieces.push(cut.piece(Part::Said, text)),
        }
    }
    pieces
}

/// Puts the raw bytes of `in_place` outputs where their previews are; returns the tokens.
fn raw_in_place(
    messages: &mut [BundleMessage],
    mut tokens: u64,
    in_place: &BTreeMap<String, &str>,
    cx: &Cx<'_>,
) -> u64 {
    for m in messages {
        if let BundleMessage::Tool {
            tool_call_id,
            content,
            ..
        } = m
        {
            if let Some(raw) = in_place.get(tool_call_id.as_str()) {
                tokens = tokens.saturating_sub(cx.tokens.count(content)) + cx.tokens.count(raw);
                *content = (*raw).to_owned();
            }
        }
    }
    tokens
}

/// What every piece of one message shares.
struct Cut {
    message: usize,
    protected: bool,
    age: u32,
    per_byte: f64,
}

impl Cut {
    /// A piece cut into lines, and a long line into spans ([`super::spans`]).
    fn piece(&self, part: Part, text: &str) -> Piece {
        let lines = super::spans::spans(text)
            .into_iter()
            .map(|(start, end)| self.line(text, start, end))
            .collect();
        self.with_lines(part, text, lines)
    }

    /// A piece cut at its newlines only (the lines of arguments' values, which are rebuilt by
    /// line).
    fn piece_by_lines(&self, part: Part, text: &str) -> Piece {
        let mut lines = Vec::new();
        let mut start = 0;
        for line in text.split_inclusive('\n') {
            let end = start + line.len();
            lines.push(self.line(text, start, end));
            start = end;
        }
        self.with_lines(part, text, lines)
    }

    /// A call's arguments: a JSON object by the lines of its string values; anything else one
    /// line, whole or not at all.
    fn arguments(&self, k: usize, text: &str) -> Piece {
        let part = Part::Arguments(k);
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(args @ serde_json::Value::Object(_)) => {
                let mut piece = self.piece_by_lines(part, &super::arguments::leaves_text(&args));
                for line in &mut piece.lines {
                    let value = &piece.text[line.start..line.end];
                    if let Some(term) = super::terms::value_term(value) {
                        line.terms.push(term);
                    }
                }
                piece.arguments = Some(args);
                piece.whole = Some(text.to_owned());
                piece
            }
            _ => {
                let lines = vec![self.line(text, 0, text.len())];
                self.with_lines(part, text, lines)
            }
        }
    }

    fn line(&self, text: &str, start: usize, end: usize) -> Line {
        let mut found = Vec::new();
        terms(&text[start..end], &mut found);
        found.sort_by_key(|&(t, _)| t);
        found.dedup_by_key(|&mut (t, _)| t);
        Line {
            start,
            end,
            tokens: ((end - start) as f64 * self.per_byte).max(1.0),
            terms: found,
        }
    }

    fn with_lines(&self, part: Part, text: &str, lines: Vec<Line>) -> Piece {
        Piece {
            message: self.message,
            part,
            text: text.to_owned(),
            lines,
            arguments: None,
            whole: None,
            protected: self.protected,
            age: self.age,
            in_play: false,
            as_written: false,
        }
    }
}

/// Tokens a provider is sent for messages and calls whatever their text: a message's framing,
/// and a call's framing and name.
fn frame_tokens(messages: &[BundleMessage]) -> u64 {
    messages
        .iter()
        .map(|m| match m {
            BundleMessage::Assistant { tool_calls, .. } => {
                MESSAGE_OVERHEAD_TOKENS
                    + tool_calls.len() as u64 * (MESSAGE_OVERHEAD_TOKENS + CALL_NAME_TOKENS)
            }
            _ => MESSAGE_OVERHEAD_TOKENS,
        })
        .sum()
}

/// A tool's name, as most are a token or two.
const CALL_NAME_TOKENS: u64 = 2;

fn message_bytes(m: &BundleMessage) -> usize {
    match m {
        BundleMessage::Assistant { text, tool_calls } => {
            text.len() + tool_calls.iter().map(|c| c.arguments.len()).sum::<usize>()
        }
        BundleMessage::Tool { content, .. } => content.len(),
        BundleMessage::User { text }
        | BundleMessage::System { text }
        | BundleMessage::Data { text, .. } => text.len(),
    }
}

/// A completed turn's message whose result (or call) is longer than this many characters goes
/// by what its memory says, the bytes left on the log: a page of payload a finished turn
/// fetched is what a next action rarely reads again (a file the agent read is its work, and
/// stays a candidate line by line).
const BULKY_CHARS: usize = 3_000;

/// Whether message `m` of a completed turn goes as the product's rules have it (memories for
/// long results, the notes for stale and superseded ones): it carries a bulky payload, or a
/// result past its freshness or replaced.
fn bulky_or_outdated(m: &TimelineMessage, cx: &Cx<'_>) -> bool {
    m.tool_calls.iter().any(|c| {
        let output = c.output_bytes.unwrap_or(0) as usize;
        let inline = c.output.as_ref().map_or(0, |o| o.len());
        (output.max(inline) > BULKY_CHARS && !aging::reads_named_file(c))
            || c.args.len() > BULKY_CHARS
            || cx
                .notes
                .get(c.tool_call_id.as_str())
                .is_some_and(|n| n.outdated())
    })
}

/// For each message, how many steps came after it.
fn step_ages(live: &[&TimelineMessage]) -> Vec<u32> {
    let mut after = 0u32;
    let mut ages = vec![0; live.len()];
    for (i, m) in live.iter().enumerate().rev() {
        ages[i] = after;
        if is_step(m) {
            after += 1;
        }
    }
    ages
}

/// The messages sent whole whatever the target: the newest step with a result (the
/// observation the next action answers) and everything after it, and the newest user message
/// (the request the agent works on).
fn protected_messages(live: &[&TimelineMessage]) -> BTreeSet<usize> {
    let mut protected = BTreeSet::new();
    let observed = |m: &&TimelineMessage| m.tool_calls.iter().any(|c| !c.status.is_open());
    let newest = live
        .iter()
        .rposition(|m| is_step(m) && observed(m))
        .or_else(|| live.iter().rposition(|m| is_step(m)));
    if let Some(newest) = newest {
        protected.extend(newest..live.len());
    }
    if let Some(request) = live.iter().rposition(|m| m.role == "user") {
        protected.insert(request);
    }
    protected
}
