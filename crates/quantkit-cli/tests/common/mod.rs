//! Helpers shared by the CLI tests: the repository root, per-test scratch paths and the
//! built `quantkit` binary run with its output captured.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The repository root (the committed models and data are found from it).
pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `quantkit-TAG-PID-NAME` in the temporary directory: one name per test process.
pub fn tmp(tag: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quantkit-{tag}-{}-{name}", std::process::id()))
}

/// `NAME` inside the directory `quantkit-TAG-PID` of the temporary directory (created).
pub fn tmp_in(tag: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quantkit-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("create the scratch directory");
    d.join(name)
}

/// The built `quantkit` binary, arguments still to add.
pub fn quantkit() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quantkit"))
}

/// Runs `cmd` and returns (success, stdout, stderr).
pub fn captured(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.output().expect("run quantkit");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `quantkit qat models/lenet.onnx --data data/fashion-mnist-sample ARGS`, captured.
pub fn qat_lenet_sample(args: &[&str]) -> (bool, String, String) {
    captured(
        quantkit()
            .arg("qat")
            .arg(repo().join("models/lenet.onnx"))
            .arg("--data")
            .arg(repo().join("data/fashion-mnist-sample"))
            .args(args),
    )
}
