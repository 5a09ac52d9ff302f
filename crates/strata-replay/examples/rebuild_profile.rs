//! Profiling helper: `cargo run --release -p strata-replay --example rebuild_profile -- DIR
//! [EVENTS] [SESSIONS]` populates DIR once (ingest + live projector, as `strata bench replay`
//! does) and then rebuilds it, discarding earlier rebuilt sets first, so the rebuild alone can be
//! timed or profiled repeatedly.

use std::path::PathBuf;

use strata_ingest::{IngestOptions, Ingestor, Publisher};
use strata_replay::rebuild::{self, RebuildOptions};
use strata_runtime::{BackendOpts, Backends, DEFAULT_STORE_FILE, STORE_POINTER};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .ok_or("usage: rebuild_profile DIR [EVENTS] [SESSIONS]")?,
    );
    let events: u64 = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    let sessions: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(200);
    let defaults = RebuildOptions::default();
    let batch_events: usize = std::env::var("BATCH")
        .ok()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(defaults.batch_events);
    let fold_workers: usize = std::env::var("WORKERS")
        .ok()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(defaults.fold_workers);
    std::fs::create_dir_all(&dir)?;
    // Back to the original set: drop every rebuilt one.
    let _ = std::fs::remove_file(dir.join(STORE_POINTER));
    let _ = std::fs::remove_file(dir.join(rebuild::STATE_FILE));
    for g in rebuild::generations(&dir)? {
        if g.file != DEFAULT_STORE_FILE {
            rebuild::drop_generation(&dir, &g.file)?;
        }
    }
    let opts = BackendOpts {
        fsync: strata_log::FsyncPolicy::Never,
        ..BackendOpts::embedded(&dir)
    };
    let backends = Backends::open(&opts, "rebuild_profile").await?;
    if backends.log.end_offsets().await?.iter().sum::<u64>() == 0 {
        let ingestor = Ingestor::new(backends.clone(), IngestOptions::default());
        let per = (events / sessions as u64).max(10);
        let all = strata_replay::workload::sessions("bench", sessions, per);
        for chunk in all.chunks(1000) {
            ingestor
                .ingest(
                    &Publisher::Operator,
                    chunk.iter().cloned().map(|e| (e, None)).collect(),
                )
                .await?;
        }
        strata_projector::catch_up(&backends).await?;
        println!("populated {}", dir.display());
    }
    // The process's CPU time, sampled while the rebuild runs: CPU seconds per event are steadier
    // than wall time on a machine shared with other builds.
    let started = std::time::Instant::now();
    let samples = std::sync::Arc::new(std::sync::Mutex::new(vec![(0.0, cpu_secs())]));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (samples, done) = (samples.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let s = (started.elapsed().as_secs_f64(), cpu_secs());
                samples.lock().expect("sampler").push(s);
            }
        })
    };
    let report = rebuild::rebuild(
        &dir,
        backends.log.as_ref(),
        backends.store.as_ref(),
        &RebuildOptions {
            batch_events,
            fold_workers,
            codec: backends.codec.clone(),
            ..defaults
        },
        None,
    )
    .await?;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.join();
    let samples = samples.lock().expect("sampler");
    let at = |t: f64| {
        samples
            .iter()
            .min_by(|a, b| (a.0 - t).abs().total_cmp(&(b.0 - t).abs()))
            .map_or(0.0, |s| s.1)
    };
    let fold_cpu = at(report.fold_secs) - at(0.0);
    println!(
        "cpu {:.2} s while folding and writing: {:.0} events per cpu-second (load {})",
        fold_cpu,
        report.events as f64 / fold_cpu.max(1e-9),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .next()
            .unwrap_or("?")
    );
    println!(
        "rebuild {} events: {:.0} ev/s in {:.2} s (read {:.2} / fold {:.2} / write wait {:.2}); verify {:.2} s ok={}",
        report.events,
        report.events_per_sec,
        report.fold_secs,
        report.read_secs,
        report.apply_secs,
        report.write_wait_secs,
        report.verify_secs,
        report.verification.as_ref().is_some_and(|v| v.ok())
    );
    Ok(())
}

/// User + system CPU seconds of this process so far (Linux; 0 elsewhere).
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are the 12th and 13th, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
