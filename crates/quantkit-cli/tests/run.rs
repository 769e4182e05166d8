//! Integration tests of `quantkit run`: the float executor and, with `--engine int8`, the
//! integer engine on a quantized LeNet; bad input gives an error and writes nothing.

use quantkit_data::npy::{read_npy, write_npy, NpyArray, NpyData};
use std::path::{Path, PathBuf};

mod common;
use common::{captured, repo};

fn tmp(name: &str) -> PathBuf {
    common::tmp_in("run-test", name)
}

fn quantkit(args: &[&str]) -> (bool, String, String) {
    captured(common::quantkit().args(args))
}

fn f32s(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let a = read_npy(path).unwrap();
    match a.data {
        NpyData::F32(v) => (a.shape, v),
        _ => panic!("{} is not f32", path.display()),
    }
}

/// The first 64 sample images as the model's float input `[64, 1, 28, 28]` holding
/// pixel/255.
fn input_npy(file: &str) -> PathBuf {
    let a = read_npy(repo().join("data/fashion-mnist-sample/images.npy")).unwrap();
    let NpyData::U8(px) = a.data else {
        panic!("u8 images expected")
    };
    let x: Vec<f32> = px[..64 * 784].iter().map(|&v| v as f32 / 255.0).collect();
    let p = tmp(file);
    write_npy(
        &p,
        &NpyArray::new(vec![64, 1, 28, 28], NpyData::F32(x)).unwrap(),
    )
    .unwrap();
    p
}

/// LeNet quantized on 128 sample images, written to `file` in the test folder.
fn quantized_lenet(file: &str) -> PathBuf {
    let q = tmp(file);
    let lenet = repo().join("models/lenet.onnx");
    let calib = repo().join("data/fashion-mnist-sample");
    let (ok, _, err) = quantkit(&[
        "quantize",
        lenet.to_str().unwrap(),
        "--calib",
        calib.to_str().unwrap(),
        "--calib-samples",
        "128",
        "-o",
        q.to_str().unwrap(),
    ]);
    assert!(ok, "quantize failed: {err}");
    q
}

#[test]
fn engine_int8_runs_a_quantized_model_like_the_float_executor() {
    let q = quantized_lenet("lenet.int8.onnx");
    let x = input_npy("x-engine.npy");
    let (dir_f, dir_i) = (tmp("out-float"), tmp("out-int8"));
    for (dir, engine) in [(&dir_f, "float"), (&dir_i, "int8")] {
        let (ok, out, err) = quantkit(&[
            "run",
            q.to_str().unwrap(),
            "--input",
            x.to_str().unwrap(),
            "--output-dir",
            dir.to_str().unwrap(),
            "--engine",
            engine,
        ]);
        assert!(ok, "run --engine {engine} failed: {err}");
        assert!(out.contains("run "), "{out}");
    }
    let name = std::fs::read_dir(&dir_f)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let (sf, yf) = f32s(&dir_f.join(&name));
    let (si, yi) = f32s(&dir_i.join(&name));
    assert_eq!(sf, vec![64, 10]);
    assert_eq!(sf, si);
    // The engine requantizes in f32 where the float executor simulates Q/DQ in f64: a code
    // may differ now and then (on this sample none does), the predictions must agree.
    let argmax = |v: &[f32]| -> Vec<usize> {
        v.chunks(10)
            .map(|r| (0..10).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap())
            .collect()
    };
    let (pf, pi) = (argmax(&yf), argmax(&yi));
    let agree = pf.iter().zip(&pi).filter(|(a, b)| a == b).count();
    assert_eq!(agree, 64, "top-1 agreement {agree}/64");
    let max_diff = yf
        .iter()
        .zip(&yi)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let range = yf.iter().fold(0f32, |m, v| m.max(v.abs()));
    eprintln!("max |float - int8| {max_diff} of max |logit| {range}");
    assert!(max_diff <= 0.01 * range, "max |diff| {max_diff} of {range}");
}

/// `run --engine int8 --profile` profiles the integer engine: every step's time with its
/// kind; the float LeNet (no Q/DQ) runs as float islands only, and the JSON says so.
#[test]
fn profile_with_the_engine_marks_float_islands() {
    let lenet = repo().join("models/lenet.onnx");
    let x = input_npy("x-profile.npy");
    let dir = tmp("out-profile");
    let (ok, out, err) = quantkit(&[
        "run",
        lenet.to_str().unwrap(),
        "--input",
        x.to_str().unwrap(),
        "--output-dir",
        dir.to_str().unwrap(),
        "--engine",
        "int8",
        "--profile",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &v["engine_profile"];
    let steps = p["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    assert!(steps.iter().all(|s| s["kind"] == "float_island"), "{p}");
    assert!(steps.iter().any(|s| s["op_type"] == "Conv"));
    let total: f64 = steps.iter().map(|s| s["seconds"].as_f64().unwrap()).sum();
    assert!((total - p["total_seconds"].as_f64().unwrap()).abs() < 1e-9);
    assert!(p["runs"].as_u64().unwrap() >= 5);
}

/// `run --batch N` runs the rows in chunks (here 24, 24 and 16 of 64) and writes what one
/// call writes: bit for bit on the integer engine; on the float executor up to float
/// rounding (its sgemm blocks the rows of the whole call, so a chunk's sums can be added in
/// another order). `--batch 0` and `--batch` with `--profile` over several chunks are
/// refused and write nothing.
#[test]
fn batch_runs_chunks_and_writes_what_one_call_writes() {
    let lenet = repo().join("models/lenet.onnx");
    let q = quantized_lenet("lenet.batch.int8.onnx");
    let x = input_npy("x-batch.npy");
    // The float model on the float executor, the quantized one on the integer engine.
    for (model, engine) in [(&lenet, "float"), (&q, "int8")] {
        let (whole, parts) = (
            tmp(&format!("batch-whole-{engine}")),
            tmp(&format!("batch-parts-{engine}")),
        );
        for (dir, batch) in [(&whole, None), (&parts, Some("24"))] {
            let mut a = vec![
                "run",
                model.to_str().unwrap(),
                "-i",
                x.to_str().unwrap(),
                "-o",
                dir.to_str().unwrap(),
                "--engine",
                engine,
            ];
            if let Some(b) = batch {
                a.extend(["--batch", b]);
            }
            let (ok, _, err) = quantkit(&a);
            assert!(ok, "run {a:?} failed: {err}");
        }
        let name = std::fs::read_dir(&whole)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .file_name();
        let (sw, yw) = f32s(&whole.join(&name));
        let (sp, yp) = f32s(&parts.join(&name));
        assert_eq!(sw, vec![64, 10]);
        assert_eq!(sw, sp, "{engine}");
        if engine == "int8" {
            assert_eq!(yw, yp, "int8: chunked outputs differ from one call");
        } else {
            let range = yw.iter().fold(0f32, |m, v| m.max(v.abs()));
            let diff = yw
                .iter()
                .zip(&yp)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                diff <= 1e-5 * range,
                "float: chunked outputs differ from one call by {diff} (max |y| {range})"
            );
        }
    }
    for (extra, says) in [
        (vec!["--batch", "0"], "--batch 0"),
        (vec!["--batch", "10", "--profile"], "--profile"),
    ] {
        let dir = tmp("batch-bad");
        let _ = std::fs::remove_dir_all(&dir);
        let mut a = vec![
            "run",
            lenet.to_str().unwrap(),
            "-i",
            x.to_str().unwrap(),
            "-o",
            dir.to_str().unwrap(),
        ];
        a.extend(extra);
        let (ok, _, err) = quantkit(&a);
        assert!(!ok, "{a:?} should fail");
        assert!(err.contains(says), "{err}");
        assert!(!dir.exists(), "{a:?} wrote {}", dir.display());
    }
}
