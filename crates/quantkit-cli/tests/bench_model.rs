//! `quantkit bench MODEL.onnx`: both executors run the model and the report is consistent.
//! (Speed itself is measured by the command, not asserted by a test.)

use std::process::Command;

fn quantkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run quantkit")
}

#[test]
fn bench_model_reports_float_and_int8() {
    let out = quantkit(&[
        "bench",
        "models/mlp.onnx",
        "--batch",
        "4",
        "--seconds",
        "0",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["batch"], 4);
    assert_eq!(v["shape"], serde_json::json!([4, 1, 28, 28]));
    for side in ["float", "int8"] {
        let s = &v[side];
        let best = s["best_ms"].as_f64().unwrap();
        let median = s["median_ms"].as_f64().unwrap();
        assert!(best > 0.0 && best <= median, "{side}: {s}");
        assert!(s["runs"].as_u64().unwrap() >= 3, "{side}: {s}");
        let tput = s["samples_per_second"].as_f64().unwrap();
        assert!(
            (tput - 4.0 / (best / 1e3)).abs() <= 1e-6 * tput,
            "{side}: {s}"
        );
    }
    let ratio = v["float"]["best_ms"].as_f64().unwrap() / v["int8"]["best_ms"].as_f64().unwrap();
    assert!((v["int8_speedup"].as_f64().unwrap() - ratio).abs() < 1e-9);
}

#[test]
fn bench_model_bad_input_is_a_clear_error() {
    let out = quantkit(&["bench", "models/missing.onnx"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.onnx"), "{err}");
    let out = quantkit(&["bench", "models/mlp.onnx", "--batch", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--batch"));
}
