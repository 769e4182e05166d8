//! Activation packing for convolutions with few input channels (C_in ≤ 4: a network's first
//! conv on grey or RGB images).
//!
//! im2col + GEMM spends most of such a conv gathering and packing: each patch row is only
//! `kh·kw·C_in` bytes (27 for a 3×3 RGB kernel), so the per-row work of the implicit im2col
//! and of the 8×8 word transposes of the packer dwarfs the GEMM. Here the input channels
//! are padded to an even count `cp` (the padding channels hold the zero point, so they add
//! `(za − za)·w = 0`, and their weights are packed as 0), so that the k-pairs of the AVX2
//! layout never straddle two pixels: pair `(tap, h)` is channels `2h, 2h+1` of one input
//! pixel. Each input pixel is widened once into `cp/2` such words (in the stored domain,
//! i.e. i8 values flipped to u8) plus its sum, and a panel of 6 output pixels is then
//! assembled from whole words: 6 contiguous words per `(tap, h)` when the panel is one
//! stretch of an output row away from the padding (stride 1), one word per row and tap
//! otherwise. Other geometries (AVX-512 VNNI's quads) gather rows with [`SmallCin::rows`]
//! and the generic packer.

use rayon::prelude::*;

use crate::conv::{ActElem, ConvParams, NhwcInput, PixelPos};
use crate::gemm::MR;

/// Largest C_in packed this way.
pub(crate) const MAX_C_IN: usize = 4;

/// Channels padded to pairs.
pub(crate) fn padded_channels(c_in: usize) -> usize {
    c_in.next_multiple_of(2)
}

/// One conv call's widened input and geometry.
pub(crate) struct SmallCin<'a> {
    /// Raw input bytes (i8 as bit patterns).
    x: &'a [u8],
    shape: [usize; 4],
    p: &'a ConvParams,
    cp: usize,
    oh: usize,
    ow: usize,
    /// The zero point's raw byte (padding taps and padding channels).
    pad: u8,
    /// `[h][pixel]` words: stored channels `2h` (low half) and `2h+1`.
    wide: Vec<u32>,
    /// `[pixel]` sums of the `cp` stored channel values.
    sums: Vec<i32>,
    /// The word and sum of a padding tap.
    pad_word: u32,
    pad_sum: i32,
    /// Whether panels need row sums (some weight zero point is not 0).
    need_sums: bool,
}

impl<'a> SmallCin<'a> {
    /// Widens `x` (C_in ≤ [`MAX_C_IN`]) for a conv with output `oh × ow`.
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
        let cp = padded_channels(c);
        let flip = if T::SIGNED { 0x80u8 } else { 0 };
        let zp = T::from_clamped(x.zero_point.clamp(T::MIN, T::MAX));
        let pad = T::as_bytes(std::slice::from_ref(&zp))[0];
        let stored = |b: u8| (b ^ flip) as u32;
        let pixels = n * h * w;
        let bytes = T::as_bytes(x.data);
        let mut wide = vec![0u32; cp / 2 * pixels];
        let mut sums = vec![0i32; pixels];
        let per_image = h * w;
        // One image per task: the planes are written at `hh·pixels + pixel`.
        let planes: Vec<&mut [u32]> = wide.chunks_mut(pixels.max(1)).collect();
        let mut planes_per_image: Vec<Vec<&mut [u32]>> = (0..n).map(|_| Vec::new()).collect();
        for plane in planes {
            for (img, chunk) in plane.chunks_mut(per_image.max(1)).enumerate() {
                planes_per_image[img].push(chunk);
            }
        }
        planes_per_image
            .into_par_iter()
            .zip(sums.par_chunks_mut(per_image.max(1)))
            .enumerate()
            .for_each(|(img, (mut planes, sums))| {
                let src = &bytes[img * per_image * c..(img + 1) * per_image * c];
                for (px, sum) in sums.iter_mut().enumerate() {
                    let ch = |i: usize| stored(if i < c { src[px * c + i] } else { pad });
                    let mut total = 0u32;
                    for (hh, plane) in planes.iter_mut().enumerate() {
                        let (lo, hi) = (ch(2 * hh), ch(2 * hh + 1));
                        plane[px] = lo | hi << 16;
                        total += lo + hi;
                    }
                    *sum = total as i32;
                }
            });
        let sp = stored(pad);
        SmallCin {
            x: bytes,
            shape: x.shape,
            p,
            cp,
            oh,
            ow,
            pad,
            wide,
            sums,
            pad_word: sp | sp << 16,
            pad_sum: (cp as u32 * sp) as i32,
            need_sums,
        }
    }

    /// K of the padded conv: `kh·kw·cp`.
    pub(crate) fn k(&self) -> usize {
        self.p.kernel[0] * self.p.kernel[1] * self.cp
    }

    /// The plain path: rows `first..` (pixels `(b·oh + oy)·ow + ox`), `k()` raw bytes each in
    /// `(ky, kx, channel)` order, padding taps and channels holding the zero point.
    pub(crate) fn rows(&self, first: usize, out: &mut [u8]) {
        let [_, h, w, c] = self.shape;
        let [kh, kw] = self.p.kernel;
        let k = self.k();
        let mut pos = PixelPos::at(first, self.oh, self.ow);
        for row in out.chunks_exact_mut(k) {
            let PixelPos { b, oy, ox } = pos;
            pos.advance(1, self.oh, self.ow);
            row.fill(self.pad);
            for ky in 0..kh {
                let Some(iy) = self.input_coord(0, oy, ky, h) else {
                    continue;
                };
                for kx in 0..kw {
                    let Some(ix) = self.input_coord(1, ox, kx, w) else {
                        continue;
                    };
                    let src = ((b * h + iy) * w + ix) * c;
                    let dst = (ky * kw + kx) * self.cp;
                    row[dst..dst + c].copy_from_slice(&self.x[src..src + c]);
                }
            }
        }
    }

    /// Input row/column of output coordinate `o` and tap `t` along axis `axis`, or `None`
    /// in the padding.
    #[inline(always)]
    fn input_coord(&self, axis: usize, o: usize, t: usize, len: usize) -> Option<usize> {
        let i = (o * self.p.stride[axis] + t * self.p.dilation[axis]) as isize
            - self.p.pads[axis] as isize;
        (i >= 0 && i < len as isize).then_some(i as usize)
    }

    /// Packs the full panel `q` (rows `6q..6q+6`) in the pairs layout (`dst[g·6 + r]`,
    /// `g = (ky·kw + kx)·cp/2 + h`) with its stored row sums (zeros when not needed): the
    /// same words and sums as [`Self::rows`] followed by the generic packer.
    pub(crate) fn panel(&self, q: usize, dst: &mut [u32], sums: &mut [i32]) {
        self.panel_at(q * MR, dst, sums)
    }

    /// [`Self::panel`] of the 6 rows (pixels) `first..first + 6`, all inside the output.
    pub(crate) fn panel_at(&self, first: usize, dst: &mut [u32], sums: &mut [i32]) {
        let [_, h, w, _] = self.shape;
        let [kh, kw] = self.p.kernel;
        let [dh, dw] = self.p.dilation;
        let wp = self.cp / 2;
        let pixels = self.sums.len();
        let start = PixelPos::at(first, self.oh, self.ow);
        let (b, oy, ox0) = (start.b, start.oy, start.ox);
        let dst = &mut dst[..kh * kw * wp * MR];
        let sums: &mut [i32; MR] = (&mut sums[..MR]).try_into().expect("6 rows");
        *sums = [0; MR];
        // One stretch of one output row, stride 1, every tap inside the input: copy.
        let ix_lo = ox0 as isize - self.p.pads[1] as isize;
        let ix_hi = ix_lo + (MR - 1 + (kw - 1) * dw) as isize;
        let iy_lo = (oy * self.p.stride[0]) as isize - self.p.pads[0] as isize;
        let iy_hi = iy_lo + ((kh - 1) * dh) as isize;
        if self.p.stride[1] == 1
            && ox0 + MR <= self.ow
            && ix_lo >= 0
            && ix_hi < w as isize
            && iy_lo >= 0
            && iy_hi < h as isize
        {
            let (iy0, ix0) = (iy_lo as usize, ix_lo as usize);
            let mut words = dst.chunks_exact_mut(MR);
            for ky in 0..kh {
                let row = (b * h + iy0 + ky * dh) * w + ix0;
                for kx in 0..kw {
                    let pix = row + kx * dw;
                    for (hh, out) in (0..wp).zip(words.by_ref()) {
                        let src: &[u32; MR] = self.wide[hh * pixels + pix..][..MR]
                            .try_into()
                            .expect("6 words");
                        out.copy_from_slice(src);
                    }
                    if self.need_sums {
                        let s: &[i32; MR] = self.sums[pix..][..MR].try_into().expect("6 sums");
                        for (a, &v) in sums.iter_mut().zip(s) {
                            *a += v;
                        }
                    }
                }
            }
            return;
        }
        if self.p.stride[1] == 1 {
            self.panel_segments(first, dst, sums);
            return;
        }
        // Word by word: each row's pixel and each tap checked against the padding.
        let mut pos = start;
        for (r, sum) in sums.iter_mut().enumerate() {
            let PixelPos { b, oy, ox } = pos;
            pos.advance(1, self.oh, self.ow);
            for ky in 0..kh {
                let iy = self.input_coord(0, oy, ky, h);
                for kx in 0..kw {
                    let src = iy.zip(self.input_coord(1, ox, kx, w));
                    let at = src.map(|(iy, ix)| (b * h + iy) * w + ix);
                    for hh in 0..wp {
                        let g = (ky * kw + kx) * wp + hh;
                        dst[g * MR + r] = at.map_or(self.pad_word, |a| self.wide[hh * pixels + a]);
                    }
                    if self.need_sums {
                        *sum += at.map_or(self.pad_sum, |a| self.sums[a]);
                    }
                }
            }
        }
    }

    /// Stride-1 panels that cross an output row or touch the padding: per stretch of one
    /// output row and per tap, the padded columns get the pad word and the rest is one
    /// contiguous copy.
    fn panel_segments(&self, first: usize, dst: &mut [u32], sums: &mut [i32; MR]) {
        let [_, h, w, _] = self.shape;
        let [kh, kw] = self.p.kernel;
        let dw = self.p.dilation[1];
        let wp = self.cp / 2;
        let pixels = self.sums.len();
        let mut pos = PixelPos::at(first, self.oh, self.ow);
        let mut r = 0;
        while r < MR {
            let PixelPos { b, oy, ox } = pos;
            let seg = (MR - r).min(self.ow - ox);
            for ky in 0..kh {
                let iy = self.input_coord(0, oy, ky, h);
                for kx in 0..kw {
                    // Columns of this stretch for tap kx: ix = ox + j + kx·dw − pad_l.
                    let ix0 = (ox + kx * dw) as isize - self.p.pads[1] as isize;
                    let j_lo = (-ix0).clamp(0, seg as isize) as usize;
                    let j_hi = (w as isize - ix0).clamp(j_lo as isize, seg as isize) as usize;
                    let (j_lo, j_hi) = if iy.is_some() { (j_lo, j_hi) } else { (0, 0) };
                    let row = iy.map_or(0, |iy| (b * h + iy) * w);
                    for hh in 0..wp {
                        let g = (ky * kw + kx) * wp + hh;
                        let d = &mut dst[g * MR + r..g * MR + r + seg];
                        // At most 6 words: a select per word, not memset/memcpy calls.
                        let src = hh * pixels + row;
                        for (j, d) in d.iter_mut().enumerate() {
                            *d = if j >= j_lo && j < j_hi {
                                self.wide[src + (ix0 + j as isize) as usize]
                            } else {
                                self.pad_word
                            };
                        }
                    }
                    if self.need_sums {
                        for (j, s) in sums[r..r + seg].iter_mut().enumerate() {
                            *s += if (j_lo..j_hi).contains(&j) {
                                self.sums[row + (ix0 + j as isize) as usize]
                            } else {
                                self.pad_sum
                            };
                        }
                    }
                }
            }
            r += seg;
            pos.advance(seg, self.oh, self.ow);
        }
    }
}
