//! `strata demo`: a realistic, tool-heavy coding-agent session — a failing test found in a large
//! test log, large file reads, a wrong first fix, the real fix, a follow-up request and a pending
//! tool call — published through ingest, then assembled.

use serde_json::{json, Value};
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_runtime::{auth, BackendOpts};

use crate::ContextArgs;

/// Session id of the demo session.
pub(crate) const DEMO_SESSION: &str = "demo-invoice-fix";

pub(crate) async fn run(
    opts: &BackendOpts,
    policy: &strata_assembler::PolicyOpts,
    wait: std::time::Duration,
    args: &ContextArgs,
) -> anyhow::Result<()> {
    let backends = crate::open_current(opts, wait, "strata demo").await?;
    let tenant = args.tenant.as_deref().unwrap_or(auth::DEV_TENANT);
    let events = demo_events(tenant, DEMO_SESSION);
    let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
    let outcomes = ingestor
        .ingest(
            &Publisher::Operator,
            events.into_iter().map(|e| (e, None)).collect(),
        )
        .await?;
    let accepted = outcomes.iter().filter(|o| o.status == "accepted").count();
    strata_projector::bring_current(&backends, wait).await?;
    crate::bring_memories_current(&backends, wait).await?;
    let mut request = args.request();
    if request.budget.is_none() {
        // A realistic per-call budget: what an agent would give its context, not the whole window.
        request.budget = Some(16_000);
    }
    let assembled = crate::assembler(&backends, policy)
        .context(tenant, DEMO_SESSION, &request)
        .await?;
    strata_projector::bring_current(&backends, wait).await?;
    if args.json {
        return crate::view::print_context(&assembled, true);
    }
    println!(
        "Published session {DEMO_SESSION} ({} events, {accepted} new) to {}",
        outcomes.len(),
        backends.data_dir.display()
    );
    println!();
    crate::view::print_context(&assembled, false)?;
    let a = &assembled.assembly;
    println!();
    println!(
        "Transcript replay would send {} tokens; Strata sends {} ({:.1}% fewer), keeping the \
         request, goal, open questions, the failing test, modified files and the pending call.",
        a.transcript_tokens,
        a.context_tokens,
        100.0 * (1.0 - a.context_tokens as f64 / a.transcript_tokens.max(1) as f64)
    );
    // Runnable as printed from any directory: the data directory is named, absolute.
    let data_dir =
        std::fs::canonicalize(&backends.data_dir).unwrap_or_else(|_| backends.data_dir.clone());
    println!(
        "Inspect it again with: strata --data-dir {} inspect {}",
        shell_word(&data_dir.display().to_string()),
        a.assembly_id
    );
    Ok(())
}

/// `s` as one shell word: as is when it is plain, else single-quoted.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,@%=".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Builds the demo session's events (deterministic: same ids, same bytes every time).
pub(crate) fn demo_events(tenant: &str, session: &str) -> Vec<Event> {
    let mut b = SessionBuilder::new(tenant, session);
    b.push(
        "SessionStarted",
        "system",
        json!({
            "model": {"provider": "openai", "model": "gpt-4o"},
            "context_window_tokens": 128000,
            "reserved_output_tokens": 8000,
            "cwd": "/work/billing",
            "repo_root": "/work/billing",
            "system_prompt": SYSTEM_PROMPT,
            "tools": [
                {"name": "read_file", "description": "Read a file of the repository.",
                 "schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                {"name": "search", "description": "Search the repository with a regular expression.",
                 "schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
                {"name": "run_tests", "description": "Run the test suite, optionally filtered.",
                 "schema": {"type": "object", "properties": {"filter": {"type": "string"}}}},
                {"name": "apply_patch", "description": "Apply a unified diff.",
                 "schema": {"type": "object", "properties": {"path": {"type": "string"}, "diff": {"type": "string"}}, "required": ["path", "diff"]}},
                {"name": "shell", "description": "Run a shell command.",
                 "schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
            ]
        }),
    );
    b.user("CI is red on main: `cargo test` fails somewhere in the invoice code. Find the failing test, fix the bug without changing any public API, and make sure the whole suite passes.");
    b.push(
        "StateUpdated",
        "agent",
        json!({
            "goal": "Make `cargo test` pass on main by fixing the invoice bug",
            "current_task": "Find the failing test",
            "acceptance_criteria": ["the whole test suite passes", "no public API changes"],
            "constraints": ["do not change public APIs", "keep the fix minimal"],
            "plan": ["run the test suite", "read the failing code", "fix it", "re-run the suite"]
        }),
    );
    b.tool_step(
        "I'll start by running the whole suite to see what fails.",
        "run_tests",
        json!({}),
        &test_log(412, Some(("invoice::tests::total_rounds_half_even", "assertion `left == right` failed\n  left: 10.06\n right: 10.05\n  at src/invoice/total.rs:88:9"))),
        true,
    );
    b.tool_step(
        "One failure: `invoice::tests::total_rounds_half_even`. Let me find where totals are rounded.",
        "search",
        json!({"query": "fn round_"}),
        "src/invoice/total.rs:61: pub(crate) fn round_cents(amount: Decimal) -> Decimal {\nsrc/invoice/tax.rs:40: fn round_tax(amount: Decimal) -> Decimal {\nsrc/report/format.rs:12: fn round_display(x: f64) -> String {",
        false,
    );
    b.tool_step(
        "Reading the total computation.",
        "read_file",
        json!({"path": "src/invoice/total.rs"}),
        &source_file("src/invoice/total.rs", 520),
        false,
    );
    b.push(
        "FileRead",
        "agent",
        json!({"path": "src/invoice/total.rs", "bytes": 21873}),
    );
    b.tool_step(
        "And the tax module, since tax is rounded before the total.",
        "read_file",
        json!({"path": "src/invoice/tax.rs"}),
        &source_file("src/invoice/tax.rs", 380),
        false,
    );
    b.push(
        "FileRead",
        "agent",
        json!({"path": "src/invoice/tax.rs", "bytes": 15904}),
    );
    b.tool_step(
        "The money type is defined elsewhere; let me check how it rounds.",
        "read_file",
        json!({"path": "src/money.rs"}),
        &source_file("src/money.rs", 300),
        false,
    );
    b.push(
        "FileRead",
        "agent",
        json!({"path": "src/money.rs", "bytes": 12480}),
    );
    b.push(
        "StateUpdated",
        "agent",
        json!({
            "current_task": "Fix rounding in round_cents",
            "facts": ["round_cents uses RoundingStrategy::MidpointAwayFromZero", "the test expects banker's rounding (half-even)"],
            "decisions": ["fix round_cents rather than the test: the invoicing spec requires half-even"]
        }),
    );
    b.tool_step(
        "`round_cents` rounds half away from zero; the spec and the test want half-even. First attempt: switch the strategy.",
        "apply_patch",
        json!({"path": "src/invoice/total.rs", "diff": "@@ -61,3 +61,3 @@\n-    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero)\n+    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven)"}),
        "patch applied: 1 hunk",
        false,
    );
    b.push(
        "DiffApplied",
        "agent",
        json!({"path": "src/invoice/total.rs", "diff": "-MidpointAwayFromZero\n+MidpointNearestEven"}),
    );
    b.tool_step(
        "Re-running the invoice tests.",
        "run_tests",
        json!({"filter": "invoice"}),
        &test_log(188, Some(("invoice::tax::tests::tax_is_rounded_per_line", "assertion failed: tax lines must sum to the rounded total\n  at src/invoice/tax.rs:52:9"))),
        true,
    );
    b.tool_step(
        "That broke per-line tax rounding: tax.rs calls round_cents too. The right fix is to round half-even only for the invoice total.",
        "apply_patch",
        json!({"path": "src/invoice/total.rs", "diff": "@@ -61,3 +61,7 @@\n-    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven)\n+    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero)\n+}\n+\n+fn round_total(amount: Decimal) -> Decimal {\n+    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven)"}),
        "patch applied: 2 hunks",
        false,
    );
    b.push(
        "FileWritten",
        "agent",
        json!({"path": "src/invoice/total.rs", "bytes": 22011, "summary": "round the invoice total half-even with a new round_total; round_cents unchanged"}),
    );
    b.tool_step(
        "Running the whole suite again.",
        "run_tests",
        json!({}),
        &test_log(412, None),
        false,
    );
    b.push(
        "VerifierFinished",
        "tool",
        json!({"check": "cargo test", "result": "passed: 412 tests", "evidence_refs": []}),
    );
    b.assistant("All 412 tests pass. The bug: the invoice total was rounded half away from zero while the invoicing spec requires half-even. I added `round_total` (half-even) for the total and left `round_cents` (used per tax line) unchanged, so no public API changed.", &[]);

    b.user("Great. Now add a regression test for the half-even total and a CHANGELOG entry, then run the full suite once more.");
    b.push(
        "StateUpdated",
        "agent",
        json!({
            "current_task": "Add a regression test and a CHANGELOG entry, then re-run the suite",
            "plan": ["add a half-even regression test", "add a CHANGELOG entry", "run the full suite"],
            "open_questions": ["Should the CHANGELOG entry go under 'Fixed' for 2.4.1 or the unreleased section?"]
        }),
    );
    b.tool_step(
        "Reading the existing invoice tests to follow their style.",
        "read_file",
        json!({"path": "src/invoice/tests.rs"}),
        &source_file("src/invoice/tests.rs", 260),
        false,
    );
    b.push(
        "FileRead",
        "agent",
        json!({"path": "src/invoice/tests.rs", "bytes": 10112}),
    );
    b.tool_step(
        "Adding the regression test.",
        "apply_patch",
        json!({"path": "src/invoice/tests.rs", "diff": "+#[test]\n+fn total_rounds_half_even_regression() {\n+    assert_eq!(round_total(dec!(10.055)), dec!(10.06));\n+    assert_eq!(round_total(dec!(10.065)), dec!(10.06));\n+}"}),
        "patch applied: 1 hunk",
        false,
    );
    b.push(
        "FileWritten",
        "agent",
        json!({"path": "src/invoice/tests.rs", "bytes": 10390, "summary": "regression test for half-even totals"}),
    );
    b.tool_step(
        "Checking the CHANGELOG layout.",
        "read_file",
        json!({"path": "CHANGELOG.md"}),
        &changelog(),
        false,
    );
    b.push(
        "FileRead",
        "agent",
        json!({"path": "CHANGELOG.md", "bytes": 9800}),
    );
    // The last call has no result yet: it must stay visible as pending.
    b.assistant(
        "Test added. Running the full suite before touching the CHANGELOG, since I still need to know which section the entry belongs in.",
        &[("call_final_tests", "run_tests", json!({}))],
    );
    b.events
}

struct SessionBuilder {
    tenant: String,
    session: String,
    n: u32,
    events: Vec<Event>,
}

impl SessionBuilder {
    fn new(tenant: &str, session: &str) -> Self {
        Self {
            tenant: tenant.to_owned(),
            session: session.to_owned(),
            n: 0,
            events: Vec::new(),
        }
    }

    fn push(&mut self, ty: &str, actor: &str, payload: Value) -> String {
        self.n += 1;
        let id = format!("{}-{:04}", self.session, self.n);
        // A fixed clock, one step every 7 seconds.
        let ts = chrono::DateTime::from_timestamp(1_780_480_800 + i64::from(self.n) * 7, 0)
            .expect("valid timestamp");
        let value = json!({
            "event_id": id,
            "tenant_id": self.tenant,
            "session_id": self.session,
            "timestamp": strata_core::event::format_timestamp(&ts),
            "type": ty,
            "actor": actor,
            "participant_id": "coder",
            "payload": payload,
        });
        self.events
            .push(Event::from_json(value, None).expect("demo events are valid"));
        id
    }

    fn user(&mut self, text: &str) {
        let m = format!("msg-{}", self.n + 1);
        self.push(
            "UserPromptSubmitted",
            "user",
            json!({"message_id": m, "text": text}),
        );
    }

    fn assistant(&mut self, text: &str, calls: &[(&str, &str, Value)]) {
        let m = format!("msg-{}", self.n + 1);
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({"tool_call_id": id, "name": name, "args": args}))
            .collect();
        self.push(
            "ModelResponseReceived",
            "assistant",
            json!({"message_id": m, "text": text, "tool_calls": calls,
                   "usage": {"input_tokens": 1200 + self.n * 50, "output_tokens": 180}}),
        );
    }

    fn tool_step(&mut self, text: &str, tool: &str, args: Value, output: &str, is_error: bool) {
        let call = format!("call-{}", self.n + 1);
        self.assistant(text, &[(call.as_str(), tool, args)]);
        self.push(
            "ToolCallFinished",
            "tool",
            json!({"tool_call_id": call, "output": output, "is_error": is_error}),
        );
    }
}

const SYSTEM_PROMPT: &str = "You are a careful software engineer working in a Rust repository through tools. \
Read before you edit, keep changes minimal, never change public APIs unless asked, and run the tests \
after every change. Report what you changed and why. When a tool fails, read its error before retrying.";

/// A cargo test log of `n` tests, with an optional failure at the end.
fn test_log(n: usize, failure: Option<(&str, &str)>) -> String {
    let modules = [
        "invoice::tests",
        "invoice::tax::tests",
        "report::tests",
        "money::tests",
        "customer::tests",
        "ledger::tests",
    ];
    let mut out = String::from("   Compiling billing v2.4.0 (/work/billing)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in 14.82s\n     Running unittests src/lib.rs (target/debug/deps/billing-4f1c2a9e)\n\n");
    out.push_str(&format!("running {n} tests\n"));
    for i in 0..n {
        let m = modules[i % modules.len()];
        let name = match failure {
            Some((f, _)) if i == n / 2 => f.to_owned(),
            _ => format!(
                "{m}::case_{:03}_{}",
                i,
                ["parses", "formats", "sums", "rounds", "validates"][i % 5]
            ),
        };
        let status = if failure.map(|(f, _)| f == name).unwrap_or(false) {
            "FAILED"
        } else {
            "ok"
        };
        out.push_str(&format!("test {name} ... {status}\n"));
    }
    match failure {
        Some((name, msg)) => {
            out.push_str(&format!("\nfailures:\n\n---- {name} stdout ----\nthread '{name}' panicked at {msg}\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\n\nfailures:\n    {name}\n\ntest result: FAILED. {} passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.41s\n\nerror: test failed, to rerun pass `--lib`\n", n - 1));
        }
        None => out.push_str(&format!(
            "\ntest result: ok. {n} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.38s\n"
        )),
    }
    out
}

/// A plausible Rust source file of `lines` lines.
fn source_file(path: &str, lines: usize) -> String {
    let mut out = format!("//! {path}\n\nuse rust_decimal::{{Decimal, RoundingStrategy}};\nuse crate::money::Money;\n\n");
    let mut i = 0;
    while out.lines().count() < lines {
        i += 1;
        out.push_str(&format!(
            "/// Computes part {i} of the invoice amounts for {path}.\npub(crate) fn part_{i}(lines: &[Line], rate: Decimal) -> Money {{\n    let mut total = Decimal::ZERO;\n    for line in lines.iter().filter(|l| l.kind == Kind::Item{}) {{\n        total += line.quantity * line.unit_price * (Decimal::ONE + rate);\n    }}\n    Money::from_decimal(total)\n}}\n\n",
            i % 7
        ));
        if i == 8 {
            out.push_str("pub(crate) fn round_cents(amount: Decimal) -> Decimal {\n    amount.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero)\n}\n\n");
        }
    }
    out
}

fn changelog() -> String {
    let mut out =
        String::from("# Changelog\n\n## Unreleased\n\n### Added\n- Export invoices as CSV.\n\n");
    for v in (0..40).rev() {
        out.push_str(&format!(
            "## 2.{}.{} — 2026-{:02}-{:02}\n\n### Fixed\n- Ledger entries for refunds in release {v}.\n- Currency formatting for locale variant {v}.\n\n### Changed\n- Faster customer lookups ({v}).\n\n",
            v / 10,
            v % 10,
            (v % 12) + 1,
            (v % 27) + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_is_deterministic_and_tool_heavy() {
        let a = demo_events("dev", "s");
        let b = demo_events("dev", "s");
        assert_eq!(a, b);
        assert!(a.len() >= 40, "dozens of steps, got {}", a.len());
        let big = a
            .iter()
            .filter(|e| match &e.payload {
                strata_core::Payload::ToolCallFinished(p) => {
                    p.output.as_ref().map(|o| o.len() > 8192).unwrap_or(false)
                }
                _ => false,
            })
            .count();
        assert!(big >= 4, "large outputs: {big}");
    }
}
