//! im2col / col2im for 2-D convolution geometry (Chellapilla et al., "High performance
//! convolutional neural networks for document processing", 2006).
//!
//! Column layout: `col[(c*kh + ky)*kw + kx][oy*ow + ox] = x[c][oy*sh + ky*dh - pt][ox*sw + kx*dw - pl]`,
//! zero outside the image.

/// Convolution window geometry on one image plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geom {
    /// Input height and width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right).
    pub pads: [usize; 4],
    /// Dilations (h, w).
    pub dilation: [usize; 2],
}

impl Geom {
    /// Output size, or `None` when the dilated kernel does not fit the padded input.
    pub fn out_hw(&self) -> Option<(usize, usize)> {
        let ekh = self.dilation[0] * (self.kh - 1) + 1;
        let ekw = self.dilation[1] * (self.kw - 1) + 1;
        let ph = self.h + self.pads[0] + self.pads[2];
        let pw = self.w + self.pads[1] + self.pads[3];
        if self.kh == 0 || self.kw == 0 || ph < ekh || pw < ekw {
            return None;
        }
        Some((
            (ph - ekh) / self.stride[0] + 1,
            (pw - ekw) / self.stride[1] + 1,
        ))
    }

    /// True when im2col is the identity (1×1 kernel, stride 1, no padding).
    pub fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.stride == [1, 1] && self.pads == [0, 0, 0, 0]
    }

    /// Valid output range [lo, hi) along one axis for kernel offset `off` (= k*d - pad):
    /// positions `o` with `0 <= o*s + off < n`.
    #[inline]
    pub fn valid(o_count: usize, s: usize, off: isize, n: usize) -> (usize, usize) {
        let lo = if off >= 0 {
            0
        } else {
            ((-off) as usize).div_ceil(s)
        };
        let hi = if (n as isize) <= off {
            0
        } else {
            ((n as isize - off) as usize).div_ceil(s)
        };
        let hi = hi.min(o_count);
        (lo.min(hi), hi)
    }
}

/// Fills `col` (`c*kh*kw` rows × `oh*ow` columns) from `x` (`c` planes of `h*w`).
pub fn im2col(x: &[f32], c: usize, g: &Geom, oh: usize, ow: usize, col: &mut [f32]) {
    let (h, w) = (g.h, g.w);
    let ohw = oh * ow;
    for ci in 0..c {
        let plane = &x[ci * h * w..(ci + 1) * h * w];
        for ky in 0..g.kh {
            let offy = (ky * g.dilation[0]) as isize - g.pads[0] as isize;
            let (ylo, yhi) = Geom::valid(oh, g.stride[0], offy, h);
            for kx in 0..g.kw {
                let row = (ci * g.kh + ky) * g.kw + kx;
                let dst = &mut col[row * ohw..(row + 1) * ohw];
                let offx = (kx * g.dilation[1]) as isize - g.pads[1] as isize;
                let (xlo, xhi) = Geom::valid(ow, g.stride[1], offx, w);
                dst[..ylo * ow].fill(0.0);
                dst[yhi * ow..].fill(0.0);
                for oy in ylo..yhi {
                    let iy = (oy * g.stride[0]) as isize + offy;
                    let src = &plane[iy as usize * w..(iy as usize + 1) * w];
                    let d = &mut dst[oy * ow..(oy + 1) * ow];
                    d[..xlo].fill(0.0);
                    d[xhi..].fill(0.0);
                    if xlo < xhi {
                        let ix0 = ((xlo * g.stride[1]) as isize + offx) as usize;
                        if g.stride[1] == 1 {
                            d[xlo..xhi].copy_from_slice(&src[ix0..ix0 + (xhi - xlo)]);
                        } else {
                            for (k, v) in d[xlo..xhi].iter_mut().enumerate() {
                                *v = src[ix0 + k * g.stride[1]];
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Adds `col` back into `x` (the adjoint of [`im2col`]); `x` is not cleared first.
pub fn col2im(col: &[f32], c: usize, g: &Geom, oh: usize, ow: usize, x: &mut [f32]) {
    let (h, w) = (g.h, g.w);
    let ohw = oh * ow;
    for ci in 0..c {
        let plane = &mut x[ci * h * w..(ci + 1) * h * w];
        for ky in 0..g.kh {
            let offy = (ky * g.dilation[0]) as isize - g.pads[0] as isize;
            let (ylo, yhi) = Geom::valid(oh, g.stride[0], offy, h);
            for kx in 0..g.kw {
                let row = (ci * g.kh + ky) * g.kw + kx;
                let src = &col[row * ohw..(row + 1) * ohw];
                let offx = (kx * g.dilation[1]) as isize - g.pads[1] as isize;
                let (xlo, xhi) = Geom::valid(ow, g.stride[1], offx, w);
                if xlo >= xhi {
                    continue;
                }
                for oy in ylo..yhi {
                    let iy = (oy * g.stride[0]) as isize + offy;
                    let d = &mut plane[iy as usize * w..(iy as usize + 1) * w];
                    let s = &src[oy * ow + xlo..oy * ow + xhi];
                    let ix0 = ((xlo * g.stride[1]) as isize + offx) as usize;
                    if g.stride[1] == 1 {
                        for (dv, sv) in d[ix0..ix0 + s.len()].iter_mut().zip(s) {
                            *dv += *sv;
                        }
                    } else {
                        for (k, sv) in s.iter().enumerate() {
                            d[ix0 + k * g.stride[1]] += *sv;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn naive_im2col(x: &[f32], c: usize, g: &Geom, oh: usize, ow: usize) -> Vec<f32> {
        let mut col = vec![0.0; c * g.kh * g.kw * oh * ow];
        for ci in 0..c {
            for ky in 0..g.kh {
                for kx in 0..g.kw {
                    for oy in 0..oh {
                        for ox in 0..ow {
                            let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize
                                - g.pads[0] as isize;
                            let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize
                                - g.pads[1] as isize;
                            let v =
                                if iy >= 0 && ix >= 0 && (iy as usize) < g.h && (ix as usize) < g.w
                                {
                                    x[ci * g.h * g.w + iy as usize * g.w + ix as usize]
                                } else {
                                    0.0
                                };
                            col[((ci * g.kh + ky) * g.kw + kx) * oh * ow + oy * ow + ox] = v;
                        }
                    }
                }
            }
        }
        col
    }

    #[test]
    fn im2col_matches_naive_and_col2im_is_its_adjoint() {
        let mut rng = Rng::new(3);
        for &(h, w, kh, kw, s, p, d) in &[
            (5, 6, 3, 3, 1, 1, 1),
            (7, 5, 3, 2, 2, 0, 1),
            (6, 6, 2, 3, 3, 2, 2),
            (4, 4, 1, 1, 1, 0, 1),
            (3, 8, 3, 3, 2, 3, 1),
        ] {
            let g = Geom {
                h,
                w,
                kh,
                kw,
                stride: [s, s + (h % 2)],
                pads: [p, p + 1, p, p],
                dilation: [d, d],
            };
            let (oh, ow) = g.out_hw().unwrap();
            let c = 2;
            let x: Vec<f32> = (0..c * h * w).map(|_| rng.normal()).collect();
            let mut col = vec![f32::NAN; c * kh * kw * oh * ow];
            im2col(&x, c, &g, oh, ow, &mut col);
            assert_eq!(col, naive_im2col(&x, c, &g, oh, ow));
            // <im2col(x), y> == <x, col2im(y)>
            let y: Vec<f32> = (0..col.len()).map(|_| rng.normal()).collect();
            let mut xt = vec![0.0; x.len()];
            col2im(&y, c, &g, oh, ow, &mut xt);
            let lhs: f64 = col.iter().zip(&y).map(|(a, b)| *a as f64 * *b as f64).sum();
            let rhs: f64 = x.iter().zip(&xt).map(|(a, b)| *a as f64 * *b as f64).sum();
            assert!(
                (lhs - rhs).abs() < 1e-4 * (1.0 + lhs.abs()),
                "{lhs} vs {rhs}"
            );
        }
    }
}
