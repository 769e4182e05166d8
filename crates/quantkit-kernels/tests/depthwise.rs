//! The depthwise conv in 16-channel blocks (`conv/dw_blocks.rs`, multiplier 1, float output
//! stage): scalar against an i64 reference with the float output stage, and every SIMD ISA
//! against scalar bit for bit, on channel counts around the block width, kernels 1–5 (odd
//! and even tap counts), strides 1–3, dilations, asymmetric pads, batches 1–3, u8 and i8
//! codes in and out, values and zero points at both ends of their ranges.

use quantkit_kernels::conv::{conv2d_quant_with, ActElem, ConvParams, ConvWeights, NhwcInput};
use quantkit_kernels::output::{OutputStage, QuantType};
use quantkit_kernels::reference::float_output_i64;
use quantkit_kernels::Isa;

mod common;
use common::supported;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u64) as i32
    }
    /// A value of `[lo, hi]`, one of the two ends a quarter of the time each.
    fn edgy(&mut self, lo: i32, hi: i32) -> i32 {
        match self.next() % 4 {
            0 => lo,
            1 => hi,
            _ => self.range(lo, hi),
        }
    }
}

/// Plain i64 depthwise conv (multiplier 1), NHWC, weights `[c][ky][kx]`.
fn reference(
    x: &[i32],
    shape: [usize; 4],
    zx: i32,
    w: &[i32],
    zw: &[i32],
    p: &ConvParams,
) -> (Vec<i64>, [usize; 4]) {
    let [n, h, wd, c] = shape;
    let [kh, kw] = p.kernel;
    let oh = (h + p.pads[0] + p.pads[2] - p.dilation[0] * (kh - 1) - 1) / p.stride[0] + 1;
    let ow = (wd + p.pads[1] + p.pads[3] - p.dilation[1] * (kw - 1) - 1) / p.stride[1] + 1;
    let mut out = vec![0i64; n * oh * ow * c];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for ch in 0..c {
                    let mut s = 0i64;
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy =
                                (oy * p.stride[0] + ky * p.dilation[0]) as i64 - p.pads[0] as i64;
                            let ix =
                                (ox * p.stride[1] + kx * p.dilation[1]) as i64 - p.pads[1] as i64;
                            if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                continue;
                            }
                            let xv = x[((b * h + iy as usize) * wd + ix as usize) * c + ch];
                            let wv = w[(ch * kh + ky) * kw + kx];
                            s += (xv - zx) as i64 * (wv - zw[ch]) as i64;
                        }
                    }
                    out[((b * oh + oy) * ow + ox) * c + ch] = s;
                }
            }
        }
    }
    (out, [n, oh, ow, c])
}

/// One random layer with input codes `T` and output codes `O`: scalar equals the
/// reference, every ISA equals scalar.
fn check_layer<T: ActElem, O: QuantType + PartialEq + std::fmt::Debug + Default + Copy>(
    rng: &mut Rng,
    shape: [usize; 4],
    p: ConvParams,
    to_t: fn(i32) -> T,
) {
    let c = shape[3];
    let (xlo, xhi) = (T::MIN, T::MAX);
    let n_in: usize = shape.iter().product();
    let x: Vec<i32> = (0..n_in).map(|_| rng.edgy(xlo, xhi)).collect();
    let zx = rng.edgy(xlo, xhi);
    let w: Vec<i32> = (0..c * p.kernel[0] * p.kernel[1])
        .map(|_| rng.edgy(-128, 127))
        .collect();
    let zw: Vec<i32> = if rng.next().is_multiple_of(2) {
        vec![0; c]
    } else {
        (0..c).map(|_| rng.edgy(-128, 127)).collect()
    };
    let w8: Vec<i8> = w.iter().map(|&v| v as i8).collect();
    let cw = ConvWeights::new(&w8, c, c, p, &zw).unwrap();
    assert_eq!(cw.method(), "depthwise");
    let xt: Vec<T> = x.iter().map(|&v| to_t(v)).collect();
    let input = NhwcInput {
        data: &xt,
        shape,
        zero_point: zx,
    };
    let (want, oshape) = reference(&x, shape, zx, &w, &zw, &p);
    let total: usize = oshape.iter().product();
    let bias: Vec<i32> = (0..c).map(|_| rng.range(-20000, 20000)).collect();
    // Per-channel scales, one per tensor, and some multipliers ≥ 1.
    let scales: Vec<f32> = match rng.next() % 3 {
        0 => vec![2e-4 + (rng.next() % 1000) as f32 * 1e-6],
        1 => (0..c)
            .map(|_| 1e-4 + (rng.next() % 1000) as f32 * 1e-5)
            .collect(),
        _ => (0..c)
            .map(|_| 0.5 + (rng.next() % 100) as f32 * 0.03)
            .collect(),
    };
    let zy = rng.edgy(O::MIN, O::MAX);
    let (lo, hi) = if rng.next().is_multiple_of(2) {
        (zy, O::MAX)
    } else {
        (O::MIN, O::MAX)
    };
    let stage = OutputStage::float(scales.clone(), zy)
        .with_bias(bias.clone())
        .with_clamp(lo, hi);
    let run = |isa: Isa| {
        let mut q = vec![O::default(); total];
        conv2d_quant_with(isa, &input, &cw, &stage, &mut q).unwrap();
        q
    };
    let scalar = run(Isa::Scalar);
    for (i, &qv) in scalar.iter().enumerate() {
        let ch = i % c;
        let s = if scales.len() == 1 {
            scales[0]
        } else {
            scales[ch]
        };
        let exact = float_output_i64(want[i], bias[ch] as i64, s, zy, lo, hi);
        assert_eq!(qv.to_i32(), exact, "scalar {shape:?} {p:?} idx {i}");
    }
    for isa in supported() {
        assert_eq!(run(isa), scalar, "{isa} {shape:?} {p:?}");
    }
}

#[test]
fn blocked_depthwise_equals_reference_and_every_isa_equals_scalar() {
    let mut rng = Rng(0x5eed_d00d);
    // Channel counts below, at and above one and two blocks (one channel is not depthwise;
    // below 8 the row kernel runs, so 2 and 3 check the choice keeps results equal).
    let channels = [2usize, 3, 8, 15, 16, 17, 24, 31, 32, 33, 40, 48];
    let mut cases = 0;
    for (i, &c) in channels.iter().enumerate() {
        for k in 1..=5usize {
            let stride = 1 + (i + k) % 3;
            let dil = if (i + k) % 4 == 0 { 2 } else { 1 };
            let pads = [
                rng.range(0, k as i32 - 1) as usize,
                rng.range(0, k as i32 - 1) as usize,
                rng.range(0, k as i32) as usize,
                rng.range(0, k as i32 - 1) as usize,
            ];
            let kw = if k == 2 { 3 } else { k };
            let p = ConvParams {
                kernel: [k, kw],
                stride: [stride, if k == 4 { 1 } else { stride }],
                dilation: [dil, dil],
                pads,
                groups: c,
            };
            let n = 1 + (i + k) % 3;
            let h = dil * (k - 1) + 1 + rng.range(0, 7) as usize;
            let wd = dil * (kw - 1) + 1 + rng.range(0, 9) as usize;
            let shape = [n, h, wd, c];
            match (i + k) % 4 {
                0 => check_layer::<u8, u8>(&mut rng, shape, p, |v| v as u8),
                1 => check_layer::<i8, u8>(&mut rng, shape, p, |v| v as i8),
                2 => check_layer::<u8, i8>(&mut rng, shape, p, |v| v as u8),
                _ => check_layer::<i8, i8>(&mut rng, shape, p, |v| v as i8),
            }
            cases += 1;
        }
    }
    assert_eq!(cases, channels.len() * 5);
}

/// The shapes of PP-OCR's mobile classifier and MobileNet (3×3 and 5×5, stride 1 and 2,
/// SAME pads) at sizes where whole rows of interior pixels run.
#[test]
fn mobilenet_shapes_every_isa_equals_scalar() {
    let mut rng = Rng(7);
    for (shape, k, s) in [
        ([1, 24, 96, 8], 3, 2),
        ([1, 12, 48, 16], 3, 1),
        ([1, 12, 48, 56], 5, 2),
        ([1, 6, 24, 96], 5, 1),
        ([1, 14, 14, 64], 3, 2),
    ] {
        let p = ConvParams {
            kernel: [k, k],
            stride: [s, s],
            dilation: [1, 1],
            pads: [k / 2; 4],
            groups: shape[3],
        };
        check_layer::<u8, u8>(&mut rng, shape, p, |v| v as u8);
    }
}
