//! The current identities, shared by every connection and reloaded when the file changes.
//!
//! Reload polls the file once a second and compares its bytes with the last ones read: a
//! small file, no platform-specific watcher, and no dependence on the file system's mtime
//! granularity. A file that no longer parses is logged and the previous identities stay in
//! force, so a bad edit never opens or closes the door by accident.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::identities::{FileError, Identities};

/// How often [`IdentityStore::watch`] looks at the file.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// An identities file that could not be loaded.
#[derive(Debug)]
pub struct LoadError {
    /// The file.
    pub file: PathBuf,
    /// What is wrong, with its path inside the file and its code (`UNREADABLE` when the
    /// file cannot be read).
    pub error: FileError,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "identities file {}: {}", self.file.display(), self.error)
    }
}

impl std::error::Error for LoadError {}

/// The identities in force; cheap to clone (one shared cell).
#[derive(Clone, Debug, Default)]
pub struct IdentityStore {
    current: Arc<RwLock<Arc<Identities>>>,
}

fn read(file: &Path) -> Result<(Vec<u8>, Identities), LoadError> {
    let fail = |error| LoadError { file: file.to_owned(), error };
    let bytes = std::fs::read(file).map_err(|e| {
        fail(FileError { path: String::new(), code: "UNREADABLE", message: e.to_string() })
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let identities = Identities::parse(&text).map_err(fail)?;
    Ok((bytes, identities))
}

impl IdentityStore {
    /// A store holding these identities.
    #[must_use]
    pub fn new(identities: Identities) -> Self {
        Self { current: Arc::new(RwLock::new(Arc::new(identities))) }
    }

    /// A store holding the identities of `file`.
    ///
    /// # Errors
    /// When the file cannot be read or does not validate.
    pub fn load(file: &Path) -> Result<Self, LoadError> {
        read(file).map(|(_, identities)| Self::new(identities))
    }

    /// The identities in force now.
    #[must_use]
    pub fn current(&self) -> Arc<Identities> {
        // A poisoned lock only means a writer panicked between two whole values.
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the identities in force.
    pub fn replace(&self, identities: Identities) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(identities);
    }

    /// Spawns a task that reloads `file` whenever its bytes change, checking every
    /// `interval` ([`RELOAD_INTERVAL`] in servers). Abort the handle to stop it.
    #[must_use]
    pub fn watch(&self, file: PathBuf, interval: Duration) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut last = std::fs::read(&file).ok();
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                let Ok(bytes) = tokio::fs::read(&file).await else { continue };
                if last.as_ref() == Some(&bytes) {
                    continue;
                }
                last = Some(bytes.clone());
                match Identities::parse(&String::from_utf8_lossy(&bytes)) {
                    Ok(identities) => {
                        tracing::info!(file = %file.display(), count = identities.all().len(), "identities reloaded");
                        store.replace(identities);
                    }
                    Err(error) => {
                        tracing::error!(file = %file.display(), %error, "identities file invalid; keeping the previous identities");
                    }
                }
            }
        })
    }
}
