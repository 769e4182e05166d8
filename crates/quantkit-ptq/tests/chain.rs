//! An element-wise chain computed from one activation is quantized at its root and its end
//! only (found on PP-OCRv4's text recognizer, PaddlePaddle's LCNetV3: after every
//! convolution a learnable scalar `· a + b`, a HardSwish written `x·clip(x + 3, 0, 6)/6`,
//! another `· a + b`; a Q/DQ after each of the eight steps cost 13 points of decoded-line
//! agreement), and quantkit's engine runs the whole chain as one table, bit for bit as the
//! QDQ graph (here fused into the convolution's output stage).

mod common;

use common::*;
use quantkit_graph::{Graph, Node, OpKind, Tensor, ValueInfo};
use quantkit_ptq::{quantize_static, PtqConfig};

/// `conv1 → ·a + b → HardSwish written out → ·c + d → conv2 → Gemm`.
fn chain_model() -> Graph {
    let mut g = graph_28x28("lcnet_chain");
    g.outputs
        .push(ValueInfo::new("logits", quantkit_graph::DType::F32, &[]));
    g.outputs[0].shape = None;
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init("w1", &[4, 1, 3, 3], rand_vec(36, 0.5, 1));
    init("w2", &[4, 4, 1, 1], rand_vec(16, 0.5, 2));
    init("a", &[], vec![1.38]);
    init("b", &[], vec![0.59]);
    init("three", &[], vec![3.0]);
    init("zero", &[], vec![0.0]);
    init("six", &[], vec![6.0]);
    init("c", &[], vec![0.17]);
    init("d", &[], vec![-0.2]);
    init("wf", &[4 * 26 * 26, 10], rand_vec(2704 * 10, 0.05, 3));
    init("bf", &[10], rand_vec(10, 0.5, 4));
    g.nodes = vec![
        Node::of(OpKind::Conv, "conv1", &["x", "w1"], &["h"]),
        Node::of(OpKind::Mul, "scale1", &["a", "h"], &["h1"]),
        Node::of(OpKind::Add, "shift1", &["h1", "b"], &["h2"]),
        Node::of(OpKind::Add, "plus3", &["h2", "three"], &["h3"]),
        Node::of(OpKind::Clip, "relu6", &["h3", "zero", "six"], &["h4"]),
        Node::of(OpKind::Mul, "times", &["h2", "h4"], &["h5"]),
        Node::of(OpKind::Div, "by6", &["h5", "six"], &["hs"]),
        Node::of(OpKind::Mul, "scale2", &["c", "hs"], &["h6"]),
        Node::of(OpKind::Add, "shift2", &["h6", "d"], &["h7"]),
        Node::of(OpKind::Conv, "conv2", &["h7", "w2"], &["k"]),
        Node::of(OpKind::Flatten, "flat", &["k"], &["f"]),
        Node::of(OpKind::Gemm, "fc", &["f", "wf", "bf"], &["logits"]),
    ];
    g
}

#[test]
fn a_chain_of_one_activation_is_quantized_at_its_root_and_end_and_runs_as_one_table() {
    let float = chain_model();
    let mut data = sample_data();
    let (q, summary) = quantize_static(
        float.clone(),
        &mut data,
        &PtqConfig {
            calib_samples: Some(64),
            batch_size: 16,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let quantized: Vec<&str> = q
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::QuantizeLinear))
        .map(|n| n.inputs[0].as_str())
        .collect();
    // The root (conv1's output) and the end (conv2's input) are quantized, nothing between.
    for v in ["h", "h7"] {
        assert!(quantized.contains(&v), "`{v}` not quantized: {quantized:?}");
    }
    for v in ["h1", "h2", "h3", "h4", "h5", "hs", "h6"] {
        assert!(!quantized.contains(&v), "`{v}` quantized: {quantized:?}");
    }
    assert!(summary.quantized.iter().any(|(n, _)| n == "conv2"));

    // The engine: the chain is one table from conv1's codes to conv2's input codes, no float
    // island, and its output follows the float executor's run of the QDQ graph.
    let plan = quantkit_engine::compile(&q, &quantkit_engine::EngineOptions::default()).unwrap();
    let islands: Vec<&str> = plan
        .report()
        .iter()
        .filter(|n| matches!(n.placement, quantkit_engine::Placement::Float { .. }))
        .map(|n| n.node.as_str())
        .collect();
    assert!(islands.is_empty(), "float islands: {islands:?}");
    // One table, fused into conv1's output stage; no step of its own for any chain node.
    let steps = plan.steps();
    let conv1 = steps
        .iter()
        .find(|(n, _)| n == "conv1")
        .expect("conv1 step");
    assert!(conv1.1.contains("table"), "steps: {steps:?}");
    for n in [
        "scale1", "shift1", "plus3", "relu6", "times", "by6", "scale2", "shift2",
    ] {
        assert!(
            steps.iter().all(|(s, _)| s != n),
            "`{n}` runs alone: {steps:?}"
        );
    }
    let x = sample_batch(16);
    let reference = run(&q, "x", &x).to_f32_vec();
    let engine = plan.run(vec![("x", x.clone())]).unwrap()[0].1.to_f32_vec();
    // The integer requantizations of conv1, conv2 and fc may round a code one step away
    // from the float simulation of the same graph, hence a cosine, not equality.
    let f = run(&float, "x", &x).to_f32_vec();
    assert!(cosine(&engine, &reference) > 0.9999, "engine vs QDQ graph");
    assert!(cosine(&reference, &f) > 0.999, "QDQ vs float");
}
