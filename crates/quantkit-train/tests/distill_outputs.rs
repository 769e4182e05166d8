//! Distillation of every output of a multi-output model (issue 17, the MTCNN O-Net case):
//! a small two-headed network (a raw regressor and a Softmax classifier over a shared
//! hidden layer) is quantized at W4A8, its student weights perturbed, and trained against
//! the float teacher with `Qat::train_step_outputs` — normalised MSE on the regressor, KL
//! on the Softmax's probabilities. The loss falls on each output, and an output with
//! weight 0 leaves its own head untouched while weight 1 trains it.

use quantkit_graph::{AttrValue, DType, Dim, Graph, Node, OpKind, Tensor as GTensor, ValueInfo};
use quantkit_train::optim::Adam;
use quantkit_train::qat::{OutputLoss, OutputTerm, Qat};

mod common;
use common::Lcg;

const IN: usize = 6;
const HID: usize = 16;

fn value(name: &str, k: usize) -> ValueInfo {
    let mut v = ValueInfo::new(name, DType::F32, &[1, k]);
    v.shape = Some(vec![Dim::Symbolic("N".into()), Dim::Known(k)]);
    v
}

/// x → Gemm → Relu → h; h → Gemm → `reg` [N, 3]; h → Gemm → Softmax → `prob` [N, 4].
fn two_heads(seed: u64, scale: f32) -> Graph {
    let mut rng = Lcg(seed);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs.push(value("x", IN));
    for (name, shape) in [("w1", [HID, IN]), ("w2", [3, HID]), ("w3", [4, HID])] {
        let n = shape[0] * shape[1];
        g.initializers.insert(
            name.into(),
            GTensor::from_f32(&shape, rng.vec(n, scale / (shape[1] as f32).sqrt())),
        );
    }
    for (name, n) in [("b1", HID), ("b2", 3), ("b3", 4)] {
        g.initializers
            .insert(name.into(), GTensor::from_f32(&[n], rng.vec(n, 0.1)));
    }
    let gemm = |name: &str, ins: &[&str], out: &str| {
        Node::of(OpKind::Gemm, name, ins, &[out]).with_attr("transB", AttrValue::Int(1))
    };
    g.nodes.push(gemm("fc1", &["x", "w1", "b1"], "a"));
    g.nodes.push(Node::of(OpKind::Relu, "relu", &["a"], &["h"]));
    g.nodes.push(gemm("reg_fc", &["h", "w2", "b2"], "reg"));
    g.nodes.push(gemm("cls_fc", &["h", "w3", "b3"], "logits"));
    g.nodes.push(
        Node::of(OpKind::Softmax, "softmax", &["logits"], &["prob"])
            .with_attr("axis", AttrValue::Int(-1)),
    );
    g.outputs.push(value("reg", 3));
    g.outputs.push(value("prob", 4));
    g
}

fn data(n: usize) -> Vec<f32> {
    Lcg(99).vec(n * IN, 1.5)
}

/// The student: the teacher's weights plus noise, PTQ-quantized at W4A8 on `x`.
fn student(teacher: &Graph, x: &[f32], n: usize) -> Qat {
    common::student(teacher, x, &[n, IN], &["w1", "w2", "w3"])
}

fn teacher_outputs(g: &Graph, x: &[f32], n: usize) -> Vec<Vec<f32>> {
    quantkit_graph::execute(
        g,
        vec![("x".into(), GTensor::from_f32(&[n, IN], x.to_vec()))],
    )
    .unwrap()
    .into_iter()
    .map(|(_, t)| t.to_f32_vec())
    .collect()
}

fn variance(v: &[f32]) -> f32 {
    let n = v.len() as f64;
    let m = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
    (v.iter().map(|&x| (f64::from(x) - m).powi(2)).sum::<f64>() / n) as f32
}

fn param(q: &Qat, name: &str) -> Vec<f32> {
    q.net
        .params
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no parameter `{name}`"))
        .value
        .data()
        .to_vec()
}

/// Trains `steps` batches of 32 with `terms`; returns the per-output losses of each step.
fn train(
    q: &mut Qat,
    teacher: &Graph,
    x: &[f32],
    n: usize,
    terms: &[OutputTerm],
    steps: usize,
) -> Vec<Vec<f32>> {
    let mut opt = Adam::new(0.0);
    let batch = 32;
    let mut hist = Vec::new();
    for s in 0..steps {
        let b = s % (n / batch);
        let xb = &x[b * batch * IN..(b + 1) * batch * IN];
        let t = teacher_outputs(teacher, xb, batch);
        let (l, parts, outs) = q
            .train_step_outputs(
                &mut opt,
                GTensor::from_f32(&[batch, IN], xb.to_vec()),
                &t,
                terms,
                3e-3,
            )
            .unwrap();
        assert!(l.is_finite());
        assert_eq!(outs.len(), 2);
        hist.push(parts);
    }
    hist
}

fn mean(h: &[Vec<f32>], i: usize) -> f32 {
    h.iter().map(|p| p[i]).sum::<f32>() / h.len() as f32
}

#[test]
fn every_output_is_distilled() {
    let n = 256;
    let x = data(n);
    let teacher = two_heads(1, 1.5);
    let mut q = student(&teacher, &x, n);
    assert_eq!(q.softmax_probs_of(0), None, "`reg` is a raw regressor");
    assert_eq!(q.softmax_probs_of(1).as_deref(), Some("prob"));
    let all = teacher_outputs(&teacher, &x, n);
    let terms = [
        OutputTerm {
            loss: OutputLoss::Mse {
                norm: variance(&all[0]),
            },
            weight: 1.0,
        },
        OutputTerm {
            loss: OutputLoss::KlProbs { temperature: 1.0 },
            weight: 1.0,
        },
    ];
    let h = train(&mut q, &teacher, &x, n, &terms, 240);
    let (first, last) = (&h[..8], &h[h.len() - 8..]);
    for (i, name) in ["reg (MSE / variance)", "prob (KL)"].iter().enumerate() {
        let (a, b) = (mean(first, i), mean(last, i));
        eprintln!("{name}: {a:.5} → {b:.5}");
        assert!(
            a > 0.0,
            "{name}: the perturbed student starts away from the teacher"
        );
        assert!(b < 0.5 * a, "{name}: the loss fell from {a} only to {b}");
    }
}

#[test]
fn an_output_with_weight_zero_leaves_its_head_alone() {
    let n = 128;
    let x = data(n);
    let teacher = two_heads(1, 1.5);
    let terms = |w0: f32| {
        [
            OutputTerm {
                loss: if w0 == 0.0 {
                    OutputLoss::Ignore
                } else {
                    OutputLoss::Mse { norm: 1.0 }
                },
                weight: w0,
            },
            OutputTerm {
                loss: OutputLoss::KlProbs { temperature: 1.0 },
                weight: 1.0,
            },
        ]
    };
    for w0 in [0.0, 1.0] {
        let mut q = student(&teacher, &x, n);
        let (w2, w3) = (param(&q, "w2"), param(&q, "w3"));
        train(&mut q, &teacher, &x, n, &terms(w0), 8);
        assert_ne!(param(&q, "w3"), w3, "the classifier head trains");
        if w0 == 0.0 {
            assert_eq!(
                param(&q, "w2"),
                w2,
                "an ignored output's head does not move"
            );
        } else {
            assert_ne!(param(&q, "w2"), w2, "a distilled output's head trains");
        }
    }
}

#[test]
fn a_kl_term_on_a_regressor_is_an_error() {
    let n = 64;
    let x = data(n);
    let teacher = two_heads(1, 1.5);
    let mut q = student(&teacher, &x, n);
    let t = teacher_outputs(&teacher, &x[..32 * IN], 32);
    let terms = [
        OutputTerm {
            loss: OutputLoss::KlProbs { temperature: 1.0 },
            weight: 1.0,
        },
        OutputTerm {
            loss: OutputLoss::KlProbs { temperature: 1.0 },
            weight: 1.0,
        },
    ];
    let e = q
        .train_step_outputs(
            &mut Adam::new(0.0),
            GTensor::from_f32(&[32, IN], x[..32 * IN].to_vec()),
            &t,
            &terms,
            1e-3,
        )
        .unwrap_err();
    assert!(e.to_string().contains("output 0"), "{e}");
}
