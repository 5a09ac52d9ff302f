//! Artifacts sealed with the key ring: one data key per content of a tenant (subject
//! `artifact:<sha256>`), shared by the sessions that stored it and destroyed by the forget that
//! deletes the artifact, so that a copy left behind (a backup, an object version) is unreadable.
//!
//! Stored after the blob store's marker: the key id (u16 length, then its bytes), then the
//! nonce and AES-256-GCM ciphertext bound to `tenant \0 sha256`.

use std::sync::Arc;

use strata_blob::ArtifactKeys;
use strata_keys::{artifact_subject, KeyRing};

#[derive(Debug)]
pub(crate) struct SealedArtifacts {
    pub(crate) ring: Arc<KeyRing>,
    /// Whether new artifacts are sealed (the deployment seals); sealed ones open either way.
    pub(crate) seal: bool,
}

fn bound(tenant: &str, sha256: &str) -> Vec<u8> {
    [tenant.as_bytes(), &[0], sha256.as_bytes()].concat()
}

#[async_trait::async_trait]
impl ArtifactKeys for SealedArtifacts {
    async fn seal(
        &self,
        tenant: &str,
        sha256: &str,
        plain: &[u8],
    ) -> Result<Option<Vec<u8>>, String> {
        if !self.seal {
            return Ok(None);
        }
        let key = self
            .ring
            .subject_key(tenant, &artifact_subject(sha256))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("its key was destroyed: the artifact was forgotten; store it again later")?;
        let id = key.id().as_bytes();
        let id_len = u16::try_from(id.len()).map_err(|_| "a key id too long")?;
        let sealed = key.seal_bytes(&bound(tenant, sha256), plain);
        Ok(Some([&id_len.to_le_bytes()[..], id, &sealed].concat()))
    }

    async fn open(
        &self,
        tenant: &str,
        sha256: &str,
        sealed: &[u8],
    ) -> Result<Option<Vec<u8>>, String> {
        let malformed = || "its sealed bytes are malformed".to_owned();
        let (len, rest) = sealed.split_at_checked(2).ok_or_else(malformed)?;
        let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
        let (id, ciphertext) = rest.split_at_checked(len).ok_or_else(malformed)?;
        let id = std::str::from_utf8(id).map_err(|_| malformed())?;
        let key = self
            .ring
            .subject_opening_key(tenant, &artifact_subject(sha256), id)
            .await
            .map_err(|e| e.to_string())?;
        let Some(key) = key else {
            return Ok(None);
        };
        key.open_bytes(&bound(tenant, sha256), ciphertext)
            .map(Some)
            .ok_or_else(|| "its sealed bytes do not open with its key (tampered or moved)".into())
    }
}
