//! What the quantizer writes, name by name: short generated names that never collide with
//! the model's own, zero points left out only where the spec and ONNX Runtime's QDQ fusion
//! allow it, and the same numbers whatever the names.

mod common;

use common::*;
use quantkit_graph::{AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::{quantize_static, to_qoperator, PtqConfig};
use std::collections::HashSet;

fn rand_vec(n: usize, a: f32, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
        })
        .collect()
}

/// Conv(1→4, 3×3) → Relu → MaxPool 2 → Flatten → Gemm(→16) → Relu → MatMul(→10) on
/// [N, 1, 28, 28]. With `clash`, the Relu node is called `x_Q` and writes `x_dq`, and the
/// MaxPool writes `conv1.w_q`: the names the quantizer would generate for the input's
/// QuantizeLinear node, its DequantizeLinear output and conv1's quantized weight.
fn model(clash: bool) -> Graph {
    let mut g = graph_28x28("names");
    g.outputs.push(ValueInfo::new("y", DType::F32, &[1, 10]));
    g.outputs[0].shape.as_mut().unwrap()[0] = quantkit_graph::Dim::Symbolic("N".into());
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init("w1", &[4, 1, 3, 3], rand_vec(36, 0.8, 1));
    init("b1", &[4], rand_vec(4, 0.1, 2));
    init("wf", &[4 * 13 * 13, 16], rand_vec(676 * 16, 0.1, 3));
    init("bf", &[16], rand_vec(16, 0.1, 4));
    init("wm", &[16, 10], rand_vec(160, 0.5, 5));
    let (relu, r, p) = if clash {
        ("x_Q", "x_dq", "conv1.w_q")
    } else {
        ("relu", "r", "p")
    };
    g.nodes = vec![
        Node::new("conv1", "Conv", &["x", "w1", "b1"], &["c1"]),
        Node::new(relu, "Relu", &["c1"], &[r]),
        Node::new("pool", "MaxPool", &[r], &[p])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
        Node::new("flat", "Flatten", &[p], &["f"]),
        Node::new("fc", "Gemm", &["f", "wf", "bf"], &["h"]),
        Node::new("relu_fc", "Relu", &["h"], &["hr"]),
        Node::new("head", "MatMul", &["hr", "wm"], &["y"]),
    ];
    g
}

fn quantize(g: Graph) -> Graph {
    let config = PtqConfig {
        calib_samples: Some(100),
        ..Default::default()
    };
    quantize_static(g, &mut sample_data(), &config, &mut |_, _| {})
        .unwrap()
        .0
}

fn node<'a>(g: &'a Graph, name: &str) -> &'a Node {
    g.nodes
        .iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node `{name}`"))
}

fn producer<'a>(g: &'a Graph, value: &str) -> &'a Node {
    g.nodes
        .iter()
        .find(|n| n.outputs.iter().any(|o| o == value))
        .unwrap_or_else(|| panic!("nothing writes `{value}`"))
}

fn all_zero_i8(t: &Tensor) -> bool {
    matches!(&t.data, Data::I8(v) if v.iter().all(|&z| z == 0))
}

#[test]
fn generated_names_are_short_unique_and_leave_the_models_names_alone() {
    let q = quantize(model(true));
    // Every value is written once, by one node, and never shadows an initializer or input.
    let mut written = HashSet::new();
    for n in &q.nodes {
        for o in &n.outputs {
            assert!(written.insert(o.clone()), "`{o}` written twice");
            assert!(
                !q.initializers.contains_key(o),
                "`{o}` is also an initializer"
            );
            assert!(
                q.inputs.iter().all(|i| &i.name != o),
                "`{o}` is a graph input"
            );
        }
    }
    let mut names = HashSet::new();
    for n in &q.nodes {
        assert!(names.insert(n.name.clone()), "two nodes named `{}`", n.name);
    }
    // The model's own names are untouched.
    assert_eq!(q.inputs[0].name, "x");
    assert_eq!(q.outputs[0].name, "y");
    assert_eq!(node(&q, "x_Q").op_type, "Relu");
    assert_eq!(node(&q, "x_Q").outputs, ["x_dq"]);
    assert_eq!(node(&q, "pool").outputs, ["conv1.w_q"]);
    // The input's Q/DQ pair steps around the taken names.
    let xq = producer(&q, "x_q");
    assert_eq!(
        (xq.name.as_str(), xq.op_type.as_str()),
        ("x_Q_1", "QuantizeLinear")
    );
    assert_eq!(xq.inputs, ["x", "x_scale", "x_zp"]);
    let xdq = node(&q, "x_DQ");
    assert_eq!(xdq.inputs, ["x_q", "x_scale", "x_zp"]);
    assert_eq!(xdq.outputs, ["x_dq_1"]);
    assert_eq!(node(&q, "conv1").inputs[0], "x_dq_1");
    // An activation that is a graph output: the producer writes `y_float`, the DQ `y`.
    assert_eq!(node(&q, "head").outputs, ["y_float"]);
    assert_eq!(producer(&q, "y").op_type, "DequantizeLinear");
    assert_eq!(node(&q, "y_Q").inputs, ["y_float", "y_scale", "y_zp"]);
    // Conv weight and int32 bias: no zero point (all 0, the optional input's default).
    let w = node(&q, "conv1.w_DQ");
    assert_eq!(w.inputs, ["conv1.w_q_1", "conv1.w_scale"]);
    assert_eq!(w.outputs, ["conv1.w_dq"]);
    assert_eq!(w.attr_int("axis", 1).unwrap(), 0);
    assert_eq!(q.initializers["conv1.w_q_1"].dtype, DType::I8);
    let b = node(&q, "conv1.b_DQ");
    assert_eq!(b.inputs, ["conv1.b_q", "conv1.b_scale"]);
    assert_eq!(q.initializers["conv1.b_q"].dtype, DType::I32);
    assert_eq!(
        node(&q, "conv1").inputs,
        ["x_dq_1", "conv1.w_dq", "conv1.b_dq"]
    );
    // MatMul weight: no zero point either.
    assert_eq!(node(&q, "head.w_DQ").inputs, ["head.w_q", "head.w_scale"]);
    // Gemm weight keeps its explicit zero vector (ONNX Runtime fuses DQ → Gemm → Q into
    // QGemm only with it); its bias does not.
    let fw = node(&q, "fc.w_DQ");
    assert_eq!(fw.inputs, ["fc.w_q", "fc.w_scale", "fc.w_zp"]);
    assert_eq!(q.initializers["fc.w_zp"].shape, [16]);
    assert!(all_zero_i8(&q.initializers["fc.w_zp"]));
    assert_eq!(node(&q, "fc.b_DQ").inputs.len(), 2);
    // No ONNX Runtime-style long suffixes are left.
    for n in &q.nodes {
        for v in n.outputs.iter().chain(&n.inputs).chain([&n.name]) {
            assert!(
                !v.contains("QuantizeLinear") && !v.contains("zero_point"),
                "long name `{v}`"
            );
        }
    }
    // Names change nothing: the clashing and the plain model quantize to the same numbers.
    let plain = quantize(model(false));
    let x = sample_batch(200);
    let (a, b) = (run(&q, "x", &x), run(&plain, "x", &x));
    assert_eq!(a.to_f32_vec(), b.to_f32_vec());
    let mut sizes: Vec<(usize, DType)> = q
        .initializers
        .values()
        .map(|t| (t.len(), t.dtype))
        .collect();
    let mut sizes_plain: Vec<(usize, DType)> = plain
        .initializers
        .values()
        .map(|t| (t.len(), t.dtype))
        .collect();
    sizes.sort_by_key(|s| (s.0, s.1.onnx_code()));
    sizes_plain.sort_by_key(|s| (s.0, s.1.onnx_code()));
    assert_eq!(sizes, sizes_plain);
}

#[test]
fn qoperator_gets_the_required_weight_zero_points() {
    let qdq = quantize(model(false));
    let (qop, _) = to_qoperator(qdq).unwrap();
    // QLinearConv: w_zero_point is required; one shared scalar int8 zero serves every conv
    // (a scalar is allowed with a per-channel w_scale).
    let conv = node(&qop, "conv1");
    assert_eq!(conv.op_type, "QLinearConv");
    let z = &qop.initializers[&conv.inputs[5]];
    assert!(z.shape.is_empty() && all_zero_i8(z), "{z:?}");
    assert_eq!(qop.initializers[&conv.inputs[4]].shape, [4]);
    // QLinearMatMul: b_zero_point required, shaped like the per-column b_scale.
    let mm = node(&qop, "head");
    assert_eq!(mm.op_type, "QLinearMatMul");
    let z = &qop.initializers[&mm.inputs[5]];
    assert_eq!(z.shape, qop.initializers[&mm.inputs[4]].shape);
    assert!(all_zero_i8(z));
    // QGemm keeps the Gemm weight's own zero vector.
    let fc = node(&qop, "fc");
    assert_eq!(fc.op_type, "QGemm");
    assert_eq!(fc.inputs[5], "fc.w_zp");
    // The int32 biases are QLinearConv's B and QGemm's C directly.
    assert_eq!(conv.inputs[8], "conv1.b_q");
    assert_eq!(fc.inputs[6], "fc.b_q");
    assert_eq!(qop.initializers["conv1.b_q"].dtype, DType::I32);
    // The integer engine runs all three as integer steps, with the executor's codes.
    let plan = quantkit_engine::compile(&qop, &quantkit_engine::EngineOptions::default())
        .expect("the engine compiles the QOperator model");
    for name in ["conv1", "fc", "head"] {
        let r = plan.report().iter().find(|r| r.node == name).unwrap();
        assert!(r.is_integer(), "{name}: {r:?}");
    }
    let x = sample_batch(100);
    let eng = plan.run(vec![("x", x.clone())]).unwrap().remove(0).1;
    assert_eq!(eng.to_f32_vec(), run(&qop, "x", &x).to_f32_vec());
}

/// ONNX Runtime must still fuse every quantized Conv, Gemm and MatMul of the QDQ file into
/// its int8 kernels (QLinearConv, QGemm, QLinearMatMul), whatever zero points were left out,
/// and must run the QOperator file.
#[test]
fn onnx_runtime_fuses_every_qdq_group_into_int8_kernels() {
    if !have_ort() {
        return;
    }
    let qdq = quantize(model(false));
    let (qop, _) = to_qoperator(qdq.clone()).unwrap();
    let dir = scratch("layout-ort");
    let (pd, pq) = (dir.join("names.qdq.onnx"), dir.join("names.qop.onnx"));
    quantkit_graph::save_model(&qdq, &pd).unwrap();
    quantkit_graph::save_model(&qop, &pq).unwrap();
    let ops = ort_optimized_ops(&pd);
    let count = |op: &str| ops.iter().filter(|o| *o == op).count();
    assert_eq!(
        (count("QLinearConv"), count("QGemm"), count("QLinearMatMul")),
        (1, 1, 1),
        "{ops:?}"
    );
    for op in ["Conv", "Gemm", "MatMul"] {
        assert_eq!(count(op), 0, "float {op} left after ORT's fusion: {ops:?}");
    }
    // The QOperator file runs in ORT and agrees with the QDQ file.
    let x = sample_batch(200);
    let (yd, yq) = (run_ort(&pd, "x", &x), run_ort(&pq, "x", &x));
    let a = agreement(&argmax_rows(&yd, 10), &argmax_rows(&yq, 10));
    assert!(a >= 0.99, "ORT QOperator vs QDQ agreement {a}");
    std::fs::remove_dir_all(&dir).ok();
}
