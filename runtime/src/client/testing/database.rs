//! A database of its own for each test on a PostgreSQL or MySQL server (feature
//! `test-support`), or a temporary SQLite file where no server is named: tests that share a
//! server do not see each other's actors, messages or reminders.

use crate::client::builder::Builder;
use crate::client::shared::Runtime;
use crate::error::{Error, Result};
use crate::store::connect::with_database;
use crate::store::query::Dialect;
use crate::store::test_databases;

/// A database created for one test on a PostgreSQL or MySQL (MariaDB) server, dropped when
/// the value is dropped (or by [`drop_database`](TestDatabase::drop_database)).
///
/// [`Testing::run_due_reminders`](crate::Testing::run_due_reminders) fires every due
/// reminder in its database, and [`Testing::drain`](crate::Testing::drain) runs every ready
/// message: tests that share one database run each other's work. Give each test its own.
///
/// ```no_run
/// # async fn example() -> Result<(), solid_objects::Error> {
/// use solid_objects::{AllowAll, ManualClock, TestDatabase};
///
/// // A server the tests may create databases on, such as
/// // postgres://postgres@localhost/postgres or mysql://root@localhost/mysql.
/// let server = std::env::var("TEST_DATABASE_SERVER").expect("a server URL");
/// let database = TestDatabase::create(&server).await?;
/// let runtime = database
///     .builder(4)
///     .clock(ManualClock::starting_now())
///     .policy(AllowAll)
///     .start()
///     .await?;
/// // ... the test ...
/// runtime.close().await;
/// database.drop_database().await?;
/// # Ok(()) }
/// ```
pub struct TestDatabase {
    /// The server URL it was created through, to drop it through (empty for SQLite).
    server_url: String,
    /// The temporary directory of a SQLite database, removed with it.
    sqlite: Option<tempfile::TempDir>,
    /// Its own URL.
    url: String,
    name: String,
    dropped: bool,
}

/// Its name and whether it was dropped: never its URLs, which may hold the server's password.
impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

impl TestDatabase {
    /// Creates a database with a fresh name (`solid_test_` and a random suffix) on the server
    /// of `server_url` (`postgres://..` or `mysql://..`, naming a database the user may
    /// connect to and a user who may create databases).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a URL of another scheme or of a backend this build left out
    /// (features `postgres`, `mysql`), or for a server that does not answer within 30 s;
    /// the server's error if it refuses.
    pub async fn create(server_url: &str) -> Result<Self> {
        test_databases::server_of(server_url)?;
        let name = format!("solid_test_{}", uuid::Uuid::new_v4().simple());
        let url = with_database(server_url, &name)?;
        test_databases::create(server_url, &name).await?;
        Ok(Self {
            server_url: server_url.to_owned(),
            sqlite: None,
            url,
            name,
            dropped: false,
        })
    }

    /// A database on the server whose URL the environment variable `server_variable` holds
    /// (as [`create`](TestDatabase::create) makes it), or, where it is unset, a SQLite file
    /// in a temporary directory removed with the value: the setup that runs an application's
    /// tests on SQLite by default and on its production server in CI.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), solid_objects::Error> {
    /// use solid_objects::{AllowAll, ManualClock, TestDatabase};
    ///
    /// // SQLite, or with APP_TEST_SERVER=mysql://root@127.0.0.1:3306/mysql a database there.
    /// let database = TestDatabase::from_env("APP_TEST_SERVER").await?;
    /// let runtime = database
    ///     .builder(4)
    ///     .clock(ManualClock::starting_now())
    ///     .policy(AllowAll)
    ///     .start()
    ///     .await?;
    /// // ... the test ...
    /// runtime.close().await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`create`](TestDatabase::create)'s for a server; an I/O error as
    /// [`Error::Config`] if no temporary directory can be made.
    #[cfg(feature = "sqlite")]
    pub async fn from_env(server_variable: &str) -> Result<Self> {
        if let Ok(server_url) = std::env::var(server_variable) {
            return Self::create(&server_url).await;
        }
        let dir = tempfile::tempdir().map_err(|error| {
            Error::Config(format!("cannot make a temporary directory: {error}"))
        })?;
        let path = dir.path().join("test.db");
        Ok(Self {
            server_url: String::new(),
            url: format!("sqlite://{}", path.display()),
            name: "test.db".to_owned(),
            sqlite: Some(dir),
            dropped: false,
        })
    }

    /// The database's URL: the server's, naming this database (`sqlite://` and the file's
    /// path for SQLite).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A runtime builder on this database over a pool of `connections` connections; add the
    /// clock and the policy, then start it.
    pub fn builder(&self, connections: u32) -> Builder {
        let builder = Runtime::builder();
        #[cfg(feature = "sqlite")]
        if let Some(dir) = &self.sqlite {
            return builder.sqlite(dir.path().join(&self.name));
        }
        match test_databases::server_of(&self.url) {
            #[cfg(feature = "postgres")]
            Ok(Dialect::Postgres) => builder.postgres(&self.url, connections),
            #[cfg(feature = "mysql")]
            Ok(Dialect::MySql) => builder.mysql(&self.url, connections),
            // Unreachable: `create` accepted the URL.
            _ => {
                let _ = connections;
                builder
            }
        }
    }

    /// Drops the database, ending any connection still open on it; call it after closing
    /// the runtime ([`Runtime::close`]) to see an error the drop on `Drop` would only log.
    ///
    /// # Errors
    ///
    /// The server's, or [`Error::Config`] if it does not answer within 30 s.
    pub async fn drop_database(mut self) -> Result<()> {
        self.dropped = true;
        if self.sqlite.is_some() {
            return Ok(());
        }
        test_databases::drop(&self.server_url, &self.name).await
    }
}

impl Drop for TestDatabase {
    /// Drops the database if [`drop_database`](TestDatabase::drop_database) did not, on a
    /// thread of its own (a test's async runtime may be a single thread, and busy).
    fn drop(&mut self) {
        if self.dropped || self.sqlite.is_some() {
            return;
        }
        let (server_url, name) = (self.server_url.clone(), self.name.clone());
        let dropping = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| Error::Config(format!("cannot start a runtime: {error}")))?;
            runtime.block_on(test_databases::drop(&server_url, &name))
        });
        match dropping.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(database = %self.name, %error, "the test database was not dropped");
            }
            Err(_) => {
                tracing::warn!(database = %self.name, "dropping the test database panicked");
            }
        }
    }
}
