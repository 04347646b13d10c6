//! The store's statements as MySQL reads them, and the pool connection a read runs on.
//!
//! The statements of the store's table files are written once, in the spelling PostgreSQL
//! and SQLite share (their MySQL forms, where the dialect picks one, in that spelling too). [`spell`] rewrites that spelling, token by token, into MySQL's:
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
//! The store's [`Query`](crate::store::query::Query) keeps each bound value under its
//! parameter number and binds it once per `?` of the spelling when the query runs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::MySql;

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

/// A connection taken from the pool for one query. If the query's future is dropped before
/// it finishes, the connection is closed rather than returned: sqlx's MySQL connection can
/// lose its place in the protocol when a statement's future is dropped, and the pool's
/// check of a returned connection then waits for a reply that never comes, holding a pool
/// slot for good.
pub(crate) struct Borrowed {
    connection: PoolConnection<MySql>,
    finished: bool,
}

impl Borrowed {
    pub(crate) async fn acquire(pool: &MySqlPool) -> sqlx::Result<Self> {
        Ok(Self {
            connection: pool.acquire().await?,
            finished: false,
        })
    }

    pub(crate) fn get(&mut self) -> &mut MySqlConnection {
        &mut self.connection
    }

    /// The query ran to its end: the connection goes back to the pool.
    pub(crate) fn finish<T>(mut self, done: sqlx::Result<T>) -> sqlx::Result<T> {
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
