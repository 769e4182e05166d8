//! Integration tests of `quantkit qat` on the committed LeNet and 1,000-image sample: a
//! short W4A8 run writes a QDQ model and the JSON summary, its exact-mode fake-quant
//! evaluation agreeing with the engine on every image; bad input (labels that do not
//! match the samples, 4-bit activations, no labels without `--distill`, a diverging loss)
//! is a clear error and writes nothing.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("quantkit-qat-{}-{name}", std::process::id()))
}

fn qat(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .arg("qat")
        .arg(repo().join("models/lenet.onnx"))
        .args(args)
        .output()
        .expect("run quantkit");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn sample() -> String {
    repo()
        .join("data/fashion-mnist-sample")
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn short_w4a8_run_writes_the_model_and_json() {
    let out = tmp("w4.onnx");
    let log = tmp("w4.csv");
    let (ok, stdout, err) = qat(&[
        "--data",
        &sample(),
        "--weight-bits",
        "4",
        "--batch",
        "32",
        "--limit",
        "128",
        "--eval-limit",
        "200",
        "--lsq",
        "-o",
        out.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    for k in [
        "float_value",
        "ptq_value",
        "qat_value",
        "engine_value",
        "engine_agreement",
        "epochs",
        "seconds",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {stdout}");
    }
    assert!(v["engine_value"].as_f64().unwrap() > 0.7, "{stdout}");
    // Exact mode: the reported fake-quant evaluation is the engine's numbers.
    assert_eq!(v["engine_agreement"].as_f64(), Some(1.0), "{stdout}");
    let step = v["output_step"]
        .as_f64()
        .expect("the logits are dequantized");
    assert!(
        v["engine_max_logit_diff"].as_f64().unwrap() <= step,
        "logits further apart than one output step: {stdout}"
    );
    assert!(v["fake_quant_f32_value"].is_number(), "{stdout}");
    let g = quantkit_graph::load_model(&out).expect("the written model loads");
    quantkit_engine::compile(&g, &Default::default()).expect("and compiles on the engine");
    let csv = std::fs::read_to_string(&log).unwrap();
    assert!(csv.starts_with("epoch,loss,"), "{csv}");
    assert_eq!(csv.lines().count(), 2, "{csv}");
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(&log);
}

#[test]
fn bad_input_is_an_error_and_writes_nothing() {
    let out = tmp("bad.onnx");
    let images = repo().join("data/fashion-mnist-sample/images.npy");
    let labels = tmp("labels999.npy");
    // 999 int64 labels for 1,000 images.
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (999,), }";
    let pad = 64 - (10 + header.len() + 1) % 64;
    let h = format!("{header}{}\n", " ".repeat(pad));
    npy.extend((h.len() as u16).to_le_bytes());
    npy.extend(h.as_bytes());
    npy.extend(std::iter::repeat_n(0u8, 999 * 8));
    std::fs::write(&labels, npy).unwrap();
    let (ok, _, err) = qat(&[
        "--data",
        images.to_str().unwrap(),
        "--labels",
        labels.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("999") && err.contains("1000"), "{err}");
    let (ok, _, err) = qat(&[
        "--data",
        images.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("--distill"), "{err}");
    let (ok, _, err) = qat(&[
        "--data",
        &sample(),
        "--activation-bits",
        "4",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("--activation-bits 4"), "{err}");
    // A learning rate that blows the weights and scales up.
    let (ok, _, err) = qat(&[
        "--data",
        &sample(),
        "--lsq",
        "--lr",
        "1e38",
        "--batch",
        "32",
        "--limit",
        "256",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("non-finite") && err.contains("nothing was written"),
        "{err}"
    );
    assert!(!out.exists(), "no model is written after a failed run");
    let _ = std::fs::remove_file(&labels);
}
