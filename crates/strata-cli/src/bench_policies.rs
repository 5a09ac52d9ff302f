//! `strata bench policies`: assembly latency with the full policy set (participants, branches,
//! subagents, privacy classes, artifacts, recovery state) on sessions of 1,000, 10,000 and
//! 100,000 events, side by side with the same assembler on a plain single-agent coding session
//! of the same size, in one run.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends};

use crate::bench::{coding_session, BATCH};

const TENANT: &str = "bench";

pub(crate) async fn run(sizes: &[u64], assemblies: usize) -> anyhow::Result<()> {
    println!(
        "strata bench policies: {assemblies} assemblies per session; budget 16,000 tokens; \
         context for participant agent-a on branch main"
    );
    println!();
    println!(
        "{:<10} {:>24} {:>24} {:>8} {:>16}",
        "events", "full policy p50 / p99", "plain session p50 / p99", "ratio", "artifacts/forks"
    );
    for &size in sizes {
        let dir = tempfile::tempdir()?;
        let opts = BackendOpts {
            fsync: FsyncPolicy::Never,
            ..BackendOpts::embedded(dir.path())
        };
        let backends = Backends::open(&opts, "strata bench policies").await?;
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        let rich = format!("policies-{size}");
        let plain = format!("plain-{size}");
        let (events, artifacts, forks) = policy_session(&rich, size);
        ingest(&ingestor, events).await?;
        ingest(&ingestor, coding_session(&plain, size)).await?;
        strata_projector::catch_up(&backends).await?;
        let assembler = Assembler::new(
            backends.clone(),
            std::sync::Arc::new(ingestor),
            AssemblerOptions {
                record_assemblies: false,
                ..AssemblerOptions::default()
            },
        );
        let policy = time(&assembler, &rich, Some("agent-a"), assemblies).await?;
        let simple = time(&assembler, &plain, None, assemblies).await?;
        println!(
            "{:<10} {:>24} {:>24} {:>7.2}× {:>16}",
            size,
            format!("{} / {}", ms(policy.0), ms(policy.1)),
            format!("{} / {}", ms(simple.0), ms(simple.1)),
            policy.0.as_secs_f64() / simple.0.as_secs_f64().max(1e-9),
            format!("{artifacts} / {forks}")
        );
    }
    println!();
    println!("ratio: full-policy p50 over plain-session p50 (same assembler, same run)");
    Ok(())
}

async fn ingest(ingestor: &Ingestor, events: Vec<Event>) -> anyhow::Result<()> {
    for chunk in events.chunks(BATCH) {
        ingestor
            .ingest(
                &Publisher::Operator,
                chunk.iter().cloned().map(|e| (e, None)).collect(),
            )
            .await?;
    }
    Ok(())
}

/// p50 and p99 of `n` assemblies.
async fn time(
    assembler: &Assembler,
    session: &str,
    participant: Option<&str>,
    n: usize,
) -> anyhow::Result<(Duration, Duration)> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let request = ContextRequest {
            participant: participant.map(str::to_owned),
            budget: Some(16_000),
            request: Some(format!("next step {i}")),
            ..ContextRequest::default()
        };
        let started = Instant::now();
        std::hint::black_box(assembler.context(TENANT, session, &request).await?);
        times.push(started.elapsed());
    }
    times.sort();
    let p = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    Ok((p(0.5), p(0.99)))
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// A multi-agent session exercising every policy: a moderator and two agents (each with tool
/// calls and final texts), outputs of every privacy class, a large output stored as an artifact
/// every 40 steps, a retryable failure every 23, a fork every 2,000 events with work on the
/// branch, and a subagent started and finished every 500. Returns the events, the artifacts and
/// the forks.
fn policy_session(session: &str, n: u64) -> (Vec<Event>, u64, u64) {
    let mut out: Vec<Event> = Vec::with_capacity(n as usize);
    let mut i = 0u64;
    let mut last_main: Option<String> = None;
    let mut push = |ty: &str, branch: &str, who: &str, payload: Value, out: &mut Vec<Event>| {
        i += 1;
        let id = format!("{session}-{i}");
        out.push(
            Event::from_json(
                json!({"event_id": id, "tenant_id": TENANT, "session_id": session,
                    "branch_id": branch, "participant_id": who,
                    "timestamp": "2026-06-03T10:00:00Z", "type": ty, "payload": payload}),
                None,
            )
            .expect("valid bench event"),
        );
        id
    };
    push(
        "SessionStarted",
        "main",
        "agent-a",
        json!({"model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000, "reserved_output_tokens": 8000,
            "system_prompt": "You are one of two agents reviewing a data pipeline."}),
        &mut out,
    );
    let (mut artifacts, mut forks) = (0u64, 0u64);
    let mut step = 0u64;
    let big: String = (0..900)
        .map(|l| format!("row {l},north,{},{}\n", l * 7 % 101, l * 13 % 97))
        .collect();
    while (out.len() as u64) < n {
        step += 1;
        let branch = if forks > 0 && step % 50 < 10 {
            format!("alt-{forks}")
        } else {
            "main".to_owned()
        };
        if step % 10 == 1 {
            let id = push(
                "UserPromptSubmitted",
                &branch,
                "moderator",
                json!({"message_id": format!("u{step}"),
                    "text": format!("Round {step}: check stage {} and report.", step % 31)}),
                &mut out,
            );
            if branch == "main" {
                last_main = Some(id);
            }
        }
        let who = if step.is_multiple_of(2) {
            "agent-a"
        } else {
            "agent-b"
        };
        let call = format!("c{step}");
        push(
            "ModelResponseReceived",
            &branch,
            who,
            json!({"message_id": format!("a{step}"), "text": format!("Checking stage {}.", step % 31),
                "tool_calls": [{"tool_call_id": call, "name": "query_stage",
                    "args": {"stage": step % 31}}]}),
            &mut out,
        );
        if step.is_multiple_of(23) {
            push(
                "ToolCallFailed",
                &branch,
                who,
                json!({"tool_call_id": call, "error": "HTTP 503 from the warehouse", "retryable": true}),
                &mut out,
            );
        } else {
            let privacy = match step % 7 {
                0 => "restricted",
                3 => "confidential",
                5 => "internal",
                _ => "public",
            };
            let output = if step.is_multiple_of(40) {
                artifacts += 1;
                format!("stage {step}\n{big}")
            } else {
                format!(
                    "stage {} rows=1200 nulls={} p95_ms={}\n",
                    step % 31,
                    step % 5,
                    step % 97
                )
            };
            push(
                "ToolCallFinished",
                &branch,
                who,
                json!({"tool_call_id": call, "output": output, "privacy_class": privacy}),
                &mut out,
            );
        }
        push(
            "ModelResponseReceived",
            &branch,
            who,
            json!({"message_id": format!("f{step}"),
                "text": format!("Stage {} looks healthy.", step % 31)}),
            &mut out,
        );
        if step.is_multiple_of(500) {
            let child = format!("{session}-child-{step}");
            push(
                "SubagentStarted",
                "main",
                "agent-a",
                json!({"child_session_id": child, "task": "profile stage latency",
                    "checkpoint": {"resume_at": format!("round {step}")}}),
                &mut out,
            );
            push(
                "SubagentFinished",
                "main",
                "agent-a",
                json!({"child_session_id": child, "report": "p95 within budget",
                    "status": "succeeded"}),
                &mut out,
            );
        }
        if step % 500 == 250 {
            if let Some(from) = &last_main {
                forks += 1;
                push(
                    "BranchForked",
                    "main",
                    "agent-a",
                    json!({"new_branch_id": format!("alt-{forks}"), "from_event_id": from}),
                    &mut out,
                );
            }
        }
    }
    out.truncate(n as usize);
    (out, artifacts, forks)
}
