//! QAT's batch-statistics BatchNormalization and its freeze (`--freeze-bn-epoch`), LSQ+
//! learned zero points (`--lsq-plus`) and distillation together with labels
//! (`--ce-weight`): gradients against finite differences, and the committed MobileNet
//! (BatchNormalization after every Conv) trained with batch statistics, frozen, exported and
//! run on the integer engine, which exact mode must equal on every held-out image.

use std::collections::HashMap;

use quantkit_graph::ops::OpKind;
use quantkit_graph::{AttrValue, DType, Graph, Node, Tensor as GTensor, ValueInfo};
use quantkit_train::graph::{FakeQuant, GraphNet};
use quantkit_train::losses::LossKind;
use quantkit_train::optim::Adam;
use quantkit_train::qat::{LabelTerm, OutputLoss, OutputTerm, Qat, QatOptions};

mod common;
use common::{root, sample, Lcg};

/// LSQ+: the zero-point gradient is `−s·g` summed over the clipped elements (in code units,
/// times LSQ's gradient scale), checked against central differences of the fake-quant
/// output with the clip decision frozen at the forward's (the straight-through estimator of
/// the rounding of `z`, as the LSQ scale test freezes the rounding of `x/s`).
#[test]
fn lsq_plus_zero_point_gradient_matches_finite_differences() {
    let mut rng = Lcg(7);
    // [N = 3, C = 2, 4] activations, one scale and zero point per tensor.
    let shape = [3usize, 2, 4];
    let x: Vec<f32> = rng.vec(24, 1.2).into_iter().map(|v| v + 0.3).collect();
    let g = rng.vec(24, 1.0);
    for (z0, s) in [(3i32, 0.11f32), (0, 0.07), (12, 0.2)] {
        let fq = FakeQuant {
            tensor: "a".into(),
            axis: None,
            zero_points: vec![z0],
            qmin: 0,
            qmax: 15,
            learn_scale: true,
            is_weight: false,
        };
        let dz = fq.backward_zero_point(&x, &shape, &[s], &g);
        let clipped = x
            .iter()
            .filter(|&&v| {
                let c = (v / s).round_ties_even() + z0 as f32;
                !(0.0..=15.0).contains(&c)
            })
            .count();
        assert!(clipped > 0, "the case clips something (z = {z0})");
        assert!(clipped < x.len(), "and keeps something (z = {z0})");
        let surrogate = |z: f64| -> f64 {
            x.iter()
                .zip(&g)
                .map(|(&v, &gi)| {
                    let r = (v / s).round_ties_even() as f64;
                    let code = r + z0 as f64;
                    let q = if code < 0.0 {
                        0.0
                    } else if code > 15.0 {
                        15.0
                    } else {
                        r + z
                    };
                    gi as f64 * (q - z) * s as f64
                })
                .sum()
        };
        let gs = 1.0 / ((8.0 * 15.0f64).sqrt());
        let h = 1e-3;
        let num = (surrogate(z0 as f64 + h) - surrogate(z0 as f64 - h)) / (2.0 * h) * gs;
        assert!(
            (num - dz[0] as f64).abs() < 1e-5 + 1e-4 * num.abs(),
            "z = {z0}: analytic {} numeric {num}",
            dz[0]
        );
    }
}

/// Conv → BatchNormalization (training mode: batch statistics) → Sigmoid → Flatten → Gemm,
/// the shape QAT trains before the freeze. Every parameter's gradient (the Conv's weight
/// through the batch mean and variance, its bias — zero, the batch mean removes it — and
/// the BatchNormalization's scale and bias) against central differences of the loss.
#[test]
fn batch_statistics_bn_gradients_match_finite_differences() {
    let mut rng = Lcg(11);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs
        .push(ValueInfo::new("x", DType::F32, &[3, 2, 5, 5]));
    let init = |g: &mut Graph, n: &str, shape: &[usize], v: Vec<f32>| {
        g.initializers.insert(n.into(), GTensor::from_f32(shape, v));
    };
    init(&mut g, "w", &[3, 2, 3, 3], rng.vec(54, 0.4));
    init(&mut g, "b", &[3], rng.vec(3, 0.3));
    init(&mut g, "gamma", &[3], vec![0.9, 1.3, 0.6]);
    init(&mut g, "beta", &[3], vec![0.1, -0.2, 0.3]);
    init(&mut g, "mean", &[3], vec![0.0; 3]);
    init(&mut g, "var", &[3], vec![1.0; 3]);
    init(&mut g, "fw", &[4, 12], rng.vec(48, 0.5));
    init(&mut g, "fb", &[4], rng.vec(4, 0.1));
    g.nodes.push(
        Node::of(OpKind::Conv, "conv", &["x", "w", "b"], &["c"])
            .with_attr("strides", AttrValue::Ints(vec![2, 2])),
    );
    g.nodes.push(
        Node::of(
            OpKind::BatchNormalization,
            "bn",
            &["c", "gamma", "beta", "mean", "var"],
            &["n", "mean_next", "var_next"],
        )
        .with_attr("training_mode", AttrValue::Int(1)),
    );
    g.nodes
        .push(Node::of(OpKind::Sigmoid, "act", &["n"], &["a"]));
    g.nodes
        .push(Node::of(OpKind::Flatten, "flat", &["a"], &["f"]));
    g.nodes.push(
        Node::of(OpKind::Gemm, "fc", &["f", "fw", "fb"], &["y"])
            .with_attr("transB", AttrValue::Int(1)),
    );
    g.outputs.push(ValueInfo::new("y", DType::F32, &[3, 4]));
    let mut net = GraphNet::build(&g, &HashMap::new(), &HashMap::new()).unwrap();
    let x = GTensor::from_f32(&[3, 2, 5, 5], rng.vec(150, 1.0));
    let labels = [1usize, 3, 0];
    let loss_of = |net: &GraphNet| -> f64 {
        let v = net.forward(vec![x.clone()]).unwrap();
        let y = net.outputs(&v)[0].to_f32_vec();
        quantkit_train::losses::cross_entropy(&y, 4, &labels).0 as f64
    };
    let v = net.forward(vec![x.clone()]).unwrap();
    let y = net.outputs(&v)[0].to_f32_vec();
    let (_, seed) = quantkit_train::losses::cross_entropy(&y, 4, &labels);
    net.params.zero_grad();
    net.backward(&v, vec![Some(seed)]).unwrap();
    drop(v);
    let names: Vec<String> = net.params.iter().map(|p| p.name.clone()).collect();
    for want in ["w", "b", "gamma", "beta", "fw", "fb"] {
        assert!(names.iter().any(|n| n == want), "{want} trains: {names:?}");
    }
    for (id, name) in names.iter().enumerate() {
        let grad = net.params.get(id).grad.data().to_vec();
        for (j, &gj) in grad.iter().enumerate() {
            let h = 1e-2;
            let mut p = net.clone();
            p.params.get_mut(id).value.data_mut()[j] += h;
            let mut m = net.clone();
            m.params.get_mut(id).value.data_mut()[j] -= h;
            let num = (loss_of(&p) - loss_of(&m)) / (2.0 * h as f64);
            assert!(
                (num - gj as f64).abs() < 2e-3 + 2e-2 * num.abs(),
                "{name}[{j}]: analytic {gj} numeric {num}"
            );
            if name == "b" {
                assert!(gj.abs() < 1e-5, "the batch mean removes the bias: {gj}");
            }
        }
    }
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

/// The weight code initializers of an exported QDQ graph (weights: more than one code).
fn weight_codes(g: &Graph) -> Vec<(String, Vec<i64>)> {
    let mut v: Vec<(String, Vec<i64>)> = g
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::DequantizeLinear))
        .filter_map(|n| {
            let t = g.initializers.get(&n.inputs[0])?;
            (t.len() > 1 && t.dtype != DType::I32).then(|| (n.inputs[0].clone(), t.to_i64_vec()))
        })
        .collect();
    v.sort();
    v
}

/// MobileNet (a BatchNormalization after each of its 11 Conv layers) at W4A4 with LSQ+,
/// trained with batch statistics, then frozen: before the freeze the running statistics
/// move and the export is the folded model; the fold keeps the weight codes (the
/// per-channel weight scales follow the weights); after the freeze and more training
/// (with distillation together with the labels), exact mode equals the integer engine on
/// the exported file on every held-out image, logits bit for bit.
#[test]
fn mobilenet_bn_batch_statistics_freeze_and_export_equal_exact_mode() {
    let (x, labels) = sample();
    let mut float = quantkit_graph::load_model(root().join("models/mobilenet.onnx")).unwrap();
    let report = quantkit_ptq::prepare(&mut float).unwrap();
    let convs: Vec<String> = report
        .batch_norms_folded
        .iter()
        .map(|(_, p)| p.clone())
        .collect();
    assert_eq!(convs.len(), 11, "{convs:?}");
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
    let opts = QatOptions {
        weight_bits: 4,
        activation_bits: 4,
        lsq: true,
        lsq_plus: true,
        observer_steps: 2,
        bn_batch_stats: convs,
        ..Default::default()
    };
    let mut qat = Qat::from_ptq(&float, &qdq, &opts).unwrap();
    assert!(qat.bn_batch_active());
    let per = 784;
    let batch = 32;
    let xb = |b: usize| {
        GTensor::from_f32(
            &[batch, 1, 28, 28],
            x[b * batch * per..(b + 1) * batch * per].to_vec(),
        )
    };
    // Before any step the batch-statistics BatchNormalizations are not initialised: the
    // export is PTQ's model.
    let before = qat.export().unwrap();
    let mut opt = Adam::new(0.0);
    for b in 0..4 {
        let (l, _) = qat
            .train_step(
                &mut opt,
                xb(b),
                LossKind::CrossEntropy,
                Some(&labels[b * batch..(b + 1) * batch]),
                None,
                1e-3,
            )
            .unwrap();
        assert!(l.is_finite());
    }
    // The export folds the (moved) running statistics: different biases from PTQ's.
    let mid = qat.export().unwrap();
    assert_eq!(
        weight_codes(&before).len(),
        12,
        "11 Conv layers and the Gemm"
    );
    let bias_of = |g: &Graph| -> Vec<i64> {
        g.initializers
            .values()
            .filter(|t| t.dtype == DType::I32)
            .flat_map(|t| t.to_i64_vec())
            .collect()
    };
    assert_ne!(bias_of(&before), bias_of(&mid), "the fold moved the biases");
    // Exact mode refuses the unfolded model; the folded copy is what was exported.
    let plan = quantkit_engine::compile(&mid, &Default::default()).unwrap();
    let e = qat
        .exact_plan(&mid, &plan, quantkit_engine::RequantMode::Float)
        .expect_err("not folded yet");
    assert!(e.to_string().contains("with_bn_folded"), "{e}");
    // The fold multiplies a channel's weights and its scale by the same |k|: the codes the
    // fake-quant computes before the fold are the exported ones (up to ties of the
    // division), and freezing gives the export made before it.
    let unfolded: Vec<Vec<i64>> = qat
        .net
        .fake_quants()
        .filter(|(_, f, ..)| f.is_weight)
        .map(|(_, f, xs, ss)| {
            let w = qat.net.stored(xs).unwrap().to_f32_vec();
            let s = qat.net.stored(ss).unwrap().to_f32_vec();
            let inner = w.len() / s.len();
            w.iter()
                .enumerate()
                .map(|(i, &v)| {
                    (v / s[i / inner])
                        .round_ties_even()
                        .clamp(f.qmin as f32, f.qmax as f32) as i64
                })
                .collect()
        })
        .collect();
    let (mut same, mut total) = (0usize, 0usize);
    for (name, codes) in weight_codes(&mid) {
        let best = unfolded
            .iter()
            .filter(|u| u.len() == codes.len())
            .map(|u| u.iter().zip(&codes).filter(|(a, b)| a == b).count())
            .max()
            .unwrap_or_else(|| panic!("`{name}`: no weight of {} codes", codes.len()));
        same += best;
        total += codes.len();
    }
    assert!(
        same * 1000 >= total * 999,
        "the fold changed {} of {total} weight codes",
        total - same
    );
    eprintln!("weight codes kept by the fold: {same}/{total}");
    qat.freeze_bn().unwrap();
    assert!(!qat.bn_batch_active());
    let frozen = qat.export().unwrap();
    assert_eq!(weight_codes(&frozen), weight_codes(&mid));
    assert_eq!(bias_of(&frozen), bias_of(&mid));
    // After the freeze: distillation together with the labels.
    let name = float.inputs[0].name.clone();
    let teacher = |xb: &GTensor| -> Vec<Vec<f32>> {
        quantkit_graph::execute(&float, vec![(name.clone(), xb.clone())])
            .unwrap()
            .into_iter()
            .map(|(_, t)| t.to_f32_vec())
            .collect()
    };
    for b in 4..8 {
        let xbb = xb(b);
        let t = teacher(&xbb);
        let (l, parts, _) = qat
            .train_step_outputs_labels(
                &mut opt,
                xbb,
                &t,
                &[OutputTerm {
                    loss: OutputLoss::KlLogits { temperature: 1.0 },
                    weight: 1.0,
                }],
                Some(LabelTerm {
                    output: 0,
                    labels: &labels[b * batch..(b + 1) * batch],
                    weight: 1.0,
                }),
                1e-3,
            )
            .unwrap();
        assert!(
            l.is_finite() && l > parts[0],
            "CE adds to the KL: {l} vs {parts:?}"
        );
    }
    let out = qat.export().unwrap();
    let plan = quantkit_engine::compile(&out, &Default::default()).unwrap();
    let exact = qat
        .exact_plan(&out, &plan, quantkit_engine::RequantMode::Float)
        .unwrap();
    assert!(
        exact.not_reproduced.is_empty(),
        "{:?}",
        exact.not_reproduced
    );
    let held = 1000 - 8 * batch;
    let xe = GTensor::from_f32(&[held, 1, 28, 28], x[8 * batch * per..].to_vec());
    let ey = plan
        .run(vec![(out.inputs[0].name.clone(), xe.clone())])
        .unwrap()
        .remove(0)
        .1;
    let xy = qat.predict_exact(xe, &exact).unwrap();
    assert_eq!(top1(&xy), top1(&ey), "exact-mode top-1 = engine top-1");
    assert_eq!(
        xy.to_f32_vec(),
        ey.to_f32_vec(),
        "exact-mode logits are the engine's"
    );
    // LSQ+ moved at least one zero point away from the observers' choice, or kept it: the
    // exported zero points are integers in the code range either way.
    for n in out.nodes.iter().filter(|n| n.is(OpKind::QuantizeLinear)) {
        let z = out.initializers[&n.inputs[2]].to_i64_vec()[0];
        assert!((0..=255).contains(&z), "`{}`: zero point {z}", n.name);
    }
}

/// Distillation together with labels on a Softmax output: the CE term is `−ln p_label`,
/// its gradient reaches the logits as `p − onehot` (checked through the loss value: the
/// total is the KL plus the weighted CE), and a label beyond the classes is an error.
#[test]
fn ce_weight_checks_labels() {
    let (x, labels) = sample();
    let mut float = quantkit_graph::load_model(root().join("models/lenet.onnx")).unwrap();
    quantkit_ptq::prepare(&mut float).unwrap();
    let mut calib = quantkit_data::open_data(
        root().join("data/fashion-mnist-sample"),
        &quantkit_data::OpenOptions::default(),
    )
    .unwrap();
    let cfg = quantkit_ptq::PtqConfig {
        calib_samples: Some(64),
        ..Default::default()
    };
    let (qdq, _) =
        quantkit_ptq::quantize_static(float.clone(), &mut calib, &cfg, &mut |_, _| {}).unwrap();
    let mut qat = Qat::from_ptq(&float, &qdq, &QatOptions::default()).unwrap();
    let xb = GTensor::from_f32(&[4, 1, 28, 28], x[..4 * 784].to_vec());
    let name = float.inputs[0].name.clone();
    let t: Vec<Vec<f32>> = quantkit_graph::execute(&float, vec![(name, xb.clone())])
        .unwrap()
        .into_iter()
        .map(|(_, t)| t.to_f32_vec())
        .collect();
    let terms = [OutputTerm {
        loss: OutputLoss::KlLogits { temperature: 1.0 },
        weight: 1.0,
    }];
    let bad = [0usize, 1, 10, 2];
    let mut opt = Adam::new(0.0);
    let e = qat
        .train_step_outputs_labels(
            &mut opt,
            xb.clone(),
            &t,
            &terms,
            Some(LabelTerm {
                output: 0,
                labels: &bad,
                weight: 1.0,
            }),
            1e-4,
        )
        .expect_err("label 10 of 10 classes");
    assert!(e.to_string().contains("label 10"), "{e}");
    let y = qat.predict(xb.clone()).unwrap().to_f32_vec();
    let (ce, _) = quantkit_train::losses::cross_entropy(&y, 10, &labels[..4]);
    let (kl, _) = quantkit_train::losses::distill_kl(&y, &t[0], 10, 1.0);
    let (l, parts, _) = qat
        .train_step_outputs_labels(
            &mut opt,
            xb,
            &t,
            &terms,
            Some(LabelTerm {
                output: 0,
                labels: &labels[..4],
                weight: 0.5,
            }),
            1e-4,
        )
        .unwrap();
    assert!((parts[0] - kl).abs() < 1e-5, "{parts:?} vs {kl}");
    assert!((l - (kl + 0.5 * ce)).abs() < 1e-4, "{l} vs {kl} + 0.5·{ce}");
}
