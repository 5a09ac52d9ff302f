use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::Error;

/// An exclusive lock on a data directory: two processes never write one at once. Released when
/// dropped (or when the process dies: it is an OS file lock).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Locks `dir/LOCK` for `holder`, or fails naming the process that holds it.
    pub fn acquire(dir: &Path, holder: &str) -> Result<DataDirLock, Error> {
        let path = dir.join("LOCK");
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut who = String::new();
                let _ = file.read_to_string(&mut who);
                let who = who.trim();
                return Err(Error::Locked(format!(
                    "data directory {} is in use by another strata process ({}); stop it or use \
                     another --data-dir",
                    dir.display(),
                    if who.is_empty() {
                        "holder unknown"
                    } else {
                        who
                    }
                )));
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "pid {} running {holder}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_named() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path(), "strata dev").unwrap();
        let err = DataDirLock::acquire(dir.path(), "strata import").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("in use"), "{msg}");
        assert!(msg.contains("strata dev"), "{msg}");
        assert!(msg.contains(&std::process::id().to_string()), "{msg}");
        drop(first);
        DataDirLock::acquire(dir.path(), "strata import").unwrap();
    }
}
