//! Pooling on NHWC int8 tensors. Max pool also takes f32 (the engine's dynamic-quantization
//! step pools its float result); its loop runs in the kernel table's pooling copy (compiled
//! with AVX2 on AVX2 machines: selects, exact on any ISA). Average pools are scalar.

use crate::conv::ConvParams;
use crate::dispatch::Body;
use crate::error::{KernelError, Result};
use crate::output::QuantType;
use crate::par::{self, SplitKind};
use rayon::prelude::*;

fn check(op: &'static str, len: usize, shape: [usize; 4], p: &ConvParams) -> Result<[usize; 2]> {
    let [n, h, w, c] = shape;
    if len != n * h * w * c {
        return Err(KernelError::BufferLength {
            op,
            arg: "input",
            expected: n * h * w * c,
            got: len,
        });
    }
    p.output_size(h, w)
}

/// An element [`max_pool`] takes: 8-bit codes, or f32.
pub trait PoolElem: Copy + Send + Sync {
    /// The output of a window without a valid tap (cannot happen for valid parameters).
    const LOWEST: Self;
    /// `self > other` (for f32 a NaN compares false, so only a first tap can be NaN).
    fn gt(self, other: Self) -> bool;
}

impl PoolElem for u8 {
    const LOWEST: Self = u8::MIN;
    #[inline(always)]
    fn gt(self, other: Self) -> bool {
        self > other
    }
}

impl PoolElem for i8 {
    const LOWEST: Self = i8::MIN;
    #[inline(always)]
    fn gt(self, other: Self) -> bool {
        self > other
    }
}

impl PoolElem for f32 {
    const LOWEST: Self = f32::NEG_INFINITY;
    #[inline(always)]
    fn gt(self, other: Self) -> bool {
        self > other
    }
}

/// Max pool (ONNX MaxPool, NHWC): padded positions are ignored. The output has the input's
/// quantization parameters (max commutes with a monotone affine map), so no requantization.
/// `p.groups` is ignored. Taps are visited in row-major window order; the first valid one
/// starts the window and a later one replaces it only if greater — the rule of the graph
/// crate's float MaxPool, so f32 results equal it bit for bit (NaN included).
pub fn max_pool<T: PoolElem>(
    x: &[T],
    shape: [usize; 4],
    p: &ConvParams,
    out: &mut [T],
) -> Result<[usize; 4]> {
    let [oh, ow] = check("max_pool", x.len(), shape, p)?;
    let [n, h, w, c] = shape;
    if out.len() != n * oh * ow * c {
        return Err(KernelError::BufferLength {
            op: "max_pool",
            arg: "output",
            expected: n * oh * ow * c,
            got: out.len(),
        });
    }
    if out.is_empty() || c == 0 {
        return Ok([n, oh, ow, c]);
    }
    // Bands of output rows in parallel when the work pays for it (`par`; at batch > 1
    // whole images are the bands). The common 2×2 stride-2 window without padding takes
    // the element-wise maximum of its four taps in one pass; other windows start each
    // output pixel as a copy of its first valid tap and take the maximum of the others (a
    // select per channel, which the compiler vectorises), with no per-pixel allocation, in
    // the table's pooling copy of the loop.
    let pair_window = p.is_pair_window();
    let body = crate::dispatch::kernels().pooling();
    let work_ns = (n * oh * ow * c * p.kernel[0] * p.kernel[1]) as f64 * POOL_NS_PER_TAP;
    let tasks = par::tasks(work_ns, n * oh);
    // Rows per band: whole images when there are enough of them.
    let per = if tasks <= n {
        oh
    } else {
        oh.div_ceil(tasks.div_ceil(n))
    };
    let bands: Vec<(usize, usize, &mut [T])> = out
        .chunks_mut(oh * ow * c)
        .enumerate()
        .flat_map(|(b, img)| {
            img.chunks_mut(per * ow * c)
                .enumerate()
                .map(move |(i, rows)| (b, i * per, rows))
        })
        .collect();
    let job = |(b, oy0, rows): (usize, usize, &mut [T])| {
        let job = MaxPoolImage {
            src: &x[b * h * w * c..(b + 1) * h * w * c],
            shape: [h, w, c],
            out_hw: [oh, ow],
            rows: oy0..oy0 + rows.len() / (ow * c),
            p,
            pair_window,
        };
        body.run(&job, rows, &mut []);
    };
    if tasks > 1 {
        par::note(SplitKind::Pool);
        bands
            .into_par_iter()
            .with_min_len(bands_len_per_task(n * oh.div_ceil(per), tasks))
            .for_each(job);
    } else {
        bands.into_iter().for_each(job);
    }
    Ok([n, oh, ow, c])
}

/// Estimated ns per tap and output value of [`max_pool`] (byte maxima, 32 per AVX2
/// instruction, plus loads): only the work estimate of [`par::tasks`] reads it.
const POOL_NS_PER_TAP: f64 = 0.05;

fn bands_len_per_task(bands: usize, tasks: usize) -> usize {
    bands.div_ceil(tasks).max(1)
}

/// Output rows `rows` of one image of [`max_pool`], written to the body's first buffer.
struct MaxPoolImage<'a, T> {
    src: &'a [T],
    /// Input `[h, w, c]`.
    shape: [usize; 3],
    out_hw: [usize; 2],
    /// The output rows written (the body's buffer holds exactly these).
    rows: std::ops::Range<usize>,
    p: &'a ConvParams,
    pair_window: bool,
}

impl<T: PoolElem> Body<T, u8> for MaxPoolImage<'_, T> {
    #[inline(always)]
    fn run(&self, img: &mut [T], _: &mut [u8]) {
        let [h, w, c] = self.shape;
        let [_, ow] = self.out_hw;
        let p = self.p;
        let y0 = self.rows.start;
        let max = |a: T, b: T| if b.gt(a) { b } else { a };
        if self.pair_window {
            for oy in self.rows.clone() {
                let r0 = &self.src[2 * oy * w * c..][..w * c];
                let r1 = &self.src[(2 * oy + 1) * w * c..][..w * c];
                let orow = &mut img[(oy - y0) * ow * c..][..ow * c];
                for (ox, o) in orow.chunks_exact_mut(c).enumerate() {
                    let (a0, a1) = r0[2 * ox * c..][..2 * c].split_at(c);
                    let (b0, b1) = r1[2 * ox * c..][..2 * c].split_at(c);
                    // The taps in the generic path's order, so that f32 NaN and signed
                    // zeros come out the same. Zipped slices: no bounds checks, so the
                    // loop vectorises.
                    for ((((o, &p), &q), &r), &s) in o.iter_mut().zip(a0).zip(a1).zip(b0).zip(b1) {
                        *o = max(max(max(p, q), r), s);
                    }
                }
            }
            return;
        }
        for oy in self.rows.clone() {
            for ox in 0..ow {
                let o = &mut img[((oy - y0) * ow + ox) * c..][..c];
                let mut first = true;
                for ky in 0..p.kernel[0] {
                    let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pads[0] as isize;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    for kx in 0..p.kernel[1] {
                        let ix =
                            (ox * p.stride[1] + kx * p.dilation[1]) as isize - p.pads[1] as isize;
                        if ix < 0 || ix >= w as isize {
                            continue;
                        }
                        let src = &self.src[(iy as usize * w + ix as usize) * c..][..c];
                        if first {
                            o.copy_from_slice(src);
                            first = false;
                        } else {
                            for (m, &v) in o.iter_mut().zip(src) {
                                *m = max(*m, v);
                            }
                        }
                    }
                }
                if first {
                    // A window entirely in the padding cannot happen (output_size requires
                    // the kernel to overlap the input); defensively LOWEST.
                    o.fill(T::LOWEST);
                }
            }
        }
    }
}

/// `round(num / den)` with ties away from zero, `den > 0` (TFLite's average-pool rounding).
#[inline]
pub fn div_round_half_away(num: i64, den: i64) -> i64 {
    if num >= 0 {
        (num + den / 2) / den
    } else {
        -((-num + den / 2) / den)
    }
}

/// Average pool (ONNX AveragePool, NHWC) with input and output sharing the quantization
/// parameters (scale and zero point `z`):
/// `y = clamp(z + div_round_half_away(Σ (x − z), count), T::MIN, T::MAX)` where `count` is
/// the number of taps inside the input, or the full kernel size when `count_include_pad`
/// (padded taps then count as real 0, i.e. as `z`).
pub fn avg_pool<T: QuantType>(
    x: &[T],
    shape: [usize; 4],
    z: i32,
    p: &ConvParams,
    count_include_pad: bool,
    out: &mut [T],
) -> Result<[usize; 4]> {
    let [oh, ow] = check("avg_pool", x.len(), shape, p)?;
    let [n, h, w, c] = shape;
    if out.len() != n * oh * ow * c {
        return Err(KernelError::BufferLength {
            op: "avg_pool",
            arg: "output",
            expected: n * oh * ow * c,
            got: out.len(),
        });
    }
    let mut sum = vec![0i64; c];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                sum.iter_mut().for_each(|s| *s = 0);
                let mut count = 0i64;
                for ky in 0..p.kernel[0] {
                    let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pads[0] as isize;
                    for kx in 0..p.kernel[1] {
                        let ix =
                            (ox * p.stride[1] + kx * p.dilation[1]) as isize - p.pads[1] as isize;
                        if iy < 0 || iy >= h as isize || ix < 0 || ix >= w as isize {
                            if count_include_pad {
                                count += 1;
                            }
                            continue;
                        }
                        count += 1;
                        let src = &x[((b * h + iy as usize) * w + ix as usize) * c..][..c];
                        for (s, v) in sum.iter_mut().zip(src) {
                            *s += (v.to_i32() - z) as i64;
                        }
                    }
                }
                let o = &mut out[((b * oh + oy) * ow + ox) * c..][..c];
                for (dst, &s) in o.iter_mut().zip(&sum) {
                    let y = z as i64 + div_round_half_away(s, count.max(1));
                    *dst = T::from_clamped(y.clamp(T::MIN as i64, T::MAX as i64) as i32);
                }
            }
        }
    }
    Ok([n, oh, ow, c])
}

/// Global average pool (ONNX GlobalAveragePool, NHWC → `[n, 1, 1, c]`), same rounding as
/// [`avg_pool`].
pub fn global_avg_pool<T: QuantType>(
    x: &[T],
    shape: [usize; 4],
    z: i32,
    out: &mut [T],
) -> Result<()> {
    let [_, h, w, _] = shape;
    let p = ConvParams::new(h, w);
    avg_pool(x, shape, z, &p, false, out).map(|_| ())
}
