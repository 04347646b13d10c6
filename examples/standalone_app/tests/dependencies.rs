//! The `[dependencies]` block the README gives a new crate is this crate's own: CI builds and
//! tests this crate, so the block a newcomer copies is one that compiles and runs.

use std::path::Path;

/// The lines of the first TOML code block in `text` that starts with `[dependencies]`.
fn dependencies_block(text: &str) -> Vec<String> {
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```toml" {
            let block: Vec<String> = lines
                .by_ref()
                .take_while(|line| line.trim() != "```")
                .map(str::to_owned)
                .collect();
            if block
                .first()
                .is_some_and(|line| line.trim() == "[dependencies]")
            {
                return block[1..].to_vec();
            }
        }
    }
    panic!("the README has no ```toml block that starts with [dependencies]");
}

/// The entries of the `[dependencies]` table of a manifest, one per line as written.
fn manifest_dependencies(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[dependencies]")
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with('['))
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The name a dependency line gives (what stands before its `=`).
fn name(line: &str) -> &str {
    line.split('=').next().unwrap_or_default().trim()
}

#[test]
fn the_readmes_dependencies_block_is_the_one_this_crate_builds_with() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).expect("the README");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("this manifest");
    let block = dependencies_block(&readme);
    let ours = manifest_dependencies(&manifest);

    let names = |lines: &[String]| lines.iter().map(|l| name(l).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        names(&block),
        names(&ours),
        "the README names the dependencies this crate has, in the same order"
    );
    for line in &block {
        if name(line) == "solid-objects" {
            // The README takes it from crates.io, at the runtime's version; this crate takes
            // it by path.
            let workspace =
                std::fs::read_to_string(root.join("../../Cargo.toml")).expect("the workspace");
            let version = workspace
                .lines()
                .skip_while(|line| line.trim() != "[workspace.package]")
                .find_map(|line| line.trim().strip_prefix("version = "))
                .expect("the workspace's version")
                .trim_matches('"');
            let minor: Vec<&str> = version.split('.').take(2).collect();
            let wanted = format!("\"{}\"", minor.join("."));
            assert!(
                line.contains(&wanted),
                "the README's `{line}` asks for the runtime's version {wanted}"
            );
            continue;
        }
        assert!(
            ours.contains(line),
            "the README's `{line}` is written the same way in this crate's manifest"
        );
    }
}
