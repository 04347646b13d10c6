//! The feature flags are written once, in the crate docs' table (`src/lib.rs`): the table
//! names every feature of `Cargo.toml`, says which are on by default as `Cargo.toml` does,
//! and names the axum version the `axum` and `dashboard` features build on.

use std::collections::BTreeMap;

/// The features `Cargo.toml` declares (but `default`), each with whether it is on by default.
fn declared() -> BTreeMap<String, bool> {
    let manifest = include_str!("../Cargo.toml");
    let section = manifest
        .split("\n[features]\n")
        .nth(1)
        .expect("Cargo.toml has a [features] section");
    let section = section.split("\n[").next().unwrap_or(section);
    let names: Vec<&str> = section
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with(' '))
        .filter_map(|line| line.split_once(" = ").map(|(name, _)| name.trim()))
        .collect();
    let defaults = section
        .lines()
        .find(|line| line.starts_with("default = "))
        .expect("Cargo.toml names its default features");
    names
        .into_iter()
        .filter(|name| *name != "default")
        .map(|name| (name.to_owned(), defaults.contains(&format!("\"{name}\""))))
        .collect()
}

/// The rows of the crate docs' feature table: each flag, whether it is on by default, and
/// the row's text.
fn documented() -> BTreeMap<String, (bool, String)> {
    include_str!("../src/lib.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `"))
        .filter_map(|row| {
            let (name, rest) = row.split_once("` | ")?;
            let (default, _) = rest.split_once(" |")?;
            Some((name.to_owned(), (default == "on", row.to_owned())))
        })
        .collect()
}

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
fn the_crate_docs_list_every_feature_as_cargo_toml_declares_it() {
    let declared = declared();
    let documented = documented();
    assert!(declared.len() >= 8, "{declared:?}");
    let names = |map: Vec<&String>| map.into_iter().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(documented.keys().collect()),
        names(declared.keys().collect()),
        "the crate docs' feature table and Cargo.toml's [features] name different flags"
    );
    for (name, on) in &declared {
        assert_eq!(
            documented[name].0,
            *on,
            "the crate docs say `{name}` is {} by default; Cargo.toml says otherwise",
            if documented[name].0 { "on" } else { "off" }
        );
    }
}

#[test]
fn the_crate_docs_name_the_axum_version_its_features_need() {
    let axum = workspace_axum();
    let documented = documented();
    for feature in ["axum", "dashboard"] {
        let row = &documented[feature].1;
        assert!(
            row.contains(&format!("axum {axum}")),
            "the `{feature}` row names axum {axum}: {row}"
        );
    }
}
