//! The daemon's SQLite file: checked before it is opened, so a wrong `store.path` is
//! reported as that field with the path, and held by one `systole serve` at a time.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::daemon::config::{Config, ConfigError};
use crate::daemon::DaemonError;

const FIELD: &str = "store.path";

fn refuse(config: &Config, problem: String) -> DaemonError {
    DaemonError::Config(ConfigError { file: config.file.display().to_string(), field: FIELD.to_owned(), problem })
}

/// Checks that `store.path` names a file that exists or can be created: its folder
/// exists and is a folder, and the path itself is not a folder.
///
/// # Errors
/// A config error naming `store.path`, the path and what is wrong (exit status 2).
pub fn check_path(config: &Config) -> Result<(), DaemonError> {
    let path = &config.store_path;
    if path.is_dir() {
        return Err(refuse(
            config,
            format!("{} is a directory; name a file in it, like {}", path.display(), path.join("systole.db").display()),
        ));
    }
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !folder.exists() {
        return Err(refuse(
            config,
            format!("cannot create {}: no such directory {}", path.display(), folder.display()),
        ));
    }
    if !folder.is_dir() {
        return Err(refuse(
            config,
            format!("cannot create {}: {} is not a directory", path.display(), folder.display()),
        ));
    }
    Ok(())
}

/// Held while a daemon runs: an exclusive lock on `<store>.daemon-lock`, which holds the
/// daemon's process id. The operating system drops the lock when the process ends, also
/// after a crash, so a stale file never blocks a start.
pub struct DaemonLock {
    _file: std::fs::File,
}

impl DaemonLock {
    /// Takes the lock, or refuses naming the file and the process that holds it.
    ///
    /// # Errors
    /// Another daemon holds it (exit status 2), or the lock file cannot be written.
    pub fn acquire(config: &Config) -> Result<Self, DaemonError> {
        let path = lock_path(&config.store_path);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|error| refuse(config, format!("cannot create the lock file {}: {error}", path.display())))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() { "another process".to_owned() } else { format!("process {holder}") };
                return Err(refuse(
                    config,
                    format!(
                        "{} is in use by another `systole serve` ({who}, lock file {}); stop it first, or give this \
                         daemon its own store.path",
                        config.store_path.display(),
                        path.display()
                    ),
                ));
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(refuse(config, format!("cannot lock {}: {error}", path.display())));
            }
        }
        let written =
            file.set_len(0).and_then(|()| file.rewind()).and_then(|()| writeln!(file, "{}", std::process::id()));
        if let Err(error) = written {
            return Err(refuse(config, format!("cannot write the lock file {}: {error}", path.display())));
        }
        Ok(Self { _file: file })
    }
}

fn lock_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".daemon-lock");
    PathBuf::from(name)
}
