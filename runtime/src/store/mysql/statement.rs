//! The shared statements as MySQL reads them, and queries that bind by them.
//!
//! The statements in `shared.rs` and `admin.rs` are written once, in the spelling PostgreSQL
//! and SQLite share. [`spell`] rewrites that spelling, token by token, into MySQL's:
//!
//! | shared | MySQL |
//! |---|---|
//! | `$3` (a numbered parameter, in any order, any number of times) | `?`, bound in the order the `?` appear |
//! | `"key"` (a quoted identifier) | `` `key` `` |
//! | `ON CONFLICT (..) DO UPDATE SET` | `ON DUPLICATE KEY UPDATE` |
//! | `excluded.state` | `VALUES(state)` |
//! | `length(x)` (characters) | `CHAR_LENGTH(x)` (MySQL's `LENGTH` counts bytes) |
//! | `CAST(x AS TEXT)` | `CAST(x AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin` |
//!
//! Literals are kept as they are; the shared statements hold no backslash in a literal, which
//! MySQL would read differently by its `sql_mode` (`NO_BACKSLASH_ESCAPES`).
//!
//! What needs more than a spelling (`RETURNING`, `ON CONFLICT .. DO NOTHING`, an `UPDATE`
//! that reads its own table) is written for MySQL in its own form beside the shared one.
//!
//! [`query`] and [`query_scalar`] mirror sqlx's functions: they keep each
//! bound value under its parameter number and bind it once per `?` when the query runs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use futures_util::future::BoxFuture;
use sqlx::mysql::{MySqlArguments, MySqlConnection, MySqlPool, MySqlQueryResult, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::MySql;

use crate::store::rows::Column;

/// A statement in MySQL's spelling, and which bound value each of its `?` takes (by index).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Spelled {
    pub(crate) sql: String,
    pub(crate) order: Vec<usize>,
}

/// The MySQL spelling of one of the crate's statements; see the module docs. Each statement
/// is spelled once per process.
pub(crate) fn spelled(sql: &'static str) -> &'static Spelled {
    static SPELLED: OnceLock<Mutex<HashMap<(usize, usize), &'static Spelled>>> = OnceLock::new();
    let key = (sql.as_ptr() as usize, sql.len());
    let mut spelled = SPELLED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // The statements are the crate's own constants: a bounded set, kept for the process.
    spelled
        .entry(key)
        .or_insert_with(|| Box::leak(Box::new(spell(sql))))
}

/// Rewrites one statement; see the module docs.
pub(crate) fn spell(sql: &str) -> Spelled {
    let mut out = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut rest = sql;
    while let Some(c) = rest.chars().next() {
        if c == '\'' {
            let end = literal_end(rest);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        } else if c == '"' {
            let end = rest[1..].find('"').map_or(rest.len(), |end| end + 2);
            out.push('`');
            out.push_str(&rest[1..end.saturating_sub(1).max(1)]);
            out.push('`');
            rest = &rest[end..];
        } else if c == '$' && rest[1..].starts_with(|c: char| c.is_ascii_digit()) {
            let digits = rest[1..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len() - 1, |end| end);
            let number: usize = rest[1..=digits].parse().unwrap_or(1);
            order.push(number.saturating_sub(1));
            out.push('?');
            rest = &rest[1 + digits..];
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
                .unwrap_or(rest.len());
            let word = &rest[..end];
            rest = &rest[end..];
            out.push_str(&spell_word(word, &mut rest));
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    Spelled { sql: out, order }
}

/// The length of the single-quoted literal at the start of `text` (`''` inside it is a
/// quote).
fn literal_end(text: &str) -> usize {
    let mut index = 1;
    let bytes = text.as_bytes();
    while index < bytes.len() {
        if bytes[index] == b'\'' {
            if bytes.get(index + 1) == Some(&b'\'') {
                index += 2;
                continue;
            }
            return index + 1;
        }
        index += 1;
    }
    bytes.len()
}

/// One word (an identifier or keyword, with any `table.` prefix) in MySQL's spelling; it may
/// take more of the statement from `rest`.
fn spell_word<'w>(word: &'w str, rest: &mut &str) -> Cow<'w, str> {
    if let Some(column) = word.strip_prefix("excluded.") {
        return format!("VALUES({column})").into();
    }
    if word.eq_ignore_ascii_case("length") && rest.starts_with('(') {
        return "CHAR_LENGTH".into();
    }
    if word.eq_ignore_ascii_case("AS") && rest.trim_start().starts_with("TEXT)") {
        // The cast's text is binary-collated, as the columns are: compared with any other
        // text, its collation wins.
        *rest = &rest.trim_start()["TEXT)".len()..];
        return "AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin".into();
    }
    if word.eq_ignore_ascii_case("ON") && rest.trim_start().starts_with("CONFLICT") {
        // `ON CONFLICT (columns) DO UPDATE SET`: MySQL updates on any unique key.
        if let Some(at) = rest.find("DO UPDATE SET") {
            *rest = &rest[at + "DO UPDATE SET".len()..];
            return "ON DUPLICATE KEY UPDATE".into();
        }
    }
    word.into()
}

/// A value bound to a query, kept until the query runs.
#[derive(Debug, Clone)]
pub(crate) enum Value<'q> {
    Text(Option<Cow<'q, str>>),
    Integer(Option<i64>),
    Boolean(bool),
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
        Self::Boolean(boolean)
    }
}

/// A shared statement and its bound values, run in MySQL's spelling.
#[must_use = "a query does nothing until it is executed"]
pub(crate) struct Query<'q> {
    sql: &'static str,
    values: Vec<Value<'q>>,
}

/// Like `sqlx::query`, for a shared statement.
pub(crate) fn query<'q>(sql: &'static str) -> Query<'q> {
    Query {
        sql,
        values: Vec::new(),
    }
}

impl<'q> Query<'q> {
    /// Binds the value of the next parameter number (`$1`, then `$2`, ..).
    pub(crate) fn bind(mut self, value: impl Into<Value<'q>>) -> Self {
        self.values.push(value.into());
        self
    }

    /// The sqlx query: MySQL's spelling, each value bound once per `?` that takes it.
    fn spelled(&self) -> sqlx::query::Query<'_, MySql, MySqlArguments> {
        let spelled = spelled(self.sql);
        let mut query = sqlx::query(&spelled.sql);
        for &index in &spelled.order {
            query = match self.values.get(index) {
                Some(Value::Text(text)) => query.bind(text.as_deref()),
                Some(Value::Integer(integer)) => query.bind(*integer),
                Some(Value::Boolean(boolean)) => query.bind(*boolean),
                None => query.bind(None::<i64>),
            };
        }
        query
    }

    pub(crate) fn execute<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> BoxFuture<'e, sqlx::Result<MySqlQueryResult>>
    where
        'q: 'e,
    {
        let on = on.into();
        Box::pin(async move {
            match on {
                On::Connection(connection) => self.spelled().execute(connection).await,
                On::Pool(pool) => {
                    let mut connection = Borrowed::acquire(pool).await?;
                    let done = self.spelled().execute(connection.get()).await;
                    connection.finish(done)
                }
            }
        })
    }

    pub(crate) fn fetch_optional<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> BoxFuture<'e, sqlx::Result<Option<MySqlRow>>>
    where
        'q: 'e,
    {
        let on = on.into();
        Box::pin(async move {
            match on {
                On::Connection(connection) => self.spelled().fetch_optional(connection).await,
                On::Pool(pool) => {
                    let mut connection = Borrowed::acquire(pool).await?;
                    let done = self.spelled().fetch_optional(connection.get()).await;
                    connection.finish(done)
                }
            }
        })
    }

    pub(crate) fn fetch_one<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> BoxFuture<'e, sqlx::Result<MySqlRow>>
    where
        'q: 'e,
    {
        let fetched = self.fetch_optional(on);
        Box::pin(async move { fetched.await?.ok_or(sqlx::Error::RowNotFound) })
    }

    pub(crate) fn fetch_all<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> BoxFuture<'e, sqlx::Result<Vec<MySqlRow>>>
    where
        'q: 'e,
    {
        let on = on.into();
        Box::pin(async move {
            match on {
                On::Connection(connection) => self.spelled().fetch_all(connection).await,
                On::Pool(pool) => {
                    let mut connection = Borrowed::acquire(pool).await?;
                    let done = self.spelled().fetch_all(connection.get()).await;
                    connection.finish(done)
                }
            }
        })
    }
}

/// Where a query runs: on a turn's connection, or on one taken from the pool for it alone.
pub(crate) enum On<'e> {
    Connection(&'e mut MySqlConnection),
    Pool(&'e MySqlPool),
}

impl<'e> From<&'e mut MySqlConnection> for On<'e> {
    fn from(connection: &'e mut MySqlConnection) -> Self {
        Self::Connection(connection)
    }
}

impl<'e> From<&'e MySqlPool> for On<'e> {
    fn from(pool: &'e MySqlPool) -> Self {
        Self::Pool(pool)
    }
}

/// A connection taken from the pool for one query. If the query's future is dropped before
/// it finishes, the connection is closed rather than returned: sqlx's MySQL connection can
/// lose its place in the protocol when a statement's future is dropped, and the pool's
/// check of a returned connection then waits for a reply that never comes, holding a pool
/// slot for good.
struct Borrowed {
    connection: PoolConnection<MySql>,
    finished: bool,
}

impl Borrowed {
    async fn acquire(pool: &MySqlPool) -> sqlx::Result<Self> {
        Ok(Self {
            connection: pool.acquire().await?,
            finished: false,
        })
    }

    fn get(&mut self) -> &mut MySqlConnection {
        &mut self.connection
    }

    /// The query ran to its end: the connection goes back to the pool.
    fn finish<T>(mut self, done: sqlx::Result<T>) -> sqlx::Result<T> {
        self.finished = true;
        done
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if !self.finished {
            self.connection.close_on_drop();
        }
    }
}

/// A shared statement whose rows decode into `O`.
#[must_use = "a query does nothing until it is executed"]
pub(crate) struct Mapped<'q, O> {
    query: Query<'q>,
    map: fn(&MySqlRow) -> sqlx::Result<O>,
}

/// Like `sqlx::query_scalar`, for a shared statement: its first column.
pub(crate) fn query_scalar<'q, O>(sql: &'static str) -> Mapped<'q, O>
where
    O: Column<MySql>,
{
    Mapped {
        query: query(sql),
        map: |row| O::get(row, 0),
    }
}

impl<'q, O> Mapped<'q, O> {
    /// Binds the value of the next parameter number.
    pub(crate) fn bind(mut self, value: impl Into<Value<'q>>) -> Self {
        self.query = self.query.bind(value);
        self
    }

    pub(crate) fn fetch_one<'e>(self, on: impl Into<On<'e>>) -> BoxFuture<'e, sqlx::Result<O>>
    where
        'q: 'e,
        O: Send + 'e,
    {
        let map = self.map;
        let fetched = self.query.fetch_one(on);
        Box::pin(async move { map(&fetched.await?) })
    }

    pub(crate) fn fetch_optional<'e>(
        self,
        on: impl Into<On<'e>>,
    ) -> BoxFuture<'e, sqlx::Result<Option<O>>>
    where
        'q: 'e,
        O: Send + 'e,
    {
        let map = self.map;
        let fetched = self.query.fetch_optional(on);
        Box::pin(async move { fetched.await?.as_ref().map(map).transpose() })
    }

    pub(crate) fn fetch_all<'e>(self, on: impl Into<On<'e>>) -> BoxFuture<'e, sqlx::Result<Vec<O>>>
    where
        'q: 'e,
        O: Send + 'e,
    {
        let map = self.map;
        let fetched = self.query.fetch_all(on);
        Box::pin(async move { fetched.await?.iter().map(map).collect() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(shared: &str) -> String {
        spell(shared).sql
    }

    #[test]
    fn numbered_parameters_become_positional_ones_bound_in_their_order() {
        let spelled = spell("SELECT 1 WHERE a <= $2 AND b IN ($1) AND c <= $2 LIMIT $3");
        assert_eq!(
            spelled.sql,
            "SELECT 1 WHERE a <= ? AND b IN (?) AND c <= ? LIMIT ?"
        );
        assert_eq!(spelled.order, [1, 0, 1, 2]);
        assert_eq!(spell("WHERE id = $10").order, [9]);
    }

    #[test]
    fn literals_keep_their_dollars_and_quotes() {
        let spelled = spell("SELECT '$[*]', 'it''s $1' FROM t WHERE x LIKE $1 ESCAPE '!'");
        assert_eq!(
            spelled.sql,
            "SELECT '$[*]', 'it''s $1' FROM t WHERE x LIKE ? ESCAPE '!'"
        );
        assert_eq!(spelled.order, [0]);
    }

    #[test]
    fn upserts_and_quoted_names_take_mysql_spelling() {
        assert_eq!(
            sql("INSERT INTO r (a, \"key\") VALUES ($1, $2)
                 ON CONFLICT (a, \"key\") DO UPDATE SET a = excluded.a, n = r.n + 1"),
            "INSERT INTO r (a, `key`) VALUES (?, ?)
                 ON DUPLICATE KEY UPDATE a = VALUES(a), n = r.n + 1"
        );
    }

    #[test]
    fn character_lengths_and_casts_to_text_take_mysql_names() {
        assert_eq!(
            sql("substr(k.actor_id, 1, length($2)) = $2 \
                 AND CAST(id AS TEXT) NOT IN (x)"),
            "substr(k.actor_id, 1, CHAR_LENGTH(?)) = ? \
             AND CAST(id AS CHAR CHARACTER SET utf8mb4) COLLATE utf8mb4_bin NOT IN (x)"
        );
        assert_eq!(
            sql("SELECT lengthy, length FROM t"),
            "SELECT lengthy, length FROM t"
        );
    }
}
