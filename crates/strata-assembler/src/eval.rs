//! `GET /v1/sessions/{id}/eval`: the `strata eval` yardstick on one stored session, per call
//! point: the tokens of the context the policy assembles there and how much of the evidence the
//! recorded response used it holds, beside transcript replay, last-N observations and
//! newest-message truncation at the same size.
//!
//! Each call re-folds the session into a scratch set (as `strata eval` does), so it costs
//! seconds on a long session: one evaluation runs at a time per process, and a session over
//! [`EVAL_EVENTS_MAX`] events is sent to the CLI instead, keeping the hot path unaffected.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use strata_core::assembly::AssemblyPolicy;
use strata_replay::{EvalOptions, Evaluator};
use strata_runtime::ApiError;

use crate::Assembler;

/// Most events of a session evaluated over HTTP (`strata eval` takes any size).
pub const EVAL_EVENTS_MAX: u64 = 20_000;

/// Most missing references listed per call point (all are counted).
const MISSING_LISTED: usize = 20;

/// Longest wait for the running evaluation to finish before answering 503.
const QUEUE_WAIT: Duration = Duration::from_secs(30);

/// The query of `GET /v1/sessions/{id}/eval`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalQuery {
    /// Assemble under this policy version instead of each point's recorded one.
    #[serde(default)]
    pub policy: Option<String>,
    /// Token budget of every assembly (default: the recorded one, or the window).
    #[serde(default)]
    pub budget: Option<u64>,
    /// The size every assembly aims for (default: the recorded target, or none).
    #[serde(default)]
    pub target_tokens: Option<u64>,
    /// A call point (its response's event id): the answer also holds the traced record of the
    /// assembly there, for a comparison of two policies segment by segment.
    #[serde(default)]
    pub point: Option<String>,
    /// The cost/recall curve: the session evaluated again aiming every point at each of these
    /// sizes (comma-separated token counts), the totals of each run in `curve`.
    #[serde(default)]
    pub targets: Option<String>,
}

/// Most targets of one curve: each is another evaluation of the session.
pub const CURVE_TARGETS_MAX: usize = 8;

/// The sizes of `targets=`, ascending, or what is wrong with them.
fn curve_targets(targets: &str) -> Result<Vec<u64>, ApiError> {
    let mut sizes = Vec::new();
    for (i, part) in targets.split(',').enumerate() {
        let size: u64 = part.trim().parse().map_err(|_| {
            ApiError::bad_request(format!(
                "targets: item {} ({part:?}) is not a token count; expected sizes such as \
                 `targets=4000,8000,16000`",
                i + 1
            ))
        })?;
        if size == 0 {
            return Err(ApiError::bad_request(format!(
                "targets: item {} is 0; a context of no tokens has no curve point",
                i + 1
            )));
        }
        sizes.push(size);
    }
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.len() > CURVE_TARGETS_MAX {
        return Err(ApiError::bad_request(format!(
            "targets: {} sizes, at most {CURVE_TARGETS_MAX} (each is another evaluation of the \
             session)",
            sizes.len()
        )));
    }
    Ok(sizes)
}

impl Assembler {
    /// Evaluates `session` of `tenant` call point by call point (see the module docs).
    pub async fn evaluate(
        &self,
        tenant: &str,
        session: &str,
        query: &EvalQuery,
    ) -> Result<Value, ApiError> {
        let targets = query.targets.as_deref().map(curve_targets).transpose()?;
        let policy = match query.policy.as_deref() {
            None | Some("recorded") => None,
            Some(version) => Some(
                AssemblyPolicy::requested(version)
                    .map_err(|e| ApiError::bad_request(format!("policy: {e} (or `recorded`)")))?,
            ),
        };
        let store = &self.backends().store;
        let fold = store
            .session_fold(tenant, session)
            .await
            .map_err(|e| ApiError::internal(&e))?
            .ok_or_else(|| ApiError::not_found(format!("session {session:?} not found")))?;
        if fold.event_count > EVAL_EVENTS_MAX {
            return Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "too_large",
                format!(
                    "session {session:?} has {} events, over the {EVAL_EVENTS_MAX} evaluated \
                     over HTTP; run `strata eval --session {session} --report FILE` on the log",
                    fold.event_count
                ),
            ));
        }
        let _turn = tokio::time::timeout(QUEUE_WAIT, self.evaluations.acquire())
            .await
            .map_err(|_| {
                ApiError::unavailable("another evaluation is running; try again in a minute")
            })?
            .map_err(|e| ApiError::internal(&e))?;
        let events = store
            .events_through(tenant, session, fold.head_seq)
            .await
            .map_err(|e| ApiError::internal(&e))?;
        let options = EvalOptions {
            policy,
            budget: query.budget,
            target_tokens: query.target_tokens,
            rehydrate_max_bytes: self.options.rehydrate_max_bytes,
            confidential_providers: self.options.confidential_providers.clone(),
            keep_points: true,
            assembly_at: query.point.clone(),
            ..EvalOptions::default()
        };
        let last_n = options.last_n;
        let mut curve = Vec::new();
        for &target in targets.iter().flatten() {
            let options = EvalOptions {
                target_tokens: Some(target),
                keep_points: false,
                assembly_at: None,
                ..options.clone()
            };
            let report = self.evaluate_once(options, events.clone()).await?;
            curve.push(json!({ "target_tokens": target, "totals": report.totals }));
        }
        let mut report = self.evaluate_once(options, events).await?;
        let assembly = report.assembly.take();
        let mut answer = answer(session, last_n, report);
        if targets.is_some() {
            answer["curve"] = Value::Array(curve);
        }
        if let Some(point) = &query.point {
            let record = assembly.ok_or_else(|| {
                ApiError::not_found(format!(
                    "point: {point:?} is not a call point of session {session:?} (a model \
                     response with a state before it)"
                ))
            })?;
            answer["assembly"] =
                serde_json::to_value(record).map_err(|e| ApiError::internal(&e))?;
        }
        Ok(answer)
    }
}

impl Assembler {
    /// One evaluation of a session's events in a scratch set.
    async fn evaluate_once(
        &self,
        options: EvalOptions,
        events: Vec<strata_core::Event>,
    ) -> Result<strata_replay::EvalReport, ApiError> {
        let blobs = &self.backends().blobs;
        let mut evaluator = Evaluator::new(options, Some(blobs))
            .await
            .map_err(|e| ApiError::internal(&e))?;
        evaluator
            .session("session", events)
            .await
            .map_err(|e| ApiError::internal(&e))?;
        Ok(evaluator.finish())
    }
}

/// The report as the API answers it: totals, and every point with its first missing
/// references (the model's own words, never a tool's payload).
fn answer(session: &str, last_n: usize, report: strata_replay::EvalReport) -> Value {
    let points: Vec<Value> = report
        .points
        .into_iter()
        .map(|mut p| {
            let missing = p.score.missing.len();
            p.score.missing.truncate(MISSING_LISTED);
            let mut v = serde_json::to_value(&p).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("tenant_id");
                o.insert("missing_count".into(), json!(missing));
            }
            v
        })
        .collect();
    json!({
        "session_id": session,
        "policy": report.policy,
        "events": report.events,
        "skipped_points": report.skipped_points,
        "repeated_points": report.repeated_points,
        "elapsed_secs": report.elapsed_secs,
        "last_n": last_n,
        "totals": report.totals,
        // What `policy=` takes, for a client's choice.
        "policies": AssemblyPolicy::all().iter().map(|p| p.version).collect::<Vec<_>>(),
        "retired_policy_points": report.retired_policy_points,
        "points": points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_document_lists_every_policy_an_evaluation_takes() {
        let line = crate::http::OPENAPI_YAML
            .lines()
            .find(|l| l.contains("name: policy") && l.contains("enum: [recorded"))
            .expect("the eval operation's policy parameter");
        for policy in AssemblyPolicy::all() {
            assert!(
                line.contains(&format!(" {},", policy.version))
                    || line.contains(&format!(" {}]", policy.version)),
                "{} is not in {line}",
                policy.version
            );
        }
    }
}
