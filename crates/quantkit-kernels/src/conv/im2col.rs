//! The implicit im2col: patch rows gathered panel by panel for the GEMM.

use super::params::{ActElem, ConvParams, NhwcInput, PixelPos};

/// The implicit im2col of group `gi`: row `(n, oy, ox)` holds columns `(ky, kx, ci)` of the
/// NHWC input, the zero point where a tap falls in the padding. The GEMM calls it for one
/// panel of rows at a time right before packing them (so the `[M, K]` matrix never exists:
/// no buffer the size of the batch's patches to fill and stream back). Without dilation and
/// with one group, the `kx` taps of a kernel row read adjacent pixels, so their valid run is
/// one copy of `run·C` bytes.
pub(super) struct Im2col<'a> {
    x: &'a [u8],
    shape: [usize; 4],
    p: &'a ConvParams,
    gi: usize,
    cin_g: usize,
    oh: usize,
    ow: usize,
    pad: u8,
    /// Valid kx range of every output column.
    cols: Vec<(usize, usize)>,
}

impl<'a> Im2col<'a> {
    pub(super) fn new<T: ActElem>(
        x: &'a NhwcInput<'a, T>,
        p: &'a ConvParams,
        gi: usize,
        cin_g: usize,
        oh: usize,
        ow: usize,
    ) -> Self {
        let wd = x.shape[2];
        let kw = p.kernel[1];
        let pad = T::from_clamped(x.zero_point.clamp(T::MIN, T::MAX));
        let cols = (0..ow)
            .map(|ox| {
                let base = (ox * p.stride[1]) as isize - p.pads[1] as isize;
                let d = p.dilation[1] as isize;
                let lo = (0..kw)
                    .find(|&kx| base + kx as isize * d >= 0)
                    .unwrap_or(kw);
                let hi = (lo..kw)
                    .take_while(|&kx| base + (kx as isize) * d < wd as isize)
                    .last()
                    .map_or(lo, |kx| kx + 1);
                (lo, hi)
            })
            .collect();
        Im2col {
            x: T::as_bytes(x.data),
            shape: x.shape,
            p,
            gi,
            cin_g,
            oh,
            ow,
            pad: T::as_bytes(std::slice::from_ref(&pad))[0],
            cols,
        }
    }

    /// Writes the rows of pixels `first..` (`(n·oh + oy)·ow + ox`), `kh·kw·cin_g` bytes
    /// each, into `out`. Pixels advance incrementally (no division per row), only the padded
    /// taps are filled with the zero point, and runs of up to 16 bytes (a 3×3 kernel row over
    /// 1–5 channels) are copied as one fixed 16-byte move instead of a `memcpy` call: the
    /// bytes it writes past the run belong to the same row's right padding (filled right
    /// after) or to later segments and rows (written after), and it is only used when the
    /// 16 bytes lie inside both buffers.
    pub(super) fn rows(&self, first: usize, out: &mut [u8]) {
        let [_, h, wd, c] = self.shape;
        let (p, cin_g) = (self.p, self.cin_g);
        let [kh, kw] = p.kernel;
        let k = kh * kw * cin_g;
        if k == 0 {
            return;
        }
        let seg_len = kw * cin_g;
        let contiguous = p.dilation[1] == 1 && cin_g == c;
        let mut pos = PixelPos::at(first, self.oh, self.ow);
        for r in 0..out.len() / k {
            let PixelPos { b, oy, ox } = pos;
            let (kx_lo, kx_hi) = self.cols[ox];
            for ky in 0..kh {
                let base = r * k + ky * seg_len;
                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize - p.pads[0] as isize;
                if iy < 0 || iy >= h as isize || kx_lo >= kx_hi {
                    out[base..base + seg_len].fill(self.pad);
                    continue;
                }
                let ix0 = ox * p.stride[1] + kx_lo * p.dilation[1] - p.pads[1];
                let src0 = ((b * h + iy as usize) * wd + ix0) * c + self.gi * cin_g;
                let dst0 = base + kx_lo * cin_g;
                if contiguous {
                    let len = (kx_hi - kx_lo) * c;
                    if len <= 16 && dst0 + 16 <= out.len() && src0 + 16 <= self.x.len() {
                        let mut v = [0u8; 16];
                        v.copy_from_slice(&self.x[src0..src0 + 16]);
                        out[dst0..dst0 + 16].copy_from_slice(&v);
                    } else {
                        out[dst0..dst0 + len].copy_from_slice(&self.x[src0..src0 + len]);
                    }
                } else {
                    for t in 0..kx_hi - kx_lo {
                        let src = src0 + t * p.dilation[1] * c;
                        out[dst0 + t * cin_g..][..cin_g].copy_from_slice(&self.x[src..src + cin_g]);
                    }
                }
                if kx_lo > 0 {
                    out[base..dst0].fill(self.pad);
                }
                if kx_hi < kw {
                    out[base + kx_hi * cin_g..base + seg_len].fill(self.pad);
                }
            }
            pos.advance(1, self.oh, self.ow);
        }
    }
}
