//! The integer operators on `quantkit_kernels` equal their i64 reference path bit for bit:
//! QLinearConv, ConvInteger, MatMulInteger, QLinearMatMul and QGemm, each evaluated with
//! `eval_with(.., true)` (kernels where eligible) and `eval_reference`, on shapes of sizes
//! 1..10, odd channel counts, groups and depthwise (with a channel multiplier), stride 2,
//! dilation 2, asymmetric and auto pads, zero points at both ends of their range, per-channel
//! weight scales and zero points, u8 and i8 activations, i8 and u8 weights. Every case that
//! should run on the kernels is asserted to have done so ([`IntPath::Kernel`]), and the
//! cases that must not (N-D conv, per-row `a_zero_point`, wide types, K beyond the kernels'
//! exact range) are asserted to fall back.

use quantkit_graph::ops::int_kernels::{accumulators_fit_i32, IntPath};
use quantkit_graph::ops::{conv_integer, mat_mul_integer, qgemm, qlinear_conv, qlinear_mat_mul};
use quantkit_graph::ops::{EvalFn, OpCtx};
use quantkit_graph::{AttrValue, DType, Data, Node, OpError, Tensor};

/// Seeded LCG (the generator of the other tests of this crate), with extremes drawn often.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(6364136223846793005).wrapping_add(1))
    }
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() as i64).rem_euclid(hi - lo + 1)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.range(0, v.len() as i64 - 1) as usize]
    }
    /// `n` values of `lo..=hi`, a quarter of them `lo` and a quarter `hi`.
    fn values(&mut self, n: usize, (lo, hi): (i64, i64)) -> Vec<i64> {
        (0..n)
            .map(|_| match self.range(0, 3) {
                0 => lo,
                1 => hi,
                _ => self.range(lo, hi),
            })
            .collect()
    }
}

fn range_of(dt: DType) -> (i64, i64) {
    dt.int_range().unwrap()
}

/// An 8-bit (or i32/u16) tensor of `dt` holding `v`.
fn int_tensor(dt: DType, shape: &[usize], v: &[i64]) -> Tensor {
    let data = match dt {
        DType::U8 => Data::U8(v.iter().map(|&x| x as u8).collect()),
        DType::I8 => Data::I8(v.iter().map(|&x| x as i8).collect()),
        DType::U16 => Data::U16(v.iter().map(|&x| x as u16).collect()),
        DType::I32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
        _ => panic!("no test tensors of {dt}"),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// A zero point of `dt`: its minimum, its maximum, or a random value, by `variant`.
fn zero_point(rng: &mut Rng, dt: DType, variant: usize) -> i64 {
    let (lo, hi) = range_of(dt);
    match variant % 3 {
        0 => lo,
        1 => hi,
        _ => rng.range(lo, hi),
    }
}

fn scales(v: Vec<f32>, f16: bool) -> Tensor {
    let shape = if v.len() == 1 { vec![] } else { vec![v.len()] };
    let t = Tensor::from_f32(&shape, v);
    if f16 {
        t.cast(DType::F16)
    } else {
        t
    }
}

type EvalWith = fn(&OpCtx, &[Option<&Tensor>], bool) -> Result<(Vec<Tensor>, IntPath), OpError>;

/// Runs both paths, checks they agree exactly, and returns the path the default took.
fn both_paths(
    node: &Node,
    eval_with: EvalWith,
    eval_reference: EvalFn,
    inputs: &[Option<&Tensor>],
    what: &str,
) -> IntPath {
    let ctx = OpCtx { node, opset: 21 };
    let (fast, path) = eval_with(&ctx, inputs, true).unwrap_or_else(|e| panic!("{what}: {e}"));
    let reference = eval_reference(&ctx, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (forced, forced_path) = eval_with(&ctx, inputs, false).unwrap();
    assert_eq!(forced_path, IntPath::Reference, "{what}");
    assert_eq!(forced, reference, "{what}");
    assert_eq!(fast.len(), 1, "{what}");
    assert_eq!(fast[0].dtype, reference[0].dtype, "{what}");
    assert_eq!(fast[0].shape, reference[0].shape, "{what}");
    assert_eq!(
        fast[0].data, reference[0].data,
        "{what}: kernel path differs"
    );
    path
}

// ---------------------------------------------------------------------------------------
// Convolutions

/// A 2-D convolution's geometry.
#[derive(Clone, Debug)]
struct ConvCase {
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    hw: [usize; 2],
    k: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    /// `[top, left, bottom, right]`, or an auto_pad mode.
    pads: [usize; 4],
    auto_pad: Option<&'static str>,
}

impl ConvCase {
    fn node(&self, op: &str) -> Node {
        let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
        let mut node = Node::new("c", op, &[], &["y"])
            .with_attr("group", AttrValue::Int(self.group as i64))
            .with_attr("kernel_shape", ints(&self.k))
            .with_attr("strides", ints(&self.strides))
            .with_attr("dilations", ints(&self.dilations));
        node = match self.auto_pad {
            Some(mode) => node.with_attr("auto_pad", AttrValue::String(mode.as_bytes().to_vec())),
            None => node.with_attr("pads", ints(&self.pads)),
        };
        node
    }

    fn x_shape(&self) -> Vec<usize> {
        vec![self.n, self.c, self.hw[0], self.hw[1]]
    }

    fn w_shape(&self) -> Vec<usize> {
        vec![self.m, self.c / self.group, self.k[0], self.k[1]]
    }

    /// Whether the kernel window fits the padded input on both axes.
    fn fits(&self) -> bool {
        (0..2).all(|i| {
            let span = self.dilations[i] * (self.k[i] - 1) + 1;
            self.auto_pad.is_some_and(|m| m != "VALID")
                || self.hw[i] + self.pads[i] + self.pads[i + 2] >= span
        })
    }
}

/// A case of `(n, c, m, group)` and the spatial parameters.
fn conv(
    (n, c, m, group): (usize, usize, usize, usize),
    hw: [usize; 2],
    k: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
) -> ConvCase {
    ConvCase {
        n,
        c,
        m,
        group,
        hw,
        k,
        strides,
        dilations,
        pads,
        auto_pad: None,
    }
}

/// Hand-picked geometries (every kernel path: direct 1×1, im2col GEMM, grouped, depthwise
/// with and without a channel multiplier) followed by random ones.
fn conv_cases() -> Vec<ConvCase> {
    let mut cases = vec![
        conv((1, 1, 1, 1), [1, 1], [1, 1], [1, 1], [1, 1], [0; 4]),
        conv((2, 3, 5, 1), [4, 5], [1, 1], [1, 1], [1, 1], [0; 4]),
        conv((1, 3, 4, 1), [6, 7], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        conv((2, 7, 3, 1), [10, 9], [5, 3], [2, 1], [1, 2], [0, 1, 2, 0]),
        conv((1, 5, 2, 1), [9, 10], [3, 3], [2, 2], [2, 2], [2, 0, 1, 3]),
        conv((1, 6, 9, 3), [5, 8], [3, 2], [1, 2], [1, 1], [1, 0, 0, 1]),
        conv((2, 5, 5, 5), [7, 6], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        conv((1, 3, 6, 3), [9, 9], [3, 3], [2, 2], [2, 2], [2, 1, 0, 2]),
        conv((1, 4, 4, 4), [2, 3], [2, 2], [2, 2], [1, 1], [3, 3, 3, 3]),
        conv((1, 1, 3, 1), [10, 1], [4, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
        conv((1, 9, 1, 1), [1, 10], [1, 3], [1, 2], [1, 2], [0, 1, 0, 1]),
        // A 1×1 kernel that is not the direct path: stride 2, padding.
        conv((1, 3, 3, 1), [5, 5], [1, 1], [2, 2], [1, 1], [1, 0, 0, 1]),
    ];
    for (i, mode) in ["SAME_UPPER", "SAME_LOWER", "VALID"]
        .into_iter()
        .enumerate()
    {
        let mut c = conv((1, 3, 2, 1), [7, 6], [3, 2], [2, 2], [1 + i % 2, 1], [0; 4]);
        c.auto_pad = Some(mode);
        cases.push(c);
    }
    let mut rng = Rng::new(7);
    while cases.len() < 48 {
        let cg = rng.range(1, 4) as usize;
        let group = rng.pick(&[1usize, 1, 2, 3, 0]);
        let (group, c, m) = if group == 0 {
            // Depthwise, channel multiplier 1..3.
            let c = rng.range(2, 7) as usize;
            (c, c, c * rng.range(1, 3) as usize)
        } else {
            (group, group * cg, group * rng.range(1, 4) as usize)
        };
        let mut case = conv(
            (rng.range(1, 2) as usize, c, m, group),
            [rng.range(1, 10) as usize, rng.range(1, 10) as usize],
            [rng.range(1, 3) as usize, rng.range(1, 3) as usize],
            [rng.range(1, 2) as usize, rng.range(1, 2) as usize],
            [rng.range(1, 2) as usize, rng.range(1, 2) as usize],
            [0; 4].map(|_: usize| rng.range(0, 2) as usize),
        );
        if rng.range(0, 5) == 0 {
            case.auto_pad = Some(rng.pick(&["SAME_UPPER", "SAME_LOWER"]));
        }
        if case.fits() {
            cases.push(case);
        }
    }
    cases
}

/// Operand types, zero-point variants and per-channel weights for case `i`.
struct ConvOperands {
    x: Tensor,
    x_zp: Tensor,
    w: Tensor,
    w_zp: Tensor,
    per_channel: bool,
}

fn conv_operands(case: &ConvCase, rng: &mut Rng, variant: usize) -> ConvOperands {
    let xt = [DType::U8, DType::I8][variant % 2];
    let wt = [DType::I8, DType::U8][(variant / 2) % 2];
    let per_channel = (variant / 4) % 2 == 1;
    let xs = case.x_shape();
    let ws = case.w_shape();
    let x = int_tensor(xt, &xs, &rng.values(xs.iter().product(), range_of(xt)));
    let w = int_tensor(wt, &ws, &rng.values(ws.iter().product(), range_of(wt)));
    let x_zp = int_tensor(xt, &[], &[zero_point(rng, xt, variant / 8)]);
    let w_zp = if per_channel {
        let z: Vec<i64> = (0..case.m)
            .map(|j| zero_point(rng, wt, variant / 8 + j))
            .collect();
        int_tensor(wt, &[case.m], &z)
    } else {
        int_tensor(wt, &[], &[zero_point(rng, wt, variant / 8 + 1)])
    };
    ConvOperands {
        x,
        x_zp,
        w,
        w_zp,
        per_channel,
    }
}

#[test]
fn conv_integer_kernel_path_equals_reference() {
    let mut rng = Rng::new(11);
    let mut on_kernels = 0;
    for (ci, case) in conv_cases().iter().enumerate() {
        let node = case.node("ConvInteger");
        for variant in 0..24 {
            let o = conv_operands(case, &mut rng, variant);
            let what = format!("ConvInteger case {ci} {case:?} variant {variant}");
            let path = both_paths(
                &node,
                conv_integer::eval_with,
                conv_integer::eval_reference,
                &[Some(&o.x), Some(&o.w), Some(&o.x_zp), Some(&o.w_zp)],
                &what,
            );
            assert_eq!(path, IntPath::Kernel, "{what}");
            on_kernels += 1;
        }
        // Optional zero points omitted (both 0).
        let o = conv_operands(case, &mut rng, 0);
        let path = both_paths(
            &node,
            conv_integer::eval_with,
            conv_integer::eval_reference,
            &[Some(&o.x), Some(&o.w)],
            &format!("ConvInteger case {ci} without zero points"),
        );
        assert_eq!(path, IntPath::Kernel);
    }
    assert!(on_kernels > 1000);
}

#[test]
fn qlinear_conv_kernel_path_equals_reference() {
    let mut rng = Rng::new(12);
    for (ci, case) in conv_cases().iter().enumerate() {
        let node = case.node("QLinearConv");
        let k = (case.c / case.group * case.k[0] * case.k[1]) as f32;
        for variant in 0..24 {
            let o = conv_operands(case, &mut rng, variant);
            let f16 = variant % 5 == 3;
            let w_s = if o.per_channel {
                (0..case.m).map(|j| 0.001 * (1 + j % 4) as f32).collect()
            } else {
                vec![0.002]
            };
            // Outputs mostly inside the range, and every sixth case a multiplier ≥ 1.
            let y_s = if variant % 6 == 5 {
                0.000_01
            } else {
                0.02 * 0.002 * 60.0 * k.sqrt()
            };
            let yt = [DType::U8, DType::I8][(variant / 3) % 2];
            let y_zp = int_tensor(yt, &[], &[zero_point(&mut rng, yt, variant)]);
            let bias = int_tensor(
                DType::I32,
                &[case.m],
                &rng.values(case.m, (-100_000, 100_000)),
            );
            let (x_s, w_s, y_s) = (
                scales(vec![0.02], f16),
                scales(w_s, f16),
                scales(vec![y_s], f16),
            );
            let what = format!("QLinearConv case {ci} {case:?} variant {variant}");
            let mut inputs = vec![
                Some(&o.x),
                Some(&x_s),
                Some(&o.x_zp),
                Some(&o.w),
                Some(&w_s),
                Some(&o.w_zp),
                Some(&y_s),
                Some(&y_zp),
            ];
            if variant % 4 != 0 {
                inputs.push(Some(&bias));
            }
            let path = both_paths(
                &node,
                qlinear_conv::eval_with,
                qlinear_conv::eval_reference,
                &inputs,
                &what,
            );
            assert_eq!(path, IntPath::Kernel, "{what}");
        }
    }
}

#[test]
fn conv_cases_outside_the_kernels_fall_back() {
    let mut rng = Rng::new(13);
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    // 1-D and 3-D convolutions: the kernels are 2-D only.
    for (xs, ws, pads) in [
        (vec![2, 3, 9], vec![4, 3, 3], vec![1, 0]),
        (
            vec![1, 2, 4, 3, 5],
            vec![3, 2, 2, 2, 3],
            vec![0, 1, 1, 1, 0, 1],
        ),
    ] {
        let node = Node::new("c", "ConvInteger", &[], &["y"]).with_attr("pads", ints(&pads));
        let x = int_tensor(DType::U8, &xs, &rng.values(xs.iter().product(), (0, 255)));
        let w = int_tensor(
            DType::I8,
            &ws,
            &rng.values(ws.iter().product(), (-128, 127)),
        );
        let (xz, wz) = (
            int_tensor(DType::U8, &[], &[255]),
            int_tensor(DType::I8, &[], &[-128]),
        );
        let path = both_paths(
            &node,
            conv_integer::eval_with,
            conv_integer::eval_reference,
            &[Some(&x), Some(&w), Some(&xz), Some(&wz)],
            &format!("{}-D ConvInteger", xs.len() - 2),
        );
        assert_eq!(path, IntPath::Reference);
    }
    // 16-bit activations (ConvInteger's i64 reference accepts any integer type).
    let node = Node::new("c", "ConvInteger", &[], &["y"]);
    let x = int_tensor(DType::U16, &[1, 2, 3, 3], &rng.values(18, (0, 65535)));
    let w = int_tensor(DType::I8, &[1, 2, 2, 2], &rng.values(8, (-128, 127)));
    let path = both_paths(
        &node,
        conv_integer::eval_with,
        conv_integer::eval_reference,
        &[Some(&x), Some(&w)],
        "u16 ConvInteger",
    );
    assert_eq!(path, IntPath::Reference);
}

// ---------------------------------------------------------------------------------------
// Matrix products

/// `(A shape, B shape)` pairs: 2-D of sizes 1..10 and 2ⁿ±1, 1-D operands, batched A with a
/// 2-D B, batched both, broadcast batches, and a 2-D A against a batched B.
fn matmul_shapes() -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut v: Vec<(Vec<usize>, Vec<usize>)> = [
        (1, 1, 1),
        (1, 10, 1),
        (3, 7, 5),
        (6, 16, 17),
        (7, 33, 9),
        (2, 257, 3),
        (10, 10, 10),
        (5, 1, 16),
        (1, 300, 2),
        (9, 15, 31),
    ]
    .iter()
    .map(|&(m, k, n)| (vec![m, k], vec![k, n]))
    .collect();
    v.extend([
        (vec![9], vec![9, 4]),
        (vec![3, 8], vec![8]),
        (vec![2, 3, 4, 5], vec![5, 6]),
        (vec![2, 4, 5], vec![2, 5, 3]),
        (vec![3, 1, 2, 7], vec![2, 7, 5]),
        (vec![4, 6], vec![3, 6, 2]),
    ]);
    let mut rng = Rng::new(5);
    for _ in 0..10 {
        let (m, k, n) = (rng.range(1, 10), rng.range(1, 40), rng.range(1, 20));
        v.push((vec![m as usize, k as usize], vec![k as usize, n as usize]));
    }
    v
}

struct MatOperands {
    a: Tensor,
    a_zp: Tensor,
    b: Tensor,
    b_zp: Tensor,
    per_column: bool,
    n: usize,
}

fn mat_operands(ash: &[usize], bsh: &[usize], rng: &mut Rng, variant: usize) -> MatOperands {
    let at = [DType::U8, DType::I8][variant % 2];
    let bt = [DType::I8, DType::U8][(variant / 2) % 2];
    let n = if bsh.len() == 1 {
        1
    } else {
        bsh[bsh.len() - 1]
    };
    let per_column = (variant / 4) % 2 == 1 && bsh.len() >= 2;
    let a = int_tensor(at, ash, &rng.values(ash.iter().product(), range_of(at)));
    let b = int_tensor(bt, bsh, &rng.values(bsh.iter().product(), range_of(bt)));
    let a_zp = int_tensor(at, &[], &[zero_point(rng, at, variant / 8)]);
    let b_zp = if per_column {
        let z: Vec<i64> = (0..n)
            .map(|j| zero_point(rng, bt, variant / 8 + j))
            .collect();
        int_tensor(bt, &[n], &z)
    } else {
        int_tensor(bt, &[], &[zero_point(rng, bt, variant / 8 + 1)])
    };
    MatOperands {
        a,
        a_zp,
        b,
        b_zp,
        per_column,
        n,
    }
}

#[test]
fn mat_mul_integer_kernel_path_equals_reference() {
    let node = Node::new("m", "MatMulInteger", &[], &["y"]);
    let mut rng = Rng::new(21);
    for (ash, bsh) in matmul_shapes() {
        for variant in 0..24 {
            let o = mat_operands(&ash, &bsh, &mut rng, variant);
            let what = format!("MatMulInteger {ash:?}×{bsh:?} variant {variant}");
            let path = both_paths(
                &node,
                mat_mul_integer::eval_with,
                mat_mul_integer::eval_reference,
                &[Some(&o.a), Some(&o.b), Some(&o.a_zp), Some(&o.b_zp)],
                &what,
            );
            assert_eq!(path, IntPath::Kernel, "{what}");
        }
        let o = mat_operands(&ash, &bsh, &mut rng, 0);
        let path = both_paths(
            &node,
            mat_mul_integer::eval_with,
            mat_mul_integer::eval_reference,
            &[Some(&o.a), Some(&o.b)],
            "MatMulInteger without zero points",
        );
        assert_eq!(path, IntPath::Kernel);
    }
}

#[test]
fn qlinear_mat_mul_kernel_path_equals_reference() {
    let node = Node::new("m", "QLinearMatMul", &[], &["y"]);
    let mut rng = Rng::new(22);
    for (ash, bsh) in matmul_shapes() {
        let k = ash[ash.len() - 1] as f32;
        for variant in 0..24 {
            let o = mat_operands(&ash, &bsh, &mut rng, variant);
            // The spec allows per-column b parameters only for a 2-D b.
            if o.per_column && bsh.len() != 2 {
                continue;
            }
            let f16 = variant % 5 == 3;
            let b_s = if o.per_column {
                (0..o.n).map(|j| 0.003 * (1 + j % 5) as f32).collect()
            } else {
                vec![0.003]
            };
            let y_s = if variant % 6 == 5 {
                0.000_1
            } else {
                0.01 * 0.003 * 50.0 * k.sqrt()
            };
            let yt = [DType::U8, DType::I8][(variant / 3) % 2];
            let y_zp = int_tensor(yt, &[], &[zero_point(&mut rng, yt, variant)]);
            let (a_s, b_s, y_s) = (
                scales(vec![0.01], f16),
                scales(b_s, f16),
                scales(vec![y_s], f16),
            );
            let what = format!("QLinearMatMul {ash:?}×{bsh:?} variant {variant}");
            let path = both_paths(
                &node,
                qlinear_mat_mul::eval_with,
                qlinear_mat_mul::eval_reference,
                &[
                    Some(&o.a),
                    Some(&a_s),
                    Some(&o.a_zp),
                    Some(&o.b),
                    Some(&b_s),
                    Some(&o.b_zp),
                    Some(&y_s),
                    Some(&y_zp),
                ],
                &what,
            );
            assert_eq!(path, IntPath::Kernel, "{what}");
        }
    }
}

#[test]
fn qgemm_kernel_path_equals_reference() {
    let mut rng = Rng::new(23);
    let shapes = matmul_shapes()
        .into_iter()
        .filter(|(a, b)| a.len() == 2 && b.len() == 2);
    for (ash, bsh) in shapes {
        let (m, k, n) = (ash[0], ash[1], bsh[1]);
        for variant in 0..32 {
            let (ta, tb) = (variant % 2 == 1, (variant / 2) % 2 == 1);
            let node = {
                let mut node = Node::new("g", "QGemm", &[], &["y"])
                    .with_attr("transA", AttrValue::Int(ta as i64))
                    .with_attr("transB", AttrValue::Int(tb as i64))
                    .with_attr("alpha", AttrValue::Float([1.0, 0.5, 2.0][variant % 3]));
                node.domain = "com.microsoft".into();
                node
            };
            // Operand types, zero points and per-column b drawn independently of the
            // transposes.
            let v = rng_variant(&mut rng);
            let o = mat_operands(&ash, &bsh, &mut rng, v);
            let a = if ta { transpose(&o.a) } else { o.a.clone() };
            let b = if tb { transpose(&o.b) } else { o.b.clone() };
            let b_s = if o.per_column {
                Tensor::from_f32(&[n], (0..n).map(|j| 0.002 * (1 + j % 3) as f32).collect())
            } else {
                Tensor::from_f32(&[], vec![0.002])
            };
            let a_s = Tensor::from_f32(&[], vec![0.01]);
            let y_s = Tensor::from_f32(&[], vec![0.01 * 0.002 * 40.0 * (k as f32).sqrt()]);
            let yt = [DType::U8, DType::I8][(variant / 3) % 2];
            let y_zp = int_tensor(yt, &[], &[zero_point(&mut rng, yt, variant)]);
            let c = match rng.range(0, 3) {
                0 => None,
                1 => Some(int_tensor(
                    DType::I32,
                    &[n],
                    &rng.values(n, (-50_000, 50_000)),
                )),
                2 => Some(int_tensor(
                    DType::I32,
                    &[m, n],
                    &rng.values(m * n, (-50_000, 50_000)),
                )),
                _ => Some(int_tensor(DType::I32, &[], &[-12_345])),
            };
            let float_out = rng.range(0, 5) == 0;
            let inputs = [
                Some(&a),
                Some(&a_s),
                Some(&o.a_zp),
                Some(&b),
                Some(&b_s),
                Some(&o.b_zp),
                c.as_ref(),
                (!float_out).then_some(&y_s),
                (!float_out).then_some(&y_zp),
            ];
            let what = format!("QGemm {ash:?}×{bsh:?} transA {ta} transB {tb} variant {variant}");
            let path = both_paths(
                &node,
                qgemm::eval_with,
                qgemm::eval_reference,
                &inputs,
                &what,
            );
            assert_eq!(path, IntPath::Kernel, "{what}");
        }
    }
}

/// A random operand variant of [`mat_operands`].
fn rng_variant(rng: &mut Rng) -> usize {
    rng.range(0, 23) as usize
}

/// A 2-D 8-bit tensor transposed.
fn transpose(t: &Tensor) -> Tensor {
    let (r, c) = (t.shape[0], t.shape[1]);
    let v = t.to_i64_vec();
    let tv: Vec<i64> = (0..r * c).map(|i| v[(i % r) * c + i / r]).collect();
    int_tensor(t.dtype, &[c, r], &tv)
}

#[test]
fn matmul_cases_outside_the_kernels_fall_back() {
    let node = Node::new("m", "MatMulInteger", &[], &["y"]);
    let mut rng = Rng::new(31);
    let check = |inputs: &[Option<&Tensor>], what: &str| {
        let path = both_paths(
            &node,
            mat_mul_integer::eval_with,
            mat_mul_integer::eval_reference,
            inputs,
            what,
        );
        assert_eq!(path, IntPath::Reference, "{what}");
    };
    // A per-row a_zero_point.
    let a = int_tensor(DType::U8, &[3, 5], &rng.values(15, (0, 255)));
    let b = int_tensor(DType::I8, &[5, 2], &rng.values(10, (-128, 127)));
    let az = int_tensor(DType::U8, &[3], &[0, 128, 255]);
    check(&[Some(&a), Some(&b), Some(&az)], "per-row a_zero_point");
    // 16-bit activations.
    let a16 = int_tensor(DType::U16, &[3, 5], &rng.values(15, (0, 65535)));
    check(&[Some(&a16), Some(&b)], "u16 A");
    // A zero point outside the weights' type.
    let bz = int_tensor(DType::I32, &[], &[300]);
    check(
        &[Some(&a), Some(&b), None, Some(&bz)],
        "b_zero_point 300 for i8 B",
    );
    // K beyond the kernels' exact range (gemm::MAX_K = 33 025) with small values.
    let k = 33_026;
    let a = int_tensor(DType::U8, &[1, k], &rng.values(k, (0, 3)));
    let b = int_tensor(DType::I8, &[k, 2], &rng.values(2 * k, (-3, 3)));
    check(&[Some(&a), Some(&b)], "K = 33 026");
    // Extreme values at that K overflow int32: the reference reports it (the kernels'
    // wrapping arithmetic would have returned a wrong value).
    let a = int_tensor(DType::U8, &[1, k], &vec![255; k]);
    let b = int_tensor(DType::I8, &[k, 1], &vec![-128; k]);
    let bz = int_tensor(DType::I8, &[], &[127]);
    let ctx = OpCtx {
        node: &node,
        opset: 21,
    };
    let err = mat_mul_integer::eval(&ctx, &[Some(&a), Some(&b), None, Some(&bz)]).unwrap_err();
    assert!(
        matches!(err, OpError::Invalid(ref m) if m.contains("overflow")),
        "{err}"
    );
}

#[test]
fn the_overflow_guard_bounds_the_accumulator() {
    // 255·255·33 025 = 2 147 450 625 < 2³¹: every 8-bit case up to MAX_K is exact.
    assert!(accumulators_fit_i32(33_025, 255, 255));
    assert!(!accumulators_fit_i32(33_026, 1, 1));
    // The bound is strict: K·|a|·|w| = 2³¹ could be one past i32::MAX.
    assert!(!accumulators_fit_i32(2, 1 << 15, 1 << 15));
    assert!(accumulators_fit_i32(1, (1 << 16) - 1, 1 << 15));
    assert!(accumulators_fit_i32(0, 255, 255));
}

fn ctx_of(node: &Node) -> OpCtx<'_> {
    OpCtx { node, opset: 21 }
}

#[test]
fn bad_inputs_are_errors_on_both_paths() {
    let u8s = |shape: &[usize]| int_tensor(DType::U8, shape, &vec![1; shape.iter().product()]);
    let i8s = |shape: &[usize]| int_tensor(DType::I8, shape, &vec![1; shape.iter().product()]);
    let empty_u8 = int_tensor(DType::U8, &[0], &[]);
    let f = Tensor::from_f32(&[], vec![0.1]);
    let conv_node = Node::new("c", "QLinearConv", &[], &["y"]);
    let (x, w) = (u8s(&[1, 2, 3, 3]), i8s(&[4, 2, 2, 2]));
    let (zu, zi) = (u8s(&[]), i8s(&[]));
    let empty_f = Tensor::from_f32(&[0], vec![]);
    let (zi3, bias3) = (i8s(&[3]), int_tensor(DType::I32, &[3], &[1, 2, 3]));
    let x3 = u8s(&[1, 3, 3, 3]);
    let (a, b, b4) = (u8s(&[2, 3]), i8s(&[3, 2]), i8s(&[4, 2]));
    for use_kernels in [true, false] {
        let ctx = ctx_of(&conv_node);
        let qlc = |x, x_zp, w_zp, bias| {
            let mut inputs = vec![
                Some(x),
                Some(&f),
                Some(x_zp),
                Some(&w),
                Some(&f),
                Some(w_zp),
                Some(&f),
                Some(&zu),
            ];
            inputs.extend(bias);
            qlinear_conv::eval_with(&ctx, &inputs, use_kernels)
        };
        assert!(qlc(&x, &empty_u8, &zi, None).is_err(), "empty x_zero_point");
        assert!(
            qlc(&x, &zu, &zi3, None).is_err(),
            "3 weight zero points for 4 channels"
        );
        assert!(qlc(&x, &zu, &zi, Some(Some(&bias3))).is_err(), "3 biases");
        assert!(qlc(&x3, &zu, &zi, None).is_err(), "3 input channels for 2");
        let ci_node = Node::new("c", "ConvInteger", &[], &["y"]);
        let ctx = ctx_of(&ci_node);
        let ci = |inputs: &[Option<&Tensor>]| conv_integer::eval_with(&ctx, inputs, use_kernels);
        assert!(ci(&[Some(&x), Some(&w), Some(&empty_u8)]).is_err());
        assert!(ci(&[Some(&x), Some(&w), None, Some(&zi3)]).is_err());
        assert!(ci(&[Some(&x3), Some(&w)]).is_err());
        let mm_node = Node::new("m", "MatMulInteger", &[], &["y"]);
        let ctx = ctx_of(&mm_node);
        let mm = |inputs: &[Option<&Tensor>]| mat_mul_integer::eval_with(&ctx, inputs, use_kernels);
        assert!(
            mm(&[Some(&a), Some(&b4)]).is_err(),
            "inner dimensions 3 and 4"
        );
        assert!(
            mm(&[Some(&a), Some(&b), None, Some(&zi3)]).is_err(),
            "3 b zero points for 2 columns"
        );
        let qm_node = Node::new("m", "QLinearMatMul", &[], &["y"]);
        let ctx = ctx_of(&qm_node);
        let qm = |b, b_zp| {
            let inputs = [
                Some(&a),
                Some(&f),
                Some(&zu),
                Some(b),
                Some(&f),
                Some(b_zp),
                Some(&f),
                Some(&zu),
            ];
            qlinear_mat_mul::eval_with(&ctx, &inputs, use_kernels)
        };
        assert!(qm(&b4, &zi).is_err(), "inner dimensions 3 and 4");
        assert!(qm(&b, &zi3).is_err(), "3 b zero points for 2 columns");
        let mut qg_node = Node::new("g", "QGemm", &[], &["y"]);
        qg_node.domain = "com.microsoft".into();
        let ctx = ctx_of(&qg_node);
        let qg = |b, y_s| {
            let inputs = [
                Some(&a),
                Some(&f),
                Some(&zu),
                Some(b),
                Some(&f),
                Some(&zi),
                None,
                Some(y_s),
                Some(&zu),
            ];
            qgemm::eval_with(&ctx, &inputs, use_kernels)
        };
        assert!(qg(&b, &empty_f).is_err(), "empty y_scale");
        assert!(qg(&b4, &f).is_err(), "inner dimensions 3 and 4");
    }
}
