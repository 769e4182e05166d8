//! Integration test of `quantkit analyze` on the committed LeNet and sample: the JSON report
//! covers every node `quantkit quantize` quantizes, with finite figures.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn quantkit(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(args)
        .output()
        .expect("run quantkit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn finite(v: &serde_json::Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    assert!(x.is_finite(), "{what}: {x}");
    x
}

#[test]
fn json_report_has_every_quantized_layer_with_finite_numbers() {
    let model = repo().join("models/lenet.onnx");
    let calib = repo().join("data/fashion-mnist-sample");
    let (model, calib) = (model.to_str().unwrap(), calib.to_str().unwrap());
    let file =
        std::env::temp_dir().join(format!("quantkit-cli-analyze-{}.json", std::process::id()));
    let stdout = quantkit(&[
        "analyze",
        model,
        "--calib",
        calib,
        "--calib-samples",
        "64",
        "--samples",
        "32",
        "--top",
        "3",
        "--json",
        "-o",
        file.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    std::fs::remove_file(&file).ok();
    assert_eq!(v, written);
    assert_eq!(v["samples"], 32);
    finite(&v["output"]["sqnr_db"], "output SQNR");

    // Every node quantize quantizes is in exactly one layer.
    let out =
        std::env::temp_dir().join(format!("quantkit-cli-analyze-{}.onnx", std::process::id()));
    let q: serde_json::Value = serde_json::from_str(&quantkit(&[
        "quantize",
        model,
        "--calib",
        calib,
        "--calib-samples",
        "64",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    std::fs::remove_file(&out).ok();
    let quantized: BTreeSet<String> = q["quantized"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap().to_string())
        .collect();
    let layers = v["layers"].as_array().unwrap();
    let mut covered = BTreeSet::new();
    for l in layers {
        let name = l["name"].as_str().unwrap();
        for n in l["nodes"].as_array().unwrap() {
            assert!(covered.insert(n.as_str().unwrap().to_string()), "{n} twice");
        }
        finite(&l["local"]["sqnr_db"], name);
        finite(&l["propagated"]["sqnr_db"], name);
        finite(&l["local"]["max_abs"], name);
        for w in l["weights"].as_array().unwrap() {
            finite(&w["total"]["sqnr_db"], name);
            for c in w["channels"].as_array().unwrap() {
                finite(&c["sqnr_db"], name);
            }
        }
        if let Some(s) = l["sensitivity"].as_object() {
            finite(&s["left_float"]["sqnr_db"], name);
            finite(&s["recovered"], name);
            finite(&s["only_quantized"]["sqnr_db"], name);
        }
    }
    assert_eq!(covered, quantized);
    assert_eq!(
        layers
            .iter()
            .filter(|l| l["sensitivity"].is_object())
            .count(),
        3
    );
    // The ranked layers with sensitivity come first.
    assert!(layers[..3].iter().all(|l| l["sensitivity"].is_object()));

    // The table names the columns and every layer.
    let table = quantkit(&[
        "analyze",
        model,
        "--calib",
        calib,
        "--calib-samples",
        "32",
        "--samples",
        "16",
        "--top",
        "0",
    ]);
    assert!(table.contains("local") && table.contains("prop") && table.contains("recov."));
    for l in layers {
        assert!(table.contains(l["name"].as_str().unwrap()), "{table}");
    }
}

/// With --json (stderr is not a terminal here) analyze writes plain progress lines on
/// stderr, one as each stage starts, while stdout stays one JSON document; -q silences
/// them.
#[test]
fn progress_lines_go_to_stderr_with_json_and_quiet_silences_them() {
    let model = repo().join("models/lenet.onnx");
    let calib = repo().join("data/fashion-mnist-sample");
    let args = [
        "analyze",
        model.to_str().unwrap(),
        "--calib",
        calib.to_str().unwrap(),
        "--samples",
        "32",
        "--calib-samples",
        "64",
        "--top",
        "2",
        "--json",
    ];
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
            .args(args)
            .output()
            .expect("run quantkit");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("stdout is pure JSON");
        (v, err)
    };
    let (v, err) = run(&args);
    assert!(v["layers"].as_array().is_some_and(|l| !l.is_empty()));
    assert!(err.lines().all(|l| l.starts_with("analyze: ")), "{err}");
    for stage in [
        " loading ",
        " calibrating ",
        " float and quantized passes over 2 batches",
        " sensitivity passes on 2 layers (--top 2)",
        " done: ",
    ] {
        assert!(err.contains(stage), "no `{stage}` line in\n{err}");
    }
    let mut quiet = args.to_vec();
    quiet.push("--quiet");
    let (w, err) = run(&quiet);
    assert_eq!(err, "");
    assert_eq!(
        w["layers"].as_array().unwrap().len(),
        v["layers"].as_array().unwrap().len()
    );
}
