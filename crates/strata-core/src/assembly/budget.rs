//! The budget an assembly spends: the request's, within the model's window, cut by the policy's
//! share and by a target.

use std::borrow::Cow;

use super::{AssemblyPolicy, AssemblyRequest, Snapshot};

/// The budget when neither the request nor the model's window gives one.
const FALLBACK_BUDGET_TOKENS: u64 = 128_000;

/// The request as the policy reads it: no more verbatim turns than the policy allows.
pub(super) fn within_policy<'r>(
    request: &'r AssemblyRequest,
    policy: &AssemblyPolicy,
) -> Cow<'r, AssemblyRequest> {
    match policy.max_verbatim_turns {
        Some(max) if max < request.verbatim_turns => Cow::Owned(AssemblyRequest {
            verbatim_turns: max,
            ..request.clone()
        }),
        _ => Cow::Borrowed(request),
    }
}

/// The token budget and the policy the assembly runs under: the request's budget within the
/// window (less the output the call reserves), the policy's share of it, then the target.
pub(super) fn budget_and_policy(
    snapshot: &Snapshot,
    request: &AssemblyRequest,
    policy: &AssemblyPolicy,
) -> (u64, AssemblyPolicy) {
    let window_budget = u64::from(snapshot.context_window_tokens)
        .saturating_sub(snapshot.reserved_output_tokens.into());
    let budget = match request.budget {
        Some(b) if window_budget > 0 => b.min(window_budget),
        Some(b) => b,
        None if window_budget > 0 => window_budget,
        None => FALLBACK_BUDGET_TOKENS,
    };
    let budget = if policy.budget_percent < 100 {
        budget * policy.budget_percent / 100
    } else {
        budget
    };
    aim_at_target(budget, policy, request.target_tokens)
}

/// The budget and policy an assembly aiming at `target` tokens runs under: the budget no more
/// than the target, and under aging a verbatim working set of up to half of it.
fn aim_at_target(
    budget: u64,
    policy: &AssemblyPolicy,
    target: Option<u64>,
) -> (u64, AssemblyPolicy) {
    match target {
        None => (budget, *policy),
        Some(t) => (
            budget.min(t.max(1)),
            AssemblyPolicy {
                verbatim_step_tokens: if policy.aged_steps_after.is_some() {
                    t / 2
                } else {
                    policy.verbatim_step_tokens
                },
                ..*policy
            },
        ),
    }
}
