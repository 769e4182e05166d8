//! `quantkit qat --optimizer sgd --weight-decay W` on the committed LeNet and 1,000-image
//! sample: the run reports the optimizer it used, the export still equals exact mode on
//! every sample, SGD at a fine-tuning rate keeps the 8-bit model at its PTQ start, and bad
//! values are clear errors that write nothing.

use std::path::PathBuf;

mod common;
use common::qat_lenet_sample as qat;

fn tmp(name: &str) -> PathBuf {
    common::tmp("qatopt", name)
}

#[test]
fn sgd_with_weight_decay_fine_tunes_and_reports_it() {
    let out = tmp("sgd.onnx");
    let (ok, stdout, err) = qat(&[
        "--optimizer",
        "sgd",
        "--weight-decay",
        "5e-4",
        "--lr",
        "1e-3",
        "--epochs",
        "2",
        "--batch",
        "32",
        "--limit",
        "256",
        "--eval-limit",
        "300",
        "--observer-steps",
        "0",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(v["optimizer"].as_str(), Some("sgd"), "{stdout}");
    assert_eq!(v["weight_decay"].as_f64(), Some(5e-4f32 as f64), "{stdout}");
    assert_eq!(v["engine_agreement"].as_f64(), Some(1.0), "{stdout}");
    // A gentle fine-tune: at W8A8 the model stays within 1 pt of its PTQ start on the
    // evaluation samples (3 of 300 images).
    let (ptq, qat) = (
        v["ptq_value"].as_f64().unwrap(),
        v["engine_value"].as_f64().unwrap(),
    );
    assert!((qat - ptq).abs() <= 0.01 + 1e-9, "PTQ {ptq}, QAT {qat}");
    assert!(quantkit_graph::load_model(&out).is_ok());
    let _ = std::fs::remove_file(&out);
}

#[test]
fn bad_optimizer_options_are_errors() {
    let out = tmp("bad.onnx");
    let o = out.to_str().unwrap();
    let (ok, _, err) = qat(&["--optimizer", "lion", "-o", o]);
    assert!(!ok && err.contains("lion"), "{err}");
    let (ok, _, err) = qat(&["--weight-decay=-1", "--limit", "64", "-o", o]);
    assert!(!ok && err.contains("--weight-decay"), "{err}");
    assert!(!out.exists());
}
