//! `strata bench`: ingest, projection and assembly figures from one run, on a scratch data
//! directory (the same embedded backends `strata dev` uses).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use strata_assembler::{Assembler, AssemblerOptions, ContextRequest};
use strata_core::Event;
use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_log::FsyncPolicy;
use strata_runtime::{BackendOpts, Backends, SealMode};

pub(crate) const BATCH: usize = 1000;
const TENANT: &str = "bench";

pub(crate) async fn run(events: u64, assemblies: usize) -> anyhow::Result<()> {
    println!("strata bench: {events} small events, {assemblies} assemblies per session size");
    println!(
        "machine: {} cores; release build recommended (cargo run --release -p strata-cli -- bench)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!();
    println!("{:<52} {:>14}", "measure", "result");
    raw_figures(events).await?;
    // Sealing is a new deployment's default: each row beside its unsealed twin.
    for (fsync, seal) in [
        (FsyncPolicy::Always, SealMode::Off),
        (FsyncPolicy::Always, SealMode::On),
        (FsyncPolicy::Never, SealMode::Off),
        (FsyncPolicy::Never, SealMode::On),
    ] {
        let dir = tempfile::tempdir()?;
        let opts = BackendOpts {
            fsync,
            seal: Some(seal),
            ..BackendOpts::embedded(dir.path())
        };
        let sealed = if seal == SealMode::On { ", sealed" } else { "" };
        let backends = Backends::open(&opts, "strata bench").await?;
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        let all = small_events(events);
        let started = Instant::now();
        let mut batch = Vec::with_capacity(BATCH);
        for e in all {
            batch.push((e, None));
            if batch.len() == BATCH {
                ingestor
                    .ingest(&Publisher::Operator, std::mem::take(&mut batch))
                    .await?;
            }
        }
        if !batch.is_empty() {
            ingestor.ingest(&Publisher::Operator, batch).await?;
        }
        let ingest = started.elapsed();
        println!(
            "{:<52} {:>10.0} ev/s",
            format!("ingest → file log (batches of {BATCH}, fsync {fsync:?}{sealed})"),
            events as f64 / ingest.as_secs_f64()
        );
        if fsync == FsyncPolicy::Always {
            let started = Instant::now();
            let applied = strata_projector::catch_up(&backends).await?;
            let project = started.elapsed();
            println!(
                "{:<52} {:>10.0} ev/s",
                format!("projector: file log → SQLite (batches of 2000{sealed})"),
                applied as f64 / project.as_secs_f64()
            );
        }
    }

    for size in [1_000u64, 10_000] {
        let dir = tempfile::tempdir()?;
        let opts = BackendOpts {
            fsync: FsyncPolicy::Never,
            ..BackendOpts::embedded(dir.path())
        };
        let backends = Backends::open(&opts, "strata bench").await?;
        let ingestor = Arc::new(Ingestor::new(backends.clone(), IngestOptions::default()));
        let session = format!("bench-{size}");
        let events = coding_session(&session, size);
        for chunk in events.chunks(BATCH) {
            ingestor
                .ingest(
                    &Publisher::Operator,
                    chunk.iter().cloned().map(|e| (e, None)).collect(),
                )
                .await?;
        }
        strata_projector::catch_up(&backends).await?;
        // The default policy, policy 8 (the default before it), policy 3, and the default with
        // its record appended.
        let runs = [
            (false, None),
            (false, Some(strata_core::assembly::POLICY_VERSION_OWN_WORDS)),
            (false, Some(strata_core::assembly::POLICY_VERSION_TURNS)),
            (true, None),
        ];
        for (record, policy) in runs {
            // Recorded assemblies go back to the log; a projector follows them, as in `strata dev`.
            let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
            let follower = if record {
                let projector = strata_projector::Projector::start(
                    backends.clone(),
                    strata_projector::ProjectorOptions::default(),
                )
                .await?;
                Some(tokio::spawn(projector.run(async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                })))
            } else {
                None
            };
            let assembler = Assembler::new(
                backends.clone(),
                ingestor.clone(),
                AssemblerOptions {
                    record_assemblies: record,
                    ..AssemblerOptions::default()
                },
            );
            let mut times = Vec::with_capacity(assemblies);
            let mut phases: Vec<(u64, u64)> = Vec::with_capacity(assemblies);
            let mut last = None;
            for i in 0..assemblies {
                let request = ContextRequest {
                    budget: Some(16_000),
                    // A distinct request each time, so recorded assemblies are distinct events.
                    request: Some(format!("next step {i}")),
                    policy: policy.map(str::to_owned),
                    ..ContextRequest::default()
                };
                let started = Instant::now();
                let a = assembler.context(TENANT, &session, &request).await?;
                times.push(started.elapsed());
                let t = &a.assembly.timings_us;
                phases.push((
                    t.get("snapshot").copied().unwrap_or(0),
                    t.get("assemble").copied().unwrap_or(0),
                ));
                last = Some(a);
            }
            times.sort();
            let p = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
            println!(
                "{:<52} {:>14}",
                format!(
                    "assembly, {size}-event session{}: p50 / p99",
                    match (record, policy) {
                        (true, _) => " + ContextBuilt append".to_owned(),
                        (false, Some(v)) => format!(" ({v})"),
                        (false, None) => String::new(),
                    }
                ),
                format!("{} / {}", ms(p(0.5)), ms(p(0.99)))
            );
            phases.sort();
            let mid = phases[phases.len() / 2];
            if !record {
                println!(
                    "{:<52} {:>14}",
                    "  median split: snapshot read / policy + render",
                    format!(
                        "{:.2} / {:.2} ms",
                        mid.0 as f64 / 1000.0,
                        mid.1 as f64 / 1000.0
                    )
                );
            }
            if let (false, Some(a)) = (record, last) {
                println!(
                    "{:<52} {:>14}",
                    format!("  tokens, {size}-event session: context / transcript"),
                    format!(
                        "{} / {} ({:.1}% fewer)",
                        a.assembly.context_tokens,
                        a.assembly.transcript_tokens,
                        100.0
                            * (1.0
                                - a.assembly.context_tokens as f64
                                    / a.assembly.transcript_tokens.max(1) as f64)
                    )
                );
            }
            if let Some(follower) = follower {
                let _ = stop_tx.send(true);
                follower.await??;
            }
        }
    }
    Ok(())
}

/// Making a session's data key: made, wrapped and stored durably in the embedded key store, once
/// per session on its first sealed event.
async fn data_key_figure() -> anyhow::Result<()> {
    const SESSIONS: usize = 200;
    let dir = tempfile::tempdir()?;
    let store = strata_keys::open(&format!(
        "sqlite://{}",
        dir.path().join("keys.db").display()
    ))
    .await?;
    let master = strata_keys::MasterKey::load_or_create(&dir.path().join("master.key"))?;
    let ring = strata_keys::KeyRing::new(store, master);
    let started = Instant::now();
    for i in 0..SESSIONS {
        ring.sealing_key(TENANT, &format!("keyed-{i}")).await?;
    }
    let made = started.elapsed();
    println!(
        "{:<52} {:>7.2} ms/key",
        "data key made and stored (SQLite key store)",
        made.as_secs_f64() * 1000.0 / SESSIONS as f64
    );
    Ok(())
}

/// Sealing and opening with a data key (AES-256-GCM), beside the plain codec's figures above.
fn sealed_codec_figures(codec: &strata_codec::AvroCodec, all: &[Event]) -> anyhow::Result<()> {
    let key = strata_codec::DataKey::generate();
    let started = Instant::now();
    let sealed: Vec<Vec<u8>> = all
        .iter()
        .map(|e| codec.encode_sealed(e, &key))
        .collect::<Result<_, _>>()?;
    let seal = started.elapsed();
    let started = Instant::now();
    for bytes in &sealed {
        let strata_codec::Record::Sealed(s) = codec.decode_record(bytes)? else {
            anyhow::bail!("a sealed record decoded as plain");
        };
        std::hint::black_box(codec.open(&s, &key)?);
    }
    let open = started.elapsed();
    println!(
        "{:<52} {:>10.0} ev/s",
        format!(
            "Avro encode + seal (~{} bytes/event)",
            sealed.iter().map(Vec::len).sum::<usize>() / sealed.len().max(1)
        ),
        all.len() as f64 / seal.as_secs_f64()
    );
    println!(
        "{:<52} {:>10.0} ev/s",
        "Avro decode + open",
        all.len() as f64 / open.as_secs_f64()
    );
    Ok(())
}

/// The layers under ingest on their own: Avro encode/decode and the file log.
async fn raw_figures(events: u64) -> anyhow::Result<()> {
    let codec = strata_codec::AvroCodec::new();
    let all: Vec<Event> = small_events(events).collect();
    let started = Instant::now();
    let encoded: Vec<Vec<u8>> = all
        .iter()
        .map(|e| codec.encode(e))
        .collect::<Result<_, _>>()?;
    let encode = started.elapsed();
    let started = Instant::now();
    for bytes in &encoded {
        std::hint::black_box(codec.decode(bytes)?);
    }
    let decode = started.elapsed();
    println!(
        "{:<52} {:>10.0} ev/s",
        format!(
            "Avro encode (single-object, ~{} bytes/event)",
            encoded.iter().map(Vec::len).sum::<usize>() / encoded.len().max(1)
        ),
        events as f64 / encode.as_secs_f64()
    );
    println!(
        "{:<52} {:>10.0} ev/s",
        "Avro decode",
        events as f64 / decode.as_secs_f64()
    );
    sealed_codec_figures(&codec, &all)?;
    data_key_figure().await?;
    let dir = tempfile::tempdir()?;
    let log = strata_log::open(
        &format!("file://{}", dir.path().display()),
        strata_log::FileLogOptions {
            fsync: FsyncPolicy::Always,
            ..Default::default()
        },
    )
    .await?;
    let started = Instant::now();
    for (chunk, events) in encoded.chunks(BATCH).zip(all.chunks(BATCH)) {
        let records = chunk
            .iter()
            .zip(events)
            .map(|(value, e)| strata_log::NewRecord {
                key: e.session_id.as_bytes().to_vec(),
                headers: Vec::new(),
                value: value.clone(),
                timestamp_ms: 0,
            })
            .collect();
        log.append(records).await?;
    }
    let append = started.elapsed();
    println!(
        "{:<52} {:>10.0} ev/s",
        format!("file log append alone (batches of {BATCH}, fsync Always)"),
        events as f64 / append.as_secs_f64()
    );
    let started = Instant::now();
    let mut read = 0u64;
    for p in 0..log.partition_count() {
        let mut from = 0;
        loop {
            let records = log.read(p, from, 5000).await?;
            let Some(last) = records.last() else { break };
            from = last.offset + 1;
            read += records.len() as u64;
        }
    }
    println!(
        "{:<52} {:>10.0} ev/s",
        "file log sequential read (CRC-checked)",
        read as f64 / started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// `n` small events (~250 bytes each) spread over sessions of 1,000.
fn small_events(n: u64) -> impl Iterator<Item = Event> {
    small_events_for(TENANT, n)
}

/// [`small_events`] of `tenant`.
pub(crate) fn small_events_for(tenant: &str, n: u64) -> impl Iterator<Item = Event> + '_ {
    (0..n).map(move |i| {
        let session = format!("small-{}", i / 1000);
        Event::from_json(
            json!({
                "event_id": format!("ev-{i}"),
                "tenant_id": tenant,
                "session_id": session,
                "timestamp": "2026-06-03T10:00:00Z",
                "type": "UserPromptSubmitted",
                "payload": {"message_id": format!("m-{i}"), "text": "please run the tests again and tell me which ones fail"},
            }),
            None,
        )
        .expect("valid bench event")
    })
}

/// A coding session of about `n` events: prompts, responses with tool calls, outputs of mixed
/// sizes (some over the artifact threshold), file reads and writes.
pub(crate) fn coding_session(session: &str, n: u64) -> Vec<Event> {
    let mut out = Vec::with_capacity(n as usize);
    let mut i = 0u64;
    let mut push = |ty: &str, payload: serde_json::Value, out: &mut Vec<Event>| {
        i += 1;
        out.push(
            Event::from_json(
                json!({
                    "event_id": format!("{session}-{i}"),
                    "tenant_id": TENANT,
                    "session_id": session,
                    "timestamp": "2026-06-03T10:00:00Z",
                    "type": ty,
                    "payload": payload,
                }),
                None,
            )
            .expect("valid bench event"),
        );
    };
    push(
        "SessionStarted",
        json!({"model": {"provider": "openai", "model": "gpt-4o"}, "context_window_tokens": 128000,
               "reserved_output_tokens": 8000, "system_prompt": "You are a coding agent."}),
        &mut out,
    );
    let mut step = 0u64;
    while (out.len() as u64) < n {
        step += 1;
        if step % 10 == 1 {
            push(
                "UserPromptSubmitted",
                json!({"message_id": format!("u{step}"), "text": format!("Task {step}: fix the next failing test and report back.")}),
                &mut out,
            );
        }
        let call = format!("c{step}");
        push(
            "ModelResponseReceived",
            json!({"message_id": format!("a{step}"), "text": format!("Step {step}: running the tests for module {}.", step % 17),
                   "tool_calls": [{"tool_call_id": call, "name": "run_tests", "args": {"filter": format!("mod{}", step % 17)}}]}),
            &mut out,
        );
        let lines = if step.is_multiple_of(9) { 400 } else { 12 };
        let output: String = (0..lines)
            .map(|l| format!("test mod{}::case_{l} ... ok\n", step % 17))
            .collect();
        push(
            "ToolCallFinished",
            json!({"tool_call_id": call, "output": output, "is_error": step.is_multiple_of(13)}),
            &mut out,
        );
        if step.is_multiple_of(5) {
            push(
                "FileWritten",
                json!({"path": format!("src/mod{}.rs", step % 17), "bytes": 4096}),
                &mut out,
            );
        }
    }
    out.truncate(n as usize);
    out
}
