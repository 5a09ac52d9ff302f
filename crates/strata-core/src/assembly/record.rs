//! The record of an assembly: the selected units in output order as the bundle's messages and
//! segments, the omissions counted by reason, and the identity that makes it reproducible.

use std::collections::BTreeMap;

use super::candidates::Cx;
use super::selection::Selected;
use super::{
    Assembled, ContextAssembly, Omission, OmissionReason, RehydrationDecision, Segment, Tier,
    ASSEMBLER_VERSION, OTHER_BRANCH_KIND,
};

/// The assembled bundle and its record.
pub(super) fn finish(
    cx: &Cx<'_>,
    budget: u64,
    selected: Selected,
    mut omitted_items: Vec<Omission>,
    rehydrations: Vec<RehydrationDecision>,
) -> Assembled {
    let snapshot = cx.snapshot;
    if snapshot.other_branch_messages > 0 {
        omitted_items.push(Omission {
            kind: OTHER_BRANCH_KIND.into(),
            tier: Tier::P3,
            reason: OmissionReason::OtherBranch,
            source_event_ids: Vec::new(),
            tokens: snapshot.other_branch_tokens,
        });
    }
    let Selected {
        units: mut selected,
        tokens: context_tokens,
    } = selected;
    selected.sort_by_key(|u| u.order);
    let mut messages = Vec::new();
    let mut included = Vec::new();
    for (i, u) in selected.into_iter().enumerate() {
        included.push(Segment {
            id: format!("seg-{i:03}"),
            kind: u.kind.to_owned(),
            tier: u.tier,
            reason: u.reason,
            source_event_ids: u.sources,
            rendering: u.rendering.to_owned(),
            tokens: u.tokens,
        });
        messages.extend(u.messages);
    }
    let omitted = omissions_by_reason(cx, &omitted_items);

    // The bundle's identity: the canonical messages and tool specs. The provider's rendering of
    // it is a pure function of the bundle and the provider, both part of the identity.
    let bundle_bytes =
        serde_json::to_vec(&(&messages, &snapshot.tools)).expect("the bundle serializes");
    let bundle_sha256 = crate::sha256_hex(&bundle_bytes);
    let identity = format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n{}\n{bundle_sha256}",
        snapshot.tenant_id,
        snapshot.session_id,
        snapshot.branch_id,
        snapshot.participant_id,
        cx.request.provider.as_str(),
        cx.policy.version,
        budget,
    );
    let assembly_id = format!("asm_{}", &crate::sha256_hex(identity.as_bytes())[..24]);

    Assembled {
        assembly: ContextAssembly {
            assembly_id,
            tenant_id: snapshot.tenant_id.clone(),
            session_id: snapshot.session_id.clone(),
            branch_id: snapshot.branch_id.clone(),
            participant_id: snapshot.participant_id.clone(),
            provider: cx.request.provider,
            model: snapshot.model.clone(),
            policy_version: cx.policy.version.into(),
            assembler_version: ASSEMBLER_VERSION.into(),
            tokenizer: cx.tokens.name().into(),
            snapshot_seq: snapshot.head_seq,
            budget_tokens: budget,
            target_tokens: cx.request.target_tokens,
            context_tokens,
            transcript_tokens: snapshot.transcript_tokens,
            over_budget: context_tokens > budget,
            included,
            omitted,
            omitted_items,
            bundle_sha256,
            payload_sha256: String::new(),
            timings_us: BTreeMap::new(),
            projection_complete: true,
            confidential_allowed: cx.request.confidential_allowed,
            rehydrations,
            traced: true,
        },
        messages,
        tools: snapshot.tools.clone(),
        max_output_tokens: snapshot.reserved_output_tokens,
    }
}

/// How many records each reason left out, counting what the snapshot left out before the
/// window and the orphans it could not pair.
fn omissions_by_reason(cx: &Cx<'_>, items: &[Omission]) -> BTreeMap<OmissionReason, u64> {
    let snapshot = cx.snapshot;
    let mut omitted: BTreeMap<OmissionReason, u64> = BTreeMap::new();
    for o in items {
        // One item stands for every message outside the lineage; the count says how many.
        let n = if o.kind == OTHER_BRANCH_KIND {
            snapshot.other_branch_messages
        } else {
            1
        };
        *omitted.entry(o.reason).or_default() += n;
    }
    if snapshot.messages_before_window > 0 {
        let reason = if snapshot.applied_compaction().is_some() {
            OmissionReason::Compacted
        } else {
            OmissionReason::Budget
        };
        *omitted.entry(reason).or_default() += snapshot.messages_before_window;
    }
    if snapshot.orphan_results > 0 {
        omitted.insert(OmissionReason::OrphanResult, snapshot.orphan_results);
    }
    omitted
}
