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
//! **Row words** (few channels): when `C_in` is not a multiple of 4, padding every tap to a
//! channel quad wastes most of each word (a single-channel 3×3 conv: 9 words of one byte
//! each). With an undilated kernel row, the `kw` taps of one kernel row are `kw·C_in`
//! consecutive bytes of the image stored without channel padding (`C4 = C_in`), so K is
//! ordered `(ky, quad of that row's bytes)`: `⌈kw·C_in/4⌉` words per kernel row,
//! `koff[g] = (ky·dh)·Wp·C_in + 4q`, and the bytes a last word reads past the row's taps
//! (the next pixel's, or up to 3 bytes of slack at the image's end) meet zero weights.
//! LeNet's 1-channel first conv then takes 3 words per pixel instead of 9; the layout is
//! used whenever it needs fewer words ([`direct_kgroups`]).
//!
//! Exactness: `Σ_k (a − za)(w − zw) = Σ_k a·w − za·Σ_k w` when every `zw = 0` (the only
//! case packed for this path), the kernel computes `Σ a·w` in wrapping i32 and
//! `−za·Σw` is a column term added by the output stage: exact modulo 2^32 like the GEMM,
//! hence exact for `K ≤ MAX_K`. Padded taps hold `za` and padded channels (and bytes past a
//! kernel row, with row words) have zero weights, so they contribute 0.

use rayon::prelude::*;

use super::params::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::{Body, Kernels};
use crate::gemm::{Tile, TileWriter, NR, TILE, VNNI_KGROUP, VNNI_NR};
use crate::output::QuantType;
use crate::par::{self, SplitKind};

/// Output pixels per register tile.
const ROWS: usize = 8;
/// Most register tiles per parallel task.
const TILES_PER_TASK: usize = 16;

/// Words of K per output pixel of the direct conv of `c_in` channels with `kernel` and
/// horizontal dilation `dilation_w`, and whether they are row words (module docs): the
/// fewer of `kh·kw·⌈C_in/4⌉` (channel quads per tap) and, undilated, `kh·⌈kw·C_in/4⌉`.
pub(crate) fn direct_kgroups(c_in: usize, kernel: [usize; 2], dilation_w: usize) -> (usize, bool) {
    let [kh, kw] = kernel;
    let quads = kh * kw * c_in.div_ceil(VNNI_KGROUP);
    let rows = kh * (kw * c_in).div_ceil(VNNI_KGROUP);
    if dilation_w == 1 && rows < quads {
        (rows, true)
    } else {
        (quads, false)
    }
}

/// Bytes of slack after the padded image of row words: a kernel row's last word reads up
/// to 3 bytes past its taps.
const ROW_WORD_SLACK: usize = VNNI_KGROUP - 1;

/// Conv weights packed for the direct path: `[panel][g][32][4]` i8 with K ordered
/// `(ky, kx, channel quad)`, channels padded to `c4 = ⌈C_in/4⌉·4` with zeros, or with row
/// words `(ky, quad of the kernel row's kw·C_in bytes)` and `c4 = C_in` (module docs);
/// columns padded to whole panels; and `Σ_k w` per column.
pub(crate) struct DirectWeights {
    c4: usize,
    kernel: [usize; 2],
    /// Row words (module docs).
    row_words: bool,
    kgroups: usize,
    n_panels: usize,
    data: Vec<i8>,
    col_sums: Vec<i32>,
}

impl DirectWeights {
    /// Packs ONNX-ordered `[c_out, c_in, kh, kw]` weights of one group whose weight zero
    /// points are all 0 (the caller checks), for horizontal dilation `dilation_w`, in
    /// the layout of [`direct_kgroups`].
    pub(crate) fn new(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        kernel: [usize; 2],
        dilation_w: usize,
    ) -> Self {
        let [kh, kw] = kernel;
        let (kgroups, row_words) = direct_kgroups(c_in, kernel, dilation_w);
        let c4 = if row_words {
            c_in
        } else {
            c_in.div_ceil(VNNI_KGROUP) * VNNI_KGROUP
        };
        let quads = c_in.div_ceil(VNNI_KGROUP);
        let row_quads = (kw * c_in).div_ceil(VNNI_KGROUP);
        let n_panels = c_out.div_ceil(VNNI_NR);
        let mut data = vec![0i8; n_panels * kgroups * VNNI_NR * VNNI_KGROUP];
        let mut col_sums = vec![0i32; n_panels * VNNI_NR];
        for co in 0..c_out {
            let (p, c) = (co / VNNI_NR, co % VNNI_NR);
            for ky in 0..kh {
                for kx in 0..kw {
                    for ci in 0..c_in {
                        let v = weights[((co * c_in + ci) * kh + ky) * kw + kx];
                        // Word g, byte j of the word.
                        let (g, j) = if row_words {
                            let b = kx * c_in + ci;
                            (ky * row_quads + b / VNNI_KGROUP, b % VNNI_KGROUP)
                        } else {
                            ((ky * kw + kx) * quads + ci / VNNI_KGROUP, ci % VNNI_KGROUP)
                        };
                        let at = ((p * kgroups + g) * VNNI_NR + c) * VNNI_KGROUP + j;
                        data[at] = v;
                        col_sums[co] += v as i32;
                    }
                }
            }
        }
        DirectWeights {
            c4,
            kernel,
            row_words,
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
    // The padded image, in the stored (u8) domain (with row words, and slack for their
    // last words' reach).
    let image = hp * wp * c4;
    let slack = if dw.row_words { ROW_WORD_SLACK } else { 0 };
    let mut img = vec![za as u8; n * image + slack];
    let src = T::as_bytes(x.data);
    let copy = |(b, dst): (usize, &mut [u8])| {
        for y in 0..h {
            let s = &src[(b * h + y) * w * c..][..w * c];
            let d = &mut dst[((y + pt) * wp + pl) * c4..];
            if c4 == c {
                // Unpadded channels (row words, or C_in a multiple of 4): a whole row.
                for (d, &s) in d[..w * c].iter_mut().zip(s) {
                    *d = s ^ flip;
                }
            } else if c == 3 && c4 == 4 {
                // RGB: fixed-size pixels, so the copy is straight-line code.
                pad_pixels::<3, 4>(&mut d[..w * 4], s, flip);
            } else {
                for (d, s) in d.chunks_mut(c4).zip(s.chunks_exact(c)) {
                    for (d, &s) in d.iter_mut().zip(s) {
                        *d = s ^ flip;
                    }
                }
            }
        }
    };
    if image > 0 {
        let all = &mut img[..n * image];
        // A small copy is not worth waking other threads for.
        if n * image >= 1 << 16 {
            all.par_chunks_mut(image).enumerate().for_each(copy);
        } else {
            all.chunks_mut(image).enumerate().for_each(copy);
        }
    }
    let [kh, kw] = dw.kernel;
    let koff: Vec<usize> = if dw.row_words {
        let row_quads = (kw * c).div_ceil(VNNI_KGROUP);
        (0..kh)
            .flat_map(|ky| {
                let row = ky * p.dilation[0] * wp * c4;
                (0..row_quads).map(move |q| row + q * VNNI_KGROUP)
            })
            .collect()
    } else {
        let quads = c4 / VNNI_KGROUP;
        (0..kh)
            .flat_map(|ky| (0..kw).map(move |kx| (ky, kx)))
            .flat_map(|(ky, kx)| {
                let tap = ((ky * p.dilation[0]) * wp + kx * p.dilation[1]) * c4;
                (0..quads).map(move |q| tap + q * VNNI_KGROUP)
            })
            .collect()
    };
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
        let geom = RowGeom {
            hp,
            wp,
            stride: p.stride,
            c4,
        };
        pooled(
            k,
            dw,
            &img,
            &koff,
            [n, oh, ow],
            c_out,
            tile_fn,
            geom,
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

/// Copies pixels of `C` channels to slots of `C4` bytes (the channel padding keeps what
/// `dst` holds, the zero point), flipping each byte by `flip`.
#[inline]
fn pad_pixels<const C: usize, const C4: usize>(dst: &mut [u8], src: &[u8], flip: u8) {
    for (d, s) in dst.chunks_exact_mut(C4).zip(src.chunks_exact(C)) {
        let d: &mut [u8; C4] = d.try_into().expect("C4 bytes");
        for i in 0..C {
            d[i] = s[i] ^ flip;
        }
    }
}

/// The direct conv followed by a 2×2 stride-2 max pool (the stage is non-decreasing,
/// checked by the caller): a task is one pooled row; its two conv rows are register
/// tiles of the same 8 columns, so the four sums of each of 4 windows sit in two tiles and
/// are reduced to their maximum before the stage (adding the per-column zero-point term
/// after the maximum is the same, as it is constant per column). The output is
/// `⌊oh/2⌋ × ⌊ow/2⌋` pixels. The row runs as a [`Body`] in the table's pooling copy, so the
/// window maxima are compiled for the dispatched ISA (`vpmaxsd`) instead of the baseline
/// (SSE2 has no 32-bit maximum).
#[allow(clippy::too_many_arguments)]
fn pooled<O: QuantType>(
    k: &Kernels,
    dw: &DirectWeights,
    img: &[u8],
    koff: &[usize],
    [n, oh, ow]: [usize; 3],
    c_out: usize,
    tile_fn: crate::dispatch::DirectFn,
    geom: RowGeom,
    work_ns: f64,
    writer: &TileWriter<'_, O>,
) {
    let (ph, pw) = (oh / 2, ow / 2);
    let tasks = par::tasks(work_ns, n * ph);
    let body = k.pooling();
    let row = PooledRow {
        dw,
        img,
        koff,
        ph,
        pw,
        c_out,
        tile_fn,
        geom,
        writer,
    };
    let job = |r: usize| {
        body.run(
            &PooledRowJob { row: &row, r },
            &mut [],
            &mut [] as &mut [u8],
        )
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

/// Where the tile's image rows start: output pixel `(b, oy, ox)` reads from byte
/// `((b·hp + oy·sh)·wp + ox·sw)·c4` of the padded image.
#[derive(Clone, Copy)]
struct RowGeom {
    hp: usize,
    wp: usize,
    stride: [usize; 2],
    c4: usize,
}

/// One pooled output row of [`pooled`].
struct PooledRow<'a, O> {
    dw: &'a DirectWeights,
    img: &'a [u8],
    koff: &'a [usize],
    ph: usize,
    pw: usize,
    c_out: usize,
    tile_fn: crate::dispatch::DirectFn,
    geom: RowGeom,
    writer: &'a TileWriter<'a, O>,
}

/// [`PooledRow::run`] of row `r`, as a [`Body`] for the table's pooling copy.
struct PooledRowJob<'a, O> {
    row: &'a PooledRow<'a, O>,
    r: usize,
}

impl<O: QuantType> Body<u8, u8> for PooledRowJob<'_, O> {
    #[inline(always)]
    fn run(&self, _: &mut [u8], _: &mut [u8]) {
        self.row.run(self.r)
    }
}

impl<O: QuantType> PooledRow<'_, O> {
    /// Pooled row `task` (image `b`, row `py`): chunks of 4 pooled pixels (two register
    /// tiles of 8 conv pixels, top and bottom conv row) reduced to their window maxima,
    /// which wait in one tile per 16-channel half and go to the output stage up to 16
    /// pixels at a time (LeNet's conv1: one call per half for its 14 pooled pixels, not 4).
    #[inline(always)]
    fn run(&self, task: usize) {
        const PIXELS: usize = TILE / NR;
        const CHUNK: usize = ROWS / 2;
        let (dw, c_out, pw) = (self.dw, self.c_out, self.pw);
        let (b, py) = (task / self.ph, task % self.ph);
        let RowGeom {
            hp,
            wp,
            stride: [sh, sw],
            c4,
        } = self.geom;
        let base: [usize; 2] = std::array::from_fn(|dy| (b * hp + (2 * py + dy) * sh) * wp * c4);
        let step = sw * c4;
        let panel_len = dw.kgroups * VNNI_NR * VNNI_KGROUP;
        let mut top = [Tile([0; TILE]), Tile([0; TILE])];
        let mut bottom = [Tile([0; TILE]), Tile([0; TILE])];
        let mut maxes = [Tile([0; TILE]), Tile([0; TILE])];
        let chunks = pw.div_ceil(CHUNK);
        let first = (b * self.ph + py) * pw;
        for pnl in 0..dw.n_panels {
            let w = &dw.data[pnl * panel_len..(pnl + 1) * panel_len];
            let halves = (c_out - pnl * VNNI_NR).div_ceil(NR).min(2);
            let (mut start, mut filled) = (0, 0);
            for ch in 0..chunks {
                let x0 = ch * ROWS;
                let conv_px = ROWS.min(2 * pw - x0);
                // Rows past the output repeat the first (their sums are dropped).
                let rows: [[usize; ROWS]; 2] = std::array::from_fn(|dy| {
                    std::array::from_fn(|r| {
                        base[dy] + (x0 + if r < conv_px { r } else { 0 }) * step
                    })
                });
                let cnt = CHUNK.min(pw - ch * CHUNK);
                (self.tile_fn)(self.img, &rows[0], self.koff, w, &mut top);
                (self.tile_fn)(self.img, &rows[1], self.koff, w, &mut bottom);
                for half in 0..halves {
                    let (t, u) = (&top[half].0, &bottom[half].0);
                    // Fixed-size rows, so the maxima are 16-lane vector operations.
                    for i in 0..cnt {
                        let row = |v: &[i32; TILE], px: usize| -> [i32; NR] {
                            v[px * NR..(px + 1) * NR].try_into().expect("16 columns")
                        };
                        let (a, c) = (row(t, 2 * i), row(t, 2 * i + 1));
                        let (d, e) = (row(u, 2 * i), row(u, 2 * i + 1));
                        let m: [i32; NR] =
                            std::array::from_fn(|l| a[l].max(c[l]).max(d[l].max(e[l])));
                        maxes[half].0[(filled + i) * NR..][..NR].copy_from_slice(&m);
                    }
                }
                filled += cnt;
                if filled + CHUNK > PIXELS || ch + 1 == chunks {
                    for (half, tile) in maxes.iter().enumerate().take(halves) {
                        let c0 = pnl * VNNI_NR + half * NR;
                        // SAFETY: pooled pixels `first + start..+filled` of row `py` of
                        // image `b` belong to this task only; channels c0..c0+cols exist;
                        // the caller sized the output for `n·ph·pw` pixels.
                        unsafe {
                            self.writer.write(
                                tile,
                                filled,
                                first + start,
                                c0,
                                NR.min(c_out - c0),
                                c_out,
                            )
                        };
                    }
                    start += filled;
                    filled = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row words where they need fewer words than channel quads per tap, and only for an
    /// undilated kernel row.
    #[test]
    fn row_words_only_where_they_save_words() {
        assert_eq!(direct_kgroups(1, [3, 3], 1), (3, true));
        assert_eq!(direct_kgroups(2, [3, 3], 1), (6, true));
        assert_eq!(direct_kgroups(3, [3, 3], 1), (9, false));
        assert_eq!(direct_kgroups(4, [3, 3], 1), (9, false));
        assert_eq!(direct_kgroups(5, [3, 3], 1), (12, true));
        assert_eq!(direct_kgroups(1, [5, 5], 1), (10, true));
        assert_eq!(direct_kgroups(1, [3, 3], 2), (9, false));
        assert_eq!(direct_kgroups(8, [3, 3], 1), (18, false));
    }
}
