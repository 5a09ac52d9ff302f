//! The key ring: data keys by subject, unwrapped once and cached; and the record codec that
//! seals and opens log records with them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashlink::LruCache;
use strata_codec::{AvroCodec, DataKey, Record, SealedEvent};
use strata_core::Event;

use crate::master::MasterKey;
use crate::store::{KeyStore, StoredKey};
use crate::{Error, Result};

/// Unwrapped keys kept in memory: enough for every active session of a busy service.
pub const DEFAULT_CACHED_KEYS: usize = 10_000;

/// How long a ring trusts a key it unwrapped before asking the key store again. A key destroyed
/// by another process (a forget) is sealed and opened with for at most this long — much less
/// where the store announces it ([`KeyRing::follow_destroyed`]); a forget waits it out before it
/// deletes the derived copies.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

/// A cached key and when it was read from the key store.
type Cached = (Arc<DataKey>, Instant);

/// The subject name of a session's key.
pub fn session_subject(session_id: &str) -> String {
    format!("session:{session_id}")
}

/// The subject name of an artifact's key: one per content, shared by the sessions that stored
/// it, destroyed when the last of them is forgotten.
pub fn artifact_subject(sha256: &str) -> String {
    format!("artifact:{sha256}")
}

/// Data keys by subject: created on first use, wrapped by the master key in the key store, and
/// held unwrapped in a bounded cache.
#[derive(Debug)]
pub struct KeyRing {
    store: Arc<dyn KeyStore>,
    master: MasterKey,
    cache: Mutex<LruCache<(String, String), Cached>>,
}

impl KeyRing {
    pub fn new(store: Arc<dyn KeyStore>, master: MasterKey) -> KeyRing {
        KeyRing {
            store,
            master,
            cache: Mutex::new(LruCache::new(DEFAULT_CACHED_KEYS)),
        }
    }

    /// Evicts each key the store says another process destroyed, as it is destroyed, for as
    /// long as the ring lives; without such news (SQLite) the cache's trust runs out after
    /// [`KEY_CACHE_TTL`] instead.
    pub async fn follow_destroyed(self: &Arc<Self>) -> Result<()> {
        let Some(mut destroyed) = self.store.watch_destroyed().await? else {
            return Ok(());
        };
        let ring = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(news) = destroyed.recv().await {
                let Some(ring) = ring.upgrade() else { break };
                match news {
                    Some((tenant_id, subject)) => ring.evict(&tenant_id, &subject),
                    None => ring.lock().clear(),
                }
            }
        });
        Ok(())
    }

    /// The key store behind the ring.
    pub fn store(&self) -> &Arc<dyn KeyStore> {
        &self.store
    }

    /// The key that seals `session`'s new events, created when the session has none. Fails
    /// with [`Error::Forgotten`] when the session's key was destroyed.
    pub async fn sealing_key(&self, tenant_id: &str, session_id: &str) -> Result<Arc<DataKey>> {
        self.subject_key(tenant_id, &session_subject(session_id))
            .await?
            .ok_or_else(|| Error::Forgotten {
                tenant_id: tenant_id.to_owned(),
                session_id: session_id.to_owned(),
            })
    }

    /// The key of `subject` (a session's, an artifact's), created when it has none; `None` when
    /// it was destroyed.
    pub async fn subject_key(
        &self,
        tenant_id: &str,
        subject: &str,
    ) -> Result<Option<Arc<DataKey>>> {
        if let Some(key) = self.cached(tenant_id, subject) {
            return Ok(Some(key));
        }
        let stored = match self.store.get(tenant_id, subject).await? {
            Some(stored) => stored,
            None => {
                let fresh = DataKey::generate();
                let candidate = StoredKey {
                    tenant_id: tenant_id.to_owned(),
                    subject: subject.to_owned(),
                    key_id: fresh.id().to_owned(),
                    wrapped: Some(self.master.wrap(&fresh, tenant_id, subject)),
                };
                self.store.insert_if_absent(&candidate).await?
            }
        };
        self.unwrapped(stored)
    }

    /// The key `key_id` of `subject`; `None` when it was destroyed, or is not the subject's.
    pub async fn subject_opening_key(
        &self,
        tenant_id: &str,
        subject: &str,
        key_id: &str,
    ) -> Result<Option<Arc<DataKey>>> {
        if let Some(key) = self.cached(tenant_id, subject).filter(|k| k.id() == key_id) {
            return Ok(Some(key));
        }
        match self.store.get(tenant_id, subject).await? {
            Some(stored) if stored.key_id == key_id => self.unwrapped(stored),
            _ => Ok(None),
        }
    }

    /// Destroys an artifact's key and removes it ([`KeyStore::remove`]): every sealed copy of the
    /// artifact is unreadable, and the same content stored again later gets a new key.
    pub async fn remove_artifact_key(&self, tenant_id: &str, sha256: &str) -> Result<bool> {
        let subject = artifact_subject(sha256);
        self.evict(tenant_id, &subject);
        let destroyed = self.store.remove(tenant_id, &subject).await?;
        self.evict(tenant_id, &subject);
        Ok(destroyed)
    }

    /// Destroys `subject`'s key; returns whether a live key was destroyed.
    pub async fn destroy_subject_key(&self, tenant_id: &str, subject: &str) -> Result<bool> {
        self.evict(tenant_id, subject);
        let destroyed = self.store.destroy(tenant_id, subject).await?;
        self.evict(tenant_id, subject);
        Ok(destroyed)
    }

    /// Makes and stores the keys of the `sessions` that have none, in one durable write, and
    /// caches every session's key: a batch's new sessions then cost one commit, not one each.
    /// [`KeyRing::sealing_key`] stays the authority (a forgotten session is its to report).
    pub async fn prepare_sealing_keys(&self, sessions: &[(&str, &str)]) -> Result<()> {
        let mut fresh = Vec::new();
        for &(tenant_id, session_id) in sessions {
            let subject = session_subject(session_id);
            if self.cached(tenant_id, &subject).is_some() {
                continue;
            }
            match self.store.get(tenant_id, &subject).await? {
                Some(stored) => {
                    self.unwrapped(stored)?;
                }
                None => {
                    let key = DataKey::generate();
                    fresh.push(StoredKey {
                        tenant_id: tenant_id.to_owned(),
                        subject: subject.clone(),
                        key_id: key.id().to_owned(),
                        wrapped: Some(self.master.wrap(&key, tenant_id, &subject)),
                    });
                }
            }
        }
        if !fresh.is_empty() {
            for stored in self.store.insert_many_if_absent(&fresh).await? {
                self.unwrapped(stored)?;
            }
        }
        Ok(())
    }

    /// The key `key_id` of `session`: `None` when it was destroyed (the session was forgotten).
    pub async fn opening_key(
        &self,
        tenant_id: &str,
        session_id: &str,
        key_id: &str,
    ) -> Result<Option<Arc<DataKey>>> {
        let subject = session_subject(session_id);
        if let Some(key) = self
            .cached(tenant_id, &subject)
            .filter(|k| k.id() == key_id)
        {
            return Ok(Some(key));
        }
        let missing = || Error::KeyMissing {
            tenant_id: tenant_id.to_owned(),
            session_id: session_id.to_owned(),
            key_id: key_id.to_owned(),
        };
        let stored = self
            .store
            .get(tenant_id, &subject)
            .await?
            .ok_or_else(missing)?;
        if stored.key_id != key_id {
            return Err(missing());
        }
        self.unwrapped(stored)
    }

    /// Whether `session`'s key was destroyed (the session was forgotten).
    pub async fn is_forgotten(&self, tenant_id: &str, session_id: &str) -> Result<bool> {
        let subject = session_subject(session_id);
        if self.cached(tenant_id, &subject).is_some() {
            return Ok(false);
        }
        Ok(self
            .store
            .get(tenant_id, &subject)
            .await?
            .is_some_and(|k| k.wrapped.is_none()))
    }

    /// Destroys `session`'s key: every sealed record of the session becomes unreadable, in
    /// every copy of the log. Returns whether a live key was destroyed.
    pub async fn destroy_session_key(&self, tenant_id: &str, session_id: &str) -> Result<bool> {
        self.destroy_subject_key(tenant_id, &session_subject(session_id))
            .await
    }

    fn unwrapped(&self, stored: StoredKey) -> Result<Option<Arc<DataKey>>> {
        let Some(wrapped) = &stored.wrapped else {
            self.evict(&stored.tenant_id, &stored.subject);
            return Ok(None);
        };
        let key = Arc::new(self.master.unwrap(
            wrapped,
            &stored.tenant_id,
            &stored.subject,
            &stored.key_id,
        )?);
        self.lock().insert(
            (stored.tenant_id, stored.subject),
            (Arc::clone(&key), Instant::now()),
        );
        Ok(Some(key))
    }

    fn cached(&self, tenant_id: &str, subject: &str) -> Option<Arc<DataKey>> {
        let id = (tenant_id.to_owned(), subject.to_owned());
        let mut cache = self.lock();
        match cache.get(&id) {
            Some((key, read_at)) if read_at.elapsed() < KEY_CACHE_TTL => Some(Arc::clone(key)),
            Some(_) => {
                cache.remove(&id);
                None
            }
            None => None,
        }
    }

    fn evict(&self, tenant_id: &str, subject: &str) {
        self.lock()
            .remove(&(tenant_id.to_owned(), subject.to_owned()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<(String, String), Cached>> {
        // A panic while holding the lock cannot leave the cache inconsistent (each operation is
        // one call on it): keep using it.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Encodes events for the log and decodes log records: sealed with their session's key when
/// sealing is on, opened with it whatever the setting (a log may hold both kinds).
#[derive(Debug, Clone)]
pub struct RecordCodec {
    codec: AvroCodec,
    keys: Option<Arc<KeyRing>>,
    seal: bool,
}

impl Default for RecordCodec {
    fn default() -> Self {
        RecordCodec::plain()
    }
}

impl RecordCodec {
    /// Plain records only: a sealed record is an error ([`strata_codec::Error::Sealed`]).
    pub fn plain() -> RecordCodec {
        RecordCodec {
            codec: AvroCodec::new(),
            keys: None,
            seal: false,
        }
    }

    /// Opens sealed records with `keys`, and seals new ones when `seal` is set.
    pub fn with_keys(keys: Arc<KeyRing>, seal: bool) -> RecordCodec {
        RecordCodec {
            codec: AvroCodec::new(),
            keys: Some(keys),
            seal,
        }
    }

    /// The Avro codec underneath (fingerprints, schema versions, plain decoding).
    pub fn avro(&self) -> &AvroCodec {
        &self.codec
    }

    /// The key ring, when there is one.
    pub fn keys(&self) -> Option<&Arc<KeyRing>> {
        self.keys.as_ref()
    }

    /// Whether new events are sealed.
    pub fn seals(&self) -> bool {
        self.seal && self.keys.is_some()
    }

    /// The log record of `event`: sealed with its session's key when sealing is on.
    pub async fn encode(&self, event: &Event) -> Result<Vec<u8>> {
        let key = self
            .sealing_key(&event.tenant_id, &event.session_id)
            .await?;
        self.encode_with(event, key.as_deref())
    }

    /// Makes the keys of a batch's new sessions in one write when sealing is on
    /// ([`KeyRing::prepare_sealing_keys`]).
    pub async fn prepare_sealing_keys(&self, sessions: &[(&str, &str)]) -> Result<()> {
        match &self.keys {
            Some(keys) if self.seal => keys.prepare_sealing_keys(sessions).await,
            _ => Ok(()),
        }
    }

    /// The key new events of `session` are sealed with; `None` when sealing is off.
    /// [`Error::Forgotten`] when the session was forgotten, sealing or not. For a batch, fetch it once per session and encode with [`RecordCodec::encode_with`].
    pub async fn sealing_key(
        &self,
        tenant_id: &str,
        session_id: &str,
    ) -> Result<Option<Arc<DataKey>>> {
        match &self.keys {
            Some(keys) if self.seal => Ok(Some(keys.sealing_key(tenant_id, session_id).await?)),
            // Not sealing new events, but a forgotten session's id stays refused.
            Some(keys) if keys.is_forgotten(tenant_id, session_id).await? => {
                Err(Error::Forgotten {
                    tenant_id: tenant_id.to_owned(),
                    session_id: session_id.to_owned(),
                })
            }
            _ => Ok(None),
        }
    }

    /// The log record of `event`, sealed with `key` (from [`RecordCodec::sealing_key`]) or
    /// plain when there is none.
    pub fn encode_with(&self, event: &Event, key: Option<&DataKey>) -> Result<Vec<u8>> {
        Ok(match key {
            Some(key) => self.codec.encode_sealed(event, key)?,
            None => self.codec.encode(event)?,
        })
    }

    /// The event of a log record, opened with its session's key when sealed. A record whose
    /// key was destroyed is [`Error::Forgotten`].
    pub async fn decode(&self, bytes: &[u8]) -> Result<Event> {
        match self.codec.decode_record(bytes)? {
            Record::Plain(event) => Ok(event),
            Record::Sealed(sealed) => self.open(&sealed).await,
        }
    }

    async fn open(&self, sealed: &SealedEvent) -> Result<Event> {
        let Some(keys) = &self.keys else {
            return Err(strata_codec::Error::Sealed {
                event_id: sealed.envelope.event_id.clone(),
                key_id: sealed.key_id.clone(),
            }
            .into());
        };
        let envelope = &sealed.envelope;
        let key = keys
            .opening_key(&envelope.tenant_id, &envelope.session_id, &sealed.key_id)
            .await?
            .ok_or_else(|| Error::Forgotten {
                tenant_id: envelope.tenant_id.clone(),
                session_id: envelope.session_id.clone(),
            })?;
        Ok(self.codec.open(sealed, &key)?)
    }
}
