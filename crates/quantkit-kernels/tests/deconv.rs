//! Transposed conv against an i64 scatter reference and a float transposed conv.

use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
use quantkit_kernels::conv::{ConvParams, NhwcInput};
use quantkit_kernels::deconv::{
    deconv2d_i32_with, deconv2d_quant_padded_with, deconv2d_quant_with, DeconvAlgorithm,
    DeconvWeights,
};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::Isa;

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

#[test]
fn deconv_matches_references() {
    let mut rng = Rng(31);
    let cases = [
        // (input NHWC, c_out, params, output_padding)
        (
            [1, 4, 5, 3],
            4,
            ConvParams {
                stride: [2, 2],
                ..ConvParams::new(2, 2)
            },
            [0, 0],
        ),
        (
            [2, 3, 3, 5],
            6,
            ConvParams {
                stride: [2, 2],
                pads: [1, 1, 1, 1],
                ..ConvParams::new(3, 3)
            },
            [1, 1],
        ),
        (
            [1, 5, 4, 2],
            3,
            ConvParams {
                dilation: [2, 1],
                pads: [0, 1, 1, 0],
                ..ConvParams::new(3, 2)
            },
            [0, 0],
        ),
        // Groups: 2 groups of 3 → 2 channels; depthwise (4 groups of 1 → 1).
        (
            [1, 4, 3, 6],
            4,
            ConvParams {
                stride: [2, 2],
                pads: [1, 0, 0, 1],
                groups: 2,
                ..ConvParams::new(3, 2)
            },
            [1, 0],
        ),
        (
            [2, 5, 5, 4],
            4,
            ConvParams {
                stride: [2, 2],
                groups: 4,
                ..ConvParams::new(2, 2)
            },
            [0, 0],
        ),
        // Non-overlapping (the blocks path): kernel == stride with a 1-pixel crop on every
        // side; kernel < stride (gaps hold stage(0)); dilated taps inside the stride
        // window (d·(k − 1) = 2 < 3); output_padding; rows wide enough for several GEMM
        // blocks per call (64 px × 4 taps × 64 channels = 16 KiB of codes per input row).
        (
            [2, 5, 6, 7],
            5,
            ConvParams {
                stride: [2, 2],
                pads: [1, 1, 1, 1],
                ..ConvParams::new(2, 2)
            },
            [0, 0],
        ),
        (
            [1, 4, 5, 3],
            4,
            ConvParams {
                stride: [3, 2],
                ..ConvParams::new(2, 1)
            },
            [2, 1],
        ),
        (
            [1, 3, 4, 4],
            6,
            ConvParams {
                stride: [3, 3],
                dilation: [2, 2],
                pads: [0, 2, 1, 0],
                groups: 2,
                ..ConvParams::new(2, 2)
            },
            [0, 2],
        ),
        (
            [1, 7, 64, 17],
            64,
            ConvParams {
                stride: [2, 2],
                ..ConvParams::new(2, 2)
            },
            [0, 0],
        ),
        // K large enough to stress int32: 2000 channels × 4 taps (sums near 2^28).
        (
            [1, 2, 2, 2000],
            3,
            ConvParams {
                stride: [1, 1],
                ..ConvParams::new(2, 2)
            },
            [0, 0],
        ),
    ];
    for (shape, c_out, p, opad) in cases {
        let [n, h, w, c_in] = shape;
        let [kh, kw] = p.kernel;
        let (cig, cog) = (c_in / p.groups, c_out / p.groups);
        let x: Vec<u8> = (0..n * h * w * c_in).map(|_| rng.next() as u8).collect();
        let zx = (rng.next() % 256) as i32;
        let wt: Vec<i8> = (0..c_in * cog * kh * kw)
            .map(|_| rng.next() as i8)
            .collect();
        let zw: Vec<i32> = (0..c_out)
            .map(|i| {
                if i % 2 == 0 {
                    0
                } else {
                    (rng.next() % 256) as i32 - 128
                }
            })
            .collect();
        let packed = || DeconvWeights::new(&wt, c_in, c_out, p, opad, &zw).unwrap();
        let blocks_apply = (0..2).all(|i| p.dilation[i] * (p.kernel[i] - 1) < p.stride[i]);
        let dw = packed();
        let os = dw.output_shape(shape).unwrap();
        let [_, oh, ow, _] = os;
        // i64 scatter reference, straight from the ConvTranspose definition.
        let mut want = vec![0i64; n * oh * ow * c_out];
        for b in 0..n {
            for iy in 0..h {
                for ix in 0..w {
                    for ci in 0..c_in {
                        for co in (ci / cig) * cog..(ci / cig + 1) * cog {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let oy = (iy * p.stride[0] + ky * p.dilation[0]) as i64
                                        - p.pads[0] as i64;
                                    let ox = (ix * p.stride[1] + kx * p.dilation[1]) as i64
                                        - p.pads[1] as i64;
                                    if oy < 0 || ox < 0 || oy >= oh as i64 || ox >= ow as i64 {
                                        continue;
                                    }
                                    let xv =
                                        x[((b * h + iy) * w + ix) * c_in + ci] as i64 - zx as i64;
                                    let wv = wt[((ci * cog + co % cog) * kh + ky) * kw + kx] as i64
                                        - zw[co] as i64;
                                    want[((b * oh + oy as usize) * ow + ox as usize) * c_out
                                        + co] += xv * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
        let input = NhwcInput {
            data: &x,
            shape,
            zero_point: zx,
        };
        let sx = 0.02f64;
        let sw: Vec<f64> = (0..c_out).map(|i| 0.002 + i as f64 * 0.0007).collect();
        let sy = 0.2f64;
        let scales: Vec<f32> = sw.iter().map(|s| (sx * s / sy) as f32).collect();
        let bias: Vec<i32> = (0..c_out).map(|i| i as i32 * 100 - 150).collect();
        let stage = OutputStage::float(scales.clone(), 128).with_bias(bias.clone());
        for isa in Isa::ALL {
            if !isa.is_supported() {
                eprintln!("skipping {}: this CPU lacks its instructions", isa.name());
                continue;
            }
            let mut got = vec![0i32; want.len()];
            assert_eq!(deconv2d_i32_with(isa, &input, &dw, &mut got).unwrap(), os);
            assert!(
                got.iter().zip(&want).all(|(&g, &e)| g as i64 == e),
                "{isa} {shape:?}"
            );
            for algo in [DeconvAlgorithm::Col2im, DeconvAlgorithm::Blocks] {
                let dw = packed().with_algorithm(algo);
                let ran = if algo == DeconvAlgorithm::Blocks && blocks_apply {
                    DeconvAlgorithm::Blocks
                } else {
                    DeconvAlgorithm::Col2im
                };
                assert_eq!(dw.algorithm(), ran, "{shape:?} {p:?}");
                let mut q = vec![0u8; want.len()];
                deconv2d_quant_with(isa, &input, &dw, &stage, &mut q).unwrap();
                for (i, &qv) in q.iter().enumerate() {
                    let co = i % c_out;
                    let exact = quantkit_kernels::reference::float_output_i64(
                        want[i],
                        bias[co] as i64,
                        scales[co],
                        128,
                        0,
                        255,
                    );
                    assert_eq!(qv as i32, exact);
                    let ideal = (sx * sw[co] * (want[i] + bias[co] as i64) as f64 / sy + 128.0)
                        .clamp(0.0, 255.0);
                    assert!(
                        (qv as f64 - ideal).abs() <= 0.5 + 1e-3,
                        "{isa} {algo:?} {i}: {qv} vs {ideal}"
                    );
                }
            }
        }
    }
    // Groups must divide both channel counts; output_padding must be below stride or
    // dilation; K·taps beyond the exact i32 range is refused.
    let bad = |w: &[i8], c_in, c_out, p, opad| DeconvWeights::new(w, c_in, c_out, p, opad, &[0]);
    let grouped = ConvParams {
        groups: 2,
        ..ConvParams::new(1, 2)
    };
    assert!(bad(&[0i8; 6], 3, 2, grouped, [0, 0]).is_err());
    assert!(bad(&[0i8; 4], 2, 2, grouped, [0, 0]).is_ok());
    assert!(bad(&[0i8; 4], 2, 2, grouped, [1, 0]).is_err());
    let big = ConvParams::new(2, 2);
    assert!(bad(&vec![0i8; 8300 * 4], 8300, 1, big, [0, 0]).is_err());
}

/// The blocks path gives the col2im path's bytes for every activation and output type,
/// float and fixed-point requantization, clamps, per-tensor and per-channel stages, and
/// pads passed per call; and scalar's bytes on every ISA.
#[test]
fn deconv_blocks_equal_col2im_on_every_isa() {
    let mut rng = Rng(77);
    let k2s2 = ConvParams {
        stride: [2, 2],
        ..ConvParams::new(2, 2)
    };
    let cases = [
        // (input NHWC, c_out, params, output_padding, call pads)
        ([1, 6, 9, 24], 24, k2s2, [0, 0], [0; 4]),
        ([3, 5, 4, 8], 1, k2s2, [0, 0], [1, 0, 0, 1]),
        (
            [1, 4, 4, 6],
            9,
            ConvParams {
                stride: [4, 3],
                groups: 3,
                ..ConvParams::new(3, 3)
            },
            [1, 2],
            [2, 1, 0, 3],
        ),
        ([2, 3, 3, 33], 40, ConvParams::new(1, 1), [0, 0], [0; 4]),
    ];
    for (ci, (shape, c_out, p, opad, pads)) in cases.into_iter().enumerate() {
        let [n, h, w, c_in] = shape;
        let [kh, kw] = p.kernel;
        let wt: Vec<i8> = (0..c_in * (c_out / p.groups) * kh * kw)
            .map(|_| rng.next() as i8)
            .collect();
        let zw: Vec<i32> = (0..c_out).map(|i| (i as i32 % 3) - 1).collect();
        let xu: Vec<u8> = (0..n * h * w * c_in).map(|_| rng.next() as u8).collect();
        let xi: Vec<i8> = xu.iter().map(|&v| v as i8).collect();
        let scales: Vec<f32> = (0..c_out).map(|i| 0.004 + 0.001 * i as f32).collect();
        let bias: Vec<i32> = (0..c_out).map(|i| 37 * i as i32 - 400).collect();
        let stages = [
            OutputStage::float(scales.clone(), 3).with_bias(bias.clone()),
            OutputStage::float(vec![0.0125], -7).with_clamp(-20, 90),
            OutputStage::fixed_point(
                scales
                    .iter()
                    .map(|&s| QuantizedMultiplier::from_f64(s as f64).unwrap())
                    .collect(),
                FixedPointRounding::DoubleRounding,
                10,
            )
            .with_bias(bias.clone()),
        ];
        let col = DeconvWeights::new(&wt, c_in, c_out, p, opad, &zw)
            .unwrap()
            .with_algorithm(DeconvAlgorithm::Col2im);
        let blk = DeconvWeights::new(&wt, c_in, c_out, p, opad, &zw)
            .unwrap()
            .with_algorithm(DeconvAlgorithm::Blocks);
        assert_eq!(blk.algorithm(), DeconvAlgorithm::Blocks);
        let os = blk.output_shape_padded(shape, pads).unwrap();
        let len: usize = os.iter().product();
        for (si, stage) in stages.iter().enumerate() {
            macro_rules! check {
                ($x:expr, $zx:expr, $O:ty) => {{
                    let input = NhwcInput {
                        data: $x,
                        shape,
                        zero_point: $zx,
                    };
                    let mut want = vec![<$O>::default(); len];
                    deconv2d_quant_padded_with(Isa::Scalar, &input, &col, pads, stage, &mut want)
                        .unwrap();
                    for isa in Isa::ALL {
                        if !isa.is_supported() {
                            eprintln!("skipping {}: this CPU lacks its instructions", isa.name());
                            continue;
                        }
                        let mut got = vec![<$O>::default(); len];
                        let got_os =
                            deconv2d_quant_padded_with(isa, &input, &blk, pads, stage, &mut got)
                                .unwrap();
                        assert_eq!(got_os, os);
                        assert!(got == want, "case {ci} stage {si} {isa}");
                    }
                }};
            }
            check!(&xu[..], 117, u8);
            check!(&xu[..], 0, i8);
            check!(&xi[..], -5, u8);
            check!(&xi[..], 127, i8);
        }
        // A wrong output length is an error, not a panic.
        let input = NhwcInput {
            data: &xu[..],
            shape,
            zero_point: 0,
        };
        let mut short = vec![0u8; len - 1];
        assert!(deconv2d_quant_padded_with(
            Isa::Scalar,
            &input,
            &blk,
            pads,
            &stages[0],
            &mut short
        )
        .is_err());
    }
    // Overlapping taps (3×3 stride 2) cannot take the blocks path.
    let overlap = ConvParams {
        stride: [2, 2],
        ..ConvParams::new(3, 3)
    };
    let dw = DeconvWeights::new(&[1i8; 9], 1, 1, overlap, [0, 0], &[0])
        .unwrap()
        .with_algorithm(DeconvAlgorithm::Blocks);
    assert_eq!(dw.algorithm(), DeconvAlgorithm::Col2im);
    assert_eq!(
        DeconvAlgorithm::parse("BLOCKS"),
        Some(DeconvAlgorithm::Blocks)
    );
    assert_eq!(DeconvAlgorithm::parse("nope"), None);
}
