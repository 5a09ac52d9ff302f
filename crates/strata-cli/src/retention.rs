//! `strata retention`: the sessions idle longer than a deployment keeps them, forgotten (or
//! listed, with `--dry-run`), per tenant, with progress and a report. Run it on a schedule.

use strata_replay::forget;
use strata_replay::retention::{self, RetentionReport};
use strata_runtime::Backends;

#[derive(Debug, clap::Args)]
pub(crate) struct RetentionArgs {
    /// Forget the sessions whose newest event is older than this many days.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    idle_days: u32,
    /// Only these tenants [default: every tenant].
    #[arg(long)]
    tenant: Vec<String>,
    /// List what a run would forget, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print JSON: one report per tenant.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(backends: &Backends, args: &RetentionArgs) -> anyhow::Result<()> {
    let tenants = if args.tenant.is_empty() {
        backends.store.tenants().await?
    } else {
        args.tenant.clone()
    };
    let other_sets: Vec<_> = forget::older_projection_sets(backends)
        .await?
        .into_iter()
        .map(|(_, store)| store)
        .collect();
    // On the embedded default this process owns the data directory: nothing else consumes.
    let consumers_running = !backends.log.is_embedded();
    let mut reports = Vec::with_capacity(tenants.len());
    for tenant in &tenants {
        eprintln!(
            "tenant {tenant}: looking for sessions idle for more than {} day(s)",
            args.idle_days
        );
        let report = retention::apply(
            backends,
            &other_sets,
            tenant,
            args.idle_days,
            args.dry_run,
            consumers_running,
            &crate::forget::print_progress,
        )
        .await?;
        if !args.json {
            print_report(&report, args.dry_run);
        }
        reports.push(report);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    let left: usize = reports.iter().map(|r| r.not_forgettable.len()).sum();
    if left > 0 {
        anyhow::bail!(
            "{left} idle session(s) have events on the log in the clear and were left as they \
             were (`strata seal --migrate` seals an embedded log in place)"
        );
    }
    Ok(())
}

fn print_report(r: &RetentionReport, dry_run: bool) {
    if dry_run {
        for session in &r.would_forget {
            println!("would forget {session}");
        }
    }
    println!(
        "tenant {}: {} session(s), {} idle, {} undated (kept); {} forgotten{}",
        r.tenant_id,
        r.examined,
        r.idle,
        r.undated,
        r.forgotten,
        if dry_run { " (dry run)" } else { "" }
    );
    for n in &r.not_forgettable {
        println!("  left {}: {}", n.session_id, n.why);
    }
}
