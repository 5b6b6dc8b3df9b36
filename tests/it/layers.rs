//! The layer order of docs/architecture.md, enforced: in production code, a module imports only
//! the layers to its left (`api ← source ← load ← render ← apply ← pass ← notify ← daemon ←
//! server ← cli`). Every `crate::<layer>` path is checked, in `use` lines, `use crate::{…}`
//! groups and paths written inline; comments and the items under `#[cfg(test)]` are not
//! production code, and only those items are skipped: the code after them is checked.

use std::path::{Path, PathBuf};

/// Left to right: a layer may name the layers before it and itself.
const LAYERS: &[&str] = &[
    "api", "mem", "source", "sops", "helm", "load", "render", "apply", "pass", "notify", "daemon",
    "server", "ui", "cli",
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

/// The production text of a file, line by line (numbered from 1): comments blanked, and each
/// item that follows a `#[cfg(test)]` attribute blanked too (a `mod tests;` declaration, a
/// `mod tests { … }` block, a `use`, a fn, a field). Only that item goes: a file that declares
/// `#[cfg(test)] mod tests;` at its top is still checked below it. Strings and char literals are
/// read as such, so a `{` or `//` inside one neither opens a block nor starts a comment, and a
/// `crate::` inside one is text, not a path.
fn production_lines(text: &str) -> Vec<(usize, String)> {
    production_text(text)
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| (i + 1, line.trim_end().to_string()))
        .collect()
}

/// `text` with comments, string and char literals, and `#[cfg(test)]` items replaced by spaces;
/// newlines stay, so line numbers stay true.
fn production_text(text: &str) -> String {
    blank(text, false)
}

/// [`production_text`], with the string literals of production code kept (the text a program
/// writes and compares, for checks of what it names).
fn production_code_and_strings(text: &str) -> String {
    blank(text, true)
}

fn blank(text: &str, keep_strings: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    // While skipping a test-only item: its bracket depth, counted from the attribute's `#`.
    let mut skip: Option<usize> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let rest = &chars[i..];
        let starts = |s: &str| rest.iter().take(s.chars().count()).copied().eq(s.chars());
        // Comments and literals are blanked whole: a path inside a string is no import.
        let span = if starts("//") {
            Some(rest.iter().position(|&c| c == '\n').unwrap_or(rest.len()))
        } else if starts("/*") {
            Some(block_comment_len(rest))
        } else if c == '"' {
            Some(string_len(rest))
        } else if c == '\'' {
            char_literal_len(rest)
        } else {
            raw_string_len(&chars, i)
        };
        if let Some(len) = span {
            let string = c == '"' || (c != '\'' && !starts("//") && !starts("/*"));
            if keep_strings && string && skip.is_none() {
                out.extend(&rest[..len]);
                i += len;
                continue;
            }
            out.extend(rest[..len].iter().map(|&c| if c == '\n' { c } else { ' ' }));
            i += len;
            continue;
        }
        if skip.is_none() && starts("#[cfg(test)]") {
            skip = Some(0);
        }
        let Some(depth) = skip else {
            out.push(c);
            i += 1;
            continue;
        };
        // The item ends at a `;` or `,` outside brackets, at the `}` that closes its body, or
        // before the bracket that closes what encloses it (a field that is the last of a struct).
        let (next, ends, keep) = match c {
            '(' | '[' | '{' => (Some(depth + 1), false, false),
            ')' | ']' | '}' if depth == 0 => (None, true, true),
            '}' if depth == 1 => (None, true, false),
            ')' | ']' | '}' => (Some(depth - 1), false, false),
            ';' | ',' if depth == 0 => (None, true, false),
            _ => (Some(depth), false, false),
        };
        out.push(if keep || c == '\n' { c } else { ' ' });
        skip = if ends { None } else { next };
        i += 1;
    }
    out
}

/// The length of the `/* … */` comment at the start of `rest`; Rust's block comments nest.
fn block_comment_len(rest: &[char]) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i < rest.len() {
        if rest[i..].starts_with(&['/', '*']) {
            depth += 1;
            i += 2;
        } else if rest[i..].starts_with(&['*', '/']) {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    rest.len()
}

/// The length of the `"…"` string at the start of `rest`, escapes included.
fn string_len(rest: &[char]) -> usize {
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    rest.len()
}

/// The length of a raw string `r"…"`, `r#"…"#` (or `br…`) starting at `chars[at]`, if one does.
fn raw_string_len(chars: &[char], at: usize) -> Option<usize> {
    if chars[at] != 'r' || at > 0 && (chars[at - 1].is_alphanumeric() && chars[at - 1] != 'b') {
        return None;
    }
    let hashes = chars[at + 1..].iter().take_while(|&&c| c == '#').count();
    let open = at + 1 + hashes;
    if chars.get(open) != Some(&'"') {
        return None;
    }
    let close: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    let end = (open + 1..chars.len())
        .find(|&j| chars[j..].starts_with(&close))
        .map_or(chars.len(), |j| j + close.len());
    Some(end - at)
}

/// The length of the char literal at the start of `rest` (`'a'`, `'\n'`, `'\''`, `'\u{7b}'`),
/// or `None` for a lifetime (`'a`), which is plain code.
fn char_literal_len(rest: &[char]) -> Option<usize> {
    match rest.get(1)? {
        // The escaped char (at 2) may itself be a quote: the closing one comes after it.
        '\\' => rest
            .get(3..)?
            .iter()
            .position(|&c| c == '\'')
            .map(|p| p + 4),
        _ if rest.get(2) == Some(&'\'') => Some(3),
        _ => None,
    }
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

/// The paths of `named` that point right of the layer `layer` (at `own`) or to no layer, each as
/// `line: what is wrong`.
fn violations<'a>(
    layer: &'a str,
    own: usize,
    named: &'a [(usize, String)],
) -> impl Iterator<Item = String> + 'a {
    named
        .iter()
        .filter_map(move |(line, name)| match rank(name) {
            Some(r) if r > own => Some(format!(
                "{line}: {layer} imports crate::{name}, a layer to its right"
            )),
            Some(_) => None,
            None => Some(format!("{line}: crate::{name} is in no layer")),
        })
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
        let named = named_layers(&production_lines(&text));
        checked += named.len();
        let at = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .display()
            .to_string();
        wrong.extend(violations(&layer, own, &named).map(|v| format!("{at}:{v}")));
    }
    // The check read real imports (hundreds of them), so it cannot pass on an empty scan.
    assert!(checked > 200, "only {checked} crate:: paths found");
    assert!(
        wrong.is_empty(),
        "imports against the layer order of docs/architecture.md:\n{}",
        wrong.join("\n")
    );
}

/// Weft's own kinds and where they keep their inventory, as the apply engine must not name
/// them: that knowledge is the owner kinds' policy (`api::owner::InventoryHome`), given with
/// each owner, and the kinds that own children arrive in `PruneOptions::owner_kinds`.
const WEFT_KNOWLEDGE: &[&str] = &[
    "OwnerKind::Root",
    "OwnerKind::ArmadaChart",
    "OwnerKind::WeaveCloud",
    "OwnerKind::RENDERING",
    "api::weavecloud",
    "api::armada",
    "api::root",
    "\"WeaveCloud\"",
    "\"ArmadaChart\"",
    "\"Root\"",
    "status/inventory",
    "\"inventory\"",
];

/// What of [`WEFT_KNOWLEDGE`] the production code of `text` names, with line numbers.
fn weft_knowledge(text: &str) -> Vec<String> {
    production_code_and_strings(text)
        .lines()
        .enumerate()
        .flat_map(|(i, line)| {
            WEFT_KNOWLEDGE
                .iter()
                .filter(move |word| line.contains(*word))
                .map(move |word| format!("{}: {word}", i + 1))
        })
        .collect()
}

#[test]
fn the_apply_engine_names_no_kind_of_wefts() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join("apply"), &mut files);
    files.sort();
    assert!(
        files.len() > 20,
        "only {} files under src/apply",
        files.len()
    );
    let mut named = Vec::new();
    for file in files.iter().filter(|f| !test_only(f)) {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let at = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .display()
            .to_string();
        named.extend(
            weft_knowledge(&text)
                .into_iter()
                .map(|w| format!("{at}:{w}")),
        );
    }
    assert!(
        named.is_empty(),
        "the apply engine names what its callers should pass as policy data (docs/architecture.md):\n{}",
        named.join("\n")
    );
}

#[test]
fn the_knowledge_check_reads_strings_and_paths_but_not_comments_or_tests() {
    let text = "// a WeaveCloud's \"status/inventory\"\nlet p = v.pointer(\"/status/inventory\");\nif k == OwnerKind::Root {}\n#[cfg(test)]\nmod tests { const K: &str = \"WeaveCloud\"; }\n";
    assert_eq!(
        weft_knowledge(text),
        ["2: status/inventory", "3: OwnerKind::Root"]
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

/// What `violations` reports for `text` as a file of `layer`, line numbers included.
fn verdict(layer: &str, text: &str) -> Vec<String> {
    let own = rank(layer).expect("a layer");
    let named = named_layers(&production_lines(text));
    violations(layer, own, &named).collect()
}

#[test]
fn a_test_module_declared_at_the_top_does_not_blind_the_rest_of_the_file() {
    // The shape of `src/daemon/updater/mod.rs`: the test module is declared before the code.
    let text = "//! A header.\n\
                mod state;\n\
                #[cfg(test)]\n\
                mod tests;\n\
                \n\
                use crate::server::forward;\n";
    assert_eq!(
        verdict("pass", text),
        ["6: pass imports crate::server, a layer to its right"]
    );
}

#[test]
fn only_the_item_under_cfg_test_is_skipped() {
    let text = r##"use crate::api::x;
#[cfg(test)]
mod tests {
    use crate::daemon::fixtures; // a test may reach right
    const OPEN: &str = "{ { {";
    const RAW: &str = r#"} "quoted" }"#;
    const QUOTE: char = '}';
    const ESCAPED: char = '\'';
    fn f<'a>(s: &'a str) -> &'a str { /* } nested /* } */ */ s }
}
#[cfg(test)]
#[allow(unused)]
use crate::cli::testing;
struct Counts {
    #[cfg(test)]
    seen: crate::server::Seen,
    total: crate::daemon::Total,
}
#[cfg(test)]
fn helper() -> crate::ui::View { crate::ui::view() }
const URL: &str = "http://crate::in/a/string"; let brace = '{';
fn run() { crate::cli::main() }
"##;
    assert_eq!(
        verdict("pass", text),
        [
            "17: pass imports crate::daemon, a layer to its right",
            "22: pass imports crate::cli, a layer to its right",
        ]
    );
}
