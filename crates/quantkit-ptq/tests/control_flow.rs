//! Quantization inside control flow (issue 16 "Subgraphs", issue 20): a model whose
//! convolutions sit inside the branches of an `If` (condition computed from the input)
//! quantizes statically (QDQ) and dynamically, runs in quantkit, on the integer engine and
//! in ONNX Runtime, and agrees with float; top-level constants used only inside a branch
//! survive (ONNX Runtime refused the `--dynamic` output when they were dropped).

mod common;

use common::*;
use quantkit_data::BatchOptions;
use quantkit_graph::{AttrValue, Graph, Node, OpKind, Tensor, ValueInfo};
use quantkit_ptq::{quantize_dynamic, quantize_static, Format, PtqConfig, PtqError};

/// One branch: `Conv(x, w_a, b_a) → Relu → Conv(·, w_b) → Mul(·, gain)`, output `out`
/// `[N, 4, 24, 24]`. Its weights are top-level initializers it reads from the outer scope.
fn branch(p: &str, out: &str) -> Graph {
    Graph {
        name: format!("{p}_branch"),
        nodes: vec![
            Node::of(
                OpKind::Conv,
                &format!("{p}_conv_a"),
                &["x", &format!("{p}_wa"), &format!("{p}_ba")],
                &[&format!("{p}_ca")],
            ),
            Node::of(
                OpKind::Relu,
                &format!("{p}_relu"),
                &[&format!("{p}_ca")],
                &[&format!("{p}_ra")],
            ),
            Node::of(
                OpKind::Conv,
                &format!("{p}_conv_b"),
                &[&format!("{p}_ra"), &format!("{p}_wb")],
                &[&format!("{p}_cb")],
            ),
            Node::of(
                OpKind::Mul,
                &format!("{p}_gain"),
                &[&format!("{p}_cb"), "gain"],
                &[out],
            ),
        ],
        outputs: vec![ValueInfo::new(out, quantkit_graph::DType::F32, &[])]
            .into_iter()
            .map(|mut v| {
                v.shape = None;
                v
            })
            .collect(),
        ..Graph::default()
    }
}

/// `cond = ReduceMean(x) > thr`; `y = If(cond) { then } else { other }`; logits =
/// `Gemm(Flatten(y · gain), wf, bf)`. `gain` is read both at top level and in the branches.
fn if_conv_model(thr: f32) -> Graph {
    let mut g = graph_28x28("if_conv");
    g.outputs
        .push(ValueInfo::new("logits", quantkit_graph::DType::F32, &[]));
    g.outputs[0].shape = None;
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    for (k, p) in ["t", "e"].iter().enumerate() {
        let s = 10 * k as u64;
        init(&format!("{p}_wa"), &[6, 1, 3, 3], rand_vec(54, 0.6, s + 1));
        init(&format!("{p}_ba"), &[6], rand_vec(6, 0.1, s + 2));
        init(&format!("{p}_wb"), &[4, 6, 3, 3], rand_vec(216, 0.3, s + 3));
    }
    init("gain", &[], vec![1.5]);
    init("thr", &[], vec![thr]);
    init("wf", &[4 * 24 * 24, 10], rand_vec(2304 * 10, 0.05, 30));
    init("bf", &[10], rand_vec(10, 0.1, 31));
    g.nodes = vec![
        Node::of(OpKind::ReduceMean, "mean", &["x"], &["m"])
            .with_attr("keepdims", AttrValue::Int(0)),
        Node::of(OpKind::Greater, "gt", &["m", "thr"], &["cond"]),
        Node::of(OpKind::If, "if", &["cond"], &["y"])
            .with_attr("then_branch", AttrValue::Graph(Box::new(branch("t", "yt"))))
            .with_attr("else_branch", AttrValue::Graph(Box::new(branch("e", "ye")))),
        Node::of(OpKind::Mul, "scale", &["y", "gain"], &["ys"]),
        Node::of(OpKind::Flatten, "flat", &["ys"], &["f"]),
        Node::of(OpKind::Gemm, "fc", &["f", "wf", "bf"], &["logits"]),
    ];
    g
}

const BATCH: usize = 32;
const SAMPLES: usize = 256;

/// The calibration batches' means; the threshold is their median, so half the batches take
/// each branch (both branches are calibrated, both are exercised below).
fn batches() -> Vec<Tensor> {
    let mut d = sample_data();
    d.batches(&BatchOptions {
        batch_size: BATCH,
        limit: Some(SAMPLES),
        ..Default::default()
    })
    .unwrap()
    .map(|b| {
        let b = b.unwrap();
        Tensor::from_f32(&b.shape, b.data)
    })
    .collect()
}

fn median_mean(bs: &[Tensor]) -> f32 {
    let mut m: Vec<f32> = bs
        .iter()
        .map(|b| b.to_f32_vec().iter().sum::<f32>() / b.len() as f32)
        .collect();
    m.sort_by(f32::total_cmp);
    (m[m.len() / 2 - 1] + m[m.len() / 2]) / 2.0
}

/// The float model as a file, loaded back the way a user's model is (import pipeline).
fn float_model(dir: &std::path::Path, thr: f32) -> Graph {
    let path = dir.join("if_conv.onnx");
    quantkit_graph::save_model(&if_conv_model(thr), &path).unwrap();
    quantkit_graph::load_model(&path).unwrap()
}

fn run_all(g: &Graph, bs: &[Tensor]) -> Vec<f32> {
    bs.iter()
        .flat_map(|b| run(g, "x", b).to_f32_vec())
        .collect()
}

/// Agreement with float over both branches: logits cosine ≥ 0.995 and top-1 agreement
/// ≥ 90 %. With int8 per-channel weights and u8 activations calibrated by min/max on the
/// same batches, the two 3×3 convolutions of a branch and the 2304-input Gemm lose about
/// 30–40 dB of SQNR (cosine > 0.999 in practice); 0.995 leaves margin for the random
/// weights while failing on a wrong scale, a missing branch or an unquantized weight read
/// as codes.
fn assert_agrees(what: &str, float: &[f32], q: &[f32]) {
    let c = cosine(float, q);
    let a = agreement(&argmax_rows(float, 10), &argmax_rows(q, 10));
    assert!(c >= 0.995, "{what}: cosine {c}");
    assert!(a >= 0.9, "{what}: top-1 agreement {a}");
}

fn inner_nodes(g: &Graph, kind: OpKind) -> usize {
    g.nodes
        .iter()
        .flat_map(|n| n.subgraphs())
        .map(|s| s.nodes.iter().filter(|n| n.is(kind)).count() + inner_nodes(s, kind))
        .sum()
}

#[test]
fn convolutions_inside_if_branches_quantize_static_and_agree_everywhere() {
    let dir = scratch("control-static");
    let bs = batches();
    let thr = median_mean(&bs);
    let float = float_model(&dir, thr);
    // Both branches run on these batches.
    let conds: Vec<bool> = bs
        .iter()
        .map(|b| b.to_f32_vec().iter().sum::<f32>() / (b.len() as f32) > thr)
        .collect();
    assert!(conds.contains(&true) && conds.contains(&false));
    let mut data = sample_data();
    let (q, summary) = quantize_static(
        float.clone(),
        &mut data,
        &PtqConfig {
            calib_samples: Some(SAMPLES),
            batch_size: BATCH,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let names: Vec<&str> = summary.quantized.iter().map(|(n, _)| n.as_str()).collect();
    for n in ["t_conv_a", "t_conv_b", "e_conv_a", "e_conv_b", "fc"] {
        assert!(names.contains(&n), "{n} not quantized: {names:?}");
    }
    // Every branch conv reads a quantized weight through a DequantizeLinear.
    assert!(inner_nodes(&q, OpKind::QuantizeLinear) > 0);
    for s in q.nodes.iter().flat_map(|n| n.subgraphs()) {
        for c in s.nodes.iter().filter(|n| n.is(OpKind::Conv)) {
            assert!(
                s.nodes
                    .iter()
                    .any(|d| d.is(OpKind::DequantizeLinear) && d.outputs[0] == c.inputs[1]),
                "{}: weight {} not dequantized",
                c.name,
                c.inputs[1]
            );
        }
    }
    let path = dir.join("if_conv.qdq.onnx");
    quantkit_graph::save_model(&q, &path).unwrap();
    let q2 = quantkit_graph::load_model(&path).unwrap();
    let f = run_all(&float, &bs);
    let ours = run_all(&q2, &bs);
    assert_agrees("quantkit QDQ", &f, &ours);
    // The integer engine runs the If as a float island (which simulates the branches' Q/DQ
    // exactly) and the top-level Gemm as an integer kernel, whose requantization may round
    // an output one step of the logits' scale away from the float executor's simulation of
    // the same QDQ graph: at most one step apart, and as close to float.
    let plan = quantkit_engine::compile(&q2, &quantkit_engine::EngineOptions::default()).unwrap();
    let island = plan.report().iter().find(|n| n.node == "if").unwrap();
    assert!(
        matches!(island.placement, quantkit_engine::Placement::Float { .. }),
        "{:?}",
        island.placement
    );
    let eng: Vec<f32> = bs
        .iter()
        .flat_map(|b| plan.run(vec![("x", b.clone())]).unwrap()[0].1.to_f32_vec())
        .collect();
    let step = q2.initializers["logits_scale"].to_f32_vec()[0];
    let d = max_abs_diff(&eng, &ours);
    assert!(
        d <= step * 1.001,
        "engine vs executor {d} (logits step {step})"
    );
    assert_agrees("integer engine", &f, &eng);
    if have_ort() {
        for b in &bs {
            // As written (no fusion), ORT computes what quantkit computes, up to the float
            // Gemm's summation order over 2304 inputs, which can move a value across a
            // rounding boundary of the final QuantizeLinear: at most one logits step.
            let exact = run_ort_with(&path, "x", b, false);
            let mine = run(&q2, "x", b).to_f32_vec();
            let d = max_abs_diff(&exact, &mine);
            assert!(
                d <= step * 1.001,
                "ORT unoptimized {d} (logits step {step})"
            );
        }
        let ort: Vec<f32> = bs.iter().flat_map(|b| run_ort(&path, "x", b)).collect();
        assert_agrees("ONNX Runtime QDQ", &f, &ort);
    }
    // QOperator has no rewrite for nodes inside subgraphs: a clear error, not a bad model.
    let err = quantize_static(
        float,
        &mut sample_data(),
        &PtqConfig {
            format: Format::QOperator,
            calib_samples: Some(64),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(
        matches!(err, PtqError::InvalidOption(ref m) if m.contains("--format qdq")),
        "{err}"
    );
}

#[test]
fn convolutions_inside_if_branches_quantize_dynamic_and_run_in_onnx_runtime() {
    let dir = scratch("control-dynamic");
    let bs = batches();
    let thr = median_mean(&bs);
    let float = float_model(&dir, thr);
    let (q, summary) = quantize_dynamic(float.clone(), &PtqConfig::default()).unwrap();
    let names: Vec<&str> = summary.quantized.iter().map(|(n, _)| n.as_str()).collect();
    for n in ["t_conv_a", "t_conv_b", "e_conv_a", "e_conv_b", "fc"] {
        assert!(names.contains(&n), "{n} not quantized: {names:?}");
    }
    assert_eq!(inner_nodes(&q, OpKind::ConvInteger), 4);
    // `gain` is read at top level and in the branches, the branch weights only inside.
    assert!(q.initializers.contains_key("gain"));
    let path = dir.join("if_conv.dynamic.onnx");
    quantkit_graph::save_model(&q, &path).unwrap();
    let q2 = quantkit_graph::load_model(&path).unwrap();
    let f = run_all(&float, &bs);
    let ours = run_all(&q2, &bs);
    assert_agrees("quantkit dynamic", &f, &ours);
    let plan = quantkit_engine::compile(&q2, &quantkit_engine::EngineOptions::default()).unwrap();
    let eng: Vec<f32> = bs
        .iter()
        .flat_map(|b| plan.run(vec![("x", b.clone())]).unwrap()[0].1.to_f32_vec())
        .collect();
    assert!(
        max_abs_diff(&eng, &ours) <= 1e-4,
        "engine vs executor {}",
        max_abs_diff(&eng, &ours)
    );
    if have_ort() {
        let ort: Vec<f32> = bs.iter().flat_map(|b| run_ort(&path, "x", b)).collect();
        assert_agrees("ONNX Runtime dynamic", &f, &ort);
    }
}

/// Regression (issue 16): a top-level `Constant` read only inside a branch was pruned as
/// unused, and `quantize --dynamic` wrote a model ONNX Runtime refused.
#[test]
fn a_top_level_constant_used_only_in_a_branch_survives_both_quantizers() {
    let dir = scratch("control-constant");
    let bs = batches();
    let mut g = if_conv_model(median_mean(&bs));
    // `thr2` is a Constant node at top level, read only by the then-branch.
    g.nodes.insert(
        0,
        Node::of(OpKind::Constant, "thr2_const", &[], &["thr2"]).with_attr(
            "value",
            AttrValue::Tensor(Tensor::from_f32(&[], vec![0.25])),
        ),
    );
    if let Some(AttrValue::Graph(t)) = g.nodes[3].attributes.get_mut(0).map(|(_, v)| v) {
        let last = t.nodes.len() - 1;
        t.nodes[last].outputs[0] = "yt0".into();
        t.nodes
            .push(Node::of(OpKind::Add, "t_shift", &["yt0", "thr2"], &["yt"]));
    }
    let path = dir.join("if_const.onnx");
    quantkit_graph::save_model(&g, &path).unwrap();
    let float = quantkit_graph::load_model(&path).unwrap();
    assert!(
        float.initializers.contains_key("thr2"),
        "import kept the constant"
    );
    let (qd, _) = quantize_dynamic(float.clone(), &PtqConfig::default()).unwrap();
    let (qs, _) = quantize_static(
        float.clone(),
        &mut sample_data(),
        &PtqConfig {
            calib_samples: Some(64),
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    for (what, q) in [("dynamic", qd), ("static", qs)] {
        let p = dir.join(format!("if_const.{what}.onnx"));
        quantkit_graph::save_model(&q, &p).unwrap();
        let back = quantkit_graph::load_model(&p).unwrap();
        let ours = run_all(&back, &bs);
        assert_agrees(what, &run_all(&float, &bs), &ours);
        if have_ort() {
            let ort: Vec<f32> = bs.iter().flat_map(|b| run_ort(&p, "x", b)).collect();
            assert_agrees(&format!("ONNX Runtime {what}"), &ours, &ort);
        }
    }
}

/// `h = Flatten(x) · w0`; `Loop` 3 times: `h = Tanh(h · w)` (`w` a top-level initializer
/// read only by the body); `logits = h · wf`.
fn loop_matmul_model() -> Graph {
    let mut g = graph_28x28("loop_matmul");
    g.outputs
        .push(ValueInfo::new("logits", quantkit_graph::DType::F32, &[]));
    g.outputs[0].shape = None;
    let mut init = |name: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers
            .insert(name.into(), Tensor::from_f32(shape, v));
    };
    init("w0", &[784, 32], rand_vec(784 * 32, 0.1, 41));
    init("w", &[32, 32], rand_vec(32 * 32, 0.35, 42));
    init("wf", &[32, 10], rand_vec(320, 0.4, 43));
    g.initializers
        .insert("trips".into(), Tensor::from_i64(&[], vec![3]));
    let body = Graph {
        name: "body".into(),
        inputs: vec![
            ValueInfo::new("i", quantkit_graph::DType::I64, &[]),
            ValueInfo::new("c_in", quantkit_graph::DType::Bool, &[]),
            ValueInfo::new("h_in", quantkit_graph::DType::F32, &[]),
        ]
        .into_iter()
        .map(|mut v| {
            // ONNX Runtime wants the iteration number and condition declared scalar.
            if v.dtype == Some(quantkit_graph::DType::F32) {
                v.shape = None;
            }
            v
        })
        .collect(),
        nodes: vec![
            Node::of(OpKind::Identity, "body_cond", &["c_in"], &["c_out"]),
            Node::of(OpKind::MatMul, "body_mm", &["h_in", "w"], &["hm"]),
            Node::of(OpKind::Tanh, "body_tanh", &["hm"], &["h_out"]),
        ],
        outputs: vec![
            ValueInfo::new("c_out", quantkit_graph::DType::Bool, &[]),
            ValueInfo::new("h_out", quantkit_graph::DType::F32, &[]),
        ]
        .into_iter()
        .map(|mut v| {
            // ONNX Runtime wants the iteration number and condition declared scalar.
            if v.dtype == Some(quantkit_graph::DType::F32) {
                v.shape = None;
            }
            v
        })
        .collect(),
        ..Graph::default()
    };
    g.nodes = vec![
        Node::of(OpKind::Flatten, "flat", &["x"], &["f"]),
        Node::of(OpKind::MatMul, "mm0", &["f", "w0"], &["h0"]),
        Node::of(OpKind::Loop, "loop", &["trips", "", "h0"], &["h"])
            .with_attr("body", AttrValue::Graph(Box::new(body))),
        Node::of(OpKind::MatMul, "fc", &["h", "wf"], &["logits"]),
    ];
    g
}

/// The MatMul inside a Loop body quantizes like a top-level one (static: ranges observed
/// on every iteration; dynamic), and the results agree with float in quantkit, on the
/// integer engine and in ONNX Runtime (same thresholds as the If model above).
#[test]
fn a_matmul_inside_a_loop_body_quantizes_static_and_dynamic() {
    let dir = scratch("control-loop");
    let bs = batches();
    let path = dir.join("loop.onnx");
    quantkit_graph::save_model(&loop_matmul_model(), &path).unwrap();
    let float = quantkit_graph::load_model(&path).unwrap();
    let f = run_all(&float, &bs);
    let (qs, ss) = quantize_static(
        float.clone(),
        &mut sample_data(),
        &PtqConfig {
            calib_samples: Some(SAMPLES),
            batch_size: BATCH,
            ..Default::default()
        },
        &mut |_, _| {},
    )
    .unwrap();
    let (qd, sd) = quantize_dynamic(float, &PtqConfig::default()).unwrap();
    for (what, q, s) in [("static", qs, ss), ("dynamic", qd, sd)] {
        assert!(
            s.quantized.iter().any(|(n, _)| n == "body_mm"),
            "{what}: body_mm not quantized: {:?}",
            s.quantized
        );
        let p = dir.join(format!("loop.{what}.onnx"));
        quantkit_graph::save_model(&q, &p).unwrap();
        let q2 = quantkit_graph::load_model(&p).unwrap();
        assert_agrees(&format!("quantkit {what}"), &f, &run_all(&q2, &bs));
        let plan =
            quantkit_engine::compile(&q2, &quantkit_engine::EngineOptions::default()).unwrap();
        let eng: Vec<f32> = bs
            .iter()
            .flat_map(|b| plan.run(vec![("x", b.clone())]).unwrap()[0].1.to_f32_vec())
            .collect();
        assert_agrees(&format!("integer engine {what}"), &f, &eng);
        if have_ort() {
            let ort: Vec<f32> = bs.iter().flat_map(|b| run_ort(&p, "x", b)).collect();
            assert_agrees(&format!("ONNX Runtime {what}"), &f, &ort);
        }
    }
}

/// A branch the calibration data never take (`thr` above every input mean: always the
/// else branch) is recorded as unreached: the sensitivity ranking gives its layers no
/// passes and `--target`'s search never moves them (they cannot change what the data
/// measure), while the taken branch's layers are ranked and moved as before.
#[test]
fn layers_of_a_branch_the_data_never_take_are_skipped_by_ranking_and_search() {
    use quantkit_ptq::analyze::{analyze, AnalyzeOptions, Feed, Setup};
    use quantkit_ptq::mixed::{Evaluation, Target};
    let feeds: Vec<Feed> = batches()
        .into_iter()
        .map(|b| vec![("x".to_string(), b)])
        .collect();
    let (calib, data) = feeds.split_at(4);
    let setup = Setup::new(
        if_conv_model(1e9),
        &PtqConfig::default(),
        calib,
        &mut |_, _| {},
    )
    .unwrap();
    for n in ["t_conv_a", "t_relu", "t_conv_b", "t_gain"] {
        assert!(
            setup.unreached.contains(n),
            "{n} never runs: {:?}",
            setup.unreached
        );
    }
    for n in ["e_conv_a", "e_conv_b", "fc", "if"] {
        assert!(!setup.unreached.contains(n), "{n} runs");
    }
    let report = analyze(&setup, data, &AnalyzeOptions::default(), &mut |_, _, _| {}).unwrap();
    for l in &report.layers {
        let taken = !l.name.starts_with("t_");
        assert_eq!(
            l.sensitivity.is_some(),
            taken,
            "{}: sensitivity only for layers the data run",
            l.name
        );
    }
    // An unreachable target makes the search try everything it can: never a `t_` layer.
    let eval = Evaluation::new(&setup, data, None).unwrap();
    let target: Target = "sqnr=200".parse().unwrap();
    let r = search_for(&setup, &eval, target).unwrap();
    assert!(!r.met);
    assert!(r.steps.len() > 2, "{:?}", r.steps);
    for s in &r.steps {
        assert!(
            !s.action.contains("t_conv"),
            "moved an unreached layer: {}",
            s.action
        );
    }
    assert!(
        r.config.layers.keys().all(|l| !l.starts_with("t_")),
        "{:?}",
        r.config
    );
}

/// An initializer of `g` at any depth.
fn init_anywhere(g: &Graph, name: &str) -> Option<Tensor> {
    if let Some(t) = g.initializers.get(name) {
        return Some(t.clone());
    }
    g.nodes
        .iter()
        .flat_map(|n| n.subgraphs())
        .find_map(|s| init_anywhere(s, name))
}

/// Q/DQ with u8 parameters `(scale, zero point)`, rounding half to even (as QuantizeLinear).
fn fake_u8(x: &[f32], (s, z): (f32, i32)) -> Vec<f32> {
    x.iter()
        .map(|&v| {
            let q = ((v / s).round_ties_even() as i32 + z).clamp(0, 255);
            (q - z) as f32 * s
        })
        .collect()
}

/// `quantkit analyze` on layers inside `If` branches (issue 18): the second convolution of
/// the then branch gets local and propagated SQNR, and both agree with a direct
/// computation — local: the conv by hand on the float input through its Q/DQ, with the
/// dequantized weight, its output through its Q/DQ; propagated: the quantized model's
/// dequantized value against the float one, over the batches that take the branch.
#[test]
fn local_and_propagated_sqnr_inside_an_if_branch_match_a_direct_computation() {
    use quantkit_core::ErrorMetrics;
    use quantkit_graph::{execute, execute_with};
    use quantkit_ptq::analyze::{analyze, AnalyzeOptions, Feed, Setup};
    let bs = batches();
    let thr = median_mean(&bs);
    let feeds: Vec<Feed> = bs.into_iter().map(|b| vec![("x".to_string(), b)]).collect();
    let setup = Setup::new(
        if_conv_model(thr),
        &PtqConfig::default(),
        &feeds,
        &mut |_, _| {},
    )
    .unwrap();
    let report = analyze(
        &setup,
        &feeds,
        &AnalyzeOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap();
    for name in ["t_conv_a", "t_conv_b", "e_conv_a", "e_conv_b"] {
        let l = report.layers.iter().find(|l| l.name == name).unwrap();
        assert!(
            l.local.is_some() && l.propagated.is_some(),
            "{name}: local {:?} propagated {:?}",
            l.local,
            l.propagated
        );
    }
    let l = report.layers.iter().find(|l| l.name == "t_conv_b").unwrap();
    assert_eq!(l.output.as_deref(), Some("t_cb"));
    let q = setup.quantized().unwrap();
    // The then branch of the quantized If, and the DQ value standing for t_cb there.
    let then = q
        .nodes
        .iter()
        .find(|n| n.name == "if")
        .unwrap()
        .subgraphs()
        .find(|g| g.nodes.iter().any(|n| n.name == "t_conv_b"))
        .unwrap()
        .clone();
    let qn = then
        .nodes
        .iter()
        .find(|n| n.is(OpKind::QuantizeLinear) && n.inputs[0] == "t_cb")
        .unwrap();
    let dq = then
        .nodes
        .iter()
        .find(|n| n.is(OpKind::DequantizeLinear) && n.inputs[0] == qn.outputs[0])
        .unwrap()
        .outputs[0]
        .clone();
    let wq = init_anywhere(&q, "t_conv_b.w_q").expect("t_conv_b's quantized weight");
    let ws = init_anywhere(&q, "t_conv_b.w_scale").unwrap().to_f32_vec();
    let w: Vec<f32> = match &wq.data {
        quantkit_graph::Data::I8(v) => v
            .iter()
            .enumerate()
            .map(|(i, &x)| f32::from(x) * ws[i / 54])
            .collect(),
        other => panic!("{other:?}"),
    };
    let mut one = Graph {
        nodes: vec![Node::of(OpKind::Conv, "c", &["i", "w"], &["o"])],
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    one.inputs
        .push(ValueInfo::new("i", quantkit_graph::DType::F32, &[]));
    one.inputs[0].shape = None;
    one.outputs
        .push(ValueInfo::new("o", quantkit_graph::DType::F32, &[]));
    one.outputs[0].shape = None;
    one.initializers
        .insert("w".into(), Tensor::from_f32(&[4, 6, 3, 3], w));
    let (mut reference, mut local) = (vec![], vec![]);
    let (mut prop_ref, mut prop) = (vec![], vec![]);
    let mut taken = 0;
    for feed in &feeds {
        let mut vals = std::collections::HashMap::new();
        execute_with(&setup.float, feed.clone(), |n, t| {
            if n == "t_ra" || n == "t_cb" {
                vals.insert(n.to_string(), t.clone());
            }
        })
        .unwrap();
        let Some(ra) = vals.get("t_ra") else { continue };
        taken += 1;
        let i = Tensor::from_f32(&ra.shape, fake_u8(ra.as_f32().unwrap(), setup.act["t_ra"]));
        let o = execute(&one, vec![("i".into(), i)]).unwrap();
        local.extend(fake_u8(o[0].1.as_f32().unwrap(), setup.act["t_cb"]));
        reference.extend_from_slice(vals["t_cb"].as_f32().unwrap());
        let mut got = None;
        execute_with(&q, feed.clone(), |n, t| {
            if n == dq {
                got = Some(t.to_f32_vec());
            }
        })
        .unwrap();
        if let Some(g) = got {
            prop.extend(g);
            prop_ref.extend_from_slice(vals["t_cb"].as_f32().unwrap());
        }
    }
    assert!(taken > 0 && taken < feeds.len(), "both branches are taken");
    let direct_local = ErrorMetrics::compute(&reference, &local).unwrap();
    let direct_prop = ErrorMetrics::compute(&prop_ref, &prop).unwrap();
    let (lo, pr) = (l.local.unwrap(), l.propagated.unwrap());
    eprintln!(
        "t_conv_b in the then branch: local {:.3} dB (direct {:.3}), propagated {:.3} dB (direct {:.3})",
        lo.sqnr_db, direct_local.sqnr_db, pr.sqnr_db, direct_prop.sqnr_db
    );
    assert!(
        (lo.sqnr_db - direct_local.sqnr_db).abs() < 0.05,
        "{lo:?} {direct_local:?}"
    );
    assert!(
        (pr.sqnr_db - direct_prop.sqnr_db).abs() < 1e-6,
        "{pr:?} {direct_prop:?}"
    );
}
