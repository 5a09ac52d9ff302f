//! `strata export`: canonical JSONL (one event per line), which `strata import` reads back.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use strata_runtime::Backends;

/// Puts an offloaded tool output back inline, so an export carries the raw bytes and another
/// data directory that imports it stores the same artifact again (under the same hash: a
/// re-import gives the same events).
async fn with_inline_output(
    backends: &Backends,
    tenant: &str,
    mut event: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    if event.get("type").and_then(serde_json::Value::as_str) != Some("ToolCallFinished") {
        return Ok(event);
    }
    let Some(payload) = event.get_mut("payload").and_then(|p| p.as_object_mut()) else {
        return Ok(event);
    };
    let Some(sha) = payload
        .get("output_sha256")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
    else {
        return Ok(event);
    };
    if payload.get("output").is_some() || payload.get("output_ref").is_none() {
        return Ok(event);
    }
    let bytes = backends
        .blobs
        .get_artifact(tenant, &sha)
        .await?
        .ok_or_else(|| {
            anyhow::anyhow!("artifact {sha} of an exported event is missing from the blob store")
        })?;
    let output = String::from_utf8(bytes.to_vec())
        .map_err(|_| anyhow::anyhow!("artifact {sha} is not UTF-8 text"))?;
    for field in [
        "output_ref",
        "output_preview",
        "output_sha256",
        "output_bytes",
        "output_tokens",
    ] {
        payload.shift_remove(field);
    }
    payload.insert("output".into(), output.into());
    Ok(event)
}

/// Writes a session's events, in seq order, as canonical JSONL, with offloaded tool outputs put
/// back inline.
pub(crate) async fn export(
    backends: &Backends,
    tenant: &str,
    session: &str,
    output: &Path,
) -> anyhow::Result<()> {
    if backends
        .store
        .session_fold(tenant, session)
        .await?
        .is_none()
    {
        anyhow::bail!("session {session:?} not found for tenant {tenant:?}");
    }
    let mut out: Box<dyn Write> = if output == Path::new("-") {
        Box::new(std::io::BufWriter::new(std::io::stdout().lock()))
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(output)
                .with_context(|| format!("cannot create {}", output.display()))?,
        ))
    };
    let mut after = 0u64;
    loop {
        let events = backends.store.events(tenant, session, after, 5000).await?;
        let Some(last) = events.last() else { break };
        after = last
            .get("seq")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(u64::MAX);
        for e in &events {
            let e = with_inline_output(backends, tenant, e.clone()).await?;
            serde_json::to_writer(&mut out, &e)?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}
