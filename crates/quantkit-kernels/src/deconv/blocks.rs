//! The non-overlapping transposed conv ([`DeconvAlgorithm::Blocks`](super::DeconvAlgorithm)):
//! the GEMM with its fused output stage on blocks of input rows, codes copied straight to
//! their shuffled output positions.
//!
//! When `dilation·(kernel − 1) < stride` on both axes, each output pixel receives at most
//! one GEMM sum: `out[b, iy·s + ky·d − pt, ix·s + kx·d − pl, g·C_out/g + co]` is
//! `stage(C[(b, iy, ix), (ky, kx, co)])` of group `g`'s GEMM, with no overlap-add. So the
//! GEMM runs with the output stage fused (bias, requantization, output zero point, clamp:
//! the same stores as every conv), per block of input rows into a small buffer of codes
//! (`BLOCK_BYTES`, in L1/L2), and each row's taps are copied to their output pixels
//! (`kw·C_out` bytes at once when undilated with one group: for `kernel == stride` an input
//! row's taps for one `ky` are one contiguous output run). Output pixels no tap reaches
//! (`kernel < stride`, dilation, `output_padding`) hold `stage(0)`, the value the col2im
//! path gives them (an all-zero sum), written first.
//!
//! # Exactness and threads
//! The GEMM's sums are exact (the constructor's `MAX_K` bound) and its output stage is the
//! one `col2im` applies per value (the same `OutputStage`, expanded per column), so the two
//! paths agree bit for bit on every ISA (tests/deconv.rs). Input rows map to disjoint bands
//! of output rows (`[iy·s − pt, (iy + 1)·s − pt)`, clipped), so tasks own contiguous
//! slices of the output: a split over input rows (`par::tasks` on the GEMM's estimated
//! work) gives the same bytes for any thread count.

use rayon::prelude::*;

use super::DeconvWeights;
use crate::conv::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::{table_for, Isa};
use crate::error::Result;
use crate::gemm::{gemm_quant_with, PackedWeights, PanelGeometry};
use crate::output::{OutputStage, QuantType, Requant};
use crate::par::{self, SplitKind};

/// Bytes of codes one GEMM call writes (a block of whole input rows, at least one row).
const BLOCK_BYTES: usize = 48 * 1024;

/// One group's output stage with a column per GEMM column `(tap, co)`: channel
/// `c0 + co` of `stage` for every tap (a per-tensor requantization stays per-tensor; the
/// bias is per channel).
fn column_stage(stage: &OutputStage, c0: usize, cog: usize, taps: usize) -> OutputStage {
    fn expand<V: Copy>(v: &[V], c0: usize, cog: usize, taps: usize) -> Vec<V> {
        if v.len() == 1 {
            return v.to_vec();
        }
        (0..taps * cog).map(|j| v[c0 + j % cog]).collect()
    }
    OutputStage {
        bias: stage
            .bias
            .as_deref()
            .map(|b| (0..taps * cog).map(|j| b[c0 + j % cog]).collect()),
        requant: match &stage.requant {
            Requant::Float(s) => Requant::Float(expand(s, c0, cog, taps)),
            Requant::FixedPoint {
                multipliers,
                rounding,
            } => Requant::FixedPoint {
                multipliers: expand(multipliers, c0, cog, taps),
                rounding: *rounding,
            },
        },
        ..stage.clone()
    }
}

/// The first output row of the band of flattened input row `u = b·h + iy`
/// (`[start(u), start(u + 1))` are the output rows only input row `u` writes; the last
/// row of an image also owns the rows below its reach, which hold `stage(0)`).
fn band_start(u: usize, h: usize, oh: usize, stride: usize, pad_top: usize) -> usize {
    let (b, iy) = (u / h, u % h);
    if iy == 0 {
        return b * oh;
    }
    b * oh + (iy * stride).saturating_sub(pad_top).min(oh)
}

/// Runs the transposed conv into `out` (`[n, oh, ow, c_out]`, `os`).
pub(super) fn run<T: ActElem, O: QuantType>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    p: &ConvParams,
    os: [usize; 4],
    stage: &OutputStage,
    out: &mut [O],
) -> Result<()> {
    let [n, h, wd, c] = x.shape;
    let [_, oh, ow, c_out] = os;
    let g = p.groups;
    let (cig, cog) = (c / g, c_out / g);
    let [kh, kw] = p.kernel;
    let taps = kh * kw;
    let cols_n = taps * cog;
    let geom = table_for(isa)?.mmm().geometry;
    // Weights for this call's ISA, repacked once (not per block) when it is not the
    // dispatched one.
    let packed: Vec<std::borrow::Cow<'_, PackedWeights>> =
        w.packed.iter().map(|pw| pw.for_geometry(geom)).collect();
    let stages: Vec<OutputStage> = (0..g)
        .map(|gi| column_stage(stage, gi * cog, cog, taps))
        .collect();
    for s in &stages {
        // Valid when `stage` is valid for `c_out` channels (the caller checked): this makes
        // the GEMM calls below infallible.
        s.validate("deconv2d", cols_n)?;
    }
    // A group's input channels, gathered contiguous (groups > 1 only).
    let slices: Vec<Vec<T>> = if g == 1 {
        Vec::new()
    } else {
        (0..g)
            .map(|gi| {
                x.data
                    .chunks_exact(c)
                    .flat_map(|px| px[gi * cig..][..cig].iter().copied())
                    .collect()
            })
            .collect()
    };
    let fill: Option<Vec<O>> = (!super::algo::taps_cover_output(p, w.output_padding))
        .then(|| (0..c_out).map(|co| stage.apply::<O>(0, co)).collect());

    let units = n * h;
    let rows_per_block = (BLOCK_BYTES / (wd * cols_n).max(1)).clamp(1, h.max(1));
    let work_ns =
        (n * h * wd * cols_n * cig) as f64 / macs_per_ns(geom) + (n * h * wd * cols_n) as f64 * 0.1;
    let ntasks = par::tasks(work_ns, units);
    // Each task's input rows and the output rows they own, split off front to back.
    let px = ow * c_out;
    let mut tasks = Vec::with_capacity(ntasks);
    let mut rest = &mut *out;
    let mut done = 0;
    for t in 0..ntasks {
        let r = par::task_range(t, ntasks, units);
        let end = if r.end == units {
            n * oh
        } else {
            band_start(r.end, h, oh, p.stride[0], p.pads[0])
        };
        let (mine, tail) = rest.split_at_mut((end - done) * px);
        tasks.push((r, done, mine));
        rest = tail;
        done = end;
    }
    let task = |(rows, first_oy, band): (std::ops::Range<usize>, usize, &mut [O])| {
        if let Some(fill) = &fill {
            for pixel in band.chunks_exact_mut(c_out) {
                pixel.copy_from_slice(fill);
            }
        }
        let mut buf = vec![O::default(); rows_per_block.min(rows.len()) * wd * cols_n];
        let mut u0 = rows.start;
        while u0 < rows.end {
            let u1 = (u0 + rows_per_block).min(rows.end);
            let m = (u1 - u0) * wd;
            for gi in 0..g {
                let data = if g == 1 { x.data } else { &slices[gi][..] };
                let a = T::activations(&data[u0 * wd * cig..u1 * wd * cig], m, cig, x.zero_point);
                let codes = &mut buf[..m * cols_n];
                gemm_quant_with(isa, &a, &packed[gi], &stages[gi], codes)
                    .expect("shapes and stages checked above");
                scatter(
                    codes,
                    band,
                    first_oy,
                    u0..u1,
                    [h, wd],
                    [oh, ow, c_out],
                    p,
                    gi * cog,
                    cog,
                );
            }
            u0 = u1;
        }
    };
    if tasks.len() > 1 {
        par::note(SplitKind::Deconv);
        tasks.into_par_iter().for_each(task);
    } else {
        tasks.into_iter().for_each(task);
    }
    Ok(())
}

/// MACs per nanosecond of one core of the GEMM (the conv cost model's `R_u8`).
fn macs_per_ns(geom: PanelGeometry) -> f64 {
    if geom.kgroup == crate::gemm::VNNI_KGROUP {
        220.0
    } else {
        84.0
    }
}

/// Copies one group's codes (`[rows of input rows u0..u1, (ky, kx, co)]`) to their output
/// pixels in `band`, the output from flattened row `first_oy` (`b·oh + oy`) on; taps the
/// pads crop are dropped.
#[allow(clippy::too_many_arguments)]
fn scatter<O: Copy>(
    codes: &[O],
    band: &mut [O],
    first_oy: usize,
    input_rows: std::ops::Range<usize>,
    [h, wd]: [usize; 2],
    [oh, ow, c_out]: [usize; 3],
    p: &ConvParams,
    c0: usize,
    cog: usize,
) {
    let [kh, kw] = p.kernel;
    let [sy, sx] = p.stride;
    let [dy, dx] = p.dilation;
    let cols_n = kh * kw * cog;
    // Undilated with one group, the taps kx of one ky are one contiguous run in both the
    // codes row and the output.
    let runs = dx == 1 && cog == c_out;
    for (r, u) in input_rows.enumerate() {
        let (b, iy) = (u / h, u % h);
        for ix in 0..wd {
            let row = &codes[(r * wd + ix) * cols_n..][..cols_n];
            // The kx whose column is inside the output: ox = ix·sx + kx·dx − pl in 0..ow.
            let base_x = (ix * sx) as isize - p.pads[1] as isize;
            let kx_lo = if base_x >= 0 {
                0
            } else {
                (-base_x as usize).div_ceil(dx)
            };
            let kx_hi = if base_x >= ow as isize {
                0
            } else {
                // kx·dx < ow − base_x
                kw.min(((ow as isize - base_x) as usize).div_ceil(dx))
            };
            if kx_lo >= kx_hi {
                continue;
            }
            for ky in 0..kh {
                let oy = (iy * sy + ky * dy) as isize - p.pads[0] as isize;
                if oy < 0 || oy >= oh as isize {
                    continue;
                }
                let orow = b * oh + oy as usize - first_oy;
                let taps = &row[ky * kw * cog..][..kw * cog];
                if runs {
                    let ox = (base_x + kx_lo as isize) as usize;
                    let len = (kx_hi - kx_lo) * c_out;
                    band[(orow * ow + ox) * c_out..][..len]
                        .copy_from_slice(&taps[kx_lo * cog..][..len]);
                } else {
                    for kx in kx_lo..kx_hi {
                        let ox = (base_x + (kx * dx) as isize) as usize;
                        band[(orow * ow + ox) * c_out + c0..][..cog]
                            .copy_from_slice(&taps[kx * cog..][..cog]);
                    }
                }
            }
        }
    }
}
