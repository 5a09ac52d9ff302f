//! `strata compact SESSION`: an explicit compaction of a session's branch. The record —
//! successful or failed, with its CompressionCheck — is appended to the log as
//! `CompactionCompleted` and projected before the verb returns.

use std::sync::Arc;

use strata_ingest::{IngestOptions, Ingestor};
use strata_runtime::Backends;

pub(crate) async fn run(
    backends: &Backends,
    tenant: &str,
    session: &str,
    branch: &str,
    keep_turns: usize,
    json: bool,
) -> anyhow::Result<()> {
    let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
    let record =
        strata_compactor::compact_session(backends, &ingestor, tenant, session, branch, keep_turns)
            .await?;
    strata_projector::catch_up(backends).await?;
    let Some(record) = record else {
        println!(
            "nothing to compact: the last {keep_turns} user turn(s) and the newest steps \
             hold everything after the last compaction"
        );
        return Ok(());
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        println!(
            "compaction {} {}: events {}..{} (first kept {}), {} → {} tokens",
            record.compaction_id,
            record.status,
            record.first_event_id,
            record.last_event_id,
            record.first_kept_event_id,
            record.tokens_before,
            record.tokens_after
        );
        for f in &record.check.failures {
            println!("  check failed: {f}");
        }
        println!();
        print!("{}", record.render());
    }
    if !record.succeeded() {
        anyhow::bail!("the compaction failed its check and replaces nothing");
    }
    Ok(())
}
