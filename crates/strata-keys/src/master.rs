//! The master key (key-encryption key): wraps every data key, and is never stored with them.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use rand::RngCore;
use strata_codec::{DataKey, DATA_KEY_LEN, NONCE_LEN};
use zeroize::Zeroize;

use crate::{Error, Result};

/// Version byte of a wrapped key's layout: `1`, a 12-byte nonce, the AES-256-GCM ciphertext of
/// the data key with its tag.
const WRAP_V1: u8 = 1;

/// The key that wraps data keys (a KEK): 32 random bytes kept in a file of their own, as 64 hex
/// digits. A KMS would hold it instead: wrapping and unwrapping are its only two operations.
pub struct MasterKey {
    bytes: [u8; DATA_KEY_LEN],
    path: PathBuf,
}

impl MasterKey {
    /// Reads the master key at `path`.
    pub fn load(path: &Path) -> Result<MasterKey> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let mut text = std::fs::read_to_string(path).map_err(io)?;
        let parsed = hex::decode(text.trim());
        text.zeroize();
        let mut decoded = parsed.map_err(|_| Error::MasterKey {
            path: path.to_owned(),
            what: "is not 64 hex digits",
        })?;
        let bytes =
            <[u8; DATA_KEY_LEN]>::try_from(decoded.as_slice()).map_err(|_| Error::MasterKey {
                path: path.to_owned(),
                what: "is not 64 hex digits (32 bytes)",
            });
        decoded.zeroize();
        warn_if_readable_by_others(path);
        Ok(MasterKey {
            bytes: bytes?,
            path: path.to_owned(),
        })
    }

    /// Reads the master key at `path`, creating it (32 random bytes, readable by its owner
    /// only) when there is none: the embedded default's.
    pub fn load_or_create(path: &Path) -> Result<MasterKey> {
        if path.exists() {
            return Self::load(path);
        }
        let mut bytes = [0u8; DATA_KEY_LEN];
        rand::rng().fill_bytes(&mut bytes);
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let temp = path.with_extension("tmp");
        let mut file = owner_only(&temp).map_err(io)?;
        let mut text = hex::encode(bytes);
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all());
        text.zeroize();
        written.map_err(io)?;
        drop(file);
        // A concurrent creator may have won: keep whichever file is there, never overwrite.
        match std::fs::hard_link(&temp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        let _ = std::fs::remove_file(&temp);
        bytes.zeroize();
        tracing::info!(path = %path.display(), "created a master key");
        Self::load(path)
    }

    /// The file the key was read from (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wraps `key` for `(tenant, subject)`: only this master key unwraps it, and only for them.
    pub(crate) fn wrap(&self, key: &DataKey, tenant: &str, subject: &str) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let aad = wrap_aad(tenant, subject, key.id());
        let ciphertext = self
            .cipher()
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: key.secret(),
                    aad: &aad,
                },
            )
            .expect("a 32-byte key always encrypts");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + ciphertext.len());
        out.push(WRAP_V1);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ciphertext);
        out
    }

    /// Unwraps the data key `key_id` of `(tenant, subject)`.
    pub(crate) fn unwrap(
        &self,
        wrapped: &[u8],
        tenant: &str,
        subject: &str,
        key_id: &str,
    ) -> Result<DataKey> {
        let fail = || Error::Unwrap {
            key_id: key_id.to_owned(),
            master: self.path.clone(),
        };
        let (&version, rest) = wrapped.split_first().ok_or_else(fail)?;
        if version != WRAP_V1 || rest.len() < NONCE_LEN {
            return Err(fail());
        }
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let aad = wrap_aad(tenant, subject, key_id);
        let mut secret = self
            .cipher()
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| fail())?;
        let bytes = <[u8; DATA_KEY_LEN]>::try_from(secret.as_slice()).map_err(|_| fail());
        secret.zeroize();
        Ok(DataKey::from_parts(key_id, bytes?))
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&self.bytes))
    }
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterKey")
            .field("path", &self.path)
            .field("secret", &"<redacted>")
            .finish()
    }
}

fn wrap_aad(tenant: &str, subject: &str, key_id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in ["strata.data-key.v1", tenant, subject, key_id] {
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

#[cfg(unix)]
fn owner_only(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn owner_only(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::create(path)
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "the master key file is readable by others than its owner (chmod 600 it)"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_: &Path) {}
