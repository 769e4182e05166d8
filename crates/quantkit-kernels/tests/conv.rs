//! Conv2d (NHWC) against an i64 reference, every ISA against the reference, and the
//! quantized result against a float conv on dequantized inputs.

use proptest::prelude::*;
use quantkit_kernels::conv::{
    conv2d_i32_with, conv2d_output_shape, conv2d_quant_max_pool_with, conv2d_quant_with, ActElem,
    ConvAlgorithm, ConvParams, ConvWeights, NhwcInput,
};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::Isa;

mod common;
use common::{supported, Rng};

/// Plain i64 NHWC conv with ONNX-ordered weights `[co][ci/g][ky][kx]`.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[i32],
    shape: [usize; 4],
    zx: i32,
    w: &[i32],
    zw: &[i32],
    c_out: usize,
    p: &ConvParams,
) -> (Vec<i64>, [usize; 4]) {
    let [n, h, wd, c] = shape;
    let [kh, kw] = p.kernel;
    let g = p.groups;
    let (cin_g, cout_g) = (c / g, c_out / g);
    let oh = (h + p.pads[0] + p.pads[2] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
    let ow = (wd + p.pads[1] + p.pads[3] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
    let mut out = vec![0i64; n * oh * ow * c_out];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for co in 0..c_out {
                    let gi = co / cout_g;
                    let mut s = 0i64;
                    for ci in 0..cin_g {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as i64
                                    - p.pads[0] as i64;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as i64
                                    - p.pads[1] as i64;
                                // Padding holds the zero point.
                                let xv = if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                    zx
                                } else {
                                    x[((b * h + iy as usize) * wd + ix as usize) * c
                                        + gi * cin_g
                                        + ci]
                                };
                                let wv = w[((co * cin_g + ci) * kh + ky) * kw + kx];
                                s += (xv - zx) as i64 * (wv - zw[co]) as i64;
                            }
                        }
                    }
                    out[((b * oh + oy) * ow + ox) * c_out + co] = s;
                }
            }
        }
    }
    (out, [n, oh, ow, c_out])
}

struct Layer {
    shape: [usize; 4],
    c_out: usize,
    p: ConvParams,
}

fn layers() -> Vec<Layer> {
    let mk = |k: usize, s: usize, d: usize, pads: [usize; 4], g: usize| ConvParams {
        kernel: [k, k],
        stride: [s, s],
        dilation: [d, d],
        pads,
        groups: g,
    };
    vec![
        Layer {
            shape: [2, 5, 4, 7],
            c_out: 9,
            p: mk(1, 1, 1, [0; 4], 1),
        }, // 1×1 direct GEMM
        Layer {
            shape: [1, 6, 7, 5],
            c_out: 17,
            p: mk(3, 1, 1, [1; 4], 1),
        }, // 3×3 same
        Layer {
            shape: [1, 9, 8, 3],
            c_out: 8,
            p: mk(3, 2, 1, [1, 0, 2, 1], 1),
        }, // strided, asym pads
        Layer {
            shape: [1, 9, 9, 4],
            c_out: 6,
            p: mk(3, 1, 2, [2; 4], 1),
        }, // dilated
        Layer {
            shape: [2, 5, 5, 8],
            c_out: 12,
            p: mk(3, 1, 1, [1; 4], 4),
        }, // grouped
        Layer {
            shape: [1, 7, 6, 6],
            c_out: 6,
            p: mk(3, 1, 1, [1; 4], 6),
        }, // depthwise
        Layer {
            shape: [1, 8, 8, 4],
            c_out: 8,
            p: mk(3, 2, 1, [1; 4], 4),
        }, // depthwise ×2, stride 2
        // Winograd F(2×2, 3×3): odd H, odd C_in and W without padding, asymmetric pads,
        // several 16-channel blocks and panels, a batch of 3.
        Layer {
            shape: [2, 7, 6, 8],
            c_out: 17,
            p: mk(3, 1, 1, [1; 4], 1),
        },
        Layer {
            shape: [1, 6, 9, 9],
            c_out: 16,
            p: mk(3, 1, 1, [0; 4], 1),
        },
        Layer {
            shape: [1, 5, 5, 33],
            c_out: 20,
            p: mk(3, 1, 1, [2, 1, 0, 2], 1),
        },
        Layer {
            shape: [3, 4, 4, 16],
            c_out: 32,
            p: mk(3, 1, 1, [1; 4], 1),
        },
        Layer {
            shape: [1, 4, 5, 3],
            c_out: 5,
            p: ConvParams {
                kernel: [2, 3],
                ..mk(1, 1, 1, [0, 1, 0, 1], 1)
            },
        },
    ]
}

fn run_layer<T: ActElem>(rng: &mut Rng, layer: &Layer, to_t: fn(i32) -> T, xr: (i32, i32)) {
    let [n, h, wd, c] = layer.shape;
    let p = layer.p;
    let cin_g = c / p.groups;
    let x: Vec<i32> = (0..n * h * wd * c).map(|_| rng.range(xr.0, xr.1)).collect();
    let zx = if rng.next().is_multiple_of(3) {
        xr.1
    } else {
        rng.range(xr.0, xr.1)
    };
    let wlen = layer.c_out * cin_g * p.kernel[0] * p.kernel[1];
    let w: Vec<i32> = (0..wlen).map(|_| rng.range(-128, 127)).collect();
    let zw: Vec<i32> = (0..layer.c_out)
        .map(|_| {
            if rng.next().is_multiple_of(2) {
                0
            } else {
                rng.range(-128, 127)
            }
        })
        .collect();
    let w8: Vec<i8> = w.iter().map(|&v| v as i8).collect();
    let cw = ConvWeights::new(&w8, layer.c_out, c, p, &zw).unwrap();
    let xt: Vec<T> = x.iter().map(|&v| to_t(v)).collect();
    let input = NhwcInput {
        data: &xt,
        shape: layer.shape,
        zero_point: zx,
    };
    let (want, oshape) = reference(&x, layer.shape, zx, &w, &zw, layer.c_out, &p);
    assert_eq!(conv2d_output_shape(layer.shape, &cw).unwrap(), oshape);
    let total = oshape.iter().product::<usize>();

    // Per-channel float stage, bias, u8 output.
    let sx = 0.02f64;
    let sw: Vec<f64> = (0..layer.c_out)
        .map(|_| 0.001 + (rng.next() % 100) as f64 * 1e-4)
        .collect();
    let sy = 0.05f64 * (cin_g * p.kernel[0] * p.kernel[1]) as f64 / 9.0;
    let zy = rng.range(0, 255);
    let bias: Vec<i32> = (0..layer.c_out).map(|_| rng.range(-2000, 2000)).collect();
    let scales: Vec<f32> = sw.iter().map(|&s| (sx * s / sy) as f32).collect();
    let stage = OutputStage::float(scales.clone(), zy).with_bias(bias.clone());

    for isa in supported() {
        let mut got = vec![0i32; total];
        conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
        for (i, (&g, &e)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g as i64, e,
                "{isa} layer {:?} c_out {} idx {i}",
                layer.shape, layer.c_out
            );
        }
        let mut q = vec![0u8; total];
        conv2d_quant_with(isa, &input, &cw, &stage, &mut q).unwrap();
        for (i, &qv) in q.iter().enumerate() {
            let co = i % layer.c_out;
            // Exact: the documented float stage on the exact accumulator.
            let exact = quantkit_kernels::reference::float_output_i64(
                want[i],
                bias[co] as i64,
                scales[co],
                zy,
                0,
                255,
            );
            assert_eq!(qv as i32, exact, "{isa} stage idx {i}");
            // Within the quantization bound of a float conv on dequantized values:
            // real y = sx·sw·(acc + bias); |q − clamp(y/sy + zy)| ≤ 1/2 (+ f32 rounding).
            let real = sx * sw[co] * (want[i] + bias[co] as i64) as f64;
            let ideal = (real / sy + zy as f64).clamp(0.0, 255.0);
            assert!(
                (qv as f64 - ideal).abs() <= 0.5 + 1e-3,
                "{isa} idx {i}: {qv} vs float {ideal}"
            );
        }
    }
}

#[test]
fn conv_layers_u8_and_i8_match_references() {
    let mut rng = Rng(11);
    for layer in layers() {
        run_layer::<u8>(&mut rng, &layer, |v| v as u8, (0, 255));
        run_layer::<i8>(&mut rng, &layer, |v| v as i8, (-128, 127));
    }
}

#[test]
fn depthwise_path_is_chosen_and_bad_input_is_an_error() {
    let p = ConvParams {
        groups: 4,
        ..ConvParams::new(3, 3)
    };
    let cw = ConvWeights::new(&[1i8; 36], 4, 4, p, &[0]).unwrap();
    assert!(cw.is_depthwise());
    let x = vec![0u8; 2 * 2 * 4];
    let input = NhwcInput {
        data: &x,
        shape: [1, 2, 2, 4],
        zero_point: 0,
    };
    let mut out = vec![0i32; 4];
    // 3×3 kernel on a 2×2 input without padding does not fit.
    assert!(conv2d_i32_with(Isa::Scalar, &input, &cw, &mut out).is_err());
    assert!(ConvWeights::new(&[1i8; 35], 4, 4, p, &[0]).is_err());
    assert!(ConvWeights::new(&[1i8; 36], 4, 3, ConvParams { groups: 2, ..p }, &[0]).is_err());
}

/// Depthwise layers wide enough for the vectorised body (channel counts that are not
/// multiples of 8 or 16, so the remainder lanes run too), with a fused ReLU clamp and both
/// output stages: every ISA equals scalar bit for bit, and scalar equals the i64 reference.
#[test]
fn wide_depthwise_every_isa_equals_scalar_with_clamp_and_fixed_point() {
    use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
    let mut rng = Rng(29);
    let cases = [
        ([2, 9, 10, 37], 1, ConvParams::new(3, 3), [1usize; 4], 1),
        ([1, 11, 9, 24], 2, ConvParams::new(3, 3), [2; 4], 2),
        ([1, 13, 12, 19], 1, ConvParams::new(5, 5), [2, 1, 2, 2], 1),
    ];
    for (shape, mult, base, pads, dil) in cases {
        let c = shape[3];
        let c_out = c * mult;
        let p = ConvParams {
            groups: c,
            pads,
            dilation: [dil, dil],
            stride: if base.kernel[0] == 5 { [2, 2] } else { [1, 1] },
            ..base
        };
        let n_in: usize = shape.iter().product();
        let x: Vec<i32> = (0..n_in).map(|_| rng.range(0, 255)).collect();
        let zx = [0, 255, 97][rng.range(0, 2) as usize];
        let w: Vec<i32> = (0..c_out * p.kernel[0] * p.kernel[1])
            .map(|_| rng.range(-128, 127))
            .collect();
        let zw: Vec<i32> = (0..c_out).map(|_| rng.range(-128, 127)).collect();
        let w8: Vec<i8> = w.iter().map(|&v| v as i8).collect();
        let cw = ConvWeights::new(&w8, c_out, c, p, &zw).unwrap();
        assert!(cw.is_depthwise());
        let xt: Vec<u8> = x.iter().map(|&v| v as u8).collect();
        let input = NhwcInput {
            data: &xt,
            shape,
            zero_point: zx,
        };
        let (want, oshape) = reference(&x, shape, zx, &w, &zw, c_out, &p);
        let total: usize = oshape.iter().product();
        let bias: Vec<i32> = (0..c_out).map(|_| rng.range(-5000, 5000)).collect();
        let scales: Vec<f32> = (0..c_out)
            .map(|_| 1e-4 + (rng.next() % 1000) as f32 * 1e-6)
            .collect();
        let zy = rng.range(0, 255);
        let relu = OutputStage::float(scales.clone(), zy)
            .with_bias(bias.clone())
            .with_clamp(zy, 255);
        let fixed = OutputStage::fixed_point(
            scales
                .iter()
                .map(|&s| QuantizedMultiplier::from_f64(s as f64).unwrap())
                .collect(),
            FixedPointRounding::DoubleRounding,
            zy,
        )
        .with_bias(bias.clone());
        let run = |isa: Isa, stage: &OutputStage| {
            let mut q = vec![0u8; total];
            conv2d_quant_with(isa, &input, &cw, stage, &mut q).unwrap();
            q
        };
        let (scalar_relu, scalar_fixed) = (run(Isa::Scalar, &relu), run(Isa::Scalar, &fixed));
        for (i, &qv) in scalar_relu.iter().enumerate() {
            let co = i % c_out;
            let exact = quantkit_kernels::reference::float_output_i64(
                want[i],
                bias[co] as i64,
                scales[co],
                zy,
                zy,
                255,
            );
            assert_eq!(qv as i32, exact, "scalar {shape:?} idx {i}");
        }
        for isa in supported() {
            let mut raw = vec![0i32; total];
            conv2d_i32_with(isa, &input, &cw, &mut raw).unwrap();
            assert!(
                raw.iter().zip(&want).all(|(&g, &e)| g as i64 == e),
                "{isa} {shape:?} raw sums"
            );
            assert_eq!(run(isa, &relu), scalar_relu, "{isa} {shape:?} float + relu");
            assert_eq!(
                run(isa, &fixed),
                scalar_fixed,
                "{isa} {shape:?} fixed point"
            );
        }
    }
}

/// Which convs take the Winograd path, and that it agrees with im2col + GEMM bit for bit
/// (raw sums and fused output stage with a ReLU clamp) on every ISA, also with 2 threads.
#[test]
fn winograd_is_chosen_for_3x3_stride_1_and_equals_im2col() {
    let mut rng = Rng(29);
    let p = ConvParams {
        pads: [1; 4],
        ..ConvParams::new(3, 3)
    };
    let (c_in, c_out) = (24, 40);
    let w: Vec<i8> = (0..c_out * c_in * 9)
        .map(|_| rng.range(-128, 127) as i8)
        .collect();
    let zw: Vec<i32> = (0..c_out).map(|_| rng.range(-20, 20)).collect();
    let wino =
        ConvWeights::with_algorithm(&w, c_out, c_in, p, &zw, ConvAlgorithm::Winograd).unwrap();
    assert_eq!(wino.method(), "winograd");
    let gemm = ConvWeights::with_algorithm(&w, c_out, c_in, p, &zw, ConvAlgorithm::Im2col).unwrap();
    assert_eq!(gemm.method(), "gemm");
    // Not Winograd (the cost model's next best instead): stride 2, dilation 2, groups, 5×5,
    // fewer than 8 input channels.
    let not = |q: ConvParams, ci: usize, co: usize| {
        let n = co * (ci / q.groups) * q.kernel[0] * q.kernel[1];
        ConvWeights::with_algorithm(&vec![1i8; n], co, ci, q, &[0], ConvAlgorithm::Winograd)
            .unwrap()
            .method()
    };
    assert_ne!(
        not(
            ConvParams {
                stride: [2, 2],
                ..p
            },
            16,
            16
        ),
        "winograd"
    );
    assert_ne!(
        not(
            ConvParams {
                dilation: [2, 2],
                ..p
            },
            16,
            16
        ),
        "winograd"
    );
    assert_ne!(not(ConvParams { groups: 2, ..p }, 16, 16), "winograd");
    assert_ne!(not(ConvParams::new(5, 5), 16, 16), "winograd");
    assert_ne!(not(p, 7, 16), "winograd");
    // Its exactness bound assumes an 8-bit zero point: anything else is an error.
    let x0 = vec![0u8; 4 * 4 * c_in];
    let bad = NhwcInput {
        data: &x0,
        shape: [1, 4, 4, c_in],
        zero_point: 256,
    };
    let mut o = vec![0i32; 16 * c_out];
    assert!(conv2d_i32_with(Isa::Scalar, &bad, &wino, &mut o).is_err());

    let shape = [2, 9, 10, c_in];
    let x: Vec<u8> = (0..shape.iter().product::<usize>())
        .map(|_| rng.range(0, 255) as u8)
        .collect();
    let input = NhwcInput {
        data: &x,
        shape,
        zero_point: 131,
    };
    let total = conv2d_output_shape(shape, &wino).unwrap().iter().product();
    let scales: Vec<f32> = (0..c_out).map(|i| 1e-4 * (1 + i) as f32).collect();
    let bias: Vec<i32> = (0..c_out).map(|_| rng.range(-5000, 5000)).collect();
    let stage = OutputStage::float(scales, 7)
        .with_bias(bias)
        .with_clamp(7, 255);
    let run = |isa: Isa, cw: &ConvWeights| {
        let mut raw = vec![0i32; total];
        conv2d_i32_with(isa, &input, cw, &mut raw).unwrap();
        let mut q = vec![0u8; total];
        conv2d_quant_with(isa, &input, cw, &stage, &mut q).unwrap();
        (raw, q)
    };
    let want = run(Isa::Scalar, &gemm);
    for isa in supported() {
        assert!(
            run(isa, &wino) == want,
            "{isa}: winograd differs from im2col"
        );
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert!(
            two.install(|| run(isa, &wino)) == want,
            "{isa}: winograd on 2 threads differs"
        );
    }
}

/// Conv + max pool in one call equals the conv followed by the pool, bit for bit: the fused
/// paths (2×2 stride-2 pool, each window's four exact sums reduced before the stage) of
/// Winograd, few-channel (packed and, with zero weight zero points, read in place), im2col
/// and 1×1 convs, with float and fixed-point stages, weight zero points, odd output sizes (last row/column dropped), odd C_in, u8 and i8, 1 and 2
/// threads; and the unfused fallbacks (other pools, a stage that is not monotone).
#[test]
fn conv_with_max_pool_equals_conv_then_pool() {
    use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
    use quantkit_kernels::pool::max_pool;
    let mut rng = Rng(41);
    let p = ConvParams {
        pads: [1; 4],
        ..ConvParams::new(3, 3)
    };
    let pair = ConvParams {
        stride: [2, 2],
        ..ConvParams::new(2, 2)
    };
    let other_pools = [
        ConvParams {
            stride: [2, 2],
            pads: [1; 4],
            ..ConvParams::new(3, 3)
        },
        ConvParams::new(2, 2),
    ];
    let pointwise = ConvParams::new(1, 1);
    let s2 = ConvParams {
        stride: [2, 2],
        ..p
    };
    let cases = [
        ([2, 9, 10, 24], 40, p, "winograd"),
        ([1, 8, 8, 16], 16, p, "winograd"),
        ([3, 7, 5, 9], 21, p, "winograd"),
        // F(4×4): 4×4 tiles of 2×2 pool windows; outputs that are not multiples of 4
        // (the second pooled row/column of the last tiles dropped), odd C_in.
        ([2, 9, 10, 24], 40, p, "winograd4"),
        ([1, 8, 8, 16], 16, p, "winograd4"),
        ([3, 7, 5, 9], 21, p, "winograd4"),
        ([1, 14, 14, 32], 20, p, "winograd4"),
        // The GEMM paths: pooled blocks of 3 rows (8 pooled rows: 3 + 3 + 2), odd widths.
        ([2, 16, 15, 3], 20, p, "gemm-pairs"),
        ([1, 17, 28, 1], 32, p, "gemm-pairs"),
        // Strided few-channel convs: the pool-window tile steps two strides per window;
        // 9 and 8 windows per pooled row (calls of 6 + 3 and 6 + 2), C_in 3 and 2, 33
        // output channels (the last of three panels partial).
        ([2, 33, 35, 3], 20, s2, "gemm-pairs"),
        ([1, 30, 31, 2], 33, s2, "gemm-pairs"),
        ([2, 6, 9, 5], 17, p, "gemm"),
        ([2, 10, 7, 5], 18, pointwise, "gemm"),
        // The direct conv's pooled tiles (weight zero points 0 only): odd sizes, partial
        // panels and chunks of 4 pooled pixels.
        ([2, 16, 15, 3], 20, p, "direct"),
        ([2, 9, 13, 8], 40, p, "direct"),
        ([1, 17, 28, 1], 70, p, "direct"),
        // Row words (C_in 1, 2, 5: fewer words than channel quads per tap), LeNet's conv1.
        ([1, 28, 28, 1], 32, p, "direct"),
        ([2, 11, 9, 2], 33, p, "direct"),
        ([1, 10, 13, 5], 16, p, "direct"),
    ];
    // Weight zero points of 0 (the few-channel path's indirect micro-kernel) and not 0.
    let cases = cases.into_iter().flat_map(|c| [(c, false), (c, true)]);
    for ((shape, c_out, p, method), zero_zw) in cases {
        if method == "direct" && !zero_zw {
            continue;
        }
        let c_in = shape[3];
        let taps = p.kernel[0] * p.kernel[1];
        let w: Vec<i8> = (0..c_out * c_in * taps)
            .map(|_| rng.range(-128, 127) as i8)
            .collect();
        let zw: Vec<i32> = (0..c_out)
            .map(|_| if zero_zw { 0 } else { rng.range(-9, 9) })
            .collect();
        let algo = match method {
            "winograd" => ConvAlgorithm::Winograd,
            "winograd4" => ConvAlgorithm::Winograd4,
            "gemm-pairs" => ConvAlgorithm::Pairs,
            "direct" => ConvAlgorithm::Direct,
            _ => ConvAlgorithm::Im2col,
        };
        let wino = ConvWeights::with_algorithm(&w, c_out, c_in, p, &zw, algo).unwrap();
        assert_eq!(wino.method(), method);
        let gemm =
            ConvWeights::with_algorithm(&w, c_out, c_in, p, &zw, ConvAlgorithm::Im2col).unwrap();
        let xs: Vec<i32> = (0..shape.iter().product::<usize>())
            .map(|_| rng.range(0, 255))
            .collect();
        let scales: Vec<f32> = (0..c_out).map(|i| 2e-5 * (1 + i % 7) as f32).collect();
        let bias: Vec<i32> = (0..c_out).map(|_| rng.range(-90_000, 90_000)).collect();
        let float = OutputStage::float(scales.clone(), 9)
            .with_bias(bias.clone())
            .with_clamp(9, 255);
        let fixed = OutputStage::fixed_point(
            scales
                .iter()
                .map(|&s| QuantizedMultiplier::from_f64(s as f64).unwrap())
                .collect(),
            FixedPointRounding::DoubleRounding,
            -3,
        )
        .with_bias(bias.clone());
        // A negative multiplier: decreasing, so pooling the sums would be wrong.
        let mut negative = fixed.clone();
        if let quantkit_kernels::output::Requant::FixedPoint { multipliers, .. } =
            &mut negative.requant
        {
            multipliers[1].multiplier = -multipliers[1].multiplier;
        }
        fn check<T: ActElem, O>(
            input: &NhwcInput<'_, T>,
            stage: &OutputStage,
            pools: &[ConvParams],
            weights: [&ConvWeights; 2],
            what: &str,
        ) where
            O: quantkit_kernels::output::QuantType
                + quantkit_kernels::pool::PoolElem
                + PartialEq
                + std::fmt::Debug,
        {
            let [wino, gemm] = weights;
            let conv_shape = conv2d_output_shape(input.shape, gemm).unwrap();
            let mut full = vec![O::default(); conv_shape.iter().product()];
            conv2d_quant_with(Isa::Scalar, input, gemm, stage, &mut full).unwrap();
            for pool in pools {
                let [n, oh, ow, c] = conv_shape;
                let [ph, pw] = pool.output_size(oh, ow).unwrap();
                let mut want = vec![O::default(); n * ph * pw * c];
                max_pool(&full, conv_shape, pool, &mut want).unwrap();
                for isa in supported() {
                    for cw in [wino, gemm] {
                        let run = || {
                            let mut got = vec![O::default(); want.len()];
                            let s =
                                conv2d_quant_max_pool_with(isa, input, cw, stage, pool, &mut got)
                                    .unwrap();
                            assert_eq!(s, [n, ph, pw, c]);
                            got
                        };
                        let tag = format!("{what}, {isa}, {}, pool {:?}", cw.method(), pool);
                        assert_eq!(run(), want, "{tag}");
                        let two = rayon::ThreadPoolBuilder::new()
                            .num_threads(2)
                            .build()
                            .unwrap();
                        assert_eq!(two.install(run), want, "{tag}, 2 threads");
                    }
                }
                // A wrong output length is an error, not a panic.
                let mut short = vec![O::default(); want.len().saturating_sub(1)];
                if !want.is_empty() {
                    assert!(conv2d_quant_max_pool_with(
                        Isa::Scalar,
                        input,
                        wino,
                        stage,
                        pool,
                        &mut short
                    )
                    .is_err());
                }
            }
        }
        let xu: Vec<u8> = xs.iter().map(|&v| v as u8).collect();
        let xi: Vec<i8> = xs.iter().map(|&v| (v - 128) as i8).collect();
        let u8_in = NhwcInput {
            data: &xu,
            shape,
            zero_point: 120,
        };
        let i8_in = NhwcInput {
            data: &xi,
            shape,
            zero_point: -6,
        };
        let pools: Vec<ConvParams> = std::iter::once(pair).chain(other_pools).collect();
        check::<u8, u8>(&u8_in, &float, &pools, [&wino, &gemm], "u8→u8 float");
        check::<i8, i8>(&i8_in, &fixed, &pools, [&wino, &gemm], "i8→i8 fixed");
        check::<u8, i8>(&u8_in, &negative, &[pair], [&wino, &gemm], "negative");
    }
}

/// The exactness bound of `quantkit_kernels::winograd` at its edge: 1,827 channels of
/// extreme values (|x − za| = 255, |w − zw| = 128, so |4·Y| is within 0.03 % of 2^31) are
/// exact on the Winograd path, and 1,828 channels are not packed for it.
#[test]
fn winograd_is_exact_at_its_bound_and_declines_past_it() {
    let p = ConvParams::new(3, 3);
    let c_out = 3;
    assert_ne!(
        ConvWeights::with_algorithm(
            &vec![-128i8; c_out * 1828 * 9],
            c_out,
            1828,
            p,
            &[0],
            ConvAlgorithm::Winograd
        )
        .unwrap()
        .method(),
        "winograd"
    );
    let c_in = 1827;
    let mut rng = Rng(5);
    // Channel 0: all −128 (the largest |Y|, negative); others random extremes.
    let w: Vec<i8> = (0..c_out * c_in * 9)
        .map(|i| {
            if i < c_in * 9 || rng.next().is_multiple_of(2) {
                -128
            } else {
                127
            }
        })
        .collect();
    let cw =
        ConvWeights::with_algorithm(&w, c_out, c_in, p, &[0], ConvAlgorithm::Winograd).unwrap();
    assert_eq!(cw.method(), "winograd");
    let shape = [1, 4, 5, c_in];
    let xi: Vec<i32> = (0..shape.iter().product::<usize>())
        .map(|i| {
            // Columns 0–2 all 255 (output (0, 0) reaches the bound), random extremes after.
            if (i / c_in) % 5 < 3 || rng.next().is_multiple_of(2) {
                255
            } else {
                0
            }
        })
        .collect();
    let x: Vec<u8> = xi.iter().map(|&v| v as u8).collect();
    let input = NhwcInput {
        data: &x,
        shape,
        zero_point: 0,
    };
    let wi: Vec<i32> = w.iter().map(|&v| v as i32).collect();
    let (want, oshape) = reference(&xi, shape, 0, &wi, &[0; 3], c_out, &p);
    assert!(want.iter().any(|&v| v == -(9 * 255 * 128 * c_in as i64)));
    for isa in supported() {
        let mut got = vec![0i32; oshape.iter().product()];
        conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
        let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
        assert!(got == want, "{isa}: winograd at the bound is not exact");
    }
}

/// F(4×4, 3×3)'s exactness bound at its edge (`255·Σ|w − zw| < 2^25` per output channel):
/// 114 channels of extreme values (|x − za| = 255, |w − zw| = 128: |Y| within 0.2 % of
/// 2^25, both signs) are exact on every ISA, and at 115 channels a forced `winograd4`
/// falls back to F(2×2).
#[test]
fn winograd4_is_exact_at_its_bound_and_declines_past_it() {
    let p = ConvParams::new(3, 3);
    let c_out = 3;
    let past = ConvWeights::with_algorithm(
        &vec![-128i8; c_out * 115 * 9],
        c_out,
        115,
        p,
        &[0],
        ConvAlgorithm::Winograd4,
    )
    .unwrap();
    assert_eq!(past.method(), "winograd");
    let c_in = 114;
    let mut rng = Rng(6);
    // Channel 0: all −128; the others random extremes (their Σ|w| is the same).
    let w: Vec<i8> = (0..c_out * c_in * 9)
        .map(|i| {
            if i < c_in * 9 || rng.next().is_multiple_of(2) {
                -128
            } else {
                127
            }
        })
        .collect();
    let cw =
        ConvWeights::with_algorithm(&w, c_out, c_in, p, &[0], ConvAlgorithm::Winograd4).unwrap();
    assert_eq!(cw.method(), "winograd4");
    let wi: Vec<i32> = w.iter().map(|&v| v as i32).collect();
    let shape = [1, 6, 7, c_in];
    for (za, hi) in [(0, 255), (255, 0)] {
        let xi: Vec<i32> = (0..shape.iter().product::<usize>())
            .map(|i| {
                // Rows 0–2, columns 0–2 at the far end (output (0, 0) reaches the bound),
                // random extremes elsewhere.
                let (y, x) = (i / c_in / 7, (i / c_in) % 7);
                if (y < 3 && x < 3) || rng.next().is_multiple_of(2) {
                    hi
                } else {
                    za
                }
            })
            .collect();
        let x: Vec<u8> = xi.iter().map(|&v| v as u8).collect();
        let input = NhwcInput {
            data: &x,
            shape,
            zero_point: za,
        };
        let (want, oshape) = reference(&xi, shape, za, &wi, &[0; 3], c_out, &p);
        let edge = 9 * 255 * 128 * c_in as i64;
        assert!(
            want.iter().any(|&v| v.abs() == edge),
            "the bound is reached"
        );
        assert!(edge < 1 << 25);
        for isa in supported() {
            let mut got = vec![0i32; oshape.iter().product()];
            conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
            let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
            assert!(
                got == want,
                "{isa}, za {za}: winograd4 at the bound is not exact"
            );
        }
    }
}

/// Convs with 1–4 input channels take the pairs packing (`gemm-pairs`: channel pairs, and
/// row pairs of the last channel of an odd C_in) and agree with the plain im2col bit for bit
/// on every ISA, 1 and 2 threads: u8 and i8 activations, weight zero points (so the packed
/// row sums and the missing tap below an odd kernel matter), even and odd kernel heights,
/// images wide enough for the contiguous panel copies, and strided, dilated and 5×5
/// kernels.
#[test]
fn few_channel_convs_equal_im2col() {
    let mut rng = Rng(41);
    let mk = |k: usize, s: usize, d: usize, pad: usize| ConvParams {
        kernel: [k, k],
        stride: [s, s],
        dilation: [d, d],
        pads: [pad; 4],
        groups: 1,
    };
    let cases = [
        (1, mk(3, 1, 1, 1)),
        (2, mk(3, 1, 1, 1)),
        (3, mk(3, 1, 1, 1)),
        (4, mk(3, 1, 1, 0)),
        (3, mk(5, 2, 1, 2)),
        (3, mk(3, 1, 2, 2)),
        (1, mk(2, 1, 1, 0)),
        (1, mk(5, 1, 2, 3)),
        (1, mk(3, 2, 1, 1)),
    ];
    // Weight zero points not 0 (packed panels with row sums) and all 0 (the 6-pixel tiles
    // read in place in the planes, `i16.rows`).
    let cases = cases.into_iter().flat_map(|c| [(c, false), (c, true)]);
    for ((c_in, p), zero_zw) in cases {
        let c_out = 19;
        let w: Vec<i8> = (0..c_out * c_in * p.kernel[0] * p.kernel[1])
            .map(|_| rng.range(-128, 127) as i8)
            .collect();
        let zw: Vec<i32> = (0..c_out)
            .map(|_| if zero_zw { 0 } else { rng.range(-9, 9) })
            .collect();
        let fast =
            ConvWeights::with_algorithm(&w, c_out, c_in, p, &zw, ConvAlgorithm::Pairs).unwrap();
        assert_eq!(fast.method(), "gemm-pairs", "c_in {c_in} {p:?}");
        let plain =
            ConvWeights::with_algorithm(&w, c_out, c_in, p, &zw, ConvAlgorithm::Im2col).unwrap();
        let shape = [2, 13, 20, c_in];
        let len = shape.iter().product::<usize>();
        let stage = OutputStage::float(vec![3e-4; c_out], 11)
            .with_bias((0..c_out as i32).map(|i| 40 * i - 300).collect())
            .with_clamp(11, 255);
        let total: usize = conv2d_output_shape(shape, &fast).unwrap().iter().product();
        macro_rules! check {
            ($t:ty, $lo:expr, $hi:expr) => {{
                let x: Vec<$t> = (0..len).map(|_| rng.range($lo, $hi) as $t).collect();
                let input = NhwcInput {
                    data: &x,
                    shape,
                    zero_point: rng.range($lo, $hi),
                };
                let run = |isa: Isa, cw: &ConvWeights| {
                    let mut raw = vec![0i32; total];
                    conv2d_i32_with(isa, &input, cw, &mut raw).unwrap();
                    let mut q = vec![0u8; total];
                    conv2d_quant_with(isa, &input, cw, &stage, &mut q).unwrap();
                    (raw, q)
                };
                let want = run(Isa::Scalar, &plain);
                let two = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                for isa in supported() {
                    assert!(run(isa, &fast) == want, "{isa} c_in {c_in} {p:?}");
                    assert!(two.install(|| run(isa, &fast)) == want, "{isa} 2 threads");
                }
            }};
        }
        check!(u8, 0, 255);
        check!(i8, -128, 127);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Random 3×3 stride-1 convs with 8–40 input channels (the Winograd path) and 1–4 (the
    /// channel-pair path): random sizes (odd and even, down to one output pixel), pads 0–2
    /// per side, batch 1–3, u8 or i8 activations, any zero points. Raw sums on every ISA
    /// equal the i64 reference exactly.
    #[test]
    fn winograd_and_pairs_paths_equal_the_reference(
        n in 1usize..4, h in 1usize..12, w in 1usize..12,
        c_in in prop_oneof![1usize..5, 8usize..41], c_out in 1usize..40,
        pads in proptest::array::uniform4(0usize..3), seed in any::<u64>(), signed in any::<bool>(),
    ) {
        let p = ConvParams { pads, ..ConvParams::new(3, 3) };
        prop_assume!(p.output_size(h, w).is_ok());
        let mut rng = Rng(seed);
        let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
        let shape = [n, h, w, c_in];
        let x: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| rng.range(lo, hi)).collect();
        let zx = rng.range(lo, hi);
        let wv: Vec<i32> = (0..c_out * c_in * 9).map(|_| rng.range(-128, 127)).collect();
        let zw: Vec<i32> = (0..c_out).map(|_| if rng.next().is_multiple_of(3) { rng.range(-128, 127) } else { 0 }).collect();
        let w8: Vec<i8> = wv.iter().map(|&v| v as i8).collect();
        let algo = if c_in >= 8 { ConvAlgorithm::Winograd } else { ConvAlgorithm::Pairs };
        let cw = ConvWeights::with_algorithm(&w8, c_out, c_in, p, &zw, algo).unwrap();
        prop_assert_eq!(cw.method(), if c_in >= 8 { "winograd" } else { "gemm-pairs" });
        let (want, oshape) = reference(&x, shape, zx, &wv, &zw, c_out, &p);
        let total = oshape.iter().product::<usize>();
        for isa in supported() {
            let mut got = vec![0i32; total];
            if signed {
                let xt: Vec<i8> = x.iter().map(|&v| v as i8).collect();
                let input = NhwcInput { data: &xt, shape, zero_point: zx };
                conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
            } else {
                let xt: Vec<u8> = x.iter().map(|&v| v as u8).collect();
                let input = NhwcInput { data: &xt, shape, zero_point: zx };
                conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
            }
            let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
            prop_assert_eq!(&got, &want, "{} {:?} c_in {} c_out {}", isa, shape, c_in, c_out);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Winograd F(4×4, 3×3), forced: random 3×3 stride-1 convs with 8–40 input channels,
    /// sizes 1–17 (outputs that are not multiples of 4, several tiles and bands), pads 0–2
    /// per side, batch 1–3, u8 or i8 activations, any zero points and weight zero points.
    /// Raw sums on every ISA equal the i64 reference exactly, and the quantized output
    /// equals the im2col path's.
    #[test]
    fn winograd4_path_equals_the_reference(
        n in 1usize..4, h in 1usize..18, w in 1usize..18,
        c_in in 8usize..41, c_out in 1usize..40,
        pads in proptest::array::uniform4(0usize..3), seed in any::<u64>(), signed in any::<bool>(),
    ) {
        let p = ConvParams { pads, ..ConvParams::new(3, 3) };
        prop_assume!(p.output_size(h, w).is_ok());
        let mut rng = Rng(seed);
        let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
        let shape = [n, h, w, c_in];
        let x: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| rng.range(lo, hi)).collect();
        let zx = rng.range(lo, hi);
        let wv: Vec<i32> = (0..c_out * c_in * 9).map(|_| rng.range(-128, 127)).collect();
        let zw: Vec<i32> = (0..c_out).map(|_| if rng.next().is_multiple_of(3) { rng.range(-128, 127) } else { 0 }).collect();
        let w8: Vec<i8> = wv.iter().map(|&v| v as i8).collect();
        let cw = ConvWeights::with_algorithm(&w8, c_out, c_in, p, &zw, ConvAlgorithm::Winograd4).unwrap();
        prop_assert_eq!(cw.method(), "winograd4");
        let gemm = ConvWeights::with_algorithm(&w8, c_out, c_in, p, &zw, ConvAlgorithm::Im2col).unwrap();
        let (want, oshape) = reference(&x, shape, zx, &wv, &zw, c_out, &p);
        let total = oshape.iter().product::<usize>();
        let scales: Vec<f32> = (0..c_out).map(|i| 3e-5 * (1 + i % 5) as f32).collect();
        let stage = OutputStage::float(scales, 3).with_bias(vec![77; c_out]);
        for isa in supported() {
            let mut got = vec![0i32; total];
            let mut q = vec![0u8; total];
            let mut q_gemm = vec![0u8; total];
            if signed {
                let xt: Vec<i8> = x.iter().map(|&v| v as i8).collect();
                let input = NhwcInput { data: &xt, shape, zero_point: zx };
                conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
                conv2d_quant_with(isa, &input, &cw, &stage, &mut q).unwrap();
                conv2d_quant_with(Isa::Scalar, &input, &gemm, &stage, &mut q_gemm).unwrap();
            } else {
                let xt: Vec<u8> = x.iter().map(|&v| v as u8).collect();
                let input = NhwcInput { data: &xt, shape, zero_point: zx };
                conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
                conv2d_quant_with(isa, &input, &cw, &stage, &mut q).unwrap();
                conv2d_quant_with(Isa::Scalar, &input, &gemm, &stage, &mut q_gemm).unwrap();
            }
            let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
            prop_assert_eq!(&got, &want, "{} {:?} c_in {} c_out {}", isa, shape, c_in, c_out);
            prop_assert_eq!(&q, &q_gemm, "{} quantized", isa);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The direct (im2col-free `vpdpbusd`) conv, forced: random kernels 1–5, strides 1–3,
    /// dilations 1–2, pads 0–2 per side, 1–19 input channels (quads padded) and 1–70 output
    /// channels (partial 32-column panels and 16-column halves), batch 1–3 (register tiles of
    /// 8 pixels across row and image edges), u8 or i8 activations with any zero point,
    /// weight zero points 0. Raw sums on every ISA (the portable tile on scalar and AVX2, the
    /// `vpdpbusd` tile on AVX-512 VNNI) equal the i64 reference exactly, and the quantized
    /// output equals the im2col path's bit for bit.
    #[test]
    fn direct_path_equals_the_reference(
        n in 1usize..4, h in 1usize..12, w in 1usize..12,
        c_in in 1usize..20, c_out in 1usize..71, kh in 1usize..6, kw in 1usize..6,
        stride in 1usize..4, dil in 1usize..3,
        pads in proptest::array::uniform4(0usize..3), seed in any::<u64>(), signed in any::<bool>(),
    ) {
        let p = ConvParams {
            pads, stride: [stride, stride], dilation: [dil, dil], ..ConvParams::new(kh, kw)
        };
        prop_assume!(p.output_size(h, w).is_ok());
        prop_assume!(!(kh == 1 && kw == 1 && stride == 1 && pads == [0; 4]));
        let mut rng = Rng(seed);
        let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
        let shape = [n, h, w, c_in];
        let x: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| rng.range(lo, hi)).collect();
        let zx = rng.range(lo, hi);
        let wv: Vec<i32> = (0..c_out * c_in * kh * kw).map(|_| rng.range(-128, 127)).collect();
        let zw = vec![0; c_out];
        let w8: Vec<i8> = wv.iter().map(|&v| v as i8).collect();
        let cw = ConvWeights::with_algorithm(&w8, c_out, c_in, p, &zw, ConvAlgorithm::Direct).unwrap();
        prop_assert_eq!(cw.method(), "direct");
        let plain = ConvWeights::with_algorithm(&w8, c_out, c_in, p, &zw, ConvAlgorithm::Im2col).unwrap();
        let (want, oshape) = reference(&x, shape, zx, &wv, &zw, c_out, &p);
        let total = oshape.iter().product::<usize>();
        let stage = OutputStage::float((0..c_out).map(|i| 3e-4 * (1 + i % 7) as f32).collect(), 7)
            .with_bias((0..c_out as i32).map(|i| 50 * i - 900).collect());
        for isa in supported() {
            let mut got = vec![0i32; total];
            let (mut q, mut q_plain) = (vec![0u8; total], vec![0u8; total]);
            if signed {
                let xt: Vec<i8> = x.iter().map(|&v| v as i8).collect();
                let input = NhwcInput { data: &xt, shape, zero_point: zx };
                conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
                conv2d_quant_with(isa, &input, &cw, &stage, &mut q).unwrap();
                conv2d_quant_with(isa, &input, &plain, &stage, &mut q_plain).unwrap();
            } else {
                let xt: Vec<u8> = x.iter().map(|&v| v as u8).collect();
                let input = NhwcInput { data: &xt, shape, zero_point: zx };
                conv2d_i32_with(isa, &input, &cw, &mut got).unwrap();
                conv2d_quant_with(isa, &input, &cw, &stage, &mut q).unwrap();
                conv2d_quant_with(isa, &input, &plain, &stage, &mut q_plain).unwrap();
            }
            let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
            prop_assert_eq!(&got, &want, "{} {:?} c_in {} c_out {} {:?}", isa, shape, c_in, c_out, p);
            prop_assert_eq!(&q, &q_plain, "quantized: {} {:?}", isa, p);
        }
    }
}
