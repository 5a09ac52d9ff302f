//! Which failures to open a store are worth retrying ([`strata_store::Error::is_transient`]):
//! a service retries those at startup and exits at once on the others. The cases that need a
//! running server use `STRATA_TEST_POSTGRES_URL` (skipped with a message without it, except
//! under `CI`).

use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

#[tokio::test]
async fn an_unreachable_server_fails_at_once_with_the_reason_and_is_transient() {
    let url = format!("postgres://strata:hunter2@127.0.0.1:{}/db", free_port());
    let started = Instant::now();
    let err = strata_store::open(&url).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        err.to_string()
            .to_lowercase()
            .contains("connection refused"),
        "{err}"
    );
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    // Not the pool's acquire timeout (10 s): the open says at once why it failed.
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
}

#[tokio::test]
async fn a_malformed_url_is_not_transient() {
    for url in [
        "mysql://strata:hunter2@127.0.0.1/db",
        "postgres://strata:hunter2@127.0.0.1:1/db?max_connections=many",
        "postgres://strata:hunter2@127.0.0.1:port/db",
    ] {
        let err = strata_store::open(url).await.unwrap_err();
        assert!(!err.is_transient(), "{url}: {err}");
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    }
}

#[tokio::test]
async fn a_missing_database_is_not_transient() {
    let Some(admin) = std::env::var("STRATA_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "STRATA_TEST_POSTGRES_URL is not set under CI (scripts/services.sh start)"
        );
        eprintln!("skipping: STRATA_TEST_POSTGRES_URL is not set");
        return;
    };
    let (server, _) = admin.rsplit_once('/').expect("postgres://HOST/DATABASE");
    let err = strata_store::open(&format!("{server}/strata_no_such_database"))
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");
}
