//! The layout stays true: every `crate::` path in `src/` goes down the stage order of
//! ARCHITECTURE.md (floor < fitness < simulate < generate < evolve < report < front), only the
//! front ends use `testing`, no two modules import each other in a cycle, no two files do
//! either (a file may use its parent module's items: `super::` is not a cycle), and no source
//! file is over [`MAX_LINES`] lines (an inline `#[cfg(test)] mod tests` at its end not counted).
//!
//! The checker reads the source text (use statements, brace groups, inline paths and
//! `super::` paths resolved against the file's module), so it needs no compiler support.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Rank of a top-level module; the floor is 0.
fn rank(top: &str) -> Option<u8> {
    Some(match top {
        "child" | "dialogue" | "error" | "hub" | "io" | "limits" | "llm" | "persona" | "rng"
        | "shipped" | "testing" => 0,
        "fitness" => 1,
        "simulate" => 2,
        "generate" => 3,
        "evolve" => 4,
        "report" => 5,
        "front" => 6,
        _ => return None,
    })
}

/// One import that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Violation {
    file: String,
    line: usize,
    path: String,
    why: String,
}

/// Module path of a source file relative to `src/` (`evolve/mutation/mod.rs` → evolve::mutation).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

/// Strip `//` comments (doc comments included) and string literals, keeping line structure.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
                kept.push(' ');
            } else if !in_str {
                kept.push(c);
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Expand a use tree like `crate::{a::b, c::{d, e}}` into full paths.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" as ", "@")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    fn go(prefix: &str, s: &str, out: &mut Vec<String>) {
        if let Some(open) = s.find('{') {
            let head = &s[..open];
            let body = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
            // split body at top-level commas
            let mut depth = 0;
            let mut start = 0;
            let bytes: Vec<char> = body.chars().collect();
            let mut items = Vec::new();
            for (i, c) in bytes.iter().enumerate() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(bytes[start..i].iter().collect::<String>());
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(bytes[start..].iter().collect::<String>());
            for item in items.into_iter().filter(|i| !i.is_empty()) {
                go(&format!("{prefix}{head}"), &item, out);
            }
        } else {
            out.push(format!("{prefix}{s}"));
        }
    }
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// Every module path a file refers to, with its line: `(line, [segments])`, resolved to start
/// at the crate root.
fn references(module: &[String], text: &str) -> Vec<(usize, Vec<String>)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    let resolve = |path: &str| -> Option<Vec<String>> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = Vec::new();
        let mut rest = &segs[..];
        match segs.first() {
            Some(&"crate") => rest = &segs[1..],
            Some(&"super") => {
                base = module.to_vec();
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            Some(&"self") => {
                base = module.to_vec();
                rest = &segs[1..];
            }
            _ => return None,
        }
        base.extend(rest.iter().map(|s| s.to_string()));
        Some(base)
    };
    // use statements (possibly over several lines, with brace groups)
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
        if let Some(rest) = t.strip_prefix("use ") {
            let start = i;
            let mut stmt = rest.to_string();
            while !stmt.contains(';') && i + 1 < lines.len() {
                i += 1;
                stmt.push_str(lines[i]);
            }
            let stmt = stmt.split(';').next().unwrap_or("");
            for p in expand(stmt) {
                let p = p.split('@').next().unwrap_or(&p).to_string();
                if let Some(r) = resolve(&p) {
                    out.push((start + 1, r));
                }
            }
        } else {
            // inline paths: crate::a::b, super::a (super::super::a read once, from its start)
            let starts = lines[i]
                .match_indices("crate::")
                .chain(lines[i].match_indices("super::"));
            for (idx, _) in starts {
                let before = lines[i][..idx].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                    continue;
                }
                let tail: String = lines[i][idx..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                if let Some(r) = resolve(&tail) {
                    out.push((i + 1, r));
                }
            }
        }
        i += 1;
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Check a source tree; returns every violation (stage order, `testing`, cycles).
fn check(src: &Path) -> Vec<Violation> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    // module graph at the level "stage::module" (or the floor module itself)
    let node = |m: &[String]| -> String {
        match m {
            [] => String::new(),
            [a] => a.clone(),
            [a, b, ..] if rank(a).is_some_and(|r| r > 0) => format!("{a}::{b}"),
            [a, ..] => a.clone(),
        }
    };
    let mut edges: BTreeMap<String, BTreeMap<String, (String, usize)>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(src).expect("under src");
        let module = module_of(rel);
        if module.is_empty() {
            continue; // lib.rs / main.rs declare the modules
        }
        let text = std::fs::read_to_string(f).expect("read");
        let from_top = &module[0];
        let Some(from_rank) = rank(from_top) else {
            violations.push(Violation {
                file: rel.display().to_string(),
                line: 0,
                path: from_top.clone(),
                why: "top-level module not in ARCHITECTURE.md's stage list".into(),
            });
            continue;
        };
        for (line, target) in references(&module, &text) {
            let Some(to_top) = target.first() else {
                continue;
            };
            let Some(to_rank) = rank(to_top) else {
                continue; // Error, Result and other items at the crate root
            };
            let shown = format!("crate::{}", target.join("::"));
            if to_rank > from_rank {
                violations.push(Violation {
                    file: rel.display().to_string(),
                    line,
                    path: shown.clone(),
                    why: format!("upward import: {from_top} (stage {from_rank}) uses {to_top} (stage {to_rank})"),
                });
            }
            if to_top == "testing" && from_top != "front" && from_top != "testing" {
                violations.push(Violation {
                    file: rel.display().to_string(),
                    line,
                    path: shown.clone(),
                    why: "only the front ends may use the test support module".into(),
                });
            }
            let (a, b) = (node(&module), node(&target));
            if a != b && !b.is_empty() {
                edges
                    .entry(a)
                    .or_default()
                    .entry(b)
                    .or_insert((rel.display().to_string(), line));
            }
        }
    }
    // cycles between modules
    let nodes: Vec<String> = edges.keys().cloned().collect();
    let mut reported = BTreeSet::new();
    for start in &nodes {
        // DFS for a path back to start
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((n, path)) = stack.pop() {
            for next in edges
                .get(&n)
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if &next == start {
                    let mut cyc = path.clone();
                    cyc.sort();
                    if reported.insert(cyc) {
                        let (file, line) = edges[&n][&next].clone();
                        violations.push(Violation {
                            file,
                            line,
                            path: next.clone(),
                            why: format!("import cycle: {} -> {}", path.join(" -> "), start),
                        });
                    }
                } else if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next, p));
                }
            }
        }
    }
    violations.sort();
    violations
}

/// The most lines a source file may have before its inline test module.
const MAX_LINES: usize = 1_000;

/// Lines of a file before its inline test module (`#[cfg(test)]` followed by `mod`).
fn lines_without_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_end() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|n| !n.trim().is_empty())
                .is_some_and(|n| n.starts_with("mod ") || n.starts_with("pub mod "))
        {
            return i;
        }
    }
    lines.len()
}

/// Files over [`MAX_LINES`] lines (inline test modules not counted).
fn oversized(src: &Path) -> Vec<Violation> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    files
        .iter()
        .filter_map(|f| {
            let n = lines_without_tests(&std::fs::read_to_string(f).expect("read"));
            (n > MAX_LINES).then(|| Violation {
                file: f
                    .strip_prefix(src)
                    .expect("under src")
                    .display()
                    .to_string(),
                line: n,
                path: String::new(),
                why: format!("{n} lines without its tests: split it by job (at most {MAX_LINES})"),
            })
        })
        .collect()
}

/// Cycles between files: file A uses an item of file B and B one of A. A file's use of its
/// ancestors' items (`super::`, a `mod.rs` and its children) is not counted.
fn file_cycles(src: &Path) -> Vec<Violation> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).expect("under src");
            (module_of(rel), rel.display().to_string())
        })
        .filter(|(m, _)| !m.is_empty())
        .collect();
    let file_of = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains_key(p))
    };
    let mut edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, usize>> = BTreeMap::new();
    for (module, rel) in &modules {
        let text = std::fs::read_to_string(src.join(rel)).expect("read");
        let text: String = text
            .lines()
            .take(lines_without_tests(&text))
            .collect::<Vec<_>>()
            .join("\n");
        for (line, target) in references(module, &text) {
            let Some(to) = file_of(&target) else { continue };
            // the same file, or an ancestor of it (a parent module's items)
            if module.starts_with(&to) {
                continue;
            }
            edges
                .entry(module.clone())
                .or_default()
                .entry(to)
                .or_insert(line);
        }
    }
    let mut out = Vec::new();
    let mut reported = BTreeSet::new();
    for (a, targets) in &edges {
        for (b, line) in targets {
            // a path back from b to a
            let mut stack = vec![b.clone()];
            let mut seen = BTreeSet::from([b.clone()]);
            let mut back = false;
            while let Some(n) = stack.pop() {
                if &n == a {
                    back = true;
                    break;
                }
                for next in edges.get(&n).into_iter().flat_map(|m| m.keys()) {
                    if seen.insert(next.clone()) {
                        stack.push(next.clone());
                    }
                }
            }
            let pair = if a < b {
                (a.clone(), b.clone())
            } else {
                (b.clone(), a.clone())
            };
            if back && reported.insert(pair) {
                out.push(Violation {
                    file: modules[a].clone(),
                    line: *line,
                    path: format!("crate::{}", b.join("::")),
                    why: format!(
                        "file-level import cycle: {} and {} reach each other",
                        modules[a], modules[b]
                    ),
                });
            }
        }
    }
    out
}

/// Write `text` to `src/rel` of a fabricated tree.
fn write_file(src: &Path, rel: &str, text: &str) {
    let p = src.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn render(v: &[Violation]) -> String {
    v.iter()
        .map(|v| format!("src/{}:{}: {} ({})", v.file, v.line, v.path, v.why))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn imports_follow_the_stage_order() {
    let src = super::util::root().join("src");
    let v = check(&src);
    assert!(v.is_empty(), "layout violations:\n{}", render(&v));
}

#[test]
fn no_two_files_import_each_other() {
    let src = super::util::root().join("src");
    let v = file_cycles(&src);
    assert!(v.is_empty(), "file-level cycles:\n{}", render(&v));
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let src = super::util::root().join("src");
    let v = oversized(&src);
    assert!(v.is_empty(), "rooms that do several jobs:\n{}", render(&v));
}

#[test]
fn the_file_checks_catch_a_sibling_cycle_and_a_long_file_but_not_a_parent_or_tests() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| write_file(src, rel, text);
    write("lib.rs", "pub mod simulate;\n");
    // siblings reaching each other: one through crate::, one through super::
    write(
        "simulate/tau2/data.rs",
        "use crate::simulate::tau2::demo::DEMO;\npub struct Db;\n",
    );
    write(
        "simulate/tau2/demo.rs",
        "use super::data::Db;\npub const DEMO: u8 = 0;\n",
    );
    // a parent and its child using each other's items: not a cycle
    write(
        "simulate/tau2/mod.rs",
        "pub mod data;\npub mod demo;\npub mod airline;\nuse self::airline::Airline;\npub struct Domain;\n",
    );
    write(
        "simulate/tau2/airline.rs",
        "use super::Domain;\npub struct Airline;\n",
    );
    // long code, and a file that is long only through its inline tests
    let body = "fn f() {}\n".repeat(MAX_LINES + 1);
    write("simulate/long.rs", &body);
    write(
        "simulate/tested.rs",
        &format!(
            "fn g() {{}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
            "fn t() {}\n".repeat(MAX_LINES)
        ),
    );
    let cycles = render(&file_cycles(src));
    assert!(
        cycles.contains("simulate/tau2/data.rs") && cycles.contains("simulate/tau2/demo.rs"),
        "{cycles}"
    );
    assert!(
        !cycles.contains("mod.rs") && !cycles.contains("airline"),
        "{cycles}"
    );
    assert_eq!(file_cycles(src).len(), 1, "{cycles}");
    let long = render(&oversized(src));
    assert!(long.contains("simulate/long.rs:1001"), "{long}");
    assert!(!long.contains("tested.rs"), "{long}");
}

#[test]
fn the_checker_catches_an_upward_import_a_cycle_and_testing_use() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |rel: &str, text: &str| write_file(src, rel, text);
    write("lib.rs", "pub mod fitness;\n");
    // fitness (stage 1) reaching up into evolve (stage 4), in a brace group over two lines
    write(
        "fitness/score.rs",
        "use crate::{dialogue::Dialogue,\n    evolve::archive::Archive};\n",
    );
    // an inline upward path and a use of the test support outside the front ends
    write(
        "simulate/episode/runner.rs",
        "fn f() { let _ = crate::report::write; }\nuse crate::testing::mock_server::MockServer;\n",
    );
    // a cycle inside one stage, one side through super::
    write("evolve/archive.rs", "use crate::evolve::mutation::X;\n");
    write(
        "evolve/mutation/prompt.rs",
        "use super::super::archive::Inspiration;\n",
    );
    // comments and strings are not imports
    write(
        "fitness/features.rs",
        "// use crate::front::ops;\nconst S: &str = \"crate::front::ops\";\n",
    );
    let v = check(src);
    let text = render(&v);
    assert!(
        text.contains("src/fitness/score.rs:1: crate::evolve::archive::Archive (upward import"),
        "{text}"
    );
    assert!(
        text.contains("src/simulate/episode/runner.rs:1: crate::report::write (upward import"),
        "{text}"
    );
    assert!(
        text.contains("crate::testing::mock_server::MockServer (only the front ends"),
        "{text}"
    );
    assert!(text.contains("import cycle"), "{text}");
    assert!(
        text.contains("evolve::archive") && text.contains("evolve::mutation"),
        "{text}"
    );
    assert!(
        !text.contains("features.rs"),
        "comments or strings counted: {text}"
    );
    assert_eq!(v.len(), 4, "{text}");
}

/// The repository paths a markdown text names in backticks that do not exist. A name counts
/// as a path when it has a `/` or a source file's extension; it exists when some file or
/// folder of the repository ends with it (component by component, `.rs` added to a module
/// path such as `archive/program`; `{a,b}` expanded; a `*` checks the folder before it). Names
/// inside a run directory are written `RUN/...` and not checked, nor URLs and `<placeholders>`.
fn missing_paths(doc: &str, root: &Path) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if [".git", "target", ".venv", ".venv-ref", "node_modules"].contains(&name.as_str()) {
                continue;
            }
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.push(format!("{rel}/"));
                walk(&p, root, out);
            } else {
                out.push(rel);
            }
        }
    }
    walk(root, root, &mut all);
    let exists = |name: &str| {
        let name = name.trim_start_matches("./");
        let wanted = [name.to_string(), format!("{name}.rs"), format!("{name}/")];
        all.iter().any(|p| {
            wanted
                .iter()
                .any(|w| p == w || p.ends_with(&format!("/{w}")) || p == w.trim_end_matches('/'))
        })
    };
    let mut missing = Vec::new();
    for (i, part) in doc.split('`').enumerate() {
        if i % 2 == 0 || part.contains("://") || part.contains('<') || part.starts_with("RUN/") {
            continue;
        }
        let pathlike = part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./{},*-".contains(c));
        let source = [
            ".rs", ".py", ".pyi", ".md", ".toml", ".sh", ".jinja", ".html",
        ]
        .iter()
        .any(|e| part.ends_with(e));
        if !pathlike || !(part.contains('/') || source) || part.starts_with('-') {
            continue;
        }
        for name in expand_braces(part) {
            let name = match name.find('*') {
                Some(i) => name[..i].to_string(),
                None => name,
            };
            if !name.is_empty() && !exists(&name) {
                missing.push(name);
            }
        }
    }
    missing.sort();
    missing.dedup();
    missing
}

/// `src/{a,b}.rs` → `src/a.rs`, `src/b.rs` (one brace group).
fn expand_braces(s: &str) -> Vec<String> {
    match (s.find('{'), s.find('}')) {
        (Some(a), Some(b)) if a < b => s[a + 1..b]
            .split(',')
            .map(|x| format!("{}{x}{}", &s[..a], &s[b + 1..]))
            .collect(),
        _ => vec![s.to_string()],
    }
}

#[test]
fn architecture_md_names_only_paths_that_exist() {
    let root = super::util::root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let missing = missing_paths(&doc, &root);
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist: {missing:?}"
    );
}

#[test]
fn the_path_check_catches_a_stale_name_but_not_a_run_directory_or_a_module_path() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "evolve/archive/program.rs", "");
    write_file(dir.path(), "front/ops/mod.rs", "");
    let doc = "`front/ops.rs` and `front/ops/` and `archive/program` and `src/{evolve,gone}/` \
               and `RUN/best/` and `eval-<split>/x` and `hf://a/b` and `gone.py` and `ppol`";
    let missing = missing_paths(doc, dir.path());
    assert_eq!(
        missing,
        ["front/ops.rs", "gone.py", "src/evolve/", "src/gone/"]
    );
}
