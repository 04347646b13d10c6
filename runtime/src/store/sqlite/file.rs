//! [`SqliteFile`]: a SQLite database file the runtime opens, and how it keeps commits
//! ([`Durability`]) and whom its files admit.

use std::path::{Path, PathBuf};

/// How hard SQLite works to keep a commit through a power loss.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// WAL with `synchronous = FULL`: a committed turn survives a power loss. The default.
    #[default]
    Full,
    /// WAL with `synchronous = NORMAL`: a committed turn survives a crash of the process, but
    /// the last turns before a power loss may be lost. Several times faster on slow disks.
    Normal,
}

/// A SQLite database file the runtime opens itself, with how it keeps commits and the
/// permissions of the files it creates.
///
/// A path stands for one with the defaults, so `.sqlite("shows.db")` is the common form;
/// build one to change them:
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # fn configure() -> solid_objects::Builder {
/// use solid_objects::{Durability, Runtime, SqliteFile};
///
/// Runtime::builder().sqlite(
///     SqliteFile::new("shows.db")
///         .durability(Durability::Normal)
///         .mode(0o640),
/// )
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteFile {
    pub(crate) path: PathBuf,
    pub(crate) durability: Durability,
    pub(crate) mode: u32,
}

impl SqliteFile {
    /// The file at `path` (created if missing), with [`Durability::Full`] and mode `0o600`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            durability: Durability::default(),
            mode: 0o600,
        }
    }

    /// How hard SQLite works to keep a commit through a power loss (default
    /// [`Durability::Full`]).
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The permission bits a new database file gets, and its `-wal` and `-shm` files with it
    /// (default `0o600`: readable and writable by its owner only). Unix only; an existing
    /// file keeps its own.
    #[must_use]
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// What [`Builder::sqlite`](crate::Builder::sqlite) opens: a path (with the defaults), or a
/// [`SqliteFile`].
pub trait IntoSqliteFile {
    /// The file and its settings.
    fn into_sqlite_file(self) -> SqliteFile;
}

impl<P: Into<PathBuf>> IntoSqliteFile for P {
    fn into_sqlite_file(self) -> SqliteFile {
        SqliteFile::new(self)
    }
}

impl IntoSqliteFile for SqliteFile {
    fn into_sqlite_file(self) -> SqliteFile {
        self
    }
}
