//! Every operator gradient (`OpDef::backward`) against central finite differences of the
//! operator's own `eval`, on shapes that exercise its attributes (groups, depthwise,
//! dilations, strides, pads, 1-D convolution, transposes, broadcasting, both
//! BatchNormalization modes), and a check that no registered gradient goes untested.

use quantkit_graph::ops::grad::GradIn;
use quantkit_graph::ops::{OpCtx, OpKind};
use quantkit_graph::{AttrValue, Node, Tensor};
use std::collections::BTreeSet;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    /// Values in [−scale, scale], kept at least `gap` away from the kinks in `kinks`
    /// (Relu's 0, HardSwish's ±3...), so a finite difference never straddles one.
    fn tensor(&mut self, shape: &[usize], scale: f32, kinks: &[f32], gap: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|_| loop {
                let v = self.next() * scale;
                if kinks.iter().all(|k| (v - k).abs() > gap) {
                    break v;
                }
            })
            .collect();
        Tensor::from_f32(shape, v)
    }
}

/// Distinct values 0.05 apart in a scrambled order (37 is prime to the sizes used), so no
/// max-pool window holds two values a finite difference could swap.
fn spaced(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_f32(
        shape,
        (0..n).map(|i| (i * 37 % n) as f32 * 0.05 - 1.0).collect(),
    )
}

fn eval(node: &Node, opset: i64, ins: &[Option<Tensor>]) -> Vec<f32> {
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
    let def = node.kind().unwrap().def();
    (def.eval)(&OpCtx { node, opset }, &refs).unwrap()[0].to_f32_vec()
}

/// Checks the gradients of inputs `diff` of `node` for the loss `Σ r·y` (random `r`).
fn check(node: Node, opset: i64, ins: Vec<Option<Tensor>>, diff: &[usize]) {
    let kind = node.kind().unwrap();
    let backward = kind
        .def()
        .backward
        .unwrap_or_else(|| panic!("{kind} has no backward"));
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
    let ctx = OpCtx { node: &node, opset };
    let y = (kind.def().eval)(&ctx, &refs).unwrap().remove(0);
    let mut rng = Lcg(99);
    let r: Vec<f32> = (0..y.len()).map(|_| rng.next()).collect();
    let needs: Vec<bool> = (0..ins.len()).map(|i| diff.contains(&i)).collect();
    let grads = backward(
        &ctx,
        &GradIn {
            inputs: &refs,
            output: &y,
            grad: &r,
            needs: &needs,
        },
    )
    .unwrap();
    assert_eq!(grads.len(), ins.len(), "{kind}: one entry per input");
    let loss = |ins: &[Option<Tensor>]| -> f64 {
        eval(&node, opset, ins)
            .iter()
            .zip(&r)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum()
    };
    for &i in diff {
        let g = grads[i]
            .as_ref()
            .unwrap_or_else(|| panic!("{kind}: no gradient for input {i}"));
        let x = ins[i].as_ref().unwrap();
        assert_eq!(g.shape, x.shape, "{kind}: gradient shape of input {i}");
        let g = g.to_f32_vec();
        let eps = 1e-2f32;
        for j in 0..x.len() {
            let mut v = x.to_f32_vec();
            let mut plus = ins.clone();
            v[j] += eps;
            plus[i] = Some(Tensor::from_f32(&x.shape, v.clone()));
            let mut minus = ins.clone();
            v[j] -= 2.0 * eps;
            minus[i] = Some(Tensor::from_f32(&x.shape, v));
            let num = (loss(&plus) - loss(&minus)) / (2.0 * eps as f64);
            let ana = g[j] as f64;
            assert!(
                (num - ana).abs() <= 2e-3 + 1e-2 * num.abs(),
                "{kind} `{}`: d/d input {i}[{j}]: analytic {ana}, numeric {num}",
                node.name
            );
        }
    }
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

fn conv_case(
    name: &str,
    x: &[usize],
    w: &[usize],
    attrs: &[(&str, AttrValue)],
    bias: bool,
    rng: &mut Lcg,
) {
    let mut node = Node::of(OpKind::Conv, name, &["x", "w", "b"], &["y"]);
    for (k, v) in attrs {
        node = node.with_attr(k, v.clone());
    }
    let ins = vec![
        Some(rng.tensor(x, 1.0, &[], 0.0)),
        Some(rng.tensor(w, 0.5, &[], 0.0)),
        bias.then(|| rng.tensor(&[w[0]], 0.5, &[], 0.0)),
    ];
    let diff: Vec<usize> = if bias { vec![0, 1, 2] } else { vec![0, 1] };
    check(node, 17, ins, &diff);
}

#[test]
fn conv_gradients() {
    let mut rng = Lcg(1);
    conv_case(
        "plain_pad",
        &[2, 3, 6, 5],
        &[4, 3, 3, 3],
        &[("pads", ints(&[1, 1, 1, 1]))],
        true,
        &mut rng,
    );
    conv_case(
        "strided_asym_pad",
        &[2, 2, 7, 6],
        &[3, 2, 3, 2],
        &[("strides", ints(&[2, 2])), ("pads", ints(&[1, 0, 0, 1]))],
        true,
        &mut rng,
    );
    conv_case(
        "dilated",
        &[1, 2, 7, 7],
        &[2, 2, 3, 3],
        &[("dilations", ints(&[2, 2])), ("pads", ints(&[2, 2, 2, 2]))],
        false,
        &mut rng,
    );
    conv_case(
        "grouped",
        &[2, 4, 5, 5],
        &[6, 2, 3, 3],
        &[("group", AttrValue::Int(2)), ("pads", ints(&[1, 1, 1, 1]))],
        true,
        &mut rng,
    );
    conv_case(
        "depthwise_multiplier_2",
        &[2, 3, 5, 6],
        &[6, 1, 3, 3],
        &[
            ("group", AttrValue::Int(3)),
            ("strides", ints(&[1, 2])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        true,
        &mut rng,
    );
    conv_case(
        "pointwise",
        &[3, 4, 3, 3],
        &[5, 4, 1, 1],
        &[],
        true,
        &mut rng,
    );
    // Six images: two chunks of the weight/bias gradient's fixed 4-image blocks.
    conv_case(
        "batch_across_chunks",
        &[6, 2, 5, 4],
        &[3, 2, 3, 3],
        &[("pads", ints(&[1, 1, 1, 1]))],
        true,
        &mut rng,
    );
    conv_case(
        "conv1d",
        &[2, 2, 9],
        &[3, 2, 3],
        &[("pads", ints(&[1, 2])), ("dilations", ints(&[2]))],
        true,
        &mut rng,
    );
    conv_case(
        "conv3d",
        &[1, 2, 4, 4, 3],
        &[2, 2, 2, 3, 2],
        &[("strides", ints(&[1, 1, 2]))],
        true,
        &mut rng,
    );
}

fn deconv_case(
    name: &str,
    x: &[usize],
    w: &[usize],
    attrs: &[(&str, AttrValue)],
    bias: bool,
    rng: &mut Lcg,
) {
    let mut node = Node::of(OpKind::ConvTranspose, name, &["x", "w", "b"], &["y"]);
    for (k, v) in attrs {
        node = node.with_attr(k, v.clone());
    }
    let group = attrs
        .iter()
        .find(|(k, _)| *k == "group")
        .map_or(1, |(_, v)| match v {
            AttrValue::Int(g) => *g as usize,
            _ => 1,
        });
    let ins = vec![
        Some(rng.tensor(x, 1.0, &[], 0.0)),
        Some(rng.tensor(w, 0.5, &[], 0.0)),
        bias.then(|| rng.tensor(&[w[1] * group], 0.5, &[], 0.0)),
    ];
    let diff: Vec<usize> = if bias { vec![0, 1, 2] } else { vec![0, 1] };
    check(node, 17, ins, &diff);
}

/// ConvTranspose: every attribute the forward supports (strides, dilations, asymmetric
/// pads, output_padding, groups incl. depthwise, auto_pad, output_shape, 1-D and 3-D, the
/// 1×1 case whose column buffer is ∂y itself, overlapping taps).
#[test]
fn conv_transpose_gradients() {
    let mut rng = Lcg(21);
    deconv_case(
        "k2_s2_autoencoder",
        &[2, 3, 4, 4],
        &[3, 2, 2, 2],
        &[("strides", ints(&[2, 2]))],
        true,
        &mut rng,
    );
    deconv_case(
        "k3_s2_overlap_pads_output_padding",
        &[2, 2, 3, 4],
        &[2, 3, 3, 3],
        &[
            ("strides", ints(&[2, 2])),
            ("pads", ints(&[1, 0, 0, 1])),
            ("output_padding", ints(&[1, 1])),
        ],
        true,
        &mut rng,
    );
    deconv_case(
        "dilated",
        &[1, 2, 4, 3],
        &[2, 2, 3, 2],
        &[("dilations", ints(&[2, 3])), ("pads", ints(&[1, 1, 2, 0]))],
        false,
        &mut rng,
    );
    deconv_case(
        "grouped",
        &[2, 4, 3, 3],
        &[4, 3, 3, 3],
        &[("group", AttrValue::Int(2)), ("strides", ints(&[2, 1]))],
        true,
        &mut rng,
    );
    deconv_case(
        "depthwise",
        &[2, 3, 4, 3],
        &[3, 1, 3, 3],
        &[("group", AttrValue::Int(3)), ("pads", ints(&[1, 1, 1, 1]))],
        true,
        &mut rng,
    );
    deconv_case(
        "pointwise",
        &[3, 4, 3, 2],
        &[4, 5, 1, 1],
        &[],
        true,
        &mut rng,
    );
    deconv_case(
        "same_upper",
        &[1, 2, 3, 3],
        &[2, 2, 3, 3],
        &[
            ("strides", ints(&[2, 2])),
            ("auto_pad", AttrValue::String("SAME_UPPER".into())),
        ],
        true,
        &mut rng,
    );
    deconv_case(
        "output_shape",
        &[1, 2, 3, 3],
        &[2, 1, 3, 3],
        &[("strides", ints(&[2, 2])), ("output_shape", ints(&[6, 7]))],
        false,
        &mut rng,
    );
    // Six images: two chunks of the weight/bias gradient's fixed 4-image blocks.
    deconv_case(
        "batch_across_chunks",
        &[6, 2, 3, 3],
        &[2, 2, 2, 2],
        &[("strides", ints(&[2, 2]))],
        true,
        &mut rng,
    );
    deconv_case(
        "deconv1d",
        &[2, 2, 5],
        &[2, 3, 3],
        &[("strides", ints(&[3])), ("pads", ints(&[1, 2]))],
        true,
        &mut rng,
    );
    deconv_case(
        "deconv3d",
        &[1, 2, 2, 3, 2],
        &[2, 2, 2, 2, 3],
        &[("strides", ints(&[1, 2, 2]))],
        true,
        &mut rng,
    );
}

/// ConvTranspose's weight and bias gradients are summed over fixed blocks of images, so
/// one thread and three give the same bits.
#[test]
fn conv_transpose_gradients_do_not_depend_on_thread_count() {
    let mut rng = Lcg(12);
    let node = Node::of(OpKind::ConvTranspose, "d", &["x", "w", "b"], &["y"])
        .with_attr("strides", ints(&[2, 2]))
        .with_attr("pads", ints(&[1, 1, 1, 1]));
    let ins = [
        Some(rng.tensor(&[13, 4, 5, 6], 1.0, &[], 0.0)),
        Some(rng.tensor(&[4, 3, 3, 3], 0.5, &[], 0.0)),
        Some(rng.tensor(&[3], 0.5, &[], 0.0)),
    ];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
    let ctx = OpCtx {
        node: &node,
        opset: 17,
    };
    let y = (OpKind::ConvTranspose.def().eval)(&ctx, &refs)
        .unwrap()
        .remove(0);
    let g: Vec<f32> = (0..y.len()).map(|_| rng.next()).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            (OpKind::ConvTranspose.def().backward.unwrap())(
                &ctx,
                &GradIn {
                    inputs: &refs,
                    output: &y,
                    grad: &g,
                    needs: &[true, true, true],
                },
            )
            .unwrap()
            .into_iter()
            .map(|t| t.unwrap().to_f32_vec())
            .collect::<Vec<_>>()
        })
    };
    assert_eq!(run(1), run(2));
    assert_eq!(run(1), run(3));
}

/// A gradient whose shape disagrees with the forward's output is an error, not a panic.
#[test]
fn conv_transpose_gradient_of_wrong_size_is_an_error() {
    let node = Node::of(OpKind::ConvTranspose, "d", &["x", "w"], &["y"]);
    let x = Tensor::from_f32(&[1, 1, 2, 2], vec![1.0; 4]);
    let w = Tensor::from_f32(&[1, 1, 2, 2], vec![1.0; 4]);
    let refs = [Some(&x), Some(&w)];
    let ctx = OpCtx {
        node: &node,
        opset: 17,
    };
    let r = (OpKind::ConvTranspose.def().backward.unwrap())(
        &ctx,
        &GradIn {
            inputs: &refs,
            output: &x,
            grad: &[0.0; 4],
            needs: &[true, true],
        },
    );
    assert!(r.is_err());
}

/// The Conv gradient sums weight and bias gradients over fixed blocks of images in a fixed
/// order, so one thread and two give the same bits (training is reproducible on any
/// machine).
#[test]
fn conv_gradients_do_not_depend_on_thread_count() {
    let mut rng = Lcg(11);
    let node = Node::of(OpKind::Conv, "c", &["x", "w", "b"], &["y"])
        .with_attr("pads", ints(&[1, 1, 1, 1]));
    let ins = [
        Some(rng.tensor(&[13, 3, 9, 7], 1.0, &[], 0.0)),
        Some(rng.tensor(&[8, 3, 3, 3], 0.5, &[], 0.0)),
        Some(rng.tensor(&[8], 0.5, &[], 0.0)),
    ];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Option::as_ref).collect();
    let ctx = OpCtx {
        node: &node,
        opset: 17,
    };
    let y = (OpKind::Conv.def().eval)(&ctx, &refs).unwrap().remove(0);
    let g: Vec<f32> = (0..y.len()).map(|_| rng.next()).collect();
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            (OpKind::Conv.def().backward.unwrap())(
                &ctx,
                &GradIn {
                    inputs: &refs,
                    output: &y,
                    grad: &g,
                    needs: &[true, true, true],
                },
            )
            .unwrap()
            .into_iter()
            .map(|t| t.unwrap().to_f32_vec())
            .collect::<Vec<_>>()
        })
    };
    assert_eq!(run(1), run(2));
    assert_eq!(run(1), run(3));
}

#[test]
fn gemm_and_matmul_gradients() {
    let mut rng = Lcg(2);
    for (ta, tb, cshape) in [
        (0, 0, vec![5usize]),
        (1, 0, vec![1, 5]),
        (0, 1, vec![3, 5]),
        (1, 1, vec![3, 1]),
    ] {
        let a = if ta == 1 { [4, 3] } else { [3, 4] };
        let b = if tb == 1 { [5, 4] } else { [4, 5] };
        let node = Node::of(OpKind::Gemm, "gemm", &["a", "b", "c"], &["y"])
            .with_attr("transA", AttrValue::Int(ta))
            .with_attr("transB", AttrValue::Int(tb))
            .with_attr("alpha", AttrValue::Float(0.7))
            .with_attr("beta", AttrValue::Float(1.3));
        let ins = vec![
            Some(rng.tensor(&a, 1.0, &[], 0.0)),
            Some(rng.tensor(&b, 1.0, &[], 0.0)),
            Some(rng.tensor(&cshape, 1.0, &[], 0.0)),
        ];
        check(node, 13, ins, &[0, 1, 2]);
    }
    for (a, b) in [
        (vec![3usize, 4], vec![4usize, 5]),
        (vec![2, 3, 4], vec![4, 5]),
        (vec![2, 3, 4], vec![2, 4, 5]),
    ] {
        let node = Node::of(OpKind::MatMul, "mm", &["a", "b"], &["y"]);
        let ins = vec![
            Some(rng.tensor(&a, 1.0, &[], 0.0)),
            Some(rng.tensor(&b, 1.0, &[], 0.0)),
        ];
        check(node, 13, ins, &[0, 1]);
    }
}

#[test]
fn activation_gradients() {
    let mut rng = Lcg(3);
    let sh = [2, 3, 4];
    check(
        Node::of(OpKind::Relu, "relu", &["x"], &["y"]),
        14,
        vec![Some(rng.tensor(&sh, 2.0, &[0.0], 0.05))],
        &[0],
    );
    check(
        Node::of(OpKind::Sigmoid, "sig", &["x"], &["y"]),
        13,
        vec![Some(rng.tensor(&sh, 3.0, &[], 0.0))],
        &[0],
    );
    check(
        Node::of(OpKind::HardSigmoid, "hsig", &["x"], &["y"])
            .with_attr("alpha", AttrValue::Float(0.3))
            .with_attr("beta", AttrValue::Float(0.4)),
        6,
        vec![Some(rng.tensor(&sh, 4.0, &[-0.4 / 0.3, 0.6 / 0.3], 0.05))],
        &[0],
    );
    check(
        Node::of(OpKind::HardSwish, "hswish", &["x"], &["y"]),
        14,
        vec![Some(rng.tensor(&sh, 5.0, &[-3.0, 3.0], 0.05))],
        &[0],
    );
    check(
        Node::of(OpKind::Clip, "clip", &["x", "lo", "hi"], &["y"]),
        13,
        vec![
            Some(rng.tensor(&sh, 1.0, &[-0.5, 0.6], 0.05)),
            Some(Tensor::scalar_f32(-0.5)),
            Some(Tensor::scalar_f32(0.6)),
        ],
        &[0],
    );
    check(
        Node::of(OpKind::PRelu, "prelu", &["x", "s"], &["y"]),
        9,
        vec![
            Some(rng.tensor(&[2, 3, 2, 2], 1.0, &[0.0], 0.05)),
            Some(rng.tensor(&[3, 1, 1], 0.5, &[], 0.0)),
        ],
        &[0, 1],
    );
    for axis in [-1i64, 1] {
        check(
            Node::of(OpKind::Softmax, "softmax", &["x"], &["y"])
                .with_attr("axis", AttrValue::Int(axis)),
            13,
            vec![Some(rng.tensor(&sh, 2.0, &[], 0.0))],
            &[0],
        );
    }
}

#[test]
fn pool_and_norm_gradients() {
    let mut rng = Lcg(4);
    let x = [2, 2, 5, 6];
    check(
        Node::of(OpKind::MaxPool, "max2", &["x"], &["y"])
            .with_attr("kernel_shape", ints(&[2, 2]))
            .with_attr("strides", ints(&[2, 2])),
        12,
        vec![Some(spaced(&x))],
        &[0],
    );
    check(
        Node::of(OpKind::MaxPool, "max3_pad", &["x"], &["y"])
            .with_attr("kernel_shape", ints(&[3, 3]))
            .with_attr("pads", ints(&[1, 1, 1, 1])),
        12,
        vec![Some(spaced(&x))],
        &[0],
    );
    for include in [0, 1] {
        check(
            Node::of(OpKind::AveragePool, "avg", &["x"], &["y"])
                .with_attr("kernel_shape", ints(&[3, 3]))
                .with_attr("strides", ints(&[2, 2]))
                .with_attr("pads", ints(&[1, 1, 1, 1]))
                .with_attr("count_include_pad", AttrValue::Int(include)),
            19,
            vec![Some(rng.tensor(&x, 1.0, &[], 0.0))],
            &[0],
        );
    }
    check(
        Node::of(OpKind::GlobalAveragePool, "gap", &["x"], &["y"]),
        1,
        vec![Some(rng.tensor(&x, 1.0, &[], 0.0))],
        &[0],
    );
    for training in [0, 1] {
        let var = Tensor::from_f32(&[2], vec![0.5, 1.7]);
        check(
            Node::of(
                OpKind::BatchNormalization,
                "bn",
                &["x", "s", "b", "m", "v"],
                &["y"],
            )
            .with_attr("training_mode", AttrValue::Int(training)),
            15,
            vec![
                Some(rng.tensor(&[3, 2, 2, 3], 1.0, &[], 0.0)),
                Some(rng.tensor(&[2], 1.0, &[], 0.0)),
                Some(rng.tensor(&[2], 1.0, &[], 0.0)),
                Some(rng.tensor(&[2], 0.3, &[], 0.0)),
                Some(var),
            ],
            &[0, 1, 2],
        );
    }
}

#[test]
fn arithmetic_and_layout_gradients() {
    let mut rng = Lcg(5);
    for kind in [OpKind::Add, OpKind::Mul] {
        check(
            Node::of(kind, "bin", &["a", "b"], &["y"]),
            14,
            vec![
                Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0)),
                Some(rng.tensor(&[3, 1], 1.0, &[], 0.0)),
            ],
            &[0, 1],
        );
    }
    // Div: a divisor kept away from 0 (|b| in [0.5, 1.5]).
    let b: Vec<f32> = rng
        .tensor(&[3, 1], 0.5, &[], 0.0)
        .to_f32_vec()
        .iter()
        .map(|v| if *v < 0.0 { v - 1.0 } else { v + 1.0 })
        .collect();
    check(
        Node::of(OpKind::Div, "div", &["a", "b"], &["y"]),
        14,
        vec![
            Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0)),
            Some(Tensor::from_f32(&[3, 1], b)),
        ],
        &[0, 1],
    );
    check(
        Node::of(OpKind::Concat, "cat", &["a", "b", "c"], &["y"])
            .with_attr("axis", AttrValue::Int(1)),
        13,
        vec![
            Some(rng.tensor(&[2, 1, 3], 1.0, &[], 0.0)),
            Some(rng.tensor(&[2, 3, 3], 1.0, &[], 0.0)),
            Some(rng.tensor(&[2, 2, 3], 1.0, &[], 0.0)),
        ],
        &[0, 1, 2],
    );
    check(
        Node::of(OpKind::Reshape, "reshape", &["x", "s"], &["y"]),
        14,
        vec![
            Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0)),
            Some(Tensor::from_i64(&[2], vec![4, -1])),
        ],
        &[0],
    );
    check(
        Node::of(OpKind::Flatten, "flatten", &["x"], &["y"]),
        13,
        vec![Some(rng.tensor(&[2, 3, 2, 2], 1.0, &[], 0.0))],
        &[0],
    );
    check(
        Node::of(OpKind::Identity, "id", &["x"], &["y"]),
        13,
        vec![Some(rng.tensor(&[3, 2], 1.0, &[], 0.0))],
        &[0],
    );
    check(
        Node::of(OpKind::Squeeze, "sq", &["x", "axes"], &["y"]),
        13,
        vec![
            Some(rng.tensor(&[3, 1, 2], 1.0, &[], 0.0)),
            Some(Tensor::from_i64(&[1], vec![1])),
        ],
        &[0],
    );
    check(
        Node::of(OpKind::Unsqueeze, "unsq", &["x", "axes"], &["y"]),
        13,
        vec![
            Some(rng.tensor(&[3, 2], 1.0, &[], 0.0)),
            Some(Tensor::from_i64(&[1], vec![0])),
        ],
        &[0],
    );
    check(
        Node::of(OpKind::Transpose, "tr", &["x"], &["y"]).with_attr("perm", ints(&[2, 0, 1])),
        13,
        vec![Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0))],
        &[0],
    );
}

/// The operators a LayerNormalization written out (ReduceMean/Sub/Pow/Sqrt/Div, as
/// PP-OCR's SVTR head has it), slicing, float casts and Resize in every mode.
#[test]
fn transformer_and_resize_gradients() {
    let mut rng = Lcg(6);
    check(
        Node::of(OpKind::Sub, "sub", &["a", "b"], &["y"]),
        14,
        vec![
            Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0)),
            Some(rng.tensor(&[3, 1], 1.0, &[], 0.0)),
        ],
        &[0, 1],
    );
    // Sqrt away from 0 (x in [0.5, 1.5]).
    let x: Vec<f32> = rng
        .tensor(&[2, 5], 0.5, &[], 0.0)
        .to_f32_vec()
        .iter()
        .map(|v| v + 1.0)
        .collect();
    check(
        Node::of(OpKind::Sqrt, "sqrt", &["x"], &["y"]),
        13,
        vec![Some(Tensor::from_f32(&[2, 5], x.clone()))],
        &[0],
    );
    // Pow: the constant square of a LayerNormalization (any sign of the base), and a
    // positive base with a broadcast, differentiated exponent.
    check(
        Node::of(OpKind::Pow, "square", &["x", "e"], &["y"]),
        15,
        vec![
            Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0)),
            Some(Tensor::from_f32(&[], vec![2.0])),
        ],
        &[0],
    );
    check(
        Node::of(OpKind::Pow, "pow", &["x", "e"], &["y"]),
        15,
        vec![
            Some(Tensor::from_f32(&[2, 5], x)),
            Some(rng.tensor(&[5], 1.5, &[], 0.0)),
        ],
        &[0, 1],
    );
    // ReduceMean over the last axis (attribute, opset 13), over two axes without keepdims,
    // and with the axes as an input (opset 18).
    check(
        Node::of(OpKind::ReduceMean, "mean_last", &["x"], &["y"]).with_attr("axes", ints(&[-1])),
        13,
        vec![Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0))],
        &[0],
    );
    check(
        Node::of(OpKind::ReduceMean, "mean_02", &["x"], &["y"])
            .with_attr("axes", ints(&[0, 2]))
            .with_attr("keepdims", AttrValue::Int(0)),
        13,
        vec![Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0))],
        &[0],
    );
    check(
        Node::of(OpKind::ReduceMean, "mean_in", &["x", "axes"], &["y"]),
        18,
        vec![
            Some(rng.tensor(&[2, 3, 4], 1.0, &[], 0.0)),
            Some(Tensor::from_i64(&[1], vec![1])),
        ],
        &[0],
    );
    // Slice: a strided slice on one axis and a reversed one on another.
    check(
        Node::of(OpKind::Slice, "slice", &["x", "s", "e", "a", "st"], &["y"]),
        13,
        vec![
            Some(rng.tensor(&[3, 4, 5], 1.0, &[], 0.0)),
            Some(Tensor::from_i64(&[2], vec![1, -1])),
            Some(Tensor::from_i64(&[2], vec![5, 0])),
            Some(Tensor::from_i64(&[2], vec![2, 1])),
            Some(Tensor::from_i64(&[2], vec![2, -2])),
        ],
        &[0],
    );
    check(
        Node::of(OpKind::Cast, "cast", &["x"], &["y"]).with_attr("to", AttrValue::Int(1)),
        13,
        vec![Some(rng.tensor(&[3, 2], 1.0, &[], 0.0))],
        &[0],
    );
    // Resize: PP-OCR det's nearest ×2 (asymmetric, floor), bilinear up (half-pixel),
    // bilinear down, cubic, each through its scales input.
    let resize = |name: &str, attrs: &[(&str, &str)]| {
        let mut n = Node::of(OpKind::Resize, name, &["x", "roi", "scales"], &["y"]);
        for (k, v) in attrs {
            n = n.with_attr(k, AttrValue::String(v.as_bytes().to_vec()));
        }
        n
    };
    for (name, attrs, scales) in [
        (
            "nearest",
            vec![
                ("mode", "nearest"),
                ("coordinate_transformation_mode", "asymmetric"),
                ("nearest_mode", "floor"),
            ],
            vec![1.0, 1.0, 2.0, 2.0],
        ),
        (
            "linear_up",
            vec![("mode", "linear")],
            vec![1.0, 1.0, 2.0, 1.5],
        ),
        (
            "linear_down",
            vec![("mode", "linear")],
            vec![1.0, 1.0, 0.5, 0.75],
        ),
        ("cubic", vec![("mode", "cubic")], vec![1.0, 1.0, 1.5, 2.0]),
    ] {
        check(
            resize(name, &attrs),
            13,
            vec![
                Some(rng.tensor(&[1, 2, 4, 4], 1.0, &[], 0.0)),
                Some(Tensor::from_f32(&[0], vec![])),
                Some(Tensor::from_f32(&[4], scales)),
            ],
            &[0],
        );
    }
}

/// A `Cast` to an integer type has no gradient: asking for one is an error, not zeros.
#[test]
fn cast_to_integer_has_no_gradient() {
    let node = Node::of(OpKind::Cast, "to_int", &["x"], &["y"]).with_attr("to", AttrValue::Int(7));
    let x = Tensor::from_f32(&[2], vec![1.0, 2.0]);
    let ctx = OpCtx {
        node: &node,
        opset: 13,
    };
    let y = (OpKind::Cast.def().eval)(&ctx, &[Some(&x)])
        .unwrap()
        .remove(0);
    let err = (OpKind::Cast.def().backward.unwrap())(
        &ctx,
        &GradIn {
            inputs: &[Some(&x)],
            output: &y,
            grad: &[1.0, 1.0],
            needs: &[true],
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("Cast from"), "{err}");
}

/// The operators the tests above check; a gradient registered for any other operator
/// fails here until it gets a case.
#[test]
fn every_registered_gradient_is_tested() {
    let tested: BTreeSet<OpKind> = [
        OpKind::Conv,
        OpKind::ConvTranspose,
        OpKind::Gemm,
        OpKind::MatMul,
        OpKind::Relu,
        OpKind::Sigmoid,
        OpKind::HardSigmoid,
        OpKind::HardSwish,
        OpKind::Clip,
        OpKind::PRelu,
        OpKind::Softmax,
        OpKind::MaxPool,
        OpKind::AveragePool,
        OpKind::GlobalAveragePool,
        OpKind::BatchNormalization,
        OpKind::Add,
        OpKind::Mul,
        OpKind::Div,
        OpKind::Concat,
        OpKind::Reshape,
        OpKind::Flatten,
        OpKind::Identity,
        OpKind::Squeeze,
        OpKind::Unsqueeze,
        OpKind::Transpose,
        OpKind::Sub,
        OpKind::Sqrt,
        OpKind::Pow,
        OpKind::ReduceMean,
        OpKind::Slice,
        OpKind::Cast,
        OpKind::Resize,
    ]
    .into_iter()
    .collect();
    let registered: BTreeSet<OpKind> = OpKind::ALL
        .iter()
        .copied()
        .filter(|k| k.def().backward.is_some())
        .collect();
    assert_eq!(registered, tested);
}
