//! Direct convolution with `vpdpbusd` (an implicit GEMM that packs nothing): the register
//! tile reads its activations straight from a zero-point-padded copy of the input.
//!
//! In NHWC with the channels padded to a multiple of 4, four consecutive channels of one
//! tap of one pixel are one 32-bit word: exactly a k-group of AVX-512 VNNI's quads layout.
//! So for K ordered `(ky, kx, channel quad)`, word `g` of the im2col row of output pixel
//! `(b, oy, ox)` is the word at byte `row(b, oy, ox) + koff[g]` of the padded image, with
//! `row = ((b·Hp + oy·sh)·Wp + ox·sw)·C4` and `koff[g] = ((ky·dh)·Wp + kx·dw)·C4 + 4q`. The
//! micro-kernel (8 output pixels × 32 channels) broadcasts those words in place: no im2col
//! rows are gathered and no panel is packed; the only copy is the padded image (the input
//! once, i8 flipped to u8, borders and channel padding at the zero point).
//!
//! Exactness: `Σ_k (a − za)(w − zw) = Σ_k a·w − za·Σ_k w` when every `zw = 0` (the only
//! case packed for this path), the kernel computes `Σ a·w` in wrapping i32 and
//! `−za·Σw` is a column term added by the output stage: exact modulo 2^32 like the GEMM,
//! hence exact for `K ≤ MAX_K`. Padded taps hold `za` and padded channels have zero
//! weights, so both contribute 0.

use rayon::prelude::*;

use super::params::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::Kernels;
use crate::gemm::{Tile, TileWriter, NR, TILE, VNNI_KGROUP, VNNI_NR};
use crate::output::QuantType;
use crate::par::{self, SplitKind};

/// Output pixels per register tile.
const ROWS: usize = 8;
/// Most register tiles per parallel task.
const TILES_PER_TASK: usize = 16;

/// Conv weights packed for the direct path: `[panel][g][32][4]` i8 with K ordered
/// `(ky, kx, channel quad)`, channels padded to `c4 = ⌈C_in/4⌉·4` with zeros, columns to
/// whole panels; and `Σ_k w` per column.
pub(crate) struct DirectWeights {
    c4: usize,
    kernel: [usize; 2],
    kgroups: usize,
    n_panels: usize,
    data: Vec<i8>,
    col_sums: Vec<i32>,
}

impl DirectWeights {
    /// Packs ONNX-ordered `[c_out, c_in, kh, kw]` weights of one group whose weight zero
    /// points are all 0 (the caller checks).
    pub(crate) fn new(weights: &[i8], c_out: usize, c_in: usize, kernel: [usize; 2]) -> Self {
        let [kh, kw] = kernel;
        let c4 = c_in.div_ceil(VNNI_KGROUP) * VNNI_KGROUP;
        let quads = c4 / VNNI_KGROUP;
        let kgroups = kh * kw * quads;
        let n_panels = c_out.div_ceil(VNNI_NR);
        let mut data = vec![0i8; n_panels * kgroups * VNNI_NR * VNNI_KGROUP];
        let mut col_sums = vec![0i32; n_panels * VNNI_NR];
        for co in 0..c_out {
            let (p, c) = (co / VNNI_NR, co % VNNI_NR);
            for ky in 0..kh {
                for kx in 0..kw {
                    for ci in 0..c_in {
                        let v = weights[((co * c_in + ci) * kh + ky) * kw + kx];
                        let g = (ky * kw + kx) * quads + ci / VNNI_KGROUP;
                        let at = ((p * kgroups + g) * VNNI_NR + c) * VNNI_KGROUP + ci % VNNI_KGROUP;
                        data[at] = v;
                        col_sums[co] += v as i32;
                    }
                }
            }
        }
        DirectWeights {
            c4,
            kernel,
            kgroups,
            n_panels,
            data,
            col_sums,
        }
    }
}

/// Runs the direct conv of `x` (checked against the weights; output `oh × ow`, `c_out`
/// channels) into `writer`, with the table's direct tile, tasks of up to
/// [`TILES_PER_TASK`] register tiles, in parallel when `work_ns` (the call's estimated
/// time on one core) pays for it ([`par::tasks`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_direct<T: ActElem, O: QuantType>(
    k: &Kernels,
    x: &NhwcInput<'_, T>,
    dw: &DirectWeights,
    p: &ConvParams,
    [oh, ow]: [usize; 2],
    c_out: usize,
    pool: bool,
    work_ns: f64,
    writer: &mut TileWriter<'_, O>,
) {
    let [n, h, w, c] = x.shape;
    let [pt, pl, pb, pr] = p.pads;
    let (hp, wp, c4) = (h + pt + pb, w + pl + pr, dw.c4);
    let flip = if T::SIGNED { 0x80u8 } else { 0 };
    let za = x.zero_point + if T::SIGNED { 128 } else { 0 };
    // The padded image, in the stored (u8) domain.
    let mut img = vec![za as u8; n * hp * wp * c4];
    let src = T::as_bytes(x.data);
    img.par_chunks_mut((hp * wp * c4).max(1))
        .enumerate()
        .for_each(|(b, dst)| {
            for y in 0..h {
                for xx in 0..w {
                    let s = &src[((b * h + y) * w + xx) * c..][..c];
                    let d = &mut dst[((y + pt) * wp + xx + pl) * c4..][..c];
                    for (d, &s) in d.iter_mut().zip(s) {
                        *d = s ^ flip;
                    }
                }
            }
        });
    let [kh, kw] = dw.kernel;
    let quads = c4 / VNNI_KGROUP;
    let koff: Vec<usize> = (0..kh)
        .flat_map(|ky| (0..kw).map(move |kx| (ky, kx)))
        .flat_map(|(ky, kx)| {
            let tap = ((ky * p.dilation[0]) * wp + kx * p.dilation[1]) * c4;
            (0..quads).map(move |q| tap + q * VNNI_KGROUP)
        })
        .collect();
    debug_assert_eq!(koff.len(), dw.kgroups);
    // −za·Σw per column: the zero-point term of (K1) with every zw = 0.
    let zterm: Vec<i32> = dw
        .col_sums
        .iter()
        .map(|&s| za.wrapping_mul(s).wrapping_neg())
        .collect();
    writer.add_column_terms(&zterm[..c_out]);
    let writer = &*writer;
    let tile_fn = k.direct();
    let row_at =
        |b: usize, oy: usize, ox: usize| ((b * hp + oy * p.stride[0]) * wp + ox * p.stride[1]) * c4;
    let panel_len = dw.kgroups * VNNI_NR * VNNI_KGROUP;
    if pool {
        pooled(
            dw,
            &img,
            &koff,
            [n, oh, ow],
            c_out,
            tile_fn,
            &row_at,
            work_ns,
            writer,
        );
        return;
    }
    let m = n * oh * ow;
    let row_of = |px: usize| {
        let (b, r) = (px / (oh * ow), px % (oh * ow));
        row_at(b, r / ow, r % ow)
    };
    let tiles = m.div_ceil(ROWS);
    // As many tasks as the work pays for (par::tasks), at most TILES_PER_TASK tiles each.
    let tasks = par::tasks(work_ns, tiles);
    let per_task = tiles.div_ceil(tasks).clamp(1, TILES_PER_TASK);
    let ntasks = tiles.div_ceil(per_task);
    const _: () = assert!(ROWS * NR <= TILE);
    let job = |task: usize| {
        let mut out = [Tile([0; TILE]), Tile([0; TILE])];
        let t_range = task * per_task..((task + 1) * per_task).min(tiles);
        let rows_of: Vec<([usize; ROWS], usize)> = t_range
            .clone()
            .map(|t| {
                let px0 = t * ROWS;
                let rows_n = ROWS.min(m - px0);
                // Rows past the output repeat the first (their sums are dropped).
                let rows = std::array::from_fn(|r| row_of(px0 + if r < rows_n { r } else { 0 }));
                (rows, rows_n)
            })
            .collect();
        // Panel outer: one weight panel (kgroups·128 bytes) stays in cache across the
        // task's tiles, whose image rows are few and shared between taps.
        for pnl in 0..dw.n_panels {
            let b = &dw.data[pnl * panel_len..(pnl + 1) * panel_len];
            for (t, (rows, rows_n)) in t_range.clone().zip(&rows_of) {
                tile_fn(&img, rows, &koff, b, &mut out);
                for (half, tile) in out.iter().enumerate() {
                    let c0 = pnl * VNNI_NR + half * NR;
                    if c0 >= c_out {
                        break;
                    }
                    let cols = NR.min(c_out - c0);
                    // SAFETY: output pixels t·8..t·8+rows_n belong to this task only,
                    // channels c0..c0+cols exist; the caller sized the output.
                    unsafe { writer.write(tile, *rows_n, t * ROWS, c0, cols, c_out) };
                }
            }
        }
    };
    if tasks > 1 {
        par::for_tasks(SplitKind::Direct, ntasks, job);
    } else {
        (0..ntasks).for_each(job);
    }
}

/// The direct conv followed by a 2×2 stride-2 max pool (the stage is non-decreasing,
/// checked by the caller): a task is one pooled row; its two conv rows are register
/// tiles of the same 8 columns, so the four sums of each of 4 windows sit in two tiles and
/// are reduced to their maximum before the stage (adding the per-column zero-point term
/// after the maximum is the same, as it is constant per column). The output is
/// `⌊oh/2⌋ × ⌊ow/2⌋` pixels.
#[allow(clippy::too_many_arguments)]
fn pooled<O: QuantType>(
    dw: &DirectWeights,
    img: &[u8],
    koff: &[usize],
    [n, oh, ow]: [usize; 3],
    c_out: usize,
    tile_fn: crate::dispatch::DirectFn,
    row_at: &(dyn Fn(usize, usize, usize) -> usize + Sync),
    work_ns: f64,
    writer: &TileWriter<'_, O>,
) {
    let (ph, pw) = (oh / 2, ow / 2);
    let panel_len = dw.kgroups * VNNI_NR * VNNI_KGROUP;
    let tasks = par::tasks(work_ns, n * ph);
    let job = |task: usize| {
        let (b, py) = (task / ph, task % ph);
        let mut top = [Tile([0; TILE]), Tile([0; TILE])];
        let mut bottom = [Tile([0; TILE]), Tile([0; TILE])];
        let mut max = Tile([0; TILE]);
        let chunks = pw.div_ceil(ROWS / 2);
        let rows: Vec<[[usize; ROWS]; 2]> = (0..chunks)
            .map(|ch| {
                let x0 = ch * ROWS;
                let cnt = ROWS.min(2 * pw - x0);
                std::array::from_fn(|dy| {
                    std::array::from_fn(|r| {
                        row_at(b, 2 * py + dy, x0 + if r < cnt { r } else { 0 })
                    })
                })
            })
            .collect();
        for pnl in 0..dw.n_panels {
            let w = &dw.data[pnl * panel_len..(pnl + 1) * panel_len];
            for (ch, [r0, r1]) in rows.iter().enumerate() {
                let cnt = (ROWS / 2).min(pw - ch * (ROWS / 2));
                tile_fn(img, r0, koff, w, &mut top);
                tile_fn(img, r1, koff, w, &mut bottom);
                for half in 0..2 {
                    let c0 = pnl * VNNI_NR + half * NR;
                    if c0 >= c_out {
                        break;
                    }
                    let (t, u) = (&top[half].0, &bottom[half].0);
                    for i in 0..cnt {
                        for l in 0..NR {
                            let (l0, l1) = (2 * i * NR + l, (2 * i + 1) * NR + l);
                            max.0[i * NR + l] = t[l0].max(t[l1]).max(u[l0].max(u[l1]));
                        }
                    }
                    let pixel = (b * ph + py) * pw + ch * (ROWS / 2);
                    // SAFETY: pooled pixels of row `py` of image `b` belong to this task
                    // only; channels c0..c0+cols exist; the caller sized the output for
                    // `n·ph·pw` pixels.
                    unsafe { writer.write(&max, cnt, pixel, c0, NR.min(c_out - c0), c_out) };
                }
            }
        }
    };
    // One task per pooled row; split only when the work pays for it.
    if tasks > 1 {
        par::note(SplitKind::Direct);
        (0..n * ph)
            .into_par_iter()
            .with_min_len((n * ph).div_ceil(tasks))
            .for_each(job);
    } else {
        (0..n * ph).for_each(job);
    }
}
