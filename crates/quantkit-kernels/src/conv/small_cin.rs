//! Activation packing for convolutions with few input channels (C_in ≤ 4: a network's first
//! conv on grey or RGB images).
//!
//! im2col + GEMM spends most of such a conv gathering and packing: each patch row is only
//! `kh·kw·C_in` bytes (27 for a 3×3 RGB kernel), so the per-row work of the implicit im2col
//! and of the 8×8 word transposes of the packer dwarfs the GEMM. Here the AVX2 layout's
//! k-pairs (two 16-bit values per 32-bit word) are formed once per input position, in
//! *planes* of words over the zero-padded input:
//! - a **channel-pair plane** holds channels `2h, 2h+1` of a pixel; the conv reads it at
//!   every tap `(ky, kx)`;
//! - a **row-pair plane** (the last channel `c` of an odd C_in) holds channel `c` of a pixel
//!   and of the pixel `dh` rows below; the conv reads it at taps `(ky, kx)` with even `ky`,
//!   so that one word covers taps `ky` and `ky + 1`. When `kh` is odd, the last word's second
//!   tap does not exist: its weight is packed as the weight zero point, so that it adds
//!   `(x − za)·(zw − zw) = 0`.
//!
//! So C_in = 1 takes `⌈kh/2⌉·kw` words per output pixel instead of `kh·kw` (6 instead of 9
//! for 3×3), C_in = 3 takes `kh·kw + ⌈kh/2⌉·kw` (15 instead of 18), and every word of a
//! panel comes from the planes with no padding test (the planes hold the zero point around
//! the input): a panel of 6 output pixels is one run of words per stretch of an output row
//! and per word, contiguous at stride 1. Other geometries (AVX-512 VNNI's quads) gather rows
//! with [`SmallCin::rows`] and the generic packer.

use rayon::prelude::*;

use super::params::{ActElem, ConvParams, NhwcInput, PixelPos};
use crate::gemm::MR;

/// Largest C_in packed this way.
pub(crate) const MAX_C_IN: usize = 4;

/// What a plane's words hold (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plane {
    /// Channels `c, c + 1` of one pixel; read at every tap.
    Channels(usize),
    /// Channel `c` of a pixel (low half) and of the pixel `dh` rows below (high half); read
    /// at even `ky`.
    Rows(usize),
}

/// The planes of a conv with `c_in` channels, in K order.
fn planes(c_in: usize) -> Vec<Plane> {
    let mut v: Vec<Plane> = (0..c_in / 2).map(|h| Plane::Channels(2 * h)).collect();
    if c_in % 2 == 1 {
        v.push(Plane::Rows(c_in - 1));
    }
    v
}

/// `(plane index, ky, kx)` of each word of K, for `c_in` channels and `kernel`.
fn word_order(c_in: usize, [kh, kw]: [usize; 2]) -> Vec<(usize, usize, usize)> {
    let mut v = Vec::new();
    for (q, pl) in planes(c_in).iter().enumerate() {
        let step = if matches!(pl, Plane::Rows(_)) { 2 } else { 1 };
        for ky in (0..kh).step_by(step) {
            v.extend((0..kw).map(|kx| (q, ky, kx)));
        }
    }
    v
}

/// The packed K of a conv with `c_in` channels: one k-pair per word, in order; `weight(kk,
/// zw, w)` gives the packed weight of K index `kk` for an output channel whose ONNX weights
/// are `w(ci, ky, kx)` and whose zero point is `zw` (in the i8 range).
pub(crate) struct PackedK {
    planes: Vec<Plane>,
    order: Vec<(usize, usize, usize)>,
    kh: usize,
}

impl PackedK {
    pub(crate) fn new(c_in: usize, kernel: [usize; 2]) -> Self {
        PackedK {
            planes: planes(c_in),
            order: word_order(c_in, kernel),
            kh: kernel[0],
        }
    }

    /// K: two values per word.
    pub(crate) fn k(&self) -> usize {
        2 * self.order.len()
    }

    pub(crate) fn weight(&self, kk: usize, zw: i32, w: impl Fn(usize, usize, usize) -> i8) -> i8 {
        let (q, ky, kx) = self.order[kk / 2];
        let high = kk % 2 == 1;
        match self.planes[q] {
            Plane::Channels(c) => w(c + usize::from(high), ky, kx),
            Plane::Rows(c) if !high => w(c, ky, kx),
            Plane::Rows(c) if ky + 1 < self.kh => w(c, ky + 1, kx),
            // The missing tap below an odd kernel's last row: (x − za)·(zw − zw) = 0.
            Plane::Rows(_) => zw as i8,
        }
    }
}

/// One conv call's planes and geometry.
pub(crate) struct SmallCin<'a> {
    p: &'a ConvParams,
    oh: usize,
    ow: usize,
    /// Offset in `words` of each word of K from its pixel's [`Self::base`]: plane `q`, tap
    /// `(ky, kx)` at `q·plane_len + ky·dh·wp + kx·dw`.
    offsets: Vec<usize>,
    /// Padded plane geometry: `hp` rows (input, pads and `dh` more rows of zero point for
    /// the row-pair planes), `wp` columns.
    hp: usize,
    wp: usize,
    /// `[plane][b][py][px]` words of stored values (i8 flipped to u8), low half first.
    words: Vec<u32>,
    /// Whether panels need row sums (some weight zero point is not 0).
    need_sums: bool,
    /// The XOR turning stored values back into raw bytes (i8 bit patterns).
    flip: u8,
}

impl<'a> SmallCin<'a> {
    /// Builds the planes of `x` (C_in ≤ [`MAX_C_IN`]) for a conv with output `oh × ow`.
    /// `need_sums`: whether the GEMM's epilogue reads activation row sums (some weight zero
    /// point is not 0); without it [`Self::panel`] writes zeros instead.
    pub(crate) fn new<T: ActElem>(
        x: &'a NhwcInput<'a, T>,
        p: &'a ConvParams,
        oh: usize,
        ow: usize,
        need_sums: bool,
    ) -> Self {
        let [n, h, w, c] = x.shape;
        debug_assert!(c <= MAX_C_IN && p.groups == 1);
        let flip = if T::SIGNED { 0x80u8 } else { 0 };
        let zp = T::from_clamped(x.zero_point.clamp(T::MIN, T::MAX));
        let pad_byte = T::as_bytes(std::slice::from_ref(&zp))[0];
        let pad = (pad_byte ^ flip) as u32;
        let pad_row = vec![pad_byte; x.shape[2] * x.shape[3]];
        let bytes = T::as_bytes(x.data);
        let [pt, pl, pb, pr] = p.pads;
        let dh = p.dilation[0];
        let (hp, wp) = (h + pt + pb + dh, w + pl + pr);
        let planes = planes(c);
        let plane_len = n * hp * wp;
        let mut words = vec![0u32; planes.len() * plane_len];
        // One (plane, image) per task: its hp·wp words.
        let tasks: Vec<(usize, usize, &mut [u32])> = words
            .chunks_mut((hp * wp).max(1))
            .enumerate()
            .map(|(i, chunk)| (i / n.max(1), i % n.max(1), chunk))
            .collect();
        tasks.into_par_iter().for_each(|(q, b, dst)| {
            let img = &bytes[b * h * w * c..(b + 1) * h * w * c];
            // Input row of padded row `py`, or a row of zero points in the padding: every
            // word is then two plain loads (a branch-free loop).
            let src = |py: usize| {
                py.checked_sub(pt)
                    .filter(|&iy| iy < h)
                    .map_or(&pad_row[..], |iy| &img[iy * w * c..(iy + 1) * w * c])
            };
            let pad_word = pad | pad << 16;
            for (py, row) in dst.chunks_exact_mut(wp.max(1)).enumerate() {
                let (lo, lo_ch, hi, hi_ch) = match planes[q] {
                    Plane::Channels(ch) => (src(py), ch, src(py), ch + 1),
                    Plane::Rows(ch) => (src(py), ch, src(py + dh), ch),
                };
                let (left, rest) = row.split_at_mut(pl);
                let (inner, right) = rest.split_at_mut(w);
                left.fill(pad_word);
                right.fill(pad_word);
                let (lo, hi) = (&lo[lo_ch..], &hi[hi_ch..]);
                for (ix, word) in inner.iter_mut().enumerate() {
                    *word = (lo[ix * c] ^ flip) as u32 | ((hi[ix * c] ^ flip) as u32) << 16;
                }
            }
        });
        let offsets = word_order(c, p.kernel)
            .into_iter()
            .map(|(q, ky, kx)| q * plane_len + ky * dh * wp + kx * p.dilation[1])
            .collect();
        SmallCin {
            p,
            oh,
            ow,
            offsets,
            hp,
            wp,
            words,
            need_sums,
            flip,
        }
    }

    /// K of the packed conv (as [`PackedK::k`]).
    pub(crate) fn k(&self) -> usize {
        2 * self.offsets.len()
    }

    /// Index in `words` of the top-left tap of output pixel `(b, oy, ox)` in plane 0; word
    /// `g` of K is at `offsets[g]` from it.
    #[inline(always)]
    fn base(&self, b: usize, oy: usize, ox: usize) -> usize {
        (b * self.hp + oy * self.p.stride[0]) * self.wp + ox * self.p.stride[1]
    }

    /// The plain path: rows `first..` (pixels `(b·oh + oy)·ow + ox`), `k()` raw bytes each
    /// in K order (two per word, low half first).
    pub(crate) fn rows(&self, first: usize, out: &mut [u8]) {
        let k = self.k();
        let mut pos = PixelPos::at(first, self.oh, self.ow);
        for row in out.chunks_exact_mut(k) {
            let PixelPos { b, oy, ox } = pos;
            pos.advance(1, self.oh, self.ow);
            let base = self.base(b, oy, ox);
            for (pair, off) in row.chunks_exact_mut(2).zip(&self.offsets) {
                let w = self.words[base + off];
                pair[0] = w as u8 ^ self.flip;
                pair[1] = (w >> 16) as u8 ^ self.flip;
            }
        }
    }

    /// The planes' words and the offset of each word of K from a pixel's base, at any
    /// stride (for the pooled windows: row `r` of a window is a pixel base, the next
    /// window's two stretches [`Self::pixel_step`] words on).
    pub(crate) fn words_and_offsets(&self) -> (&[u32], &[usize]) {
        (&self.words[..], &self.offsets[..])
    }

    /// Words between the bases of two horizontally adjacent output pixels (the stride).
    pub(crate) fn pixel_step(&self) -> usize {
        self.p.stride[1]
    }

    /// Index in `words` of output pixel `(b, oy, ox)`'s top-left tap in plane 0 (see
    /// [`Self::words_and_offsets`]).
    #[inline(always)]
    pub(crate) fn pixel_base(&self, b: usize, oy: usize, ox: usize) -> usize {
        self.base(b, oy, ox)
    }

    /// Packs pixels `ox0..ox0 + len` (`len ≤ 6`) of output row `(b, oy)` as one panel in
    /// the pairs layout, rows past `len` zero, with their stored row sums (zeros when not
    /// needed).
    #[inline(always)]
    pub(crate) fn panel_stretch(
        &self,
        (b, oy, ox0): (usize, usize, usize),
        len: usize,
        dst: &mut [u32],
        sums: &mut [i32; MR],
    ) {
        debug_assert!(len <= MR && ox0 + len <= self.ow);
        let base = self.base(b, oy, ox0);
        let sw = self.p.stride[1];
        *sums = [0; MR];
        for (d, off) in dst.chunks_exact_mut(MR).zip(&self.offsets) {
            let d: &mut [u32; MR] = d.try_into().expect("6 words");
            let src = base + off;
            if sw == 1 && len == MR {
                let s: &[u32; MR] = self.words[src..src + MR].try_into().expect("6 words");
                *d = *s;
            } else {
                for (j, d) in d.iter_mut().enumerate() {
                    *d = if j < len { self.words[src + j * sw] } else { 0 };
                }
            }
            if self.need_sums {
                for (s, &w) in sums.iter_mut().zip(d.iter()) {
                    *s += ((w & 0xffff) + (w >> 16)) as i32;
                }
            }
        }
    }

    /// Packs the full panel `q` (rows `6q..6q+6`) in the pairs layout (`dst[g·6 + r]`) with
    /// its stored row sums (zeros when not needed): the same words and sums as
    /// [`Self::rows`] followed by the generic packer.
    pub(crate) fn panel(&self, q: usize, dst: &mut [u32], sums: &mut [i32]) {
        self.panel_at(q * MR, dst, sums)
    }

    /// [`Self::panel`] of the 6 rows (pixels) `first..first + 6`, all inside the output:
    /// per stretch of one output row and per word of K, one run of words (contiguous at
    /// stride 1).
    pub(crate) fn panel_at(&self, first: usize, dst: &mut [u32], sums: &mut [i32]) {
        let kg = self.offsets.len();
        let dst = &mut dst[..kg * MR];
        let sums: &mut [i32; MR] = (&mut sums[..MR]).try_into().expect("6 rows");
        let sw = self.p.stride[1];
        let mut pos = PixelPos::at(first, self.oh, self.ow);
        if pos.ox + MR <= self.ow {
            // One stretch of one output row.
            return self.panel_stretch((pos.b, pos.oy, pos.ox), MR, dst, sums);
        }
        *sums = [0; MR];
        let mut r = 0;
        while r < MR {
            let PixelPos { b, oy, ox } = pos;
            let seg = (MR - r).min(self.ow - ox);
            let base = self.base(b, oy, ox);
            for (d, off) in dst.chunks_exact_mut(MR).zip(&self.offsets) {
                let src = base + off;
                let d = &mut d[r..r + seg];
                if sw == 1 {
                    d.copy_from_slice(&self.words[src..src + seg]);
                } else {
                    for (j, d) in d.iter_mut().enumerate() {
                        *d = self.words[src + j * sw];
                    }
                }
                if self.need_sums {
                    for (s, &w) in sums[r..r + seg].iter_mut().zip(d.iter()) {
                        *s += ((w & 0xffff) + (w >> 16)) as i32;
                    }
                }
            }
            r += seg;
            pos.advance(seg, self.oh, self.ow);
        }
    }
}

/// The few-channel conv without weight zero points (`ps` has the i16 weights), output
/// `[n, oh, ow]` × `c_out` into `writer`: tiles of 6 consecutive output pixels (across
/// output rows), each read in place in the planes by the table's 6-row tile (`i16.rows`:
/// one base per pixel, so any stride and any run of pixels) for every column panel, then
/// handed to the output stage. No activation panel is packed and no row sums are formed
/// (the `−za·Σw` column term is the writer's). Tiles split into tasks when `work_ns` pays
/// for it ([`crate::par::tasks`]).
pub(super) fn run_rows<O: crate::output::QuantType>(
    sc: &SmallCin<'_>,
    ps: &crate::gemm::PanelSums<'_>,
    [n, oh, ow]: [usize; 3],
    c_out: usize,
    work_ns: f64,
    writer: &crate::gemm::TileWriter<'_, O>,
) {
    use crate::gemm::{Tile, NR, TILE};
    use crate::par::{self, SplitKind};
    let m = n * oh * ow;
    let tiles = m.div_ceil(MR);
    let tasks = par::tasks(work_ns, tiles);
    let per = tiles.div_ceil(tasks.max(1)).max(1);
    let ntasks = tiles.div_ceil(per);
    let (words, koff) = sc.words_and_offsets();
    let np = ps.n_panels();
    let job = |task: usize| {
        let mut tile = Tile([0; TILE]);
        for t in task * per..((task + 1) * per).min(tiles) {
            let px0 = t * MR;
            let rows_n = MR.min(m - px0);
            let mut pos = PixelPos::at(px0, oh, ow);
            let mut rows = [0usize; MR];
            for (r, row) in rows.iter_mut().enumerate() {
                // Rows past the output repeat the first (their sums are dropped).
                *row = if r < rows_n {
                    let base = sc.pixel_base(pos.b, pos.oy, pos.ox);
                    pos.advance(1, oh, ow);
                    base
                } else {
                    sc.pixel_base(0, 0, 0)
                };
            }
            for p in 0..np {
                ps.rows_tile(words, &rows, koff, p, &mut tile);
                let c0 = p * NR;
                // SAFETY: output pixels px0..px0+rows_n belong to this task only and
                // channels c0..c0+cols exist; the caller sized the output.
                unsafe { writer.write(&tile, rows_n, px0, c0, NR.min(c_out - c0), c_out) };
            }
        }
    };
    par::for_tasks(SplitKind::Gemm, ntasks, job);
}
