//! A session's history as the model could have read it, message by message — the system
//! prompt, the tool schemas, user messages, assistant messages with their calls, and tool
//! results in full (never the reasoning a harness does not resend, never Strata's own derived
//! records) — indexed by term, and the baselines built from it.
//!
//! The baselines are what other harnesses send at the same call point:
//! - **transcript replay**: every message, every output in full;
//! - **last-N observations**: the transcript with tool outputs older than the newest N replaced
//!   by a one-line placeholder (SWE-agent's `last_n_observations` history processor; N = 5 is its
//!   default);
//! - **newest-message truncation** at a given size: the system prompt and tools, then whole
//!   messages from the newest back while they fit (a tool result never without its call);
//! - **the floor**: the least any policy could send: the system prompt and tools, the task (the
//!   first user message), the latest user message, and the newest step (the last assistant
//!   message and its results).

use std::collections::HashMap;

use serde::Serialize;
use strata_core::tokens::{TokenCounter, MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS};

use crate::refs::{terms, RefKind, Reference};

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    Tools,
    User,
    Assistant,
    Tool,
}

/// One message of the history.
#[derive(Debug, Clone)]
pub struct Item {
    pub role: Role,
    pub event_id: String,
    pub seq: u64,
    pub tokens: u64,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    text: String,
}

/// Where a reference was last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Seen {
    pub event_id: String,
    pub seq: u64,
    pub role: Role,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Messages between it and the call point.
    pub messages_ago: u32,
}

/// Tokens of the placeholder that stands in for an elided observation.
const ELIDED_TOKENS: u64 = 12;

/// A session's history, indexed by term.
#[derive(Debug, Clone, Default)]
pub struct History {
    items: Vec<Item>,
    index: HashMap<Box<str>, Vec<u32>>,
    tool_items: Vec<u32>,
    first_user: Option<u32>,
    last_user: Option<u32>,
    last_assistant: Option<u32>,
    total_tokens: u64,
}

/// Token counts of the baselines at one point, and which messages each keeps.
#[derive(Debug, Clone)]
pub struct Baselines {
    pub transcript_tokens: u64,
    pub last_n_tokens: u64,
    pub truncated_tokens: u64,
    pub floor_tokens: u64,
    last_n_from: usize,
    truncated_from: usize,
    floor: Vec<u32>,
}

impl History {
    pub fn new() -> Self {
        Self::default()
    }

    /// Messages so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends a message, its tokens counted as `text`.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        role: Role,
        event_id: &str,
        seq: u64,
        text: String,
        tool_call_id: Option<String>,
        tool_name: Option<String>,
        tokens: &dyn TokenCounter,
    ) {
        let count = tokens.count(&text) + MESSAGE_OVERHEAD_TOKENS;
        self.push_counted(role, event_id, seq, text, tool_call_id, tool_name, count);
    }

    /// Appends a message of `count` tokens: what a provider is sent, when that differs from the
    /// text its references are looked up in (a tool call's arguments are sent as JSON, and
    /// looked up by their values).
    #[allow(clippy::too_many_arguments)]
    pub fn push_counted(
        &mut self,
        role: Role,
        event_id: &str,
        seq: u64,
        text: String,
        tool_call_id: Option<String>,
        tool_name: Option<String>,
        count: u64,
    ) {
        let i = self.items.len() as u32;
        let mut seen = std::collections::HashSet::new();
        terms(&text, &mut |t| {
            if seen.insert(t.to_owned()) {
                self.index.entry(t.into()).or_default().push(i);
            }
        });
        match role {
            Role::Tool => self.tool_items.push(i),
            Role::User => {
                self.first_user.get_or_insert(i);
                self.last_user = Some(i);
            }
            Role::Assistant => self.last_assistant = Some(i),
            Role::System | Role::Tools => {}
        }
        self.total_tokens += count;
        self.items.push(Item {
            role,
            event_id: event_id.to_owned(),
            seq,
            tokens: count,
            tool_call_id,
            tool_name,
            text,
        });
    }

    /// Messages that hold the reference, oldest first.
    fn holders(&self, r: &Reference) -> Vec<u32> {
        match r.kind {
            RefKind::Quoted => (0..self.items.len() as u32)
                .filter(|&i| self.items[i as usize].text.contains(r.text.as_str()))
                .collect(),
            _ => self.index.get(r.text.as_str()).cloned().unwrap_or_default(),
        }
    }

    /// Where the reference was last seen, if anywhere.
    pub fn last_seen(&self, r: &Reference) -> Option<Seen> {
        let i = *self.holders(r).last()? as usize;
        let item = &self.items[i];
        Some(Seen {
            event_id: item.event_id.clone(),
            seq: item.seq,
            role: item.role,
            tool_call_id: item.tool_call_id.clone(),
            tool: item.tool_name.clone(),
            messages_ago: (self.items.len() - i) as u32,
        })
    }

    /// The baselines at this point; `truncate_to` is the size newest-message truncation must
    /// fit (Strata's context, for a comparison at the same size).
    pub fn baselines(&self, last_n: usize, truncate_to: u64) -> Baselines {
        // Every request primes the reply, as the assembler counts its own.
        let priming = REPLY_PRIMING_TOKENS;
        let fixed: u64 = self
            .items
            .iter()
            .filter(|i| matches!(i.role, Role::System | Role::Tools))
            .map(|i| i.tokens)
            .sum::<u64>()
            + priming;
        // Last-N: outputs before the N newest become a placeholder.
        let last_n_from = self.tool_items.len().checked_sub(last_n).map_or(0, |k| {
            self.tool_items.get(k).map_or(usize::MAX, |&i| i as usize)
        });
        let elided: u64 = self
            .tool_items
            .iter()
            .filter(|&&i| (i as usize) < last_n_from)
            .map(|&i| self.items[i as usize].tokens.saturating_sub(ELIDED_TOKENS))
            .sum();
        // Truncation: whole messages from the newest back while they fit.
        let mut used = fixed;
        let mut truncated_from = self.items.len();
        for (i, item) in self.items.iter().enumerate().rev() {
            if matches!(item.role, Role::System | Role::Tools) {
                continue;
            }
            if used + item.tokens > truncate_to {
                break;
            }
            used += item.tokens;
            truncated_from = i;
        }
        // A tool result never without its call: start after the results of a dropped call.
        while self
            .items
            .get(truncated_from)
            .is_some_and(|i| i.role == Role::Tool)
        {
            used -= self.items[truncated_from].tokens;
            truncated_from += 1;
        }
        let floor = self.floor_items();
        Baselines {
            transcript_tokens: self.total_tokens + priming,
            last_n_tokens: self.total_tokens - elided + priming,
            truncated_tokens: used,
            floor_tokens: floor
                .iter()
                .map(|&i| self.items[i as usize].tokens)
                .sum::<u64>()
                + priming,
            last_n_from,
            truncated_from,
            floor,
        }
    }

    /// The floor's messages: system and tools, the task, the latest request, the newest step.
    fn floor_items(&self) -> Vec<u32> {
        let mut keep: Vec<u32> = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i.role, Role::System | Role::Tools))
            .map(|(k, _)| k as u32)
            .collect();
        keep.extend(self.first_user);
        keep.extend(self.last_user);
        if let Some(a) = self.last_assistant {
            keep.extend(a..self.items.len() as u32);
        }
        keep.sort_unstable();
        keep.dedup();
        keep
    }

    /// Whether each baseline holds the reference (transcript, last-N, truncated, floor), and
    /// whether the history holds it at all.
    pub fn presence(&self, r: &Reference, b: &Baselines) -> Option<[bool; 4]> {
        let holders = self.holders(r);
        if holders.is_empty() {
            return None;
        }
        let fixed = |i: u32| matches!(self.items[i as usize].role, Role::System | Role::Tools);
        let last_n = holders
            .iter()
            .any(|&i| self.items[i as usize].role != Role::Tool || i as usize >= b.last_n_from);
        let truncated = holders
            .iter()
            .any(|&i| fixed(i) || i as usize >= b.truncated_from);
        let floor = holders.iter().any(|i| b.floor.binary_search(i).is_ok());
        Some([true, last_n, truncated, floor])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per word, for readable counts.
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> u64 {
            text.split_whitespace().count() as u64
        }
        fn name(&self) -> &'static str {
            "words"
        }
    }

    fn path(t: &str) -> Reference {
        Reference {
            kind: RefKind::Path,
            text: t.into(),
        }
    }

    fn session() -> History {
        let mut h = History::new();
        let mut seq = 0;
        let mut push = |h: &mut History, role, text: &str| {
            seq += 1;
            h.push(
                role,
                &format!("e{seq}"),
                seq,
                text.into(),
                None,
                None,
                &Words,
            );
        };
        push(&mut h, Role::System, "you are an agent");
        push(&mut h, Role::User, "fix the bug in src/a.py");
        for k in 0..8 {
            push(&mut h, Role::Assistant, &format!("look at step {k}"));
            push(
                &mut h,
                Role::Tool,
                &format!("output of step {k} mentions src/f{k}.py w w w w w"),
            );
        }
        h
    }

    #[test]
    fn baselines_keep_what_they_say() {
        let h = session();
        let b = h.baselines(5, 40);
        assert_eq!(
            b.transcript_tokens,
            h.items.iter().map(|i| i.tokens).sum::<u64>() + REPLY_PRIMING_TOKENS
        );
        assert!(b.last_n_tokens < b.transcript_tokens);
        assert!(b.truncated_tokens <= 40);
        // The floor: system, task, the last step and its result.
        assert_eq!(b.floor.len(), 4);
        // f1 is an old observation: only the transcript has it.
        assert_eq!(
            h.presence(&path("src/f1.py"), &b),
            Some([true, false, false, false])
        );
        // f7 is the newest: everyone has it.
        assert_eq!(
            h.presence(&path("src/f7.py"), &b),
            Some([true, true, true, true])
        );
        // The task's file: in a user message, which last-N keeps and the floor keeps.
        assert_eq!(
            h.presence(&path("a.py"), &b),
            Some([true, true, false, true])
        );
        assert_eq!(h.presence(&path("src/zzz.py"), &b), None);
        let seen = h.last_seen(&path("src/f6.py")).expect("seen");
        assert_eq!(seen.role, Role::Tool);
        assert_eq!(seen.messages_ago, 3);
    }

    #[test]
    fn truncation_never_keeps_a_result_without_its_call() {
        let h = session();
        for budget in 0..120 {
            let b = h.baselines(5, budget);
            if let Some(first) = h.items.get(b.truncated_from) {
                assert_ne!(first.role, Role::Tool, "budget {budget}");
            }
            // Over the budget only when the system prompt alone is (8 words and framing, and
            // the reply's priming).
            let fixed = 8 + REPLY_PRIMING_TOKENS;
            assert!(b.truncated_tokens <= budget.max(fixed), "budget {budget}");
        }
    }
}
