//! `strata rebuild`: the log (embedded or Kafka, read outside any consumer group) from offset 0
//! into a new projection set, verified against the live set at the same offsets, then made
//! current. The old set stays until it is dropped.
//!
//! - Embedded ([`rebuild`]): the new set is `strata.gen-N.db` beside `strata.db`, made current by
//!   rewriting the data directory's store pointer ([`strata_runtime::STORE_POINTER`]) with an
//!   atomic rename. While a rebuild is under way, `rebuild.state` names its set.
//! - PostgreSQL ([`rebuild_postgres`]): the new set is the schema `strata_gen_N` beside the
//!   current one, made current in the database's generation pointer while the live projector's
//!   batches are held (see [`strata_store::postgres::generations`]); the projector and every
//!   reader follow without a restart. `strata_meta.generation.rebuilding` names the set under way.
//!
//! Either way a rebuild started after a crash resumes the set under way, from the offsets it
//! committed with its last batch.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};
use strata_log::EventLog;
use strata_runtime::{current_store_file, DEFAULT_STORE_FILE, STORE_POINTER};
use strata_store::postgres::generations::{PgGenerations, RebuildClaim};
use strata_store::postgres::PgStore;
use strata_store::sqlite::SqliteStore;
use strata_store::{Offsets, ProjectionStore};

use crate::fold::Folder;
use crate::source::{offsets_of, LogReader, Progress, Ticker};
use crate::verify::{compare, compare_moved, Verification};
use crate::{io_err, Error, Result};

/// The file naming the rebuild under way.
pub const STATE_FILE: &str = "rebuild.state";
/// The consumer group whose offsets the projections carry (the projector's).
pub const PROJECTOR_GROUP: &str = "strata-projector";

/// Default ceiling of [`RebuildOptions::fold_workers`]: past a few workers the single SQLite
/// writer, not the fold, sets the pace.
pub const MAX_FOLD_WORKERS: usize = 4;

/// Options of a rebuild.
#[derive(Debug, Clone)]
pub struct RebuildOptions {
    /// Consumer group whose offsets the new set carries (the live projector's).
    pub group: String,
    /// Events folded per store transaction. One batch is written while the next is folded, so
    /// smaller batches overlap more (the first fold and the last write are not overlapped);
    /// 5,000 was the fastest of 1,000 to 20,000 on the bench.
    pub batch_events: usize,
    /// Threads folding sessions in parallel (the set is the same for any number). Defaults to
    /// the machine's cores, at most [`MAX_FOLD_WORKERS`].
    pub fold_workers: usize,
    /// Switch readers when verification passes.
    pub switch: bool,
    /// Longest wait for the live set to reach the rebuilt offsets and hold still.
    pub verify_timeout: Duration,
    /// Test support: stop (as a crash would) once this many events were committed in this run.
    pub stop_after: Option<u64>,
    /// The blob store holding the log's archive (`strata archive`): records the log no longer
    /// keeps (retention) are read from it.
    pub archive: Option<strata_blob::BlobStore>,
    /// Decodes the log's records (opening sealed ones with their keys).
    pub codec: strata_keys::RecordCodec,
}

impl Default for RebuildOptions {
    fn default() -> Self {
        Self {
            group: PROJECTOR_GROUP.into(),
            batch_events: 5_000,
            fold_workers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(MAX_FOLD_WORKERS),
            switch: true,
            verify_timeout: Duration::from_secs(30),
            stop_after: None,
            archive: None,
            codec: strata_keys::RecordCodec::plain(),
        }
    }
}

/// What a rebuild did.
#[derive(Debug, Clone, Serialize)]
pub struct RebuildReport {
    /// The rebuilt set's file in the data directory.
    pub file: String,
    /// The set readers used before.
    pub previous: String,
    /// Whether this run resumed an interrupted rebuild.
    pub resumed: bool,
    /// Whether this run found an interrupted rebuild it could not trust (its set was written
    /// without fsync and the machine restarted since) and started that set over.
    pub started_over: bool,
    /// Events read from the log by this run.
    pub events: u64,
    /// Of which folded.
    pub applied: u64,
    /// Of which skipped as already projected (re-sent records).
    pub duplicates: u64,
    /// Seconds spent folding and writing (before verification).
    pub fold_secs: f64,
    /// `events / fold_secs`.
    pub events_per_sec: f64,
    /// Of `fold_secs`: reading and decoding the log (mostly while the previous chunk folds).
    pub read_secs: f64,
    /// Of `fold_secs`: folding (the core's `apply`, token counting included), wall time over
    /// all workers.
    pub apply_secs: f64,
    /// Of `fold_secs`: waiting for the previous batch's write to finish.
    pub write_wait_secs: f64,
    /// Seconds spent verifying.
    pub verify_secs: f64,
    /// Seconds the live projector's batches were held for the switch (PostgreSQL): the last
    /// catch-up, the comparison of what it moved, and the switch itself.
    pub switch_hold_secs: f64,
    /// The verification; `None` when the run stopped early.
    pub verification: Option<Verification>,
    /// Whether readers now use the rebuilt set.
    pub switched: bool,
    /// Whether the run stopped early ([`RebuildOptions::stop_after`]).
    pub stopped_early: bool,
    /// Undecodable records passed over (the live consumers set them aside in the dead-letter
    /// queue).
    pub undecodable: u64,
    /// Records read from the archive because the log no longer kept them.
    pub archived: u64,
}

/// What `rebuild.state` records about the rebuild under way.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    file: String,
    /// Whether the set is written without fsync ([`SqliteStore::open_bulk`]); absent in states
    /// written before that, whose sets were synced.
    #[serde(default)]
    unsynced: bool,
    /// The boot the unsynced set was written in: after a restart of the machine it may be torn.
    #[serde(default)]
    boot_id: Option<String>,
}

impl State {
    fn new(file: String) -> Self {
        Self {
            file,
            unsynced: true,
            boot_id: boot_id(),
        }
    }

    /// Whether what the set committed can be trusted: a set written without fsync only within
    /// the boot that wrote it (a process crash leaves SQLite's writes in the OS cache; a machine
    /// crash may not).
    fn resumable(&self) -> bool {
        !self.unsynced || (self.boot_id.is_some() && self.boot_id == boot_id())
    }
}

/// This boot of the machine (Linux); `None` elsewhere, where an unsynced set is never resumed.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Deletes a projection set's files, if any.
fn remove_set(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", path.display()));
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(p)(e)),
        }
    }
    Ok(())
}

/// A projection set of a data directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Generation {
    /// Its file in the data directory.
    pub file: String,
    /// Its number (1 for `strata.db`).
    pub number: u64,
    /// Whether readers use it.
    pub current: bool,
    /// Whether a rebuild is writing it.
    pub in_progress: bool,
}

fn generation_number(file: &str) -> Option<u64> {
    if file == DEFAULT_STORE_FILE {
        return Some(1);
    }
    file.strip_prefix("strata.gen-")?
        .strip_suffix(".db")?
        .parse()
        .ok()
}

fn generation_file(n: u64) -> String {
    if n == 1 {
        DEFAULT_STORE_FILE.into()
    } else {
        format!("strata.gen-{n}.db")
    }
}

fn read_state(data_dir: &Path) -> Result<Option<State>> {
    let path = data_dir.join(STATE_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Invalid(format!("corrupt {}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn write_state(data_dir: &Path, state: &State) -> Result<()> {
    let bytes = serde_json::to_vec(state)
        .map_err(|e| Error::Invalid(format!("cannot encode the rebuild state: {e}")))?;
    write_atomic(data_dir, STATE_FILE, &bytes)
}

/// Writes `bytes` to `data_dir/name` atomically: a temporary file, fsynced, renamed over.
fn write_atomic(data_dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = data_dir.join(format!(".{name}.tmp"));
    let path = data_dir.join(name);
    let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    if let Ok(dir) = std::fs::File::open(data_dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// The projection sets of a data directory, oldest first.
pub fn generations(data_dir: &Path) -> Result<Vec<Generation>> {
    let current = current_store_file(data_dir);
    let in_progress = read_state(data_dir)?.map(|s| s.file);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data_dir).map_err(io_err(data_dir))? {
        let entry = entry.map_err(io_err(data_dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(number) = generation_number(&name) {
            out.push(Generation {
                current: name == current,
                in_progress: in_progress.as_deref() == Some(name.as_str()),
                file: name,
                number,
            });
        }
    }
    out.sort_by_key(|g| g.number);
    Ok(out)
}

/// Deletes a projection set that readers no longer use (with its WAL files).
pub fn drop_generation(data_dir: &Path, file: &str) -> Result<()> {
    if generation_number(file).is_none() {
        return Err(Error::Invalid(format!(
            "{file:?} is not a projection set (strata.db or strata.gen-N.db)"
        )));
    }
    if current_store_file(data_dir) == file {
        return Err(Error::Invalid(format!(
            "{file} is the current projection set: readers use it"
        )));
    }
    if read_state(data_dir)?.is_some_and(|s| s.file == file) {
        return Err(Error::Invalid(format!(
            "{file} is being rebuilt: finish the rebuild first"
        )));
    }
    let path = data_dir.join(file);
    if !path.exists() {
        return Err(Error::Invalid(format!("no projection set {file}")));
    }
    remove_set(&path)
}

/// Copies the operator's API keys from the live set into the rebuilt one (keys are not on the log).
async fn copy_api_keys(live: &Path, target: &Path) -> Result<()> {
    let mut conn = SqliteConnectOptions::from_str(&format!("sqlite://{}", target.display()))?
        .connect()
        .await?;
    sqlx::query("ATTACH DATABASE ? AS live")
        .bind(live.display().to_string())
        .execute(&mut conn)
        .await?;
    sqlx::query("INSERT OR IGNORE INTO main.api_keys SELECT * FROM live.api_keys")
        .execute(&mut conn)
        .await?;
    sqlx::query("DETACH DATABASE live")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// Runs `f`, timing it.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, f64) {
    let t = Instant::now();
    let out = f.await;
    (out, t.elapsed().as_secs_f64())
}

/// Waits for a batch being written.
async fn settle(inflight: Option<tokio::task::JoinHandle<strata_store::Result<()>>>) -> Result<()> {
    match inflight {
        Some(h) => Ok(h
            .await
            .map_err(|e| Error::Invalid(format!("the batch writer failed: {e}")))??),
        None => Ok(()),
    }
}

/// Rebuilds the embedded projections of `data_dir` from `log` (see the module docs). `live` is
/// the set readers use now (the one [`current_store_file`] names); the caller holds the data
/// directory lock or runs the live projector in the same process.
pub async fn rebuild(
    data_dir: &Path,
    log: &dyn EventLog,
    live: &dyn ProjectionStore,
    options: &RebuildOptions,
    progress: Option<&mut (dyn FnMut(Progress) + Send)>,
) -> Result<RebuildReport> {
    let target = open_embedded(data_dir).await?;
    run(target, log, live, options, progress).await
}

/// Rebuilds the PostgreSQL projections of the database `url` names from `log` into a new
/// schema (see [`strata_store::postgres::generations`]) while the live projector keeps
/// writing the current one; `live` is a store opened on `url` (it follows the current set). The
/// switch holds the live projector's batches for the last catch-up and comparison only.
pub async fn rebuild_postgres(
    url: &str,
    log: &dyn EventLog,
    live: &dyn ProjectionStore,
    options: &RebuildOptions,
    progress: Option<&mut (dyn FnMut(Progress) + Send)>,
) -> Result<RebuildReport> {
    let generations = PgGenerations::connect(url).await?;
    let previous = generations.current().await?;
    let claim = generations.claim_rebuild().await?;
    let store = Arc::new(PgStore::open_generation(url, &claim.schema).await?);
    // Resumed or not, what the schema committed is durable (or lost with its offsets).
    let target = Target {
        name: claim.schema.clone(),
        previous,
        resumed: claim.resumed,
        started_over: false,
        store: store.clone(),
        kind: TargetKind::Postgres {
            generations,
            _claim: claim,
        },
    };
    run(target, log, live, options, progress).await
}

/// The set a rebuild writes, and where it lives.
struct Target {
    /// File (embedded) or schema (PostgreSQL).
    name: String,
    /// The set readers use now.
    previous: String,
    resumed: bool,
    started_over: bool,
    store: Arc<dyn ProjectionStore>,
    kind: TargetKind,
}

#[expect(clippy::large_enum_variant, reason = "one value per rebuild")]
enum TargetKind {
    Embedded {
        data_dir: PathBuf,
        store: Arc<SqliteStore>,
    },
    Postgres {
        generations: PgGenerations,
        /// Keeps a second rebuild out until this one ends.
        _claim: RebuildClaim,
    },
}

/// Claims (or resumes) the next embedded set of `data_dir`.
async fn open_embedded(data_dir: &Path) -> Result<Target> {
    let previous = current_store_file(data_dir);
    let mut started_over = false;
    let (file, resumed) = match read_state(data_dir)? {
        Some(state) if generation_number(&state.file).is_some() && state.resumable() => {
            (state.file, true)
        }
        Some(state) if generation_number(&state.file).is_some() => {
            // Written without fsync before a restart of the machine: what it committed may be
            // torn, so it starts over (from offset 0, into the same file).
            if state.file == previous {
                return Err(Error::Invalid(format!(
                    "{STATE_FILE} names the current set {}; remove it to start a new rebuild",
                    state.file
                )));
            }
            tracing::warn!(file = %state.file,
                "the machine restarted during the rebuild of this unsynced set: starting it over");
            remove_set(&data_dir.join(&state.file))?;
            write_state(data_dir, &State::new(state.file.clone()))?;
            started_over = true;
            (state.file, false)
        }
        Some(state) => {
            return Err(Error::Invalid(format!(
                "{STATE_FILE} names {:?}, not a projection set",
                state.file
            )))
        }
        None => {
            let next = generations(data_dir)?
                .iter()
                .map(|g| g.number)
                .max()
                .unwrap_or(1)
                + 1;
            let file = generation_file(next);
            write_state(data_dir, &State::new(file.clone()))?;
            (file, false)
        }
    };
    if file == previous {
        return Err(Error::Invalid(format!(
            "{STATE_FILE} names the current set {file}; remove it to start a new rebuild"
        )));
    }
    let path = data_dir.join(&file);
    // No reader uses the new set before the switch, and it is rebuildable by definition: it is
    // written without fsync (see `State::resumable` for resuming it) and made durable once,
    // before the switch.
    let store = Arc::new(SqliteStore::open_bulk(&path.display().to_string()).await?);
    Ok(Target {
        name: file,
        previous,
        resumed,
        started_over,
        store: store.clone(),
        kind: TargetKind::Embedded {
            data_dir: data_dir.to_owned(),
            store,
        },
    })
}

/// Tenants of either set.
async fn tenants(
    live: &dyn ProjectionStore,
    target: &dyn ProjectionStore,
) -> Result<BTreeSet<String>> {
    let mut out: BTreeSet<String> = live.tenants().await?.into_iter().collect();
    out.extend(target.tenants().await?);
    Ok(out)
}

/// Folds what the log holds below `to` and the target has not yet; returns the sessions touched.
async fn fold_up_to(
    folder: &mut Folder,
    reader: &mut LogReader,
    log: &dyn EventLog,
    target: &dyn ProjectionStore,
    to: &Offsets,
    report: &mut RebuildReport,
) -> Result<BTreeSet<(String, String)>> {
    let mut touched = BTreeSet::new();
    reader.extend_to(to);
    while let Some(chunk) = reader.next_chunk(log).await? {
        if let Some((partition, next)) = reader.take_read_to() {
            folder.advance(partition, next);
        }
        let events = chunk.len() as u64;
        touched.extend(
            chunk
                .iter()
                .map(|(_, e)| (e.tenant_id.clone(), e.session_id.clone())),
        );
        let stats = folder.fold(target, chunk).await?;
        report.events += events;
        report.applied += stats.applied;
        report.duplicates += stats.duplicates;
    }
    folder.flush(target).await?;
    Ok(touched)
}

/// The rebuild itself, whatever the target: fold to the head, verify against the live set at
/// the same offsets, switch.
async fn run(
    target: Target,
    log: &dyn EventLog,
    live: &dyn ProjectionStore,
    options: &RebuildOptions,
    progress: Option<&mut (dyn FnMut(Progress) + Send)>,
) -> Result<RebuildReport> {
    crate::fold::warm_tokenizer();
    let store = target.store.clone();
    let start = store.offsets(&options.group).await?;
    let mut folder = Folder::new(&options.group, !start.is_empty(), options.fold_workers);
    let head = offsets_of(&log.end_offsets().await?);
    let mut reader = LogReader::new(&start, &head, options.codec.clone());
    if let Some(blobs) = &options.archive {
        reader = reader.with_archive(blobs.clone());
    }
    let mut ticker = Ticker::new(progress);
    let mut total = reader.remaining();
    let mut report = RebuildReport {
        file: target.name.clone(),
        previous: target.previous.clone(),
        resumed: target.resumed,
        started_over: target.started_over,
        events: 0,
        applied: 0,
        duplicates: 0,
        fold_secs: 0.0,
        events_per_sec: 0.0,
        read_secs: 0.0,
        apply_secs: 0.0,
        write_wait_secs: 0.0,
        verify_secs: 0.0,
        switch_hold_secs: 0.0,
        verification: None,
        switched: false,
        stopped_early: false,
        undecodable: 0,
        archived: 0,
    };

    // Fold to the head, then to wherever the head moved meanwhile. The next chunk is read and
    // decoded while the workers fold the current one, and one batch is written while the next
    // is folded; batches commit in order.
    let mut inflight: Option<tokio::task::JoinHandle<strata_store::Result<()>>> = None;
    loop {
        let (mut next, secs) = timed(reader.next_chunk(log)).await;
        report.read_secs += secs;
        while let Some(chunk) = next? {
            // Before the read ahead below replaces it: where the chunk in hand ends.
            if let Some((partition, next)) = reader.take_read_to() {
                folder.advance(partition, next);
            }
            let events = chunk.len() as u64;
            // A fork may need its session's history from the store: the batch in flight first.
            if chunk
                .iter()
                .any(|(_, e)| matches!(e.payload, strata_core::Payload::BranchForked(_)))
            {
                settle(inflight.take()).await?;
            }
            let ((stats, fold_secs), (following, read_secs)) = tokio::join!(
                timed(folder.fold(store.as_ref(), chunk)),
                timed(reader.next_chunk(log))
            );
            let stats = stats?;
            next = following;
            report.apply_secs += fold_secs;
            report.read_secs += read_secs;
            report.events += events;
            report.applied += stats.applied;
            report.duplicates += stats.duplicates;
            if folder.pending >= options.batch_events {
                let t = Instant::now();
                settle(inflight.take()).await?;
                report.write_wait_secs += t.elapsed().as_secs_f64();
                if let Some(batch) = folder.take_batch() {
                    let s = store.clone();
                    inflight = Some(tokio::spawn(async move { s.commit_batch(batch).await }));
                }
                if options.stop_after.is_some_and(|n| report.events >= n) {
                    settle(inflight.take()).await?;
                    report.stopped_early = true;
                    report.fold_secs = ticker.elapsed().as_secs_f64();
                    return Ok(report);
                }
            }
            ticker.tick(report.events, total, folder.session_count() as u64, 0);
        }
        let t = Instant::now();
        settle(inflight.take()).await?;
        folder.flush(store.as_ref()).await?;
        report.write_wait_secs += t.elapsed().as_secs_f64();
        let head = offsets_of(&log.end_offsets().await?);
        reader.extend_to(&head);
        if reader.remaining() == 0 {
            break;
        }
        total = report.events + reader.remaining();
    }
    report.fold_secs = ticker.elapsed().as_secs_f64();
    report.events_per_sec = report.events as f64 / report.fold_secs.max(1e-9);
    ticker.finish(report.events, total, folder.session_count() as u64, 0);

    // Verify at the live set's offsets: fold up to them, compare, and accept the comparison only
    // if the live set did not move meanwhile.
    let verify_started = Instant::now();
    let deadline = Instant::now() + options.verify_timeout;
    let verification = loop {
        let live_offsets = live.offsets(&options.group).await?;
        let ours = store.offsets(&options.group).await?;
        let behind = ours
            .iter()
            .any(|(p, o)| live_offsets.get(p).copied().unwrap_or(0) < *o);
        if behind {
            if Instant::now() > deadline {
                return Err(Error::VerificationFailed(format!(
                    "the live set stayed behind the log (live offsets {live_offsets:?}, \
                     rebuilt {ours:?}); is its projector running?"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        if live_offsets != ours {
            if Instant::now() > deadline {
                return Err(Error::VerificationFailed(format!(
                    "the rebuilt set does not reach the live set's offsets (live \
                     {live_offsets:?}, rebuilt {ours:?})"
                )));
            }
            fold_up_to(
                &mut folder,
                &mut reader,
                log,
                store.as_ref(),
                &live_offsets,
                &mut report,
            )
            .await?;
            continue;
        }
        let v = compare(live, store.as_ref(), &tenants(live, store.as_ref()).await?).await?;
        if live.offsets(&options.group).await? == live_offsets {
            break v;
        }
        if Instant::now() > deadline {
            return Err(Error::VerificationFailed(
                "the live set never held still long enough to compare".into(),
            ));
        }
    };
    report.verify_secs = verify_started.elapsed().as_secs_f64();
    report.undecodable = reader.undecodable;
    report.archived = reader.archived();
    let ok = verification.ok();
    report.verification = Some(verification.clone());
    if !ok {
        return Err(Error::VerificationFailed(
            verification.differences.join("; "),
        ));
    }
    match &target.kind {
        TargetKind::Embedded {
            data_dir,
            store: sqlite,
        } => {
            let path = data_dir.join(&target.name);
            copy_api_keys(&data_dir.join(&target.previous), &path).await?;
            sqlite.make_durable().await?;
            if options.switch {
                write_atomic(
                    data_dir,
                    STORE_POINTER,
                    format!("{}\n", target.name).as_bytes(),
                )?;
                let state = data_dir.join(STATE_FILE);
                std::fs::remove_file(&state).map_err(io_err(state))?;
                report.switched = true;
            } else {
                // Durable now: a later run may resume it after a restart of the machine too.
                write_state(
                    data_dir,
                    &State {
                        file: target.name.clone(),
                        unsynced: false,
                        boot_id: None,
                    },
                )?;
            }
        }
        TargetKind::Postgres { generations, .. } if options.switch => {
            // Hold the live projector's batches, catch up with the last one it committed and
            // compare what moved; switch, or release it with nothing changed.
            let held = Instant::now();
            let lock = generations.lock_for_switch().await?;
            if lock.current() != target.previous {
                return Err(Error::VerificationFailed(format!(
                    "readers moved to {} during the rebuild (from {})",
                    lock.current(),
                    target.previous
                )));
            }
            let live_offsets = live.offsets(&options.group).await?;
            if live_offsets != store.offsets(&options.group).await? {
                let touched = fold_up_to(
                    &mut folder,
                    &mut reader,
                    log,
                    store.as_ref(),
                    &live_offsets,
                    &mut report,
                )
                .await?;
                let v = compare_moved(live, store.as_ref(), &touched).await?;
                if !v.ok() {
                    report.verification = Some(v.clone());
                    return Err(Error::VerificationFailed(v.differences.join("; ")));
                }
            }
            lock.switch_to(&target.name).await?;
            report.switch_hold_secs = held.elapsed().as_secs_f64();
            report.switched = true;
        }
        // Not switched: the claim stays in strata_meta, and a later run resumes the set.
        TargetKind::Postgres { .. } => {}
    }
    if report.switched {
        tracing::info!(from = %target.previous, to = %target.name,
            "readers switched to the rebuilt projection set");
    }
    Ok(report)
}
