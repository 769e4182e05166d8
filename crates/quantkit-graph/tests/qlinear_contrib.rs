//! ONNX Runtime's QLinear contrib operators (com.microsoft `QLinearAdd`, `QLinearMul`,
//! `QLinearConcat`, `QLinearGlobalAveragePool`, `QLinearAveragePool`, `QLinearSigmoid`,
//! `QLinearLeakyRelu`) on small random u8 and i8 cases equal, code for code, a reference
//! written out here from the definitions: dequantize `(q − zp)·s` in f32, the float
//! operator, quantize `saturate(round_half_even(v / s) + zp)` in f32. The pools' means are
//! the exact integer sum of `q − zp` times the scale over the count, as their doc comments
//! state. Malformed inputs are errors, never panics.

use quantkit_graph::ops::{lookup, OpCtx};
use quantkit_graph::{AttrValue, DType, Data, Node, OpError, Tensor};

const MS: &str = "com.microsoft";

fn lcg(n: usize, seed: u64, lo: i64, hi: i64) -> Vec<i64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((s >> 33) as i64).rem_euclid(hi - lo + 1)
        })
        .collect()
}

/// A scale in [0.005, 0.1) from the LCG.
fn scale(seed: u64) -> f32 {
    0.005 + lcg(1, seed, 0, 9_500)[0] as f32 * 1e-5
}

fn range(dt: DType) -> (i64, i64) {
    match dt {
        DType::U8 => (0, 255),
        _ => (-128, 127),
    }
}

fn codes(dt: DType, shape: &[usize], v: &[i64]) -> Tensor {
    let data = match dt {
        DType::U8 => Data::U8(v.iter().map(|&x| x as u8).collect()),
        _ => Data::I8(v.iter().map(|&x| x as i8).collect()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

fn random_codes(dt: DType, shape: &[usize], seed: u64) -> (Tensor, Vec<i64>) {
    let (lo, hi) = range(dt);
    let v = lcg(shape.iter().product(), seed, lo, hi);
    (codes(dt, shape, &v), v)
}

fn sc(s: f32) -> Tensor {
    Tensor::from_f32(&[], vec![s])
}

fn zp(dt: DType, z: i64) -> Tensor {
    codes(dt, &[], &[z])
}

fn deq(q: i64, s: f32, z: i64) -> f32 {
    (q - z) as f32 * s
}

fn quant(v: f32, s: f32, z: i64, dt: DType) -> i64 {
    let (lo, hi) = range(dt);
    let r = (v / s).round_ties_even();
    if r.is_nan() {
        return z;
    }
    (r as i64 + z).clamp(lo, hi)
}

fn node(op: &str, attrs: &[(&str, AttrValue)]) -> Node {
    let mut n = Node::new("n", op, &[], &["y"]);
    n.domain = MS.into();
    for (k, v) in attrs {
        n = n.with_attr(k, v.clone());
    }
    n
}

fn run(n: &Node, inputs: &[Option<&Tensor>]) -> Result<Tensor, OpError> {
    let f = lookup(MS, &n.op_type).expect("registered");
    f(&OpCtx { node: n, opset: 13 }, inputs).map(|mut v| v.remove(0))
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    st
}

/// Numpy broadcasting written out: the output shape and, per output element, the flat
/// indices into `a` and `b`.
fn broadcast(a: &[usize], b: &[usize]) -> (Vec<usize>, Vec<(usize, usize)>) {
    let r = a.len().max(b.len());
    let pad = |s: &[usize]| {
        let mut p = vec![1; r - s.len()];
        p.extend_from_slice(s);
        p
    };
    let (pa, pb) = (pad(a), pad(b));
    let out: Vec<usize> = (0..r).map(|i| pa[i].max(pb[i])).collect();
    let (sa, sb, so) = (strides(&pa), strides(&pb), strides(&out));
    let n: usize = out.iter().product();
    let idx = (0..n)
        .map(|o| {
            let (mut ia, mut ib) = (0, 0);
            for ax in 0..r {
                let c = (o / so[ax]) % out[ax];
                if pa[ax] != 1 {
                    ia += c * sa[ax];
                }
                if pb[ax] != 1 {
                    ib += c * sb[ax];
                }
            }
            (ia, ib)
        })
        .collect();
    (out, idx)
}

/// `[N, C, D...]` values to `[N, D..., C]`, with the new shape.
fn nchw_to_nhwc(v: &[i64], shape: &[usize]) -> (Vec<usize>, Vec<i64>) {
    let (n, c) = (shape[0], shape[1]);
    let sp: usize = shape[2..].iter().product();
    let mut out = vec![0; v.len()];
    for b in 0..n {
        for ch in 0..c {
            for s in 0..sp {
                out[(b * sp + s) * c + ch] = v[(b * c + ch) * sp + s];
            }
        }
    }
    let mut s = vec![n];
    s.extend_from_slice(&shape[2..]);
    s.push(c);
    (s, out)
}

const TYPES: [DType; 2] = [DType::U8, DType::I8];

#[test]
fn qlinear_add_and_mul_equal_the_float_definition_with_broadcasting() {
    let shapes: [(&[usize], &[usize]); 6] = [
        (&[2, 3, 4], &[2, 3, 4]),
        (&[2, 3, 4], &[4]),
        (&[2, 3, 4], &[]),
        (&[1, 3, 1], &[2, 1, 4]),
        (&[3, 1, 5, 5], &[1, 4, 1, 1]),
        (&[1], &[2, 7]),
    ];
    let mut seed = 100;
    let mut checked = 0;
    for op in ["QLinearAdd", "QLinearMul"] {
        for dt in TYPES {
            let (lo, hi) = range(dt);
            for (ash, bsh) in shapes {
                seed += 10;
                let (a, av) = random_codes(dt, ash, seed);
                let (b, bv) = random_codes(dt, bsh, seed + 1);
                let (sa, sb) = (scale(seed + 2), scale(seed + 3));
                // Mul's output range is the product's: keep most results inside the codes.
                let s_c = if op == "QLinearMul" {
                    sa * sb * 150.0
                } else {
                    (sa + sb) * 0.6
                };
                let zs = lcg(3, seed + 4, lo, hi);
                let (za, zb, zc) = (zp(dt, zs[0]), zp(dt, zs[1]), zp(dt, zs[2]));
                let (tsa, tsb, tsc) = (sc(sa), sc(sb), sc(s_c));
                let got = run(
                    &node(op, &[]),
                    &[
                        Some(&a),
                        Some(&tsa),
                        Some(&za),
                        Some(&b),
                        Some(&tsb),
                        Some(&zb),
                        Some(&tsc),
                        Some(&zc),
                    ],
                )
                .unwrap();
                let (out, idx) = broadcast(ash, bsh);
                let want: Vec<i64> = idx
                    .iter()
                    .map(|&(i, j)| {
                        let (x, y) = (deq(av[i], sa, zs[0]), deq(bv[j], sb, zs[1]));
                        let v = if op == "QLinearAdd" { x + y } else { x * y };
                        quant(v, s_c, zs[2], dt)
                    })
                    .collect();
                assert_eq!(got.shape, out, "{op} {dt} {ash:?}·{bsh:?}");
                assert_eq!(got.dtype, dt);
                assert_eq!(got.to_i64_vec(), want, "{op} {dt} {ash:?}·{bsh:?}");
                checked += want.len();
            }
        }
    }
    // Absent zero points are 0 of the codes' type.
    let (a, av) = random_codes(DType::I8, &[2, 5], 7);
    let (b, bv) = random_codes(DType::I8, &[5], 8);
    let (s1, s2, s3) = (sc(0.02), sc(0.03), sc(0.04));
    let got = run(
        &node("QLinearAdd", &[]),
        &[
            Some(&a),
            Some(&s1),
            None,
            Some(&b),
            Some(&s2),
            None,
            Some(&s3),
        ],
    )
    .unwrap();
    let want: Vec<i64> = (0..10)
        .map(|i| {
            quant(
                deq(av[i], 0.02, 0) + deq(bv[i % 5], 0.03, 0),
                0.04,
                0,
                DType::I8,
            )
        })
        .collect();
    assert_eq!(got.to_i64_vec(), want);
    eprintln!("QLinearAdd/QLinearMul: {checked} codes equal the reference");
}

/// Reference GlobalAveragePool over `[N, C, D...]` codes.
fn gap_ref(v: &[i64], shape: &[usize], x: (f32, i64), y: (f32, i64), dt: DType) -> Vec<i64> {
    let sp: usize = shape[2..].iter().product();
    v.chunks(sp)
        .map(|plane| {
            let sum: i64 = plane.iter().map(|&q| q - x.1).sum();
            quant(sum as f32 * x.0 / sp as f32, y.0, y.1, dt)
        })
        .collect()
}

#[test]
fn qlinear_global_average_pool_nchw_and_channels_last() {
    let mut seed = 300;
    for dt in TYPES {
        let (lo, hi) = range(dt);
        for shape in [
            &[2, 3, 4, 5][..],
            &[1, 4, 7],
            &[2, 5, 3, 3, 2],
            &[3, 2, 1, 1],
        ] {
            seed += 10;
            let (x, xv) = random_codes(dt, shape, seed);
            let zs = lcg(2, seed + 1, lo, hi);
            let (sx, sy) = (scale(seed + 2), scale(seed + 3) * 0.5);
            let want = gap_ref(&xv, shape, (sx, zs[0]), (sy, zs[1]), dt);
            let (tsx, tzx, tsy, tzy) = (sc(sx), zp(dt, zs[0]), sc(sy), zp(dt, zs[1]));
            let mut out = shape[..2].to_vec();
            out.extend(std::iter::repeat_n(1, shape.len() - 2));
            let got = run(
                &node("QLinearGlobalAveragePool", &[]),
                &[Some(&x), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
            )
            .unwrap();
            assert_eq!(got.shape, out);
            assert_eq!(got.to_i64_vec(), want, "{dt} {shape:?}");
            // channels_last: the same values laid out [N, D..., C] → [N, 1..., C].
            let (cl_shape, cl) = nchw_to_nhwc(&xv, shape);
            let xc = codes(dt, &cl_shape, &cl);
            let got = run(
                &node(
                    "QLinearGlobalAveragePool",
                    &[("channels_last", AttrValue::Int(1))],
                ),
                &[Some(&xc), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
            )
            .unwrap();
            let mut out_cl = vec![shape[0]];
            out_cl.extend(std::iter::repeat_n(1, shape.len() - 2));
            out_cl.push(shape[1]);
            assert_eq!(got.shape, out_cl);
            assert_eq!(got.to_i64_vec(), want, "{dt} {shape:?} channels_last");
        }
    }
}

struct Pool {
    k: [usize; 2],
    s: [usize; 2],
    pads: [usize; 4],
    ceil: bool,
    include: bool,
}

/// Reference 2-D AveragePool over `[N, C, H, W]` codes, the windows written out.
fn avg_ref(
    v: &[i64],
    shape: &[usize],
    p: &Pool,
    x: (f32, i64),
    y: (f32, i64),
    dt: DType,
) -> (Vec<usize>, Vec<i64>) {
    let (planes, h, w) = (shape[0] * shape[1], shape[2], shape[3]);
    let out_dim = |i: usize, a: usize| {
        let padded = i + p.pads[a] + p.pads[a + 2];
        let num = padded - p.k[a];
        let mut o = if p.ceil {
            num.div_ceil(p.s[a]) + 1
        } else {
            num / p.s[a] + 1
        };
        // A last window starting in the end padding is dropped.
        if p.ceil && (o - 1) * p.s[a] >= i + p.pads[a] {
            o -= 1;
        }
        o
    };
    let (oh, ow) = (out_dim(h, 0), out_dim(w, 1));
    let mut out = Vec::new();
    for pl in 0..planes {
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut sum, mut cnt) = (0i64, 0usize);
                for ky in 0..p.k[0] {
                    for kx in 0..p.k[1] {
                        let iy = (oy * p.s[0] + ky) as isize - p.pads[0] as isize;
                        let ix = (ox * p.s[1] + kx) as isize - p.pads[1] as isize;
                        let inside = iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize;
                        let in_padded =
                            iy < (h + p.pads[2]) as isize && ix < (w + p.pads[3]) as isize;
                        if inside {
                            sum += v[pl * h * w + iy as usize * w + ix as usize] - x.1;
                        }
                        if inside || (p.include && in_padded) {
                            cnt += 1;
                        }
                    }
                }
                out.push(quant(sum as f32 * x.0 / cnt as f32, y.0, y.1, dt));
            }
        }
    }
    (vec![shape[0], shape[1], oh, ow], out)
}

#[test]
fn qlinear_average_pool_pads_strides_ceil_and_channels_last() {
    let pools = [
        Pool {
            k: [2, 2],
            s: [2, 2],
            pads: [0; 4],
            ceil: false,
            include: false,
        },
        Pool {
            k: [3, 3],
            s: [1, 1],
            pads: [1, 1, 1, 1],
            ceil: false,
            include: false,
        },
        Pool {
            k: [3, 3],
            s: [1, 1],
            pads: [1, 1, 1, 1],
            ceil: false,
            include: true,
        },
        Pool {
            k: [3, 2],
            s: [2, 3],
            pads: [1, 0, 2, 1],
            ceil: true,
            include: false,
        },
        Pool {
            k: [2, 3],
            s: [3, 2],
            pads: [0, 1, 1, 0],
            ceil: true,
            include: true,
        },
    ];
    let mut seed = 500;
    let mut checked = 0;
    for dt in TYPES {
        let (lo, hi) = range(dt);
        for p in &pools {
            for shape in [[2, 3, 7, 8], [1, 2, 5, 5]] {
                seed += 10;
                let (x, xv) = random_codes(dt, &shape, seed);
                let zs = lcg(2, seed + 1, lo, hi);
                let (sx, sy) = (scale(seed + 2), scale(seed + 3) * 0.6);
                let (out, want) = avg_ref(&xv, &shape, p, (sx, zs[0]), (sy, zs[1]), dt);
                let ints = |v: &[usize]| AttrValue::Ints(v.iter().map(|&x| x as i64).collect());
                let attrs = |cl: i64| {
                    vec![
                        ("kernel_shape", ints(&p.k)),
                        ("strides", ints(&p.s)),
                        ("pads", ints(&p.pads)),
                        ("ceil_mode", AttrValue::Int(i64::from(p.ceil))),
                        ("count_include_pad", AttrValue::Int(i64::from(p.include))),
                        ("channels_last", AttrValue::Int(cl)),
                    ]
                };
                let (tsx, tzx, tsy, tzy) = (sc(sx), zp(dt, zs[0]), sc(sy), zp(dt, zs[1]));
                let what = format!("{dt} {shape:?} k {:?} s {:?} pads {:?}", p.k, p.s, p.pads);
                let got = run(
                    &node("QLinearAveragePool", &attrs(0)),
                    &[Some(&x), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
                )
                .unwrap();
                assert_eq!(got.shape, out, "{what}");
                assert_eq!(got.to_i64_vec(), want, "{what}");
                let (cl_shape, cl) = nchw_to_nhwc(&xv, &shape);
                let xc = codes(dt, &cl_shape, &cl);
                let got = run(
                    &node("QLinearAveragePool", &attrs(1)),
                    &[Some(&xc), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
                )
                .unwrap();
                let (want_shape, want_cl) = nchw_to_nhwc(&want, &out);
                assert_eq!(got.shape, want_shape, "{what} channels_last");
                assert_eq!(got.to_i64_vec(), want_cl, "{what} channels_last");
                checked += 2 * want.len();
            }
        }
    }
    // auto_pad SAME_UPPER on a 5×5 input with stride 2: output 3×3, the same windows as
    // explicit pads [1, 1, 1, 1] (total padding 2, split evenly).
    let (x, xv) = random_codes(DType::U8, &[1, 1, 5, 5], 9);
    let (tsx, tzx, tsy, tzy) = (sc(0.05), zp(DType::U8, 120), sc(0.04), zp(DType::U8, 128));
    let got = run(
        &node(
            "QLinearAveragePool",
            &[
                ("kernel_shape", AttrValue::Ints(vec![3, 3])),
                ("strides", AttrValue::Ints(vec![2, 2])),
                ("auto_pad", AttrValue::String(b"SAME_UPPER".to_vec())),
            ],
        ),
        &[Some(&x), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
    )
    .unwrap();
    let p = Pool {
        k: [3, 3],
        s: [2, 2],
        pads: [1, 1, 1, 1],
        ceil: false,
        include: false,
    };
    let (out, want) = avg_ref(&xv, &[1, 1, 5, 5], &p, (0.05, 120), (0.04, 128), DType::U8);
    assert_eq!(got.shape, out);
    assert_eq!(got.to_i64_vec(), want);
    eprintln!("QLinearAveragePool: {checked} codes equal the reference");
}

#[test]
fn qlinear_sigmoid_and_leaky_relu_map_every_code_like_the_float_definition() {
    let mut seed = 700;
    for dt in TYPES {
        let (lo, hi) = range(dt);
        // Every code, then a random 3-D tensor.
        let all: Vec<i64> = (lo..=hi).collect();
        for (shape, v) in [(vec![256], all), (vec![2, 3, 5], lcg(30, seed, lo, hi))] {
            seed += 10;
            let x = codes(dt, &shape, &v);
            let zs = lcg(2, seed + 1, lo, hi);
            let sx = scale(seed + 2) * 1.5;
            // Sigmoid's output is (0, 1): a scale that spreads it over the codes.
            let (sy_sig, zy_sig) = (1.0 / 255.0, lo);
            let sy_lr = scale(seed + 3);
            for alpha in [None, Some(0.2f32)] {
                let a = alpha.unwrap_or(0.01);
                let attrs: Vec<(&str, AttrValue)> = alpha
                    .map(|a| ("alpha", AttrValue::Float(a)))
                    .into_iter()
                    .collect();
                let (tsx, tzx, tsy, tzy) = (sc(sx), zp(dt, zs[0]), sc(sy_lr), zp(dt, zs[1]));
                let got = run(
                    &node("QLinearLeakyRelu", &attrs),
                    &[Some(&x), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
                )
                .unwrap();
                let want: Vec<i64> = v
                    .iter()
                    .map(|&q| {
                        let f = deq(q, sx, zs[0]);
                        quant(if f >= 0.0 { f } else { a * f }, sy_lr, zs[1], dt)
                    })
                    .collect();
                assert_eq!(got.shape, shape);
                assert_eq!(got.to_i64_vec(), want, "LeakyRelu {dt} alpha {a}");
            }
            let (tsx, tzx, tsy, tzy) = (sc(sx), zp(dt, zs[0]), sc(sy_sig), zp(dt, zy_sig));
            let got = run(
                &node("QLinearSigmoid", &[]),
                &[Some(&x), Some(&tsx), Some(&tzx), Some(&tsy), Some(&tzy)],
            )
            .unwrap();
            let want: Vec<i64> = v
                .iter()
                .map(|&q| {
                    let f = deq(q, sx, zs[0]);
                    quant(1.0 / (1.0 + (-f).exp()), sy_sig, zy_sig, dt)
                })
                .collect();
            assert_eq!(got.to_i64_vec(), want, "Sigmoid {dt}");
            // Sigmoid without zero points (0 of the codes' type).
            let got = run(
                &node("QLinearSigmoid", &[]),
                &[Some(&x), Some(&tsx), None, Some(&tsy)],
            )
            .unwrap();
            let want: Vec<i64> = v
                .iter()
                .map(|&q| quant(1.0 / (1.0 + (-deq(q, sx, 0)).exp()), sy_sig, 0, dt))
                .collect();
            assert_eq!(got.to_i64_vec(), want, "Sigmoid {dt} without zero points");
        }
    }
}

#[test]
fn qlinear_concat_requantizes_each_input_to_the_output_parameters() {
    let mut seed = 900;
    for dt in TYPES {
        let (lo, hi) = range(dt);
        for axis in [1i64, -1, 0] {
            seed += 10;
            // Three inputs [2, c_i, 3] (axis 1), [2, 3, c_i] (axis −1) or [c_i, 2, 3] (axis 0).
            let sizes = [2usize, 1, 3];
            let shape_of = |c: usize| match axis {
                1 => vec![2, c, 3],
                0 => vec![c, 2, 3],
                _ => vec![2, 3, c],
            };
            let zs = lcg(4, seed, lo, hi);
            let (sy, zy) = (scale(seed + 1), zs[3]);
            // The second input shares Y's parameters (copied as is).
            let params = [
                (scale(seed + 2), zs[0]),
                (sy, zy),
                (scale(seed + 3) * 2.0, zs[2]),
            ];
            let xs: Vec<(Tensor, Vec<i64>)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &c)| random_codes(dt, &shape_of(c), seed + 5 + i as u64))
                .collect();
            let ps: Vec<(Tensor, Tensor)> =
                params.iter().map(|&(s, z)| (sc(s), zp(dt, z))).collect();
            let (tsy, tzy) = (sc(sy), zp(dt, zy));
            let mut ins: Vec<Option<&Tensor>> = vec![Some(&tsy), Some(&tzy)];
            for ((x, _), (s, z)) in xs.iter().zip(&ps) {
                ins.extend([Some(x), Some(s), Some(z)]);
            }
            let got = run(
                &node("QLinearConcat", &[("axis", AttrValue::Int(axis))]),
                &ins,
            )
            .unwrap();
            // Reference: requantize each input, then concatenate along the axis.
            let a = if axis < 0 { 2 } else { axis as usize };
            let total: usize = sizes.iter().sum();
            let out_shape = shape_of(total);
            let outer: usize = out_shape[..a].iter().product();
            let inner: usize = out_shape[a + 1..].iter().product();
            let mut want = Vec::new();
            for o in 0..outer {
                for (i, (_, v)) in xs.iter().enumerate() {
                    let block = sizes[i] * inner;
                    let (s, z) = params[i];
                    want.extend(
                        v[o * block..(o + 1) * block]
                            .iter()
                            .map(|&q| quant(deq(q, s, z), sy, zy, dt)),
                    );
                }
            }
            assert_eq!(got.shape, out_shape, "{dt} axis {axis}");
            assert_eq!(got.dtype, dt);
            assert_eq!(got.to_i64_vec(), want, "{dt} axis {axis}");
            // The input with Y's parameters comes through unchanged.
            let mid: Vec<i64> = if a == 0 {
                got.to_i64_vec()[2 * inner..3 * inner].to_vec()
            } else {
                xs[1].1.clone()
            };
            assert_eq!(mid, xs[1].1);
        }
    }
}

#[test]
fn malformed_qlinear_inputs_are_errors_not_panics() {
    let (x, _) = random_codes(DType::U8, &[1, 2, 3, 3], 1);
    let (xi, _) = random_codes(DType::I8, &[1, 2, 3, 3], 2);
    let s = sc(0.1);
    let s2 = Tensor::from_f32(&[2], vec![0.1, 0.2]);
    let s_i = codes(DType::U8, &[], &[1]);
    let z = zp(DType::U8, 3);
    let zi = zp(DType::I8, 3);
    let z2 = codes(DType::U8, &[2], &[1, 2]);
    let f = Tensor::from_f32(&[1, 2, 3, 3], vec![0.0; 18]);
    let pool = |op: &str| {
        node(
            op,
            &[
                ("kernel_shape", AttrValue::Ints(vec![2, 2])),
                ("strides", AttrValue::Ints(vec![1, 1])),
            ],
        )
    };
    let unary_cases: Vec<(&str, Vec<Option<&Tensor>>)> = vec![
        (
            "too many inputs",
            vec![Some(&x), Some(&s), Some(&z), Some(&s), Some(&z), Some(&s)],
        ),
        ("missing y_scale", vec![Some(&x), Some(&s), Some(&z)]),
        (
            "missing x",
            vec![None, Some(&s), Some(&z), Some(&s), Some(&z)],
        ),
        (
            "per-channel scale",
            vec![Some(&x), Some(&s2), Some(&z), Some(&s), Some(&z)],
        ),
        (
            "integer scale",
            vec![Some(&x), Some(&s_i), Some(&z), Some(&s), Some(&z)],
        ),
        (
            "zero point of another type",
            vec![Some(&x), Some(&s), Some(&zi), Some(&s), Some(&z)],
        ),
        (
            "i8 codes with a u8 zero point",
            vec![Some(&xi), Some(&s), Some(&z), Some(&s), Some(&z)],
        ),
        (
            "vector zero point",
            vec![Some(&x), Some(&s), Some(&z2), Some(&s), Some(&z)],
        ),
        (
            "float input",
            vec![Some(&f), Some(&s), Some(&z), Some(&s), Some(&z)],
        ),
    ];
    for op in [
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearGlobalAveragePool",
        "QLinearAveragePool",
    ] {
        for (what, ins) in &unary_cases {
            let e = run(&pool(op), ins);
            assert!(e.is_err(), "{op}: {what} accepted");
        }
    }
    // A pool on a rank-2 tensor, and an AveragePool without kernel_shape.
    let (x2, _) = random_codes(DType::U8, &[2, 3], 3);
    for op in ["QLinearGlobalAveragePool", "QLinearAveragePool"] {
        assert!(run(
            &pool(op),
            &[Some(&x2), Some(&s), Some(&z), Some(&s), Some(&z)]
        )
        .is_err());
    }
    let ins = [Some(&x), Some(&s), Some(&z), Some(&s), Some(&z)];
    assert!(run(&node("QLinearAveragePool", &[]), &ins).is_err());
    // Binary: mismatched A/B types, non-broadcastable shapes, too many inputs, bad C scale.
    let (b3, _) = random_codes(DType::U8, &[4], 4);
    for op in ["QLinearAdd", "QLinearMul"] {
        let n = node(op, &[]);
        let bad: Vec<Vec<Option<&Tensor>>> = vec![
            vec![
                Some(&x),
                Some(&s),
                Some(&z),
                Some(&xi),
                Some(&s),
                Some(&zi),
                Some(&s),
                Some(&z),
            ],
            vec![
                Some(&x),
                Some(&s),
                Some(&z),
                Some(&b3),
                Some(&s),
                Some(&z),
                Some(&s),
                Some(&z),
            ],
            vec![
                Some(&x),
                Some(&s),
                Some(&z),
                Some(&x),
                Some(&s),
                Some(&z),
                Some(&s),
                Some(&z),
                Some(&s),
            ],
            vec![
                Some(&x),
                Some(&s),
                Some(&z),
                Some(&x),
                Some(&s),
                Some(&z),
                Some(&s2),
                Some(&z),
            ],
            vec![Some(&x), Some(&s), Some(&z), Some(&x), Some(&s), Some(&z)],
        ];
        for (i, ins) in bad.iter().enumerate() {
            assert!(run(&n, ins).is_err(), "{op}: bad case {i} accepted");
        }
    }
    // Concat: a broken triplet count, mismatched types, mismatched shapes, no tensors.
    let n = node("QLinearConcat", &[("axis", AttrValue::Int(1))]);
    let (x5, _) = random_codes(DType::U8, &[1, 2, 3, 4], 5);
    let bad: Vec<Vec<Option<&Tensor>>> = vec![
        vec![Some(&s), Some(&z)],
        vec![Some(&s), Some(&z), Some(&x), Some(&s), Some(&z), Some(&x)],
        vec![
            Some(&s),
            Some(&z),
            Some(&x),
            Some(&s),
            Some(&z),
            Some(&xi),
            Some(&s),
            Some(&zi),
        ],
        vec![
            Some(&s),
            Some(&z),
            Some(&x),
            Some(&s),
            Some(&z),
            Some(&x5),
            Some(&s),
            Some(&z),
        ],
        vec![Some(&s2), Some(&z), Some(&x), Some(&s), Some(&z)],
        vec![Some(&s), Some(&zi), Some(&x), Some(&s), Some(&z)],
    ];
    for (i, ins) in bad.iter().enumerate() {
        assert!(
            run(&n, ins).is_err(),
            "QLinearConcat: bad case {i} accepted"
        );
    }
}
