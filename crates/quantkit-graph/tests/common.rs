//! Locating ../shared (QUANTKIT_SHARED or the sibling folder of the workspace).
#![allow(dead_code)]

use std::path::PathBuf;

/// The shared folder if present. Under CI a missing folder is a failure; elsewhere the
/// caller skips with the printed reason.
pub fn shared(sub: &str) -> Option<PathBuf> {
    let root = std::env::var("QUANTKIT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")));
    let p = root.join(sub);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{} is missing (required under CI)", p.display());
    }
    eprintln!("skipping: {} not found (set QUANTKIT_SHARED)", p.display());
    None
}
