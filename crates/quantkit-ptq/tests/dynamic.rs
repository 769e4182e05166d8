//! Dynamic quantization: the committed LeNet, with no calibration data, keeps its float
//! predictions in ONNX Runtime and in quantkit's executor.

mod common;

use common::*;
use quantkit_graph::{DType, Graph, Tensor};
use quantkit_ptq::{quantize_dynamic, Format, PtqConfig, PtqError};

fn count(g: &Graph, op: &str) -> usize {
    g.nodes.iter().filter(|n| n.op_type == op).count()
}

#[test]
fn lenet_dynamic_agrees_with_float_in_quantkit_and_ort() {
    let float = quantkit_graph::load_model(repo().join("models/lenet.onnx")).unwrap();
    let (q, s) = quantize_dynamic(float.clone(), &PtqConfig::default()).unwrap();
    assert_eq!(s.format, "dynamic");
    assert_eq!(s.quantized.len(), 4);
    assert_eq!(count(&q, "DynamicQuantizeLinear"), 4);
    assert_eq!(count(&q, "ConvInteger"), 2);
    assert_eq!(count(&q, "MatMulInteger"), 2);
    for op in ["Conv", "Gemm", "QuantizeLinear", "DequantizeLinear"] {
        assert_eq!(count(&q, op), 0, "{op} left");
    }
    for n in q.nodes.iter().filter(|n| n.op_type.ends_with("Integer")) {
        let w = &q.initializers[&n.inputs[1]];
        assert_eq!(w.dtype, DType::I8);
        let zp = &q.initializers[&n.inputs[3]];
        assert_eq!(zp.to_i64_vec(), [0]);
    }
    // Per-channel scales broadcast over NCHW for the convs: [M, 1, 1].
    let conv_scale = q
        .nodes
        .iter()
        .find(|n| n.name == "conv2_scales_mul")
        .unwrap();
    assert_eq!(q.initializers[&conv_scale.inputs[1]].shape, [64, 1, 1]);
    assert!(s.weight_bytes_after * 3 < s.weight_bytes_before);

    let x = sample_batch(1000);
    let yf = run(&float, "input", &x).to_f32_vec();
    let yq = run(&q, "input", &x).to_f32_vec();
    let a = agreement(&argmax_rows(&yf, 10), &argmax_rows(&yq, 10));
    let c = cosine(&yf, &yq);
    eprintln!(
        "quantkit: dynamic vs float top-1 agreement {a:.4}, logit cosine {c:.5} on 1000 images"
    );
    assert!(a >= 0.99, "quantkit dynamic vs float agreement {a}");
    if !have_ort() {
        return;
    }
    let dir = scratch("dynamic-lenet");
    let p = dir.join("lenet.dynamic.onnx");
    quantkit_graph::save_model(&q, &p).unwrap();
    let yo = run_ort(&p, "input", &x);
    let a = agreement(&argmax_rows(&yf, 10), &argmax_rows(&yo, 10));
    let ao = agreement(&argmax_rows(&yq, 10), &argmax_rows(&yo, 10));
    eprintln!("ORT: dynamic vs float top-1 agreement {a:.4}; ORT vs quantkit on the dynamic model {ao:.4}");
    assert!(a >= 0.99, "ORT dynamic vs float agreement {a}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn dynamic_options_and_errors() {
    let float = quantkit_graph::load_model(repo().join("models/lenet.onnx")).unwrap();
    // Per-tensor 4-bit weights, one node excluded.
    let (q, s) = quantize_dynamic(
        float.clone(),
        &PtqConfig {
            exclude: vec!["fc2".into()],
            qdq: quantkit_ptq::QdqOptions {
                per_channel: false,
                weight_bits: 4,
                signed_activations: false,
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(s.quantized.len(), 3);
    assert_eq!(s.left_float[0].name, "fc2");
    assert_eq!(count(&q, "Gemm"), 1);
    for n in q.nodes.iter().filter(|n| n.op_type.ends_with("Integer")) {
        let w = q.initializers[&n.inputs[1]].to_i64_vec();
        assert!(w.iter().all(|v| (-8..=7).contains(v)));
    }
    for n in q.nodes.iter().filter(|n| n.name.ends_with("_scales_mul")) {
        assert_eq!(q.initializers[&n.inputs[1]].len(), 1, "{}", n.name);
    }
    // The dynamic graph still runs and stays close on a few images.
    let x = Tensor::from_f32(&[20, 1, 28, 28], sample_batch(20).to_f32_vec());
    let yf = run(&float, "input", &x).to_f32_vec();
    let yq = run(&q, "input", &x).to_f32_vec();
    assert!(cosine(&yf, &yq) > 0.95, "{}", cosine(&yf, &yq));
    let e = quantize_dynamic(
        float.clone(),
        &PtqConfig {
            format: Format::QOperator,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, PtqError::InvalidOption(_)), "{e}");
    let e = quantize_dynamic(
        float,
        &PtqConfig {
            exclude: vec!["conv1".into(), "conv2".into(), "fc1".into(), "fc2".into()],
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, PtqError::NothingToQuantize(_)), "{e}");
}
