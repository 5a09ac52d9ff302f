//! Candidates: every unit the context could hold, rendered, each with its tier and the reason it
//! would be sent — the system prompt, a compaction summary, the current request and turn, pending
//! calls, the task and recovery state, subagent reports, completed turns, facts and memories.

use std::collections::{BTreeMap, BTreeSet};

use super::forms::{data_message, Rendering};
use super::gates::{CallNotes, Gate};
use super::render::render_message;
use super::state::{render_facts, render_recovery, render_state, subagent_unit};
use super::{
    aging, is_step, memories, Aging, AssemblyPolicy, AssemblyRequest, BundleMessage, Omission,
    OmissionReason, Snapshot, Tier, TimelineMessage, ToolPair, Unit,
};
use crate::projection::{truncate_chars, ToolStatus, PLATFORM_ROLE};
use crate::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS};

/// What every phase of one assembly reads: the inputs, the privacy gate, what the memories say
/// about each call and, under the long-turn policy, how its steps age.
pub(super) struct Cx<'a> {
    pub snapshot: &'a Snapshot,
    pub request: &'a AssemblyRequest,
    pub policy: &'a AssemblyPolicy,
    pub gate: Gate,
    pub notes: &'a CallNotes<'a>,
    pub aging: Option<&'a Aging<'a>>,
    pub tokens: &'a dyn TokenCounter,
}

/// The candidates of one assembly, grouped in the order selection considers them.
pub(super) struct Candidates<'v> {
    /// Considered first, in this order: the system prompt, the compaction summary, the request
    /// not yet on the log, pending calls, the task and recovery state, subagent reports (and,
    /// added by rehydration, raw outputs asked for).
    pub fixed: Vec<Unit>,
    /// The steps of the turn in progress, oldest first.
    pub current_steps: Vec<Unit>,
    /// The completed turns of the verbatim window, newest first.
    pub turns: Vec<Unit>,
    pub facts: Option<Unit>,
    pub memories: Vec<Unit>,
    /// The session's turns, for digests rendered only as far as the budget goes.
    pub history: Turns<'v>,
    /// Whether the whole history goes verbatim (a short session under the long-turn policy),
    /// so that state, facts and memories only restate it.
    pub restates: bool,
}

/// Collects the candidates of `visible` (the messages this participant may see), recording what
/// compaction and subagent dedupe leave out in `omitted`.
pub(super) fn collect<'v>(
    cx: &Cx<'_>,
    visible: &'v [TimelineMessage],
    omitted: &mut Vec<Omission>,
) -> Candidates<'v> {
    let mut fixed: Vec<Unit> = system_prompt(cx).into_iter().collect();
    let compaction = compacted(cx, visible, omitted);
    fixed.extend(compaction.summary);
    // Under aging a hypothesis memory restates its message while the history holds it.
    let hypotheses_restated: BTreeSet<&str> = match cx.aging.is_some() {
        true => compaction
            .live
            .iter()
            .map(|m| m.event_id.as_str())
            .collect(),
        false => BTreeSet::new(),
    };
    let history = Turns::split(cx, compaction.live);
    if let Some(a) = cx.aging {
        let (covered, aged) = history.novel_evidence_inputs(cx);
        a.choose_novel_evidence(covered, aged);
    }
    let current_steps = history.current_steps(cx);
    fixed.extend(current_request(cx));
    fixed.extend(pending_calls(cx, visible));
    fixed.extend(state_units(cx));
    for (i, child) in cx.snapshot.state.subagents.iter().enumerate() {
        let (unit, omission) = subagent_unit(child, i as u32, cx.tokens, None);
        if history.reports_verbatim(cx, visible, child.report.as_deref()) {
            omitted.push(unit.restated());
        } else {
            fixed.push(unit);
        }
        omitted.extend(omission);
    }
    let facts = facts_unit(cx);
    let turns = history.verbatim_turns(cx);
    // A memory of a call the turns show (verbatim, or in a digest line that carries the
    // memory) is redundant; one of a compacted call is the summary's.
    let (memories, memory_omissions) = memories::select_memories(
        cx.snapshot,
        &history.window_calls(),
        &compaction.calls,
        &hypotheses_restated,
        history.keep.is_some(),
        cx.gate,
        cx.tokens,
    );
    omitted.extend(memory_omissions);
    let steps = visible.iter().filter(|m| is_step(m)).count();
    let restates = !compaction.applied && history.keep.is_some_and(|n| n >= steps);
    Candidates {
        fixed,
        current_steps,
        turns,
        facts,
        memories,
        history,
        restates,
    }
}

/// P0: the system prompt.
pub(super) fn system_prompt(cx: &Cx<'_>) -> Option<Unit> {
    let prompt = cx.snapshot.system_prompt.as_ref()?;
    Some(Unit {
        kind: "system_prompt",
        tier: Tier::P0,
        reason: "system instructions are always sent".into(),
        sources: cx
            .snapshot
            .session_started_event_id
            .iter()
            .cloned()
            .collect(),
        rendering: "verbatim",
        messages: vec![BundleMessage::System {
            text: prompt.clone(),
        }],
        tokens: cx
            .snapshot
            .system_prompt_tokens
            .max(cx.tokens.count(prompt)),
        protected: false,
        order: (0, 0, 0),
    })
}

/// What the latest successful compaction leaves of the history.
pub(super) struct Compacted<'v> {
    pub applied: bool,
    /// The messages after its first kept event (all of them without a compaction).
    pub live: Vec<&'v TimelineMessage>,
    /// The calls it stands in for.
    pub calls: BTreeSet<&'v str>,
    pub summary: Option<Unit>,
}

/// The latest successful compaction stands in for everything before its first kept event (the
/// raw events stay on the log and in the projections, readable and exportable).
pub(super) fn compacted<'v>(
    cx: &Cx<'_>,
    visible: &'v [TimelineMessage],
    omitted: &mut Vec<Omission>,
) -> Compacted<'v> {
    let Some(c) = cx.snapshot.applied_compaction() else {
        return Compacted {
            applied: false,
            live: visible.iter().collect(),
            calls: BTreeSet::new(),
            summary: None,
        };
    };
    let (mut old, mut live): (Vec<&TimelineMessage>, Vec<&TimelineMessage>) =
        visible.iter().partition(|m| m.seq < c.first_kept_seq);
    // A cut inside a turn (a long run of tool use, compacted while in progress) leaves the
    // turn's request in the range: it stays verbatim, the task the kept steps carry on.
    if live.first().is_some_and(|m| m.role != "user") {
        if let Some(i) = old.iter().rposition(|m| m.role == "user") {
            live.insert(0, old.remove(i));
        }
    }
    let calls = old
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.tool_call_id.as_str()))
        .collect();
    let gate = cx.gate;
    let viewer = cx.snapshot.participant_id.as_str();
    let summary = c.render_visible(|note| {
        if gate.withholds(note.privacy_class) {
            Some(format!(
                "{} output, not sent to {}",
                note.privacy_class
                    .map(crate::payload::PrivacyClass::as_str)
                    .unwrap_or("protected"),
                gate.provider.as_str()
            ))
        } else {
            note.owner_participant
                .as_deref()
                .filter(|owner| *owner != viewer)
                .map(|owner| format!("private to participant {owner}"))
        }
    });
    let (message, summary_tokens) = data_message("compaction summary", summary, cx.tokens);
    let summary = Unit {
        kind: "compaction_summary",
        tier: Tier::P1,
        reason: format!(
            "latest successful compaction {} stands in for events {}..{} (check passed)",
            c.compaction_id, c.first_event_id, c.last_event_id
        ),
        sources: vec![c.first_event_id.clone(), c.last_event_id.clone()],
        rendering: "summary",
        tokens: summary_tokens,
        messages: vec![message],
        protected: true,
        order: (1, 0, 4),
    };
    if !old.is_empty() || cx.snapshot.messages_before_window > 0 {
        omitted.push(Omission {
            kind: "compacted_range".into(),
            tier: Tier::P3,
            reason: OmissionReason::Compacted,
            source_event_ids: old.iter().map(|m| m.event_id.clone()).collect(),
            tokens: old.iter().map(|m| m.tokens).sum(),
        });
    }
    Compacted {
        applied: true,
        live,
        calls,
        summary: Some(summary),
    }
}

/// P0: a request passed with the call, not yet on the log.
pub(super) fn current_request(cx: &Cx<'_>) -> Option<Unit> {
    let text = cx.request.request.as_ref()?;
    Some(Unit {
        kind: "current_request",
        tier: Tier::P0,
        reason: "current request (not yet on the log)".into(),
        sources: vec![],
        rendering: "verbatim",
        messages: vec![BundleMessage::User { text: text.clone() }],
        tokens: cx.tokens.count(text) + MESSAGE_OVERHEAD_TOKENS,
        protected: false,
        order: (3, u64::MAX, 0),
    })
}

/// P0: pending tool calls, as a state note (an unanswered call cannot be sent to a provider as
/// a message without its result).
pub(super) fn pending_calls(cx: &Cx<'_>, visible: &[TimelineMessage]) -> Option<Unit> {
    let snapshot = cx.snapshot;
    let mut pending: Vec<&ToolPair> =
        visible
            .iter()
            .flat_map(|m| m.tool_calls.iter())
            .chain(snapshot.loose_tool_calls.iter().filter(|c| {
                c.participant_id.is_empty() || c.participant_id == snapshot.participant_id
            }))
            .filter(|c| c.status.is_open())
            .collect();
    pending.sort_by_key(|c| c.request_seq);
    pending.dedup_by(|a, b| a.tool_call_id == b.tool_call_id);
    if pending.is_empty() {
        return None;
    }
    let mut text = String::from("## Pending tool calls (no result yet)\n");
    for c in &pending {
        text.push_str(&format!(
            "- {} `{}` {} — {}\n",
            c.tool_call_id,
            c.name,
            truncate_chars(&c.args, 200),
            if c.status == ToolStatus::AwaitingApproval {
                "awaiting approval"
            } else {
                "awaiting result"
            }
        ));
    }
    Some(Unit {
        kind: "pending_tool_calls",
        tier: Tier::P0,
        reason: "pending tool calls are protected until resolved".into(),
        sources: pending.iter().map(|c| c.request_event_id.clone()).collect(),
        rendering: "verbatim",
        tokens: cx.tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS,
        messages: vec![BundleMessage::System { text }],
        protected: false,
        order: (1, 0, 3),
    })
}

/// P1: the task state (always kept); P0: unresolved errors and retry-critical state.
pub(super) fn state_units(cx: &Cx<'_>) -> Vec<Unit> {
    let state = &cx.snapshot.state;
    let mut units = Vec::new();
    let (state_text, state_sources) = render_state(state);
    if !state_text.is_empty() {
        units.push(Unit {
            kind: "task_state",
            tier: Tier::P1,
            reason: "goal, task, open questions, files and unresolved errors (always kept)".into(),
            sources: state_sources,
            rendering: "verbatim",
            tokens: cx.tokens.count(&state_text) + MESSAGE_OVERHEAD_TOKENS,
            messages: vec![BundleMessage::System { text: state_text }],
            protected: true,
            order: (1, 0, 0),
        });
    }
    units.extend(recovery_unit(cx));
    units
}

/// P0: the unresolved errors and the retry-critical state, protected until resolved.
pub(super) fn recovery_unit(cx: &Cx<'_>) -> Option<Unit> {
    let (text, sources) = render_recovery(&cx.snapshot.state, cx.gate);
    (!text.is_empty()).then(|| Unit {
        kind: "recovery_state",
        tier: Tier::P0,
        reason: "unresolved errors and retry-critical state are protected until resolved".into(),
        tokens: cx.tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS,
        sources,
        rendering: "verbatim",
        messages: vec![BundleMessage::System { text }],
        protected: false,
        order: (1, 0, 1),
    })
}

/// P2: past decisions and key facts.
fn facts_unit(cx: &Cx<'_>) -> Option<Unit> {
    let (text, sources) = render_facts(&cx.snapshot.state);
    (!text.is_empty()).then(|| Unit {
        kind: "decisions_and_facts",
        tier: Tier::P2,
        reason: "past decisions and key facts".into(),
        tokens: cx.tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS,
        sources,
        rendering: "verbatim",
        messages: vec![BundleMessage::System { text }],
        protected: false,
        order: (1, 0, 2),
    })
}

/// Under aging, a digested turn's requests and closing answer go whole up to this many
/// characters (a longer one is digested like the rest): what the user and the model said is
/// what later turns name.
const SAID_IN_DIGEST_MAX_CHARS: usize = 5_000;

/// A result of the working set up to this many bytes goes whole in any turn: a subagent's report
/// it returns is not said again.
const ANSWERED_VERBATIM_MAX_BYTES: u64 = 2048;

/// The live history split into turns (a user message and what followed it), with how far back
/// each step is.
pub(super) struct Turns<'v> {
    /// Completed turns, newest first.
    pub completed: Vec<Vec<&'v TimelineMessage>>,
    current: Vec<&'v TimelineMessage>,
    /// How many steps (assistant messages) came after each one, across turns, by seq.
    step_ages: BTreeMap<u64, usize>,
    /// Under the long-turn policy, how many of the newest steps go verbatim.
    pub keep: Option<usize>,
    /// How many completed turns, newest first, are candidates whole (the rest are digests).
    pub verbatim_count: usize,
    verbatim_turns: usize,
}

impl<'v> Turns<'v> {
    /// Under the long-turn policy a note the platform wrote into the user's turn does not open
    /// one; policy 3 keeps the boundaries it always had there, so that its figures stay
    /// comparable.
    fn split(cx: &Cx<'_>, live: Vec<&'v TimelineMessage>) -> Self {
        let policy = cx.policy;
        let platform_opens_turns = policy.aged_steps_after.is_none();
        let mut turns: Vec<Vec<&TimelineMessage>> = Vec::new();
        for m in live {
            let opens = m.role == "user" || (platform_opens_turns && m.role == PLATFORM_ROLE);
            if opens || turns.is_empty() {
                turns.push(Vec::new());
            }
            turns.last_mut().expect("pushed").push(m);
        }
        let current = turns.pop().unwrap_or_default();
        let newest_first = || turns.iter().flatten().chain(current.iter()).rev();
        let step_ages: BTreeMap<u64, usize> = newest_first()
            .filter(|m| is_step(m))
            .enumerate()
            .map(|(age, m)| (m.seq, age))
            .collect();
        let keep = policy
            .aged_steps_after
            .map(|min| aging::verbatim_steps(newest_first(), min, policy.verbatim_step_tokens));
        turns.reverse();
        let verbatim_count = cx.request.verbatim_turns.min(turns.len());
        // Under aging no step of the working set is digested, however short its turns.
        let verbatim_count = match keep {
            Some(keep) => verbatim_count.max(
                turns
                    .iter()
                    .take_while(|t| {
                        t.iter()
                            .any(|m| is_step(m) && step_ages.get(&m.seq).is_some_and(|&a| a < keep))
                    })
                    .count(),
            ),
            None => verbatim_count,
        };
        Turns {
            completed: turns,
            current,
            step_ages,
            keep,
            verbatim_count,
            verbatim_turns: cx.request.verbatim_turns,
        }
    }

    fn age(&self, m: &TimelineMessage) -> usize {
        self.step_ages.get(&m.seq).copied().unwrap_or(0)
    }

    /// The current request and the turn in progress, step by step (a step is one message with
    /// its tool pairs, so a call never leaves its result behind).
    fn current_steps(&self, cx: &Cx<'_>) -> Vec<Unit> {
        self.current
            .iter()
            .enumerate()
            .map(|(i, m)| self.current_step(cx, m, i == 0 && m.role == "user"))
            .collect()
    }

    fn current_step(&self, cx: &Cx<'_>, m: &TimelineMessage, is_request: bool) -> Unit {
        let has_open = m.tool_calls.iter().any(|c| c.status.is_open());
        let age = self.age(m);
        let aged = !has_open && self.keep.is_some_and(|n| age >= n);
        let mode = if aged {
            Rendering::Aged
        } else {
            Rendering::Current
        };
        let (messages, sources, tokens) =
            render_message(m, mode, cx.notes, cx.gate, cx.aging, cx.tokens);
        let (tier, reason) = if is_request && cx.request.request.is_none() {
            (Tier::P0, "current request".to_owned())
        } else if has_open {
            (
                Tier::P0,
                "carries a pending tool call of the current turn".to_owned(),
            )
        } else if aged {
            (
                Tier::P1,
                format!(
                    "step {} steps back in the current turn: its calls as made, its results by \
                     their evidence lines (the newest {} steps verbatim)",
                    age,
                    self.keep.unwrap_or_default()
                ),
            )
        } else {
            (Tier::P1, "step of the current turn".to_owned())
        };
        Unit {
            kind: if m.role == "user" {
                "user_message"
            } else if aged {
                "aged_step"
            } else {
                "assistant_step"
            },
            tier,
            reason,
            sources,
            rendering: if aged { "aged" } else { "verbatim" },
            messages,
            tokens,
            protected: false,
            order: (2, m.seq, 0),
        }
    }

    /// The completed turns of the verbatim window, newest first.
    fn verbatim_turns(&self, cx: &Cx<'_>) -> Vec<Unit> {
        (0..self.verbatim_count)
            .map(|age| self.render_turn(cx, age))
            .collect()
    }

    /// Completed turn `age` (0 = the latest): under the long-turn policy with its older steps
    /// aged; else verbatim in the window (P1), digested to a line per step beyond it (P3).
    pub(super) fn render_turn(&self, cx: &Cx<'_>, age: usize) -> Unit {
        let turn = &self.completed[age];
        if let Some(keep) = self.keep.filter(|_| age < self.verbatim_count) {
            return self.aged_turn(cx, turn, keep);
        }
        let verbatim = age < self.verbatim_turns;
        let mode = match age {
            0 if verbatim => Rendering::Recent,
            _ if verbatim => Rendering::Older,
            _ => Rendering::Digest,
        };
        let mut messages = Vec::new();
        let mut sources = Vec::new();
        let mut tokens = 0;
        let answer = turn
            .iter()
            .rposition(|m| m.role == "assistant" && m.tool_calls.is_empty());
        for (i, m) in turn.iter().enumerate() {
            let said = mode == Rendering::Digest
                && self.keep.is_some()
                && (m.role == "user" || Some(i) == answer)
                && m.text.chars().count() <= SAID_IN_DIGEST_MAX_CHARS;
            let mode = if said { Rendering::Older } else { mode };
            let (msgs, src, mt) = render_message(m, mode, cx.notes, cx.gate, cx.aging, cx.tokens);
            messages.extend(msgs);
            sources.extend(src);
            tokens += mt;
        }
        Unit {
            kind: if verbatim { "turn" } else { "turn_digest" },
            tier: if verbatim { Tier::P1 } else { Tier::P3 },
            reason: if verbatim {
                format!(
                    "recent turn {} of {} kept verbatim",
                    age + 1,
                    self.verbatim_turns
                )
            } else if self.keep.is_some() {
                "older turn, digested: its requests and closing answer whole, one line per other \
                 step with previews and artifact refs"
                    .into()
            } else {
                "older turn, digested: one line per step with previews and artifact refs".into()
            },
            sources,
            rendering: if verbatim { "verbatim" } else { "digest" },
            messages,
            tokens,
            protected: false,
            order: (2, turn.first().map(|m| m.seq).unwrap_or(0), 0),
        }
    }

    /// A completed turn under the long-turn policy: its user messages verbatim, its steps
    /// among the newest `keep` (counted across turns) as the latest completed turn goes (the
    /// user has answered since: long results by their memory or salient lines), older steps
    /// aged with each result by its tool memory where one exists.
    fn aged_turn(&self, cx: &Cx<'_>, turn: &[&TimelineMessage], keep: usize) -> Unit {
        let mut messages = Vec::new();
        let mut sources = Vec::new();
        let mut tokens = 0;
        let mut aged = 0;
        for m in turn {
            let old = is_step(m) && self.age(m) >= keep;
            aged += usize::from(old);
            let mode = match old {
                true => Rendering::AgedAnswered,
                false => Rendering::Recent,
            };
            let (msgs, src, mt) = render_message(m, mode, cx.notes, cx.gate, cx.aging, cx.tokens);
            messages.extend(msgs);
            sources.extend(src);
            tokens += mt;
        }
        let reason = match aged {
            0 => format!(
                "completed turn within the newest {keep} steps: as the latest turn goes, long \
                 results by their memory or salient lines"
            ),
            _ => format!(
                "completed turn: its messages as written, {aged} older step(s) with their \
                 results by their memory, else their evidence lines (the newest {keep} steps \
                 as the latest turn goes)"
            ),
        };
        Unit {
            kind: if aged > 0 { "aged_turn" } else { "turn" },
            tier: if aged > 0 { Tier::P2 } else { Tier::P1 },
            reason,
            sources,
            rendering: if aged > 0 { "aged" } else { "verbatim" },
            messages,
            tokens,
            protected: false,
            order: (2, turn.first().map(|m| m.seq).unwrap_or(0), 0),
        }
    }

    /// Under aging, what the context carries whole (the system prompt, the request, every
    /// message and call of the turns that age step by step, the results of their newest steps,
    /// what a digested turn says whole) and the aged steps' results that go by their lines. A
    /// withheld result is neither.
    fn novel_evidence_inputs(&self, cx: &Cx<'_>) -> (aging::Covered, Vec<(u64, &'v ToolPair)>) {
        let mut covered = aging::Covered::default();
        covered.add(cx.snapshot.system_prompt.as_deref().unwrap_or_default());
        covered.add(cx.request.request.as_deref().unwrap_or_default());
        let Some(keep) = self.keep else {
            return (covered, Vec::new());
        };
        let mut aged = Vec::new();
        let stepwise = self.completed[..self.verbatim_count]
            .iter()
            .map(|t| (t, true))
            .chain(std::iter::once((&self.current, false)));
        for (turn, answered) in stepwise {
            for m in turn {
                covered.add(&m.text);
                let old = is_step(m)
                    && self.age(m) >= keep
                    && !m.tool_calls.iter().any(|c| c.status.is_open());
                let mode = match (old, answered) {
                    (true, true) => Rendering::AgedAnswered,
                    (true, false) => Rendering::Aged,
                    (false, true) => Rendering::Recent,
                    (false, false) => Rendering::Current,
                };
                for c in &m.tool_calls {
                    covered.add(&c.args);
                    if cx.gate.withholds(c.privacy_class) {
                        continue;
                    }
                    let note = cx.notes.get(c.tool_call_id.as_str());
                    match note.and_then(|n| n.replacement(c, mode)) {
                        Some(text) => covered.add(&text),
                        None if old => aged.push((m.seq, c)),
                        None => covered.add(c.output.as_deref().unwrap_or_default()),
                    }
                }
            }
        }
        for m in self.completed[self.verbatim_count..].iter().flatten() {
            if !is_step(m) {
                covered.add(&m.text);
            }
        }
        (covered, aged)
    }

    /// The calls of the turns that are candidates whole.
    fn window_calls(&self) -> BTreeSet<&'v str> {
        self.current
            .iter()
            .chain(self.completed.iter().flatten())
            .flat_map(|m| m.tool_calls.iter().map(|c| c.tool_call_id.as_str()))
            .collect()
    }

    /// Under the long-turn policy: whether the call that ran a subagent returned its report and
    /// the step goes verbatim, so that the report would be said twice: among the newest steps, a
    /// result short enough to go whole in any turn, or, in the turn in progress, an offloaded
    /// result rehydrated whole in place.
    fn reports_verbatim(
        &self,
        cx: &Cx<'_>,
        visible: &[TimelineMessage],
        report: Option<&str>,
    ) -> bool {
        let (Some(keep), Some(report)) = (self.keep, report) else {
            return false;
        };
        let report = report.trim();
        let in_progress: BTreeSet<u64> = self.current.iter().map(|m| m.seq).collect();
        let sent_whole = |m: &TimelineMessage, c: &ToolPair| {
            let short = c
                .output
                .as_deref()
                .filter(|o| o.len() as u64 <= ANSWERED_VERBATIM_MAX_BYTES);
            let in_place = cx
                .aging
                .filter(|_| in_progress.contains(&m.seq))
                .and_then(|a| a.in_place.get(&c.tool_call_id).copied());
            short
                .into_iter()
                .chain(in_place)
                .any(|o| o.contains(report))
        };
        visible
            .iter()
            .filter(|m| self.age(m) < keep && self.step_ages.contains_key(&m.seq))
            .any(|m| m.tool_calls.iter().any(|c| sent_whole(m, c)))
    }
}
