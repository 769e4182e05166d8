//! `quantkit check`: the zoo's models, quantized here on a small calibration set (QDQ and
//! QOperator), pass (exit status 0, no error); a model whose accumulator can overflow int32
//! fails with exit status 2 and names the layer.

use quantkit_graph::{DType, Data, Graph, Node, Tensor, ValueInfo};
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn quantkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(args)
        .output()
        .expect("run quantkit")
}

#[test]
fn the_zoo_models_pass_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let calib = repo().join("data/fashion-mnist-sample");
    for model in ["lenet", "mlp", "resnet8", "mobilenet", "autoencoder"] {
        for format in ["qdq", "qoperator"] {
            let out = dir.path().join(format!("{model}-{format}.onnx"));
            let q = quantkit(&[
                "quantize",
                repo()
                    .join(format!("models/{model}.onnx"))
                    .to_str()
                    .unwrap(),
                "--calib",
                calib.to_str().unwrap(),
                "--calib-samples",
                "32",
                "--format",
                format,
                "-o",
                out.to_str().unwrap(),
            ]);
            assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
            let c = quantkit(&["check", out.to_str().unwrap(), "--json"]);
            let stdout = String::from_utf8_lossy(&c.stdout);
            assert!(
                c.status.success(),
                "{model} {format}: {}\n{stdout}",
                String::from_utf8_lossy(&c.stderr)
            );
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["errors"], 0, "{model} {format}: {stdout}");
            let layers = v["layers"].as_array().unwrap();
            assert!(!layers.is_empty(), "{model} {format}: no layer checked");
            for l in layers {
                // Every layer of a quantize output has an output scale and a fixed-point form.
                assert!(l["multiplier"].is_array(), "{model} {format}: {l}");
                assert!(l["shift"].is_array(), "{model} {format}: {l}");
                assert!(l["headroom_bits"].as_f64().unwrap() > 0.0);
            }
        }
    }
}

#[test]
fn seven_bit_weights_remove_the_vpmaddubsw_risk() {
    // |w| ≤ 63 with 7-bit weights: no pair reaches |w_a| + |w_b| = 129 (ONNX Runtime's
    // reduce_range), while 8-bit weights have such pairs.
    let dir = tempfile::tempdir().unwrap();
    let calib = repo().join("data/fashion-mnist-sample");
    let model = repo().join("models/lenet.onnx");
    let mut at_risk = Vec::new();
    for bits in ["8", "7"] {
        let out = dir.path().join(format!("lenet-{bits}.onnx"));
        let q = quantkit(&[
            "quantize",
            model.to_str().unwrap(),
            "--calib",
            calib.to_str().unwrap(),
            "--calib-samples",
            "32",
            "--weight-bits",
            bits,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
        let c = quantkit(&["check", out.to_str().unwrap(), "--json"]);
        assert!(c.status.success());
        let v: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
        let risky: u64 = v["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["maddubs_pairs_at_risk"][0].as_u64().unwrap())
            .sum();
        at_risk.push((risky, v["warnings"].as_u64().unwrap()));
    }
    assert!(at_risk[0].0 > 0 && at_risk[0].1 == 1, "{at_risk:?}");
    assert_eq!(at_risk[1], (0, 0));
}

#[test]
fn an_overflowing_accumulator_exits_with_status_2() {
    // x → Q(u8, z 0) → DQ → MatMul(DQ(int8 127, K = 70 000)) → Q → DQ: 255·127·70 000 > 2^31.
    let (k, n) = (70_000usize, 2usize);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.meta.ir_version = 8;
    g.inputs = vec![ValueInfo::new("x", DType::F32, &[1, k])];
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[1, n])];
    let u8s = |v| Tensor::new(vec![], Data::U8(vec![v])).unwrap();
    for (name, t) in [
        ("sx", Tensor::scalar_f32(1.0 / 255.0)),
        ("zx", u8s(0)),
        ("sw", Tensor::scalar_f32(0.01)),
        (
            "wq",
            Tensor::new(vec![k, n], Data::I8(vec![127; k * n])).unwrap(),
        ),
        ("sy", Tensor::scalar_f32(0.05)),
        ("zy", u8s(128)),
    ] {
        g.initializers.insert(name.into(), t);
    }
    g.nodes = vec![
        Node::new("qx", "QuantizeLinear", &["x", "sx", "zx"], &["xq"]),
        Node::new("dqx", "DequantizeLinear", &["xq", "sx", "zx"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["wq", "sw"], &["wf"]),
        Node::new("big_matmul", "MatMul", &["xf", "wf"], &["m"]),
        Node::new("qy", "QuantizeLinear", &["m", "sy", "zy"], &["yq"]),
        Node::new("dqy", "DequantizeLinear", &["yq", "sy", "zy"], &["y"]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overflow.onnx");
    quantkit_graph::save_model(&g, &path).unwrap();
    let c = quantkit(&["check", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&c.stdout);
    assert_eq!(c.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("error") && stdout.contains("big_matmul") && stdout.contains("overflow"),
        "{stdout}"
    );
}
