//! The op registry is the one place that names operators: quantkit-ptq, quantkit-engine and
//! quantkit-cli ask it by `OpKind` and never match op-type strings (issue 15). This test
//! reads their sources and fails on any string literal that is an ONNX operator type or a
//! registered operator's name, outside `#[cfg(test)]` modules and comments.

use quantkit_graph::OpKind;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn op_names() -> BTreeSet<String> {
    let list = include_str!("data/onnx_op_types.txt");
    let mut names: BTreeSet<String> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    names.extend(OpKind::ALL.iter().map(|k| k.name().to_string()));
    names
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("source folder readable") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The string literals of `src` with their line numbers, skipping comments and everything
/// from a `#[cfg(test)]` line on (test modules sit at the end of a file).
fn literals(src: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (no, line) in src.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let mut chars = line.char_indices().peekable();
        let mut cur: Option<String> = None;
        while let Some((_, c)) = chars.next() {
            match (&mut cur, c) {
                (None, '/') if chars.peek().map(|p| p.1) == Some('/') => break,
                (None, '\'') => {
                    // A char literal such as '"' (or a lifetime): skip it whole.
                    let rest: String = chars.clone().take(3).map(|p| p.1).collect();
                    if rest.starts_with("\"'") || rest.starts_with("\\\"") {
                        chars.nth(if rest.starts_with("\"'") { 1 } else { 2 });
                    }
                }
                (None, '"') => cur = Some(String::new()),
                (Some(s), '\\') => {
                    if let Some((_, e)) = chars.next() {
                        s.push('\\');
                        s.push(e);
                    }
                }
                (Some(s), '"') => {
                    out.push((no + 1, std::mem::take(s)));
                    cur = None;
                }
                (Some(s), ch) => s.push(ch),
                (None, _) => {}
            }
        }
    }
    out
}

#[test]
fn no_op_type_strings_outside_the_registry() {
    let names = op_names();
    assert!(names.contains("Conv") && names.contains("QGemm") && names.len() > 200);
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in ["quantkit-ptq", "quantkit-engine", "quantkit-cli"] {
        let mut files = Vec::new();
        rust_files(&crates.join(krate).join("src"), &mut files);
        assert!(!files.is_empty(), "{krate} has sources");
        for f in files {
            let src = std::fs::read_to_string(&f).expect("readable");
            for (line, lit) in literals(&src) {
                if names.contains(&lit) {
                    found.push(format!("{}:{line}: \"{lit}\"", f.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "op-type strings outside the registry (use OpKind / Facts):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_sees_literals_and_skips_comments_and_tests() {
    let src = "let a = \"Conv\"; // \"Relu\"\n// \"Gemm\"\nlet q = '\"'; let b = \"x\\\"Add\";\n#[cfg(test)]\nmod t { \"MatMul\" }\n";
    let lits: Vec<String> = literals(src).into_iter().map(|l| l.1).collect();
    assert_eq!(lits, ["Conv", "x\\\"Add"]);
}
