//! The one mechanism for what backends spell differently. A statement whose text differs by
//! backend is an item that is a function of the [`Dialect`]: written once, with the parts
//! that differ taken from the fragments here, and spelled for each backend once, at first use
//! ([`PerDialect`]); or, where the backends' statements share nothing but their purpose (an
//! upsert, a statement MySQL runs in several steps), a `match` of the whole texts.
//!
//! Every text is `&'static str`, so sqlx prepares each statement once per connection and
//! finds it again in its statement cache.

use std::fmt::Write;
use std::sync::OnceLock;

/// The SQL a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(all(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
    /// MySQL 8 and MariaDB 10.6 or later.
    MySql,
}

impl Dialect {
    /// Appends the placeholder of the `number`th value of a statement built at run time
    /// (values bound in order) to `sql`.
    pub(crate) fn push_placeholder(self, sql: &mut String, number: usize) {
        match self {
            Self::Postgres => {
                // Writing to a `String` cannot fail.
                let _ = write!(sql, "${number}");
            }
            Self::Sqlite | Self::MySql => sql.push('?'),
        }
    }

    /// Appends `rows` rows of `columns` placeholders each, `(.., ..), (.., ..)`, numbered on
    /// from the first value of a statement built at run time, to `sql`.
    pub(crate) fn push_rows(self, sql: &mut String, rows: usize, columns: usize) {
        for row in 0..rows {
            sql.push_str(if row == 0 { "(" } else { ", (" });
            for column in 0..columns {
                if column > 0 {
                    sql.push_str(", ");
                }
                self.push_placeholder(sql, row * columns + column + 1);
            }
            sql.push(')');
        }
    }
}

impl Dialect {
    /// The texts of the JSON array `array` (a parameter, `$1`), as the rows of a subquery:
    /// `x IN (this)`.
    pub(crate) fn json_texts(self, array: &str) -> String {
        match self {
            Self::Sqlite => format!("SELECT value FROM json_each({array})"),
            Self::Postgres => format!("SELECT jsonb_array_elements_text({array}::jsonb)"),
            Self::MySql => format!(
                "SELECT j.name FROM JSON_TABLE({array}, '$[*]' \
                 COLUMNS (name VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS j"
            ),
        }
    }

    /// The pairs `[type, id]` of the JSON array `array` (a parameter), as a table `j` of
    /// columns `actor_type` and `actor_id`: `FROM (this)`.
    pub(crate) fn json_actor_pairs(self, array: &str) -> String {
        match self {
            Self::Sqlite => format!(
                "(SELECT json_extract(value, '$[0]') AS actor_type, \
                         json_extract(value, '$[1]') AS actor_id FROM json_each({array})) AS j"
            ),
            Self::Postgres => format!(
                "(SELECT pair->>0 AS actor_type, pair->>1 AS actor_id \
                  FROM jsonb_array_elements({array}::jsonb) AS p(pair)) AS j"
            ),
            Self::MySql => format!(
                "JSON_TABLE({array}, '$[*]' COLUMNS (\
                     actor_type VARCHAR(255) CHARACTER SET utf8mb4 PATH '$[0]', \
                     actor_id VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$[1]')) AS j"
            ),
        }
    }

    /// The texts `parts` (columns, literals) joined into one.
    pub(crate) fn concat(self, parts: &[&str]) -> String {
        match self {
            Self::Sqlite | Self::Postgres => format!("({})", parts.join(" || ")),
            Self::MySql => format!("CONCAT({})", parts.join(", ")),
        }
    }

    /// An effect lease's clock, in microseconds: `runtime` (a parameter, the runtime's
    /// clock) on SQLite, whose only process is this one; the server's own clock otherwise,
    /// which every process shares.
    pub(crate) fn lease_clock(self, runtime: &str) -> String {
        match self {
            Self::Sqlite => runtime.to_owned(),
            Self::Postgres => {
                "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT".to_owned()
            }
            Self::MySql => "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)".to_owned(),
        }
    }

    /// What locks the rows a claim reads and skips those another transaction holds, after
    /// its `ORDER BY .. LIMIT`: nothing on SQLite, whose one writer holds them all.
    pub(crate) fn skip_locked(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres | Self::MySql => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// What locks the rows a read returns until commit, after its `WHERE`: nothing on
    /// SQLite, whose one writer holds them all.
    pub(crate) fn for_update(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres | Self::MySql => " FOR UPDATE",
        }
    }

    /// What takes a shared lock on the rows a read returns until commit (waiting for a
    /// transaction that holds one for update): nothing on SQLite; MariaDB knows only the
    /// older spelling, which MySQL 8 still reads.
    pub(crate) fn for_share(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR SHARE",
            Self::MySql => " LOCK IN SHARE MODE",
        }
    }

    /// The whole quotient of two integers, `dividend / divisor` rounded toward zero (MySQL's
    /// `/` gives a decimal).
    pub(crate) fn whole_quotient(self, dividend: &str, divisor: &str) -> String {
        match self {
            Self::Sqlite | Self::Postgres => format!("({dividend}) / {divisor}"),
            Self::MySql => format!("({dividend}) DIV {divisor}"),
        }
    }

    /// A sum (or other number) `number` read as a `BIGINT`: PostgreSQL's sum of integers is
    /// a `NUMERIC`, MySQL's a `DECIMAL`.
    pub(crate) fn whole(self, number: &str) -> String {
        match self {
            Self::Sqlite => number.to_owned(),
            Self::Postgres => format!("CAST({number} AS BIGINT)"),
            Self::MySql => format!("CAST({number} AS SIGNED)"),
        }
    }

    /// The later of the times `time` (a parameter, which may be `NULL`) and `floor` (a
    /// scalar subquery), or `NULL` where `time` is: SQLite's `MAX` and MySQL's `GREATEST`
    /// are `NULL` for a `NULL` argument, PostgreSQL's `GREATEST` passes over it.
    pub(crate) fn later_unless_null(self, time: &str, floor: &str) -> String {
        match self {
            Self::Sqlite => format!("MAX({time}, {floor})"),
            Self::Postgres => {
                format!("(CASE WHEN {time} IS NULL THEN NULL ELSE GREATEST({time}, {floor}) END)")
            }
            Self::MySql => format!("GREATEST({time}, {floor})"),
        }
    }

    /// What asks for a statement's plan instead of running it, before the statement: SQLite's
    /// `EXPLAIN QUERY PLAN`, the others' `EXPLAIN`.
    pub(crate) fn explain(self) -> &'static str {
        match self {
            Self::Sqlite => "EXPLAIN QUERY PLAN ",
            Self::Postgres | Self::MySql => "EXPLAIN ",
        }
    }

    /// What returns an inserted row's `id`: ` RETURNING id`, or nothing on MySQL, where the
    /// statement's last insert id is the row's.
    pub(crate) fn returning_id(self) -> &'static str {
        match self {
            Self::Sqlite | Self::Postgres => " RETURNING id",
            Self::MySql => "",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Sqlite => 0,
            Self::Postgres => 1,
            Self::MySql => 2,
        }
    }
}

/// A statement written once and spelled for each backend at its first use, by `spell`.
pub(crate) struct PerDialect {
    spell: fn(Dialect) -> String,
    texts: [OnceLock<String>; 3],
}

impl PerDialect {
    /// A statement that `spell` writes for a backend.
    pub(crate) const fn new(spell: fn(Dialect) -> String) -> Self {
        Self {
            spell,
            texts: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        }
    }

    /// The statement as `dialect` spells it.
    pub(crate) fn get(&'static self, dialect: Dialect) -> &'static str {
        self.texts[dialect.index()].get_or_init(|| (self.spell)(dialect))
    }
}
