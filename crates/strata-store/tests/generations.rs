//! Projection sets per generation on PostgreSQL: a rebuild's claim, the switch that waits for
//! the projector's batch in flight and sends it to the new set, readers that follow, and what
//! may be dropped. Runs against the real server (`STRATA_TEST_POSTGRES_URL`); under CI a missing
//! server is a failure.

use std::time::Duration;

use sqlx::{Connection, Executor, PgConnection};
use strata_store::postgres::generations::PgGenerations;
use strata_store::postgres::PgStore;
use strata_store::{Offsets, ProjectionBatch, ProjectionStore};

const GROUP: &str = "strata-projector";

/// A fresh database: its URL, and the admin URL and name to drop it with.
async fn fresh_database() -> Option<(String, String, String)> {
    let admin_url = match std::env::var("STRATA_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var_os("CI").is_some() => {
            panic!("STRATA_TEST_POSTGRES_URL is not set under CI: the PostgreSQL server is missing")
        }
        _ => {
            eprintln!("skipping: STRATA_TEST_POSTGRES_URL is not set");
            return None;
        }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!("strata_gen_test_{}_{nanos}", std::process::id());
    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    admin.close().await.ok();
    let (base, query) = admin_url
        .split_once('?')
        .map_or((admin_url.as_str(), None), |(b, q)| (b, Some(q)));
    let base = &base[..base.rfind('/').unwrap()];
    let url = match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    };
    Some((url, admin_url, name))
}

fn offsets(at: u64) -> ProjectionBatch {
    ProjectionBatch {
        group: GROUP.into(),
        offsets: Offsets::from([(0, at)]),
        ..ProjectionBatch::default()
    }
}

#[tokio::test]
async fn a_switch_holds_the_projector_and_sends_its_batch_to_the_new_set() {
    let Some((url, admin_url, name)) = fresh_database().await else {
        return;
    };
    // A pool larger than the readers below can share: some of them get new connections.
    let sep = if url.contains('?') { '&' } else { '?' };
    let live = std::sync::Arc::new(
        PgStore::open(&format!("{url}{sep}max_connections=8"))
            .await
            .unwrap(),
    );
    live.commit_batch(offsets(5)).await.unwrap();
    live.put_api_key("k1", "acme", "test", None).await.unwrap();

    let gens = PgGenerations::connect(&url).await.unwrap();
    assert_eq!(gens.current().await.unwrap(), "public");
    let claim = gens.claim_rebuild().await.unwrap();
    assert_eq!(
        (claim.schema.as_str(), claim.resumed),
        ("strata_gen_2", false)
    );
    let second = gens.claim_rebuild().await.unwrap_err().to_string();
    assert!(second.contains("another strata rebuild"), "{second}");

    let target = PgStore::open_generation(&url, &claim.schema).await.unwrap();
    assert!(target.offsets(GROUP).await.unwrap().is_empty());
    target.commit_batch(offsets(5)).await.unwrap();
    let listed = gens.list().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|g| (g.schema.as_str(), g.current, g.in_progress))
            .collect::<Vec<_>>(),
        [("public", true, false), ("strata_gen_2", false, true)]
    );

    // The projector's next batch waits for the switch, then lands in the new set.
    let lock = gens.lock_for_switch().await.unwrap();
    assert_eq!(lock.current(), "public");
    let writer = live.clone();
    let batch = tokio::spawn(async move { writer.commit_batch(offsets(7)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!batch.is_finished(), "a batch committed during the switch");
    lock.switch_to(&claim.schema).await.unwrap();
    batch.await.unwrap().unwrap();
    drop(claim);

    // Every connection follows, idle ones and the ones the pool opens for concurrent readers.
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let live = live.clone();
        readers.spawn(async move { live.offsets(GROUP).await.unwrap() });
    }
    while let Some(read) = readers.join_next().await {
        assert_eq!(read.unwrap(), Offsets::from([(0, 7)]));
    }
    assert_eq!(
        target.offsets(GROUP).await.unwrap(),
        Offsets::from([(0, 7)])
    );
    let old = PgStore::open_generation(&url, "public").await.unwrap();
    assert_eq!(old.offsets(GROUP).await.unwrap(), Offsets::from([(0, 5)]));
    assert_eq!(
        live.tenant_for_key("k1").await.unwrap().as_deref(),
        Some("acme"),
        "API keys follow the switch"
    );

    // What may be dropped: not the current set; the old one, whose schema (public) stays.
    let refused = gens.drop_generation("strata_gen_2").await.unwrap_err();
    assert!(refused.to_string().contains("current"), "{refused}");
    let refused = gens.drop_generation("strata_gen_9").await.unwrap_err();
    assert!(
        refused.to_string().contains("no projection set"),
        "{refused}"
    );
    let refused = gens.drop_generation("pg_catalog").await.unwrap_err();
    assert!(
        refused.to_string().contains("not a projection set"),
        "{refused}"
    );
    drop(old);
    gens.drop_generation("public").await.unwrap();
    let listed: Vec<_> = gens.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].schema, "strata_gen_2");

    // A new rebuild takes the next number; one interrupted is resumed.
    let claim = gens.claim_rebuild().await.unwrap();
    assert_eq!(
        (claim.schema.as_str(), claim.resumed),
        ("strata_gen_3", false)
    );
    drop(claim);
    // The advisory lock goes with the claim's connection, which the server notices shortly.
    let mut resumed = None;
    for _ in 0..50 {
        match gens.claim_rebuild().await {
            Ok(c) => {
                resumed = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let resumed = resumed.expect("the claim was released");
    assert_eq!(
        (resumed.schema.as_str(), resumed.resumed),
        ("strata_gen_3", true)
    );

    // A store opened now (a restarted service) migrates and reads the current set.
    let reopened = PgStore::open(&url).await.unwrap();
    assert_eq!(
        reopened.offsets(GROUP).await.unwrap(),
        Offsets::from([(0, 7)])
    );

    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    admin
        .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await
        .unwrap();
}
