//! The README's main job: `quantkit demo` on the committed LeNet and Fashion-MNIST sample.

use std::process::Command;

#[test]
fn demo_quantizes_the_committed_lenet_without_losing_accuracy() {
    let out_dir = std::env::temp_dir().join(format!("quantkit-demo-test-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(["demo", "--json", "--out-dir"])
        .arg(&out_dir)
        .output()
        .expect("run quantkit demo");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("missing {k}: {v}"));
    assert_eq!(v["samples"], 1000);
    // The committed LeNet scores 91.83 % on the full test set; the sample is its first 1,000.
    assert!(f("float_accuracy") > 88.0, "{v}");
    assert!(f("int8_accuracy") >= f("float_accuracy") - 1.0, "{v}");
    assert!(f("agreement") >= 0.98, "{v}");
    assert!(f("logits_cosine") >= 0.999, "{v}");
    // int8 weights: the file shrinks to about a quarter.
    assert!(f("int8_bytes") < 0.30 * f("float_bytes"), "{v}");
    let q = std::path::PathBuf::from(v["quantized_model"].as_str().unwrap());
    assert!(q.exists(), "{}", q.display());
    std::fs::remove_dir_all(&out_dir).ok();
}
