//! `strata dev`: every service in one process behind one HTTP port, on the embedded default.

use std::net::SocketAddr;
use std::sync::Arc;

use strata_assembler::{Assembler, AssemblerOptions};
use strata_ingest::{IngestOptions, Ingestor};
use strata_projector::{Projector, ProjectorOptions};
use strata_runtime::{auth, BackendOpts, Backends};
use tokio::sync::watch;

pub(crate) async fn run(
    opts: &BackendOpts,
    policy: &strata_assembler::PolicyOpts,
    listen: SocketAddr,
    privacy_defaults: std::collections::BTreeMap<String, strata_core::privacy::PrivacyDefaults>,
) -> anyhow::Result<()> {
    let backends = Backends::open(opts, "strata dev").await?;
    let key = auth::ensure_dev_key(backends.store.as_ref(), &backends.data_dir).await?;
    let admin_key = auth::admin_key(opts)?;
    let caught_up = strata_projector::catch_up(&backends).await?;
    tracing::info!(events = caught_up, "projections caught up with the log");

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let projector = Projector::start(backends.clone(), ProjectorOptions::default()).await?;
    let projector_task = tokio::spawn(projector.run(stopped(stop_rx.clone())));
    let memory_backends = backends.clone();
    let memory_stop = stopped(stop_rx.clone());
    let memory_task = tokio::spawn(async move {
        strata_memory::run(&memory_backends, strata_memory::DEFAULT_GROUP, memory_stop).await
    });
    let compactor_backends = backends.clone();
    let compactor_stop = stopped(stop_rx.clone());
    let compactor_task = tokio::spawn(async move {
        strata_compactor::run(
            &compactor_backends,
            strata_compactor::DEFAULT_GROUP,
            compactor_stop,
        )
        .await
    });

    // Forgets a crash cut short are finished in the background, beside the API.
    let forgets_task = tokio::spawn(strata_assembler::forgets::finish_pending(backends.clone()));
    let ingestor = Arc::new(Ingestor::new(
        backends.clone(),
        IngestOptions {
            privacy_defaults,
            ..IngestOptions::default()
        },
    ));
    let assembler = Assembler::new(
        backends.clone(),
        ingestor.clone(),
        policy.apply(AssemblerOptions {
            admin_key,
            ..AssemblerOptions::default()
        }),
    );
    assembler.warm().await;
    let router = strata_ingest::http::routes(ingestor.clone())
        .merge(strata_assembler::http::routes(assembler))
        .merge(strata_compactor::http::routes(backends.clone(), ingestor));

    say(format_args!(
        "strata dev listening on http://{listen} (the inspector: http://{listen}/ui)"
    ));
    say(format_args!(
        "data directory: {}",
        backends.data_dir.display()
    ));
    match &opts.admin_key_file {
        Some(path) => say(format_args!("admin key: the one in {}", path.display())),
        None if opts.uses_data_dir() => say(format_args!(
            "admin key (forgets tenants): in {}",
            backends.data_dir.join(auth::ADMIN_KEY_FILE).display()
        )),
        None => say(format_args!(
            "no admin key: the cross-tenant routes are refused"
        )),
    }
    // Last: a client may stop reading once it has the key.
    say(format_args!(
        "dev api key (tenant {}): {key}",
        auth::DEV_TENANT
    ));
    let shutdown = async move {
        strata_runtime::shutdown_signal().await;
        let _ = stop_tx.send(true);
    };
    strata_runtime::serve(router, listen, shutdown).await?;

    projector_task.await??;
    memory_task.await??;
    compactor_task.await??;
    forgets_task.abort();
    say(format_args!("strata dev stopped"));
    Ok(())
}

/// A status line on stdout. A reader that has gone (a client that read the key and closed the
/// pipe) is no reason to stop serving, nor to fail at shutdown: the line is dropped.
fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}
