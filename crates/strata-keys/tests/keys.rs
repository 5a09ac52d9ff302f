//! Data keys against both key stores (SQLite here, PostgreSQL from `STRATA_TEST_POSTGRES_URL`,
//! which `scripts/services.sh start` sets; required under `CI`).

use std::sync::Arc;

use strata_core::Event;
use strata_keys::{Error, KeyRing, KeyStore, MasterKey, RecordCodec};

fn event(tenant: &str, session: &str, seq: u64, text: &str) -> Event {
    Event::from_json(
        serde_json::json!({
            "event_id": format!("{session}-{seq}"), "tenant_id": tenant, "session_id": session,
            "seq": seq, "timestamp": "2026-06-03T10:00:00Z", "type": "UserPromptSubmitted",
            "payload": {"message_id": format!("m{seq}"), "text": text}
        }),
        None,
    )
    .expect("valid event")
}

fn unique(prefix: &str) -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos();
    format!("{prefix}_{nanos}_{}", std::process::id())
}

/// Both key stores; PostgreSQL only when its URL is set (and then always under CI).
async fn stores(dir: &std::path::Path) -> Vec<(&'static str, Arc<dyn KeyStore>)> {
    let sqlite = strata_keys::open(&format!("sqlite://{}", dir.join("keys.db").display()))
        .await
        .expect("open sqlite key store");
    let mut out = vec![("sqlite", sqlite)];
    match std::env::var("STRATA_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => out.push((
            "postgres",
            strata_keys::open(&url)
                .await
                .expect("open postgres key store"),
        )),
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "STRATA_TEST_POSTGRES_URL is not set under CI (scripts/services.sh start)"
            );
            eprintln!("postgres key store skipped: STRATA_TEST_POSTGRES_URL is not set");
        }
    }
    out
}

#[tokio::test]
async fn a_session_has_one_key_that_seals_opens_and_once_destroyed_forgets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master_path = dir.path().join("master.key");
    for (name, store) in stores(dir.path()).await {
        let tenant = unique("acme");
        let ring = Arc::new(KeyRing::new(
            Arc::clone(&store),
            MasterKey::load_or_create(&master_path).expect("master key"),
        ));
        let codec = RecordCodec::with_keys(Arc::clone(&ring), true);
        assert!(codec.seals());
        let first = event(&tenant, "s1", 1, "MARKER-ONE first words");
        let record = codec.encode(&first).await.expect("seal");
        assert!(
            !contains(&record, "MARKER-ONE"),
            "{name}: sealed record leaks"
        );
        assert_eq!(codec.decode(&record).await.expect("open"), first, "{name}");

        // A ring that starts cold (another service) finds the same key.
        let other = RecordCodec::with_keys(
            Arc::new(KeyRing::new(
                Arc::clone(&store),
                MasterKey::load(&master_path).expect("master key"),
            )),
            true,
        );
        assert_eq!(other.decode(&record).await.expect("open"), first, "{name}");
        let second = event(&tenant, "s1", 2, "MARKER-TWO");
        let second_record = other.encode(&second).await.expect("seal");
        assert_eq!(codec.decode(&second_record).await.expect("open"), second);

        // Another session's key is another key: destroying s1's leaves s2 readable.
        let kept = event(&tenant, "s2", 1, "MARKER-KEPT");
        let kept_record = codec.encode(&kept).await.expect("seal");
        assert!(ring
            .destroy_session_key(&tenant, "s1")
            .await
            .expect("destroy"));
        assert!(!ring
            .destroy_session_key(&tenant, "s1")
            .await
            .expect("destroy again is a no-op"));
        let err = codec
            .decode(&record)
            .await
            .expect_err("forgotten content must not open");
        assert!(matches!(err, Error::Forgotten { .. }), "{name}: {err}");
        // A ring of another service that cached the key before the destroy trusts it for at
        // most KEY_CACHE_TTL (the forget waits that out); a ring that starts after it never can.
        let cold = RecordCodec::with_keys(
            Arc::new(KeyRing::new(
                Arc::clone(&store),
                MasterKey::load(&master_path).expect("master key"),
            )),
            true,
        );
        let err = cold.decode(&record).await.expect_err("forgotten");
        assert!(matches!(err, Error::Forgotten { .. }), "{name}: {err}");
        let err = cold
            .encode(&event(&tenant, "s1", 3, "late"))
            .await
            .expect_err("refused");
        assert!(matches!(err, Error::Forgotten { .. }), "{name}: {err}");
        assert_eq!(
            cold.decode(&kept_record).await.expect("open"),
            kept,
            "{name}"
        );
        assert!(store
            .get(&tenant, "session:s1")
            .await
            .expect("get")
            .is_some_and(|k| k.wrapped.is_none()));
    }
}

#[tokio::test]
async fn concurrent_first_seals_of_a_session_agree_on_one_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master_path = dir.path().join("master.key");
    MasterKey::load_or_create(&master_path).expect("master key");
    for (name, store) in stores(dir.path()).await {
        let tenant = unique("race");
        let rings: Vec<Arc<KeyRing>> = (0..8)
            .map(|_| {
                Arc::new(KeyRing::new(
                    Arc::clone(&store),
                    MasterKey::load(&master_path).expect("master key"),
                ))
            })
            .collect();
        let tasks: Vec<_> = rings
            .iter()
            .map(|ring| {
                let ring = Arc::clone(ring);
                let tenant = tenant.clone();
                tokio::spawn(async move { ring.sealing_key(&tenant, "s").await })
            })
            .collect();
        let mut ids = Vec::new();
        for task in tasks {
            ids.push(task.await.expect("join").expect("key").id().to_owned());
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "{name}: {ids:?}");
    }
}

#[tokio::test]
async fn the_wrong_master_key_or_a_plain_reader_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = strata_keys::open(&format!("sqlite://{}", dir.path().join("k.db").display()))
        .await
        .expect("store");
    let right = dir.path().join("right.key");
    let wrong = dir.path().join("wrong.key");
    let codec = RecordCodec::with_keys(
        Arc::new(KeyRing::new(
            Arc::clone(&store),
            MasterKey::load_or_create(&right).expect("key"),
        )),
        true,
    );
    let e = event("t", "s", 1, "hello");
    let record = codec.encode(&e).await.expect("seal");
    let stranger = RecordCodec::with_keys(
        Arc::new(KeyRing::new(
            store,
            MasterKey::load_or_create(&wrong).expect("key"),
        )),
        true,
    );
    let err = stranger
        .decode(&record)
        .await
        .expect_err("wrong master key");
    assert!(matches!(err, Error::Unwrap { .. }), "{err}");
    assert!(err.to_string().contains("wrong.key"), "{err}");
    let err = RecordCodec::plain()
        .decode(&record)
        .await
        .expect_err("no keys");
    assert!(err.to_string().contains("is sealed"), "{err}");
}

#[test]
fn a_master_key_file_is_created_owner_only_and_garbage_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sub").join("master.key");
    let key = MasterKey::load_or_create(&path).expect("create");
    assert!(!format!("{key:?}").contains(&std::fs::read_to_string(&path).expect("read")[..8]));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
    let text = std::fs::read_to_string(&path).expect("read");
    MasterKey::load_or_create(&path).expect("reload");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        text,
        "never overwritten"
    );
    let bad = dir.path().join("bad.key");
    std::fs::write(&bad, "not a key\n").expect("write");
    let err = MasterKey::load(&bad).expect_err("garbage");
    assert!(err.to_string().contains("64 hex digits"), "{err}");
    let err = MasterKey::load(&dir.path().join("absent.key")).expect_err("absent");
    assert!(err.to_string().contains("absent.key"), "{err}");
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_warm_ring_stops_using_a_key_destroyed_elsewhere_within_its_cache_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = dir.path().join("master.key");
    let store = strata_keys::open(&format!("sqlite://{}", dir.path().join("k.db").display()))
        .await
        .expect("store");
    let ring = |store: &Arc<dyn KeyStore>| {
        Arc::new(KeyRing::new(
            Arc::clone(store),
            MasterKey::load_or_create(&master).expect("master key"),
        ))
    };
    let (service, admin) = (ring(&store), ring(&store));
    let codec = RecordCodec::with_keys(Arc::clone(&service), true);
    let e = event("t", "s", 1, "words");
    let record = codec.encode(&e).await.expect("seal");
    assert!(admin.destroy_session_key("t", "s").await.expect("destroy"));
    // Within the TTL the service still has it (that is what the forget waits out)...
    assert_eq!(codec.decode(&record).await.expect("cached"), e);
    tokio::time::sleep(strata_keys::KEY_CACHE_TTL + std::time::Duration::from_millis(100)).await;
    // ...and after it, neither opens nor seals with it.
    let err = codec.decode(&record).await.expect_err("forgotten");
    assert!(matches!(err, Error::Forgotten { .. }), "{err}");
    let err = codec
        .encode(&event("t", "s", 2, "more"))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::Forgotten { .. }), "{err}");
}

/// On a key store that announces destroyed keys (PostgreSQL), a ring in another process stops
/// using a destroyed key at once, not when its cache's trust runs out.
#[tokio::test]
async fn a_key_destroyed_elsewhere_is_evicted_at_once_where_the_store_announces_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let master = dir.path().join("master.key");
    let mut announcing = 0;
    for (name, store) in stores(dir.path()).await {
        // Another process: a store of its own (its own connections), a ring of its own.
        let other: Arc<dyn KeyStore> = match name {
            "postgres" => strata_keys::open(&std::env::var("STRATA_TEST_POSTGRES_URL").unwrap())
                .await
                .expect("a second postgres key store"),
            _ => continue,
        };
        announcing += 1;
        let master_key = || MasterKey::load_or_create(&master).expect("master key");
        let service = Arc::new(KeyRing::new(Arc::clone(&store), master_key()));
        service.follow_destroyed().await.expect("follow");
        let admin = KeyRing::new(other, master_key());
        let codec = RecordCodec::with_keys(Arc::clone(&service), true);
        let session = unique("evicted");
        let e = event("t", &session, 1, "words");
        let record = codec.encode(&e).await.expect("seal");
        assert_eq!(codec.decode(&record).await.expect("cached"), e);
        let destroyed_at = std::time::Instant::now();
        assert!(admin
            .destroy_session_key("t", &session)
            .await
            .expect("destroy"));
        loop {
            match codec.decode(&record).await {
                Err(Error::Forgotten { .. }) => break,
                Ok(_) => {}
                Err(e) => panic!("{name}: {e}"),
            }
            assert!(
                destroyed_at.elapsed() < strata_keys::KEY_CACHE_TTL / 5,
                "{name}: the key was still in use after {:?}",
                destroyed_at.elapsed()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    if std::env::var_os("CI").is_some() {
        assert_eq!(announcing, 1, "PostgreSQL is tested under CI");
    }
}

#[tokio::test]
async fn a_deployment_records_its_sealing_once_and_changes_it_only_when_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, store) in stores(dir.path()).await {
        if name == "sqlite" {
            assert_eq!(store.sealing().await.expect("read"), None, "a new store");
            assert!(!store.has_keys().await.expect("keys"), "a new store");
            let first = store.settle_sealing(true).await.expect("settle");
            assert!(first.on);
            assert_eq!(store.settle_sealing(false).await.expect("settle"), first);
        }
        // The PostgreSQL store is shared by this file's tests: whatever it held, a change
        // is made only by `set_sealing`, and the first record then stands against a settle.
        let off = store.set_sealing(false).await.expect("set off");
        assert!(!off.on, "{name}");
        assert!(
            !store.settle_sealing(true).await.expect("settle").on,
            "{name}"
        );
        let on = store.set_sealing(true).await.expect("set on");
        assert!(on.on, "{name}");
        assert_eq!(
            store.sealing().await.expect("read"),
            Some(on.clone()),
            "{name}"
        );
        assert_eq!(
            store.settle_sealing(false).await.expect("settle"),
            on,
            "{name}"
        );

        let key = strata_keys::StoredKey {
            tenant_id: unique("t"),
            subject: "session:s".into(),
            key_id: unique("k"),
            wrapped: Some(vec![1; 60]),
        };
        store.insert_if_absent(&key).await.expect("insert");
        assert!(store.has_keys().await.expect("keys"), "{name}");
    }
}

#[tokio::test]
async fn a_batchs_new_sessions_get_their_keys_in_one_write_and_old_ones_keep_theirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, store) in stores(dir.path()).await {
        let master = MasterKey::load_or_create(&dir.path().join("master.key")).expect("master");
        let ring = KeyRing::new(store.clone(), master);
        let tenant = unique("batch");
        let old = ring.sealing_key(&tenant, "old").await.expect("old key");
        ring.prepare_sealing_keys(&[(&tenant, "old"), (&tenant, "new-1"), (&tenant, "new-2")])
            .await
            .expect("prepare");
        assert_eq!(
            ring.sealing_key(&tenant, "old").await.expect("old").id(),
            old.id(),
            "{name}: a session's key is never replaced"
        );
        for session in ["new-1", "new-2"] {
            let key = ring.sealing_key(&tenant, session).await.expect("new");
            let stored = store
                .get(&tenant, &strata_keys::session_subject(session))
                .await
                .expect("get")
                .expect("stored");
            assert_eq!(
                stored.key_id,
                key.id(),
                "{name}: {session}'s key is the stored one"
            );
        }
    }
}
