//! A value the model divides by stays float (found on Magika, a real file-type classifier:
//! its LayerNorm, exported from JAX as `Reciprocal(Sqrt(var + eps))`, gave `inf` logits once
//! `var + eps` was quantized, because a small variance rounded to code 0 and undid the
//! epsilon; ONNX Runtime's quantizer produces the same `inf`).

mod common;

use common::*;
use quantkit_graph::{AttrValue, Graph, Node, OpKind, Tensor, ValueInfo};
use quantkit_ptq::{quantize_static, PtqConfig};

/// `c = Conv(x)` (no bias) → `logits = Gemm(Flatten(c))`, and a second output `y`, the
/// LayerNorm of `c` over C·H·W written out as primitives: with `div`,
/// `Div(d, Sqrt(var + eps))`, else `Mul(d, Reciprocal(Sqrt(var + eps)))`. The test keeps the
/// normalising node float and `y` feeds no quantized node (as in Magika), so a division by
/// zero reaches the output instead of being clipped by a QuantizeLinear.
fn layer_norm_model(div: bool) -> Graph {
    let mut g = graph_28x28("ln_primitives");
    g.outputs
        .push(ValueInfo::new("logits", quantkit_graph::DType::F32, &[]));
    g.outputs
        .push(ValueInfo::new("y", quantkit_graph::DType::F32, &[]));
    for o in &mut g.outputs {
        o.shape = None;
    }
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init("w", &[4, 1, 3, 3], rand_vec(36, 0.5, 1));
    init("eps", &[], vec![1e-5]);
    init("wf", &[4 * 26 * 26, 10], rand_vec(2704 * 10, 0.05, 2));
    init("bf", &[10], rand_vec(10, 0.5, 3));
    let axes = || AttrValue::Ints(vec![1, 2, 3]);
    let mut nodes = vec![
        Node::of(OpKind::Conv, "conv", &["x", "w"], &["c"]),
        Node::of(OpKind::ReduceMean, "mean", &["c"], &["m"]).with_attr("axes", axes()),
        Node::of(OpKind::Sub, "center", &["c", "m"], &["d"]),
        Node::of(OpKind::Mul, "square", &["d", "d"], &["sq"]),
        Node::of(OpKind::ReduceMean, "var", &["sq"], &["v"]).with_attr("axes", axes()),
        Node::of(OpKind::Add, "add_eps", &["v", "eps"], &["ve"]),
        Node::of(OpKind::Sqrt, "sqrt", &["ve"], &["s"]),
    ];
    if div {
        nodes.push(Node::of(OpKind::Div, "normalize", &["d", "s"], &["y"]));
    } else {
        nodes.push(Node::of(OpKind::Reciprocal, "rsqrt", &["s"], &["r"]));
        nodes.push(Node::of(OpKind::Mul, "normalize", &["d", "r"], &["y"]));
    }
    nodes.push(Node::of(OpKind::Flatten, "flat", &["c"], &["f"]));
    nodes.push(Node::of(
        OpKind::Gemm,
        "fc",
        &["f", "wf", "bf"],
        &["logits"],
    ));
    g.nodes = nodes;
    g
}

#[test]
fn values_reaching_a_divisor_stay_float_and_a_flat_input_gives_finite_logits() {
    for div in [false, true] {
        let what = if div { "Div" } else { "Reciprocal" };
        let float = layer_norm_model(div);
        let mut data = sample_data();
        let (q, summary) = quantize_static(
            float.clone(),
            &mut data,
            &PtqConfig {
                calib_samples: Some(64),
                batch_size: 16,
                exclude: vec!["normalize".into()],
                ..Default::default()
            },
            &mut |_, _| {},
        )
        .unwrap();
        let quantized: Vec<&str> = summary.quantized.iter().map(|(n, _)| n.as_str()).collect();
        for n in ["conv", "fc"] {
            assert!(
                quantized.contains(&n),
                "{what}: {n} not quantized: {quantized:?}"
            );
        }
        // A blank image: the variance is 0 and only eps keeps the division finite; the
        // float model's `y` is 0 and its logits are the Gemm bias.
        let blank = Tensor::from_f32(&[1, 1, 28, 28], vec![0.0; 784]);
        let outs = |g: &Graph| -> Vec<Vec<f32>> {
            quantkit_graph::execute(g, vec![("x".into(), blank.clone())])
                .unwrap()
                .into_iter()
                .map(|(_, t)| t.to_f32_vec())
                .collect()
        };
        let (want, got) = (outs(&float), outs(&q));
        for (w, g) in want.iter().zip(&got) {
            let bad = g.iter().filter(|v| !v.is_finite()).count();
            assert_eq!(bad, 0, "{what}: {bad} of {} values not finite", g.len());
            assert!(max_abs_diff(w, g) < 0.05, "{what}: {}", max_abs_diff(w, g));
        }
        // `var + eps` and its square root reach the divisor: their producers stay float,
        // with a reason that says so.
        for n in ["add_eps", "sqrt"] {
            let f = summary.left_float.iter().find(|f| f.name == n);
            assert!(
                f.is_some_and(|f| f.reason.contains("divisor")),
                "{what}: {n} should stay float for the divisor: {:?}",
                summary.left_float
            );
        }
        assert!(!q
            .nodes
            .iter()
            .any(|n| n.is(OpKind::QuantizeLinear) && ["ve", "s"].contains(&n.inputs[0].as_str())));
        // And on real images the quantized model still agrees with float.
        let x = sample_batch(64);
        let (a, b) = (
            run(&float, "x", &x).to_f32_vec(),
            run(&q, "x", &x).to_f32_vec(),
        );
        assert!(cosine(&a, &b) > 0.99, "{what}: cosine {}", cosine(&a, &b));
    }
}
