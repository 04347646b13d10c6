//! A PostgreSQL migration's steps as the actions that apply them: a statements step in a
//! transaction, an index step built `CONCURRENTLY`, outside any transaction, so that writes
//! to its table go on while it builds.
//!
//! An index step is `[DROP INDEX name;] CREATE [UNIQUE] INDEX name ON table ...;`, as a
//! script would run it. Without the `DROP` it is one action: build the index. With it, the
//! step replaces an index, and the table keeps one of that name all along: the new one is
//! built under a name of its own ([`BUILDING_SUFFIX`]), then the old one is dropped
//! (`CONCURRENTLY`, which waits for the transactions using it instead of blocking them), and
//! the new one takes its name. Each action can run again after a crash: a build finds a
//! valid index there and stops, or an invalid one (a build cut short) and drops it first; a
//! drop and a rename do nothing when their index is not there.

use crate::store::migration_steps::Step;

/// What a replacing index is called while it builds: the replaced index's name and this.
const BUILDING_SUFFIX: &str = "_building";

/// One action of a migration, in order; the runner records each once it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Action<'a> {
    /// Statements run in a transaction of their own with their record.
    Transaction(&'a str),
    /// Builds the index `index` with `statement` (a `CREATE INDEX CONCURRENTLY`), unless a
    /// valid one of that name is there; an invalid one is dropped first.
    Build { index: String, statement: String },
    /// Drops the index `index` concurrently, if it is there.
    Drop { index: String },
    /// Renames the index `from` to `to`, if `from` is there, in a transaction with its
    /// record.
    Rename { from: String, to: String },
}

/// An index step as written: `[DROP INDEX name;] CREATE [UNIQUE] INDEX name ON table ...;`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IndexStep<'a> {
    unique: bool,
    name: &'a str,
    table: &'a str,
    /// What follows the table: the columns, and a partial index's `WHERE`.
    definition: &'a str,
    /// Whether the step drops an index of that name first, to replace it.
    replaces: bool,
}

/// The actions that apply a migration of `steps`; `None` if an index step is not of the
/// form this reads (a defect of the build, which its tests catch).
pub(super) fn actions<'a>(steps: &[Step<'a>]) -> Option<Vec<Action<'a>>> {
    let mut actions = Vec::new();
    for step in steps {
        match *step {
            Step::Statements(sql) => actions.push(Action::Transaction(sql)),
            Step::Index(sql) => actions.extend(index_actions(read(sql)?)),
        }
    }
    Some(actions)
}

/// The actions that build the index of `step`.
fn index_actions(step: IndexStep<'_>) -> Vec<Action<'static>> {
    let unique = if step.unique { "UNIQUE " } else { "" };
    let build = |index: &str| Action::Build {
        index: index.to_owned(),
        statement: format!(
            "CREATE {unique}INDEX CONCURRENTLY {index} ON {} {}",
            step.table, step.definition
        ),
    };
    if !step.replaces {
        return vec![build(step.name)];
    }
    let building = format!("{}{BUILDING_SUFFIX}", step.name);
    vec![
        build(&building),
        Action::Drop {
            index: step.name.to_owned(),
        },
        Action::Rename {
            from: building,
            to: step.name.to_owned(),
        },
    ]
}

/// Drops the index `index` without blocking its table's writes, if it is there.
pub(super) fn drop_index(index: &str) -> String {
    format!("DROP INDEX CONCURRENTLY IF EXISTS {index}")
}

/// Renames the index `from` to `to`, if `from` is there.
pub(super) fn rename_index(from: &str, to: &str) -> String {
    format!("ALTER INDEX IF EXISTS {from} RENAME TO {to}")
}

/// Reads an index step; `None` if it is not `[DROP INDEX name;] CREATE [UNIQUE] INDEX name
/// ON table ...;`.
fn read(sql: &str) -> Option<IndexStep<'_>> {
    let (first, after_first) = word(sql)?;
    let (dropped, create) = if first.eq_ignore_ascii_case("DROP") {
        let after = keyword(after_first, "INDEX")?;
        let (dropped, after) = word(after)?;
        (Some(dropped), keyword(after, ";")?)
    } else {
        (None, sql)
    };
    let after = keyword(create, "CREATE")?;
    let (unique, after) = match keyword(after, "UNIQUE") {
        Some(after) => (true, after),
        None => (false, after),
    };
    let after = keyword(after, "INDEX")?;
    let (name, after) = word(after)?;
    let after = keyword(after, "ON")?;
    let (table, after) = word(after)?;
    let (definition, end) = after.split_once(';')?;
    if word(end).is_some() || dropped.is_some_and(|dropped| dropped != name) {
        return None;
    }
    Some(IndexStep {
        unique,
        name,
        table,
        definition: definition.trim(),
        replaces: dropped.is_some(),
    })
}

/// What follows the keyword `expected` (in any case) at the start of `text`.
fn keyword<'a>(text: &'a str, expected: &str) -> Option<&'a str> {
    let (found, after) = word(text)?;
    found.eq_ignore_ascii_case(expected).then_some(after)
}

/// The first word of `text` and what follows it, past blanks and `--` comments: a name runs
/// to a blank, a `(` or a `;`, and a `;` is a word of its own.
fn word(text: &str) -> Option<(&str, &str)> {
    let mut rest = text.trim_start();
    while let Some(comment) = rest.strip_prefix("--") {
        rest = comment
            .split_once('\n')
            .map_or("", |(_, after)| after)
            .trim_start();
    }
    if rest.is_empty() {
        return None;
    }
    if rest.starts_with(';') {
        return Some(rest.split_at(1));
    }
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '(' || c == ';')
        .unwrap_or(rest.len());
    Some(rest.split_at(end))
}

#[cfg(test)]
mod tests {
    use super::{actions, read, Action, IndexStep};
    use crate::store::migration_steps::{steps, Step};

    #[test]
    fn an_index_step_reads_as_the_index_it_creates() {
        let sql = "-- Why.\nCREATE INDEX t_a\n    ON t (a, b) WHERE b <> 'x';\n-- After.\n";
        let expected = IndexStep {
            unique: false,
            name: "t_a",
            table: "t",
            definition: "(a, b) WHERE b <> 'x'",
            replaces: false,
        };
        assert_eq!(read(sql), Some(expected));
        let unique = read("create unique index t_u on t(a);").expect("it reads");
        assert!(unique.unique);
        assert_eq!(unique.definition, "(a)");
    }

    #[test]
    fn a_step_that_drops_the_index_it_creates_replaces_it_under_a_name_of_its_own() {
        let step = Step::Index("DROP INDEX t_a;\nCREATE INDEX t_a ON t (a, b);\n");
        let building = "t_a_building".to_owned();
        assert_eq!(
            actions(&[Step::Statements("CREATE TABLE t (a INT);"), step]),
            Some(vec![
                Action::Transaction("CREATE TABLE t (a INT);"),
                Action::Build {
                    index: building.clone(),
                    statement: "CREATE INDEX CONCURRENTLY t_a_building ON t (a, b)".to_owned(),
                },
                Action::Drop {
                    index: "t_a".to_owned()
                },
                Action::Rename {
                    from: building,
                    to: "t_a".to_owned()
                },
            ])
        );
    }

    #[test]
    fn what_is_not_one_index_step_does_not_read() {
        for sql in [
            "CREATE INDEX t_a ON t (a)",
            "DROP INDEX t_b; CREATE INDEX t_a ON t (a);",
            "CREATE INDEX t_a ON t (a); CREATE INDEX t_b ON t (b);",
            "CREATE INDEX CONCURRENTLY t_a ON t (a);",
            "ALTER TABLE t ADD COLUMN c INT;",
            "",
        ] {
            assert_eq!(read(sql), None, "{sql}");
        }
    }

    /// The first migration whose indexes on tables that grow are built concurrently.
    const FIRST_WITH_INDEX_STEPS: i64 = 11;

    /// From migration 11 on, an index outside an index step is only one on a table its own
    /// step creates (an empty table, which no turn writes yet): a later migration that
    /// forgets the `-- step: index` line fails here rather than block turns.
    #[test]
    fn from_migration_11_on_every_index_on_an_existing_table_is_an_index_step() {
        for (version, _, sql) in super::super::migrations::MIGRATIONS {
            if *version < FIRST_WITH_INDEX_STEPS {
                continue;
            }
            for step in steps(sql) {
                let Step::Statements(sql) = step else {
                    continue;
                };
                let words: Vec<String> = sql
                    .lines()
                    .filter(|line| !line.trim_start().starts_with("--"))
                    .flat_map(|line| line.split(|c: char| c.is_whitespace() || c == '('))
                    .filter(|word| !word.is_empty())
                    .map(str::to_ascii_lowercase)
                    .collect();
                let created: Vec<&str> = words
                    .windows(2)
                    .filter(|pair| pair[0] == "table")
                    .map(|pair| pair[1].as_str())
                    .collect();
                for (at, word) in words.iter().enumerate() {
                    // `INDEX [CONCURRENTLY] [IF NOT EXISTS] name ON table`
                    let before = &words[at.saturating_sub(6)..at];
                    if word == "on" && before.iter().any(|word| word == "index") {
                        let table = words.get(at + 1).map_or("", String::as_str);
                        assert!(
                            created.contains(&table),
                            "migration {version} indexes {table}, which it did not create, \
                             outside a `-- step: index`"
                        );
                    }
                }
            }
        }
    }

    /// Every index step of this build's migrations reads, and builds concurrently.
    #[test]
    fn every_index_step_of_the_migrations_reads() {
        for (version, _, sql) in super::super::migrations::MIGRATIONS {
            let steps = steps(sql);
            let actions = actions(&steps).unwrap_or_else(|| panic!("migration {version}"));
            for action in actions {
                if let Action::Build { statement, .. } = action {
                    assert!(statement.contains(" INDEX CONCURRENTLY "), "{statement}");
                }
            }
        }
    }
}
