//! One selection (`strata.assembly/12`): every piece of the history — what was said, the
//! model's words, each call's arguments, each result — is a candidate in a few renderings
//! (whole; the lines that carry its names; one line that says what was left out), each line
//! with a token cost and a value for the next action. Protected content has no price: the system
//! prompt and tools, the request, pending calls, unresolved errors with their text, the newest
//! step, and the task state the platform published that no message says. The rest is chosen by
//! value per token, deterministically ([`choose`]).
//!
//! Without a target the context is the smallest sufficient: a line goes when it adds at least
//! [`DEFAULT_PRICE`] of value per token, up to [`DEFAULT_TARGET_TOKENS`]. A request's target is
//! room to spend instead: when the whole history fits it goes as written, with only the
//! published state no message says; else the lines are chosen up to the target. Either way a
//! cut that costs as much as the history as written sends it as written: never larger than the
//! transcript for nothing.
//!
//! The baselines are valuations of the same mechanism ([`Valuation`]): transcript replay values
//! every line, observation masking every message and the newest N results, so the default can be
//! measured against them at equal size, not argued.

mod arguments;
mod choose;
mod emit;
mod fixed;
mod gaps;
mod pieces;
mod spans;
mod terms;

use super::candidates::{self, Cx};
use super::gates;
use super::selection::Selected;
use super::{
    budget, record, rehydration, Assembled, AssemblyPolicy, AssemblyRequest, Omission, Snapshot,
    TimelineMessage, Unit,
};
use crate::tokens::{TokenCounter, REPLY_PRIMING_TOKENS};

/// What a line of history is worth: the default, or a baseline expressed in the same mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Valuation {
    /// Names added for the next action, per token, up to the target ([`choose::by_evidence`]).
    Evidence,
    /// Transcript replay: everything as written.
    Transcript,
    /// Observation masking, SWE-agent's last-N rule: every message and call as written, tool
    /// results older than the newest `newest` as one line.
    MaskOlderOutputs { newest: usize },
}

/// The most the default valuation sends of the history when the request sets no
/// `target_tokens` ([`DEFAULT_PRICE`] decides how much less).
pub const DEFAULT_TARGET_TOKENS: u64 = 24_000;

/// Without a target, the value per token (weighed names a line adds, see [`choose`]) a line
/// must add to go: chosen from the price curve on the development corpus
/// (`docs/BENCHMARKS.md`). One price over every call point spends tokens where they buy the
/// most evidence, where a fixed size per call sends a short session's chaff and starves a long
/// one.
pub const DEFAULT_PRICE: f64 = 0.0007;

/// Tokens a placeholder line costs (a piece none of whose lines is chosen).
pub(super) const PLACEHOLDER_TOKENS: f64 = 8.0;

/// Assembles `snapshot` under `valuation`: the phases of [`super::assemble_with_policy`] with
/// one selection in place of the candidates and tiers.
pub(super) fn assemble(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
    policy: &AssemblyPolicy,
    valuation: Valuation,
    tokens: &dyn TokenCounter,
) -> Assembled {
    // The cut messages of a second aim are mostly those of the first: counted once.
    let tokens = &Memo::new(tokens);
    let (budget, _) = budget::budget_and_policy(snapshot, request, policy);
    let (gate, visible, notes, mut omitted) = gates::admitted(snapshot, request, tokens);
    let mut rehydrations = rehydration::rehydration_plan_with_policy(snapshot, request, policy);
    let cx = Cx {
        snapshot,
        request,
        policy,
        gate,
        notes: &notes,
        aging: None,
        tokens,
    };
    // A target the request sets is room to spend: what the default sends shorter (a completed
    // turn's payloads, the range a compaction summarises) is bought back with what the rest
    // leaves. Without one the shorter forms stand: a superseded result, a stale value, what a
    // compaction summarises do not come back however many names they carry.
    let spend = valuation == Valuation::Evidence && request.target_tokens.is_some();
    let (mut compaction, summary_when_cut) =
        compaction_under(&cx, &visible, valuation, spend, &mut omitted);
    let asked = match valuation {
        Valuation::Evidence => rehydration::asked_inline(&visible, &mut rehydrations),
        _ => Default::default(),
    };
    let raw = rehydration::raw_units(&cx, &visible, &mut rehydrations);
    let mut in_place = rehydration::in_place(request, &mut rehydrations);
    if valuation == Valuation::Evidence {
        in_place.extend(fixed::reports_in_their_steps(
            &cx,
            &compaction.live,
            &in_place,
        ));
    }
    let fixed = fixed::units(
        &cx,
        &visible,
        &mut compaction,
        &in_place,
        valuation,
        &mut omitted,
    );
    let mut units = fixed.always;
    units.extend(raw);
    let mut when_cut = fixed.when_cut;
    when_cut.extend(summary_when_cut);
    let history = pieces::split(&cx, &compaction.live, &in_place, &asked, valuation);
    let emitted = |choice: choose::Choice, why: &str| emit::units(&cx, &history, &choice, why);
    let (history_units, history_omitted) = match valuation {
        Valuation::Transcript => emitted(choose::everything(&history), "transcript replay"),
        Valuation::MaskOlderOutputs { newest } => emitted(
            choose::mask_older_outputs(&history, newest),
            "observation masking",
        ),
        Valuation::Evidence => {
            let target = request
                .target_tokens
                .unwrap_or(DEFAULT_TARGET_TOKENS)
                .min(budget);
            let aim = Aim {
                target,
                budget,
                spend: spend && (history.has_shortened() || compaction.applied),
                price: request.target_tokens.is_none().then_some(DEFAULT_PRICE),
            };
            by_evidence(&cx, &history, &mut units, when_cut, &mut omitted, aim)
        }
    };
    omitted.extend(history_omitted);
    units.extend(history_units);
    let selected = Selected {
        tokens: overhead(snapshot, &units),
        units,
    };
    rehydration::refuse_unselected(&visible, &selected.units, &mut rehydrations);
    record::finish(&cx, budget, selected, omitted, rehydrations)
}

/// What a compaction does under `valuation`: its summary stands in for the messages before its
/// first kept event, as the compactor decided (they stay on the log, and rehydration brings a
/// result back). When a set target is room to `spend`, the range is a candidate instead and the
/// summary, which restates it, is returned to go only beside a cut. The baselines see every
/// message.
fn compaction_under<'v>(
    cx: &Cx<'_>,
    visible: &'v [TimelineMessage],
    valuation: Valuation,
    spend: bool,
    omitted: &mut Vec<Omission>,
) -> (candidates::Compacted<'v>, Option<Unit>) {
    match valuation {
        Valuation::Evidence if spend => {
            let mut summarised = candidates::compacted(cx, visible, &mut Vec::new());
            summarised.live = visible.iter().collect();
            summarised.calls.clear();
            let summary = summarised.summary.take();
            (summarised, summary)
        }
        Valuation::Evidence => (candidates::compacted(cx, visible, omitted), None),
        _ => {
            let every = candidates::Compacted {
                applied: false,
                live: visible.iter().collect(),
                calls: Default::default(),
                summary: None,
            };
            (every, None)
        }
    }
}

/// What the default valuation aims at.
#[derive(Clone, Copy)]
struct Aim {
    /// The request's target, or [`DEFAULT_TARGET_TOKENS`] as a cap.
    target: u64,
    budget: u64,
    /// Some of the history goes shorter than written (a completed turn's payloads, a compacted
    /// range): room the target leaves buys it back.
    spend: bool,
    /// Without a target: what a line must add per token to go ([`DEFAULT_PRICE`]).
    price: Option<f64>,
}

/// The history under the default valuation: as rendered when it fits a set target (`when_cut`
/// restated, not sent), else the lines chosen by evidence (up to the target, or while worth the
/// price) beside `units` and `when_cut`; a cut that costs as much as the history as written
/// sends it as written.
fn by_evidence(
    cx: &Cx<'_>,
    history: &pieces::History<'_>,
    units: &mut Vec<Unit>,
    when_cut: Vec<Unit>,
    omitted: &mut Vec<Omission>,
    aim: Aim,
) -> (Vec<Unit>, Vec<Omission>) {
    let whole = overhead(cx.snapshot, units) + history.whole_tokens();
    if whole <= aim.target && !aim.spend && aim.price.is_none() {
        omitted.extend(when_cut.into_iter().map(Unit::restated));
        let choice = choose::shortened(history);
        return emit::units(cx, history, &choice, "the whole history fits the target");
    }
    let fixed_count = units.len();
    units.extend(when_cut);
    let why = "chosen by the evidence it adds per token";
    let chosen = aim_at(cx, history, units, aim, why);
    let sent = overhead(cx.snapshot, units) + chosen.0.iter().map(|u| u.tokens).sum::<u64>();
    let written = overhead(cx.snapshot, &units[..fixed_count]) + history.written_tokens();
    // A cut that lands at the whole history's size (the target just under it, the aim's
    // tolerance over it) is no saving: the history goes as it would whole.
    let (choice, why) = if sent >= written && written <= aim.budget {
        (
            choose::everything(history),
            "the history as written costs no more than its cut",
        )
    } else if sent >= whole && whole <= aim.budget && !aim.spend {
        (
            choose::shortened(history),
            "the whole history costs no more than its cut",
        )
    } else {
        return chosen;
    };
    omitted.extend(units.drain(fixed_count..).map(Unit::restated));
    emit::units(cx, history, &choice, why)
}

/// Lines chosen by evidence within `target` beside `fixed`, emitted. The costs chosen by are
/// estimates (a line's share of its message's tokens, the gap markers), so a context that lands
/// more than [`AIM_TOLERANCE`] off the target is chosen once more with the difference added to
/// the room.
fn aim_at(
    cx: &Cx<'_>,
    history: &pieces::History<'_>,
    fixed: &[Unit],
    aim: Aim,
    why: &str,
) -> (Vec<Unit>, Vec<Omission>) {
    let (target, price) = (aim.target, aim.price);
    let base = overhead(cx.snapshot, fixed);
    let covered = names_of(fixed);
    let first_room = room(history, base, target);
    let choice = choose::by_evidence(history, covered.clone(), first_room, price);
    let first = emit::units(cx, history, &choice, why);
    let sent = (base + first.0.iter().map(|u| u.tokens).sum::<u64>()) as f64;
    let off = target as f64 - sent;
    // Under a price, a context short of the cap is the point, not a miss.
    let priced_short = price.is_some() && off > 0.0;
    if off.abs() <= target as f64 * AIM_TOLERANCE || first_room <= 0.0 || priced_short {
        return first;
    }
    let again = choose::by_evidence(history, covered, (first_room + off).max(0.0), price);
    emit::units(cx, history, &again, why)
}

/// How far off its target a context may land before its lines are chosen again.
const AIM_TOLERANCE: f64 = 0.03;

/// A token counter that remembers the counts of one assembly's longer texts.
struct Memo<'t> {
    inner: &'t dyn TokenCounter,
    counts: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl<'t> Memo<'t> {
    fn new(inner: &'t dyn TokenCounter) -> Self {
        Self {
            inner,
            counts: Default::default(),
        }
    }
}

/// Texts shorter than this are counted again: remembering them costs about as much.
const MEMO_MIN_CHARS: usize = 256;

impl TokenCounter for Memo<'_> {
    fn count(&self, text: &str) -> u64 {
        if text.len() < MEMO_MIN_CHARS {
            return self.inner.count(text);
        }
        let known = self.counts.lock().ok().and_then(|c| c.get(text).copied());
        if let Some(n) = known {
            return n;
        }
        let n = self.inner.count(text);
        if let Ok(mut counts) = self.counts.lock() {
            counts.insert(text.to_owned(), n);
        }
        n
    }

    fn count_line(&self, line: &str) -> u64 {
        self.inner.count_line(line)
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

/// Tokens of `units` with the tool schemas and the reply's priming.
fn overhead(snapshot: &Snapshot, units: &[Unit]) -> u64 {
    snapshot.tools_tokens + REPLY_PRIMING_TOKENS + units.iter().map(|u| u.tokens).sum::<u64>()
}

/// The tokens the target leaves for the history's unprotected lines once `fixed` tokens and the
/// protected messages are counted (the rest pay for their framing when chosen).
fn room(history: &pieces::History<'_>, fixed: u64, target: u64) -> f64 {
    let protected: u64 = history
        .protected_messages()
        .map(|i| history.rendered[i].tokens)
        .sum();
    (target as f64 - (fixed + protected) as f64).max(0.0)
}

/// The names `units` carry: what the history's lines need not add again.
fn names_of(units: &[Unit]) -> terms::TermSet {
    let mut found = Vec::new();
    for m in units.iter().flat_map(|u| &u.messages) {
        terms::terms(&fixed::message_text(m), &mut found);
    }
    found.into_iter().map(|(t, _)| t).collect()
}
