//! QOperator models (`QLinearConv`, `QLinearMatMul`, com.microsoft `QGemm`, with MaxPool and
//! layout ops on the codes between them) compiled into integer steps, against the graph
//! crate's exact integer operators on the float executor: the same criterion as the QDQ
//! pattern tests (`patterns.rs`), equal codes. Every test also checks through
//! `Plan::report()` that the QLinear node really became an integer step, so a silent fallback
//! to the float island fails.

mod common;

use common::{argmax_rows, repo, Lcg};
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_engine::{compile, EngineError, EngineOptions, Placement, RequantMode};
use quantkit_graph::{execute, AttrValue, DType, Data, Graph, Node, Tensor, ValueInfo};
use quantkit_ptq::{quantize_static, to_qoperator, PtqConfig};

const MS: &str = "com.microsoft";

fn scalar(dtype: DType, v: i32) -> Tensor {
    let data = match dtype {
        DType::U8 => Data::U8(vec![v as u8]),
        DType::I8 => Data::I8(vec![v as i8]),
        _ => Data::I32(vec![v]),
    };
    Tensor::new(vec![], data).unwrap()
}

fn range(t: DType) -> (i32, i32) {
    if t == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

/// Random codes of `dtype` in `lo..=hi` (clipped to the type's range).
fn codes(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Tensor {
    let n = shape.iter().product();
    let data = match dtype {
        DType::U8 => Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
        _ => Data::I8((0..n).map(|_| rng.int(-128, 127) as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// Weight values of `dtype` (i8 in `[-127, 127]`, u8 in `[0, 255]`).
fn weights(dtype: DType, shape: &[usize], rng: &mut Lcg) -> Tensor {
    let n = shape.iter().product();
    let data = match dtype {
        DType::U8 => Data::U8((0..n).map(|_| rng.int(0, 255) as u8).collect()),
        _ => Data::I8((0..n).map(|_| rng.int(-127, 127) as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// Per-tensor (`[]`) or per-channel (`[c]`) tensors.
fn f32s(v: Vec<f32>) -> Tensor {
    if v.len() == 1 {
        Tensor::from_f32(&[], v)
    } else {
        Tensor::from_f32(&[v.len()], v)
    }
}

fn zps(dtype: DType, v: Vec<i32>) -> Tensor {
    let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
    let data = match dtype {
        DType::U8 => Data::U8(v.iter().map(|&z| z as u8).collect()),
        _ => Data::I8(v.iter().map(|&z| z as i8).collect()),
    };
    Tensor::new(shape, data).unwrap()
}

fn graph() -> Graph {
    Graph {
        opset_imports: vec![(String::new(), 17), (MS.to_string(), 1)],
        ..Default::default()
    }
}

fn placement<'a>(plan: &'a quantkit_engine::Plan, node: &str) -> &'a Placement {
    &plan
        .report()
        .iter()
        .find(|r| r.node == node)
        .unwrap_or_else(|| panic!("no node {node} in the report"))
        .placement
}

fn assert_integer(plan: &quantkit_engine::Plan, node: &str, what: &str) {
    let p = placement(plan, node);
    assert!(
        matches!(p, Placement::Integer { .. }),
        "{what}: `{node}` is {p:?}"
    );
}

/// Runs the plan and the float executor on `x` and asserts equal outputs (bit for bit), and
/// that the output is not constant (the case exercises the requantization).
fn assert_same(g: &Graph, input: &str, x: &Tensor, what: &str) -> Tensor {
    let plan = compile(g, &EngineOptions::default()).unwrap();
    let got = plan.run(vec![(input, x.clone())]).unwrap().remove(0).1;
    let want = execute(g, vec![(input.to_string(), x.clone())])
        .unwrap()
        .remove(0)
        .1;
    assert_eq!(got.shape, want.shape, "{what}");
    assert_eq!(got.dtype, want.dtype, "{what}");
    let (gv, wv) = (got.to_i64_vec(), want.to_i64_vec());
    let diff = gv.iter().zip(&wv).filter(|(a, b)| a != b).count();
    assert_eq!(diff, 0, "{what}: {diff} of {} codes differ", wv.len());
    assert!(wv.iter().any(|&v| v != wv[0]), "{what}: constant output");
    got
}

#[derive(Clone, Debug)]
struct ConvCase {
    act: DType,
    out: DType,
    wtype: DType,
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
    seed: u64,
}

impl Default for ConvCase {
    fn default() -> Self {
        ConvCase {
            act: DType::U8,
            out: DType::U8,
            wtype: DType::I8,
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
            seed: 1,
        }
    }
}

/// Adds the initializers of a QLinearConv to `g`; returns the node.
fn qlinear_conv(g: &mut Graph, cs: &ConvCase, rng: &mut Lcg, x: &str, y: &str, p: &str) -> Node {
    let (xlo, xhi) = range(cs.act);
    let (ylo, yhi) = range(cs.out);
    let (wlo, whi) = range(cs.wtype);
    let x_zp = rng.int(xlo, xhi);
    let y_zp = rng.int(ylo, yhi);
    let x_s = 0.02f32;
    let cin_g = cs.c / cs.group;
    let nch = if cs.per_channel { cs.m } else { 1 };
    let w_s: Vec<f32> = (0..nch).map(|_| rng.float(0.002, 0.02)).collect();
    let mid = (wlo + whi) / 2;
    let w_z: Vec<i32> = (0..nch).map(|_| mid + rng.int(-4, 4)).collect();
    let b: Vec<i32> = (0..cs.m).map(|_| rng.int(-3000, 3000)).collect();
    // Small enough that some results saturate at both ends.
    let y_s = 0.03f32 * (cin_g * cs.k[0] * cs.k[1]) as f32 / 9.0;
    let name = |s: &str| format!("{p}{s}");
    let gi = &mut g.initializers;
    gi.insert(name("xs"), Tensor::scalar_f32(x_s));
    gi.insert(name("xz"), scalar(cs.act, x_zp));
    gi.insert(
        name("w"),
        weights(cs.wtype, &[cs.m, cin_g, cs.k[0], cs.k[1]], rng),
    );
    gi.insert(name("ws"), f32s(w_s));
    gi.insert(name("wz"), zps(cs.wtype, w_z));
    gi.insert(name("ys"), Tensor::scalar_f32(y_s));
    gi.insert(name("yz"), scalar(cs.out, y_zp));
    gi.insert(name("b"), Tensor::new(vec![cs.m], Data::I32(b)).unwrap());
    let mut ins: Vec<String> = vec![x.to_string()];
    ins.extend(["xs", "xz", "w", "ws", "wz", "ys", "yz"].map(name));
    if cs.bias {
        ins.push(name("b"));
    }
    let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
    let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
    Node::new(&name("conv"), "QLinearConv", &ins, &[y])
        .with_attr("group", AttrValue::Int(cs.group as i64))
        .with_attr("strides", ints(&cs.strides))
        .with_attr("dilations", ints(&cs.dilations))
        .with_attr("pads", ints(&cs.pads))
        .with_attr("kernel_shape", ints(&cs.k))
}

fn check_conv(cs: &ConvCase) {
    let mut rng = Lcg(cs.seed);
    let mut g = graph();
    let xshape = [cs.n, cs.c, cs.hw[0], cs.hw[1]];
    g.inputs = vec![ValueInfo::new("xq", cs.act, &xshape)];
    g.outputs = vec![ValueInfo::new("yq", cs.out, &[])];
    let node = qlinear_conv(&mut g, cs, &mut rng, "xq", "yq", "");
    g.nodes = vec![node];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert_integer(&plan, "conv", &format!("{cs:?}"));
    let x = codes(cs.act, &xshape, &mut rng);
    assert_same(&g, "xq", &x, &format!("{cs:?}"));
}

#[test]
fn qlinear_conv_per_channel_with_bias() {
    check_conv(&ConvCase::default());
}

#[test]
fn qlinear_conv_activation_and_weight_types() {
    let mut seed = 100;
    for act in [DType::U8, DType::I8] {
        for out in [DType::U8, DType::I8] {
            for wtype in [DType::I8, DType::U8] {
                seed += 1;
                check_conv(&ConvCase {
                    act,
                    out,
                    wtype,
                    seed,
                    ..Default::default()
                });
            }
        }
    }
}

#[test]
fn qlinear_conv_per_tensor_without_bias() {
    check_conv(&ConvCase {
        per_channel: false,
        bias: false,
        seed: 3,
        ..Default::default()
    });
}

#[test]
fn qlinear_conv_strided_padded_dilated() {
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
        pads: [2, 2, 2, 2],
        act: DType::I8,
        per_channel: false,
        seed: 6,
        ..Default::default()
    });
}

#[test]
fn qlinear_conv_depthwise_and_grouped() {
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
        bias: false,
        seed: 9,
        ..Default::default()
    });
    check_conv(&ConvCase {
        k: [1, 1],
        c: 17,
        m: 9,
        seed: 10,
        ..Default::default()
    });
}

/// `QLinearMatMul(a, b constant [K, N])` with A of rank 1, 2 and 3.
#[test]
fn qlinear_matmul_matches_the_executor() {
    let mut seed = 200;
    for act in [DType::U8, DType::I8] {
        for out in [DType::U8, DType::I8] {
            for (wtype, per_column) in [(DType::I8, false), (DType::I8, true), (DType::U8, true)] {
                for a_shape in [vec![5, 37], vec![2, 3, 37], vec![37]] {
                    seed += 1;
                    let what = format!(
                        "QLinearMatMul {act}→{out} b {wtype} per-column {per_column} a {a_shape:?}"
                    );
                    let mut rng = Lcg(seed);
                    let (k, n) = (37, 11);
                    let (xlo, xhi) = range(act);
                    let (ylo, yhi) = range(out);
                    let (wlo, whi) = range(wtype);
                    let nch = if per_column { n } else { 1 };
                    let mut g = graph();
                    g.inputs = vec![ValueInfo::new("a", act, &a_shape)];
                    g.outputs = vec![ValueInfo::new("y", out, &[])];
                    let gi = &mut g.initializers;
                    gi.insert("as".into(), Tensor::scalar_f32(0.02));
                    gi.insert("az".into(), scalar(act, rng.int(xlo, xhi)));
                    gi.insert("b".into(), weights(wtype, &[k, n], &mut rng));
                    gi.insert(
                        "bs".into(),
                        f32s((0..nch).map(|_| rng.float(0.002, 0.02)).collect()),
                    );
                    let mid = (wlo + whi) / 2;
                    gi.insert(
                        "bz".into(),
                        zps(wtype, (0..nch).map(|_| mid + rng.int(-3, 3)).collect()),
                    );
                    gi.insert("ys".into(), Tensor::scalar_f32(0.06));
                    gi.insert("yz".into(), scalar(out, rng.int(ylo, yhi)));
                    g.nodes = vec![Node::new(
                        "mm",
                        "QLinearMatMul",
                        &["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                        &["y"],
                    )];
                    let plan = compile(&g, &EngineOptions::default()).unwrap();
                    assert_integer(&plan, "mm", &what);
                    let x = codes(act, &a_shape, &mut rng);
                    let got = assert_same(&g, "a", &x, &what);
                    let mut want_shape = a_shape.clone();
                    *want_shape.last_mut().unwrap() = n;
                    assert_eq!(got.shape, want_shape, "{what}");
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
struct GemmCase {
    act: DType,
    out: DType,
    wtype: DType,
    trans_b: bool,
    per_column: bool,
    /// Shape of C (`None`: no C).
    c: Option<Vec<usize>>,
    alpha: Option<f32>,
    seed: u64,
}

/// Builds `QGemm` on `[M, K]` codes; returns the graph.
fn qgemm_graph(cs: &GemmCase, rng: &mut Lcg) -> Graph {
    let (m, k, n) = (5, 37, 11);
    let (xlo, xhi) = range(cs.act);
    let (ylo, yhi) = range(cs.out);
    let (wlo, whi) = range(cs.wtype);
    let nch = if cs.per_column { n } else { 1 };
    let mut g = graph();
    g.inputs = vec![ValueInfo::new("a", cs.act, &[m, k])];
    g.outputs = vec![ValueInfo::new("y", cs.out, &[])];
    let gi = &mut g.initializers;
    gi.insert("as".into(), Tensor::scalar_f32(0.02));
    gi.insert("az".into(), scalar(cs.act, rng.int(xlo, xhi)));
    let bshape = if cs.trans_b { [n, k] } else { [k, n] };
    gi.insert("b".into(), weights(cs.wtype, &bshape, rng));
    gi.insert(
        "bs".into(),
        f32s((0..nch).map(|_| rng.float(0.002, 0.02)).collect()),
    );
    let mid = (wlo + whi) / 2;
    gi.insert(
        "bz".into(),
        zps(cs.wtype, (0..nch).map(|_| mid + rng.int(-3, 3)).collect()),
    );
    gi.insert("ys".into(), Tensor::scalar_f32(0.06));
    gi.insert("yz".into(), scalar(cs.out, rng.int(ylo, yhi)));
    let c_name = match &cs.c {
        None => "",
        Some(shape) => {
            let len: usize = shape.iter().product();
            let cv: Vec<i32> = (0..len).map(|_| rng.int(-3000, 3000)).collect();
            gi.insert(
                "c".into(),
                Tensor::new(shape.clone(), Data::I32(cv)).unwrap(),
            );
            "c"
        }
    };
    let mut node = Node::new(
        "gemm",
        "QGemm",
        &["a", "as", "az", "b", "bs", "bz", c_name, "ys", "yz"],
        &["y"],
    )
    .with_attr("transB", AttrValue::Int(i64::from(cs.trans_b)));
    node.domain = MS.into();
    if let Some(alpha) = cs.alpha {
        node = node.with_attr("alpha", AttrValue::Float(alpha));
    }
    g.nodes = vec![node];
    g
}

fn check_qgemm(cs: &GemmCase) {
    let mut rng = Lcg(cs.seed);
    let g = qgemm_graph(cs, &mut rng);
    let what = format!("{cs:?}");
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert_integer(&plan, "gemm", &what);
    let x = codes(cs.act, &[5, 37], &mut rng);
    let got = assert_same(&g, "a", &x, &what);
    assert_eq!(got.shape, [5, 11]);
}

#[test]
fn qgemm_with_and_without_c_both_transb() {
    let mut seed = 300;
    for act in [DType::U8, DType::I8] {
        for out in [DType::U8, DType::I8] {
            for trans_b in [false, true] {
                for c in [None, Some(vec![11]), Some(vec![1, 11]), Some(vec![])] {
                    seed += 1;
                    check_qgemm(&GemmCase {
                        act,
                        out,
                        wtype: DType::I8,
                        trans_b,
                        per_column: seed % 2 == 0,
                        c,
                        alpha: None,
                        seed,
                    });
                }
            }
        }
    }
}

#[test]
fn qgemm_u8_weights_and_alpha() {
    for (i, alpha) in [Some(1.0), Some(0.5), Some(0.37)].into_iter().enumerate() {
        for trans_b in [false, true] {
            check_qgemm(&GemmCase {
                act: DType::U8,
                out: DType::I8,
                wtype: DType::U8,
                trans_b,
                per_column: true,
                c: Some(vec![11]),
                alpha,
                seed: 400 + i as u64 * 2 + u64::from(trans_b),
            });
        }
    }
}

/// A small QOperator network as the quantizer writes it: `Q → QLinearConv → MaxPool →
/// QLinearConv (depthwise) → Flatten → QGemm → QLinearMatMul → DQ`. The MaxPool and Flatten
/// read the conv steps' NHWC codes directly and run on them.
#[test]
fn qoperator_chain_with_maxpool_and_flatten_on_codes() {
    let mut rng = Lcg(500);
    let mut g = graph();
    g.inputs = vec![ValueInfo::new("x", DType::F32, &[2, 3, 10, 10])];
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
    let c1 = ConvCase {
        c: 3,
        m: 4,
        pads: [1, 1, 1, 1],
        ..Default::default()
    };
    let n1 = qlinear_conv(&mut g, &c1, &mut rng, "xq", "c1", "a_");
    // The second conv's input parameters are the first's output parameters.
    let c2 = ConvCase {
        c: 4,
        m: 4,
        group: 4,
        pads: [1, 1, 1, 1],
        per_channel: false,
        ..Default::default()
    };
    let n2 = qlinear_conv(&mut g, &c2, &mut rng, "p1", "c2", "b_");
    let gi = &mut g.initializers;
    for s in ["xs", "xz"] {
        let t = gi[&format!("a_{}", s.replace('x', "y"))].clone();
        gi.insert(format!("b_{s}"), t);
    }
    gi.insert("in_s".into(), Tensor::scalar_f32(0.02));
    gi.insert("in_z".into(), scalar(DType::U8, 128));
    // QGemm [2, 4·5·5 = 100] × [100, 8] (transB) → QLinearMatMul [8, 3].
    let (k, n) = (100, 8);
    gi.insert("g_b".into(), weights(DType::I8, &[n, k], &mut rng));
    gi.insert("g_bs".into(), Tensor::scalar_f32(0.01));
    gi.insert("g_bz".into(), scalar(DType::I8, 0));
    gi.insert(
        "g_c".into(),
        Tensor::new(
            vec![n],
            Data::I32((0..n).map(|_| rng.int(-500, 500)).collect()),
        )
        .unwrap(),
    );
    gi.insert("g_ys".into(), Tensor::scalar_f32(0.1));
    gi.insert("g_yz".into(), scalar(DType::U8, 100));
    gi.insert("m_b".into(), weights(DType::I8, &[n, 3], &mut rng));
    gi.insert(
        "m_bs".into(),
        Tensor::from_f32(&[3], vec![0.01, 0.02, 0.015]),
    );
    gi.insert(
        "m_bz".into(),
        Tensor::new(vec![3], Data::I8(vec![0, 1, -1])).unwrap(),
    );
    gi.insert("m_ys".into(), Tensor::scalar_f32(0.3));
    gi.insert("m_yz".into(), scalar(DType::U8, 128));
    let b2s = gi["b_ys"].clone();
    let b2z = gi["b_yz"].clone();
    gi.insert("g_as".into(), b2s);
    gi.insert("g_az".into(), b2z);
    let mut qgemm = Node::new(
        "qgemm",
        "QGemm",
        &[
            "flat", "g_as", "g_az", "g_b", "g_bs", "g_bz", "g_c", "g_ys", "g_yz",
        ],
        &["gq"],
    )
    .with_attr("transB", AttrValue::Int(1));
    qgemm.domain = MS.into();
    g.nodes = vec![
        Node::new("q", "QuantizeLinear", &["x", "in_s", "in_z"], &["xq"]),
        n1,
        Node::new("pool", "MaxPool", &["c1"], &["p1"])
            .with_attr("kernel_shape", AttrValue::Ints(vec![2, 2]))
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
        n2,
        Node::new("flatten", "Flatten", &["c2"], &["flat"]),
        qgemm,
        Node::new(
            "qmm",
            "QLinearMatMul",
            &["gq", "g_ys", "g_yz", "m_b", "m_bs", "m_bz", "m_ys", "m_yz"],
            &["mq"],
        ),
        Node::new("dq", "DequantizeLinear", &["mq", "m_ys", "m_yz"], &["y"]),
    ];
    // The first conv reads the input QuantizeLinear's parameters.
    let gi = &mut g.initializers;
    let (s, z) = (gi["in_s"].clone(), gi["in_z"].clone());
    gi.insert("a_xs".into(), s);
    gi.insert("a_xz".into(), z);
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    for node in ["a_conv", "b_conv", "qgemm", "qmm"] {
        assert_integer(&plan, node, "chain");
    }
    // The pool reads only the first conv's codes: the conv call pools them itself.
    assert_eq!(
        *placement(&plan, "pool"),
        Placement::Fused {
            into: "a_conv".into()
        }
    );
    // QGemm reads the depthwise conv's NHWC codes in place (weights permuted to NHWC order).
    assert_eq!(
        *placement(&plan, "flatten"),
        Placement::Fused {
            into: "qgemm".into()
        }
    );
    assert_eq!(*placement(&plan, "q"), Placement::Convert);
    assert_eq!(*placement(&plan, "dq"), Placement::Convert);
    let x = Tensor::from_f32(
        &[2, 3, 10, 10],
        (0..600).map(|_| rng.float(-2.5, 2.5)).collect(),
    );
    let got = assert_same(&g, "x", &x, "chain");
    assert_eq!(got.shape, [2, 3]);
}

/// Preconditions that fail leave the node to the graph crate's operator (a float island)
/// with the reason in the report, and the plan still computes what the executor computes.
#[test]
fn unmatched_qoperator_nodes_fall_back_with_a_reason() {
    let base = GemmCase {
        act: DType::U8,
        out: DType::U8,
        wtype: DType::I8,
        trans_b: false,
        per_column: false,
        c: Some(vec![11]),
        alpha: None,
        seed: 600,
    };
    type Edit = fn(&mut Graph);
    let edits: [(&str, Edit, &str); 6] = [
        (
            "transA",
            |g| {
                // A [K, M] read transposed: same values, other layout.
                g.inputs[0] = ValueInfo::new("a", DType::U8, &[37, 5]);
                g.nodes[0] = g.nodes[0].clone().with_attr("transA", AttrValue::Int(1));
            },
            "transA",
        ),
        (
            "C per row",
            |g| {
                let c = Tensor::new(vec![5, 11], Data::I32((0..55).collect())).unwrap();
                g.initializers.insert("c".into(), c);
            },
            "per column",
        ),
        (
            "weight not constant",
            |g| {
                let b = g.initializers.remove("b").unwrap();
                g.inputs.push(ValueInfo::new("b", DType::I8, &b.shape));
            },
            "not a constant",
        ),
        (
            "f16 scale",
            |g| {
                let s = Tensor::scalar_f32(0.02).cast(DType::F16);
                g.initializers.insert("as".into(), s);
            },
            "scale",
        ),
        (
            "negative alpha",
            |g| {
                g.nodes[0] = g.nodes[0]
                    .clone()
                    .with_attr("alpha", AttrValue::Float(-0.5));
            },
            "alpha",
        ),
        ("kept in float", |_| {}, "keep_float"),
    ];
    for (what, edit, reason_has) in edits {
        let mut rng = Lcg(base.seed);
        let mut g = qgemm_graph(&base, &mut rng);
        edit(&mut g);
        let opts = EngineOptions {
            keep_float: if what == "kept in float" {
                vec!["gemm".into()]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let plan = compile(&g, &opts).unwrap();
        match placement(&plan, "gemm") {
            Placement::Float { reason } => {
                assert!(reason.contains(reason_has), "{what}: {reason}")
            }
            p => panic!("{what}: {p:?}"),
        }
        let a_shape: &[usize] = if what == "transA" { &[37, 5] } else { &[5, 37] };
        let mut inputs = vec![("a".to_string(), codes(DType::U8, a_shape, &mut rng))];
        if g.inputs.len() > 1 {
            inputs.push(("b".into(), weights(DType::I8, &[37, 11], &mut rng)));
        }
        let got = plan.run(inputs.clone()).unwrap();
        let want = execute(&g, inputs).unwrap();
        assert_eq!(got, want, "{what}");
    }

    // QGemm without y_scale has a float output: the graph operator computes it.
    let mut rng = Lcg(601);
    let mut g = qgemm_graph(&base, &mut rng);
    g.nodes[0].inputs.truncate(7);
    g.outputs = vec![ValueInfo::new("y", DType::F32, &[])];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    match placement(&plan, "gemm") {
        Placement::Float { reason } => assert!(reason.contains("y_scale"), "{reason}"),
        p => panic!("{p:?}"),
    }
    let x = codes(DType::U8, &[5, 37], &mut rng);
    let got = plan.run(vec![("a", x.clone())]).unwrap();
    let want = execute(&g, vec![("a".into(), x)]).unwrap();
    assert_eq!(got, want);

    // A 1-D QLinearConv stays with the graph operator.
    let mut rng = Lcg(602);
    let mut g = graph();
    g.inputs = vec![ValueInfo::new("xq", DType::U8, &[1, 3, 9])];
    g.outputs = vec![ValueInfo::new("yq", DType::U8, &[])];
    let cs = ConvCase::default();
    let mut node = qlinear_conv(&mut g, &cs, &mut rng, "xq", "yq", "");
    node.attributes.clear();
    let w = weights(DType::I8, &[4, 3, 3], &mut rng);
    g.initializers.insert("w".into(), w);
    g.nodes = vec![node];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    match placement(&plan, "conv") {
        Placement::Float { reason } => assert!(reason.contains("3-D weight"), "{reason}"),
        p => panic!("{p:?}"),
    }
    let x = codes(DType::U8, &[1, 3, 9], &mut rng);
    let got = plan.run(vec![("xq", x.clone())]).unwrap();
    let want = execute(&g, vec![("xq".into(), x)]).unwrap();
    assert_eq!(got, want);
}

/// Wrong operands at run time are typed errors naming the node, never panics.
#[test]
fn bad_operands_of_qoperator_steps_are_typed_errors() {
    let mut rng = Lcg(700);
    let mut g = graph();
    g.inputs = vec![ValueInfo {
        name: "xq".into(),
        dtype: None,
        onnx_elem_type: DType::U8.onnx_code(),
        shape: None,
    }];
    g.outputs = vec![ValueInfo::new("yq", DType::U8, &[])];
    let node = qlinear_conv(&mut g, &ConvCase::default(), &mut rng, "xq", "yq", "");
    g.nodes = vec![node];
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert_integer(&plan, "conv", "bad operands");
    let cases = [
        Tensor::new(vec![1, 3, 4], Data::U8(vec![1; 12])).unwrap(),
        Tensor::new(vec![1, 3, 4, 4], Data::I8(vec![1; 48])).unwrap(),
        Tensor::new(vec![1, 2, 4, 4], Data::U8(vec![1; 32])).unwrap(),
        Tensor::new(vec![1, 3, 2, 2], Data::U8(vec![1; 12])).unwrap(),
    ];
    for x in cases {
        match plan.run(vec![("xq", x.clone())]) {
            Err(EngineError::BadOperand { node, .. }) | Err(EngineError::Kernel { node, .. }) => {
                assert_eq!(node, "conv", "{:?}", x.shape)
            }
            r => panic!("{:?}: {r:?}", x.shape),
        }
    }

    let mut rng = Lcg(701);
    let mut g = qgemm_graph(
        &GemmCase {
            act: DType::U8,
            out: DType::U8,
            wtype: DType::I8,
            trans_b: true,
            per_column: true,
            c: None,
            alpha: None,
            seed: 701,
        },
        &mut rng,
    );
    g.inputs[0] = ValueInfo {
        name: "a".into(),
        dtype: None,
        onnx_elem_type: DType::U8.onnx_code(),
        shape: None,
    };
    let plan = compile(&g, &EngineOptions::default()).unwrap();
    assert_integer(&plan, "gemm", "bad operands");
    for x in [
        Tensor::new(vec![5, 36], Data::U8(vec![1; 180])).unwrap(),
        Tensor::new(vec![1, 5, 37], Data::U8(vec![1; 185])).unwrap(),
        Tensor::new(vec![5, 37], Data::I8(vec![1; 185])).unwrap(),
        Tensor::from_f32(&[5, 37], vec![0.0; 185]),
    ] {
        match plan.run(vec![("a", x.clone())]) {
            Err(EngineError::BadOperand { node, .. }) => assert_eq!(node, "gemm"),
            r => panic!("{:?}: {r:?}", x.shape),
        }
    }
}

/// LeNet quantized in QOperator form (`quantize --format qoperator`): every QLinearConv and
/// QGemm is an integer step, MaxPool and Flatten run on the codes, and the top-1 class agrees
/// with the float executor's exact integer operators on the first 256 sample images.
#[test]
fn lenet_qoperator_engine_agrees_with_the_executor() {
    let g = quantkit_graph::load_model(repo().join("models/lenet.onnx")).unwrap();
    let mut data = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    let config = PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    };
    let (qdq, _) = quantize_static(g, &mut data, &config, &mut |_, _| {}).unwrap();
    let (q, _) = to_qoperator(qdq).unwrap();
    let plan = compile(&q, &EngineOptions::default()).unwrap();
    let mut seen = 0;
    for r in plan.report() {
        if r.op_type == "Flatten" {
            // fc1 reads pool2's NHWC codes in place.
            assert_eq!(r.placement, Placement::Fused { into: "fc1".into() });
            seen += 1;
        } else if matches!(
            r.op_type.as_str(),
            "QLinearConv" | "QLinearMatMul" | "QGemm" | "MaxPool"
        ) {
            // Each max pool runs inside the conv before it.
            let ok = match &r.placement {
                Placement::Fused { into } => r.op_type == "MaxPool" && into.starts_with("conv"),
                p => matches!(p, Placement::Integer { .. }),
            };
            assert!(ok, "{} ({}) is {:?}", r.node, r.op_type, r.placement);
            seen += 1;
        }
    }
    assert_eq!(seen, 7, "2 QLinearConv, 2 MaxPool, Flatten, 2 QGemm");

    let mut data = open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap();
    let input = q.inputs[0].name.clone();
    let fixed = compile(
        &q,
        &EngineOptions {
            requant: RequantMode::FixedPoint,
            ..Default::default()
        },
    )
    .unwrap();
    let (mut same, mut same_fixed, mut equal_logits, mut total) = (0, 0, 0, 0);
    for b in data
        .batches(&BatchOptions {
            batch_size: 128,
            limit: Some(256),
            ..Default::default()
        })
        .unwrap()
    {
        let b = b.unwrap();
        let x = Tensor::from_f32(&b.shape, b.data);
        let want = execute(&q, vec![(input.clone(), x.clone())])
            .unwrap()
            .remove(0)
            .1;
        let got_fixed = fixed
            .run(vec![(input.as_str(), x.clone())])
            .unwrap()
            .remove(0)
            .1;
        let got = plan.run(vec![(input.as_str(), x)]).unwrap().remove(0).1;
        assert_eq!(got.shape, want.shape);
        let classes = *got.shape.last().unwrap();
        let (a, w) = (argmax_rows(&got), argmax_rows(&want));
        same += a.iter().zip(&w).filter(|(x, y)| x == y).count();
        let af = argmax_rows(&got_fixed);
        same_fixed += af.iter().zip(&w).filter(|(x, y)| x == y).count();
        let (gv, wv) = (got.to_f32_vec(), want.to_f32_vec());
        equal_logits += gv
            .chunks(classes)
            .zip(wv.chunks(classes))
            .filter(|(x, y)| x == y)
            .count();
        total += a.len();
    }
    assert_eq!(total, 256);
    let top1 = same as f64 / total as f64;
    let top1_fixed = same_fixed as f64 / total as f64;
    println!(
        "lenet QOperator: engine vs executor top-1 agreement {top1:.4} ({same}/{total}), identical logits on {equal_logits}/{total} images; fixed-point requantization {top1_fixed:.4}"
    );
    assert!(top1 >= 0.995, "top-1 agreement {top1}");
    // Fixed-point requantization rounds differently from the reference by design (double
    // rounding of `M0·2^-n`), so it is only held to "almost always the same class" (measured
    // 255/256: a two-image margin).
    assert!(
        top1_fixed >= 0.99,
        "fixed-point top-1 agreement {top1_fixed}"
    );
}
