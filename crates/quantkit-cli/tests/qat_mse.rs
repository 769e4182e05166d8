//! `quantkit qat --loss mse --target-input`: quantization-aware training of the committed
//! autoencoder against its own input, on the committed 1,000-image sample. A short run
//! writes the model and a JSON summary in reconstruction terms (MSE and PSNR of float, PTQ,
//! fake-quant and engine; exact mode equal to the engine on every value); bad combinations of the switches are clear errors that write
//! nothing.

use std::path::PathBuf;

mod common;
use common::{captured, quantkit, repo};

fn tmp(name: &str) -> PathBuf {
    common::tmp("qat-mse", name)
}

fn qat(model: &str, args: &[&str]) -> (bool, String, String) {
    captured(
        quantkit()
            .arg("qat")
            .arg(repo().join("models").join(model))
            .args(args),
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
fn autoencoder_w8a8_mse_run_reports_reconstruction_figures() {
    let out = tmp("ae.onnx");
    let (ok, stdout, err) = qat(
        "autoencoder.onnx",
        &[
            "--data",
            &sample(),
            "--loss",
            "mse",
            "--target-input",
            "--batch",
            "32",
            "--limit",
            "256",
            "--eval-limit",
            "200",
            "--lr",
            "1e-4",
            "-o",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(ok, "qat failed: {err}");
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON summary");
    assert_eq!(j["metric"], "mse");
    let get = |k: &str| j[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {j}"));
    let (float, ptq, qat, engine) = (
        get("float_value"),
        get("ptq_value"),
        get("qat_value"),
        get("engine_value"),
    );
    // The committed autoencoder reconstructs the sample to about 0.01 (models/README.md);
    // 8-bit quantization and a few QAT steps at a small learning rate stay close to it.
    assert!(float > 0.0 && float < 0.03, "float MSE {float}");
    for (what, v) in [("PTQ", ptq), ("QAT", qat), ("engine", engine)] {
        assert!(
            v > 0.0 && v < 2.0 * float,
            "{what} MSE {v} against float {float}"
        );
    }
    // Exact mode computes the integer Conv and ConvTranspose layers as the engine does, so
    // the fake-quant evaluation is the engine's output, value for value.
    assert_eq!(
        engine, qat,
        "engine MSE {engine}, exact-mode fake-quant {qat}"
    );
    assert_eq!(j["engine_agreement"], 1.0, "{j}");
    assert_eq!(j["engine_max_logit_diff"], 0.0, "{j}");
    let psnr = &j["psnr_db"];
    let p = psnr["engine"].as_f64().expect("psnr_db.engine");
    assert!((p - 10.0 * (1.0 / engine).log10()).abs() < 1e-9);
    let agree = get("engine_agreement");
    assert!((0.0..=1.0).contains(&agree));
    assert_eq!(j["samples"], 200);
    assert!(out.exists());
    let _ = std::fs::remove_file(&out);
}

#[test]
fn mse_switches_in_bad_combinations_are_errors_that_write_nothing() {
    let out = tmp("bad.onnx");
    let o = out.to_str().unwrap();
    let cases: [(&str, Vec<&str>, &str); 4] = [
        ("autoencoder.onnx", vec!["--loss", "mse"], "--target-input"),
        ("autoencoder.onnx", vec!["--target-input"], "--loss mse"),
        (
            "autoencoder.onnx",
            vec!["--loss", "mse", "--target-input", "--distill"],
            "--distill",
        ),
        // LeNet's output is [N, 10] logits, not a reconstruction of its input.
        (
            "lenet.onnx",
            vec!["--loss", "mse", "--target-input"],
            "--target-input",
        ),
    ];
    for (model, extra, want) in cases {
        let s = sample();
        let mut args = vec!["--data", s.as_str(), "--limit", "64", "--eval-limit", "64"];
        args.extend(extra.iter().copied());
        args.extend(["-o", o]);
        let (ok, _, err) = qat(model, &args);
        assert!(!ok, "{model} {extra:?} should fail");
        assert!(err.contains(want), "{model} {extra:?}: {err}");
        assert!(!out.exists(), "{model} {extra:?} wrote {o}");
    }
}
