//! Every op's backward against central finite differences of its own forward.
//!
//! Loss `L = Σ r_i · y_i` with fixed random `r`, accumulated in f64. The forward runs in f32,
//! so the step is `EPS = 1e-2` (inputs are O(1)): the f32 rounding error of `L` divided by
//! `2·EPS` stays near 1e-5, and the truncation error of the central difference is
//! O(EPS²·f''') ≈ 1e-4 for the smooth ops and zero for the piecewise-linear ones, whose test
//! inputs keep at least 2·EPS away from every kink. Tolerance: `|a − n| ≤ 2e-3 + 1e-2·max(|a|, |n|)`.

use std::any::Any;

use crate::error::Result;
use crate::ops::*;
use crate::rng::Rng;
use crate::tape::{Op, Tape};
use crate::tensor::Tensor;

const EPS: f32 = 1e-2;

struct WeightedSum(Vec<f32>);

impl Op for WeightedSum {
    fn name(&self) -> &'static str {
        "WeightedSum"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s: f64 = inputs[0]
            .data()
            .iter()
            .zip(&self.0)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        Ok(Tensor::scalar(s as f32))
    }
    fn backward(
        &self,
        inputs: &[&Tensor],
        _o: &Tensor,
        g: &Tensor,
        _n: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let d = self.0.iter().map(|r| r * g.data()[0]).collect();
        Ok(vec![Some(Tensor::new(inputs[0].shape(), d)?)])
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn randn(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::new(shape, (0..n).map(|_| rng.normal()).collect()).unwrap()
}

/// Values at least 4·EPS away from each other and from zero, in random order.
fn spread(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f32> = (0..n)
        .map(|i| (i as f32 - n as f32 / 2.0 + 0.5) * 0.05)
        .collect();
    rng.shuffle(&mut v);
    Tensor::new(shape, v).unwrap()
}

fn loss_of<O: Op>(make: &impl Fn() -> O, inputs: &[Tensor], r: &[f32]) -> f64 {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let y = make().forward(&refs).unwrap();
    y.data()
        .iter()
        .zip(r)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum()
}

/// Checks the gradient of every input flagged in `which`.
fn check<O: Op>(make: impl Fn() -> O, inputs: Vec<Tensor>, which: &[bool]) {
    let mut rng = Rng::new(99);
    let mut tape = Tape::new();
    let vars: Vec<_> = inputs
        .iter()
        .zip(which)
        .map(|(t, &w)| {
            if w {
                tape.variable(t.clone())
            } else {
                tape.constant(t.clone())
            }
        })
        .collect();
    let y = tape.apply(make(), &vars).unwrap();
    let r: Vec<f32> = (0..tape.value(y).len()).map(|_| rng.normal()).collect();
    let l = tape.apply(WeightedSum(r.clone()), &[y]).unwrap();
    let grads = tape.backward(l).unwrap();
    let name = make().name();
    for (i, (&w, v)) in which.iter().zip(&vars).enumerate() {
        if !w {
            continue;
        }
        let analytic = grads.get(*v).expect("gradient missing");
        assert_eq!(analytic.shape(), inputs[i].shape());
        for j in 0..inputs[i].len() {
            let mut plus = inputs.clone();
            plus[i].data_mut()[j] += EPS;
            let mut minus = inputs.clone();
            minus[i].data_mut()[j] -= EPS;
            let num = (loss_of(&make, &plus, &r) - loss_of(&make, &minus, &r)) / (2.0 * EPS as f64);
            let a = analytic.data()[j] as f64;
            let tol = 2e-3 + 1e-2 * a.abs().max(num.abs());
            assert!(
                (a - num).abs() <= tol,
                "{name}: input {i} element {j}: analytic {a} vs numeric {num}"
            );
        }
    }
}

#[test]
fn conv_general_grouped_strided_dilated() {
    let mut rng = Rng::new(1);
    let attrs = ConvAttrs {
        stride: [2, 1],
        pads: [1, 0, 2, 1],
        dilation: [1, 2],
        group: 2,
    };
    let x = randn(&mut rng, &[2, 4, 5, 6]);
    let w = randn(&mut rng, &[6, 2, 3, 2]);
    let b = randn(&mut rng, &[6]);
    check(|| Conv2d::new(attrs), vec![x, w, b], &[true, true, true]);
}

#[test]
fn conv_3x3_pad1_pointwise_and_depthwise() {
    let mut rng = Rng::new(2);
    let x = randn(&mut rng, &[5, 3, 6, 5]);
    check(
        || Conv2d::new(ConvAttrs::new(1, 1)),
        vec![
            x.clone(),
            randn(&mut rng, &[4, 3, 3, 3]),
            randn(&mut rng, &[4]),
        ],
        &[true, true, true],
    );
    check(
        || Conv2d::new(ConvAttrs::new(1, 0)),
        vec![x.clone(), randn(&mut rng, &[4, 3, 1, 1])],
        &[true, true],
    );
    for s in [1, 2] {
        let a = ConvAttrs::new(s, 1).with_group(3);
        check(
            move || Conv2d::new(a),
            vec![
                x.clone(),
                randn(&mut rng, &[3, 1, 3, 3]),
                randn(&mut rng, &[3]),
            ],
            &[true, true, true],
        );
    }
    // Depthwise with channel multiplier 2 goes through the grouped im2col path.
    let a = ConvAttrs::new(1, 1).with_group(3);
    check(
        move || Conv2d::new(a),
        vec![x, randn(&mut rng, &[6, 1, 3, 3])],
        &[true, true],
    );
}

#[test]
fn conv_forward_matches_direct_reference() {
    let mut rng = Rng::new(3);
    let cases = [
        (ConvAttrs::new(1, 1), [2, 3, 7, 6], [5, 3, 3, 3]),
        (
            ConvAttrs {
                stride: [2, 3],
                pads: [0, 1, 1, 2],
                dilation: [2, 1],
                group: 1,
            },
            [1, 2, 9, 8],
            [3, 2, 3, 2],
        ),
        (
            ConvAttrs::new(2, 1).with_group(4),
            [2, 4, 6, 6],
            [4, 1, 3, 3],
        ),
        (
            ConvAttrs::new(1, 0).with_group(2),
            [3, 4, 3, 3],
            [6, 2, 1, 1],
        ),
    ];
    for (a, xs, ws) in cases {
        let x = randn(&mut rng, &xs);
        let w = randn(&mut rng, &ws);
        let b = randn(&mut rng, &[ws[0]]);
        let want = conv::conv2d_ref(&x, &w, Some(&b), &a).unwrap();
        let got = Conv2d::new(a).forward(&[&x, &w, &b]).unwrap();
        assert_eq!(got.shape(), want.shape());
        for (g, w) in got.data().iter().zip(want.data()) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()) * 10.0, "{g} vs {w}");
        }
    }
}

#[test]
fn conv_transpose_forward_and_gradients() {
    let mut rng = Rng::new(4);
    let a = ConvTransposeAttrs::new(2);
    let x = randn(&mut rng, &[2, 3, 3, 4]);
    let w = randn(&mut rng, &[3, 2, 2, 2]);
    let b = randn(&mut rng, &[2]);
    let got = ConvTranspose2d::new(a).forward(&[&x, &w, &b]).unwrap();
    assert_eq!(got.shape(), &[2, 2, 6, 8]);
    let want = conv_transpose::conv_transpose2d_ref(&x, &w, Some(&b), &a).unwrap();
    for (g, w) in got.data().iter().zip(want.data()) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()) * 10.0);
    }
    check(
        || ConvTranspose2d::new(a),
        vec![x, w, b],
        &[true, true, true],
    );
    let a2 = ConvTransposeAttrs {
        stride: [2, 2],
        pads: [1, 1, 1, 1],
        dilation: [1, 1],
        output_padding: [1, 1],
    };
    let x = randn(&mut rng, &[1, 2, 3, 3]);
    let w = randn(&mut rng, &[2, 3, 3, 3]);
    let got = ConvTranspose2d::new(a2).forward(&[&x, &w]).unwrap();
    assert_eq!(got.shape(), &[1, 3, 6, 6]);
    let want = conv_transpose::conv_transpose2d_ref(&x, &w, None, &a2).unwrap();
    for (g, w) in got.data().iter().zip(want.data()) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()) * 10.0);
    }
    check(|| ConvTranspose2d::new(a2), vec![x, w], &[true, true]);
}

#[test]
fn linear_matmul_add() {
    let mut rng = Rng::new(5);
    check(
        || Linear,
        vec![
            randn(&mut rng, &[3, 5]),
            randn(&mut rng, &[4, 5]),
            randn(&mut rng, &[4]),
        ],
        &[true, true, true],
    );
    check(
        || MatMul,
        vec![randn(&mut rng, &[3, 5]), randn(&mut rng, &[5, 2])],
        &[true, true],
    );
    check(
        || Add,
        vec![randn(&mut rng, &[2, 3, 4]), randn(&mut rng, &[2, 3, 4])],
        &[true, true],
    );
    check(
        || Add,
        vec![randn(&mut rng, &[2, 3, 4]), randn(&mut rng, &[3, 1])],
        &[true, true],
    );
    check(
        || Add,
        vec![randn(&mut rng, &[1, 4]), randn(&mut rng, &[3, 1])],
        &[true, true],
    );
}

#[test]
fn activations() {
    let mut rng = Rng::new(6);
    check(|| Relu, vec![spread(&mut rng, &[2, 3, 4])], &[true]);
    // HardSwish: points on both flat sides and in the quadratic part, away from ±3.
    let hs = Tensor::new(&[8], vec![-5.0, -3.2, -2.5, -0.7, 0.3, 1.9, 2.8, 4.5]).unwrap();
    check(|| HardSwish, vec![hs], &[true]);
    check(|| Sigmoid, vec![randn(&mut rng, &[10])], &[true]);
    check(
        || Normalize {
            mean: 0.3,
            std: 0.4,
        },
        vec![randn(&mut rng, &[6])],
        &[true],
    );
    check(|| Flatten, vec![randn(&mut rng, &[2, 3, 2])], &[true]);
    check(
        || Reshape { shape: vec![3, 4] },
        vec![randn(&mut rng, &[2, 6])],
        &[true],
    );
}

#[test]
fn pools() {
    let mut rng = Rng::new(7);
    check(
        || MaxPool2d::new(PoolAttrs::new(2, 2)),
        vec![spread(&mut rng, &[2, 2, 5, 4])],
        &[true],
    );
    let overlapping = PoolAttrs {
        kernel: [3, 3],
        stride: [2, 2],
        pads: [1, 1, 1, 1],
    };
    check(
        move || MaxPool2d::new(overlapping),
        vec![spread(&mut rng, &[1, 2, 5, 5])],
        &[true],
    );
    check(
        || GlobalAvgPool,
        vec![randn(&mut rng, &[2, 3, 3, 2])],
        &[true],
    );
}

#[test]
fn batch_norm_training_and_inference() {
    let mut rng = Rng::new(8);
    let x = randn(&mut rng, &[3, 2, 2, 3]);
    let scale = randn(&mut rng, &[2]);
    let bias = randn(&mut rng, &[2]);
    let rm = randn(&mut rng, &[2]);
    let rv = Tensor::new(&[2], vec![0.7, 1.6]).unwrap();
    let ins = vec![x, scale, bias, rm, rv];
    check(
        || BatchNorm2d::new(1e-5, true),
        ins.clone(),
        &[true, true, true, false, false],
    );
    check(
        || BatchNorm2d::new(1e-5, false),
        ins.clone(),
        &[true, true, true, false, false],
    );
    // Training output per channel has mean ≈ bias and (biased) std ≈ |scale|.
    let refs: Vec<&Tensor> = ins.iter().collect();
    let mut bn = BatchNorm2d::new(1e-5, true);
    let y = bn.forward(&refs).unwrap();
    for c in 0..2 {
        let vals: Vec<f64> = (0..3)
            .flat_map(|n| y.data()[(n * 2 + c) * 6..(n * 2 + c + 1) * 6].to_vec())
            .map(|v| v as f64)
            .collect();
        let mean = vals.iter().sum::<f64>() / 18.0;
        let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 18.0;
        assert!((mean - ins[2].data()[c] as f64).abs() < 1e-5);
        assert!((var.sqrt() - ins[1].data()[c].abs() as f64).abs() < 1e-3);
    }
}

#[test]
fn losses() {
    let mut rng = Rng::new(9);
    check(
        || SoftmaxCrossEntropy::new(vec![2, 0, 3]),
        vec![randn(&mut rng, &[3, 4])],
        &[true],
    );
    check(
        || MseLoss,
        vec![randn(&mut rng, &[2, 5]), randn(&mut rng, &[2, 5])],
        &[true, true],
    );
    // Cross-entropy of uniform logits is ln K.
    let y = SoftmaxCrossEntropy::new(vec![1, 3])
        .forward(&[&Tensor::zeros(&[2, 4])])
        .unwrap();
    assert!((y.data()[0] - 4f32.ln()).abs() < 1e-6);
}

#[test]
fn parameter_gradients_do_not_depend_on_thread_count() {
    // A small conv and one the size of LeNet's second (batch 8): its batch-wide GEMMs are
    // large enough for the GEMM crate to split them over threads.
    for (xs, ws, stride) in [
        ([13, 3, 8, 8], [5, 3, 3, 3], 2),
        ([8, 32, 14, 14], [64, 32, 3, 3], 1),
    ] {
        gradients_equal_on_1_and_3_threads(&xs, &ws, stride);
    }
}

fn gradients_equal_on_1_and_3_threads(xs: &[usize], ws: &[usize], stride: usize) {
    let mut rng = Rng::new(10);
    let x = randn(&mut rng, xs);
    let w = randn(&mut rng, ws);
    let b = randn(&mut rng, &[ws[0]]);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut tape = Tape::new();
            let xv = tape.variable(x.clone());
            let wv = tape.variable(w.clone());
            let bv = tape.variable(b.clone());
            let y = tape
                .apply(Conv2d::new(ConvAttrs::new(stride, 1)), &[xv, wv, bv])
                .unwrap();
            let l = tape
                .apply(WeightedSum(vec![0.5; tape.value(y).len()]), &[y])
                .unwrap();
            let g = tape.backward(l).unwrap();
            (
                g.get(xv).unwrap().clone(),
                g.get(wv).unwrap().clone(),
                g.get(bv).unwrap().clone(),
            )
        })
    };
    assert_eq!(run(1), run(3));
}
