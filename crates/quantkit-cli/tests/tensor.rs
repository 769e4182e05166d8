//! Integration tests of `quantkit tensor`, running the built binary.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .arg("tensor")
        .args(args)
        .output()
        .expect("run quantkit");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (ok, out, err) = run(&a);
    assert!(ok, "failed: {err}");
    serde_json::from_str(&out).expect("valid JSON")
}

#[test]
fn issue_example_u8() {
    let v = json(&["--values", "-1.8,-1.0,0.0,0.5", "--dtype", "u8"]);
    assert_eq!(v["zero_point"], 200);
    assert_eq!(v["quantized"], serde_json::json!([0, 89, 200, 255]));
    let s = v["scale"].as_f64().unwrap();
    assert!((s - 2.3 / 255.0).abs() < 1e-8, "{s}");
    for key in ["dequantized", "mse", "sqnr_db"] {
        assert!(!v[key].is_null(), "{key}");
    }
    assert!(v["mse"].as_f64().unwrap() > 0.0);
}

#[test]
fn per_channel_gives_arrays() {
    let v = json(&[
        "--values",
        "1,2,3,-10,20,30",
        "--shape",
        "2,3",
        "--dtype",
        "i8",
        "--symmetric",
        "--per-channel",
        "0",
    ]);
    let scales = v["scale"].as_array().unwrap();
    assert_eq!(scales.len(), 2);
    assert_eq!(v["zero_point"], serde_json::json!([0, 0]));
    assert_eq!(v["quantized"].as_array().unwrap().len(), 6);
    // Channel 0 max is 3 → 3/127; its last element is 127.
    assert!((scales[0].as_f64().unwrap() - 3.0 / 127.0).abs() < 1e-7);
    assert_eq!(v["quantized"][2], 127);
}

#[test]
fn explicit_scale_and_zero_point() {
    let v = json(&[
        "--values",
        "0.5,1,1.5",
        "--scale",
        "0.5",
        "--zero-point",
        "-3",
        "--dtype",
        "i4",
    ]);
    assert_eq!(v["quantized"], serde_json::json!([-2, -1, 0]));
    assert_eq!(v["dequantized"], serde_json::json!([0.5, 1.0, 1.5]));
}

#[test]
fn methods_run() {
    for m in ["minmax", "percentile=99", "mse", "entropy", "ema=0.1"] {
        let v = json(&[
            "--values",
            "191.6,-13.5,728.6",
            "--shape",
            "1,3",
            "--method",
            m,
        ]);
        assert_eq!(v["quantized"].as_array().unwrap().len(), 3, "{m}");
    }
}

#[test]
fn plot_writes_svg() {
    let dir = std::env::temp_dir().join(format!("quantkit-tensor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("error.svg");
    let (ok, _, err) = run(&["--values", "1,2,3,4,-5", "--plot", path.to_str().unwrap()]);
    assert!(ok, "{err}");
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("dequantized"),
        "{}",
        &svg[..100.min(svg.len())]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_arguments_give_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--values", "1,2,3", "--shape", "2,2"], "holds 4 elements"),
        (&["--values", "1,2,3", "--dtype", "f7"], "unknown dtype"),
        (&["--values", "1,2,3", "--scale", "0"], "scale"),
        (&["--values", "1,2,3", "--scale", "-1"], "scale"),
        (
            &["--values", "1,2,3", "--scale", "1", "--zero-point", "300"],
            "outside the range",
        ),
        (
            &[
                "--values",
                "1,2,3",
                "--dtype",
                "i8",
                "--scale",
                "1",
                "--zero-point",
                "-129",
            ],
            "outside the range",
        ),
        (&["--values", "1,x,3"], "not valid"),
        (
            &["--values", "1,2,3", "--per-channel", "1"],
            "axis out of range",
        ),
        (
            &["--values", "1,2,3", "--method", "magic"],
            "unknown calibration method",
        ),
        (&["--values", "1,nan,3"], "non-finite"),
        (&["--values", "1,inf,3", "--scale", "0.5"], "non-finite"),
        (&["--npy", "/nonexistent/file.npy"], "file.npy"),
    ];
    for (args, want) in cases {
        let (ok, _, err) = run(args);
        assert!(!ok, "{args:?} should fail");
        assert!(
            err.contains(want),
            "{args:?}: stderr {err:?} should contain {want:?}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn npy_input() {
    // A version-1.0 .npy of float32 [2, 2] written by hand (no writer dependency).
    let dir = std::env::temp_dir().join(format!("quantkit-tensor-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.npy");
    let mut header = String::from("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in [-1.8f32, -1.0, 0.0, 0.5] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    let v = json(&["--npy", path.to_str().unwrap()]);
    assert_eq!(v["shape"], serde_json::json!([2, 2]));
    assert_eq!(v["quantized"], serde_json::json!([0, 89, 200, 255]));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rounding_modes_and_groups() {
    // x / s = 0.5, 1.5, 2.5, -0.5: even → 0, 2, 2, 0; away → 1, 2, 3, -1.
    let base = [
        "--values",
        "0.5,1.5,2.5,-0.5",
        "--dtype",
        "i8",
        "--scale",
        "1",
    ];
    let mut even = base.to_vec();
    even.extend(["--rounding", "even"]);
    assert_eq!(json(&even)["quantized"], serde_json::json!([0, 2, 2, 0]));
    let mut away = base.to_vec();
    away.extend(["--rounding", "away"]);
    assert_eq!(json(&away)["quantized"], serde_json::json!([1, 2, 3, -1]));
    // Blocked: [1, 4] with blocks of 2 along axis 1 → two scales.
    let v = json(&[
        "--values",
        "1,2,100,-50",
        "--shape",
        "1,4",
        "--dtype",
        "i8",
        "--symmetric",
        "--per-channel",
        "1",
        "--group-size",
        "2",
    ]);
    assert_eq!(v["scale"].as_array().unwrap().len(), 2);
    assert_eq!(v["quantized"], serde_json::json!([64, 127, 127, -64]));
}

#[test]
fn text_output_tells_the_whole_story() {
    let (ok, out, err) = run(&["--values", "191.6,-13.5,728.6", "--shape", "1,3"]);
    assert!(ok, "{err}");
    for want in ["scale", "zero_point", "dequantized", "error", "MSE", "SQNR"] {
        assert!(out.contains(want), "missing {want} in:\n{out}");
    }
}
