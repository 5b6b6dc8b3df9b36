//! The layer order of docs/architecture.md, enforced: in production code, a module imports only
//! the layers to its left (`api ← source ← load ← render ← apply ← pass ← notify ← daemon ←
//! server ← cli`). Every `crate::<layer>` path is checked, in `use` lines, `use crate::{…}`
//! groups and paths written inline; comments and `#[cfg(test)]` code are not production code.

use std::path::{Path, PathBuf};

/// Left to right: a layer may name the layers before it and itself.
const LAYERS: &[&str] = &[
    "api", "mem", "source", "load", "render", "apply", "pass", "notify", "daemon", "server", "ui",
    "cli",
];

fn rank(layer: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == layer)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The layer a file of `src/` belongs to (`src/pass/engine.rs` → `pass`, `src/mem.rs` → `mem`).
fn layer_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// Is the file test-only (a sibling `tests.rs`, `*_tests.rs`, or under a `tests/` folder)?
fn test_only(file: &Path) -> bool {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || file.components().any(|c| c.as_os_str() == "tests")
}

/// The production text of a file: up to its first `#[cfg(test)]`, without comments.
fn production_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match line.find("//") {
            // A `//` inside a string (a URL) is kept: only a trailing comment after code goes.
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push((i + 1, code.to_string()));
    }
    out
}

/// Every layer a file's production code names through `crate::`, with its line.
fn named_layers(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_group = false;
    for (n, line) in lines {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            if let Some(group) = after.strip_prefix('{') {
                in_group = true;
                rest = group;
                continue;
            }
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((*n, name));
            rest = after;
        }
        // Inside `use crate::{a::…, b, …};` each item starts a path of its own.
        if in_group {
            for item in rest.split([',', '{']) {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if rank(&name).is_some() && !out.iter().any(|(m, l)| m == n && *l == name) {
                    out.push((*n, name));
                }
            }
            if line.contains("};") {
                in_group = false;
            }
        }
    }
    out
}

#[test]
fn no_production_import_points_right() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in &files {
        let Some(layer) = layer_of(&src, file) else {
            continue;
        };
        // The crate root and the binary see every layer.
        let Some(own) = rank(&layer) else {
            assert!(
                matches!(layer.as_str(), "lib" | "main"),
                "{}: a module of no layer; add it to LAYERS and to docs/architecture.md",
                file.display()
            );
            continue;
        };
        if test_only(file) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (line, name) in named_layers(&production_lines(&text)) {
            checked += 1;
            match rank(&name) {
                Some(r) if r > own => wrong.push(format!(
                    "{}:{line}: {layer} imports crate::{name}, a layer to its right",
                    file.strip_prefix(&src).unwrap_or(file).display()
                )),
                Some(_) => {}
                None => wrong.push(format!(
                    "{}:{line}: crate::{name} is in no layer",
                    file.strip_prefix(&src).unwrap_or(file).display()
                )),
            }
        }
    }
    // The check read real imports (hundreds of them), so it cannot pass on an empty scan.
    assert!(checked > 200, "only {checked} crate:: paths found");
    assert!(
        wrong.is_empty(),
        "imports against the layer order of docs/architecture.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_sees_inline_paths_and_use_groups() {
    let text = "use crate::{api::x, daemon::y,\n    server};\nfn f() { crate::cli::run(); } // crate::pass in a comment\n#[cfg(test)]\nmod tests { use crate::daemon; }\n";
    let names: Vec<String> = named_layers(&production_lines(text))
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["api", "daemon", "server", "cli"]);
}
