//! int16 activations (W8A16, issue 18): opset-21 QDQ with symmetric int16 activations and
//! int8 weights. The committed LeNet quantized this way runs in ONNX Runtime and on the
//! integer engine (as float islands) with the executor's outputs, and is measurably closer
//! to float than int8; the opset-21 upgrade keeps the meaning of operators that changed
//! between 13 and 21.

mod common;

use quantkit_data::BatchOptions;
use quantkit_graph::{execute, AttrValue, DType, Graph, Node, OpKind, Tensor, ValueInfo};
use quantkit_ptq::analyze::{Feed, Setup};
use quantkit_ptq::mixed::{Evaluation, MixedConfig, Precision};
use quantkit_ptq::PtqConfig;

/// `batches` feeds of `n` samples of the committed Fashion-MNIST sample, skipping the first
/// `skip` batches.
fn sample_feeds(input: &str, skip: usize, batches: usize, n: usize) -> Vec<Feed> {
    common::sample_data()
        .batches(&BatchOptions {
            batch_size: n,
            ..Default::default()
        })
        .unwrap()
        .skip(skip)
        .take(batches)
        .map(|b| {
            let b = b.unwrap();
            vec![(input.to_string(), Tensor::from_f32(&b.shape, b.data))]
        })
        .collect()
}

fn lenet() -> Graph {
    quantkit_graph::load_model(common::repo().join("models/lenet.onnx")).unwrap()
}

fn all_int16(setup: &Setup) -> MixedConfig {
    let mut c = MixedConfig::default();
    for (l, _) in setup.layer_names() {
        c.set(&l, Precision::Act16);
    }
    c
}

#[test]
fn lenet_w8a16_is_closer_to_float_than_int8_and_runs_in_ort_and_the_engine() {
    let g = lenet();
    let input = g.inputs[0].name.clone();
    let calib = sample_feeds(&input, 0, 6, 64);
    let data = sample_feeds(&input, 6, 4, 64);
    let setup = Setup::new(g, &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    let q16 = setup.mixed(&all_int16(&setup)).unwrap();
    let q8 = setup.quantized().unwrap();

    // The layout: opset 21, every activation Q/DQ int16 with zero point 0, weights int8.
    assert_eq!(q16.opset(), 21);
    assert!(q16.meta.ir_version >= 10);
    let qs: Vec<&Node> = q16
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::QuantizeLinear))
        .collect();
    assert_eq!(qs.len(), setup.plan.activations.len());
    for q in &qs {
        let z = &q16.initializers[&q.inputs[2]];
        assert_eq!(z.dtype, DType::I16, "{}", q.name);
        assert_eq!(z.to_i64_vec(), vec![0], "{}: symmetric", q.name);
    }
    let weights: Vec<&Tensor> = q16
        .initializers
        .iter()
        .filter(|(k, _)| k.ends_with(".w_q"))
        .map(|(_, t)| t)
        .collect();
    assert!(!weights.is_empty());
    assert!(weights.iter().all(|t| t.dtype == DType::I8));
    // The 16-bit scale is the observed range over 32767 (minmax, symmetric): about 256
    // times finer than the 8-bit one.
    for (t, &(s16, _)) in &setup.wide {
        let (s8, _) = setup.act[t];
        assert!(s16 < s8 / 100.0, "{t}: int16 scale {s16} vs int8 {s8}");
    }

    // Closer to float: the output SQNR clears a bound that int8 does not reach.
    let eval = Evaluation::new(&setup, &data, None).unwrap();
    let m16 = eval.measure(&q16).unwrap();
    let m8 = eval.measure(&q8).unwrap();
    eprintln!(
        "LeNet output SQNR: int8 {:.2} dB, W8A16 {:.2} dB",
        m8.sqnr_db, m16.sqnr_db
    );
    const BOUND_DB: f64 = 40.0;
    assert!(m8.sqnr_db < BOUND_DB, "int8 {:.2} dB", m8.sqnr_db);
    assert!(m16.sqnr_db >= BOUND_DB, "W8A16 {:.2} dB", m16.sqnr_db);
    assert!(m16.agreement.unwrap() >= m8.agreement.unwrap());

    // The engine runs it (int16 Q/DQ and the layers between them as float islands, saying
    // why) with the executor's outputs.
    let x = data[0][0].1.clone();
    let reference = execute(&q16, vec![(input.clone(), x.clone())]).unwrap()[0]
        .1
        .to_f32_vec();
    let plan = quantkit_engine::compile(&q16, &quantkit_engine::EngineOptions::default()).unwrap();
    let why: Vec<String> = plan
        .report()
        .iter()
        .filter_map(|r| match &r.placement {
            quantkit_engine::Placement::Float { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert!(
        why.iter().any(|r| r.contains("int16")),
        "the report names int16 as the reason: {why:?}"
    );
    let engine = plan.run(vec![(input.as_str(), x.clone())]).unwrap()[0]
        .1
        .to_f32_vec();
    let top = |v: &[f32]| common::argmax_rows(v, 10);
    assert_eq!(top(&engine), top(&reference), "engine vs executor");
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(
        common::max_abs_diff(&engine, &reference) <= 1e-4 * scale,
        "engine vs executor: {}",
        common::max_abs_diff(&engine, &reference)
    );

    // ONNX Runtime loads the opset-21 int16 Q/DQ and agrees with the executor.
    if common::have_ort() {
        let dir = common::scratch("int16-lenet");
        let path = dir.join("lenet.w8a16.onnx");
        quantkit_graph::save_model(&q16, &path).unwrap();
        let ort = common::run_ort(&path, &input, &x);
        assert_eq!(top(&ort), top(&reference), "ORT vs executor");
        assert!(
            common::max_abs_diff(&ort, &reference) <= 1e-4 * scale,
            "ORT vs executor: {}",
            common::max_abs_diff(&ort, &reference)
        );
    }
}

#[test]
fn a_layer_shared_activation_is_int16_for_both_and_int8_layers_keep_8_bits() {
    let g = lenet();
    let input = g.inputs[0].name.clone();
    let calib = sample_feeds(&input, 0, 2, 32);
    let setup = Setup::new(g, &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    let names = setup.layer_names();
    let last = names.last().unwrap().0.clone();
    let mut c = MixedConfig::default();
    c.set(&last, Precision::Act16);
    let q = setup.mixed(&c).unwrap();
    assert_eq!(q.opset(), 21);
    let wide: Vec<&Node> = q
        .nodes
        .iter()
        .filter(|n| {
            n.is(OpKind::QuantizeLinear) && q.initializers[&n.inputs[2]].dtype == DType::I16
        })
        .collect();
    // The last layer (fc2) reads one activation and writes the output: two int16 pairs.
    assert_eq!(
        wide.len(),
        2,
        "{:?}",
        wide.iter().map(|n| &n.name).collect::<Vec<_>>()
    );
    let narrow = q
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::QuantizeLinear) && q.initializers[&n.inputs[2]].dtype == DType::U8)
        .count();
    assert_eq!(narrow + 2, setup.plan.activations.len());
    // The configuration round-trips through JSON with the new name.
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(json, format!(r#"{{"layers":{{"{last}":"int16"}}}}"#));
    let back: MixedConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
    // All int8 keeps the prepared model's opset (17 for LeNet).
    let o = setup.quantized().unwrap().opset();
    assert_eq!(o, setup.float.opset());
    assert!(o < 21);
}

/// x[1,4,3,3] → ReduceMean(axes=[2,3] attribute) → Split (no split input, 2 outputs) at
/// opset 13.
fn reduce_split() -> Graph {
    let mut g = Graph {
        name: "rs".into(),
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    g.meta.ir_version = 8;
    g.inputs
        .push(ValueInfo::new("x", DType::F32, &[1, 4, 3, 3]));
    for o in ["a", "b"] {
        g.outputs.push(ValueInfo {
            name: o.into(),
            dtype: Some(DType::F32),
            onnx_elem_type: DType::F32.onnx_code(),
            shape: None,
        });
    }
    g.nodes = vec![
        Node::new("mean", "ReduceMean", &["x"], &["m"])
            .with_attr("axes", AttrValue::Ints(vec![2, 3])),
        Node::new("split", "Split", &["m"], &["a", "b"]).with_attr("axis", AttrValue::Int(1)),
    ];
    g
}

#[test]
fn the_opset_21_upgrade_keeps_reduce_and_split_meaning() {
    let g = reduce_split();
    let x = Tensor::from_f32(
        &[1, 4, 3, 3],
        (0..36).map(|i| i as f32 * 0.25 - 3.0).collect(),
    );
    let before = execute(&g, vec![("x".into(), x.clone())]).unwrap();
    let mut up = g.clone();
    assert_eq!(quantkit_ptq::upgrade_opset_21(&mut up).unwrap(), Some(13));
    assert_eq!(up.opset(), 21);
    let mean = &up.nodes[0];
    assert!(
        mean.attr_ints("axes").unwrap().is_none(),
        "axes moved to an input"
    );
    assert_eq!(up.initializers[&mean.inputs[1]].to_i64_vec(), vec![2, 3]);
    assert_eq!(up.nodes[1].attr_int("num_outputs", 0).unwrap(), 2);
    let after = execute(&up, vec![("x".into(), x.clone())]).unwrap();
    for ((_, a), (_, b)) in before.iter().zip(&after) {
        assert_eq!(a.data, b.data);
    }
    if common::have_ort() {
        // ONNX Runtime reads the upgraded graph with the same meaning.
        let dir = common::scratch("int16-upgrade");
        let path = dir.join("rs21.onnx");
        quantkit_graph::save_model(&up, &path).unwrap();
        let ort = common::run_ort(&path, "x", &x);
        assert_eq!(ort, before[0].1.to_f32_vec());
    }
    // Already at 21: nothing to do.
    assert_eq!(quantkit_ptq::upgrade_opset_21(&mut up).unwrap(), None);
}

/// `g` with every activation Q/DQ pair removed (readers of the DequantizeLinear read what
/// the QuantizeLinear read): only the weights stay quantized.
fn weights_only(g: &Graph) -> Graph {
    let mut g = g.clone();
    let q_in: std::collections::HashMap<String, String> = g
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::QuantizeLinear) && !g.initializers.contains_key(&n.inputs[0]))
        .map(|n| (n.outputs[0].clone(), n.inputs[0].clone()))
        .collect();
    let mut bypass: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for n in &g.nodes {
        if n.is(OpKind::DequantizeLinear) {
            if let Some(src) = q_in.get(&n.inputs[0]) {
                bypass.insert(n.outputs[0].clone(), src.clone());
            }
        }
    }
    let outputs: std::collections::HashSet<String> =
        g.outputs.iter().map(|o| o.name.clone()).collect();
    g.nodes.retain(|n| {
        !(n.is(OpKind::QuantizeLinear) && q_in.contains_key(&n.outputs[0])
            || n.is(OpKind::DequantizeLinear) && bypass.contains_key(&n.outputs[0]))
    });
    // A graph output's DequantizeLinear wrote the output itself: its producer writes it again.
    let renamed: std::collections::HashMap<String, String> = bypass
        .iter()
        .filter(|(dq, _)| outputs.contains(*dq))
        .map(|(dq, src)| (src.clone(), dq.clone()))
        .collect();
    for n in g.nodes.iter_mut() {
        for v in n.inputs.iter_mut() {
            if let Some(src) = bypass.get(v.as_str()) {
                *v = renamed.get(src).unwrap_or(src).clone();
            }
        }
        for o in n.outputs.iter_mut() {
            if let Some(out) = renamed.get(o.as_str()) {
                *o = out.clone();
            }
        }
    }
    g.prune_initializers();
    g
}

/// PP-OCRv4's recognizer reached only 0.978 of frames with int16 activations on every layer;
/// the same file with its activation Q/DQ removed (int8 weights only) gave the same figure:
/// the int8 weights, not the activations, were the gap, and `int16` could not close it.
/// The same holds on LeNet: W8A16's output error is the int8 weights' (within a dB), and
/// `int16-w16` (16-bit weights too) removes it. Its weights are int16, its biases float,
/// and the engine and ONNX Runtime run it with the executor's outputs.
#[test]
fn w8a16_error_is_the_int8_weights_and_int16_weights_remove_it() {
    let g = lenet();
    let input = g.inputs[0].name.clone();
    let calib = sample_feeds(&input, 0, 6, 64);
    let data = sample_feeds(&input, 6, 4, 64);
    let setup = Setup::new(g, &PtqConfig::default(), &calib, &mut |_, _| {}).unwrap();
    let q16 = setup.mixed(&all_int16(&setup)).unwrap();
    let mut c = MixedConfig::default();
    for (l, _) in setup.layer_names() {
        c.set(&l, Precision::Wide16);
    }
    let w16 = setup.mixed(&c).unwrap();
    let eval = Evaluation::new(&setup, &data, None).unwrap();
    let m16 = eval.measure(&q16).unwrap();
    let mw = eval.measure(&weights_only(&q16)).unwrap();
    let mw16 = eval.measure(&w16).unwrap();
    eprintln!(
        "LeNet output SQNR: W8A16 {:.2} dB, its int8 weights alone {:.2} dB, W16A16 {:.2} dB",
        m16.sqnr_db, mw.sqnr_db, mw16.sqnr_db
    );
    // Errors of independent sources add: the noise 16-bit weights remove from W8A16 is the
    // int8 weights' own (LeNet: 4.57e-5 − 1.87e-5 of the signal against 2.71e-5).
    let noise = |db: f64| 10f64.powf(-db / 10.0);
    let removed = noise(m16.sqnr_db) - noise(mw16.sqnr_db);
    let weights = noise(mw.sqnr_db);
    assert!(
        (removed - weights).abs() < 0.1 * weights,
        "noise removed by 16-bit weights {removed:.3e} vs the int8 weights' {weights:.3e}"
    );
    assert!(mw16.sqnr_db > m16.sqnr_db + 3.0);
    // Layout: opset 21, int16 weights, no int32 bias (float behind a 16-bit input).
    assert_eq!(w16.opset(), 21);
    let wq: Vec<&Tensor> = w16
        .initializers
        .iter()
        .filter(|(k, _)| k.ends_with(".w_q"))
        .map(|(_, t)| t)
        .collect();
    assert!(!wq.is_empty());
    assert!(wq.iter().all(|t| t.dtype == DType::I16));
    // The biases stay int32 (a float one, ONNX Runtime's WeightBiasQuantization would
    // quantize at s_in·s_w and saturate); their scale may exceed s_in·s_w, the weights'
    // scales are each channel's max |w| / 32767.
    for (k, t) in &w16.initializers {
        if k.ends_with(".b_q") {
            assert_eq!(t.dtype, DType::I32, "{k}");
        }
    }
    for n in setup.float.nodes.iter().filter(|n| n.is(OpKind::Conv)) {
        let w = setup.float.initializers[&n.inputs[1]].to_f32_vec();
        let s = w16.initializers[&format!("{}.w_scale", n.name)].to_f32_vec();
        let per = w.len() / s.len();
        for (c, sc) in s.iter().enumerate() {
            let m = w[c * per..(c + 1) * per]
                .iter()
                .fold(0f32, |a, v| a.max(v.abs()));
            assert!(
                (sc - m / 32767.0).abs() <= 1e-6 * sc,
                "{} channel {c}",
                n.name
            );
        }
    }
    // The engine runs it with the executor's outputs; so does ONNX Runtime.
    let x = data[0][0].1.clone();
    let reference = execute(&w16, vec![(input.clone(), x.clone())]).unwrap()[0]
        .1
        .to_f32_vec();
    let plan = quantkit_engine::compile(&w16, &quantkit_engine::EngineOptions::default()).unwrap();
    let engine = plan.run(vec![(input.as_str(), x.clone())]).unwrap()[0]
        .1
        .to_f32_vec();
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let top = |v: &[f32]| common::argmax_rows(v, 10);
    assert_eq!(top(&engine), top(&reference), "engine vs executor");
    assert!(common::max_abs_diff(&engine, &reference) <= 1e-4 * scale);
    if common::have_ort() {
        let dir = common::scratch("int16-w16-lenet");
        let path = dir.join("lenet.w16a16.onnx");
        quantkit_graph::save_model(&w16, &path).unwrap();
        let ort = common::run_ort(&path, &input, &x);
        assert_eq!(top(&ort), top(&reference), "ORT vs executor");
        assert!(
            common::max_abs_diff(&ort, &reference) <= 1e-4 * scale,
            "ORT vs executor: {}",
            common::max_abs_diff(&ort, &reference)
        );
    }
    // The name round-trips.
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.contains("\"int16-w16\""), "{json}");
    assert_eq!(serde_json::from_str::<MixedConfig>(&json).unwrap(), c);
}
