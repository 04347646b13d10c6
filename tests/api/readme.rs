//! What the README promises a new user, checked against the build: it sends the reader to the
//! one feature table (the crate docs'), and its count of a warm call's statements is the one
//! the runtime's statement counter measures (`support::Backend::warm_call_statements`, which
//! the calls cases assert on every backend).

use crate::support::Backend;

/// "3 statements on SQLite, 2 on PostgreSQL and 4 on MySQL", from the counter.
fn counted() -> String {
    format!(
        "{} statements on SQLite, {} on PostgreSQL and {} on MySQL between its `BEGIN` and its \
         `COMMIT`",
        Backend::Sqlite.warm_call_statements(),
        Backend::Postgres.warm_call_statements(),
        Backend::MariaDb.warm_call_statements()
    )
}

#[test]
fn the_readme_points_to_the_one_feature_table() {
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains("solid_objects/#feature-flags"),
        "the README links the crate docs' feature table"
    );
    assert!(
        !readme.lines().any(|line| line.starts_with("| `sqlite` |")),
        "the README repeats the feature table"
    );
}

#[test]
fn the_readme_and_the_guide_count_a_warm_calls_statements_as_the_counter_does() {
    let counted = counted();
    let readme = include_str!("../../README.md").replace('\n', " ");
    assert!(readme.contains(&counted), "the README says: {counted}");
    let guide = include_str!("../../runtime/guide/calls.md").replace('\n', " ");
    assert!(guide.contains(&counted), "the calls guide says: {counted}");
}
