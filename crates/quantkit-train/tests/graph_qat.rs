//! Training on the graph IR and quantization-aware training: fake-quant numbers equal
//! ONNX QuantizeLinear → DequantizeLinear, the STE and LSQ gradients, the chain rule of
//! `GraphNet` against finite differences, the error for an operator without gradient, and
//! QAT of the committed LeNet on the committed 1,000-image sample through export to the
//! integer engine.

use std::collections::HashMap;

use quantkit_graph::ops::{OpCtx, OpKind};
use quantkit_graph::{AttrValue, DType, Data, Graph, Node, Tensor as GTensor, ValueInfo};
use quantkit_train::graph::{train_step, FakeQuant, GraphNet};
use quantkit_train::losses::LossKind;
use quantkit_train::optim::{Adam, Sgd};
use quantkit_train::qat::{Qat, QatOptions};
use quantkit_train::TrainError;

mod common;
use common::{root, Lcg};

fn run(kind: OpKind, node: &Node, ins: &[Option<&GTensor>]) -> GTensor {
    (kind.def().eval)(&OpCtx { node, opset: 21 }, ins)
        .unwrap()
        .remove(0)
}

/// Fake-quant forward is bit for bit ONNX QuantizeLinear then DequantizeLinear, for
/// per-channel 4-bit symmetric weights (int4 codes) and per-tensor u8 affine activations.
#[test]
fn fake_quant_equals_onnx_quantize_then_dequantize() {
    let mut rng = Lcg(1);
    // Per-channel, axis 0, int4.
    let shape = [3usize, 2, 2, 2];
    let x = rng.vec(24, 2.0);
    let scales = vec![0.11f32, 0.23, 0.05];
    let fq = FakeQuant {
        tensor: "w".into(),
        axis: Some(0),
        zero_points: vec![0, 0, 0],
        qmin: -8,
        qmax: 7,
        learn_scale: false,
        is_weight: true,
    };
    let ours = fq.forward(&x, &shape, &scales);
    let xt = GTensor::from_f32(&shape, x.clone());
    let st = GTensor::from_f32(&[3], scales.clone());
    let zt = GTensor::new(vec![3], Data::I8(vec![0; 3]))
        .unwrap()
        .with_dtype(DType::I4);
    let q = Node::of(OpKind::QuantizeLinear, "q", &["x", "s", "z"], &["y"])
        .with_attr("axis", AttrValue::Int(0));
    let codes = run(
        OpKind::QuantizeLinear,
        &q,
        &[Some(&xt), Some(&st), Some(&zt)],
    );
    let dq = Node::of(OpKind::DequantizeLinear, "dq", &["y", "s", "z"], &["x2"])
        .with_attr("axis", AttrValue::Int(0));
    let back = run(
        OpKind::DequantizeLinear,
        &dq,
        &[Some(&codes), Some(&st), Some(&zt)],
    );
    assert_eq!(
        ours.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        back.to_f32_vec()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    );
    // Per-tensor u8 affine, values beyond both ends and on ties.
    let mut x = rng.vec(64, 3.0);
    x.extend([0.5 * 0.02, 1.5 * 0.02, -10.0, 10.0]);
    let fq = FakeQuant {
        tensor: "a".into(),
        axis: None,
        zero_points: vec![100],
        qmin: 0,
        qmax: 255,
        learn_scale: false,
        is_weight: false,
    };
    let ours = fq.forward(&x, &[x.len()], &[0.02]);
    let xt = GTensor::from_f32(&[x.len()], x.clone());
    let st = GTensor::scalar_f32(0.02);
    let zt = GTensor::new(vec![], Data::U8(vec![100])).unwrap();
    let q = Node::of(OpKind::QuantizeLinear, "q", &["x", "s", "z"], &["y"]);
    let codes = run(
        OpKind::QuantizeLinear,
        &q,
        &[Some(&xt), Some(&st), Some(&zt)],
    );
    let dq = Node::of(OpKind::DequantizeLinear, "dq", &["y", "s", "z"], &["x2"]);
    let back = run(
        OpKind::DequantizeLinear,
        &dq,
        &[Some(&codes), Some(&st), Some(&zt)],
    );
    assert_eq!(ours, back.to_f32_vec());
}

/// STE: the gradient of x is the identity where the code is inside [qmin, qmax] and 0
/// where it clipped. LSQ: the scale gradient equals the finite difference of
/// `s·(q − z)` with `q = R + x/s − x/s₀ + z` inside the range (round frozen at
/// R = round(x/s₀), its derivative taken as 1) and the clipped code outside, times the gradient scale `1/√(numel·qmax)`.
/// The block form of the fake-quant forward and backward (runs of one scale, f32-only
/// arithmetic that vectorises) equals the element-by-element reference built on
/// quantkit-core's `quantize_value`/`dequantize_value`, bit for bit: per-channel on axis 0
/// and 1, per tensor, 2/4/8 bits signed and unsigned, zero points at both ends of the
/// range, ties, ±0, NaN, ±∞ and values far beyond 2²².
#[test]
fn fake_quant_block_form_equals_the_reference() {
    let mut rng = Lcg(7);
    let awkward = [
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e30,
        -1e30,
        4_194_304.5,
        -8_388_607.0,
        1e-30,
    ];
    // (shape, per-channel axis, qmin, qmax, is a weight)
    type Case = (&'static [usize], Option<usize>, i32, i32, bool);
    let cases: [Case; 9] = [
        // Runs longer than one parallel task of the block form (2¹⁴ elements).
        (&[2, 16, 40, 40], None, 0, 255, false),
        (&[3, 20_000], Some(0), -8, 7, true),
        (&[5, 3, 3, 3], Some(0), -8, 7, true),
        (&[7, 9], Some(1), -2, 1, true),
        (&[6, 4], Some(0), -128, 127, true),
        (&[4, 3, 5, 5], None, 0, 15, false),
        (&[3, 33], None, 0, 255, false),
        (&[2, 8, 3], None, 0, 3, false),
        (&[3, 2, 4, 4], None, -8, 7, false),
    ];
    for (shape, axis, qmin, qmax, is_weight) in cases {
        let n: usize = shape.iter().product();
        let nc = axis.map_or(1, |a| shape[a]);
        for zp_end in 0..3 {
            let zero_points: Vec<i32> = (0..nc)
                .map(|c| match zp_end {
                    0 => qmin,
                    1 => qmax,
                    _ => qmin + ((c as i32 * 5) % (qmax - qmin + 1)),
                })
                .collect();
            let zero_points = if axis.is_none() {
                zero_points[..1].to_vec()
            } else {
                zero_points
            };
            let scales: Vec<f32> = (0..nc).map(|c| 0.01 + 0.037 * c as f32).collect();
            let f = FakeQuant {
                tensor: "t".into(),
                axis,
                zero_points,
                qmin,
                qmax,
                learn_scale: true,
                is_weight,
            };
            // Ties of every scale, random values across and beyond the range, awkward ones.
            let mut x: Vec<f32> = (0..n)
                .map(|i| {
                    let s = scales[i % nc];
                    match i % 4 {
                        0 => (rng.next() * 20.0).round() * s + 0.5 * s,
                        1 => rng.next() * s * (qmax - qmin) as f32 * 1.5,
                        _ => rng.next() * 3.0,
                    }
                })
                .collect();
            for (i, &a) in awkward.iter().enumerate() {
                x[(i * 7) % n] = a;
            }
            let g: Vec<f32> = (0..n).map(|_| rng.next()).collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&f.forward(&x, shape, &scales)),
                bits(&f.forward_reference(&x, shape, &scales)),
                "forward {shape:?} axis {axis:?} [{qmin}, {qmax}]"
            );
            let (dx, ds) = f.backward(&x, shape, &scales, &g);
            let (rdx, rds) = f.backward_reference(&x, shape, &scales, &g);
            assert_eq!(bits(&dx), bits(&rdx), "dx {shape:?} axis {axis:?}");
            assert_eq!(bits(&ds), bits(&rds), "ds {shape:?} axis {axis:?}");
            assert_eq!(
                bits(&f.backward_x(&x, shape, &scales, &g)),
                bits(&rdx),
                "dx without the scale's gradient {shape:?} axis {axis:?}"
            );
        }
    }
}

#[test]
fn ste_and_lsq_gradients() {
    let mut rng = Lcg(2);
    let shape = [2usize, 5];
    let x = rng.vec(10, 1.5);
    let g = rng.vec(10, 1.0);
    let s = vec![0.3f32, 0.17];
    for (zp, qmin, qmax) in [(vec![0, 0], -4, 3), (vec![2, 5], 0, 7)] {
        let fq = FakeQuant {
            tensor: "t".into(),
            axis: Some(0),
            zero_points: zp.clone(),
            qmin,
            qmax,
            learn_scale: true,
            is_weight: true,
        };
        let (dx, ds) = fq.backward(&x, &shape, &s, &g);
        for i in 0..10 {
            let c = i / 5;
            let code = (x[i] / s[c]).round_ties_even() + zp[c] as f32;
            let inside = code >= qmin as f32 && code <= qmax as f32;
            assert_eq!(dx[i], if inside { g[i] } else { 0.0 }, "STE at {i}");
        }
        let gscale = 1.0 / ((5.0 * qmax as f64).sqrt());
        for c in 0..2 {
            let surrogate = |sc: f64| -> f64 {
                (0..5)
                    .map(|j| {
                        let i = c * 5 + j;
                        let x = x[i] as f64;
                        let r0 = (x / s[c] as f64).round_ties_even();
                        let code = r0 + zp[c] as f64;
                        // The clip decision is the forward's (on the rounded code at s₀),
                        // as PyTorch's learnable fake-quant makes it.
                        let q = if code < qmin as f64 {
                            qmin as f64
                        } else if code > qmax as f64 {
                            qmax as f64
                        } else {
                            r0 + (x / sc - x / s[c] as f64) + zp[c] as f64
                        };
                        g[i] as f64 * sc * (q - zp[c] as f64)
                    })
                    .sum()
            };
            let h = 1e-4;
            let num =
                (surrogate(s[c] as f64 + h) - surrogate(s[c] as f64 - h)) / (2.0 * h) * gscale;
            assert!(
                (num - ds[c] as f64).abs() < 1e-4 + 1e-3 * num.abs(),
                "LSQ scale {c}: analytic {} numeric {num}",
                ds[c]
            );
        }
    }
}

fn small_graph(with_sin: bool) -> Graph {
    small_graph_with(if with_sin {
        OpKind::Sin
    } else {
        OpKind::Sigmoid
    })
}

/// Conv (stride 2) → `act` → Flatten → Gemm.
fn small_graph_with(act: OpKind) -> Graph {
    let mut rng = Lcg(3);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs
        .push(ValueInfo::new("x", DType::F32, &[2, 2, 5, 5]));
    g.initializers.insert(
        "w".into(),
        GTensor::from_f32(&[3, 2, 3, 3], rng.vec(54, 0.4)),
    );
    g.initializers
        .insert("b".into(), GTensor::from_f32(&[3], rng.vec(3, 0.1)));
    g.initializers
        .insert("fw".into(), GTensor::from_f32(&[4, 12], rng.vec(48, 0.3)));
    g.initializers
        .insert("fb".into(), GTensor::from_f32(&[4], rng.vec(4, 0.1)));
    g.nodes.push(
        Node::of(OpKind::Conv, "conv", &["x", "w", "b"], &["c"])
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
    );
    g.nodes.push(Node::of(act, "act", &["c"], &["a"]));
    g.nodes
        .push(Node::of(OpKind::Flatten, "flat", &["a"], &["f"]));
    g.nodes.push(
        Node::of(OpKind::Gemm, "fc", &["f", "fw", "fb"], &["y"])
            .with_attr("transB", AttrValue::Int(1)),
    );
    g.outputs.push(ValueInfo::new("y", DType::F32, &[2, 4]));
    g
}

/// The chain rule of `GraphNet::backward` over a small graph, against finite differences
/// of the cross-entropy of its forward.
#[test]
fn graph_parameter_gradients_match_finite_differences() {
    // Sigmoid: every step on its own; Relu: the Conv → Relu pair GraphNet fuses.
    for act in [OpKind::Sigmoid, OpKind::Relu] {
        parameter_gradients_match_finite_differences(act);
    }
}

fn parameter_gradients_match_finite_differences(act: OpKind) {
    let g = small_graph_with(act);
    let mut net = GraphNet::build(&g, &HashMap::new(), &HashMap::new()).unwrap();
    let mut rng = Lcg(4);
    let x = GTensor::from_f32(&[2, 2, 5, 5], rng.vec(100, 1.0));
    let labels = [1usize, 3];
    let loss_of = |net: &GraphNet| -> f64 {
        let v = net.forward(vec![x.clone()]).unwrap();
        let y = net.outputs(&v)[0].to_f32_vec();
        quantkit_train::losses::cross_entropy(&y, 4, &labels).0 as f64
    };
    let v = net.forward(vec![x.clone()]).unwrap();
    let y = net.outputs(&v)[0].to_f32_vec();
    // The training forward (fused or not) computes what the float executor computes.
    let exec = quantkit_graph::execute(&g, vec![("x".into(), x.clone())]).unwrap();
    assert_eq!(y, exec[0].1.to_f32_vec(), "{act:?}: forward = executor");
    let (_, seed) = quantkit_train::losses::cross_entropy(&y, 4, &labels);
    net.params.zero_grad();
    net.backward(&v, vec![Some(seed)]).unwrap();
    drop(v);
    let names: Vec<String> = net.params.iter().map(|p| p.name.clone()).collect();
    assert_eq!(names.len(), 4, "w, b, fw, fb are trainable: {names:?}");
    for (id, name) in names.iter().enumerate() {
        let grad = net.params.get(id).grad.data().to_vec();
        for (j, &gj) in grad.iter().enumerate() {
            let mut p = net.clone();
            p.params.get_mut(id).value.data_mut()[j] += 1e-2;
            let mut m = net.clone();
            m.params.get_mut(id).value.data_mut()[j] -= 1e-2;
            let num = (loss_of(&p) - loss_of(&m)) / 2e-2;
            assert!(
                (num - gj as f64).abs() < 1e-3 + 1e-2 * num.abs(),
                "{act:?} {name}[{j}]: analytic {gj} numeric {num}"
            );
        }
    }
}

#[test]
fn an_operator_without_gradient_is_named() {
    let g = small_graph(true);
    let mut net = GraphNet::build(&g, &HashMap::new(), &HashMap::new()).unwrap();
    let x = GTensor::from_f32(&[2, 2, 5, 5], vec![0.1; 100]);
    let mut opt = Sgd::new(0.0, 0.0);
    let e = train_step(
        &mut net,
        &mut opt,
        vec![x],
        LossKind::CrossEntropy,
        Some(&[0, 1]),
        None,
        0.1,
    )
    .expect_err("Sin has no gradient");
    assert!(
        matches!(&e, TrainError::NoBackward { node, op_type } if node == "act" && op_type == "Sin"),
        "{e}"
    );
    assert!(e.to_string().contains("`act` (Sin)"), "{e}");
}

fn sample() -> Option<(Vec<f32>, Vec<usize>)> {
    let dir = root().join("data/fashion-mnist-sample");
    let mut src = quantkit_data::open_data(&dir, &quantkit_data::OpenOptions::default()).ok()?;
    let mut x = Vec::new();
    let mut y = Vec::new();
    for b in src
        .batches(&quantkit_data::BatchOptions {
            batch_size: 250,
            ..Default::default()
        })
        .ok()?
    {
        let b = b.ok()?;
        x.extend(b.data);
        y.extend(b.labels?.into_iter().map(|l| l as usize));
    }
    Some((x, y))
}

fn top1(y: &GTensor) -> Vec<usize> {
    let k = y.shape[1];
    y.to_f32_vec()
        .chunks(k)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &v)| if v > b.1 { (i, v) } else { b },
                )
                .0
        })
        .collect()
}

/// QAT of the committed LeNet at W4A8 on the committed sample: PTQ plan → fake-quant
/// training graph → a few steps (the loss falls) → QDQ export whose weights are 4-bit
/// codes → the integer engine agrees with the fake-quant model on the held-out images.
#[test]
fn lenet_qat_w4a8_exports_to_the_engine() {
    lenet_qat_exports_to_the_engine(8);
}

/// The same at W4A4: 4-bit activation codes in u8 storage, the range a Clip in front of
/// each QuantizeLinear; exact mode equals the engine, whose requantization clamps to the
/// narrow range (every activation code the exported graph produces is checked ≤ 15).
#[test]
fn lenet_qat_w4a4_exports_to_the_engine() {
    lenet_qat_exports_to_the_engine(4);
}

fn lenet_qat_exports_to_the_engine(act_bits: u8) {
    let Some((x, labels)) = sample() else {
        panic!("the committed sample data/fashion-mnist-sample is missing");
    };
    let mut float = quantkit_graph::load_model(root().join("models/lenet.onnx")).unwrap();
    quantkit_ptq::prepare(&mut float).unwrap();
    let mut calib = quantkit_data::open_data(
        root().join("data/fashion-mnist-sample"),
        &quantkit_data::OpenOptions::default(),
    )
    .unwrap();
    let mut cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(256),
        ..Default::default()
    };
    cfg.qdq.weight_bits = 4;
    let (qdq, _) =
        quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {}).unwrap();
    let mut qat = Qat::from_ptq(
        &float,
        &qdq,
        &QatOptions {
            weight_bits: 4,
            activation_bits: act_bits,
            lsq: true,
            observer_steps: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let (w, a) = qat.counts();
    assert_eq!(w, 4, "four weighted layers");
    assert!(a >= 4, "{a} activations");
    let per = 784;
    let mut opt = Adam::new(0.0);
    let (train_n, batch) = (512, 32);
    let mut losses = Vec::new();
    for _epoch in 0..1 {
        for b in 0..train_n / batch {
            let xb = GTensor::from_f32(
                &[batch, 1, 28, 28],
                x[b * batch * per..(b + 1) * batch * per].to_vec(),
            );
            let (l, _) = qat
                .train_step(
                    &mut opt,
                    xb,
                    LossKind::CrossEntropy,
                    Some(&labels[b * batch..(b + 1) * batch]),
                    None,
                    1e-3,
                )
                .unwrap();
            assert!(l.is_finite());
            losses.push(l);
        }
    }
    let first: f32 = losses[..4].iter().sum::<f32>() / 4.0;
    let last: f32 = losses[losses.len() - 4..].iter().sum::<f32>() / 4.0;
    assert!(last < first, "loss {first} → {last}");
    let out = qat.export().unwrap();
    // 4-bit weight codes, stored as ONNX int4 (opset 21): four weight tensors, no int8 one.
    let mut int4 = 0;
    for n in out.nodes.iter().filter(|n| n.is(OpKind::DequantizeLinear)) {
        if let Some(t) = out.initializers.get(&n.inputs[0]) {
            if t.len() > 1 && t.dtype != DType::I32 {
                assert_eq!(t.dtype, DType::I4, "`{}`", n.inputs[0]);
                assert!(t.to_i64_vec().iter().all(|&v| (-8..=7).contains(&v)));
                int4 += 1;
            }
        }
    }
    assert_eq!(int4, 4);
    assert_eq!(out.opset(), 21);
    let plan = quantkit_engine::compile(&out, &Default::default()).unwrap();
    let held = 1000 - train_n;
    if act_bits < 8 {
        // Every activation code of the exported graph (each QuantizeLinear's output, on the
        // float executor) lies in the narrow range.
        let mut g = out.clone();
        let qs: Vec<String> = g
            .nodes
            .iter()
            .filter(|n| n.is(OpKind::QuantizeLinear))
            .map(|n| n.outputs[0].clone())
            .collect();
        assert!(qs.len() >= 4, "{} activation Q", qs.len());
        for q in &qs {
            let mut vi = ValueInfo::new(q, DType::U8, &[]);
            vi.shape = None;
            g.outputs.push(vi);
        }
        let xe = GTensor::from_f32(
            &[64, 1, 28, 28],
            x[train_n * per..(train_n + 64) * per].to_vec(),
        );
        let name = g.inputs[0].name.clone();
        let mut top = 0;
        for (n, t) in quantkit_graph::execute(&g, vec![(name, xe)]).unwrap() {
            if qs.contains(&n) {
                top = top.max(t.to_i64_vec().into_iter().max().unwrap());
            }
        }
        assert!(
            top < 1 << act_bits,
            "an activation code {top} beyond {act_bits} bits"
        );
        assert_eq!(top, (1 << act_bits) - 1, "the top code is used");
    }
    let xe = GTensor::from_f32(&[held, 1, 28, 28], x[train_n * per..].to_vec());
    let fake = top1(&qat.predict(xe.clone()).unwrap());
    let name = out.inputs[0].name.clone();
    let ey = plan.run(vec![(name, xe.clone())]).unwrap().remove(0).1;
    let eng = top1(&ey);
    // Exact mode: the fake-quant forward with the engine's integer layers gives the engine's
    // top-1 on every held-out image and its logits within one output step (in fact the same
    // bits: both are DQ of the same codes).
    let exact = qat
        .exact_plan(&out, &plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    assert_eq!(exact.integer_layers(), 4, "conv1, conv2, fc1, fc2");
    assert!(
        exact.not_reproduced.is_empty(),
        "{:?}",
        exact.not_reproduced
    );
    let xy = qat.predict_exact(xe, &exact).unwrap();
    let ex = top1(&xy);
    let same = ex.iter().zip(&eng).filter(|(a, b)| a == b).count();
    assert_eq!(same, held, "exact-mode top-1 = engine top-1 on every image");
    let step = output_step(&out);
    let worst = xy
        .to_f32_vec()
        .iter()
        .zip(ey.to_f32_vec())
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= step,
        "max |logit difference| {worst} > one output step {step}"
    );
    assert_eq!(
        xy.to_f32_vec(),
        ey.to_f32_vec(),
        "exact mode logits are the engine's"
    );
    // A stale plan is refused, not silently used.
    let xb = GTensor::from_f32(&[batch, 1, 28, 28], x[..batch * per].to_vec());
    qat.train_step(
        &mut opt,
        xb.clone(),
        LossKind::CrossEntropy,
        Some(&labels[..batch]),
        None,
        1e-4,
    )
    .unwrap();
    let e = qat.predict_exact(xb, &exact).expect_err("stale plan");
    assert!(e.to_string().contains("build it again"), "{e}");
    let agree = fake.iter().zip(&eng).filter(|(a, b)| a == b).count();
    let correct = eng
        .iter()
        .zip(&labels[train_n..])
        .filter(|(a, b)| a == b)
        .count();
    eprintln!(
        "engine vs f32 fake-quant top-1: {agree}/{held}; vs exact mode {same}/{held}; engine accuracy {correct}/{held}"
    );
    // The f32 fake-quant model is not the engine (docs/qat.md: accumulation order,
    // requantization rounding, float bias); exact mode is, and is asserted equal above. At
    // 4-bit activations one code is 1/15 of the range, so the rare code its f32 arithmetic
    // flips moves a logit ~16x further than at 8 bits (measured: 474/488 here; LeNet W4A4
    // on the full test set, BENCHMARKS.md: 98.2 %).
    let f32_floor = if act_bits < 8 { 95 } else { 99 };
    assert!(agree * 100 >= held * f32_floor, "{agree}/{held}");
    let floor = if act_bits < 8 { 60 } else { 70 };
    assert!(correct * 100 >= held * floor, "{correct}/{held}");
}

/// The scale of the DequantizeLinear writing the graph's output 0: one output step.
fn output_step(g: &Graph) -> f32 {
    let o = &g.outputs[0].name;
    let dq = g
        .nodes
        .iter()
        .find(|n| n.outputs[0] == *o && n.is(OpKind::DequantizeLinear))
        .expect("the output is dequantized");
    g.initializers[&dq.inputs[1]].to_f32_vec()[0]
}

/// A Gemm + Relu whose scales are powers of two, so that half of the requantized values
/// and every bias land exactly on .5: the exporter's int32 bias is the half-to-even
/// rounding, and exact mode equals the engine bit for bit in both requantization modes —
/// float (half to even) and fixed point (gemmlowp's rounding, half away from zero), which
/// differ on these ties, so a mode or rounding mismatch fails the test.
#[test]
fn exact_mode_follows_the_engines_rounding_on_ties() {
    let (n, k, m) = (64usize, 4usize, 4usize);
    let sx = 1.0 / 16.0;
    let sw = [1.0 / 8.0, 1.0 / 8.0, 1.0 / 4.0, 1.0 / 16.0];
    let sy = 1.0 / 64.0;
    let (zx, zy) = (128u8, 100u8);
    let mut rng = Lcg(11);
    let wq: Vec<i32> = (0..m * k)
        .map(|_| (rng.next() * 4.5).round() as i32)
        .collect();
    let w: Vec<f32> = wq
        .iter()
        .enumerate()
        .map(|(i, &q)| q as f32 * sw[i / k])
        .collect();
    // Biases at (c + 0.5)·s_x·s_w: half to even gives 2, 4, −2, 0.
    let bk = [2.5f32, 3.5, -2.5, 0.5];
    let b: Vec<f32> = (0..m).map(|j| bk[j] * sx * sw[j]).collect();
    let (float, qdq) = gemm_relu_case(n, k, m, &w, &b, &wq, sx, &sw, sy, zx, zy);
    let qat = Qat::from_ptq(
        &float,
        &qdq,
        &QatOptions {
            weight_bits: 8,
            observer_steps: 0,
            ..Default::default()
        },
    )
    .unwrap();
    let out = qat.export().unwrap();
    assert_eq!(
        out.initializers["Bq"].to_i64_vec(),
        vec![2, 4, -2, 0],
        "bias codes: (c + 0.5) rounds half to even"
    );
    assert_eq!(
        out.initializers["Wq"].to_i64_vec(),
        wq.iter().map(|&v| v as i64).collect::<Vec<_>>()
    );
    // Input codes near the zero point, so most outputs stay inside the u8 range.
    let xq: Vec<i32> = (0..n * k)
        .map(|_| zx as i32 + (rng.next() * 9.0).round() as i32)
        .collect();
    let x = GTensor::from_f32(
        &[n, k],
        xq.iter().map(|&q| (q - zx as i32) as f32 * sx).collect(),
    );
    // How many outputs sit exactly on a tie of the float requantization.
    let mut ties = 0;
    for r in 0..n {
        for j in 0..m {
            let acc: i32 = (0..k)
                .map(|i| (xq[r * k + i] - zx as i32) * wq[j * k + i])
                .sum();
            let bq = [2, 4, -2, 0][j];
            let v = (acc + bq) as f64 * (sx * sw[j] / sy) as f64;
            if (v - v.floor() - 0.5).abs() == 0.0
                && v + (zy as f64) > 0.0
                && v + (zy as f64) < 255.0
            {
                ties += 1;
            }
        }
    }
    assert!(
        ties >= n * m / 8,
        "only {ties} ties: the case does not test rounding"
    );
    let mut by_mode = Vec::new();
    for mode in [
        quantkit_engine::RequantMode::Float,
        quantkit_engine::RequantMode::FixedPoint,
    ] {
        let opts = quantkit_engine::EngineOptions {
            requant: mode,
            ..Default::default()
        };
        let plan = quantkit_engine::compile(&out, &opts).unwrap();
        assert!(
            plan.report()
                .iter()
                .any(|r| r.node == "gemm" && r.is_integer()),
            "the engine runs the Gemm on integers"
        );
        let exact = qat.exact_plan(&out, &plan, mode).unwrap();
        assert_eq!(exact.integer_layers(), 1);
        let ey = plan.run(vec![("x", x.clone())]).unwrap().remove(0).1;
        let xy = qat.predict_exact(x.clone(), &exact).unwrap();
        assert_eq!(
            xy.to_f32_vec(),
            ey.to_f32_vec(),
            "{mode:?}: exact mode = engine"
        );
        by_mode.push(ey.to_f32_vec());
    }
    let differ = by_mode[0]
        .iter()
        .zip(&by_mode[1])
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        differ > 0,
        "float and fixed-point requantization agree on every tie: the test cannot tell them apart"
    );
}

/// `x → Gemm(W, B, transB) → Relu → y` in float and as the QDQ graph PTQ would write for
/// input scale/zero point `sx`/`zx`, per-channel weight codes `wq` at scales `sw`, output
/// `sy`/`zy` (the biases' int32 codes are the exporter's to fill).
#[allow(clippy::too_many_arguments)]
fn gemm_relu_case(
    n: usize,
    k: usize,
    m: usize,
    w: &[f32],
    b: &[f32],
    wq: &[i32],
    sx: f32,
    sw: &[f32],
    sy: f32,
    zx: u8,
    zy: u8,
) -> (Graph, Graph) {
    let mut float = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    float.inputs.push(ValueInfo::new("x", DType::F32, &[n, k]));
    float.outputs.push(ValueInfo::new("y", DType::F32, &[n, m]));
    float
        .initializers
        .insert("W".into(), GTensor::from_f32(&[m, k], w.to_vec()));
    float
        .initializers
        .insert("B".into(), GTensor::from_f32(&[m], b.to_vec()));
    let gemm = Node::of(OpKind::Gemm, "gemm", &["xd", "wd", "bd"], &["g"])
        .with_attr("transB", AttrValue::Int(1));
    float.nodes.push(
        Node::of(OpKind::Gemm, "gemm", &["x", "W", "B"], &["g"])
            .with_attr("transB", AttrValue::Int(1)),
    );
    float
        .nodes
        .push(Node::of(OpKind::Relu, "relu", &["g"], &["y"]));
    // The QDQ graph PTQ would write, with these parameters.
    let mut qdq = float.clone();
    qdq.nodes.clear();
    let u8t = |v: u8| GTensor::new(vec![], Data::U8(vec![v])).unwrap();
    let init = &mut qdq.initializers;
    init.insert("sx".into(), GTensor::scalar_f32(sx));
    init.insert("zx".into(), u8t(zx));
    init.insert("sy".into(), GTensor::scalar_f32(sy));
    init.insert("zy".into(), u8t(zy));
    init.insert(
        "Wq".into(),
        GTensor::new(vec![m, k], Data::I8(wq.iter().map(|&v| v as i8).collect())).unwrap(),
    );
    init.insert("sw".into(), GTensor::from_f32(&[m], sw.to_vec()));
    init.insert(
        "zw".into(),
        GTensor::new(vec![m], Data::I8(vec![0; m])).unwrap(),
    );
    init.insert(
        "Bq".into(),
        GTensor::new(vec![m], Data::I32(vec![0; m])).unwrap(),
    );
    init.insert(
        "sb".into(),
        GTensor::from_f32(&[m], sw.iter().map(|&w| sx * w).collect()),
    );
    let axis0 = |nd: Node| nd.with_attr("axis", AttrValue::Int(0));
    qdq.nodes = vec![
        Node::of(OpKind::QuantizeLinear, "qx", &["x", "sx", "zx"], &["xq"]),
        Node::of(
            OpKind::DequantizeLinear,
            "dqx",
            &["xq", "sx", "zx"],
            &["xd"],
        ),
        axis0(Node::of(
            OpKind::DequantizeLinear,
            "dqw",
            &["Wq", "sw", "zw"],
            &["wd"],
        )),
        axis0(Node::of(
            OpKind::DequantizeLinear,
            "dqb",
            &["Bq", "sb"],
            &["bd"],
        )),
        gemm,
        Node::of(OpKind::Relu, "relu", &["g"], &["r"]),
        Node::of(OpKind::QuantizeLinear, "qy", &["r", "sy", "zy"], &["yq"]),
        Node::of(OpKind::DequantizeLinear, "dqy", &["yq", "sy", "zy"], &["y"]),
    ];
    (float, qdq)
}

/// A Gemm whose partial sums exceed 2²⁴ and then cancel (K = 16384: the first half of one
/// row's products are +127·(127 | 125), the second half the same negated, plus one odd
/// term), so the exact accumulator is small but an f32 sum of it is off by several units:
/// exact mode must split the operands into base-16 digits, and equals the engine bit for bit.
#[test]
fn exact_mode_splits_accumulators_beyond_f32() {
    let (n, k, m) = (4usize, 16384usize, 2usize);
    let sx = 1.0 / 16.0;
    let sw = [1.0 / 512.0, 1.0 / 512.0];
    // Multiplier s_x·s_w/s_y = 1/2.
    let sy = sx * sw[0] * 2.0;
    let (zx, zy) = (128u8, 128u8);
    let mut rng = Lcg(12);
    let half: Vec<i32> = (0..k / 2)
        .map(|_| if rng.next() > 0.0 { 127 } else { 125 })
        .collect();
    let mut row: Vec<i32> = half.iter().chain(half.iter()).copied().collect();
    for v in &mut row[k / 2..] {
        *v = -*v;
    }
    row[k - 1] += 1;
    let wq: Vec<i32> = row
        .iter()
        .chain(row.iter().map(|v| -v).collect::<Vec<_>>().iter())
        .copied()
        .collect();
    let w: Vec<f32> = wq
        .iter()
        .enumerate()
        .map(|(i, &q)| q as f32 * sw[i / k])
        .collect();
    let b = vec![0.0f32; m];
    let (float, qdq) = gemm_relu_case(n, k, m, &w, &b, &wq, sx, &sw, sy, zx, zy);
    let qat = Qat::from_ptq(
        &float,
        &qdq,
        &QatOptions {
            weight_bits: 8,
            observer_steps: 0,
            ..Default::default()
        },
    )
    .unwrap();
    let out = qat.export().unwrap();
    // Row 0 at code 255 everywhere (x − z = 127); the others random at the two ends.
    let xq: Vec<i32> = (0..n * k)
        .map(|i| if i < k || rng.next() > 0.0 { 255 } else { 0 })
        .collect();
    let peak: i64 = (0..k / 2).map(|c| 127 * wq[c] as i64).sum();
    assert!(peak > 1 << 24, "row 0 peaks at {peak}, not beyond 2^24");
    let x = GTensor::from_f32(
        &[n, k],
        xq.iter().map(|&q| (q - zx as i32) as f32 * sx).collect(),
    );
    let plan = quantkit_engine::compile(&out, &Default::default()).unwrap();
    let exact = qat
        .exact_plan(&out, &plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    assert_eq!(exact.integer_layers(), 1);
    let ey = plan.run(vec![("x", x.clone())]).unwrap().remove(0).1;
    let xy = qat.predict_exact(x, &exact).unwrap();
    assert_eq!(xy.to_f32_vec(), ey.to_f32_vec());
    // Row 0, channel 0: acc = 127, code 128 + round_half_even(63.5) = 192.
    assert_eq!(ey.to_f32_vec()[0], (192 - 128) as f32 * sy);
}
