//! Selection under the budget: P0 and protected units always; then the current turn's other
//! steps newest first, the verbatim turns, facts and memories; then digests of older turns as far
//! as the budget goes. Whatever does not fit is recorded as omitted, with its tokens.

use std::collections::BTreeSet;

use super::candidates::{Candidates, Cx};
use super::{Omission, OmissionReason, Tier, Unit};
use crate::tokens::REPLY_PRIMING_TOKENS;

/// What selection took, and the tokens it spent (tool schemas and reply priming included).
pub(super) struct Selected {
    pub units: Vec<Unit>,
    pub tokens: u64,
}

/// The units kept within the budget.
struct Budgeted {
    budget: u64,
    used: u64,
    selected: Vec<Unit>,
}

impl Budgeted {
    /// Takes `unit` if it is P0 or protected or fits; else records it as left out. Returns
    /// whether it was taken.
    fn consider(&mut self, unit: Unit, omitted: &mut Vec<Omission>) -> bool {
        if unit.tier == Tier::P0 || unit.protected || self.used + unit.tokens <= self.budget {
            self.used += unit.tokens;
            self.selected.push(unit);
            true
        } else {
            omitted.push(unit.left_out(OmissionReason::Budget));
            false
        }
    }
}

/// Selects from `candidates` within `budget`.
pub(super) fn select(
    cx: &Cx<'_>,
    candidates: Candidates<'_>,
    budget: u64,
    omitted: &mut Vec<Omission>,
) -> Selected {
    let Candidates {
        fixed,
        current_steps,
        turns,
        facts,
        memories,
        history,
        restates,
    } = candidates;
    let mut kept = Budgeted {
        budget,
        used: cx.snapshot.tools_tokens + REPLY_PRIMING_TOKENS,
        selected: Vec::new(),
    };
    // The long-turn policy never says a thing twice: while the whole history goes verbatim (a
    // short session), the task state, facts and this session's memories only restate it. A
    // memory of another session (the user's, the project's) is no restatement: it is what a new
    // session knows of the others.
    let is_restatement = |u: &Unit| {
        restates
            && match u.kind {
                "task_state" | "decisions_and_facts" => true,
                "memory" => super::memories::of_this_session(cx.snapshot, u),
                _ => false,
            }
    };
    let (fixed, fixed_restated): (Vec<Unit>, Vec<Unit>) =
        fixed.into_iter().partition(|u| !is_restatement(u));
    let (memories, memories_restated): (Vec<Unit>, Vec<Unit>) =
        memories.into_iter().partition(|u| !is_restatement(u));
    let (facts, facts_restated): (Vec<Unit>, Vec<Unit>) =
        facts.into_iter().partition(|u| !is_restatement(u));
    omitted.extend(
        fixed_restated
            .into_iter()
            .chain(memories_restated)
            .chain(facts_restated)
            .map(Unit::restated),
    );
    let (p0_steps, other_steps): (Vec<Unit>, Vec<Unit>) =
        current_steps.into_iter().partition(|u| u.tier == Tier::P0);
    for u in fixed.into_iter().chain(p0_steps) {
        kept.consider(u, omitted);
    }
    let rest = other_steps
        .into_iter()
        .rev()
        .chain(turns)
        .chain(facts)
        .chain(memories);
    contiguous(&mut kept, rest, omitted);

    // Digests of older turns, newest first, until the budget is spent; the rest are counted as
    // omitted without being rendered (their size estimated from the stored token counts).
    let mut digests_closed = !cx.policy.digests;
    for age in history.verbatim_count..history.completed.len() {
        if !digests_closed {
            digests_closed = !kept.consider(history.render_turn(cx, age), omitted);
            continue;
        }
        let turn = &history.completed[age];
        omitted.push(Omission {
            kind: "turn_digest".into(),
            tier: Tier::P3,
            reason: OmissionReason::Budget,
            source_event_ids: turn.iter().map(|m| m.event_id.clone()).collect(),
            tokens: turn.iter().map(|m| m.tokens).sum(),
        });
    }

    // A short session under the long-turn policy: when every unresolved error's result went
    // verbatim, the recovery block only restates them.
    if restates {
        kept.used -= drop_restated_recovery(&mut kept.selected, omitted);
    }
    Selected {
        units: kept.selected,
        tokens: kept.used,
    }
}

/// Considers `units` in order. Once a turn of some tier does not fit, older turns of that tier
/// are not considered, so the kept turns stay contiguous with the present.
fn contiguous(kept: &mut Budgeted, units: impl Iterator<Item = Unit>, omitted: &mut Vec<Omission>) {
    let mut closed_tiers: Vec<Tier> = Vec::new();
    for u in units {
        let is_turn = u.kind != "decisions_and_facts" && u.kind != "memory";
        if is_turn && closed_tiers.contains(&u.tier) {
            omitted.push(u.left_out(OmissionReason::Budget));
            continue;
        }
        let tier = u.tier;
        if !kept.consider(u, omitted) && is_turn {
            closed_tiers.push(tier);
        }
    }
}

/// Removes the recovery block from `selected` when every error it names is in a selected step
/// (an orphan failure never is: its call is not on the log). Returns the tokens it freed.
fn drop_restated_recovery(selected: &mut Vec<Unit>, omitted: &mut Vec<Omission>) -> u64 {
    let Some(i) = selected.iter().position(|u| u.kind == "recovery_state") else {
        return 0;
    };
    let shown: BTreeSet<&str> = selected
        .iter()
        .filter(|u| {
            matches!(
                u.kind,
                "assistant_step" | "aged_step" | "turn" | "aged_turn"
            )
        })
        .flat_map(|u| u.sources.iter().map(String::as_str))
        .collect();
    let restates = selected[i]
        .sources
        .iter()
        .all(|s| shown.contains(s.as_str()));
    if !restates {
        return 0;
    }
    let unit = selected.remove(i);
    let freed = unit.tokens;
    omitted.push(unit.restated());
    freed
}
