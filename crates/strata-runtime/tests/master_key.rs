//! Sealing is the deployment's: who records it, who follows it, who is refused; and which master
//! key a process uses, and when it refuses to make one.

use std::path::Path;

use strata_runtime::{
    open_record_codec, recorded_sealing, set_sealing, BackendOpts, Backends, SealMode,
};

fn with_flag(dir: &Path, seal: Option<SealMode>) -> BackendOpts {
    BackendOpts {
        seal,
        ..BackendOpts::embedded(dir)
    }
}

async fn seals(opts: &BackendOpts) -> Result<bool, strata_runtime::Error> {
    let backends = Backends::open(opts, "test").await?;
    Ok(backends.codec.seals())
}

#[tokio::test]
async fn a_new_data_directory_seals_by_default_and_every_later_process_follows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let default = BackendOpts::embedded(dir.path());
    assert!(seals(&default).await.expect("first start"), "on by default");
    assert!(
        dir.path().join("master.key").exists(),
        "its master key made"
    );
    let recorded = recorded_sealing(&default)
        .await
        .expect("read")
        .expect("recorded");
    assert!(recorded.on);

    // No flag: the record, not a default, decides; the same flag agrees with it.
    assert!(seals(&default).await.expect("second start"));
    assert!(seals(&with_flag(dir.path(), Some(SealMode::On)))
        .await
        .expect("on"));

    // A flag that contradicts the deployment is refused, and says why and what to do.
    let err = seals(&with_flag(dir.path(), Some(SealMode::Off)))
        .await
        .expect_err("--seal off on a sealed deployment");
    let message = err.to_string();
    assert!(
        message.contains("this deployment seals its log"),
        "{message}"
    );
    assert!(message.contains("strata seal off"), "{message}");
    assert!(
        recorded_sealing(&default)
            .await
            .expect("read")
            .expect("kept")
            .on
    );
}

#[tokio::test]
async fn a_deployment_started_with_seal_off_records_it_and_changes_only_on_purpose() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(!seals(&with_flag(dir.path(), Some(SealMode::Off)))
        .await
        .expect("off"));
    assert!(!seals(&BackendOpts::embedded(dir.path()))
        .await
        .expect("follows"));
    let err = seals(&with_flag(dir.path(), Some(SealMode::On)))
        .await
        .expect_err("--seal on on an unsealed deployment");
    assert!(err.to_string().contains("strata seal on"), "{err}");

    let now = set_sealing(&BackendOpts::embedded(dir.path()), true)
        .await
        .expect("strata seal on");
    assert!(now.on);
    assert!(seals(&BackendOpts::embedded(dir.path()))
        .await
        .expect("sealed now"));
}

#[tokio::test]
async fn a_log_from_before_the_record_keeps_what_it_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts::embedded(dir.path());
    let log = strata_log::open(&opts.log_url(), opts.log_options())
        .await
        .expect("log");
    let record = strata_log::NewRecord {
        key: b"s".to_vec(),
        headers: Vec::new(),
        value: b"an event an older version wrote".to_vec(),
        timestamp_ms: 0,
    };
    log.append(vec![record]).await.expect("append");
    drop(log);
    assert!(
        !seals(&opts).await.expect("start"),
        "no data key was ever made: an unsealed deployment stays unsealed"
    );
    assert!(
        !recorded_sealing(&opts)
            .await
            .expect("read")
            .expect("recorded")
            .on
    );
}

#[tokio::test]
async fn the_embedded_default_never_makes_a_master_key_over_wrapped_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts::embedded(dir.path());
    let backends = Backends::open(&opts, "test").await.expect("open");
    let ring = backends.codec.keys().expect("a key ring").clone();
    ring.sealing_key("acme", "s-1").await.expect("a data key");
    drop((ring, backends));

    std::fs::remove_file(dir.path().join("master.key")).expect("remove");
    let err = seals(&opts)
        .await
        .expect_err("a new master key could not unwrap the keys");
    assert!(err.to_string().contains("restore the master key"), "{err}");
    assert!(!dir.path().join("master.key").exists(), "none was made");
}

#[tokio::test]
async fn a_shared_key_store_never_gets_a_master_key_made_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts {
        keys_url: Some("postgres://127.0.0.1:1/unused".into()),
        ..with_flag(dir.path(), Some(SealMode::On))
    };
    let err = seals(&opts).await.expect_err("no master key");
    assert!(
        err.to_string()
            .contains("every service needs the same master key"),
        "{err}"
    );
    assert!(!dir.path().join("master.key").exists());
}

#[tokio::test]
async fn a_reader_without_the_master_key_opens_nothing_and_makes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = open_record_codec(&BackendOpts::embedded(dir.path()))
        .await
        .expect("plain");
    assert!(!plain.seals() && plain.keys().is_none());
    assert!(!dir.path().join("keys.db").exists());
    assert!(!dir.path().join("master.key").exists());
}
