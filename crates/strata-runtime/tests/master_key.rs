//! Which master key a process uses, and when it refuses to make one.

use strata_runtime::{open_record_codec, BackendOpts, SealMode};

fn sealed(dir: &std::path::Path) -> BackendOpts {
    BackendOpts {
        seal: SealMode::On,
        ..BackendOpts::embedded(dir)
    }
}

#[tokio::test]
async fn the_embedded_default_makes_its_master_key_once_and_never_over_old_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let codec = open_record_codec(&sealed(dir.path()))
        .await
        .expect("first run");
    assert!(codec.seals());
    assert!(dir.path().join("master.key").exists());
    std::fs::remove_file(dir.path().join("master.key")).expect("remove");
    let err = open_record_codec(&sealed(dir.path()))
        .await
        .expect_err("keys.db exists: a new master key could not unwrap its keys");
    assert!(err.to_string().contains("restore the master key"), "{err}");
    assert!(!dir.path().join("master.key").exists(), "none was made");
}

#[tokio::test]
async fn a_shared_key_store_never_gets_a_master_key_made_for_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = BackendOpts {
        keys_url: Some("postgres://127.0.0.1:1/unused".into()),
        ..sealed(dir.path())
    };
    let err = open_record_codec(&opts).await.expect_err("no master key");
    assert!(
        err.to_string()
            .contains("every service needs the same master key"),
        "{err}"
    );
    assert!(!dir.path().join("master.key").exists());
    // Sealing off and no master key: plain records, nothing opened or made.
    let plain = open_record_codec(&BackendOpts::embedded(dir.path()))
        .await
        .expect("plain");
    assert!(!plain.seals() && plain.keys().is_none());
    assert!(!dir.path().join("keys.db").exists());
}
