//! A GEMM step that absorbs the `DQ → Flatten(axis = 1) → Q → DQ` before it and reads the
//! pre-Flatten codes in place (NHWC conv outputs through K-permuted weights), against the
//! QDQ graph on the float executor, and the cases where it must not absorb the Flatten.

mod common;

use common::Lcg;
use quantkit_engine::{compile, EngineOptions, Placement, Plan};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};

fn scalar(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        _ => Data::I8(vec![v as i8]),
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

#[derive(Clone, Debug)]
struct Case {
    /// Code type of every activation.
    act: DType,
    /// `Gemm` (with `transB`) or `MatMul`.
    op: &'static str,
    trans_b: bool,
    /// Channels of the conv output that is flattened (no conv at all: `None`, the Flatten
    /// reads the NCHW graph input).
    conv_out: Option<usize>,
    axis: i64,
    /// The Flatten's output is also a graph output.
    flatten_is_output: bool,
    /// The Q after the Flatten has other parameters than the DQ before it (a requantizing
    /// table, so the Flatten stays a step of its own).
    requantize: bool,
    per_channel: bool,
    seed: u64,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            act: DType::U8,
            op: "Gemm",
            trans_b: true,
            conv_out: Some(5),
            axis: 1,
            flatten_is_output: false,
            requantize: false,
            per_channel: true,
            seed: 1,
        }
    }
}

/// Scales are powers of two, so that the float executor's DQ → Conv/Gemm → Q is exact
/// (every product and partial sum is a representable multiple of the smallest step) and the
/// integer steps must give the very same codes; a K permuted wrongly cannot.
const XS: f32 = 1.0 / 64.0;
const CS: f32 = 1.0 / 32.0;

/// `xq [n, 3, h, w] → DQ → [Conv 1×1 → Relu → Q → DQ] → Flatten → Q → DQ → Gemm|MatMul
/// (DQ weights, DQ bias for Gemm) → Relu → Q → DQ → y`, for input spatial size `hw`
/// (the graph input's shape is left unknown so that one plan runs several sizes).
fn build(cs: &Case, hw: [usize; 2]) -> Graph {
    let mut rng = Lcg(cs.seed);
    let c_in = 3;
    let c = cs.conv_out.unwrap_or(c_in);
    let k = if cs.axis == 1 {
        c * hw[0] * hw[1]
    } else {
        hw[0] * hw[1]
    };
    let n_out = 7;
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    let mut x = ValueInfo::new("xq", cs.act, &[]);
    x.shape = None;
    g.inputs = vec![x];
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
    if cs.flatten_is_output {
        g.outputs.push(ValueInfo::new("f", DType::F32, &[]));
    }
    let zp = |v: i32| if cs.act == DType::U8 { v } else { v - 128 };
    let gi = &mut g.initializers;
    gi.insert("xs".into(), Tensor::scalar_f32(XS));
    gi.insert("xz".into(), scalar(cs.act, zp(110)));
    gi.insert(
        "cw".into(),
        Tensor::new(
            vec![c, c_in, 1, 1],
            Data::I8((0..c * c_in).map(|_| rng.int(-90, 90) as i8).collect()),
        )
        .unwrap(),
    );
    gi.insert("cws".into(), Tensor::scalar_f32(1.0 / 128.0));
    gi.insert("cs".into(), Tensor::scalar_f32(CS));
    gi.insert("cz".into(), scalar(cs.act, zp(20)));
    // The Flatten's own parameters: the same as its input's (identity), or others.
    let (fs, fz) = match (cs.requantize, cs.conv_out.is_some()) {
        (true, _) => (1.0 / 16.0, zp(9)),
        (false, true) => (CS, zp(20)),
        (false, false) => (XS, zp(110)),
    };
    gi.insert("fs".into(), Tensor::scalar_f32(fs));
    gi.insert("fz".into(), scalar(cs.act, fz));
    let wshape = if cs.trans_b {
        vec![n_out, k]
    } else {
        vec![k, n_out]
    };
    gi.insert(
        "w".into(),
        Tensor::new(
            wshape,
            Data::I8((0..k * n_out).map(|_| rng.int(-127, 127) as i8).collect()),
        )
        .unwrap(),
    );
    let nch = if cs.per_channel { n_out } else { 1 };
    let w_s: Vec<f32> = (0..nch)
        .map(|_| [256.0, 512.0, 1024.0][rng.int(0, 2) as usize])
        .map(|d: f32| 1.0 / d)
        .collect();
    let w_z: Vec<i8> = (0..nch).map(|_| rng.int(-3, 3) as i8).collect();
    let vec_or_scalar = |v: Vec<f32>| {
        if v.len() == 1 {
            Tensor::from_f32(&[], v)
        } else {
            Tensor::from_f32(&[v.len()], v)
        }
    };
    gi.insert("ws".into(), vec_or_scalar(w_s.clone()));
    gi.insert(
        "wz".into(),
        Tensor::new(if nch == 1 { vec![] } else { vec![nch] }, Data::I8(w_z)).unwrap(),
    );
    gi.insert(
        "b".into(),
        Tensor::new(
            vec![n_out],
            Data::I32((0..n_out).map(|_| rng.int(-2000, 2000)).collect()),
        )
        .unwrap(),
    );
    gi.insert(
        "bs".into(),
        vec_or_scalar(w_s.iter().map(|&s| fs * s).collect()),
    );
    gi.insert("ys".into(), Tensor::scalar_f32(1.0 / 64.0));
    gi.insert("yz".into(), scalar(cs.act, zp(60)));

    let mut nodes = vec![Node::new(
        "dqx",
        "DequantizeLinear",
        &["xq", "xs", "xz"],
        &["xf"],
    )];
    let pre = if cs.conv_out.is_some() {
        nodes.extend([
            Node::new("dqcw", "DequantizeLinear", &["cw", "cws"], &["cwf"]),
            Node::new("conv", "Conv", &["xf", "cwf"], &["c"]),
            Node::new("relu", "Relu", &["c"], &["r"]),
            Node::new("qc", "QuantizeLinear", &["r", "cs", "cz"], &["cq"]),
            Node::new("dqc", "DequantizeLinear", &["cq", "cs", "cz"], &["cf"]),
        ]);
        "cf"
    } else {
        "xf"
    };
    let mut fc_in = vec!["ff", "wf"];
    if cs.op == "Gemm" {
        fc_in.push("bf");
    }
    let mut fc = Node::new("fc", cs.op, &fc_in, &["h"]);
    if cs.trans_b {
        fc = fc.with_attr("transB", AttrValue::Int(1));
    }
    nodes.extend([
        Node::new("flatten", "Flatten", &[pre], &["f"]).with_attr("axis", AttrValue::Int(cs.axis)),
        Node::new("qf", "QuantizeLinear", &["f", "fs", "fz"], &["fq"]),
        Node::new("dqf", "DequantizeLinear", &["fq", "fs", "fz"], &["ff"]),
        Node::new("dqw", "DequantizeLinear", &["w", "ws", "wz"], &["wf"])
            .with_attr("axis", AttrValue::Int(if cs.trans_b { 0 } else { 1 })),
        Node::new("dqb", "DequantizeLinear", &["b", "bs"], &["bf"])
            .with_attr("axis", AttrValue::Int(0)),
        fc,
        Node::new("relu_fc", "Relu", &["h"], &["hr"]),
        Node::new("qy", "QuantizeLinear", &["hr", "ys", "yz"], &["yq"]),
        Node::new("dqy", "DequantizeLinear", &["yq", "ys", "yz"], &["y"]),
    ]);
    g.nodes = nodes;
    g
}

fn placement<'a>(plan: &'a Plan, node: &str) -> &'a Placement {
    &plan
        .report()
        .iter()
        .find(|r| r.node == node)
        .unwrap()
        .placement
}

/// Runs `plan` (compiled from `g`) on random codes of shape `[n, 3, h, w]` and asserts the
/// outputs equal the float executor's bit for bit, and that the GEMM's output codes are not
/// constant (the case exercises the requantization).
fn assert_same(plan: &Plan, g: &Graph, cs: &Case, shape: [usize; 4], seed: u64) {
    let mut rng = Lcg(seed);
    let x = codes(cs.act, &shape, &mut rng);
    let got = plan.run(vec![("xq", x.clone())]).unwrap();
    let want = execute(g, vec![("xq".into(), x)]).unwrap();
    assert_eq!(got, want, "{cs:?} {shape:?}");
    let y = got[0].1.to_f32_vec();
    let distinct = y
        .iter()
        .map(|v| v.to_bits())
        .collect::<std::collections::HashSet<_>>();
    assert!(
        distinct.len() > 5,
        "{cs:?}: {} distinct outputs",
        distinct.len()
    );
}

fn absorbed(plan: &Plan) -> bool {
    let fused = |n: &str| *placement(plan, n) == Placement::Fused { into: "fc".into() };
    let gemm_reads_flatten = matches!(placement(plan, "fc"),
        Placement::Integer { kernel } if kernel.contains("flatten"));
    let flatten_step = plan.steps().iter().any(|(n, _)| n == "flatten");
    assert_eq!(fused("flatten"), fused("qf"));
    assert_eq!(fused("flatten"), gemm_reads_flatten);
    assert_eq!(fused("flatten"), !flatten_step);
    fused("flatten")
}

#[test]
fn gemm_reads_the_nhwc_conv_output_through_permuted_weights() {
    for act in [DType::U8, DType::I8] {
        for (op, trans_b) in [("Gemm", true), ("Gemm", false), ("MatMul", false)] {
            for per_channel in [true, false] {
                let cs = Case {
                    act,
                    op,
                    trans_b,
                    per_channel,
                    ..Default::default()
                };
                let g = build(&cs, [4, 6]);
                let plan = compile(&g, &EngineOptions::default()).unwrap();
                assert!(absorbed(&plan), "{cs:?}: {:?}", plan.report());
                assert!(
                    matches!(placement(&plan, "conv"), Placement::Integer { .. }),
                    "{cs:?}: the conv must be an NHWC step for the test to mean anything"
                );
                assert_same(&plan, &g, &cs, [2, 3, 4, 6], 10);
                // Batch size changes reuse the permuted weights.
                assert_same(&plan, &g, &cs, [5, 3, 4, 6], 11);
            }
        }
    }
}

#[test]
fn one_channel_nhwc_is_read_as_it_is() {
    // [n, h, w, 1] NHWC has the bytes of [n, 1, h, w] NCHW.
    let cs = Case {
        conv_out: Some(1),
        ..Default::default()
    };
    let g = build(&cs, [5, 6]);
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert!(absorbed(&plan));
    assert_same(&plan, &g, &cs, [3, 3, 5, 6], 50);
}

#[test]
fn another_spatial_shape_with_the_same_k_takes_the_transposing_path() {
    // [4, 6] and [6, 4] (and [3, 8]) give the same K = 5·24: the weights are permuted for
    // the first, the others must still come out right.
    let cs = Case::default();
    let g = build(&cs, [4, 6]);
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert!(absorbed(&plan));
    assert_same(&plan, &g, &cs, [2, 3, 4, 6], 20);
    assert_same(&plan, &g, &cs, [2, 3, 6, 4], 21);
    assert_same(&plan, &g, &cs, [2, 3, 3, 8], 22);
    assert_same(&plan, &g, &cs, [3, 3, 4, 6], 23);
    // A K that does not fit is the graph's error, not a panic.
    let mut rng = Lcg(24);
    let x = codes(cs.act, &[2, 3, 5, 5], &mut rng);
    assert!(plan.run(vec![("xq", x.clone())]).is_err());
    assert!(execute(&g, vec![("xq".into(), x)]).is_err());
}

#[test]
fn gemm_reads_an_nchw_input_in_place() {
    // No conv: the Flatten reads the graph input, which is NCHW.
    for op in ["Gemm", "MatMul"] {
        let cs = Case {
            conv_out: None,
            op,
            trans_b: op == "Gemm",
            ..Default::default()
        };
        let g = build(&cs, [4, 5]);
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        assert!(absorbed(&plan), "{cs:?}: {:?}", plan.report());
        assert_same(&plan, &g, &cs, [3, 3, 4, 5], 30);
    }
}

#[test]
fn flatten_stays_a_step_when_it_cannot_be_absorbed() {
    let cases = [
        // The Flatten's output is also a graph output.
        Case {
            flatten_is_output: true,
            ..Default::default()
        },
        // Flatten(axis = 2): [n·c, h·w] rows, not images.
        Case {
            axis: 2,
            ..Default::default()
        },
        // Q∘DQ around the Flatten requantizes.
        Case {
            requantize: true,
            ..Default::default()
        },
    ];
    for cs in cases {
        let g = build(&cs, [4, 6]);
        let plan = compile(&g, &EngineOptions::default()).unwrap();
        assert!(!absorbed(&plan), "{cs:?}: {:?}", plan.report());
        assert!(matches!(placement(&plan, "fc"), Placement::Integer { .. }));
        assert_same(&plan, &g, &cs, [2, 3, 4, 6], 40);
    }
    // keep_float on the Flatten keeps it out of the GEMM step too.
    let cs = Case::default();
    let g = build(&cs, [4, 6]);
    let opts = EngineOptions {
        keep_float: vec!["flatten".into()],
        ..Default::default()
    };
    let plan = compile(&g, &opts).unwrap();
    assert!(matches!(
        placement(&plan, "flatten"),
        Placement::Float { .. }
    ));
    assert!(!absorbed(&plan));
    let x = codes(cs.act, &[2, 3, 4, 6], &mut Lcg(41));
    assert_eq!(
        plan.run(vec![("xq", x.clone())]).unwrap(),
        execute(&g, vec![("xq".into(), x)]).unwrap()
    );
}
