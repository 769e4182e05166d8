//! Each integer pattern against the graph crate's exact integer references (QLinearConv,
//! QLinearMatMul: i64 accumulation, ONNX semantics) or, for steps on codes, against the QDQ
//! graph on the float executor, on small random graphs built here.

mod common;

use common::Lcg;
use quantkit_engine::{compile, EngineError, EngineOptions, Placement};
use quantkit_graph::ops::{qlinear_conv, qlinear_mat_mul, OpCtx};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};

fn scalar(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        DType::I8 => Data::I8(vec![v as i8]),
        _ => Data::I32(vec![v]),
    };
    Tensor::new(vec![], data).unwrap()
}

fn codes(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Tensor {
    let n = shape.iter().product();
    let data = match dtype {
        DType::U8 => Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
        _ => Data::I8((0..n).map(|_| rng.int(-128, 127) as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// A per-tensor (`[]`) or per-channel (`[c]`) f32 tensor.
fn f32s(v: Vec<f32>) -> Tensor {
    if v.len() == 1 {
        Tensor::from_f32(&[], v)
    } else {
        Tensor::from_f32(&[v.len()], v)
    }
}

fn i8s(v: Vec<i8>) -> Tensor {
    let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
    Tensor::new(shape, Data::I8(v)).unwrap()
}

#[derive(Clone, Debug)]
struct ConvCase {
    act: DType,
    out: DType,
    n: usize,
    c: usize,
    hw: [usize; 2],
    m: usize,
    k: [usize; 2],
    group: usize,
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
    per_channel: bool,
    bias: bool,
    /// `None`, `Some((0, inf))` for Relu, `Some((a, b))` for Clip(a, b).
    act_fn: Option<(f32, f32)>,
    /// Input and output zero points (`None`: random).
    x_zp: Option<i32>,
    y_zp: Option<i32>,
    seed: u64,
}

impl Default for ConvCase {
    fn default() -> Self {
        ConvCase {
            act: DType::U8,
            out: DType::U8,
            n: 2,
            c: 3,
            hw: [7, 6],
            m: 4,
            k: [3, 3],
            group: 1,
            strides: [1, 1],
            dilations: [1, 1],
            pads: [0; 4],
            per_channel: true,
            bias: true,
            act_fn: None,
            x_zp: None,
            y_zp: None,
            seed: 1,
        }
    }
}

fn range(t: DType) -> (i32, i32) {
    if t == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

/// Builds `DQ(x) → Conv(DQ(w), DQ(b)) [→ act] → Q` and checks the engine's codes against
/// QLinearConv (followed by the activation's clamp) exactly.
fn check_conv(cs: &ConvCase) {
    let mut rng = Lcg(cs.seed);
    let (xlo, xhi) = range(cs.act);
    let (ylo, yhi) = range(cs.out);
    let x_zp = cs.x_zp.unwrap_or_else(|| rng.int(xlo, xhi));
    let y_zp = cs.y_zp.unwrap_or_else(|| rng.int(ylo, yhi));
    let x_s = 0.02f32;
    let cin_g = cs.c / cs.group;
    let wlen = cs.m * cin_g * cs.k[0] * cs.k[1];
    let w = Tensor::new(
        vec![cs.m, cin_g, cs.k[0], cs.k[1]],
        Data::I8((0..wlen).map(|_| rng.int(-127, 127) as i8).collect()),
    )
    .unwrap();
    let nch = if cs.per_channel { cs.m } else { 1 };
    let w_s: Vec<f32> = (0..nch).map(|_| rng.float(0.002, 0.02)).collect();
    let w_z: Vec<i8> = (0..nch).map(|_| rng.int(-4, 4) as i8).collect();
    let b: Vec<i32> = (0..cs.m).map(|_| rng.int(-3000, 3000)).collect();
    let b_s: Vec<f32> = w_s.iter().map(|&s| x_s * s).collect();
    // Output scale small enough that some results saturate at both ends.
    let y_s = 0.03f32 * (cin_g * cs.k[0] * cs.k[1]) as f32 / 9.0;

    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    let xshape = [cs.n, cs.c, cs.hw[0], cs.hw[1]];
    g.inputs = vec![ValueInfo::new("xq", cs.act, &xshape)];
    g.outputs = vec![ValueInfo::new("yq", cs.out, &[])];
    let init = &mut g.initializers;
    init.insert("xs".into(), Tensor::scalar_f32(x_s));
    init.insert("xz".into(), scalar(cs.act, x_zp));
    init.insert("w".into(), w.clone());
    init.insert("ws".into(), f32s(w_s.clone()));
    init.insert("wz".into(), i8s(w_z.clone()));
    init.insert(
        "b".into(),
        Tensor::new(vec![cs.m], Data::I32(b.clone())).unwrap(),
    );
    init.insert("bs".into(), f32s(b_s));
    init.insert(
        "bz".into(),
        Tensor::new(
            if nch == 1 { vec![] } else { vec![nch] },
            Data::I32(vec![0; nch]),
        )
        .unwrap(),
    );
    init.insert("ys".into(), Tensor::scalar_f32(y_s));
    init.insert("yz".into(), scalar(cs.out, y_zp));
    let conv_attrs = |n: Node| {
        n.with_attr("group", AttrValue::Int(cs.group as i64))
            .with_attr(
                "strides",
                AttrValue::Ints(cs.strides.iter().map(|&v| v as i64).collect()),
            )
            .with_attr(
                "dilations",
                AttrValue::Ints(cs.dilations.iter().map(|&v| v as i64).collect()),
            )
            .with_attr(
                "pads",
                AttrValue::Ints(cs.pads.iter().map(|&v| v as i64).collect()),
            )
    };
    let mut conv_in = vec!["xf", "wf"];
    if cs.bias {
        conv_in.push("bf");
    }
    let mut nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws", "wz"], &["wf"])
            .with_attr("axis", AttrValue::Int(0)),
        Node::new("dqb", "DequantizeLinear", &["b", "bs", "bz"], &["bf"])
            .with_attr("axis", AttrValue::Int(0)),
        conv_attrs(Node::new("conv", "Conv", &conv_in, &["c"])),
    ];
    let last = match cs.act_fn {
        None => "c",
        Some((0.0, f32::INFINITY)) => {
            nodes.push(Node::new("act", "Relu", &["c"], &["a"]));
            "a"
        }
        Some((lo, hi)) => {
            g.initializers.insert("clo".into(), Tensor::scalar_f32(lo));
            g.initializers.insert("chi".into(), Tensor::scalar_f32(hi));
            nodes.push(Node::new("act", "Clip", &["c", "clo", "chi"], &["a"]));
            "a"
        }
    };
    nodes.push(Node::new(
        "q",
        "QuantizeLinear",
        &[last, "ys", "yz"],
        &["yq"],
    ));
    g.nodes = nodes;

    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let conv = plan.report().iter().find(|r| r.node == "conv").unwrap();
    assert!(
        matches!(conv.placement, Placement::Integer { .. }),
        "{cs:?}: {:?}",
        conv.placement
    );
    let x = codes(cs.act, &xshape, &mut rng);
    let got = plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1;

    let mut qnode = conv_attrs(Node::new(
        "ref",
        "QLinearConv",
        &["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        &["yq"],
    ));
    qnode.inputs.truncate(if cs.bias { 9 } else { 8 });
    let gi = &g.initializers;
    let mut args: Vec<Option<&Tensor>> = vec![
        Some(&x),
        Some(&gi["xs"]),
        Some(&gi["xz"]),
        Some(&gi["w"]),
        Some(&gi["ws"]),
        Some(&gi["wz"]),
        Some(&gi["ys"]),
        Some(&gi["yz"]),
    ];
    if cs.bias {
        args.push(Some(&gi["b"]));
    }
    let want = qlinear_conv::eval(
        &OpCtx {
            node: &qnode,
            opset: 17,
        },
        &args,
    )
    .unwrap()
    .remove(0);
    // Q is monotone, so Q(act(y)) = clamp(Q(y), Q(lo), Q(hi)).
    let q = |v: f32| -> i64 {
        if v.is_infinite() {
            return if v > 0.0 { yhi as i64 } else { ylo as i64 };
        }
        ((v / y_s).round_ties_even() as i64 + y_zp as i64).clamp(ylo as i64, yhi as i64)
    };
    let (clo, chi) = cs
        .act_fn
        .map_or((ylo as i64, yhi as i64), |(a, b)| (q(a), q(b)));
    let want: Vec<i64> = want
        .to_i64_vec()
        .into_iter()
        .map(|v| v.clamp(clo, chi))
        .collect();
    assert_eq!(got.shape, want_shape(&want_len_shape(cs)), "{cs:?}");
    assert_eq!(got.dtype, cs.out);
    let got = got.to_i64_vec();
    let diff = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{cs:?}: {diff} of {} codes differ", want.len());
    // The case must exercise the output range, not only its middle.
    assert!(
        want.iter().any(|&v| v != want[0]),
        "{cs:?}: constant output"
    );
}

fn want_len_shape(cs: &ConvCase) -> Vec<usize> {
    let o = |i: usize| {
        let span = cs.dilations[i] * (cs.k[i] - 1) + 1;
        (cs.hw[i] + cs.pads[i] + cs.pads[i + 2] - span) / cs.strides[i] + 1
    };
    vec![cs.n, cs.m, o(0), o(1)]
}

fn want_shape(s: &[usize]) -> Vec<usize> {
    s.to_vec()
}

#[test]
fn conv_u8_per_channel_with_bias() {
    check_conv(&ConvCase::default());
}

#[test]
fn conv_i8_activations_and_outputs() {
    for out in [DType::I8, DType::U8] {
        check_conv(&ConvCase {
            act: DType::I8,
            out,
            seed: 2,
            ..Default::default()
        });
    }
}

#[test]
fn conv_per_tensor_without_bias() {
    check_conv(&ConvCase {
        per_channel: false,
        bias: false,
        seed: 3,
        ..Default::default()
    });
}

#[test]
fn conv_zero_points_at_range_ends() {
    for (act, xz, out, yz) in [
        (DType::U8, 0, DType::U8, 255),
        (DType::U8, 255, DType::U8, 0),
        (DType::I8, -128, DType::I8, 127),
        (DType::I8, 127, DType::I8, -128),
    ] {
        check_conv(&ConvCase {
            act,
            out,
            x_zp: Some(xz),
            y_zp: Some(yz),
            pads: [1, 1, 1, 1],
            seed: 4,
            ..Default::default()
        });
    }
}

#[test]
fn conv_strided_padded_dilated() {
    check_conv(&ConvCase {
        hw: [9, 8],
        strides: [2, 1],
        pads: [1, 2, 0, 1],
        dilations: [2, 1],
        seed: 5,
        ..Default::default()
    });
    check_conv(&ConvCase {
        hw: [10, 10],
        strides: [2, 2],
        dilations: [2, 2],
        pads: [2, 2, 2, 2],
        act: DType::I8,
        seed: 6,
        ..Default::default()
    });
}

#[test]
fn conv_depthwise_and_grouped() {
    // Depthwise (multiplier 1 and 2), with padding and stride.
    for m in [5, 10] {
        check_conv(&ConvCase {
            c: 5,
            m,
            group: 5,
            pads: [1, 1, 1, 1],
            strides: [2, 2],
            hw: [9, 9],
            seed: 7 + m as u64,
            ..Default::default()
        });
    }
    check_conv(&ConvCase {
        c: 4,
        m: 6,
        group: 2,
        act: DType::I8,
        seed: 9,
        ..Default::default()
    });
}

#[test]
fn conv_pointwise_1x1() {
    check_conv(&ConvCase {
        k: [1, 1],
        c: 17,
        m: 9,
        seed: 10,
        ..Default::default()
    });
}

#[test]
fn conv_fused_relu_and_clip_clamp() {
    check_conv(&ConvCase {
        act_fn: Some((0.0, f32::INFINITY)),
        seed: 11,
        ..Default::default()
    });
    check_conv(&ConvCase {
        act_fn: Some((0.0, 6.0)),
        act: DType::I8,
        out: DType::I8,
        seed: 12,
        ..Default::default()
    });
}

/// `DQ(a) → Gemm|MatMul(DQ(w) [, DQ(b)]) → Q` against QLinearMatMul (no bias) or against
/// QLinearConv 1×1 on `[M, K, 1, 1]` (with bias).
fn check_gemm(
    op: &str,
    act: DType,
    out: DType,
    trans_b: bool,
    per_channel: bool,
    bias: bool,
    seed: u64,
) {
    let mut rng = Lcg(seed);
    let (m, k, n) = (5, 37, 11);
    let (xlo, xhi) = range(act);
    let (ylo, yhi) = range(out);
    let x_zp = rng.int(xlo, xhi);
    let y_zp = rng.int(ylo, yhi);
    let x_s = 0.02f32;
    let nch = if per_channel { n } else { 1 };
    let w_s: Vec<f32> = (0..nch).map(|_| rng.float(0.002, 0.02)).collect();
    // QLinearMatMul takes per-column zero points; QLinearConv too. Keep them nonzero.
    let w_z: Vec<i8> = (0..nch).map(|_| rng.int(-3, 3) as i8).collect();
    let wv: Vec<i8> = (0..k * n).map(|_| rng.int(-127, 127) as i8).collect();
    let b: Vec<i32> = (0..n).map(|_| rng.int(-3000, 3000)).collect();
    let y_s = 0.06f32;

    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("xq", act, &[m, k])];
    g.outputs = vec![ValueInfo::new("yq", out, &[])];
    let wshape = if trans_b { vec![n, k] } else { vec![k, n] };
    // The same logical B[k][n] either way.
    let stored: Vec<i8> = if trans_b {
        (0..n * k).map(|i| wv[(i % k) * n + i / k]).collect()
    } else {
        wv.clone()
    };
    let gi = &mut g.initializers;
    gi.insert("xs".into(), Tensor::scalar_f32(x_s));
    gi.insert("xz".into(), scalar(act, x_zp));
    gi.insert("w".into(), Tensor::new(wshape, Data::I8(stored)).unwrap());
    gi.insert("ws".into(), f32s(w_s.clone()));
    gi.insert("wz".into(), i8s(w_z.clone()));
    gi.insert(
        "b".into(),
        Tensor::new(vec![n], Data::I32(b.clone())).unwrap(),
    );
    gi.insert("bs".into(), f32s(w_s.iter().map(|&s| x_s * s).collect()));
    gi.insert("ys".into(), Tensor::scalar_f32(y_s));
    gi.insert("yz".into(), scalar(out, y_zp));
    let mut ins = vec!["xf", "wf"];
    if bias {
        ins.push("bf");
    }
    let mut node = Node::new("mm", op, &ins, &["c"]);
    if trans_b {
        node = node.with_attr("transB", AttrValue::Int(1));
    }
    g.nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws", "wz"], &["wf"])
            .with_attr("axis", AttrValue::Int(if trans_b { 0 } else { 1 })),
        Node::new("dqb", "DequantizeLinear", &["b", "bs"], &["bf"])
            .with_attr("axis", AttrValue::Int(0)),
        node,
        Node::new("q", "QuantizeLinear", &["c", "ys", "yz"], &["yq"]),
    ];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let p = &plan
        .report()
        .iter()
        .find(|r| r.node == "mm")
        .unwrap()
        .placement;
    assert!(matches!(p, Placement::Integer { .. }), "{op}: {p:?}");
    let x = codes(act, &[m, k], &mut rng);
    let got = plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1;
    assert_eq!(got.shape, vec![m, n]);
    let gi = &g.initializers;
    let want = if bias || per_channel {
        // QLinearConv 1×1 (QLinearMatMul takes neither a bias nor per-column scales):
        // x [M, K, 1, 1], w [N, K, 1, 1] (the logical B transposed).
        let x4 = x.clone().reshaped(vec![m, k, 1, 1]).unwrap();
        let wt: Vec<i8> = (0..n * k).map(|i| wv[(i % k) * n + i / k]).collect();
        let w4 = Tensor::new(vec![n, k, 1, 1], Data::I8(wt)).unwrap();
        let node = Node::new(
            "ref",
            "QLinearConv",
            &["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
            &["y"],
        );
        let mut args = vec![
            Some(&x4),
            Some(&gi["xs"]),
            Some(&gi["xz"]),
            Some(&w4),
            Some(&gi["ws"]),
            Some(&gi["wz"]),
            Some(&gi["ys"]),
            Some(&gi["yz"]),
        ];
        if bias {
            args.push(Some(&gi["b"]));
        }
        qlinear_conv::eval(
            &OpCtx {
                node: &node,
                opset: 17,
            },
            &args,
        )
        .unwrap()
        .remove(0)
    } else {
        let node = Node::new(
            "ref",
            "QLinearMatMul",
            &["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
            &["y"],
        );
        let bkn = Tensor::new(vec![k, n], Data::I8(wv.clone())).unwrap();
        let args = [
            Some(&x),
            Some(&gi["xs"]),
            Some(&gi["xz"]),
            Some(&bkn),
            Some(&gi["ws"]),
            Some(&gi["wz"]),
            Some(&gi["ys"]),
            Some(&gi["yz"]),
        ];
        qlinear_mat_mul::eval(
            &OpCtx {
                node: &node,
                opset: 17,
            },
            &args,
        )
        .unwrap()
        .remove(0)
    };
    let (got, want) = (got.to_i64_vec(), want.to_i64_vec());
    assert_eq!(
        got, want,
        "{op} act {act} out {out} transB {trans_b} per-channel {per_channel} bias {bias}"
    );
    assert!(
        want.iter().any(|&v| v == ylo as i64 || v == yhi as i64)
            || want.iter().any(|&v| v != want[0])
    );
}

#[test]
fn gemm_and_matmul_match_the_integer_references() {
    let mut seed = 20;
    for act in [DType::U8, DType::I8] {
        for out in [DType::U8, DType::I8] {
            for per_channel in [true, false] {
                seed += 1;
                check_gemm("MatMul", act, out, false, per_channel, false, seed);
                check_gemm("Gemm", act, out, true, per_channel, true, seed);
                check_gemm("Gemm", act, out, false, per_channel, true, seed);
            }
        }
    }
}

/// Builds `xq → DQ → Conv(1×1, one input channel per output) → Q → DQ → body → Q` where the
/// conv makes the tensor NHWC inside the plan, then compares with the float executor.
fn check_codes_vs_float_executor(
    body: Vec<Node>,
    body_out: &str,
    extra: Vec<(&str, Tensor)>,
    y_s: f32,
    y_zp: i32,
) -> Graph {
    let mut rng = Lcg(40);
    let (n, c, h, w) = (2, 3, 6, 5);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("xq", DType::U8, &[n, c, h, w])];
    g.outputs = vec![ValueInfo::new("out", DType::F32, &[])];
    let gi = &mut g.initializers;
    gi.insert("xs".into(), Tensor::scalar_f32(0.02));
    gi.insert("xz".into(), scalar(DType::U8, 100));
    let wv: Vec<i8> = (0..c * c)
        .map(|i| {
            if i % (c + 1) == 0 {
                64
            } else {
                rng.int(-20, 20) as i8
            }
        })
        .collect();
    gi.insert(
        "w".into(),
        Tensor::new(vec![c, c, 1, 1], Data::I8(wv)).unwrap(),
    );
    gi.insert("ws".into(), Tensor::scalar_f32(0.01));
    gi.insert("cs".into(), Tensor::scalar_f32(0.015));
    gi.insert("cz".into(), scalar(DType::U8, 120));
    gi.insert("ys".into(), Tensor::scalar_f32(y_s));
    gi.insert("yz".into(), scalar(DType::U8, y_zp));
    for (name, t) in extra {
        gi.insert(name.into(), t);
    }
    let mut nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws"], &["wf"]),
        Node::new("conv", "Conv", &["xf", "wf"], &["c"]),
        Node::new("qc", "QuantizeLinear", &["c", "cs", "cz"], &["cq"]),
        Node::new("dqc", "DequantizeLinear", &["cq", "cs", "cz"], &["cf"]),
    ];
    nodes.extend(body);
    nodes.push(Node::new(
        "qy",
        "QuantizeLinear",
        &[body_out, "ys", "yz"],
        &["yq"],
    ));
    nodes.push(Node::new(
        "dqy",
        "DequantizeLinear",
        &["yq", "ys", "yz"],
        &["out"],
    ));
    g.nodes = nodes;
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    for r in plan.report() {
        if r.node != "dqy" {
            assert!(
                r.is_integer() || r.placement == Placement::Constant,
                "{r:?}"
            );
        }
    }
    let x = codes(DType::U8, &[n, c, h, w], &mut rng);
    let got = plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1;
    let want = execute(&g, vec![("xq".into(), x)]).unwrap().remove(0).1;
    assert_eq!(got, want);
    g
}

#[test]
fn max_pool_with_and_without_requantization_equals_the_qdq_graph() {
    let pool = |name: &str| {
        Node::new(name, "MaxPool", &["cf"], &["p"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![3, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 1]))
            .with_attr("pads", AttrValue::Ints(vec![1, 0, 1, 1]))
    };
    // Same parameters as the input (no table) and different ones (table).
    check_codes_vs_float_executor(vec![pool("pool")], "p", vec![], 0.015, 120);
    check_codes_vs_float_executor(vec![pool("pool")], "p", vec![], 0.021, 7);
}

/// An element-wise op followed by a Clip before the QuantizeLinear (how `quantkit qat`
/// states 4-bit codes in u8: the Clip bounds are DQ(0) and DQ(15)) runs as one table on the
/// codes, equal to the QDQ graph, every output code in the narrow range.
#[test]
fn table_op_then_clip_runs_on_codes_and_equals_the_qdq_graph() {
    let (ys, yz) = (0.1f32, 3);
    let body = vec![
        Node::new("hs", "HardSwish", &["cf"], &["h"]),
        Node::new("range", "Clip", &["h", "lo", "hi"], &["hc"]),
    ];
    let extra = vec![
        ("lo", Tensor::scalar_f32((0 - yz) as f32 * ys)),
        ("hi", Tensor::scalar_f32((15 - yz) as f32 * ys)),
    ];
    let g = check_codes_vs_float_executor(body, "hc", extra, ys, yz);
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let hs = plan.report().iter().find(|r| r.node == "hs").unwrap();
    assert!(hs.is_integer(), "{hs:?}");
}

/// MaxPool with `auto_pad = SAME_UPPER | SAME_LOWER` (MTCNN's first pools) on codes: the
/// pads follow from the input size (6×5, stride 2: one row and two columns of padding,
/// split differently by the two rules) and padded taps are ignored (−∞), not the zero
/// point; the input has negative values (codes below the zero point 120), so a pool that
/// padded with zero (or the zero point) would differ at the borders.
#[test]
fn max_pool_auto_pad_same_on_codes_equals_the_qdq_graph() {
    for (rule, k) in [
        ("SAME_UPPER", [3, 3]),
        ("SAME_LOWER", [3, 3]),
        ("SAME_UPPER", [2, 2]),
    ] {
        let pool = Node::new("pool", "MaxPool", &["cf"], &["p"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![k[0], k[1]]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2]))
            .with_attr("auto_pad", AttrValue::String(rule.into()));
        for (ys, yz) in [(0.015, 120), (0.021, 7)] {
            let g = check_codes_vs_float_executor(vec![pool.clone()], "p", vec![], ys, yz);
            let plan = compile(&g, &EngineOptions::default()).unwrap();
            let r = plan.report().iter().find(|r| r.node == "pool").unwrap();
            assert!(
                matches!(&r.placement, Placement::Integer { kernel } if kernel.contains(rule)),
                "{r:?}"
            );
        }
    }
}

/// `DQ → Conv 3×3 (C_in 16, bias) → Relu → Q → DQ → MaxPool 2×2/2 → Q`: with one set of
/// parameters around the pool the conv step pools its own output (the Winograd path reduces
/// each tile's sums before the output stage); with different ones the pool stays a step of
/// its own (a requantizing table). Both equal the QDQ graph on the float executor bit for
/// bit, on odd output sizes (the pool drops the last row and column).
#[test]
fn conv_relu_max_pool_runs_in_one_step_and_equals_the_qdq_graph() {
    for (pool_s, pool_z, fused) in [(0.04, 3, true), (0.05, 9, false)] {
        let mut rng = Lcg(77);
        let (n, c, h, w, m) = (2, 16, 9, 11, 24);
        let mut g = Graph {
            opset_imports: vec![(String::new(), 17)],
            ..Default::default()
        };
        g.inputs = vec![ValueInfo::new("xq", DType::U8, &[n, c, h, w])];
        g.outputs = vec![ValueInfo::new("out", DType::F32, &[])];
        let gi = &mut g.initializers;
        gi.insert("xs".into(), Tensor::scalar_f32(0.02));
        gi.insert("xz".into(), scalar(DType::U8, 100));
        let wv: Vec<i8> = (0..m * c * 9).map(|_| rng.int(-127, 127) as i8).collect();
        gi.insert(
            "w".into(),
            Tensor::new(vec![m, c, 3, 3], Data::I8(wv)).unwrap(),
        );
        let ws: Vec<f32> = (0..m).map(|i| 0.0005 * (1 + i % 5) as f32).collect();
        gi.insert("ws".into(), f32s(ws.clone()));
        let bv: Vec<i32> = (0..m).map(|_| rng.int(-20_000, 20_000)).collect();
        gi.insert("b".into(), Tensor::new(vec![m], Data::I32(bv)).unwrap());
        let bs: Vec<f32> = ws.iter().map(|s| s * 0.02).collect();
        gi.insert("bs".into(), f32s(bs));
        gi.insert("cs".into(), Tensor::scalar_f32(0.04));
        gi.insert("cz".into(), scalar(DType::U8, 3));
        gi.insert("ps".into(), Tensor::scalar_f32(pool_s));
        gi.insert("pz".into(), scalar(DType::U8, pool_z));
        let pads = AttrValue::Ints(vec![1, 1, 1, 1]);
        g.nodes = vec![
            Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
            Node::new("dqw", "DequantizeLinear", &["w", "ws"], &["wf"])
                .with_attr("axis", AttrValue::Int(0)),
            Node::new("dqb", "DequantizeLinear", &["b", "bs"], &["bf"])
                .with_attr("axis", AttrValue::Int(0)),
            Node::new("conv", "Conv", &["xf", "wf", "bf"], &["c"]).with_attr("pads", pads),
            Node::new("relu", "Relu", &["c"], &["r"]),
            Node::new("qc", "QuantizeLinear", &["r", "cs", "cz"], &["cq"]),
            Node::new("dqc", "DequantizeLinear", &["cq", "cs", "cz"], &["cf"]),
            Node::new("pool", "MaxPool", &["cf"], &["p"])
                .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
                .with_attr("strides", AttrValue::Ints(vec![2, 2])),
            Node::new("qp", "QuantizeLinear", &["p", "ps", "pz"], &["pq"]),
            Node::new("dqp", "DequantizeLinear", &["pq", "ps", "pz"], &["out"]),
        ];
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        let report = |node: &str| {
            plan.report()
                .iter()
                .find(|r| r.node == node)
                .unwrap()
                .clone()
        };
        let conv = report("conv");
        assert!(conv.is_integer(), "{conv:?}");
        assert!(format!("{conv:?}").contains("winograd"), "{conv:?}");
        let pool = report("pool");
        if fused {
            assert_eq!(
                pool.placement,
                Placement::Fused {
                    into: "conv".into()
                }
            );
        } else {
            assert!(
                matches!(pool.placement, Placement::Integer { .. }),
                "{pool:?}"
            );
        }
        let x = codes(DType::U8, &[n, c, h, w], &mut rng);
        let got = plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1;
        let want = execute(&g, vec![("xq".into(), x)]).unwrap().remove(0).1;
        assert_eq!(got.shape, [n, m, h / 2, w / 2]);
        assert_eq!(got, want, "fused {fused}");
        let distinct: std::collections::BTreeSet<u32> =
            got.to_f32_vec().iter().map(|v| v.to_bits()).collect();
        assert!(distinct.len() > 20, "a near-constant output tests little");
    }
}

/// An Identity at its input's last use hands the value on (no copy); one whose input is
/// read again later runs as an operator. Both give the executor's result.
#[test]
fn identity_moves_or_copies_and_equals_the_executor() {
    for reread in [false, true] {
        let mut g = Graph {
            opset_imports: vec![(String::new(), 17)],
            ..Default::default()
        };
        g.inputs = vec![ValueInfo::new("x", DType::F32, &[2, 3])];
        g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
        g.nodes = vec![
            Node::new("relu", "Relu", &["x"], &["r"]),
            Node::new("id", "Identity", &["r"], &["i"]),
        ];
        if reread {
            g.nodes.push(Node::new("add", "Add", &["i", "r"], &["y"]));
        } else {
            g.nodes.push(Node::new("sig", "Sigmoid", &["i"], &["y"]));
        }
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        let x = Tensor::from_f32(&[2, 3], vec![-1.0, 2.0, -3.5, 4.0, 0.0, 7.25]);
        let (got, times) = plan.run_profiled(vec![("x", x.clone())]).unwrap();
        let want = execute(&g, vec![("x".into(), x)]).unwrap().remove(0).1;
        assert_eq!(got[0].1, want);
        let id = times.iter().find(|(node, _, _)| node == "id").unwrap();
        assert_eq!(id.1 == "Identity (moved)", !reread, "{id:?}");
    }
}

#[test]
fn flatten_of_an_nhwc_tensor_has_onnx_element_order() {
    let flat = Node::new("flat", "Flatten", &["cf"], &["f"]);
    check_codes_vs_float_executor(vec![flat.clone()], "f", vec![], 0.015, 120);
    check_codes_vs_float_executor(vec![flat], "f", vec![], 0.03, 3);
    let tr = Node::new("tr", "Transpose", &["cf"], &["t"])
        .with_attr("perm", AttrValue::Ints(vec![0, 2, 3, 1]));
    check_codes_vs_float_executor(vec![tr], "t", vec![], 0.015, 120);
    let rs = Node::new("rs", "Reshape", &["cf", "shape"], &["r"]);
    check_codes_vs_float_executor(
        vec![rs],
        "r",
        vec![("shape", Tensor::from_i64(&[3], vec![2, -1, 6]))],
        0.015,
        120,
    );
}

#[test]
fn element_wise_ops_become_tables() {
    for op in ["Relu", "Sigmoid", "Tanh", "HardSwish"] {
        let node = Node::new("act", op, &["cf"], &["a"]);
        check_codes_vs_float_executor(vec![node], "a", vec![], 0.01, 128);
    }
}

#[test]
fn failed_preconditions_fall_back_to_float_islands() {
    // A conv whose float output has a second reader cannot be fused: it stays float and the
    // plan still computes what the float executor computes.
    let mut rng = Lcg(50);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("xq", DType::U8, &[1, 2, 4, 4])];
    g.outputs = vec![
        ValueInfo::new("out", DType::F32, &[]),
        ValueInfo::new("c", DType::F32, &[]),
    ];
    let gi = &mut g.initializers;
    gi.insert("xs".into(), Tensor::scalar_f32(0.02));
    gi.insert("xz".into(), scalar(DType::U8, 10));
    gi.insert(
        "w".into(),
        Tensor::new(
            vec![2, 2, 3, 3],
            Data::I8((0..36).map(|_| rng.int(-50, 50) as i8).collect()),
        )
        .unwrap(),
    );
    gi.insert("ws".into(), Tensor::scalar_f32(0.01));
    gi.insert("ys".into(), Tensor::scalar_f32(0.05));
    gi.insert("yz".into(), scalar(DType::U8, 128));
    g.nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws"], &["wf"]),
        Node::new("conv", "Conv", &["xf", "wf"], &["c"]),
        Node::new("q", "QuantizeLinear", &["c", "ys", "yz"], &["yq"]),
        Node::new("dq", "DequantizeLinear", &["yq", "ys", "yz"], &["out"]),
    ];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let conv = plan.report().iter().find(|r| r.node == "conv").unwrap();
    match &conv.placement {
        Placement::Float { reason } => assert!(reason.contains("other readers"), "{reason}"),
        p => panic!("{p:?}"),
    }
    let x = codes(DType::U8, &[1, 2, 4, 4], &mut rng);
    let got = plan.run(vec![("xq", x.clone())]).unwrap();
    let want = execute(&g, vec![("xq".into(), x)]).unwrap();
    assert_eq!(got, want);

    // keep_float forces the island.
    g.outputs.truncate(1);
    let plan = compile(
        &g,
        &EngineOptions {
            keep_float: vec!["conv".into()],
            ..Default::default()
        },
    )
    .unwrap();
    let conv = plan.report().iter().find(|r| r.node == "conv").unwrap();
    assert!(matches!(conv.placement, Placement::Float { .. }));
}

#[test]
fn bad_inputs_give_typed_errors() {
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs = vec![ValueInfo::new("x", DType::F32, &[1, 4])];
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
    g.initializers.insert("s".into(), Tensor::scalar_f32(0.1));
    g.initializers.insert("z".into(), scalar(DType::U8, 3));
    g.nodes = vec![
        Node::new("q", "QuantizeLinear", &["x", "s", "z"], &["xq"]),
        Node::new("dq", "DequantizeLinear", &["xq", "s", "z"], &["y"]),
    ];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    let ok = Tensor::from_f32(&[1, 4], vec![0.0; 4]);
    assert!(plan.run(vec![("x", ok.clone())]).is_ok());
    match plan.run(vec![("nope", ok.clone())]) {
        Err(EngineError::UnknownInput { name, known }) => {
            assert_eq!(name, "nope");
            assert_eq!(known, "x");
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        plan.run(Vec::<(&str, Tensor)>::new()),
        Err(EngineError::MissingInput { name }) if name == "x"
    ));
    let wrong_shape = Tensor::from_f32(&[1, 5], vec![0.0; 5]);
    assert!(matches!(
        plan.run(vec![("x", wrong_shape)]),
        Err(EngineError::InputMismatch { name, .. }) if name == "x"
    ));
    let wrong_type = Tensor::from_i64(&[1, 4], vec![0; 4]);
    assert!(matches!(
        plan.run(vec![("x", wrong_type)]),
        Err(EngineError::InputMismatch { name, .. }) if name == "x"
    ));

    // An integer step handed a tensor of the wrong rank (the model declares no shape).
    let mut g2 = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g2.inputs = vec![ValueInfo {
        name: "xq".into(),
        dtype: None,
        onnx_elem_type: DType::U8.onnx_code(),
        shape: None,
    }];
    g2.outputs = vec![ValueInfo::new("yq", DType::U8, &[])];
    let gi = &mut g2.initializers;
    gi.insert("xs".into(), Tensor::scalar_f32(0.02));
    gi.insert("xz".into(), scalar(DType::U8, 10));
    gi.insert(
        "w".into(),
        Tensor::new(vec![1, 1, 1, 1], Data::I8(vec![3])).unwrap(),
    );
    gi.insert("ws".into(), Tensor::scalar_f32(0.01));
    gi.insert("ys".into(), Tensor::scalar_f32(0.05));
    gi.insert("yz".into(), scalar(DType::U8, 128));
    g2.nodes = vec![
        Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws"], &["wf"]),
        Node::new("conv", "Conv", &["xf", "wf"], &["c"]),
        Node::new("q", "QuantizeLinear", &["c", "ys", "yz"], &["yq"]),
    ];
    let plan = compile(&g2, &EngineOptions::default()).unwrap();
    let x3 = Tensor::new(vec![1, 1, 4], Data::U8(vec![1; 4])).unwrap();
    match plan.run(vec![("xq", x3)]) {
        Err(EngineError::BadOperand { node, .. }) => assert_eq!(node, "conv"),
        r => panic!("{r:?}"),
    }
    let xi8 = Tensor::new(vec![1, 1, 2, 2], Data::I8(vec![1; 4])).unwrap();
    match plan.run(vec![("xq", xi8)]) {
        Err(EngineError::BadOperand { node, reason, .. }) => {
            assert_eq!(node, "conv");
            assert!(reason.contains("uint8"), "{reason}");
        }
        r => panic!("{r:?}"),
    }
    // The wrong channel count reaches the kernel, which rejects it with a typed error.
    let x2c = Tensor::new(vec![1, 2, 2, 2], Data::U8(vec![1; 8])).unwrap();
    assert!(matches!(
        plan.run(vec![("xq", x2c)]),
        Err(EngineError::Kernel { node, .. }) if node == "conv"
    ));
}

/// `DQ(conv codes, NHWC in the plan) + DQ(input codes, NCHW) → Relu → Q`: the binary step
/// performs the QDQ graph's f32 arithmetic (dequantize, add, divide, round), so the codes are
/// equal, for operands of one shape in different layouts and for a per-channel operand.
#[test]
fn add_mixes_layouts_and_broadcasts_exactly() {
    for b_shape in [
        vec![2, 3, 6, 5],
        vec![1, 3, 1, 1],
        vec![2, 3, 1, 1],
        vec![1, 1, 6, 1],
    ] {
        let mut rng = Lcg(70);
        let (n, c, h, w) = (2, 3, 6, 5);
        let mut g = Graph {
            opset_imports: vec![(String::new(), 17)],
            ..Default::default()
        };
        g.inputs = vec![
            ValueInfo::new("xq", DType::U8, &[n, c, h, w]),
            ValueInfo::new("bq", DType::U8, &b_shape),
        ];
        g.outputs = vec![ValueInfo::new("yq", DType::U8, &[])];
        let gi = &mut g.initializers;
        gi.insert("xs".into(), Tensor::scalar_f32(0.02));
        gi.insert("xz".into(), scalar(DType::U8, 100));
        let wv: Vec<i8> = (0..c * c).map(|_| rng.int(-60, 60) as i8).collect();
        gi.insert(
            "w".into(),
            Tensor::new(vec![c, c, 1, 1], Data::I8(wv)).unwrap(),
        );
        gi.insert("ws".into(), Tensor::scalar_f32(0.01));
        gi.insert("cs".into(), Tensor::scalar_f32(0.015));
        gi.insert("cz".into(), scalar(DType::U8, 120));
        gi.insert("bs".into(), Tensor::scalar_f32(0.03));
        gi.insert("bz".into(), scalar(DType::U8, 90));
        gi.insert("ys".into(), Tensor::scalar_f32(0.02));
        gi.insert("yz".into(), scalar(DType::U8, 10));
        g.nodes = vec![
            Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
            Node::new("dqw", "DequantizeLinear", &["w", "ws"], &["wf"]),
            Node::new("conv", "Conv", &["xf", "wf"], &["c"]),
            Node::new("qc", "QuantizeLinear", &["c", "cs", "cz"], &["cq"]),
            Node::new("dqc", "DequantizeLinear", &["cq", "cs", "cz"], &["cf"]),
            Node::new("dqb", "DequantizeLinear", &["bq", "bs", "bz"], &["bf"]),
            Node::new("add", "Add", &["cf", "bf"], &["s"]),
            Node::new("relu", "Relu", &["s"], &["r"]),
            Node::new("qy", "QuantizeLinear", &["r", "ys", "yz"], &["yq"]),
        ];
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        let add = plan.report().iter().find(|r| r.node == "add").unwrap();
        assert!(
            matches!(add.placement, Placement::Integer { .. }),
            "{add:?}"
        );
        let x = codes(DType::U8, &[n, c, h, w], &mut rng);
        let b = codes(DType::U8, &b_shape, &mut rng);
        let inputs = vec![("xq".to_string(), x), ("bq".to_string(), b)];
        let got = plan.run(inputs.clone()).unwrap().remove(0).1;
        let want = execute(&g, inputs).unwrap().remove(0).1;
        assert_eq!(got.shape, want.shape);
        let (got, want) = (got.to_i64_vec(), want.to_i64_vec());
        let max = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .max()
            .unwrap();
        let same = got.iter().zip(&want).filter(|(a, b)| a == b).count();
        println!(
            "add {b_shape:?}: {same} of {} codes equal, max diff {max}",
            got.len()
        );
        assert!(
            got.iter().all(|&v| v >= 10),
            "the fused Relu clamps at the zero point"
        );
        assert_eq!(got, want, "{b_shape:?}: max diff {max}");
        assert_eq!(same, got.len());
    }
}

/// The quantizer leaves out the zero point of symmetric weight and int32 bias
/// DequantizeLinear nodes (optional in ONNX, default 0): such a Conv or MatMul must still
/// compile into its integer step and give the codes of the same graph with explicit
/// all-zero zero points, which equal QLinearConv's with `w_zero_point = 0`.
#[test]
fn weight_and_bias_without_zero_point_compile_to_the_same_integer_step() {
    let mut rng = Lcg(70);
    let (n, c, hw, m) = (2, 3, 6, 5);
    let build = |op: &str, explicit: bool, rng: &mut Lcg| -> (Graph, Tensor) {
        let mut g = Graph {
            opset_imports: vec![(String::new(), 17)],
            ..Default::default()
        };
        let (xshape, wshape, axis): (Vec<usize>, Vec<usize>, i64) = if op == "Conv" {
            (vec![n, c, hw, hw], vec![m, c, 3, 3], 0)
        } else {
            (vec![n, 4 * c], vec![4 * c, m], 1)
        };
        g.inputs = vec![ValueInfo::new("xq", DType::U8, &xshape)];
        g.outputs = vec![ValueInfo::new("yq", DType::U8, &[])];
        let wlen: usize = wshape.iter().product();
        let w_s: Vec<f32> = (0..m).map(|_| rng.float(0.002, 0.02)).collect();
        let gi = &mut g.initializers;
        gi.insert("xs".into(), Tensor::scalar_f32(0.02));
        gi.insert("xz".into(), scalar(DType::U8, 117));
        gi.insert(
            "w".into(),
            Tensor::new(
                wshape,
                Data::I8((0..wlen).map(|_| rng.int(-127, 127) as i8).collect()),
            )
            .unwrap(),
        );
        gi.insert("ws".into(), f32s(w_s.clone()));
        gi.insert("wz".into(), i8s(vec![0; m]));
        gi.insert(
            "b".into(),
            Tensor::new(
                vec![m],
                Data::I32((0..m).map(|_| rng.int(-3000, 3000)).collect()),
            )
            .unwrap(),
        );
        gi.insert("bs".into(), f32s(w_s.iter().map(|&s| 0.02 * s).collect()));
        gi.insert(
            "bz".into(),
            Tensor::new(vec![m], Data::I32(vec![0; m])).unwrap(),
        );
        gi.insert("ys".into(), Tensor::scalar_f32(0.05));
        gi.insert("yz".into(), scalar(DType::U8, 90));
        let (wdq, bdq): (&[&str], &[&str]) = if explicit {
            (&["w", "ws", "wz"], &["b", "bs", "bz"])
        } else {
            (&["w", "ws"], &["b", "bs"])
        };
        let mut nodes = vec![
            Node::new("dqx", "DequantizeLinear", &["xq", "xs", "xz"], &["xf"]),
            Node::new("dqw", "DequantizeLinear", wdq, &["wf"])
                .with_attr("axis", AttrValue::Int(axis)),
        ];
        if op == "Conv" {
            nodes.push(
                Node::new("dqb", "DequantizeLinear", bdq, &["bf"])
                    .with_attr("axis", AttrValue::Int(0)),
            );
            nodes.push(Node::new("op", "Conv", &["xf", "wf", "bf"], &["y"]));
        } else {
            nodes.push(Node::new("op", "MatMul", &["xf", "wf"], &["y"]));
        }
        nodes.push(Node::new(
            "q",
            "QuantizeLinear",
            &["y", "ys", "yz"],
            &["yq"],
        ));
        g.nodes = nodes;
        let x = codes(DType::U8, &xshape, rng);
        (g, x)
    };
    for op in ["Conv", "MatMul"] {
        let seed = rng.0;
        let (with, x) = build(op, true, &mut rng);
        rng.0 = seed;
        let (without, x2) = build(op, false, &mut rng);
        assert_eq!(x, x2);
        assert_eq!(without.nodes[1].inputs.len(), 2);
        let mut got = Vec::new();
        for g in [&with, &without] {
            let plan = compile(g, &EngineOptions::default()).unwrap();
            let r = plan.report().iter().find(|r| r.node == "op").unwrap();
            assert!(
                matches!(r.placement, Placement::Integer { .. }),
                "{op}: {r:?}"
            );
            got.push(plan.run(vec![("xq", x.clone())]).unwrap().remove(0).1);
        }
        assert_eq!(got[0], got[1], "{op}: codes differ without the zero points");
        if op == "Conv" {
            let gi = &with.initializers;
            let qnode = Node::new(
                "ref",
                "QLinearConv",
                &["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                &["yq"],
            );
            let args: Vec<Option<&Tensor>> = vec![
                Some(&x),
                Some(&gi["xs"]),
                Some(&gi["xz"]),
                Some(&gi["w"]),
                Some(&gi["ws"]),
                Some(&gi["wz"]),
                Some(&gi["ys"]),
                Some(&gi["yz"]),
                Some(&gi["b"]),
            ];
            let want = qlinear_conv::eval(
                &OpCtx {
                    node: &qnode,
                    opset: 17,
                },
                &args,
            )
            .unwrap()
            .remove(0);
            assert_eq!(got[1].to_i64_vec(), want.to_i64_vec());
            let v = want.to_i64_vec();
            assert!(v.iter().any(|&c| c != v[0]), "constant output");
        }
    }
}

/// A node with no outputs (the `engine` fuzz target's find: `Concat(u) → []` after a QDQ-less
/// Conv/Resize chain) is not a pattern anchor: compiling gives a plan or an error, never an
/// index panic in the matcher.
#[test]
fn a_node_without_outputs_is_not_matched() {
    for op in ["Concat", "Conv", "MaxPool", "Add", "Relu", "Reshape"] {
        let mut g = Graph {
            opset_imports: vec![(String::new(), 17)],
            ..Default::default()
        };
        g.inputs = vec![ValueInfo::new("x", DType::F32, &[1, 1, 2, 2])];
        g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
        g.nodes = vec![
            Node::new("relu", "Relu", &["x"], &["y"]),
            Node::new("dead", op, &["y", "y"], &[]),
        ];
        // Ok (the node is dead) or an error naming it; the test fails on a panic.
        if let Err(e) = compile(&g, &EngineOptions::default()) {
            assert!(e.to_string().contains("dead"), "{op}: {e}");
        }
    }
}
