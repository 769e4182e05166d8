//! `quantkit train --validation N` on a small IDX folder written by the test (300 training
//! and 50 test images of seeded noise, ten labels): the held-out images are not trained
//! on and are scored after training; a split as large as the data, or with `--limit`, is
//! a clear error that writes nothing; progress lines on stderr (not a terminal), none with
//! `-q`.

use std::path::{Path, PathBuf};

mod common;
use common::{captured, quantkit};

/// An IDX image file (`[n, 28, 28]` u8) and its label file, uncompressed.
fn write_idx(dir: &Path, prefix: &str, n: usize, seed: u64) {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u8
    };
    let mut images = vec![0, 0, 8, 3];
    for d in [n as u32, 28, 28] {
        images.extend_from_slice(&d.to_be_bytes());
    }
    let mut labels = vec![0, 0, 8, 1];
    labels.extend_from_slice(&(n as u32).to_be_bytes());
    for i in 0..n {
        let label = (i % 10) as u8;
        // A label-dependent bright row, so that the classes can be learnt a little.
        for r in 0..28 {
            for _ in 0..28 {
                let noise = next() / 4;
                images.push(if r == 2 * label as usize { 200 } else { noise });
            }
        }
        labels.push(label);
    }
    std::fs::write(dir.join(format!("{prefix}-images-idx3-ubyte")), images).unwrap();
    std::fs::write(dir.join(format!("{prefix}-labels-idx1-ubyte")), labels).unwrap();
}

fn idx_folder(name: &str) -> PathBuf {
    let dir = common::tmp("train", name);
    std::fs::create_dir_all(&dir).unwrap();
    write_idx(&dir, "train", 300, 1);
    write_idx(&dir, "t10k", 50, 2);
    dir
}

fn train(dir: &Path, out: &Path, extra: &[&str]) -> (bool, String, String) {
    captured(
        quantkit()
            .args(["train", "--arch", "mlp", "--epochs", "1", "--batch", "20"])
            .arg("--data")
            .arg(dir)
            .arg("-o")
            .arg(out)
            .args(["--threads", "1", "--json"])
            .args(extra),
    )
}

#[test]
fn validation_split_is_held_out_and_scored() {
    let dir = idx_folder("split");
    let out = dir.join("mlp.onnx");
    let (ok, stdout, err) = train(&dir, &out, &["--validation", "100", "--seed", "3"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(v["train_samples"].as_u64(), Some(200), "{stdout}");
    assert_eq!(v["validation_samples"].as_u64(), Some(100), "{stdout}");
    let val = v["validation_value"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&val), "{stdout}");
    assert_eq!(v["samples"].as_u64(), Some(50), "{stdout}");
    assert!(quantkit_graph::load_model(&out).is_ok());
    // --json: plain progress lines on stderr, one per epoch at least.
    assert!(err.lines().all(|l| l.starts_with("train: ")), "{err}");
    assert!(err.contains("epoch 1/1: step 10/10"), "{err}");

    // Without --validation every image trains and no validation figure is reported.
    let (ok, stdout, err) = train(&dir, &out, &[]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json");
    assert_eq!(v["train_samples"].as_u64(), Some(300), "{stdout}");
    assert!(v["validation_value"].is_null(), "{stdout}");
    // -q: nothing on stderr.
    let (ok, _, err) = train(&dir, &out, &["-q"]);
    assert!(ok && err.is_empty(), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_validation_options_are_errors() {
    let dir = idx_folder("bad");
    let out = dir.join("bad.onnx");
    let (ok, _, err) = train(&dir, &out, &["--validation", "300"]);
    assert!(
        !ok && err.contains("--validation 300") && err.contains(&*dir.to_string_lossy()),
        "{err}"
    );
    let (ok, _, err) = train(&dir, &out, &["--validation", "10", "--limit", "100"]);
    assert!(
        !ok && err.contains("--limit") && err.contains("--validation"),
        "{err}"
    );
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
