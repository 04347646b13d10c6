//! How one statement runs on any backend: its text, its bound values, the connection it runs
//! on, and the rows it reads.
//!
//! The statement files (`instances.rs`, `messages.rs`, ...) write each statement once, as a
//! named item, and run it through a [`Query`] on an [`On`]: a backend contributes only its
//! connections. Where backends spell a statement differently, the statement's item is a
//! function of the [`Dialect`], spelled as `dialect.rs` says: the one mechanism for dialect
//! differences.
//!
//! Statements are written with numbered parameters (`$1`), bound in that order; the MySQL
//! connection runs them with positional `?` parameters, as its `statement.rs` spells them
//! once per process. Every statement is a `&'static str`, so sqlx prepares it once per connection and
//! finds it again in its statement cache.

use std::borrow::Cow;

use sqlx::{ColumnIndex, Database, Decode, Encode, Type};

pub(crate) use super::dialect::Dialect;

/// A value bound to a statement, kept until it runs.
#[derive(Debug, Clone)]
pub(crate) enum Value<'q> {
    Text(Option<Cow<'q, str>>),
    Integer(Option<i64>),
    Boolean(Option<bool>),
}

impl<'q> From<&'q str> for Value<'q> {
    fn from(text: &'q str) -> Self {
        Self::Text(Some(Cow::Borrowed(text)))
    }
}

impl<'q> From<&'q String> for Value<'q> {
    fn from(text: &'q String) -> Self {
        Self::Text(Some(Cow::Borrowed(text)))
    }
}

impl From<String> for Value<'_> {
    fn from(text: String) -> Self {
        Self::Text(Some(Cow::Owned(text)))
    }
}

impl<'q> From<Option<&'q str>> for Value<'q> {
    fn from(text: Option<&'q str>) -> Self {
        Self::Text(text.map(Cow::Borrowed))
    }
}

impl From<Option<String>> for Value<'_> {
    fn from(text: Option<String>) -> Self {
        Self::Text(text.map(Cow::Owned))
    }
}

impl From<i64> for Value<'_> {
    fn from(integer: i64) -> Self {
        Self::Integer(Some(integer))
    }
}

impl From<&i64> for Value<'_> {
    fn from(integer: &i64) -> Self {
        Self::Integer(Some(*integer))
    }
}

impl From<Option<i64>> for Value<'_> {
    fn from(integer: Option<i64>) -> Self {
        Self::Integer(integer)
    }
}

impl From<bool> for Value<'_> {
    fn from(boolean: bool) -> Self {
        Self::Boolean(Some(boolean))
    }
}

impl From<Option<bool>> for Value<'_> {
    fn from(boolean: Option<bool>) -> Self {
        Self::Boolean(boolean)
    }
}

/// A statement's text.
enum Text {
    /// One of the store's named statements, with numbered parameters.
    Named(&'static str),
    /// A statement built at run time (a multi-row insert), with the backend's placeholders
    /// ([`Dialect::push_placeholder`]) bound in order.
    Built(String),
}

/// A statement and its bound values.
#[must_use = "a query does nothing until it runs"]
pub(crate) struct Query<'q> {
    text: Text,
    values: Vec<Value<'q>>,
}

/// Room for the values of most statements, allocated once.
const VALUES_PER_STATEMENT: usize = 9;

/// Like `sqlx::query`, for one of the store's named statements.
pub(crate) fn query<'q>(sql: &'static str) -> Query<'q> {
    Query {
        text: Text::Named(sql),
        values: Vec::with_capacity(VALUES_PER_STATEMENT),
    }
}

/// A statement built at run time, its placeholders the backend's ([`Dialect::push_placeholder`]).
pub(crate) fn built<'q>(sql: String, values: Vec<Value<'q>>) -> Query<'q> {
    Query {
        text: Text::Built(sql),
        values,
    }
}

/// What a statement that returns no rows did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Executed {
    /// The rows it changed (on MySQL: the rows it found).
    pub(crate) rows_affected: u64,
    /// The id MySQL gave the first row it inserted (0 for none, and on other backends).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) last_insert_id: u64,
}

/// Where a statement runs: a transaction's connection, or the store's read pool.
pub(crate) enum On<'e> {
    #[cfg(feature = "sqlite")]
    Sqlite(&'e mut sqlx::SqliteConnection),
    #[cfg(feature = "sqlite")]
    SqlitePool(&'e sqlx::SqlitePool),
    #[cfg(feature = "postgres")]
    Postgres(&'e mut sqlx::PgConnection),
    /// The pool, and what to tell when one of its connections turns out lost.
    #[cfg(feature = "postgres")]
    PostgresPool(&'e sqlx::PgPool, &'e (dyn Fn() + Sync)),
    #[cfg(feature = "mysql")]
    MySql(&'e mut sqlx::MySqlConnection),
    /// The pool, and what to tell when one of its connections turns out lost.
    #[cfg(feature = "mysql")]
    MySqlPool(&'e sqlx::MySqlPool, &'e (dyn Fn() + Sync)),
    /// Where a statement of a store that wraps another runs, once its [`Gate`] lets it.
    #[cfg(feature = "simulation")]
    Gated(&'e dyn Gate, Box<On<'e>>),
}

impl On<'_> {
    /// The SQL spoken where statements run.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            #[cfg(feature = "sqlite")]
            On::Sqlite(_) | On::SqlitePool(_) => Dialect::Sqlite,
            #[cfg(feature = "postgres")]
            On::Postgres(_) | On::PostgresPool(..) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            On::MySql(_) | On::MySqlPool(..) => Dialect::MySql,
            #[cfg(feature = "simulation")]
            On::Gated(_, inner) => inner.dialect(),
        }
    }
}

/// What a statement of a store that wraps another (the simulation's) waits for first: the
/// wrapping store decides whether it runs, fails or never answers.
#[cfg(feature = "simulation")]
#[async_trait::async_trait]
pub(crate) trait Gate: Send + Sync {
    /// Waits until the statement may run, or fails it; what it returns is held while the
    /// statement runs.
    async fn statement(&self) -> sqlx::Result<Box<dyn Send>>;
}

/// A row as a backend returned it.
pub(crate) enum Row {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::sqlite::SqliteRow),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::postgres::PgRow),
    #[cfg(feature = "mysql")]
    MySql(sqlx::mysql::MySqlRow),
}

/// A sqlx query of `DB` for `sql`, with `values` bound in the order given (`None`: a `NULL`).
fn bound<'q, DB>(
    sql: &'q str,
    values: impl Iterator<Item = Option<&'q Value<'q>>>,
) -> sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>
where
    DB: Database,
    Option<&'q str>: Encode<'q, DB> + Type<DB>,
    Option<i64>: Encode<'q, DB> + Type<DB>,
    Option<bool>: Encode<'q, DB> + Type<DB>,
{
    let mut query = sqlx::query::<DB>(sql);
    for value in values {
        query = match value {
            Some(Value::Text(text)) => query.bind(text.as_deref()),
            Some(Value::Integer(integer)) => query.bind(*integer),
            Some(Value::Boolean(boolean)) => query.bind(*boolean),
            None => query.bind(None::<i64>),
        };
    }
    query
}

impl<'q> Query<'q> {
    /// Binds the value of the next parameter number (`$1`, then `$2`, ..).
    pub(crate) fn bind(mut self, value: impl Into<Value<'q>>) -> Self {
        self.values.push(value.into());
        self
    }

    /// The text as the standard backends (SQLite, PostgreSQL) run it.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    fn standard<DB>(&self) -> sqlx::query::Query<'_, DB, <DB as Database>::Arguments<'_>>
    where
        DB: Database,
        for<'a> Option<&'a str>: Encode<'a, DB> + Type<DB>,
        for<'a> Option<i64>: Encode<'a, DB> + Type<DB>,
        for<'a> Option<bool>: Encode<'a, DB> + Type<DB>,
    {
        let sql = match &self.text {
            Text::Named(sql) => sql,
            Text::Built(sql) => sql.as_str(),
        };
        bound(sql, self.values.iter().map(Some))
    }

    /// The text as MySQL runs it: a named statement spelled with `?`, each value bound once
    /// per `?` that takes it.
    #[cfg(feature = "mysql")]
    fn mysql(&self) -> sqlx::query::Query<'_, sqlx::MySql, sqlx::mysql::MySqlArguments> {
        match &self.text {
            Text::Named(sql) => {
                let spelled = super::mysql::statement::spelled(sql);
                bound(
                    &spelled.sql,
                    spelled.order.iter().map(|&index| self.values.get(index)),
                )
            }
            Text::Built(sql) => bound(sql, self.values.iter().map(Some)),
        }
    }

    /// Runs a statement that returns no rows.
    pub(crate) async fn execute(self, on: On<'_>) -> sqlx::Result<Executed> {
        match on {
            #[cfg(feature = "sqlite")]
            On::Sqlite(connection) => Ok(standard_done(
                self.standard().execute(connection).await?.rows_affected(),
            )),
            #[cfg(feature = "sqlite")]
            On::SqlitePool(pool) => Ok(standard_done(
                self.standard().execute(pool).await?.rows_affected(),
            )),
            #[cfg(feature = "postgres")]
            On::Postgres(connection) => Ok(standard_done(
                self.standard().execute(connection).await?.rows_affected(),
            )),
            #[cfg(feature = "postgres")]
            On::PostgresPool(pool, _) => Ok(standard_done(
                self.standard().execute(pool).await?.rows_affected(),
            )),
            #[cfg(feature = "simulation")]
            On::Gated(gate, on) => {
                let _held = gate.statement().await?;
                Box::pin(self.execute(*on)).await
            }
            #[cfg(feature = "mysql")]
            On::MySql(connection) => Ok(mysql_done(&self.mysql().execute(connection).await?)),
            #[cfg(feature = "mysql")]
            On::MySqlPool(pool, _) => {
                let mut connection = super::mysql::statement::Borrowed::acquire(pool).await?;
                let done = self.mysql().execute(connection.get()).await;
                connection.finish(done).map(|done| mysql_done(&done))
            }
        }
    }

    /// Runs a statement and reads its first row, if any.
    pub(crate) async fn fetch_optional(self, on: On<'_>) -> sqlx::Result<Option<Row>> {
        match on {
            #[cfg(feature = "sqlite")]
            On::Sqlite(connection) => Ok(self
                .standard()
                .fetch_optional(connection)
                .await?
                .map(Row::Sqlite)),
            #[cfg(feature = "sqlite")]
            On::SqlitePool(pool) => {
                Ok(self.standard().fetch_optional(pool).await?.map(Row::Sqlite))
            }
            #[cfg(feature = "postgres")]
            On::Postgres(connection) => Ok(self
                .standard()
                .fetch_optional(connection)
                .await?
                .map(Row::Postgres)),
            #[cfg(feature = "postgres")]
            On::PostgresPool(pool, lost) => Ok(read_on_pool(
                pool.options().get_max_connections(),
                lost,
                || self.standard().fetch_optional(pool),
            )
            .await?
            .map(Row::Postgres)),
            #[cfg(feature = "simulation")]
            On::Gated(gate, on) => {
                let _held = gate.statement().await?;
                Box::pin(self.fetch_optional(*on)).await
            }
            #[cfg(feature = "mysql")]
            On::MySql(connection) => Ok(self
                .mysql()
                .fetch_optional(connection)
                .await?
                .map(Row::MySql)),
            #[cfg(feature = "mysql")]
            On::MySqlPool(pool, lost) => {
                let query = &self;
                let read = || async move {
                    let mut connection = super::mysql::statement::Borrowed::acquire(pool).await?;
                    let done = query.mysql().fetch_optional(connection.get()).await;
                    connection.finish(done)
                };
                let connections = pool.options().get_max_connections();
                Ok(read_on_pool(connections, lost, read).await?.map(Row::MySql))
            }
        }
    }

    /// Runs a statement and reads its first row.
    pub(crate) async fn fetch_one(self, on: On<'_>) -> sqlx::Result<Row> {
        self.fetch_optional(on)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// Runs a statement and reads every row.
    pub(crate) async fn fetch_all(self, on: On<'_>) -> sqlx::Result<Vec<Row>> {
        match on {
            #[cfg(feature = "sqlite")]
            On::Sqlite(connection) => Ok(rows(
                self.standard().fetch_all(connection).await?,
                Row::Sqlite,
            )),
            #[cfg(feature = "sqlite")]
            On::SqlitePool(pool) => Ok(rows(self.standard().fetch_all(pool).await?, Row::Sqlite)),
            #[cfg(feature = "postgres")]
            On::Postgres(connection) => Ok(rows(
                self.standard().fetch_all(connection).await?,
                Row::Postgres,
            )),
            #[cfg(feature = "postgres")]
            On::PostgresPool(pool, lost) => Ok(rows(
                read_on_pool(pool.options().get_max_connections(), lost, || {
                    self.standard().fetch_all(pool)
                })
                .await?,
                Row::Postgres,
            )),
            #[cfg(feature = "simulation")]
            On::Gated(gate, on) => {
                let _held = gate.statement().await?;
                Box::pin(self.fetch_all(*on)).await
            }
            #[cfg(feature = "mysql")]
            On::MySql(connection) => {
                Ok(rows(self.mysql().fetch_all(connection).await?, Row::MySql))
            }
            #[cfg(feature = "mysql")]
            On::MySqlPool(pool, lost) => {
                let query = &self;
                let read = || async move {
                    let mut connection = super::mysql::statement::Borrowed::acquire(pool).await?;
                    let done = query.mysql().fetch_all(connection.get()).await;
                    connection.finish(done)
                };
                let connections = pool.options().get_max_connections();
                Ok(rows(
                    read_on_pool(connections, lost, read).await?,
                    Row::MySql,
                ))
            }
        }
    }

    /// Runs a statement and reads its first row, if any, as `decode` reads it.
    pub(crate) async fn fetch_optional_row<T>(
        self,
        on: On<'_>,
        decode: fn(&Row) -> crate::error::Result<T>,
    ) -> crate::error::Result<Option<T>> {
        self.fetch_optional(on)
            .await?
            .as_ref()
            .map(decode)
            .transpose()
    }

    /// Runs a statement and reads every row as `decode` reads it.
    pub(crate) async fn fetch_rows<T>(
        self,
        on: On<'_>,
        decode: fn(&Row) -> crate::error::Result<T>,
    ) -> crate::error::Result<Vec<T>> {
        self.fetch_all(on).await?.iter().map(decode).collect()
    }

    /// Runs a statement and reads the first column of its first row.
    pub(crate) async fn fetch_scalar<T: Column>(self, on: On<'_>) -> sqlx::Result<T> {
        get(&self.fetch_one(on).await?, 0)
    }

    /// Runs a statement and reads the first column of its first row, if it has one.
    pub(crate) async fn fetch_optional_scalar<T: Column>(
        self,
        on: On<'_>,
    ) -> sqlx::Result<Option<T>> {
        self.fetch_optional(on)
            .await?
            .map(|row| get(&row, 0))
            .transpose()
    }

    /// Runs a statement and reads the first column of every row.
    pub(crate) async fn fetch_all_scalars<T: Column>(self, on: On<'_>) -> sqlx::Result<Vec<T>> {
        self.fetch_all(on)
            .await?
            .iter()
            .map(|row| get(row, 0))
            .collect()
    }
}

/// Runs a read on a server's pool of `connections`, again on another connection while the one
/// it took turns out lost (the pool does not ping a connection it used a moment ago, so a
/// server that ended its sessions shows at the read): a read changes nothing and can always
/// run again, as many times as the pool has connections (plus one). `lost` is told of each
/// lost connection.
#[cfg(any(feature = "postgres", feature = "mysql"))]
async fn read_on_pool<T, F, Fut>(
    connections: u32,
    lost: &(dyn Fn() + Sync),
    read: F,
) -> sqlx::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = sqlx::Result<T>>,
{
    let mut tries = connections;
    loop {
        match read().await {
            Err(error) if tries > 0 && super::errors::is_connection_lost(&error) => {
                tracing::debug!(%error, "a pooled connection was lost; reading on another");
                lost();
                tries -= 1;
            }
            read => return read,
        }
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn standard_done(rows_affected: u64) -> Executed {
    Executed {
        rows_affected,
        last_insert_id: 0,
    }
}

#[cfg(feature = "mysql")]
fn mysql_done(done: &sqlx::mysql::MySqlQueryResult) -> Executed {
    Executed {
        rows_affected: done.rows_affected(),
        last_insert_id: done.last_insert_id(),
    }
}

fn rows<R>(rows: Vec<R>, wrap: fn(R) -> Row) -> Vec<Row> {
    rows.into_iter().map(wrap).collect()
}

/// Which column of a row: by name, or by position.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Index<'a> {
    Name(&'a str),
    Position(usize),
}

impl<'a> From<&'a str> for Index<'a> {
    fn from(name: &'a str) -> Self {
        Self::Name(name)
    }
}

impl From<usize> for Index<'_> {
    fn from(position: usize) -> Self {
        Self::Position(position)
    }
}

/// A column's value as the store reads it: text, integers and their `NULL`able forms.
///
/// MySQL marks text in a binary collation (`utf8mb4_nopad_bin`, which keeps ids byte-exact)
/// as binary, and sqlx reads no binary column as a `String`: text is read there through the
/// MySQL backend's own text type.
pub(crate) trait Column: Sized {
    /// The column `index` of `row`.
    fn read(row: &Row, index: Index<'_>) -> sqlx::Result<Self>;
}

/// One column of `row`.
pub(crate) fn get<'a, T: Column>(row: &Row, index: impl Into<Index<'a>>) -> sqlx::Result<T> {
    T::read(row, index.into())
}

/// A column of a backend's own row, decoded as sqlx decodes `T`.
fn decoded<'r, R, T>(row: &'r R, index: Index<'_>) -> sqlx::Result<T>
where
    R: sqlx::Row,
    T: Decode<'r, R::Database> + Type<R::Database>,
    for<'a> &'a str: ColumnIndex<R>,
    usize: ColumnIndex<R>,
{
    match index {
        Index::Name(name) => row.try_get(name),
        Index::Position(position) => row.try_get(position),
    }
}

impl Column for i64 {
    fn read(row: &Row, index: Index<'_>) -> sqlx::Result<Self> {
        match row {
            #[cfg(feature = "sqlite")]
            Row::Sqlite(row) => decoded(row, index),
            #[cfg(feature = "postgres")]
            Row::Postgres(row) => decoded(row, index),
            #[cfg(feature = "mysql")]
            Row::MySql(row) => decoded(row, index),
        }
    }
}

impl Column for Option<i64> {
    fn read(row: &Row, index: Index<'_>) -> sqlx::Result<Self> {
        match row {
            #[cfg(feature = "sqlite")]
            Row::Sqlite(row) => decoded(row, index),
            #[cfg(feature = "postgres")]
            Row::Postgres(row) => decoded(row, index),
            #[cfg(feature = "mysql")]
            Row::MySql(row) => decoded(row, index),
        }
    }
}

impl Column for String {
    fn read(row: &Row, index: Index<'_>) -> sqlx::Result<Self> {
        match row {
            #[cfg(feature = "sqlite")]
            Row::Sqlite(row) => decoded(row, index),
            #[cfg(feature = "postgres")]
            Row::Postgres(row) => decoded(row, index),
            #[cfg(feature = "mysql")]
            Row::MySql(row) => {
                decoded::<_, super::mysql::text::Text>(row, index).map(|text| text.0)
            }
        }
    }
}

impl Column for Option<String> {
    fn read(row: &Row, index: Index<'_>) -> sqlx::Result<Self> {
        match row {
            #[cfg(feature = "sqlite")]
            Row::Sqlite(row) => decoded(row, index),
            #[cfg(feature = "postgres")]
            Row::Postgres(row) => decoded(row, index),
            #[cfg(feature = "mysql")]
            Row::MySql(row) => decoded::<_, Option<super::mysql::text::Text>>(row, index)
                .map(|text| text.map(|text| text.0)),
        }
    }
}
