//! Choosing lines: the valuations. Each returns which lines of each piece go; a piece with no
//! line chosen goes as one line that says what was left out.
//!
//! [`by_evidence`] is the default: a line's value is the names it would add to the context
//! (names already there add nothing, so a re-read file, a re-run command or a repeated listing
//! goes once, newest), each weighed by how recently and in how many pieces the history used
//! it, whether the newest steps name it, and whether the model itself wrote it. Lines are taken
//! by value per token,
//! greedily with lazy re-evaluation, until the room is spent. Deterministic: ties go to the
//! newer line.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::pieces::{History, Part, Piece};
use super::terms::{Term, TermMap, TermSet};

/// Which lines of each piece go, by piece and line.
pub(super) struct Choice {
    pub keep: Vec<Vec<bool>>,
}

impl Choice {
    fn none(history: &History<'_>) -> Self {
        let keep = history
            .pieces
            .iter()
            .map(|p| vec![p.protected; p.lines.len()])
            .collect();
        Self { keep }
    }
}

/// Every line as written: transcript replay.
pub(super) fn everything(history: &History<'_>) -> Choice {
    let keep = history
        .pieces
        .iter()
        .map(|p| vec![true; p.lines.len()])
        .collect();
    Choice { keep }
}

/// Every line, the parts a completed turn shortens in their shorter form.
pub(super) fn shortened(history: &History<'_>) -> Choice {
    let keep = history
        .pieces
        .iter()
        .map(|p| vec![!p.as_written; p.lines.len()])
        .collect();
    Choice { keep }
}

/// Observation masking (SWE-agent's last-N history processor): every message and call whole,
/// the newest `newest` tool results whole, older ones left out.
pub(super) fn mask_older_outputs(history: &History<'_>, newest: usize) -> Choice {
    let outputs = history
        .pieces
        .iter()
        .filter(|p| matches!(p.part, Part::Output(_)))
        .count();
    let first_kept = outputs.saturating_sub(newest);
    let mut seen = 0;
    let keep = history
        .pieces
        .iter()
        .map(|p| {
            let whole = match p.part {
                Part::Output(_) => {
                    seen += 1;
                    seen > first_kept
                }
                _ => true,
            };
            vec![whole; p.lines.len()]
        })
        .collect();
    Choice { keep }
}

/// Steps whose words and calls set the focus: names they use weigh double anywhere.
const FOCUS_STEPS: u32 = 2;
/// How fast a name's weight falls with the steps since the history last used it.
const NAME_DECAY: f64 = 0.85;
/// The part of a name's weight that does not decay: an old name is still a name.
const NAME_FLOOR: f64 = 0.25;
/// The model's own words and calls before the session says otherwise: what it refers
/// back to most.
const OWN_WORDS_WEIGHT: f64 = 3.0;
/// A result on a file the agent modified: the next edit quotes its lines.
const IN_PLAY_WEIGHT: f64 = 2.0;
/// A completed turn's part as written, beside the shorter form it goes in: bought back with
/// room the rest leaves.
const AS_WRITTEN_WEIGHT: f64 = 0.5;

/// The default valuation: lines by the weighed names they add, per token, within `room` tokens;
/// `covered` are the names the rest of the context (protected pieces, state) already carries.
/// A message none of whose lines is chosen is left out whole, calls and results together; the
/// first line chosen from one pays for its framing and the placeholders of its other pieces.
///
/// With a `price`, a line goes only if it adds at least that much value per token, the shorter
/// forms stand, and the room left is not spent: the smallest sufficient context. Without one,
/// the room left goes to the newest lines, as masking would spend it.
pub(super) fn by_evidence(
    history: &History<'_>,
    mut covered: TermSet,
    room: f64,
    price: Option<f64>,
) -> Choice {
    let mut choice = Choice::none(history);
    let mut messages = Messages::of(history);
    let weights = Weights::of(history);
    for p in history.pieces.iter().filter(|p| p.protected) {
        covered.extend(p.lines.iter().flat_map(|l| l.terms.iter().map(|&(t, _)| t)));
    }
    let score = |pi: usize, li: usize, covered: &TermSet, messages: &Messages, keep: &[bool]| {
        let p = &history.pieces[pi];
        weights.value(p, li, covered) / cost(p, li, messages, keep)
    };
    let mut heap: BinaryHeap<Candidate> = BinaryHeap::new();
    // Under a price the shorter forms stand: what they replace (a superseded result, a stale
    // value, a bulky payload its memory holds the names of) does not come back for its names.
    let shorter_forms_stand = price.is_some();
    let candidate = |p: &Piece| !(p.protected || p.as_written && shorter_forms_stand);
    for (pi, p) in history.pieces.iter().enumerate() {
        for li in (0..p.lines.len()).filter(|_| candidate(p)) {
            let score = score(pi, li, &covered, &messages, &choice.keep[pi]);
            if score > 0.0 {
                heap.push(Candidate { score, pi, li });
            }
        }
    }
    let mut room = room;
    while let Some(top) = heap.pop() {
        let score = score(top.pi, top.li, &covered, &messages, &choice.keep[top.pi]);
        if score <= price.unwrap_or(0.0) {
            continue;
        }
        if heap.peek().is_some_and(|next| score < next.score) {
            heap.push(Candidate { score, ..top });
            continue;
        }
        let piece = &history.pieces[top.pi];
        let line = &piece.lines[top.li];
        let cost = cost(piece, top.li, &messages, &choice.keep[top.pi]);
        if cost > room {
            continue;
        }
        room -= cost;
        messages.open(piece.message);
        choice.keep[top.pi][top.li] = true;
        covered.extend(line.terms.iter().map(|&(t, _)| t));
    }
    if price.is_none() {
        fill_newest_first(history, &mut choice, &mut messages, room);
    }
    choice
}

/// Tokens choosing line `li` of `p` adds: the line, its message's framing when it opens the
/// message, and the gap marker it makes or saves between the piece's chosen lines.
fn cost(p: &Piece, li: usize, messages: &Messages, keep: &[bool]) -> f64 {
    let gap_before = li > 0 && !keep[li - 1];
    let gap_after = li + 1 < keep.len() && !keep[li + 1];
    let had_lines = keep.iter().any(|&k| k);
    let gaps = i32::from(gap_before) + i32::from(gap_after) - i32::from(had_lines);
    p.lines[li].tokens + messages.opening(p.message) + f64::from(gaps) * GAP_TOKENS
}

/// What a gap marker ([`super::gaps::GAP_MARKER`]) costs.
const GAP_TOKENS: f64 = 2.0;

/// Which messages of the history are sent (have a line chosen), and what opening one costs.
pub(super) struct Messages {
    open: Vec<bool>,
    cost: Vec<f64>,
}

impl Messages {
    pub(super) fn of(history: &History<'_>) -> Self {
        let mut open = vec![false; history.rendered.len()];
        let mut cost: Vec<f64> = history.rendered.iter().map(|r| r.frame as f64).collect();
        for p in history.pieces.iter().filter(|p| !p.as_written) {
            open[p.message] |= p.protected;
            cost[p.message] += super::PLACEHOLDER_TOKENS;
        }
        Self { open, cost }
    }

    /// What choosing a first line of message `i` costs beyond the line.
    fn opening(&self, i: usize) -> f64 {
        if self.open[i] {
            0.0
        } else {
            self.cost[i]
        }
    }

    fn open(&mut self, i: usize) {
        self.open[i] = true;
    }
}

/// A line waiting to be chosen, by its value per token when last evaluated.
struct Candidate {
    score: f64,
    pi: usize,
    li: usize,
}

impl PartialEq for Candidate {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Candidate {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then(self.pi.cmp(&o.pi))
            .then(o.li.cmp(&self.li))
    }
}

/// How often, and how recently, the history used a name.
struct Use {
    /// Steps since the newest piece that used it.
    age: u32,
    /// Pieces that used it.
    pieces: u32,
    last_piece: usize,
}

impl Use {
    fn seen(&mut self, piece: usize, age: u32) {
        self.age = self.age.min(age);
        if self.last_piece != piece {
            self.pieces += 1;
            self.last_piece = piece;
        }
    }
}

/// Pieces a name must appear in to weigh half of what a name used everywhere weighs: a name
/// the history used once (one entry of a listing, a value of a dump) is rarely the one the
/// next action names.
const REPEAT_HALF: f64 = 8.0;

/// What a name is worth to the next action: by how recently the history used it (steps since
/// it last did, decaying to a floor), by how many of its pieces used it, double when the newest
/// steps' words and calls use it; and what a line's source is worth in this session.
struct Weights {
    of: TermMap<f64>,
    /// What each source of a line is worth, learned from this session ([`Sources`]).
    sources: [f64; SOURCES],
}

impl Weights {
    fn of(history: &History<'_>) -> Self {
        let mut used: TermMap<Use> = TermMap::default();
        let mut focus = TermSet::default();
        for (pi, p) in history.pieces.iter().enumerate() {
            let own = matches!(p.part, Part::Words | Part::Arguments(_));
            for &(t, _) in p.lines.iter().flat_map(|l| l.terms.iter()) {
                used.entry(t)
                    .or_insert(Use {
                        age: p.age,
                        pieces: 0,
                        last_piece: usize::MAX,
                    })
                    .seen(pi, p.age);
                if own && p.age < FOCUS_STEPS {
                    focus.insert(t);
                }
            }
        }
        let of = used
            .into_iter()
            .map(|(t, u)| {
                let recency =
                    NAME_FLOOR + (1.0 - NAME_FLOOR) * NAME_DECAY.powi(u.age.min(400) as i32);
                let focus = if focus.contains(&t) { 2.0 } else { 1.0 };
                let pieces = f64::from(u.pieces);
                let repeated = pieces / (pieces + REPEAT_HALF);
                (t, recency * focus * repeated)
            })
            .collect();
        Self {
            of,
            sources: Sources::learned(history),
        }
    }

    /// The value of line `li` of `p`, given the names already covered.
    fn value(&self, p: &Piece, li: usize, covered: &TermSet) -> f64 {
        let value: f64 = p.lines[li]
            .terms
            .iter()
            .filter(|(t, _)| !covered.contains(t))
            .map(|&(t, shape)| shape * self.weight(t))
            .sum();
        value * piece_factor(p, &self.sources)
    }

    fn weight(&self, t: Term) -> f64 {
        self.of.get(&t).copied().unwrap_or(NAME_FLOOR)
    }
}

/// A line's source as this session values it, a result on a file in play more, a part as
/// written less than the shorter form it goes in; of two copies the newer one wins.
fn piece_factor(p: &Piece, sources: &[f64; SOURCES]) -> f64 {
    let own = sources[source(p)] * if p.in_play { IN_PLAY_WEIGHT } else { 1.0 };
    let written = if p.as_written { AS_WRITTEN_WEIGHT } else { 1.0 };
    own * written * (1.0 + 0.5 * 0.8f64.powi(p.age.min(400) as i32))
}

/// The sources of a line: what was said, the model's words, its calls' arguments, results.
const SOURCES: usize = 4;

fn source(p: &Piece) -> usize {
    match p.part {
        Part::Said => 0,
        Part::Words => 1,
        Part::Arguments(_) => 2,
        Part::Output(_) => 3,
    }
}

/// What each source is worth before the session says otherwise: the model's own words and calls
/// are what it refers back to most.
const PRIOR: [f64; SOURCES] = [1.0, OWN_WORDS_WEIGHT, OWN_WORDS_WEIGHT, 1.0];

/// Tokens of a source the prior counts as, against what the session shows of it.
const PRIOR_TOKENS: f64 = 300.0;

/// How often this session's own steps reused names, by where they last saw them: a harness
/// whose agent quotes its own plan weighs its words, one that acts on what its tools return
/// weighs the results.
struct Sources;

impl Sources {
    /// Each source's worth: the names the model's words and calls took from it per token of
    /// it, against the session's rate over every source, smoothed toward [`PRIOR`].
    fn learned(history: &History<'_>) -> [f64; SOURCES] {
        let mut last_seen: TermMap<usize> = TermMap::default();
        let mut reused = [0.0; SOURCES];
        let mut tokens = [0.0; SOURCES];
        for p in history.pieces.iter().filter(|p| !p.as_written) {
            let from = source(p);
            let refers = matches!(p.part, Part::Words | Part::Arguments(_));
            tokens[from] += p.lines.iter().map(|l| l.tokens).sum::<f64>();
            if refers {
                for &(t, shape) in p.lines.iter().flat_map(|l| l.terms.iter()) {
                    if let Some(&was) = last_seen.get(&t) {
                        reused[was] += shape;
                    }
                }
            }
            for &(t, _) in p.lines.iter().flat_map(|l| l.terms.iter()) {
                last_seen.insert(t, from);
            }
        }
        let rate = reused.iter().sum::<f64>() / tokens.iter().sum::<f64>().max(1.0);
        if rate <= 0.0 {
            return PRIOR;
        }
        let mut worth = [0.0; SOURCES];
        for c in 0..SOURCES {
            let prior = PRIOR[c] * rate;
            worth[c] = (reused[c] + PRIOR_TOKENS * prior) / (tokens[c] + PRIOR_TOKENS) / rate;
        }
        worth
    }
}

/// Room left once no line adds a name goes to the newest lines not yet chosen, as masking
/// would spend it: what the names miss (a quoted phrase, a short number) is likeliest there.
fn fill_newest_first(
    history: &History<'_>,
    choice: &mut Choice,
    messages: &mut Messages,
    mut room: f64,
) {
    for (pi, p) in history.pieces.iter().enumerate().rev() {
        for li in 0..p.lines.len() {
            if room < 1.0 {
                return;
            }
            let cost = cost(p, li, messages, &choice.keep[pi]);
            if !choice.keep[pi][li] && cost <= room {
                room -= cost;
                messages.open(p.message);
                choice.keep[pi][li] = true;
            }
        }
    }
}
