//! The code's shape, as README.md's layout and docs/design.md's crate map
//! state it: no source file over 800 lines, and inside each crate modules
//! import one way (no circle among a crate's modules but openraft's
//! type-config idiom in `leasehold-raft`). Test modules are left out: they
//! may import beside what they test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MOST_LINES: usize = 800;

/// The one circle kept: openraft's `Raft<TypeConfig, StateMachine>` in
/// `types` beside the state machine that implements
/// `RaftStateMachine<TypeConfig>`.
const KEPT: &[(&str, &[&str])] = &[("raft", &["state_machine", "types"])];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_800_lines() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["crates", "tests", "examples", "fuzz/fuzz_targets"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() > 100, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MOST_LINES).then(|| format!("{} ({lines})", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MOST_LINES} lines: {long:?}");
}

/// A crate's modules by path (`node::members`), each with its file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        let is_test = parts.iter().any(|p| p == "tests" || p.ends_with("_tests"));
        if parts.is_empty() || parts == ["lib"] || parts == ["main"] || parts[0] == "bin" || is_test
        {
            continue;
        }
        out.insert(parts.join("::"), file);
    }
    out
}

/// The code of `file` before its inline test module.
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let cut = text.find("#[cfg(test)]\nmod tests {").unwrap_or(text.len());
    text[..cut]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Which modules of the crate's root each names through `crate::` or
/// `super::`, a module and its children counted as one (a child names its
/// parent's items by design).
fn imports(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, file) in mods {
        let code = code_of(file);
        let parent = name.rsplit_once("::").map(|(p, _)| p.to_string());
        let mut to = BTreeSet::new();
        for (prefix, base) in [("crate::", None), ("super::", parent.clone())] {
            for (at, _) in code.match_indices(prefix) {
                let rest = &code[at + prefix.len()..];
                let path: Vec<&str> = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("")
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .collect();
                for k in (1..=path.len()).rev() {
                    let mut target = path[..k].join("::");
                    if let Some(base) = &base {
                        target = format!("{base}::{target}");
                    }
                    if mods.contains_key(&target) {
                        let target = top(&target);
                        if target != top(name) {
                            to.insert(target.to_string());
                        }
                        break;
                    }
                }
            }
        }
        graph.entry(top(name).to_string()).or_default().extend(to);
    }
    graph
}

/// The module of the crate's root that `module` sits in (`node` for
/// `node::members`): a module and its children count as one.
fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The strongly connected sets of more than one module (Tarjan's).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    set.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn modules_import_one_way_inside_each_crate() {
    let crates = root().join("crates");
    let mut found = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let krate = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mods = modules(&dir.join("src"));
        seen += mods.len();
        for circle in circles(&imports(&mods)) {
            let kept = KEPT.iter().any(|(k, set)| {
                *k == krate && circle.iter().map(String::as_str).eq(set.iter().copied())
            });
            if !kept {
                found.push(format!("{krate}: {circle:?}"));
            }
        }
    }
    assert!(seen > 100, "found only {seen} modules");
    assert!(found.is_empty(), "import circles: {found:?}");
}

/// The check finds a circle when there is one (two modules naming each
/// other), and none in a chain.
#[test]
fn the_circle_check_sees_a_circle() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert_eq!(
        circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).len(),
        1
    );
    assert!(circles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
}
