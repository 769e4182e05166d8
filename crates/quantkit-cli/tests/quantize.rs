//! Integration tests of `quantkit quantize --format` and `--dynamic`, running the built
//! binary on the committed LeNet and sample.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{captured, quantkit, repo};

fn quantize(args: &[&str]) -> (bool, String, String) {
    captured(
        quantkit()
            .arg("quantize")
            .arg(repo().join("models/lenet.onnx"))
            .args(args),
    )
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quantkit-cli-{}-{name}", std::process::id()))
}

#[test]
fn qoperator_summary_names_the_qlinear_ops() {
    let out = tmp("lenet.qop.onnx");
    let calib = repo().join("data/fashion-mnist-sample");
    let (ok, stdout, err) = quantize(&[
        "--calib",
        calib.to_str().unwrap(),
        "--calib-samples",
        "100",
        "--format",
        "qoperator",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["format"], "qoperator");
    let conv = v["qoperator"]["converted"].as_array().unwrap();
    assert!(conv.contains(&serde_json::json!(["conv1", "Conv", "QLinearConv"])));
    assert!(conv.contains(&serde_json::json!(["fc2", "Gemm", "QGemm"])));
    let g = quantkit_graph::load_model(&out).unwrap();
    assert!(g.nodes.iter().any(|n| n.op_type == "QLinearConv"));
    // The text summary says the same.
    let (ok, stdout, err) = quantize(&[
        "--calib",
        calib.to_str().unwrap(),
        "--calib-samples",
        "100",
        "--format",
        "qoperator",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(stdout.contains("format qoperator"), "{stdout}");
    assert!(stdout.contains("conv2: Conv -> QLinearConv"), "{stdout}");
    assert!(
        stdout.contains("pool1: MaxPool on the quantized tensor"),
        "{stdout}"
    );
    std::fs::remove_file(&out).ok();
}

/// A QOperator model is evaluated on the integer engine by default (its QLinearConv/QGemm
/// compiled into integer steps), and agrees with the float executor's exact integer
/// operators on the same file.
#[test]
fn eval_runs_a_qoperator_model_on_the_integer_engine() {
    let out = tmp("lenet.qop-eval.onnx");
    let calib = repo().join("data/fashion-mnist-sample");
    let (ok, _, err) = quantize(&[
        "--calib",
        calib.to_str().unwrap(),
        "--calib-samples",
        "100",
        "--format",
        "qoperator",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v = eval_against_itself(&out);
    let agreement = v["agreement"].as_f64().unwrap();
    assert!(
        agreement >= 0.995,
        "engine vs executor agreement {agreement}: {v}"
    );
    std::fs::remove_file(&out).ok();
}

/// `quantkit eval MODEL --data SAMPLE --limit 200 --reference MODEL --json`: the model with
/// its default executor against the same file on the float executor; asserts the default
/// was the integer engine and all 200 samples were scored.
fn eval_against_itself(model: &Path) -> serde_json::Value {
    let data = repo().join("data/fashion-mnist-sample");
    let run = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .arg("eval")
        .arg(model)
        .args(["--data", data.to_str().unwrap(), "--limit", "200"])
        .arg("--reference")
        .arg(model)
        .arg("--json")
        .output()
        .expect("run quantkit eval");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(v["runner"], "integer engine", "{v}");
    assert_eq!(v["samples"], 200, "{v}");
    v
}

/// A `--dynamic` model is evaluated on the integer engine by default, whose dynamic step is
/// bit-equal to the float executor: the two agree on every sample.
#[test]
fn eval_runs_a_dynamic_model_on_the_integer_engine() {
    let out = tmp("lenet.dyn-eval.onnx");
    let (ok, _, err) = quantize(&["--dynamic", "-o", out.to_str().unwrap()]);
    assert!(ok, "{err}");
    let v = eval_against_itself(&out);
    assert_eq!(v["agreement"].as_f64(), Some(1.0), "{v}");
    std::fs::remove_file(&out).ok();
}

#[test]
fn dynamic_needs_no_calibration_and_static_does() {
    let out = tmp("lenet.dyn.onnx");
    let (ok, stdout, err) = quantize(&["--dynamic", "-o", out.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["format"], "dynamic");
    assert_eq!(v["quantized"].as_array().unwrap().len(), 4);
    assert!(out.is_file());
    std::fs::remove_file(&out).ok();
    let missing = tmp("never.onnx");
    let (ok, _, err) = quantize(&["-o", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("--calib"), "{err}");
    let (ok, _, err) = quantize(&["--format", "qlinear", "-o", missing.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("qdq or qoperator"), "{err}");
    assert!(!missing.exists());
}

/// An IDX folder given as calibration data is read from its train split unless told
/// otherwise, so calibration never sees the test images the model is scored on.
#[test]
fn idx_calibration_defaults_to_the_train_split() {
    let dir = std::env::var_os("QUANTKIT_FASHION_MNIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/datasets/fashion-mnist"));
    if !dir.join("train-images-idx3-ubyte.gz").is_file() {
        assert!(
            std::env::var("CI").ok().as_deref() != Some("true"),
            "CI=true but Fashion-MNIST is missing at {}",
            dir.display()
        );
        eprintln!("skipping: Fashion-MNIST not found at {}", dir.display());
        return;
    }
    let run = |calib: PathBuf, extra: &[&str], name: &str| {
        let out = tmp(name);
        let mut args = vec![
            "--calib",
            calib.to_str().unwrap(),
            "--calib-samples",
            "64",
            "-o",
            out.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, _, err) = quantize(&args);
        assert!(ok, "{err}");
        let bytes = std::fs::read(&out).unwrap();
        std::fs::remove_file(&out).ok();
        bytes
    };
    let folder = run(dir.clone(), &[], "split-default.onnx");
    let train = run(
        dir.join("train-images-idx3-ubyte.gz"),
        &[],
        "split-file.onnx",
    );
    let test = run(dir.clone(), &["--calib-split", "test"], "split-test.onnx");
    assert!(
        folder == train,
        "folder default must calibrate on the train split"
    );
    assert!(folder != test, "--calib-split test must read other images");
}

/// `--method auto` reports its search: every activation's choice, the objective of the
/// chosen and the all-minmax model on the choosing and checking samples (the chosen one
/// never above minmax on the checking samples), and the text summary says what moved.
#[test]
fn auto_reports_its_search() {
    let out = tmp("lenet.auto.onnx");
    let calib = repo().join("data/fashion-mnist-sample");
    let (ok, stdout, err) = quantize(&[
        "--calib",
        calib.to_str().unwrap(),
        "--calib-samples",
        "300",
        "--method",
        "auto",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["method"], "auto");
    let a = &v["auto"];
    let choices = a["choices"].as_array().unwrap();
    assert_eq!(
        choices.len() as u64,
        v["activations_quantized"].as_u64().unwrap()
    );
    // 300 samples in 10 batches (9 of 32, one of 12): 7 choose, 3 check.
    assert_eq!(a["choose_samples"], 224);
    assert_eq!(a["check_samples"], 76);
    // LeNet's only output is its logits: scored by the KL divergence of their softmax.
    assert_eq!(a["objectives"][0]["kind"], "logits");
    assert_eq!(a["objectives"][0]["name"], "output");
    let f = |k: &str| a[k].as_f64().unwrap();
    assert!(f("auto_error") <= f("minmax_error"));
    assert!(f("auto_check_error") <= f("minmax_check_error"));
    assert!(a["model_runs"].as_u64().unwrap() >= 3);
    // Incremental runs: some node evaluations, fewer than full re-runs would do.
    let (run, full) = (
        a["nodes_run"].as_u64().unwrap(),
        a["nodes_full"].as_u64().unwrap(),
    );
    assert!(run > 0 && run < full, "{run} of {full}");
    assert!(f("candidate_seconds") <= f("seconds"));
    let (ok, stdout, err) = quantize(&[
        "--calib",
        calib.to_str().unwrap(),
        "--calib-samples",
        "300",
        "--method",
        "auto",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("auto: ")
            && stdout.contains("activations off minmax")
            && stdout.contains("node evaluations of full re-runs"),
        "{stdout}"
    );
    let _ = std::fs::remove_file(&out);
}
