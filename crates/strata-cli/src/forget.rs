//! `strata forget`: a session's content made unrecoverable from every store (its data key
//! destroyed, its derived copies deleted), with an audit entry; a whole tenant's
//! (`--whole-tenant`); `--resume` and `--audit`.

use strata_replay::forget::{self, ForgetReport, TenantForgetReport};
use strata_runtime::Backends;

#[derive(Debug, clap::Args)]
pub(crate) struct ForgetArgs {
    /// The session to forget (with the sessions of the subagents it started).
    #[arg(long, required_unless_present_any = ["resume", "audit", "whole_tenant", "user"])]
    pub(crate) session: Option<String>,
    /// Forget every session of --tenant that serves this end user (its `SessionStarted` names
    /// the user), with the memories they were the source of, instead.
    #[arg(long, requires = "tenant", conflicts_with_all = ["session", "resume", "audit"])]
    pub(crate) user: Option<String>,
    /// Forget every session of this tenant and revoke its API keys, instead. Named apart from
    /// --tenant so that a missing --session can never widen a forget to a whole tenant.
    #[arg(
        long,
        value_name = "TENANT",
        conflicts_with_all = ["session", "tenant", "user", "resume", "audit"]
    )]
    pub(crate) whole_tenant: Option<String>,
    /// Tenant of the session [default: on the embedded default, the only tenant that has the
    /// session; else dev].
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Who asks, for the audit trail [default: the operator's user name].
    #[arg(long, env = "USER", default_value = "operator")]
    requested_by: String,
    /// Finish the forgets a crash cut short, instead.
    #[arg(long, conflicts_with_all = ["session", "audit"])]
    resume: bool,
    /// Print the audit trail of forgets, instead.
    #[arg(long, conflicts_with = "session")]
    audit: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(
    backends: &Backends,
    tenant: Option<String>,
    args: &ForgetArgs,
) -> anyhow::Result<()> {
    if args.audit {
        let Some(ring) = backends.codec.keys() else {
            anyhow::bail!("no key store: nothing was ever sealed, so nothing was forgotten");
        };
        let entries = ring.store().forgets(false).await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&entries)?);
        } else {
            for e in entries {
                println!(
                    "{}  {}  tenant {}  subject {}…  by {}  {}",
                    e.forget_id,
                    e.requested_at,
                    e.tenant_id,
                    &e.subject_hash[..16],
                    e.requested_by,
                    e.completed_at
                        .map(|at| format!("done {at}: {}", e.report.unwrap_or_default()))
                        .unwrap_or_else(|| "PENDING (strata forget --resume)".into())
                );
            }
        }
        return Ok(());
    }
    let (names, other_sets): (Vec<String>, Vec<_>) = forget::older_projection_sets(backends)
        .await?
        .into_iter()
        .unzip();
    // On the embedded default this process owns the data directory: nothing else consumes.
    let consumers_running = !backends.log.is_embedded();
    if !names.is_empty() {
        eprintln!("also in the older projection sets: {}", names.join(", "));
    }
    if let (Some(user), Some(tenant)) = (&args.user, &args.tenant) {
        let report = forget::forget_user(
            backends,
            &other_sets,
            tenant,
            user,
            &args.requested_by,
            consumers_running,
        )
        .await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            report.sessions.iter().for_each(print_report);
            println!(
                "user {user} of tenant {tenant}: {} session(s) forgotten",
                report.sessions.len()
            );
        }
        return refuse_if_any_left(&report.tenant_id, &report.not_forgettable);
    }
    if let Some(tenant) = &args.whole_tenant {
        // Recorded first: a run cut short is finished by `strata forget --resume`.
        let job = forget::job::begin(backends, tenant, &args.requested_by).await?;
        let report = forget::job::run(
            backends,
            &other_sets,
            job,
            consumers_running,
            &print_progress,
        )
        .await?;
        return print_tenant_report(&report, args.json);
    }
    let reports = match (&args.session, tenant) {
        (Some(session), Some(tenant)) => vec![
            forget::forget_session(
                backends,
                &other_sets,
                &tenant,
                session,
                &args.requested_by,
                consumers_running,
            )
            .await?,
        ],
        _ => forget::resume_pending(backends, &other_sets, consumers_running).await?,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(());
    }
    if reports.is_empty() {
        println!("no forget was pending");
    }
    for r in &reports {
        print_report(r);
    }
    Ok(())
}

fn print_tenant_report(report: &TenantForgetReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        report.sessions.iter().for_each(print_report);
        println!(
            "tenant {}: {} session(s) forgotten, {} API key(s) revoked",
            report.tenant_id,
            report.sessions.len(),
            report.api_keys_revoked
        );
    }
    refuse_if_any_left(&report.tenant_id, &report.not_forgettable)
}

/// A forget of many sessions that left some as they were fails, naming them.
fn refuse_if_any_left(tenant: &str, left: &[forget::NotForgettable]) -> anyhow::Result<()> {
    if left.is_empty() {
        return Ok(());
    }
    for n in left {
        eprintln!("not forgotten: session {}: {}", n.session_id, n.why);
    }
    anyhow::bail!(
        "{} session(s) of tenant {tenant} could not be forgotten (listed above)",
        left.len()
    )
}

fn print_report(r: &ForgetReport) {
    let rows: u64 = r.rows.values().sum();
    println!(
        "forgot session {} of tenant {} ({}): {} sealed event(s) on the log now unreadable{}; \
         {rows} projection row(s) deleted over {} set(s); {} artifact blob(s) deleted",
        r.session_id,
        r.tenant_id,
        r.forget_id,
        r.sealed_events,
        if r.key_destroyed {
            " (key destroyed)"
        } else {
            " (key already destroyed)"
        },
        r.sets,
        r.artifacts_deleted
    );
    r.subagents.iter().for_each(print_report);
}

/// A tenant's forget, step by step, on standard error: the first step, every 100th session and
/// the last of each phase.
pub(crate) fn print_progress(p: &forget::Progress) {
    let step = |n: usize, of: usize| n == of || n % 100 == 1;
    let phase = if p.forgotten > 0 {
        step(p.forgotten, p.sessions - p.not_forgettable)
            .then(|| format!("{} of {} session(s) forgotten", p.forgotten, p.sessions))
    } else if p.keys_destroyed > 0 {
        step(p.keys_destroyed, p.sessions - p.not_forgettable)
            .then(|| format!("{} of {} key(s) destroyed", p.keys_destroyed, p.sessions))
    } else {
        Some(format!(
            "{} session(s) to forget, {} of them with events in the clear; {} API key(s) revoked",
            p.sessions, p.not_forgettable, p.api_keys_revoked
        ))
    };
    if let Some(line) = phase {
        eprintln!("{line}");
    }
}
