//! [`Target`]: the database a URL names, and a builder on it for the operator.

use std::path::PathBuf;
use std::time::Duration;

use solid_objects::{Builder, Runtime};

use crate::{Exit, Failure, Operator};

/// The database a URL names.
pub(crate) enum Target<'u> {
    Postgres(&'u str),
    MySql(&'u str),
    Sqlite(PathBuf),
}

impl<'u> Target<'u> {
    /// Reads `url`; an error never repeats the URL, which may hold a password.
    pub(crate) fn of(url: &'u str) -> Result<Self, Failure> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Self::Postgres(url));
        }
        if url.starts_with("mysql://") {
            return Ok(Self::MySql(url));
        }
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        match url.split_once(':') {
            // A scheme of two letters or more (`C:/..` is a Windows path).
            Some((scheme, _))
                if scheme.len() > 1
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                Err(Failure::new(
                    Exit::Failed,
                    format!(
                        "cannot read the database URL (scheme {scheme:?}): write \
                         sqlite://path/to/actors.db, postgres://user@host/db or \
                         mysql://user@host/db"
                    ),
                ))
            }
            // A URL behind quotes, a space or a bracket (`docker --env-file` keeps the
            // quotes): not a path, and not to be echoed as one.
            _ if url.contains("://") => Err(Failure::new(
                Exit::Failed,
                "cannot read the database URL: it does not start with its scheme (quotes, \
                 spaces or brackets around it?); write sqlite://path/to/actors.db, \
                 postgres://user@host/db or mysql://user@host/db",
            )),
            _ => Ok(Self::Sqlite(PathBuf::from(url))),
        }
    }

    /// Whether this is a SQLite file of no bytes, which SQLite would take for an empty
    /// database.
    fn is_empty_file(&self) -> bool {
        matches!(self, Self::Sqlite(path) if path.metadata().is_ok_and(|file| file.len() == 0))
    }

    /// Whether this is a SQLite file that is missing or empty: `migrate` creates it.
    pub(crate) fn needs_creating(&self) -> bool {
        matches!(self, Self::Sqlite(path) if !path.exists()) || self.is_empty_file()
    }

    /// A builder on this database, for the operator.
    pub(crate) fn builder(&self, connect_timeout: Duration) -> Builder {
        let builder = Runtime::builder()
            .policy(Operator)
            .connect_timeout(connect_timeout);
        match self {
            Self::Postgres(url) => builder.postgres(*url, 2),
            Self::MySql(url) => builder.mysql(*url, 2),
            Self::Sqlite(path) => builder.sqlite(path),
        }
    }

    /// Refuses a SQLite file that is missing or empty (only `migrate` creates one).
    pub(crate) fn require_file(&self) -> Result<(), Failure> {
        let Self::Sqlite(path) = self else {
            return Ok(());
        };
        if !path.is_file() {
            return Err(Failure::new(
                Exit::Failed,
                format!("no SQLite database at {}", path.display()),
            ));
        }
        if self.is_empty_file() {
            return Err(Failure::new(
                Exit::NotOurs,
                format!(
                    "{} is an empty file (0 bytes), not a solid-objects database; nothing was \
                     written (run `solid-objects migrate` to make it one)",
                    path.display()
                ),
            ));
        }
        Ok(())
    }
}
