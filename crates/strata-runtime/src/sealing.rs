//! Whether new events are sealed: a property of the deployment, not of a process. The key store
//! every service of a deployment shares records it; the first service to start on a new
//! deployment records it (on, unless told `--seal off`), every later one follows it, and one
//! started with a flag that contradicts it refuses to start. A deployment whose log predates the
//! record keeps what it did: sealed when it made data keys, unsealed otherwise. Changing it is a
//! deliberate act (`strata seal on|off`), never a forgotten flag.

use std::sync::Arc;

use strata_keys::{KeyRing, KeyStore, MasterKey, RecordCodec, Sealing};
use strata_log::EventLog;

use crate::{attempt, BackendOpts, Error, Retrying, SealMode};

/// The codec of log records `opts` names, for a process that reads the log without the other
/// backends (replay, eval): it follows the recorded setting and records none; without the
/// master key it opens nothing sealed.
pub async fn open_record_codec(opts: &BackendOpts) -> Result<RecordCodec, Error> {
    let opened = record_codec(opts, None, &mut None).await?;
    Ok(opened.expect("an open that does not retry is never stopped"))
}

/// The codec of log records: sealing with a key ring when the deployment seals, opening with one
/// whenever the master key exists (a log sealed once stays readable), plain otherwise. A writer
/// (`log` given) records the deployment's setting when none is.
pub(crate) async fn record_codec(
    opts: &BackendOpts,
    log: Option<&dyn EventLog>,
    retry: &mut Option<Retrying<'_>>,
) -> Result<Option<RecordCodec>, Error> {
    let (path, _) = opts.master_key_path();
    let keys_url = opts.keys_url();
    if log.is_none() && !path.exists() {
        return Ok(Some(RecordCodec::plain()));
    }
    if opts.seal == Some(SealMode::On) && !path.exists() && !is_embedded(&keys_url) {
        return Err(shared_store_without_master_key(opts));
    }
    let store = attempt(retry, "key store", &keys_url, || {
        strata_keys::open(&keys_url)
    });
    let Some(store) = store.await? else {
        return Ok(None);
    };
    let seal = match log {
        Some(log) => settle(opts, store.as_ref(), log).await?.on,
        None => store.sealing().await?.is_some_and(|s| s.on),
    };
    let master = match (seal, path.exists()) {
        (false, false) => return Ok(Some(RecordCodec::plain())),
        (true, false) if may_make_master_key(opts, store.as_ref()).await? => {
            MasterKey::load_or_create(&path)?
        }
        (true, false) => return Err(master_key_missing(opts)),
        (_, true) => MasterKey::load(&path)?,
    };
    let ring = Arc::new(KeyRing::new(store, master));
    ring.follow_destroyed().await?;
    Ok(Some(RecordCodec::with_keys(ring, seal)))
}

/// The deployment's setting: the recorded one, else the one this process records (its flag; or
/// on for a new log and a deployment that made data keys before, off for an older unsealed
/// one). A flag that contradicts the record is refused.
async fn settle(
    opts: &BackendOpts,
    store: &dyn KeyStore,
    log: &dyn EventLog,
) -> Result<Sealing, Error> {
    let recorded = match store.sealing().await? {
        Some(recorded) => recorded,
        None => {
            let on = match opts.seal {
                Some(flag) => flag == SealMode::On,
                None => is_new(log).await? || store.has_keys().await?,
            };
            // Checked before recording: a deployment refused for want of a master key can still
            // be started with `--seal off`.
            if on && !opts.master_key_path().0.exists() && !may_make_master_key(opts, store).await?
            {
                return Err(master_key_missing(opts));
            }
            store.settle_sealing(on).await?
        }
    };
    match opts.seal {
        Some(flag) if (flag == SealMode::On) != recorded.on => {
            Err(conflict(&recorded, flag, &opts.keys_url()))
        }
        _ => Ok(recorded),
    }
}

/// A log with no record on it yet: a new deployment.
async fn is_new(log: &dyn EventLog) -> Result<bool, Error> {
    Ok(log.end_offsets().await?.iter().all(|&end| end == 0))
}

/// Only the embedded default's master key may be made, and only while no data key exists that
/// an older one wrapped (a new one could not unwrap it).
async fn may_make_master_key(opts: &BackendOpts, store: &dyn KeyStore) -> Result<bool, Error> {
    let (_, default_path) = opts.master_key_path();
    Ok(default_path && is_embedded(&opts.keys_url()) && !store.has_keys().await?)
}

fn is_embedded(keys_url: &str) -> bool {
    keys_url.starts_with("sqlite://")
}

fn conflict(recorded: &Sealing, flag: SealMode, keys_url: &str) -> Error {
    let does = if recorded.on {
        "seals its log"
    } else {
        "does not seal its log"
    };
    let flag = match flag {
        SealMode::On => "--seal on",
        SealMode::Off => "--seal off",
    };
    Error::Sealing(format!(
        "this deployment {does} (recorded in the key store {} at {}), and {flag} (or \
         STRATA_SEAL) contradicts it: drop the flag, every service follows the deployment; to \
         change the deployment on purpose, run `strata seal {}`",
        strata_store::redact(keys_url),
        recorded.recorded_at,
        if recorded.on { "off" } else { "on" },
    ))
}

fn master_key_missing(opts: &BackendOpts) -> Error {
    let (path, _) = opts.master_key_path();
    if is_embedded(&opts.keys_url()) {
        return Error::Keys(strata_keys::Error::MasterKey {
            path,
            what: "does not exist, and the key store holds keys it wrapped: restore the master \
                   key the keys were wrapped with (or name it with --master-key-file)",
        });
    }
    shared_store_without_master_key(opts)
}

fn shared_store_without_master_key(opts: &BackendOpts) -> Error {
    let (path, _) = opts.master_key_path();
    Error::Sealing(format!(
        "this deployment seals its log (the default for a new one) and the master key {} does \
         not exist: on a shared key store every service needs the same master key, so none is \
         made; make one (64 hex digits: `openssl rand -hex 32`) and give its path to every \
         service with --master-key-file (STRATA_MASTER_KEY_FILE), restore the one the keys were \
         wrapped with, or start a new deployment with --seal off (its sessions cannot be \
         forgotten then)",
        path.display()
    ))
}

/// Changes the deployment's recorded setting (`strata seal on|off`); returns it as recorded. Turning
/// sealing on makes the embedded default's master key when it may.
pub async fn set_sealing(opts: &BackendOpts, on: bool) -> Result<Sealing, Error> {
    let keys_url = opts.keys_url();
    let store = strata_keys::open(&keys_url).await?;
    let (path, _) = opts.master_key_path();
    if on && !path.exists() {
        if !may_make_master_key(opts, store.as_ref()).await? {
            return Err(master_key_missing(opts));
        }
        MasterKey::load_or_create(&path)?;
    }
    Ok(store.set_sealing(on).await?)
}

/// The deployment's recorded setting, without recording one.
pub async fn recorded_sealing(opts: &BackendOpts) -> Result<Option<Sealing>, Error> {
    let keys_url = opts.keys_url();
    if is_embedded(&keys_url) && !keys_url_path_exists(&keys_url) {
        return Ok(None);
    }
    Ok(strata_keys::open(&keys_url).await?.sealing().await?)
}

fn keys_url_path_exists(keys_url: &str) -> bool {
    keys_url
        .strip_prefix("sqlite://")
        .is_some_and(|path| std::path::Path::new(path).exists())
}
