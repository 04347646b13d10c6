//! The layers of `runtime/src` point one way: a module imports only from its own layer and
//! the layers below it, and no two top-level modules import each other.
//!
//! The layers, from the bottom up (the same list heads `runtime/src/lib.rs`):
//!
//! | layer | modules | what it holds |
//! |-------|---------|---------------|
//! | leaves | `error`, `time`, `limits`, `validate`, `codec`, `metrics`, `ids`, `trace_context`, `simulation` | what every layer uses |
//! | store | `store` | the only place SQL lives |
//! | actor | `actor` | the contract the macros implement and handlers use |
//! | engine | `engine` | the only layer that writes: calls, turns, workers, effects |
//! | client | `client` | what an application holds: `Runtime`, `Builder`, `Reference`, the policy |
//! | operators | `admin`, `web` | the one operator API, axum responses, SSE, the dashboard |
//!
//! The CLI (`src/bin`) is a crate of its own on top, using the public API only. `lib.rs` is
//! the crate root: it declares and re-exports the modules, and is no layer.
//!
//! The test reads every `crate::..` path in the code of `runtime/src` (`use` statements,
//! `pub use` and paths written inline, comments aside), resolves a name the root re-exports
//! (`crate::Error`) to the module it comes from, and fails on a path that points up a layer,
//! naming the file, the line and both layers. There is no exception.
//!
//! Inside a layer, no files import each other in a loop either: the test resolves every
//! `crate::..` and `super::..` path to the file it names and fails on a circle of files,
//! naming them. A folder's `mod.rs` declaring and re-exporting its own files is no import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers from the bottom up, each with its top-level modules.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaves",
        &[
            "error",
            "time",
            "limits",
            "validate",
            "codec",
            "metrics",
            "ids",
            "trace_context",
            "simulation",
        ],
    ),
    ("store", &["store"]),
    ("actor", &["actor"]),
    ("engine", &["engine"]),
    ("client", &["client"]),
    ("operators", &["admin", "web"]),
];

/// One `crate::..` path found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Import {
    /// The importing file, relative to `runtime/src`.
    file: String,
    /// The line it is on (from 1).
    line: usize,
    /// The path after `crate::`, with a re-exported root name resolved to its module.
    path: Vec<String>,
}

/// What the check refused.
#[derive(Debug, Default)]
struct Findings {
    /// Imports that point up a layer, as messages.
    upward: Vec<String>,
    /// Cycles between top-level modules, as messages.
    cycles: Vec<String>,
    /// Circles of files that import each other, as messages.
    file_cycles: Vec<String>,
}

impl Findings {
    fn is_empty(&self) -> bool {
        self.upward.is_empty() && self.cycles.is_empty() && self.file_cycles.is_empty()
    }
}

/// The index of a top-level module's layer and the layer's name.
fn layer_of(module: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, modules))| modules.contains(&module))
        .map(|(index, (name, _))| (index, *name))
}

/// The top-level module a file belongs to (`engine/call.rs` is in `engine`), `None` for the
/// crate root.
fn module_of(file: &str) -> Option<String> {
    if file == "lib.rs" {
        return None;
    }
    let first = file.split('/').next().unwrap_or(file);
    Some(first.trim_end_matches(".rs").to_owned())
}

/// Whether `c` may be part of an identifier.
fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The code of a file without its comments: whole `//` lines are blanked (keeping line
/// numbers), as are the `#[doc = ..]` lines docs are written with.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//")
                || trimmed.starts_with("#[doc")
                || trimmed.starts_with("doc =")
            {
                ""
            } else {
                line
            }
        })
        .collect()
}

/// The paths a use tree starting at `chars[at..]` names (after `crate::`): `a::b::{c, d::e}`
/// gives `a::b::c` and `a::b::d::e`, each with where its last segment starts. Returns where
/// the tree ends.
fn use_tree(
    chars: &[char],
    mut at: usize,
    prefix: &[String],
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    let mut last = at;
    let mut path = prefix.to_vec();
    loop {
        while at < chars.len() && chars[at].is_whitespace() {
            at += 1;
        }
        if at < chars.len() && chars[at] == '{' {
            at += 1;
            loop {
                while at < chars.len() && (chars[at].is_whitespace() || chars[at] == ',') {
                    at += 1;
                }
                if at >= chars.len() {
                    return at;
                }
                if chars[at] == '}' {
                    return at + 1;
                }
                let before = at;
                at = use_tree(chars, at, &path, out);
                if at == before {
                    at += 1;
                }
            }
        }
        let start = at;
        while at < chars.len() && (is_ident(chars[at]) || chars[at] == '*') {
            at += 1;
        }
        if start == at {
            if path.len() > prefix.len() {
                out.push((last, path));
            }
            return at;
        }
        let segment: String = chars[start..at].iter().collect();
        last = start;
        if segment != "self" {
            path.push(segment);
        }
        let mut after = at;
        while after < chars.len() && chars[after].is_whitespace() {
            after += 1;
        }
        if chars.get(after) == Some(&':') && chars.get(after + 1) == Some(&':') {
            at = after + 2;
            continue;
        }
        out.push((last, path));
        return at;
    }
}

/// Every `crate::..` path in a file's code, with the line its last segment is on.
fn crate_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    prefixed_paths(text, "crate::")
}

/// Every path in a file's code that starts with `prefix` (`crate::`, `super::`), without it,
/// with the line its last segment is on.
fn prefixed_paths(text: &str, prefix: &str) -> Vec<(usize, Vec<String>)> {
    let prefix: Vec<char> = prefix.chars().collect();
    let code = code_lines(text).join("\n");
    let chars: Vec<char> = code.chars().collect();
    let line_of = |index: usize| 1 + chars[..index].iter().filter(|c| **c == '\n').count();
    let mut found = Vec::new();
    let mut in_string = false;
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c == '"' && (at == 0 || (chars[at - 1] != '\\' && chars[at - 1] != '\'')) {
            in_string = !in_string;
        } else if !in_string
            && chars[at..].starts_with(&prefix)
            && (at == 0 || !(is_ident(chars[at - 1]) || chars[at - 1] == ':'))
        {
            let mut paths = Vec::new();
            let end = use_tree(&chars, at + prefix.len(), &[], &mut paths);
            found.extend(
                paths
                    .into_iter()
                    .map(|(index, path)| (line_of(index), path)),
            );
            at = end.max(at + 1);
            continue;
        }
        at += 1;
    }
    found
}

/// What each name the crate root re-exports is: `Error` is `error::Error`.
fn root_names(lib_rs: &str) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    let code = code_lines(lib_rs).join("\n");
    let chars: Vec<char> = code.chars().collect();
    let mut at = 0;
    while let Some(offset) = code[at..].find("pub use ") {
        let start = at + offset + "pub use ".len();
        let chars_start = code[..start].chars().count();
        let mut paths = Vec::new();
        use_tree(&chars, chars_start, &[], &mut paths);
        for (_, path) in paths {
            if let Some(last) = path.last() {
                names.insert(last.clone(), path.clone());
            }
        }
        at = start;
    }
    names
}

/// A path with a root re-export resolved: `crate::Error` is `crate::error::Error`.
fn resolve(path: &[String], roots: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut path = path.to_vec();
    for _ in 0..4 {
        let Some(first) = path.first() else { break };
        if layer_of(first).is_some() {
            break;
        }
        match roots.get(first) {
            Some(target) if target.first() != Some(first) => {
                path = target
                    .iter()
                    .cloned()
                    .chain(path[1..].iter().cloned())
                    .collect();
            }
            _ => break,
        }
    }
    path
}

/// Every import of the given files (path relative to `runtime/src`, text).
fn imports(files: &[(String, String)], lib_rs: &str) -> Vec<Import> {
    let roots = root_names(lib_rs);
    files
        .iter()
        .flat_map(|(file, text)| {
            crate_paths(text).into_iter().map(|(line, path)| Import {
                file: file.clone(),
                line,
                path: resolve(&path, &roots),
            })
        })
        .collect()
}

/// Checks the files against the layers, and for circles of files.
fn check(files: &[(String, String)], lib_rs: &str) -> Findings {
    let mut findings = Findings::default();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for import in imports(files, lib_rs) {
        let Some(from) = module_of(&import.file) else {
            continue;
        };
        let Some(to) = import.path.first().cloned() else {
            continue;
        };
        let (Some((from_layer, from_name)), Some((to_layer, to_name))) =
            (layer_of(&from), layer_of(&to))
        else {
            continue;
        };
        if from == to {
            continue;
        }
        if to_layer > from_layer {
            findings.upward.push(format!(
                "runtime/src/{}:{}: `crate::{}` points up: the {from_name} layer ({from}) \
                 may not import from the {to_name} layer ({to})",
                import.file,
                import.line,
                import.path.join("::"),
            ));
        }
        edges.entry(from).or_default().insert(to);
    }
    for cycle in cycles(&edges) {
        findings.cycles.push(format!(
            "the modules {} import each other: imports between top-level modules point one way",
            cycle.join(", ")
        ));
    }
    for cycle in cycles(&file_edges(files, lib_rs)) {
        findings.file_cycles.push(format!(
            "the files {} import each other in a loop: move what they share to a file of its \
             own, or the import that points back to the file that uses it",
            cycle
                .iter()
                .map(|file| format!("runtime/src/{file}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    findings
}

/// The module path of a file: `engine/call.rs` is `engine::call`, `engine/mod.rs` is
/// `engine`, `lib.rs` the root.
fn module_path(file: &str) -> Vec<String> {
    let trimmed = file.trim_end_matches(".rs");
    let mut path: Vec<String> = trimmed.split('/').map(str::to_owned).collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

/// The file a module path names, or the file of its longest prefix that is one (an item's
/// path names the file it is defined in).
fn file_of(path: &[String], known: &BTreeSet<String>) -> Option<String> {
    (1..=path.len()).rev().find_map(|len| {
        let module = path[..len].join("/");
        [format!("{module}.rs"), format!("{module}/mod.rs")]
            .into_iter()
            .find(|file| known.contains(file))
    })
}

/// Which file imports which, from their `crate::..` and `super::..` paths; a folder's
/// `mod.rs` importing its own files is left out (it declares and re-exports them).
fn file_edges(files: &[(String, String)], lib_rs: &str) -> BTreeMap<String, BTreeSet<String>> {
    let known: BTreeSet<String> = files.iter().map(|(file, _)| file.clone()).collect();
    let roots = root_names(lib_rs);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in files {
        // A file's own tests (`#[cfg(test)] mod tests`, at its end) import what they test.
        let text = text
            .find("#[cfg(test)]\nmod ")
            .map_or(text.as_str(), |tests| &text[..tests]);
        let module = module_path(file);
        let absolute = crate_paths(text)
            .into_iter()
            .map(|(_, path)| resolve(&path, &roots));
        let relative = prefixed_paths(text, "super::")
            .into_iter()
            .map(|(_, path)| {
                // `super` of `a/b.rs` (module `a::b`) is `a`; of `a/mod.rs` (module `a`), the root.
                let mut base = module.clone();
                base.pop();
                let mut path = path;
                while path.first().map(String::as_str) == Some("super") {
                    path.remove(0);
                    base.pop();
                }
                base.into_iter().chain(path).collect::<Vec<_>>()
            });
        let folder = file.strip_suffix("mod.rs");
        for target in absolute
            .chain(relative)
            .filter_map(|path| file_of(&path, &known))
        {
            let declares = folder.is_some_and(|folder| target.starts_with(folder));
            if target != *file && !declares {
                edges.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// The groups of modules that reach each other through imports (strongly connected
/// components of more than one module).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(module) = stack.pop() {
            for next in edges.get(&module).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let modules: BTreeSet<String> = edges
        .iter()
        .flat_map(|(from, to)| std::iter::once(from.clone()).chain(to.iter().cloned()))
        .collect();
    let reached: BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|m| (m.clone(), reach(m))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for module in &modules {
        if groups.iter().any(|group| group.contains(module)) {
            continue;
        }
        let group: Vec<String> = modules
            .iter()
            .filter(|other| {
                *other == module
                    || (reached[module].contains(*other) && reached[*other].contains(module))
            })
            .cloned()
            .collect();
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

/// The `.rs` files under `dir`, relative to `root`, without the CLI's separate crate.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if path.is_dir() {
            if relative != "bin" {
                rust_files(root, &path, out);
            }
        } else if relative.ends_with(".rs") {
            out.push((relative, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

#[test]
fn runtime_src_imports_point_down_the_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &root, &mut files);
    let lib_rs = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let findings = check(&files, &lib_rs);
    assert!(
        findings.is_empty(),
        "\n{}\n",
        findings
            .upward
            .iter()
            .chain(&findings.cycles)
            .chain(&findings.file_cycles)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&root, &root, &mut files);
    let unplaced: BTreeSet<String> = files
        .iter()
        .filter_map(|(file, _)| module_of(file))
        .filter(|module| layer_of(module).is_none())
        .collect();
    assert!(unplaced.is_empty(), "modules in no layer: {unplaced:?}");
}

/// A fake crate root re-exporting a few names, as lib.rs does.
const LIB_RS: &str = "pub use client::runtime::{Builder, Runtime};\npub use error::Error;\n";

/// Files made of `(path, text)` pairs.
fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
        .collect()
}

#[test]
fn an_upward_use_is_refused_with_its_file_line_and_layers() {
    let findings = check(
        &files(&[(
            "store/mod.rs",
            "use crate::error::Result;\n\nuse crate::client::runtime::Runtime;\n",
        )]),
        LIB_RS,
    );
    assert_eq!(findings.upward.len(), 1, "{findings:?}");
    let refusal = &findings.upward[0];
    assert!(
        refusal.starts_with("runtime/src/store/mod.rs:3:"),
        "{refusal}"
    );
    assert!(refusal.contains("the store layer (store)"), "{refusal}");
    assert!(refusal.contains("the client layer (client)"), "{refusal}");
}

#[test]
fn upward_paths_in_groups_inline_code_and_root_names_are_refused() {
    let findings = check(
        &files(&[
            (
                "actor/turn.rs",
                "use crate::{\n    error::Error,\n    engine::{Engine, from_micros},\n};\n",
            ),
            ("time/clock.rs", "fn f() { crate::store::open(); }\n"),
            ("engine/mod.rs", "pub(crate) use crate::Runtime;\n"),
        ]),
        LIB_RS,
    );
    let lines: Vec<&str> = findings
        .upward
        .iter()
        .map(|message| message.split(": ").next().unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "runtime/src/actor/turn.rs:3",
            "runtime/src/actor/turn.rs:3",
            "runtime/src/time/clock.rs:1",
            "runtime/src/engine/mod.rs:1"
        ],
        "{findings:?}"
    );
}

#[test]
fn comments_strings_and_downward_imports_pass() {
    let findings = check(
        &files(&[
            (
                "error.rs",
                "/// See [`Runtime`](crate::Runtime).\n// crate::admin::Admin\nconst A: &str = \"crate::engine\";\n",
            ),
            ("admin/mod.rs", "use crate::client::runtime::Runtime;\nuse crate::Error;\n"),
        ]),
        LIB_RS,
    );
    assert!(findings.is_empty(), "{findings:?}");
}

#[test]
fn two_files_of_one_folder_that_import_each_other_are_a_circle() {
    let findings = check(
        &files(&[
            (
                "engine/mod.rs",
                "mod call;\nmod enqueue;\npub(crate) use call::Call;\n",
            ),
            (
                "engine/call.rs",
                "use super::enqueue::insert;\nuse super::Engine;\n",
            ),
            ("engine/enqueue.rs", "use super::call::WAIT_POLL;\n"),
            ("engine/ask.rs", "use crate::engine::call::Call;\n"),
        ]),
        LIB_RS,
    );
    assert!(findings.upward.is_empty(), "{findings:?}");
    assert_eq!(findings.file_cycles.len(), 1, "{findings:?}");
    assert!(
        findings.file_cycles[0].contains("engine/call.rs, runtime/src/engine/enqueue.rs"),
        "{findings:?}"
    );
}

#[test]
fn two_modules_of_one_layer_that_import_each_other_are_a_cycle() {
    let findings = check(
        &files(&[
            ("time/clock.rs", "use crate::limits::later;\n"),
            ("limits.rs", "use crate::time::clock::IntoDuration;\n"),
        ]),
        LIB_RS,
    );
    assert!(findings.upward.is_empty(), "{findings:?}");
    assert_eq!(findings.cycles.len(), 1, "{findings:?}");
    assert!(findings.cycles[0].contains("limits, time"), "{findings:?}");
}
