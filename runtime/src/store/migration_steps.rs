//! A schema migration's steps: its SQL file cut at `-- step:` lines, so that a backend can
//! apply an index on a table that grows by itself, without blocking that table's writes.
//!
//! A line `-- step: index` begins an index step and a line `-- step: statements` a step of
//! any other statements; each runs to the next such line, and the text before the first is a
//! statements step (a file without such a line is one step). Read whole, the file is still
//! the migration: run as one script it leaves the schema its steps leave. Each backend
//! decides how a step is applied and recorded (`postgres/migrations.rs`,
//! `mysql/migrations.rs`; SQLite has one writer and runs each file whole). A database part
//! of the way through a migration resumes at its first step not recorded, so a released
//! migration's steps never change.

/// One step of a migration, in its file's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// Statements applied together.
    Statements(&'a str),
    /// One index on a table that grows, built without blocking the table's writes.
    Index(&'a str),
}

impl<'a> Step<'a> {
    /// The step's SQL.
    pub(crate) fn sql(self) -> &'a str {
        match self {
            Self::Statements(sql) | Self::Index(sql) => sql,
        }
    }
}

/// The line that begins an index step.
const INDEX_STEP: &str = "-- step: index";

/// The line that begins a statements step.
const STATEMENTS_STEP: &str = "-- step: statements";

/// The steps of the migration whose file is `sql`, leaving out any that holds nothing but
/// comments and blank lines.
pub(crate) fn steps(sql: &str) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    let mut index = false;
    let mut start = 0;
    let mut offset = 0;
    for line in sql.split_inclusive('\n') {
        let next = match line.trim() {
            INDEX_STEP => Some(true),
            STATEMENTS_STEP => Some(false),
            _ => None,
        };
        if let Some(next) = next {
            push(&mut steps, index, &sql[start..offset]);
            (index, start) = (next, offset + line.len());
        }
        offset += line.len();
    }
    push(&mut steps, index, &sql[start..]);
    steps
}

/// Adds `sql` to `steps`, as an index step if `index`, unless it holds no statement.
fn push<'a>(steps: &mut Vec<Step<'a>>, index: bool, sql: &'a str) {
    let holds_a_statement = sql.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with("--")
    });
    if holds_a_statement {
        steps.push(if index {
            Step::Index(sql)
        } else {
            Step::Statements(sql)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{steps, Step, INDEX_STEP, STATEMENTS_STEP};

    #[test]
    fn a_file_without_step_lines_is_one_statements_step() {
        let sql = "-- A table.\nCREATE TABLE t (a INT);\n";
        assert_eq!(steps(sql), [Step::Statements(sql)]);
    }

    #[test]
    fn step_lines_cut_the_file_and_steps_of_comments_alone_are_left_out() {
        let sql = "CREATE TABLE t (a INT);\n\n-- Why the index.\n-- step: index\n\
                   CREATE INDEX t_a ON t (a);\n   -- step: statements  \n-- nothing\n\
                   -- step: index\nCREATE INDEX t_b ON t (b);";
        assert_eq!(
            steps(sql),
            [
                Step::Statements("CREATE TABLE t (a INT);\n\n-- Why the index.\n"),
                Step::Index("CREATE INDEX t_a ON t (a);\n"),
                Step::Index("CREATE INDEX t_b ON t (b);"),
            ]
        );
    }

    #[test]
    fn a_file_that_begins_with_a_step_line_has_no_empty_first_step() {
        let sql = "-- step: index\nCREATE INDEX t_a ON t (a);\n";
        assert_eq!(steps(sql), [Step::Index("CREATE INDEX t_a ON t (a);\n")]);
    }

    /// A misspelt step line would be read as a comment, and its index built in the step
    /// before: every line of the backends' files that starts like one is one.
    #[test]
    fn every_step_line_of_the_migration_files_is_one_the_steps_know() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for backend in ["postgres", "mysql", "sqlite"] {
            let folder = std::fs::read_dir(root.join(backend)).expect("the migrations");
            for file in folder {
                let path = file.expect("a migration").path();
                let sql = std::fs::read_to_string(&path).expect("it reads");
                for line in sql.lines().map(str::trim) {
                    let known = line == INDEX_STEP || line == STATEMENTS_STEP;
                    assert!(
                        known || !line.starts_with("-- step"),
                        "{}: {line}",
                        path.display()
                    );
                }
            }
        }
    }
}
