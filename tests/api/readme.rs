//! What the README promises a new user, checked against the build: the axum version the
//! `axum` and `dashboard` features need is the one the workspace depends on.

/// The `major.minor` of axum in the workspace's dependencies.
fn workspace_axum() -> String {
    let manifest = include_str!("../../Cargo.toml");
    let line = manifest
        .lines()
        .find(|line| line.starts_with("axum = "))
        .expect("the workspace depends on axum");
    let version = line
        .split("version = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("axum's version");
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

#[test]
fn the_readme_names_the_axum_version_its_features_need() {
    let readme = include_str!("../../README.md");
    let axum = workspace_axum();
    for feature in ["| `axum` |", "| `dashboard` |"] {
        let row = readme
            .lines()
            .find(|line| line.starts_with(feature))
            .unwrap_or_else(|| panic!("the README's feature table has {feature}"));
        assert!(
            row.contains(&format!("axum {axum}")),
            "the README's {feature} row names axum {axum}: {row}"
        );
    }
}
