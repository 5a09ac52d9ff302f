//! Is a context sufficient, and at what cost? Scoring one model call point against what really
//! happened next.
//!
//! At a call point the recorded model response names things — paths, identifiers, line
//! numbers, quoted values ([`refs`]). Those that occur in earlier messages of the session are
//! what the real model used and could only have read there: its **evidence**. A context's
//! **evidence recall** is the share of them it holds. Its **cost** is its tokens against
//! transcript replay's at the same point. The baselines of [`history`] are scored the same way
//! beside it, so a figure always reads against what other harnesses send and against the floor.
//!
//! Pure: the caller assembles the context and keeps the [`History`]; nothing here reads a store.

pub mod history;
pub mod refs;

use std::collections::BTreeMap;

use serde::Serialize;

pub use history::{History, Role, Seen};
pub use refs::{RefKind, Reference};

/// SWE-agent's default for its last-N-observations history processor.
pub const DEFAULT_LAST_N: usize = 5;

/// One context at one point: its size and how much of the evidence it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Side {
    pub tokens: u64,
    pub present: u32,
}

/// The contexts compared at a call point, in report order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Sides {
    /// The context the policy assembled.
    pub strata: Side,
    pub transcript: Side,
    pub last_n: Side,
    /// Newest-message truncation at Strata's size.
    pub truncated: Side,
    pub floor: Side,
}

/// A reference the policy's context lacks, with where it was last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    #[serde(flatten)]
    pub reference: Reference,
    pub last_seen: Option<Seen>,
}

/// The score of one call point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PointScore {
    /// References of the response that occur in earlier messages: the evidence.
    pub evidence: u32,
    pub sides: Sides,
    /// [`Point::stated_tokens`].
    pub stated_tokens: u64,
    /// By kind: evidence, and how much of it each context holds.
    pub by_kind: BTreeMap<RefKind, KindCounts>,
    pub missing: Vec<Missing>,
}

/// What a point is scored from.
#[derive(Debug, Clone, Copy)]
pub struct Point<'a> {
    /// The recorded response's text.
    pub response_text: &'a str,
    /// Its tool calls' arguments, each as [`argument_text`] renders it.
    pub arguments: &'a [&'a str],
    /// The policy's context, as the model would read it (every message's text, every call's
    /// arguments, every tool result, the tool schemas).
    pub context_text: &'a str,
    pub context_tokens: u64,
    /// Tokens of the context's facts that no message of the transcript says (the task state a
    /// platform published, what other sessions remember): the transcript is counted with them
    /// when sizes are compared, as a platform replaying it would have to send them too.
    pub stated_tokens: u64,
}

/// The text of tool-call arguments as a model reads them: every string and number of the JSON,
/// unescaped, one per line (so a quoted value in a command matches the bytes it names).
/// Arguments that are not JSON are their own text.
pub fn argument_text(arguments: &str) -> String {
    fn leaves(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            serde_json::Value::Number(n) => {
                out.push_str(&n.to_string());
                out.push('\n');
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| leaves(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| leaves(v, out)),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(v) => {
            let mut out = String::new();
            leaves(&v, &mut out);
            out
        }
        Err(_) => arguments.to_owned(),
    }
}

/// Scores a call point against the history before it.
pub fn score(history: &History, point: Point<'_>, last_n: usize) -> PointScore {
    let baselines = history.baselines(last_n, point.context_tokens);
    let context_terms = refs::term_set(point.context_text);
    let mut sides = Sides {
        strata: Side {
            tokens: point.context_tokens,
            present: 0,
        },
        transcript: Side {
            tokens: baselines.transcript_tokens,
            present: 0,
        },
        last_n: Side {
            tokens: baselines.last_n_tokens,
            present: 0,
        },
        truncated: Side {
            tokens: baselines.truncated_tokens,
            present: 0,
        },
        floor: Side {
            tokens: baselines.floor_tokens,
            present: 0,
        },
    };
    let mut evidence = 0;
    let mut by_kind: BTreeMap<RefKind, KindCounts> = BTreeMap::new();
    let mut missing = Vec::new();
    for r in refs::references(point.response_text, point.arguments) {
        let Some([transcript, last_n, truncated, floor]) = history.presence(&r, &baselines) else {
            continue;
        };
        evidence += 1;
        let in_context = match r.kind {
            RefKind::Quoted => point.context_text.contains(r.text.as_str()),
            _ => context_terms.contains(r.text.as_str()),
        };
        for (side, held) in [
            (&mut sides.strata, in_context),
            (&mut sides.transcript, transcript),
            (&mut sides.last_n, last_n),
            (&mut sides.truncated, truncated),
            (&mut sides.floor, floor),
        ] {
            side.present += u32::from(held);
        }
        by_kind.entry(r.kind).or_default().add(&KindCounts {
            evidence: 1,
            strata: u64::from(in_context),
            last_n: u64::from(last_n),
            truncated: u64::from(truncated),
            floor: u64::from(floor),
        });
        if !in_context {
            missing.push(Missing {
                last_seen: history.last_seen(&r),
                reference: r,
            });
        }
    }
    PointScore {
        evidence,
        sides,
        stated_tokens: point.stated_tokens,
        by_kind,
        missing,
    }
}

impl PointScore {
    /// Whether the policy's context was larger than transcript replay carrying the same state
    /// facts: what the context adds on top of a history it could have sent as written.
    pub fn larger_than_transcript(&self) -> bool {
        self.sides.strata.tokens > self.sides.transcript.tokens + self.stated_tokens
    }
}

/// Sums of many points' scores.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub points: u64,
    pub evidence: u64,
    /// Tokens and evidence held, per context.
    pub strata: SideTotals,
    pub transcript: SideTotals,
    pub last_n: SideTotals,
    pub truncated: SideTotals,
    pub floor: SideTotals,
    pub by_kind: BTreeMap<RefKind, KindCounts>,
    /// Points where the policy's context held all the evidence.
    pub complete_points: u64,
    /// Points where the policy's context was larger than transcript replay with the state facts
    /// the context carried ([`PointScore::larger_than_transcript`]).
    pub larger_than_transcript: u64,
}

/// Evidence of one kind and how much of it each context held (the transcript holds it all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    pub evidence: u64,
    pub strata: u64,
    pub last_n: u64,
    pub truncated: u64,
    pub floor: u64,
}

impl KindCounts {
    fn add(&mut self, o: &KindCounts) {
        self.evidence += o.evidence;
        self.strata += o.strata;
        self.last_n += o.last_n;
        self.truncated += o.truncated;
        self.floor += o.floor;
    }

    /// The share of this evidence a context's count holds (1 when there was none).
    pub fn recall(&self, held: u64) -> f64 {
        if self.evidence == 0 {
            1.0
        } else {
            held as f64 / self.evidence as f64
        }
    }
}

/// Sums for one context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SideTotals {
    pub tokens: u64,
    pub present: u64,
}

impl SideTotals {
    fn add(&mut self, s: Side) {
        self.tokens += s.tokens;
        self.present += u64::from(s.present);
    }
}

impl Totals {
    pub fn add(&mut self, p: &PointScore) {
        self.points += 1;
        self.evidence += u64::from(p.evidence);
        self.strata.add(p.sides.strata);
        self.transcript.add(p.sides.transcript);
        self.last_n.add(p.sides.last_n);
        self.truncated.add(p.sides.truncated);
        self.floor.add(p.sides.floor);
        for (k, c) in &p.by_kind {
            self.by_kind.entry(*k).or_default().add(c);
        }
        self.complete_points += u64::from(p.missing.is_empty());
        self.larger_than_transcript += u64::from(p.larger_than_transcript());
    }

    pub fn merge(&mut self, o: &Totals) {
        self.points += o.points;
        self.evidence += o.evidence;
        for (mine, theirs) in [
            (&mut self.strata, o.strata),
            (&mut self.transcript, o.transcript),
            (&mut self.last_n, o.last_n),
            (&mut self.truncated, o.truncated),
            (&mut self.floor, o.floor),
        ] {
            mine.tokens += theirs.tokens;
            mine.present += theirs.present;
        }
        for (k, c) in &o.by_kind {
            self.by_kind.entry(*k).or_default().add(c);
        }
        self.complete_points += o.complete_points;
        self.larger_than_transcript += o.larger_than_transcript;
    }

    /// The evidence of every kind but plain words ([`RefKind::Word`]), summed: what a response
    /// names that has the shape of code, a path, a number or a quoted value.
    pub fn without_words(&self) -> KindCounts {
        let mut sum = KindCounts::default();
        for (_, c) in self.by_kind.iter().filter(|(k, _)| **k != RefKind::Word) {
            sum.add(c);
        }
        sum
    }

    /// The share of the evidence a context held (1 when there was none).
    pub fn recall(&self, side: &SideTotals) -> f64 {
        if self.evidence == 0 {
            1.0
        } else {
            side.present as f64 / self.evidence as f64
        }
    }

    /// How much smaller a context was than transcript replay (0.25: a quarter fewer tokens).
    pub fn reduction(&self, side: &SideTotals) -> f64 {
        if self.transcript.tokens == 0 {
            0.0
        } else {
            1.0 - side.tokens as f64 / self.transcript.tokens as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::tokens::O200k;

    #[test]
    fn scores_evidence_against_the_history() {
        let mut h = History::new();
        h.push(
            Role::System,
            "e0",
            0,
            "You fix bugs.".into(),
            None,
            None,
            &O200k,
        );
        h.push(
            Role::User,
            "e1",
            1,
            "Fix the crash in src/lexer.rs".into(),
            None,
            None,
            &O200k,
        );
        h.push(
            Role::Tool,
            "e2",
            2,
            "src/lexer.rs:88: fn next_token(&mut self)".into(),
            Some("c1".into()),
            Some("grep".into()),
            &O200k,
        );
        let args = [argument_text(
            r#"{"command": "sed -n 80,100p src/lexer.rs"}"#,
        )];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let point = Point {
            response_text: "The crash is in `next_token`; reading around line 88.",
            arguments: &args,
            context_text: "You fix bugs. Fix the crash in src/lexer.rs",
            context_tokens: 10,
            stated_tokens: 0,
        };
        let s = score(&h, point, DEFAULT_LAST_N);
        // src/lexer.rs and next_token occur earlier; 100 and 80 do not (80 is too short anyway).
        assert_eq!(s.evidence, 2, "{s:?}");
        assert_eq!(s.sides.strata.present, 1);
        assert_eq!(s.sides.transcript.present, 2);
        assert_eq!(s.missing.len(), 1);
        assert_eq!(s.missing[0].reference.text, "next_token");
        let seen = s.missing[0].last_seen.as_ref().expect("seen");
        assert_eq!(seen.tool_call_id.as_deref(), Some("c1"));
        let mut t = Totals::default();
        t.add(&s);
        assert!((t.recall(&t.strata) - 0.5).abs() < 1e-9);
        assert_eq!(t.complete_points, 0);
    }

    #[test]
    fn a_context_is_larger_than_the_transcript_only_past_the_state_it_carries() {
        let mut s = PointScore {
            evidence: 0,
            sides: Sides::default(),
            stated_tokens: 40,
            by_kind: BTreeMap::new(),
            missing: Vec::new(),
        };
        s.sides.transcript.tokens = 1_000;
        s.sides.strata.tokens = 1_040;
        assert!(
            !s.larger_than_transcript(),
            "the published state is counted with it"
        );
        s.sides.strata.tokens = 1_041;
        assert!(s.larger_than_transcript());
        let mut t = Totals::default();
        t.add(&s);
        assert_eq!(t.larger_than_transcript, 1);
    }
}
