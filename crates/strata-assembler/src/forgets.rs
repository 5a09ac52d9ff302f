//! Forgets a crash cut short, finished when the service that serves `DELETE /v1/sessions/{id}`
//! starts (`docs/design/forgetting.md`): a destroyed key with derived copies still in place is
//! not left for an operator to notice.

use std::time::Duration;

use strata_replay::forget;
use strata_runtime::Backends;

/// First wait before trying again while the projector has not reached the log's end.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between two tries.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Finishes every pending forget; tried again (backing off) while the projector has not caught
/// up, given up with a warning on any other error (`strata forget --resume` finishes it then).
pub async fn finish_pending(backends: Backends) {
    let mut wait = FIRST_RETRY;
    loop {
        match finish_once(&backends).await {
            Ok(0) => return,
            Ok(done) => {
                tracing::info!(forgets = done, "finished the forgets a crash cut short");
                return;
            }
            Err(e @ strata_replay::Error::Pending(_)) => {
                tracing::warn!(error = %e, retry_in_secs = wait.as_secs(), "a pending forget waits");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_RETRY);
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not finish the pending forgets; `strata forget --resume` will"
                );
                return;
            }
        }
    }
}

async fn finish_once(backends: &Backends) -> Result<usize, strata_replay::Error> {
    let sets: Vec<_> = forget::older_projection_sets(backends)
        .await?
        .into_iter()
        .map(|(_, store)| store)
        .collect();
    Ok(forget::resume_pending(backends, &sets, true).await?.len())
}
