//! Pooling, Add, Concat and lookup tables against independent references.

use quantkit_kernels::conv::ConvParams;
use quantkit_kernels::eltwise::{add, concat_last_axis, QParams};
use quantkit_kernels::lut::{erf, Function, Lut8};
use quantkit_kernels::pool::{avg_pool, global_avg_pool, max_pool};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Window values of output (b, oy, ox, ch): `Some(x)` inside the input, `None` in padding.
fn window(
    x: &[i8],
    shape: [usize; 4],
    p: &ConvParams,
    b: usize,
    oy: usize,
    ox: usize,
    ch: usize,
) -> Vec<Option<i32>> {
    let [_, h, w, c] = shape;
    let mut v = Vec::new();
    for ky in 0..p.kernel[0] {
        for kx in 0..p.kernel[1] {
            let iy = (oy * p.stride[0] + ky * p.dilation[0]) as i64 - p.pads[0] as i64;
            let ix = (ox * p.stride[1] + kx * p.dilation[1]) as i64 - p.pads[1] as i64;
            v.push(if iy < 0 || ix < 0 || iy >= h as i64 || ix >= w as i64 {
                None
            } else {
                Some(x[((b * h + iy as usize) * w + ix as usize) * c + ch] as i32)
            });
        }
    }
    v
}

#[test]
fn pools_match_references() {
    let mut rng = Rng(21);
    let shape = [2, 7, 6, 3];
    let x: Vec<i8> = (0..shape.iter().product::<usize>())
        .map(|_| rng.next() as i8)
        .collect();
    let z = -17;
    for p in [
        ConvParams {
            stride: [2, 2],
            pads: [1, 1, 1, 1],
            ..ConvParams::new(3, 3)
        },
        ConvParams {
            stride: [2, 2],
            ..ConvParams::new(2, 2)
        },
        ConvParams {
            dilation: [2, 1],
            pads: [0, 1, 2, 0],
            ..ConvParams::new(2, 3)
        },
    ] {
        let [oh, ow] = p.output_size(7, 6).unwrap();
        let mut mx = vec![0i8; 2 * oh * ow * 3];
        max_pool(&x, shape, &p, &mut mx).unwrap();
        // u8 codes (the same bytes read as unsigned): the maximum of the unsigned values.
        let xu: Vec<u8> = x.iter().map(|&v| v as u8).collect();
        let mut mu = vec![0u8; 2 * oh * ow * 3];
        max_pool(&xu, shape, &p, &mut mu).unwrap();
        for b in 0..2 {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..3 {
                        let win = window(&x, shape, &p, b, oy, ox, ch);
                        let want = win.iter().flatten().map(|&v| v as i8 as u8).max().unwrap();
                        assert_eq!(mu[((b * oh + oy) * ow + ox) * 3 + ch], want);
                    }
                }
            }
        }
        for include_pad in [false, true] {
            let mut av = vec![0i8; 2 * oh * ow * 3];
            avg_pool(&x, shape, z, &p, include_pad, &mut av).unwrap();
            for b in 0..2 {
                for oy in 0..oh {
                    for ox in 0..ow {
                        for ch in 0..3 {
                            let win = window(&x, shape, &p, b, oy, ox, ch);
                            let idx = ((b * oh + oy) * ow + ox) * 3 + ch;
                            let inside: Vec<i32> = win.iter().flatten().copied().collect();
                            assert_eq!(mx[idx] as i32, *inside.iter().max().unwrap());
                            let count = if include_pad { win.len() } else { inside.len() } as f64;
                            let mean = inside.iter().map(|&v| (v - z) as f64).sum::<f64>() / count;
                            let want = (z as f64 + mean.abs().add_half_round() * mean.signum())
                                .clamp(-128.0, 127.0);
                            assert_eq!(av[idx] as f64, want, "avg {idx} include_pad {include_pad}");
                        }
                    }
                }
            }
        }
    }
    let mut g = vec![0i8; 2 * 3];
    global_avg_pool(&x, shape, z, &mut g).unwrap();
    for b in 0..2 {
        for ch in 0..3 {
            let s: f64 = (0..42)
                .map(|i| (x[(b * 42 + i) * 3 + ch] as i32 - z) as f64)
                .sum::<f64>()
                / 42.0;
            assert_eq!(
                g[b * 3 + ch] as f64,
                (z as f64 + s.abs().add_half_round() * s.signum()).clamp(-128.0, 127.0)
            );
        }
    }
}

trait HalfAway {
    fn add_half_round(self) -> f64;
}
impl HalfAway for f64 {
    /// Round half up of a non-negative value (= half away from zero after the sign is split off).
    fn add_half_round(self) -> f64 {
        (self + 0.5).floor()
    }
}

#[test]
fn add_and_concat_requantize_within_half_a_step() {
    let mut rng = Rng(22);
    let a: Vec<u8> = (0..500).map(|_| rng.next() as u8).collect();
    let b: Vec<u8> = (0..500).map(|_| rng.next() as u8).collect();
    let (qa, qb, qy) = (
        QParams {
            scale: 0.03,
            zero_point: 120,
        },
        QParams {
            scale: 0.011,
            zero_point: 3,
        },
        QParams {
            scale: 0.04,
            zero_point: 90,
        },
    );
    let mut y = vec![0u8; 500];
    add(&a, qa, &b, qb, qy, i32::MIN, i32::MAX, &mut y).unwrap();
    for i in 0..500 {
        let real = qa.scale as f64 * (a[i] as f64 - 120.0) + qb.scale as f64 * (b[i] as f64 - 3.0);
        let ideal = (real / qy.scale as f64 + 90.0).clamp(0.0, 255.0);
        assert!(
            (y[i] as f64 - ideal).abs() <= 0.5 + 1e-3,
            "add {i}: {} vs {ideal}",
            y[i]
        );
    }
    // Fused ReLU as a clamp at the zero point.
    add(&a, qa, &b, qb, qy, 90, 255, &mut y).unwrap();
    assert!(y.iter().all(|&v| v >= 90));

    let c1: Vec<u8> = (0..4 * 3).map(|_| rng.next() as u8).collect();
    let c2: Vec<u8> = (0..4 * 2).map(|_| rng.next() as u8).collect();
    let q2 = QParams {
        scale: 0.02,
        zero_point: 10,
    };
    let mut out = vec![0u8; 4 * 5];
    concat_last_axis(&[(&c1, 3, qy), (&c2, 2, q2)], 4, qy, &mut out).unwrap();
    for o in 0..4 {
        assert_eq!(&out[o * 5..o * 5 + 3], &c1[o * 3..o * 3 + 3]);
        for j in 0..2 {
            let real = 0.02 * (c2[o * 2 + j] as f64 - 10.0);
            let ideal = (real / qy.scale as f64 + 90.0).clamp(0.0, 255.0);
            assert!((out[o * 5 + 3 + j] as f64 - ideal).abs() <= 0.5 + 1e-3);
        }
    }
    assert!(concat_last_axis(&[(&c1, 3, qy)], 4, qy, &mut out).is_err());
}

#[test]
fn lookup_tables_equal_the_quantized_function() {
    assert!((erf(1.0) - 0.842_700_792_949_715).abs() < 3e-7);
    assert!((erf(0.3) - 0.328_626_759_459_127).abs() < 1e-9);
    assert!((erf(-2.0) + 0.995_322_265_018_953).abs() < 3e-7);
    let qi = QParams {
        scale: 0.05,
        zero_point: 0,
    };
    for f in [
        Function::Sigmoid,
        Function::Tanh,
        Function::HardSwish,
        Function::Gelu,
        Function::Exp,
    ] {
        let qo = match f {
            Function::Sigmoid => QParams {
                scale: 1.0 / 256.0,
                zero_point: -128,
            },
            Function::Tanh => QParams {
                scale: 1.0 / 128.0,
                zero_point: 0,
            },
            Function::Exp => QParams {
                scale: 0.2,
                zero_point: -128,
            },
            _ => QParams {
                scale: 0.05,
                zero_point: -20,
            },
        };
        let lut = Lut8::function::<i8, i8>(f, qi, qo);
        let x: Vec<i8> = (-128..=127).map(|v| v as i8).collect();
        let mut y = vec![0i8; 256];
        lut.apply(&x, &mut y);
        for (&xi, &yi) in x.iter().zip(&y) {
            let real = f.eval(qi.scale as f64 * xi as f64);
            let ideal = (real / qo.scale as f64 + qo.zero_point as f64).clamp(-128.0, 127.0);
            assert!(
                (yi as f64 - ideal).abs() <= 0.5 + 1e-9,
                "{f:?} x={xi}: {yi} vs {ideal}"
            );
        }
        if matches!(f, Function::Sigmoid | Function::Tanh | Function::Exp) {
            assert!(y.windows(2).all(|w| w[0] <= w[1]), "{f:?} not monotone");
        }
    }
}

#[test]
fn magic_number_rounding_equals_round_ties_even() {
    use quantkit_kernels::output::round_half_even;
    let mut rng = Rng(23);
    let specials = [
        0.5f32,
        1.5,
        2.5,
        -0.5,
        -1.5,
        -2.5,
        4_194_303.5,
        -4_194_303.5,
        4_194_304.0,
        8_388_609.0,
        1e9,
        -1e9,
        0.0,
        -0.0,
        0.49999997,
    ];
    for v in specials {
        assert_eq!(round_half_even(v), v.round_ties_even(), "{v}");
    }
    for _ in 0..200_000 {
        let v = f32::from_bits(rng.next() as u32);
        if v.is_finite() {
            assert_eq!(
                round_half_even(v).to_bits() & 0x7fff_ffff,
                v.round_ties_even().to_bits() & 0x7fff_ffff,
                "{v}"
            );
        }
        let h = (rng.next() % 2_000_001) as f32 / 2.0 - 500_000.0; // many exact ties
        assert_eq!(round_half_even(h), h.round_ties_even(), "{h}");
    }
}

/// The 2×2 stride-2 max pool on f32 keeps the generic path's tap order and `>` rule: a NaN
/// in the first tap wins, a NaN in a later tap is skipped, and of +0/−0 the first one stays.
#[test]
fn pair_window_f32_max_pool_keeps_the_tap_order() {
    let p = ConvParams {
        stride: [2, 2],
        ..ConvParams::new(2, 2)
    };
    let nan = f32::NAN;
    // One 2×2 image per case, 1 channel: taps in order (0,0), (0,1), (1,0), (1,1).
    let cases: [([f32; 4], f32); 5] = [
        ([nan, 1.0, 2.0, 3.0], nan),
        ([1.0, nan, 2.0, 0.5], 2.0),
        ([1.0, 0.5, nan, 3.0], 3.0),
        ([0.0, -0.0, -0.0, -0.0], 0.0),
        ([-0.0, 0.0, 0.0, -1.0], -0.0),
    ];
    for (taps, want) in cases {
        let x = [taps[0], taps[1], taps[2], taps[3]];
        let mut out = [0f32; 1];
        max_pool(&x, [1, 2, 2, 1], &p, &mut out).unwrap();
        assert_eq!(out[0].to_bits(), want.to_bits(), "{taps:?}");
    }
}
