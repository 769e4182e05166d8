//! `quantkit qat --ema DECAY [--ema-warmup]` on the committed LeNet and 1,000-image sample:
//! the written file is the averaged model (a different file from the same run without
//! averaging), exact mode still equals the engine on every evaluation image with the
//! validation split and `--keep-best` on the averaged model, the JSON says how many steps
//! were averaged, and bad values are clear errors that write nothing.

use std::path::PathBuf;

mod common;
use common::qat_lenet_sample as qat;

fn tmp(name: &str) -> PathBuf {
    common::tmp("qatema", name)
}

fn run(out: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--weight-bits",
        "4",
        "--lsq",
        "--lr",
        "3e-3",
        "--epochs",
        "2",
        "--batch",
        "32",
        "--limit",
        "256",
        "--eval-limit",
        "200",
        "--observer-steps",
        "0",
        "--validation",
        "200",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ];
    args.extend_from_slice(extra);
    let (ok, stdout, err) = qat(&args);
    assert!(ok, "{err}");
    serde_json::from_str(stdout.trim()).expect("json")
}

#[test]
fn the_averaged_model_is_written_and_equals_the_engine() {
    let (plain, averaged, kept) = (tmp("plain.onnx"), tmp("ema.onnx"), tmp("kept.onnx"));
    // Without --keep-best both write their last epoch: the last step's parameters and
    // their average.
    let p = run(&plain, &[]);
    assert!(p["ema"].is_null(), "{p}");
    let v = run(&averaged, &["--ema", "0.9", "--ema-warmup"]);
    assert_eq!(v["engine_agreement"].as_f64(), Some(1.0), "{v}");
    assert_eq!(v["engine_max_logit_diff"].as_f64(), Some(0.0), "{v}");
    // 800 training images after the split, 256 an epoch: 8 steps, twice.
    assert_eq!(v["ema"]["updates"].as_u64(), Some(16), "{v}");
    assert_eq!(v["ema"]["warmup"].as_bool(), Some(true), "{v}");
    assert!(v["ema"]["start_weight"].as_f64().unwrap() < 1e-5, "{v}");
    assert_eq!(v["validation"].as_array().map(Vec::len), Some(2), "{v}");
    let (a, b) = (
        std::fs::read(&plain).unwrap(),
        std::fs::read(&averaged).unwrap(),
    );
    assert_ne!(a, b, "the averaged run wrote the last step's model");
    // --keep-best on the averaged model: the best of the start and the averaged epochs by
    // the validation split (ties to the later), still equal to the engine.
    let k = run(&kept, &["--ema", "0.9", "--ema-warmup", "--keep-best"]);
    assert_eq!(k["engine_agreement"].as_f64(), Some(1.0), "{k}");
    assert_eq!(k["engine_max_logit_diff"].as_f64(), Some(0.0), "{k}");
    assert_eq!(k["validation"], v["validation"], "{k}");
    let scores: Vec<f64> = std::iter::once(&k["validation_start"])
        .chain(k["validation"].as_array().unwrap())
        .map(|x| x.as_f64().unwrap())
        .collect();
    let best = scores.iter().cloned().fold(f64::MIN, f64::max);
    let epoch = scores.iter().rposition(|&s| s == best).unwrap();
    assert_eq!(k["kept_epoch"].as_u64(), Some(epoch as u64), "{k}");
    for f in [&plain, &averaged, &kept] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn bad_ema_options_are_errors() {
    let out = tmp("bad.onnx");
    let o = out.to_str().unwrap();
    for d in ["1", "-0.5", "nan"] {
        let ema = format!("--ema={d}");
        let (ok, _, err) = qat(&[&ema, "--limit", "64", "-o", o]);
        assert!(!ok && err.contains("--ema"), "{d}: {err}");
    }
    let (ok, _, err) = qat(&["--ema-warmup", "--limit", "64", "-o", o]);
    assert!(!ok && err.contains("--ema DECAY"), "{err}");
    assert!(!out.exists());
}
