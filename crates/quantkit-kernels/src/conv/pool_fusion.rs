//! Conv + max pool in one call: a 2×2 stride-2 pool reduced on the exact sums before a
//! monotone output stage (Winograd, few-channel and GEMM paths), otherwise conv then pool.

use rayon::prelude::*;

use super::direct::run_direct;
use super::im2col::Im2col;
use super::params::{ActElem, ConvParams, NhwcInput};
use super::small_cin::SmallCin;
use super::weights::{ConvWeights, Kind};
use super::winograd::{run_winograd, winograd_call};
use super::{check, conv2d_output_shape, conv2d_quant_with};
use crate::dispatch::{self, table_for, Body, Isa, Kernels};
use crate::error::{KernelError, Result};
use crate::gemm::{
    gemm_sums_serial, Activations, PackedWeights, PanelSums, SerialBuf, Tile, TileWriter, MR, NR,
    TILE,
};
use crate::output::{OutputStage, QuantType};
use crate::par::{self, SplitKind};
use crate::pool::{max_pool, PoolElem};

/// QLinearConv followed by an ONNX MaxPool (NHWC, floor output size; `pool.groups` is
/// ignored) in one call, on the dispatched ISA: `out` is the pooled output, whose shape is
/// returned. The result equals [`conv2d_quant`](super::conv2d_quant) followed by [`max_pool`] bit for bit. A
/// Winograd conv with a 2×2 stride-2 unpadded pool and a monotone stage
/// ([`OutputStage::is_monotone_within`]) pools the exact sums inside the conv (one stage
/// per window instead of four, no full-size intermediate); other convs and pools run one
/// after the other.
pub fn conv2d_quant_max_pool<T: ActElem, O: QuantType + PoolElem>(
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: &OutputStage,
    pool: &ConvParams,
    out: &mut [O],
) -> Result<[usize; 4]> {
    conv2d_quant_max_pool_with(dispatch::isa(), x, w, stage, pool, out)
}

/// [`conv2d_quant_max_pool`] on an explicit ISA.
pub fn conv2d_quant_max_pool_with<T: ActElem, O: QuantType + PoolElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    stage: &OutputStage,
    pool: &ConvParams,
    out: &mut [O],
) -> Result<[usize; 4]> {
    let [n, oh, ow, c_out] = conv2d_output_shape(x.shape, w)?;
    let [ph, pw] = pool.output_size(oh, ow)?;
    let shape = [n, ph, pw, c_out];
    if out.len() != n * ph * pw * c_out {
        return Err(KernelError::BufferLength {
            op: "conv2d_max_pool",
            arg: "output",
            expected: n * ph * pw * c_out,
            got: out.len(),
        });
    }
    if pool.is_pair_window() {
        match &w.kind {
            // |Y| < 2^29 under the Winograd bound (module docs of `winograd`).
            Kind::Winograd(ww) if stage.is_monotone_within(1 << 29) => {
                check(x, w, n * oh * ow * c_out)?;
                stage.validate("conv2d", c_out)?;
                let k = table_for(isa)?;
                let wc = winograd_call(x, ww, &w.params, oh, ow, true)?;
                let writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
                run_winograd(k, &wc, &writer, w.ns_per_px * (n * oh * ow) as f64);
                return Ok(shape);
            }
            Kind::Direct(dw)
                if stage.is_monotone_within(
                    (w.params.kernel[0] * w.params.kernel[1] * w.c_in) as i64
                        * i64::from(span_of(x))
                        * 511,
                ) =>
            {
                check(x, w, n * oh * ow * c_out)?;
                stage.validate("conv2d", c_out)?;
                let k = table_for(isa)?;
                let mut writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
                let work = w.ns_per_px * (n * oh * ow) as f64;
                run_direct(
                    k,
                    x,
                    dw,
                    &w.params,
                    [oh, ow],
                    c_out,
                    true,
                    work,
                    &mut writer,
                );
                return Ok(shape);
            }
            Kind::SmallCin(_) | Kind::Gemm(_) => {
                let pw = match &w.kind {
                    Kind::Gemm(packs) if w.params.groups == 1 => packs.first(),
                    Kind::SmallCin(pw) => Some(pw),
                    _ => None,
                };
                // |x − za| ≤ span and |w − zw| ≤ 511 bound every exact sum.
                let span = span_of(x);
                let monotone = |pw: &&PackedWeights| {
                    stage.is_monotone_within((pw.k() as i64).saturating_mul(span as i64 * 511))
                };
                if let Some(pw) = pw.filter(monotone) {
                    check(x, w, n * oh * ow * c_out)?;
                    stage.validate("conv2d", c_out)?;
                    let k = table_for(isa)?;
                    let small = matches!(w.kind, Kind::SmallCin(_));
                    if !(small && pooled_small_cin(k, x, w, pw, stage, [oh, ow], out)) {
                        pooled_gemm(k, x, w, pw, stage, [oh, ow], out);
                    }
                    return Ok(shape);
                }
            }
            _ => {}
        }
    }
    let mut full = vec![O::default(); n * oh * ow * c_out];
    conv2d_quant_with(isa, x, w, stage, &mut full)?;
    max_pool(&full, [n, oh, ow, c_out], pool, out)?;
    Ok(shape)
}

/// Conv + 2×2 stride-2 max pool of a few-channel conv (the stage is monotone, checked by the
/// caller), on ISAs with the pairs geometry (returns `false` otherwise). Without weight
/// zero points, the table's window kernel reads each pool window's four conv pixels in
/// the planes, keeps their sums in registers and stores only the maximum, up to 6 pooled
/// pixels per call; otherwise, per pooled output row, stretches of 6 pixels of its two
/// conv rows are packed as two panels, their register tiles of exact sums are reduced
/// window by window right away, and the 3 maxima go through the output stage. No block of
/// sums is written and read back.
pub(super) fn pooled_small_cin<T: ActElem, O: QuantType>(
    k: &Kernels,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    pw: &PackedWeights,
    stage: &OutputStage,
    [oh, ow]: [usize; 2],
    out: &mut [O],
) -> bool {
    let za = x.zero_point + if T::SIGNED { 128 } else { 0 };
    let Some(ps) = PanelSums::new(k, pw, za) else {
        return false;
    };
    let (n, c_out) = (x.shape[0], w.c_out);
    let (ph, pwid) = (oh / 2, ow / 2);
    if ph == 0 || pwid == 0 {
        return true;
    }
    let sc = SmallCin::new(x, &w.params, oh, ow, !pw.zero_points_all_zero());
    let writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
    let body = k.pooling();
    thread_local! {
        /// Kept across calls (see `run_winograd`).
        static BUFS: std::cell::RefCell<PooledBufs> = Default::default();
    }
    let row = PooledRow {
        sc: &sc,
        ps: &ps,
        writer: &writer,
        ph,
        pwid,
        c_out,
    };
    let job = |r: usize| {
        // A row starts no parallel work, so the borrow is never re-entered.
        BUFS.with_borrow_mut(|bufs| {
            body.run(
                &PooledRowJob { row: &row, r },
                std::slice::from_mut(bufs),
                &mut [],
            )
        })
    };
    let tasks = par::tasks(w.ns_per_px * (n * oh * ow) as f64, n * ph);
    if tasks > 1 {
        par::note(SplitKind::PooledRows);
        (0..n * ph)
            .into_par_iter()
            .with_min_len((n * ph).div_ceil(tasks))
            .for_each(job);
    } else {
        (0..n * ph).for_each(job);
    }
    true
}

/// One pooled output row of [`pooled_small_cin`].
pub(super) struct PooledRow<'a, O> {
    sc: &'a SmallCin<'a>,
    ps: &'a PanelSums<'a>,
    writer: &'a TileWriter<'a, O>,
    ph: usize,
    pwid: usize,
    c_out: usize,
}

/// [`PooledRow::run`] of row `r` with the buffers of the body's first (one-element)
/// slice, as a [`Body`] for the table's pooling copy.
pub(super) struct PooledRowJob<'a, O> {
    row: &'a PooledRow<'a, O>,
    r: usize,
}

impl<O: QuantType> Body<PooledBufs, u8> for PooledRowJob<'_, O> {
    #[inline(always)]
    fn run(&self, bufs: &mut [PooledBufs], _: &mut [u8]) {
        self.row.run(self.r, &mut bufs[0])
    }
}

impl<O: QuantType> PooledRow<'_, O> {
    #[inline(always)]
    fn run(&self, r: usize, bufs: &mut PooledBufs) {
        const PIXELS: usize = TILE / NR;
        let (b, py) = (r / self.ph, r % self.ph);
        let kg = self.sc.k() / 2;
        let np = self.ps.n_panels();
        let PooledBufs { a0, a1, pooled } = bufs;
        pooled.resize_with(np, || Tile([0; TILE]));
        if self.ps.has_indirect() {
            // Without weight zero points: the window kernel reads each pool window's four
            // conv pixels in place and keeps their sums in registers until the maximum,
            // up to 6 pooled pixels per call, at any stride.
            let (words, koff) = self.sc.words_and_offsets();
            let sw = self.sc.pixel_step();
            let mut x = 0;
            while x < self.pwid {
                let cnt = PIXELS.min(self.pwid - x);
                let top = self.sc.pixel_base(b, 2 * py, 2 * x);
                let bottom = self.sc.pixel_base(b, 2 * py + 1, 2 * x);
                let rows = [top, top + sw, bottom, bottom + sw];
                let pixel = (b * self.ph + py) * self.pwid + x;
                for (p, pt) in pooled.iter_mut().enumerate() {
                    self.ps
                        .window_tile(words, (&rows, 2 * sw, cnt), koff, p, pt);
                    let c0 = p * NR;
                    // SAFETY: pooled pixels `pixel..pixel + cnt` of row `py` belong to
                    // this row only, and channels `c0..c0+cols` exist; the caller sized
                    // the output.
                    unsafe {
                        self.writer
                            .write(pt, cnt, pixel, c0, NR.min(self.c_out - c0), self.c_out)
                    };
                }
                x += cnt;
            }
            return;
        }
        a0.resize(kg * MR, 0);
        a1.resize(kg * MR, 0);
        let (mut s0, mut s1) = ([0i32; MR], [0i32; MR]);
        let (mut t0, mut t1) = (Tile([0; TILE]), Tile([0; TILE]));
        // Pooled pixels `start..start + filled` of the row wait in `pooled` (one tile per
        // column panel) and go to the output stage up to 16 at a time.
        let (mut start, mut filled) = (0, 0);
        for x0 in (0..2 * self.pwid).step_by(MR) {
            let len = MR.min(2 * self.pwid - x0);
            self.sc.panel_stretch((b, 2 * py, x0), len, a0, &mut s0);
            self.sc.panel_stretch((b, 2 * py + 1, x0), len, a1, &mut s1);
            for (p, pt) in pooled.iter_mut().enumerate() {
                self.ps.tile(a0, &s0, len, p, &mut t0);
                self.ps.tile(a1, &s1, len, p, &mut t1);
                let top = t0.0[..len * NR].chunks_exact(2 * NR);
                let bottom = t1.0[..len * NR].chunks_exact(2 * NR);
                let outs = pt.0[filled * NR..].chunks_exact_mut(NR);
                for ((o, t), u) in outs.zip(top).zip(bottom) {
                    // Fixed-size rows, so the maxima are 16-lane vector operations.
                    #[inline(always)]
                    fn row(v: &[i32], k: usize) -> &[i32; NR] {
                        v[k * NR..(k + 1) * NR].try_into().expect("16 columns")
                    }
                    let o: &mut [i32; NR] = o.try_into().expect("16 columns");
                    let (a, c, d, e) = (row(t, 0), row(t, 1), row(u, 0), row(u, 1));
                    // Into a local first: stored straight to `o` (which the compiler
                    // cannot prove apart from the rows) the maxima stayed scalar
                    // `cmp`/`cmov` per lane, half of this row's time on LeNet's conv1.
                    let m: [i32; NR] = std::array::from_fn(|l| a[l].max(c[l]).max(d[l].max(e[l])));
                    *o = m;
                }
            }
            filled += len / 2;
            if filled + MR / 2 > PIXELS || x0 + MR >= 2 * self.pwid {
                let pixel = (b * self.ph + py) * self.pwid + start;
                for (p, pt) in pooled.iter().enumerate() {
                    let c0 = p * NR;
                    // SAFETY: pooled pixels `pixel..pixel + filled` of row `py` belong to
                    // this row only, and channels `c0..c0+cols` exist; the caller sized the
                    // output.
                    unsafe {
                        self.writer.write(
                            pt,
                            filled,
                            pixel,
                            c0,
                            NR.min(self.c_out - c0),
                            self.c_out,
                        )
                    };
                }
                start += filled;
                filled = 0;
            }
        }
    }
}

/// Per-thread buffers of [`PooledRow`]: the two packed panels and a tile of pooled sums per
/// column panel.
#[derive(Default)]
pub(super) struct PooledBufs {
    a0: Vec<u32>,
    a1: Vec<u32>,
    pooled: Vec<Tile>,
}

/// Pooled conv rows per block of [`pooled_gemm`]: 6 conv rows, so a block's `6·ow` GEMM
/// rows are whole 6-row panels.
pub(super) const POOLED_ROWS: usize = 3;

/// Conv + 2×2 stride-2 max pool on the GEMM paths (few-channel and single-group im2col
/// convs; the stage is monotone, checked by the caller). Blocks of up to [`POOLED_ROWS`]
/// pooled rows of one image are summed exactly into an i32 block (their conv rows are
/// consecutive GEMM rows), each window's four sums reduced to their maximum, and only those
/// go through the output stage: a quarter of the stage's work, and no full-size conv output.
pub(super) fn pooled_gemm<T: ActElem, O: QuantType>(
    k: &Kernels,
    x: &NhwcInput<'_, T>,
    w: &ConvWeights,
    pw: &PackedWeights,
    stage: &OutputStage,
    [oh, ow]: [usize; 2],
    out: &mut [O],
) {
    let n = x.shape[0];
    let c_out = w.c_out;
    let p = &w.params;
    let (ph, pwid) = (oh / 2, ow / 2);
    if ph == 0 || pwid == 0 || c_out == 0 {
        return;
    }
    let blocks = ph.div_ceil(POOLED_ROWS);
    let small = matches!(w.kind, Kind::SmallCin(_))
        .then(|| SmallCin::new(x, p, oh, ow, !pw.zero_points_all_zero()));
    let direct = p.kernel == [1, 1] && p.stride == [1, 1] && p.pads == [0; 4];
    let im2col = (small.is_none() && !direct).then(|| Im2col::new(x, p, 0, w.c_in, oh, ow));
    let writer = TileWriter::new(k, c_out, Some(stage), None, Some(out));
    let mmm = if small.is_some() { k.pairs() } else { k.mmm() };
    let body = k.pooling();
    let k = pw.k();
    thread_local! {
        /// Per-thread buffers, kept across calls (see `run_winograd`).
        static SCRATCH: std::cell::RefCell<(SerialBuf, Vec<i32>, Tile)> =
            std::cell::RefCell::new((SerialBuf::default(), Vec::new(), Tile([0; TILE])));
    }
    let job = |bi: usize| {
        // The block starts no parallel work, so the borrow is never re-entered.
        SCRATCH.with_borrow_mut(|(buf, sums, tile)| {
            let (b, py0) = (bi / blocks, bi % blocks * POOLED_ROWS);
            let prows = POOLED_ROWS.min(ph - py0);
            let first = (b * oh + 2 * py0) * ow;
            let m = 2 * prows * ow;
            sums.resize(m * c_out, 0);
            let small_rows;
            let small_panel;
            let im2col_rows;
            let a = if let Some(sc) = &small {
                small_rows = move |r: usize, o: &mut [u8]| sc.rows(first + r, o);
                small_panel =
                    move |q: usize, d: &mut [u32], s: &mut [i32]| sc.panel_at(first + q * MR, d, s);
                Activations::gather(
                    &small_rows,
                    Some(&small_panel),
                    T::SIGNED,
                    m,
                    k,
                    x.zero_point,
                )
            } else if let Some(im) = &im2col {
                im2col_rows = move |r: usize, o: &mut [u8]| im.rows(first + r, o);
                Activations::gather(&im2col_rows, None, T::SIGNED, m, k, x.zero_point)
            } else {
                T::activations(&x.data[first * k..(first + m) * k], m, k, x.zero_point)
            };
            gemm_sums_serial(mmm, &a, pw, sums, c_out, buf);
            // Each window's maximum, up to 16 pixels × 16 channels per stage call.
            for r in 0..prows {
                let row0 = &sums[2 * r * ow * c_out..][..ow * c_out];
                let row1 = &sums[(2 * r + 1) * ow * c_out..][..ow * c_out];
                for x0 in (0..pwid).step_by(TILE / NR) {
                    let cnt = (TILE / NR).min(pwid - x0);
                    for c0 in (0..c_out).step_by(NR) {
                        let cols = NR.min(c_out - c0);
                        let job = WindowMax {
                            rows: [row0, row1],
                            at: 2 * x0 * c_out + c0,
                            cnt,
                            cols,
                            c_out,
                        };
                        body.run(&job, &mut tile.0, &mut []);
                        let pixel = (b * ph + py0 + r) * pwid + x0;
                        // SAFETY: pooled pixels `pixel..pixel+cnt` of row `py0 + r` belong
                        // to this block only, and channels `c0..c0+cols` exist; the caller
                        // sized the output for `n·ph·pwid` pixels.
                        unsafe { writer.write(tile, cnt, pixel, c0, cols, c_out) };
                    }
                }
            }
        })
    };
    let tasks = par::tasks(w.ns_per_px * (n * oh * ow) as f64, n * blocks);
    if tasks > 1 {
        par::note(SplitKind::PooledRows);
        (0..n * blocks)
            .into_par_iter()
            .with_min_len((n * blocks).div_ceil(tasks))
            .for_each(job);
    } else {
        (0..n * blocks).for_each(job);
    }
}

/// `tile[i·16 + l]` = the maximum of the 2×2 window of pooled pixel `i < cnt`, channel
/// `l < cols`, from the two conv rows `rows` (pixels of `c_out` sums, the first window's
/// top-left sum at `at`), written to the body's first buffer (a tile). Run in the table's
/// pooling copy (AVX2 has `vpmaxsd`; baseline x86-64 has no packed i32 maximum).
pub(super) struct WindowMax<'a> {
    rows: [&'a [i32]; 2],
    at: usize,
    cnt: usize,
    cols: usize,
    c_out: usize,
}

impl Body<i32, u8> for WindowMax<'_> {
    #[inline(always)]
    fn run(&self, tile: &mut [i32], _: &mut [u8]) {
        let WindowMax {
            rows,
            at,
            cnt,
            cols,
            c_out,
        } = *self;
        for i in 0..cnt {
            let at = at + 2 * i * c_out;
            let t = &mut tile[i * NR..i * NR + cols];
            let (a0, a1) = (&rows[0][at..at + cols], &rows[0][at + c_out..][..cols]);
            let (b0, b1) = (&rows[1][at..at + cols], &rows[1][at + c_out..][..cols]);
            for ((((t, &p), &q), &r), &s) in t.iter_mut().zip(a0).zip(a1).zip(b0).zip(b1) {
                *t = p.max(q).max(r.max(s));
            }
        }
    }
}

/// `max |x − za|` over the activation type: with `|w − zw| ≤ 511` it bounds each product.
fn span_of<T: ActElem>(x: &NhwcInput<'_, T>) -> u32 {
    (T::MIN - x.zero_point)
        .unsigned_abs()
        .max((T::MAX - x.zero_point).unsigned_abs())
}
