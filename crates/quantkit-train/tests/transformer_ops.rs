//! QAT through the operators of models quantkit-train had not seen (issue 17, PP-OCRv4's
//! text recognizer and detector), on small synthetic graphs that train in seconds:
//!
//! - an SVTR-like block: MatMul, a LayerNormalization written out as
//!   ReduceMean/Sub/Pow/Sqrt/Div, a data Slice, a dynamic Reshape whose shape comes from
//!   `Shape → Slice → Cast → Concat` (int64 tensors on the tape, no gradient asked of them),
//!   and a per-frame Softmax output `[N, T, C]` distilled with the KL on probabilities;
//! - a detector-like head: Conv, nearest Resize ×2, Conv, Sigmoid: a probability map
//!   distilled with the normalised MSE (`Qat::sigmoid_probs_of` finds it).
//!
//! The student's weights are perturbed after PTQ at W4A8; training must halve the loss.

use quantkit_graph::{AttrValue, DType, Dim, Graph, Node, OpKind, Tensor as GTensor, ValueInfo};
use quantkit_train::optim::Adam;
use quantkit_train::qat::{OutputLoss, OutputTerm, Qat};

mod common;
use common::{student, Lcg};

const T: usize = 4;
const D: usize = 6;
const H: usize = 8;
const C: usize = 5;

fn value(name: &str, dims: &[usize]) -> ValueInfo {
    let mut v = ValueInfo::new(name, DType::F32, dims);
    let mut shape = vec![Dim::Symbolic("N".into())];
    shape.extend(dims[1..].iter().map(|&d| Dim::Known(d)));
    v.shape = Some(shape);
    v
}

fn init(g: &mut Graph, name: &str, t: GTensor) {
    g.initializers.insert(name.into(), t);
}

/// x [N, T, D] → MatMul → LayerNorm (written out) → ·γ + β → Slice (frames 1..T, then
/// the first frame again by Concat) → Reshape [N, −1] from `Shape(x)` → Reshape back
/// [N, T, H] → MatMul → Softmax over the classes: `prob` [N, T, C].
fn svtr_like(seed: u64) -> Graph {
    let mut rng = Lcg(seed);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs.push(value("x", &[1, T, D]));
    init(
        &mut g,
        "w1",
        GTensor::from_f32(&[D, H], rng.vec(D * H, 0.6)),
    );
    init(
        &mut g,
        "w2",
        GTensor::from_f32(&[H, C], rng.vec(H * C, 0.8)),
    );
    init(
        &mut g,
        "gamma",
        GTensor::from_f32(&[H], rng.vec(H, 0.3).iter().map(|v| v + 1.0).collect()),
    );
    init(&mut g, "beta", GTensor::from_f32(&[H], rng.vec(H, 0.2)));
    init(&mut g, "two", GTensor::from_f32(&[], vec![2.0]));
    init(&mut g, "eps", GTensor::from_f32(&[], vec![1e-5]));
    init(&mut g, "i0", GTensor::from_i64(&[1], vec![0]));
    init(&mut g, "i1", GTensor::from_i64(&[1], vec![1]));
    init(&mut g, "iT", GTensor::from_i64(&[1], vec![T as i64]));
    init(&mut g, "minus1", GTensor::from_i64(&[1], vec![-1]));
    init(
        &mut g,
        "tail",
        GTensor::from_i64(&[2], vec![T as i64, H as i64]),
    );
    let mean = |name: &str, x: &str, y: &str| {
        Node::of(OpKind::ReduceMean, name, &[x], &[y]).with_attr("axes", AttrValue::Ints(vec![-1]))
    };
    g.nodes.extend([
        Node::of(OpKind::MatMul, "fc1", &["x", "w1"], &["a"]),
        mean("mu", "a", "mu"),
        Node::of(OpKind::Sub, "centre", &["a", "mu"], &["c"]),
        Node::of(OpKind::Pow, "square", &["c", "two"], &["c2"]),
        mean("var", "c2", "var"),
        Node::of(OpKind::Add, "var_eps", &["var", "eps"], &["ve"]),
        Node::of(OpKind::Sqrt, "std", &["ve"], &["sd"]),
        Node::of(OpKind::Div, "norm", &["c", "sd"], &["n"]),
        Node::of(OpKind::Mul, "scale", &["n", "gamma"], &["ns"]),
        Node::of(OpKind::Add, "shift", &["ns", "beta"], &["ln"]),
        // Rotate the frames by one: Slice [1, T) and [0, 1) along axis 1, Concat.
        Node::of(OpKind::Slice, "later", &["ln", "i1", "iT", "i1"], &["s1"]),
        Node::of(OpKind::Slice, "first", &["ln", "i0", "i1", "i1"], &["s0"]),
        Node::of(OpKind::Concat, "rotate", &["s1", "s0"], &["r"])
            .with_attr("axis", AttrValue::Int(1)),
        // The batch dimension at run time, as exporters write a dynamic Reshape.
        Node::of(OpKind::Shape, "shape", &["x"], &["sh"]),
        Node::of(OpKind::Slice, "batch", &["sh", "i0", "i1", "i0"], &["nb32"]),
        Node::of(OpKind::Cast, "batch_i64", &["nb32"], &["nb"]).with_attr("to", AttrValue::Int(7)),
        Node::of(OpKind::Concat, "flat_shape", &["nb", "minus1"], &["fs"])
            .with_attr("axis", AttrValue::Int(0)),
        Node::of(OpKind::Reshape, "flatten", &["r", "fs"], &["flat"]),
        Node::of(OpKind::Concat, "frame_shape", &["nb", "tail"], &["ts"])
            .with_attr("axis", AttrValue::Int(0)),
        Node::of(OpKind::Reshape, "unflatten", &["flat", "ts"], &["frames"]),
        Node::of(OpKind::MatMul, "fc2", &["frames", "w2"], &["logits"]),
        Node::of(OpKind::Softmax, "softmax", &["logits"], &["prob"])
            .with_attr("axis", AttrValue::Int(-1)),
    ]);
    g.outputs.push(value("prob", &[1, T, C]));
    g
}

/// x [N, 2, 4, 4] → Conv 3×3 → Relu → Resize nearest ×2 (asymmetric, floor, as PP-OCR
/// det) → Conv 3×3 → Sigmoid: `map` [N, 1, 8, 8].
fn det_like(seed: u64) -> Graph {
    let mut rng = Lcg(seed);
    let mut g = Graph {
        opset_imports: vec![(String::new(), 17)],
        ..Default::default()
    };
    g.inputs.push(value("x", &[1, 2, 4, 4]));
    init(
        &mut g,
        "w1",
        GTensor::from_f32(&[4, 2, 3, 3], rng.vec(72, 0.5)),
    );
    init(&mut g, "b1", GTensor::from_f32(&[4], rng.vec(4, 0.1)));
    init(
        &mut g,
        "w2",
        GTensor::from_f32(&[1, 4, 3, 3], rng.vec(36, 0.5)),
    );
    init(&mut g, "b2", GTensor::from_f32(&[1], rng.vec(1, 0.1)));
    init(&mut g, "roi", GTensor::from_f32(&[0], vec![]));
    init(
        &mut g,
        "scales",
        GTensor::from_f32(&[4], vec![1.0, 1.0, 2.0, 2.0]),
    );
    let conv = |name: &str, ins: &[&str], out: &str| {
        Node::of(OpKind::Conv, name, ins, &[out]).with_attr("pads", AttrValue::Ints(vec![1; 4]))
    };
    let s = |v: &str| AttrValue::String(v.as_bytes().to_vec());
    g.nodes.extend([
        conv("conv1", &["x", "w1", "b1"], "a"),
        Node::of(OpKind::Relu, "relu", &["a"], &["h"]),
        Node::of(OpKind::Resize, "up", &["h", "roi", "scales"], &["u"])
            .with_attr("mode", s("nearest"))
            .with_attr("coordinate_transformation_mode", s("asymmetric"))
            .with_attr("nearest_mode", s("floor")),
        conv("conv2", &["u", "w2", "b2"], "z"),
        Node::of(OpKind::Sigmoid, "sigmoid", &["z"], &["map"]),
    ]);
    g.outputs.push(value("map", &[1, 1, 8, 8]));
    g
}

/// Trains batches of 16 against the teacher; returns the loss of every step.
fn train(
    q: &mut Qat,
    teacher: &Graph,
    x: &[f32],
    shape: &[usize],
    term: OutputTerm,
    steps: usize,
) -> Vec<f32> {
    let mut opt = Adam::new(0.0);
    let per: usize = shape[1..].iter().product();
    let batch = 16;
    let mut bshape = shape.to_vec();
    bshape[0] = batch;
    (0..steps)
        .map(|s| {
            let b = s % (shape[0] / batch);
            let xb = &x[b * batch * per..(b + 1) * batch * per];
            let t: Vec<Vec<f32>> = quantkit_graph::execute(
                teacher,
                vec![("x".into(), GTensor::from_f32(&bshape, xb.to_vec()))],
            )
            .unwrap()
            .into_iter()
            .map(|(_, t)| t.to_f32_vec())
            .collect();
            let (l, _, _) = q
                .train_step_outputs(
                    &mut opt,
                    GTensor::from_f32(&bshape, xb.to_vec()),
                    &t,
                    std::slice::from_ref(&term),
                    3e-3,
                )
                .unwrap();
            assert!(l.is_finite());
            l
        })
        .collect()
}

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

#[test]
fn svtr_like_block_trains_with_per_frame_kl() {
    let n = 64;
    let shape = [n, T, D];
    let x = Lcg(3).vec(n * T * D, 1.5);
    let teacher = svtr_like(1);
    let mut q = student(&teacher, &x, &shape, &["w1", "w2"]);
    assert_eq!(q.net.missing_backward(), None);
    assert!(
        q.softmax_probs_of(0).is_some(),
        "the [N, T, C] Softmax output"
    );
    assert_eq!(q.sigmoid_probs_of(0), None);
    let term = OutputTerm {
        loss: OutputLoss::KlProbs { temperature: 1.0 },
        weight: 1.0,
    };
    let h = train(&mut q, &teacher, &x, &shape, term, 80);
    let (first, last) = (mean(&h[..4]), mean(&h[h.len() - 4..]));
    assert!(last < 0.5 * first, "KL {first} → {last}");
}

#[test]
fn det_like_head_trains_with_mse_on_the_probability_map() {
    let n = 64;
    let shape = [n, 2, 4, 4];
    let x = Lcg(4).vec(n * 32, 1.0);
    let teacher = det_like(2);
    let mut q = student(&teacher, &x, &shape, &["w1", "w2"]);
    assert_eq!(q.net.missing_backward(), None);
    assert_eq!(q.softmax_probs_of(0), None);
    assert!(
        q.sigmoid_probs_of(0).is_some(),
        "the Sigmoid map (before its output fake-quant)"
    );
    let teacher_map = quantkit_graph::execute(
        &teacher,
        vec![("x".into(), GTensor::from_f32(&shape, x.clone()))],
    )
    .unwrap()
    .remove(0)
    .1
    .to_f32_vec();
    let m = teacher_map.iter().sum::<f32>() / teacher_map.len() as f32;
    let var = teacher_map.iter().map(|v| (v - m) * (v - m)).sum::<f32>() / teacher_map.len() as f32;
    let term = OutputTerm {
        loss: OutputLoss::Mse { norm: var },
        weight: 1.0,
    };
    let h = train(&mut q, &teacher, &x, &shape, term, 80);
    let (first, last) = (mean(&h[..4]), mean(&h[h.len() - 4..]));
    assert!(last < 0.5 * first, "normalised MSE {first} → {last}");
}
