//! Human and JSON views of assemblies.

use serde_json::{json, Value};
use strata_assembler::Rendered;
use strata_core::assembly::{BundleMessage, ContextAssembly};
use strata_core::projection::truncate_chars;

/// Prints an assembled context: one JSON object with `--json`, a readable report otherwise.
pub(crate) fn print_context(assembled: &Rendered, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "payload": assembled.payload,
                "assembly": assembled.assembly,
            }))?
        );
        return Ok(());
    }
    print!("{}", render_assembly(&assembled.assembly));
    println!(
        "\nWhat the model will see ({} messages):",
        assembled.messages.len()
    );
    for m in &assembled.messages {
        let (role, text) = match m {
            BundleMessage::System { text } => ("system", text.clone()),
            BundleMessage::User { text } => ("user", text.clone()),
            BundleMessage::Data { source, text } => ("data", format!("[{source}] {text}")),
            BundleMessage::Assistant { text, tool_calls } => (
                "assistant",
                if tool_calls.is_empty() {
                    text.clone()
                } else {
                    format!(
                        "{text} [calls: {}]",
                        tool_calls
                            .iter()
                            .map(|c| format!("{}({})", c.name, truncate_chars(&c.arguments, 60)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            ),
            BundleMessage::Tool {
                tool_call_id,
                content,
                ..
            } => ("tool", format!("{tool_call_id}: {content}")),
        };
        println!(
            "  {role:<9} {}",
            truncate_chars(&text.split_whitespace().collect::<Vec<_>>().join(" "), 140)
        );
    }
    Ok(())
}

/// The readable report of an assembly record.
pub(crate) fn render_assembly(a: &ContextAssembly) -> String {
    let mut out = String::new();
    let saved = if a.transcript_tokens > 0 {
        100.0 * (1.0 - a.context_tokens as f64 / a.transcript_tokens as f64)
    } else {
        0.0
    };
    out.push_str(&format!(
        "Assembly {} · session {} · branch {} · participant {}\n",
        a.assembly_id, a.session_id, a.branch_id, a.participant_id
    ));
    out.push_str(&format!(
        "Provider {} · model {} · policy {} · {}\n",
        a.provider.as_str(),
        a.model,
        a.policy_version,
        a.assembler_version
    ));
    out.push_str(&format!(
        "Tokens ({}): context {} of budget {} · transcript replay {} · {:.1}% fewer{}\n",
        a.tokenizer,
        a.context_tokens,
        a.budget_tokens,
        a.transcript_tokens,
        saved,
        if a.over_budget {
            " · OVER BUDGET (P0 alone exceeds it)"
        } else {
            ""
        }
    ));
    if !a.projection_complete {
        out.push_str(
            "Warning: the projections had not reached the log head; newest events may be missing\n",
        );
    }
    out.push_str(&format!("\nIncluded ({} segments):\n", a.included.len()));
    for s in &a.included {
        out.push_str(&format!(
            "  {:?} {:<22} {:>7} tok  {:<9} {}  [{}]\n",
            s.tier,
            s.kind,
            s.tokens,
            s.rendering,
            s.reason,
            summarize_ids(&s.source_event_ids)
        ));
    }
    out.push_str("\nOmitted:\n");
    if a.omitted.is_empty() {
        out.push_str("  nothing\n");
    }
    for (reason, n) in &a.omitted {
        out.push_str(&format!(
            "  {:<18} {n}\n",
            serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        ));
    }
    for o in a.omitted_items.iter().take(20) {
        out.push_str(&format!(
            "    {:?} {} ({} tok) [{}]\n",
            o.tier,
            o.kind,
            o.tokens,
            summarize_ids(&o.source_event_ids)
        ));
    }
    out
}

fn summarize_ids(ids: &[String]) -> String {
    match ids.len() {
        0 => "-".into(),
        1..=3 => ids.join(", "),
        n => format!("{}, {} … {} ({n} events)", ids[0], ids[1], ids[n - 1]),
    }
}

/// Prints a stored assembly record.
pub(crate) fn print_assembly_record(record: &Value, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(record)?);
        return Ok(());
    }
    let a: ContextAssembly = serde_json::from_value(record.clone())?;
    print!("{}", render_assembly(&a));
    Ok(())
}

/// Prints why one record is, or is not, in an assembly.
pub(crate) async fn print_why_not(
    backends: &strata_runtime::Backends,
    tenant: &str,
    a: &ContextAssembly,
    reference: &str,
    as_json: bool,
) -> anyhow::Result<()> {
    let lines = strata_assembler::explain_reference(backends, tenant, a, reference).await?;
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "assembly_id": a.assembly_id,
                "reference": reference,
                "traced": a.traced,
                "explanation": lines,
            }))?
        );
    } else {
        println!("{reference} in {}:", a.assembly_id);
        for line in lines {
            println!("  {line}");
        }
    }
    Ok(())
}

/// A label cut to `width` characters, with an ellipsis in the middle when it is longer (session
/// ids differ at both ends).
pub(crate) fn truncate_label(label: &str, width: usize) -> String {
    let n = label.chars().count();
    if n <= width {
        return label.to_owned();
    }
    let head = (width - 1) / 2;
    let tail = width - 1 - head;
    let start: String = label.chars().take(head).collect();
    let end: String = label.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// Sessions read from the store per page by `strata sessions`.
const SESSIONS_PAGE: u32 = 500;

/// `strata sessions`: every session of `tenant` (or of every tenant), a line each, oldest id
/// first; with `as_json`, one JSON object per line.
pub(crate) async fn print_sessions(
    backends: &strata_runtime::Backends,
    tenant: Option<String>,
    as_json: bool,
) -> anyhow::Result<()> {
    let tenants = match tenant {
        Some(t) => vec![t],
        None => backends.store.tenants().await?,
    };
    let mut listed = 0usize;
    for tenant in &tenants {
        let mut after: Option<String> = None;
        loop {
            let page = backends
                .store
                .sessions_listing(tenant, after.as_deref(), SESSIONS_PAGE, None)
                .await?;
            for s in &page {
                print_session(tenant, s, as_json)?;
            }
            listed += page.len();
            if page.len() < SESSIONS_PAGE as usize {
                break;
            }
            after = page.last().map(|s| s.session_id.clone());
        }
    }
    if listed == 0 && !as_json {
        eprintln!("no sessions (strata import or strata demo writes some)");
    }
    Ok(())
}

fn print_session(
    tenant: &str,
    s: &strata_store::SessionListing,
    as_json: bool,
) -> anyhow::Result<()> {
    if as_json {
        let line = json!({
            "tenant_id": tenant,
            "session_id": s.session_id,
            "head_seq": s.head_seq,
            "event_count": s.event_count,
            "last_event_at": s.last_event_at,
            "model": s.model,
            "participants": s.participants,
        });
        println!("{}", serde_json::to_string(&line)?);
        return Ok(());
    }
    println!(
        "{}  {}  {} event(s)  seq {}  last {}  {}",
        s.session_id,
        tenant,
        s.event_count,
        s.head_seq,
        s.last_event_at.as_deref().unwrap_or("-"),
        s.model.as_deref().unwrap_or("-"),
    );
    Ok(())
}
