//! The depthwise conv in 16-channel blocks (channel multiplier 1, float output stage):
//! channels in SIMD lanes, taps in pairs multiplied as i16 with `vpmaddwd` / `vpdpwssd`,
//! accumulators in registers across all taps, the output stage fused.
//!
//! Layout (docs/kernels.md, "Depthwise in channel blocks"):
//! - the input is copied once per call into a zero-point-padded NHWC buffer whose channel
//!   count `cp` is `C` rounded up to [`DW_BLOCK`]; a padded tap then reads `za`, which
//!   contributes `(za − za)(w − zw) = 0` like a skipped one, so no pixel needs a border
//!   test, and every tap of output pixel `(b, oy, ox)` is one byte offset from
//!   `row(b, oy) + ox·stride·cp` (stride 2 reads every other pixel, no waste);
//! - the taps are padded to an even count with a zero-weight tap, and the weights are stored
//!   as i16 `w − zw` per 16-channel block and tap pair, interleaved in the order
//!   `vpunpck{l,h}wd` gives the two taps' widened codes: the "lo" vector holds channels
//!   0–3 and 8–11 (pairs `w[t][c], w[t+1][c]`), the "hi" vector 4–7 and 12–15
//!   ([`lane_of`]); `vpackssdw` of the two i32 accumulators restores channel order;
//! - the sum is `Σ_t x·(w − zw)` on the raw codes; `−za·Σ_t (w − zw)` and the bias are the
//!   accumulators' initial value (equation (D1) below), so no subtraction runs per tap.
//!
//! **(D1)** `acc[c] = bias[c] − za·Σ_t w'[t][c] + Σ_pairs (x[t][c]·w'[t][c] + x[t+1][c]·w'[t+1][c])`
//! with `w' = w − zw` (i16) and `x` the code widened to i16 (u8 zero-extended, i8
//! sign-extended). A pair's sum is at most `2·255·32768 < 2^31` in magnitude, so
//! `vpmaddwd` is exact; the rest is wrapping i32 addition, exact modulo 2^32 and
//! order-independent, so every ISA equals the scalar kernel bit for bit, and the direct
//! kernel's `Σ (x − za)(w − zw) + bias` whenever that fits in i32.
//!
//! **(D2)** the output stage is (K3a) on `acc`: `v = f32(acc)·scale[c]`, clamped to
//! `[lo − z, hi − z]`, rounded half to even, `+ z`; the code's low byte is stored (the
//! value is already in the output type's range, so this is the u8 or i8 code).

use super::params::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::DwFn;
use crate::output::QuantType;

/// Channels per block: one 128-bit load of codes, two 8-lane i32 accumulators.
pub(crate) const DW_BLOCK: usize = 16;

/// Fewest channels the blocked kernel takes: below 8 most of a block's lanes would be
/// padding, and the padded input copy would be more than twice the input (2 channels:
/// 8×), so such convs keep the row kernel.
pub(crate) const MIN_CHANNELS: usize = 8;

/// The position of channel `c` (of a block) in the block's accumulator order: the "lo"
/// accumulator holds channels 0–3, 8–11, the "hi" one 4–7, 12–15 (what `vpunpck{l,h}wd`
/// of two widened 16-channel vectors gives). Returns `half·8 + lane`.
#[inline(always)]
pub(crate) const fn lane_of(c: usize) -> usize {
    ((c >> 2) & 1) * 8 + (c & 3) + 4 * (c >> 3)
}

/// Operands of one kernel call: `n` output pixels of one output row, every channel block.
pub(crate) struct DwArgs<'a> {
    /// The zero-point-padded input (codes as bytes), `cp` channels per pixel.
    pub(crate) x: &'a [u8],
    /// Whether the codes are i8 (sign-extended) rather than u8 (zero-extended).
    pub(crate) signed: bool,
    /// Byte offset of each tap from a pixel's origin (even count, channel 0).
    pub(crate) taps: &'a [usize],
    /// Byte offset in `x` of the first pixel's origin.
    pub(crate) base: usize,
    /// Bytes between consecutive output pixels' origins (`stride·cp`).
    pub(crate) step: usize,
    /// Output pixels.
    pub(crate) n: usize,
    /// Padded channels, a multiple of [`DW_BLOCK`].
    pub(crate) cp: usize,
    /// Real channels (`cp − DW_BLOCK < c_out ≤ cp`): the output's pixel stride.
    pub(crate) c_out: usize,
    /// Weights `w − zw`: per block, per tap pair, 32 i16 ("lo" vector, then "hi").
    pub(crate) w: &'a [i16],
    /// Initial accumulators (D1) in accumulator order ([`lane_of`]), `cp` entries.
    pub(crate) init: &'a [i32],
    /// Per-channel f32 multipliers in accumulator order, `cp` entries.
    pub(crate) scale: &'a [f32],
    /// Output zero point and clamp bounds (K4).
    pub(crate) z: i32,
    pub(crate) lo: i32,
    pub(crate) hi: i32,
}

impl DwArgs<'_> {
    /// Whether every read and write of a call stays in bounds of `x`, the vectors and an
    /// output of `out_len` bytes; SIMD kernels assert it before touching memory.
    pub(crate) fn in_bounds(&self, out_len: usize) -> bool {
        let pairs = self.taps.len() / 2;
        let reach = match self.n {
            0 => 0,
            n => self.base + (n - 1) * self.step + self.taps.iter().max().copied().unwrap_or(0),
        };
        self.taps.len().is_multiple_of(2)
            && self.cp.is_multiple_of(DW_BLOCK)
            && self.c_out <= self.cp
            && self.c_out + DW_BLOCK > self.cp
            && (self.n == 0 || reach + self.cp <= self.x.len())
            && self.w.len() >= self.cp / DW_BLOCK * pairs * 2 * DW_BLOCK
            && self.init.len() >= self.cp
            && self.scale.len() >= self.cp
            && out_len >= self.n * self.c_out
    }
}

/// Depthwise weights packed for [`DwArgs`] (multiplier 1, `w − zw` in i16).
#[derive(Clone, Debug)]
pub(crate) struct DwBlocks {
    /// Padded channels.
    cp: usize,
    /// Byte offsets of the taps in units of (padded-input rows, pixels): `(ky·dh, kx·dw)`,
    /// padded to an even count with a zero-weight copy of the first tap.
    tap_pos: Vec<(usize, usize)>,
    /// See [`DwArgs::w`].
    w: Vec<i16>,
    /// `Σ_t (w − zw)` per channel in accumulator order.
    wsum: Vec<i32>,
}

impl DwBlocks {
    /// Packs `taps` (`[ky][kx][c]` of `w − zw`, as [`super::weights`] builds them) of a
    /// multiplier-1 depthwise conv; `None` when a value does not fit i16 (zero points
    /// outside the 8-bit range) or when there are fewer than [`MIN_CHANNELS`] channels.
    pub(crate) fn new(taps: &[i32], c: usize, p: &ConvParams) -> Option<DwBlocks> {
        if c < MIN_CHANNELS || taps.iter().any(|&t| i16::try_from(t).is_err()) {
            return None;
        }
        let [kh, kw] = p.kernel;
        let cp = c.div_ceil(DW_BLOCK) * DW_BLOCK;
        let mut tap_pos: Vec<(usize, usize)> = (0..kh * kw)
            .map(|t| ((t / kw) * p.dilation[0], (t % kw) * p.dilation[1]))
            .collect();
        let real = tap_pos.len();
        if real % 2 == 1 {
            tap_pos.push(tap_pos[0]);
        }
        let pairs = tap_pos.len() / 2;
        let weight = |t: usize, ch: usize| -> i16 {
            if t < real && ch < c {
                taps[t * c + ch] as i16
            } else {
                0
            }
        };
        let mut w = vec![0i16; cp / DW_BLOCK * pairs * 2 * DW_BLOCK];
        let mut wsum = vec![0i32; cp];
        for blk in 0..cp / DW_BLOCK {
            for cb in 0..DW_BLOCK {
                let ch = blk * DW_BLOCK + cb;
                let l = lane_of(cb);
                let (half, lane) = (l / 8, l % 8);
                for pr in 0..pairs {
                    let at = (blk * pairs + pr) * 2 * DW_BLOCK + half * DW_BLOCK + 2 * lane;
                    w[at] = weight(2 * pr, ch);
                    w[at + 1] = weight(2 * pr + 1, ch);
                }
                wsum[blk * DW_BLOCK + l] = (0..real).map(|t| weight(t, ch) as i32).sum();
            }
        }
        Some(DwBlocks {
            cp,
            tap_pos,
            w,
            wsum,
        })
    }
}

/// One call of the blocked depthwise conv with a float output stage: pads the input,
/// builds (D1)'s initial values and the permuted scales, and runs `rows(job)` output rows
/// through `kernel`. `bias` and `scale` are per channel (`scale` may have one entry).
pub(crate) struct DwCall<'a> {
    kernel: DwFn,
    blocks: &'a DwBlocks,
    xp: Vec<u8>,
    signed: bool,
    taps: Vec<usize>,
    init: Vec<i32>,
    scale: Vec<f32>,
    /// Padded input rows and columns.
    hp: usize,
    wp: usize,
    stride: [usize; 2],
    oh: usize,
    ow: usize,
    c_out: usize,
    z: i32,
    lo: i32,
    hi: i32,
}

/// Estimated ns per byte of the padded input copy (fill and copy), for `par::tasks`.
const COPY_NS_PER_BYTE: f64 = 0.08;

impl<'a> DwCall<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new<T: ActElem>(
        kernel: DwFn,
        blocks: &'a DwBlocks,
        x: &NhwcInput<'_, T>,
        p: &ConvParams,
        [oh, ow]: [usize; 2],
        bias: Option<&[i32]>,
        scale: &[f32],
        (z, lo, hi): (i32, i32, i32),
    ) -> DwCall<'a> {
        let [n, h, wd, c] = x.shape;
        let cp = blocks.cp;
        // Rows and columns every tap of every output pixel reaches (pads at the end may
        // exceed what the output needs; they are only filled).
        let hp = (p.pads[0] + h + p.pads[2]).max((oh - 1) * p.stride[0] + 1 + tap_reach(blocks, 0));
        let wp =
            (p.pads[1] + wd + p.pads[3]).max((ow - 1) * p.stride[1] + 1 + tap_reach(blocks, 1));
        let za = x.zero_point;
        let fill = za as u8; // the code's byte (i8 zero points as two's complement)
        let src = T::as_bytes(x.data);
        // The copy is the call's serial part unless it is split too: padded rows in parallel
        // when the bytes pay for a task (MobileNet's 112×112×32 layer: 0.4 MB per call).
        let row_len = wp * cp;
        let mut xp = vec![0u8; n * hp * row_len];
        let fill_row = |r: usize, dst: &mut [u8]| {
            dst.fill(fill);
            let (b, yp) = (r / hp, r % hp);
            let Some(y) = yp.checked_sub(p.pads[0]).filter(|&y| y < h) else {
                return;
            };
            let src_row = &src[(b * h + y) * wd * c..][..wd * c];
            let dst = &mut dst[p.pads[1] * cp..][..wd * cp];
            if c == cp {
                dst.copy_from_slice(src_row);
            } else {
                for (d, s) in dst.chunks_exact_mut(cp).zip(src_row.chunks_exact(c)) {
                    d[..c].copy_from_slice(s);
                }
            }
        };
        let rows = n * hp;
        let tasks = crate::par::tasks(xp.len() as f64 * COPY_NS_PER_BYTE, rows);
        if tasks > 1 && row_len > 0 {
            use rayon::prelude::*;
            crate::par::note(crate::par::SplitKind::Depthwise);
            let per = rows.div_ceil(tasks);
            xp.par_chunks_mut(per * row_len)
                .enumerate()
                .for_each(|(t, chunk)| {
                    for (i, dst) in chunk.chunks_mut(row_len).enumerate() {
                        fill_row(t * per + i, dst);
                    }
                });
        } else if row_len > 0 {
            for (r, dst) in xp.chunks_mut(row_len).enumerate() {
                fill_row(r, dst);
            }
        }
        let taps = blocks
            .tap_pos
            .iter()
            .map(|&(dy, dx)| (dy * wp + dx) * cp)
            .collect();
        let mut init = vec![0i32; cp];
        let mut sc = vec![0f32; cp];
        for ch in 0..cp {
            let l = (ch / DW_BLOCK) * DW_BLOCK + lane_of(ch % DW_BLOCK);
            let b = match bias {
                Some(b) if ch < c => b[ch],
                _ => 0,
            };
            init[l] = b.wrapping_sub(za.wrapping_mul(blocks.wsum[l]));
            sc[l] = if ch >= c {
                0.0
            } else if scale.len() == 1 {
                scale[0]
            } else {
                scale[ch]
            };
        }
        DwCall {
            kernel,
            blocks,
            xp,
            signed: T::SIGNED,
            taps,
            init,
            scale: sc,
            hp,
            wp,
            stride: p.stride,
            oh,
            ow,
            c_out: c,
            z,
            lo,
            hi,
        }
    }

    /// Output row `row` (`= b·oh + oy`) into `out` (`ow·c_out` codes).
    pub(crate) fn row<O: QuantType>(&self, row: usize, out: &mut [O]) {
        let (b, oy) = (row / self.oh, row % self.oh);
        let cp = self.blocks.cp;
        let args = DwArgs {
            x: &self.xp,
            signed: self.signed,
            taps: &self.taps,
            base: (b * self.hp + oy * self.stride[0]) * self.wp * cp,
            step: self.stride[1] * cp,
            n: self.ow,
            cp,
            c_out: self.c_out,
            w: &self.blocks.w,
            init: &self.init,
            scale: &self.scale,
            z: self.z,
            lo: self.lo,
            hi: self.hi,
        };
        assert_eq!(std::mem::size_of::<O>(), 1, "8-bit output codes");
        // SAFETY: O is a one-byte code type (asserted), so its slice is a byte slice of the
        // same length; every bit pattern is a valid u8 and the kernel writes valid codes.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, out.len()) };
        (self.kernel)(&args, bytes);
    }
}

/// The largest tap offset along `axis` (0 rows, 1 columns).
fn tap_reach(b: &DwBlocks, axis: usize) -> usize {
    b.tap_pos
        .iter()
        .map(|&(dy, dx)| if axis == 0 { dy } else { dx })
        .max()
        .unwrap_or(0)
}
