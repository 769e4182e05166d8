//! Transposed conv against an i64 scatter reference and a float transposed conv.

use quantkit_kernels::conv::{ConvParams, NhwcInput};
use quantkit_kernels::deconv::{deconv2d_i32_with, deconv2d_quant_with, DeconvWeights};
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
        let dw = DeconvWeights::new(&wt, c_in, c_out, p, opad, &zw).unwrap();
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
                    "{isa} {i}: {qv} vs {ideal}"
                );
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
