//! 2-D convolution (ONNX `Conv`): im2col + GEMM per sample and group, a direct loop for
//! depthwise convolutions. Backward gives the input gradient (GEMM + col2im) and the weight
//! and bias gradients, reduced over fixed-size sample chunks in a fixed order so that the
//! result does not depend on the thread count.

use std::any::Any;

use rayon::prelude::*;

use super::im2col::{col2im, im2col, Geom};
use crate::error::{attr_err, shape_err, Result};
use crate::gemm::{sgemm, MatRef, Par};
use crate::tape::Op;
use crate::tensor::Tensor;

/// Samples per partial weight-gradient buffer. Fixed (not derived from the thread count) so
/// that the summation order, hence the result, is the same on any number of threads.
pub(crate) const GRAD_CHUNK: usize = 4;

/// Convolution attributes (ONNX `Conv`): strides, pads (top, left, bottom, right),
/// dilations, group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvAttrs {
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right).
    pub pads: [usize; 4],
    /// Dilations (h, w).
    pub dilation: [usize; 2],
    /// Number of groups (channels are split evenly).
    pub group: usize,
}

impl ConvAttrs {
    /// Stride `s`, symmetric padding `p`, no dilation, one group.
    pub fn new(stride: usize, pad: usize) -> Self {
        Self {
            stride: [stride, stride],
            pads: [pad; 4],
            dilation: [1, 1],
            group: 1,
        }
    }

    /// The same with `group` groups.
    pub fn with_group(mut self, group: usize) -> Self {
        self.group = group;
        self
    }
}

/// Conv2d op. Inputs: `x [N, C, H, W]`, `w [M, C/group, kh, kw]`, optional `b [M]`.
#[derive(Debug)]
pub struct Conv2d {
    attrs: ConvAttrs,
}

pub(crate) struct ConvShape {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub cpg: usize,
    pub mpg: usize,
    pub g: Geom,
    pub oh: usize,
    pub ow: usize,
}

impl ConvShape {
    fn k(&self) -> usize {
        self.cpg * self.g.kh * self.g.kw
    }
    fn depthwise(&self) -> bool {
        self.cpg == 1 && self.mpg == 1
    }
}

impl Conv2d {
    /// A convolution with the given attributes.
    pub fn new(attrs: ConvAttrs) -> Self {
        Self { attrs }
    }

    fn shape(&self, inputs: &[&Tensor]) -> Result<ConvShape> {
        let op = "Conv";
        if inputs.len() < 2 || inputs.len() > 3 {
            return Err(attr_err(
                op,
                format!("needs 2 or 3 inputs, got {}", inputs.len()),
            ));
        }
        let a = &self.attrs;
        if a.group == 0 || a.stride.contains(&0) || a.dilation.contains(&0) {
            return Err(attr_err(op, "group, strides and dilations must be ≥ 1"));
        }
        let [n, c, h, w] = inputs[0].dims4(op)?;
        let [m, cpg, kh, kw] = inputs[1].dims4(op)?;
        if c != cpg * a.group || m % a.group != 0 {
            return Err(shape_err(
                op,
                format!(
                    "weight [M, C/group = {}, kh, kw] with M divisible by group {}",
                    c / a.group.max(1),
                    a.group
                ),
                inputs[1].shape(),
            ));
        }
        if let Some(b) = inputs.get(2) {
            if b.shape() != [m] {
                return Err(shape_err(op, format!("bias [{m}]"), b.shape()));
            }
        }
        let g = Geom {
            h,
            w,
            kh,
            kw,
            stride: a.stride,
            pads: a.pads,
            dilation: a.dilation,
        };
        let (oh, ow) = g.out_hw().ok_or_else(|| {
            shape_err(
                op,
                "an input at least as large as the dilated kernel",
                inputs[0].shape(),
            )
        })?;
        Ok(ConvShape {
            n,
            c,
            m,
            cpg,
            mpg: m / a.group,
            g,
            oh,
            ow,
        })
    }
}

impl Op for Conv2d {
    fn name(&self) -> &'static str {
        "Conv"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s = self.shape(inputs)?;
        let (x, w) = (inputs[0].data(), inputs[1].data());
        let bias = inputs.get(2).map(|b| b.data());
        let mut y = vec![0.0f32; s.n * s.m * s.oh * s.ow];
        conv_forward(&s, self.attrs.group, x, w, bias, &mut y);
        Tensor::new(&[s.n, s.m, s.oh, s.ow], y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let s = self.shape(inputs)?;
        let (x, w) = (inputs[0].data(), inputs[1].data());
        let dy = grad.data();
        let group = self.attrs.group;
        let dx = if needs[0] {
            let mut dx = vec![0.0f32; x.len()];
            conv_backward_input(&s, group, w, dy, &mut dx);
            Some(Tensor::new(inputs[0].shape(), dx)?)
        } else {
            None
        };
        let need_w = needs[1];
        let need_b = needs.get(2).copied().unwrap_or(false);
        let (dw, db) = if need_w || need_b {
            let (dw, db) = conv_backward_params(&s, group, x, dy, need_w);
            (
                if need_w {
                    Some(Tensor::new(inputs[1].shape(), dw)?)
                } else {
                    None
                },
                if need_b {
                    Some(Tensor::new(&[s.m], db)?)
                } else {
                    None
                },
            )
        } else {
            (None, None)
        };
        let mut out = vec![dx, dw];
        if inputs.len() == 3 {
            out.push(db);
        }
        Ok(out)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

pub(crate) fn conv_forward(
    s: &ConvShape,
    group: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let chw = s.c * s.g.h * s.g.w;
    let ohw = s.oh * s.ow;
    let k = s.k();
    if s.depthwise() {
        y.par_chunks_mut(s.m * ohw)
            .zip(x.par_chunks(chw))
            .for_each(|(yn, xn)| depthwise_forward(s, xn, w, yn));
    } else {
        let pointwise = s.g.is_pointwise();
        y.par_chunks_mut(s.m * ohw)
            .zip(x.par_chunks(chw))
            .for_each_init(
                || vec![0.0f32; if pointwise { 0 } else { k * ohw }],
                |col, (yn, xn)| {
                    for gi in 0..group {
                        let xg = &xn[gi * s.cpg * s.g.h * s.g.w..(gi + 1) * s.cpg * s.g.h * s.g.w];
                        let b = if pointwise {
                            MatRef::row_major(xg, k, ohw)
                        } else {
                            im2col(xg, s.cpg, &s.g, s.oh, s.ow, col);
                            MatRef::row_major(col, k, ohw)
                        };
                        let a =
                            MatRef::row_major(&w[gi * s.mpg * k..(gi + 1) * s.mpg * k], s.mpg, k);
                        let yg = &mut yn[gi * s.mpg * ohw..(gi + 1) * s.mpg * ohw];
                        // The bias is written first and the product accumulated onto it: no
                        // zero fill and no second pass over the output.
                        match bias {
                            Some(bv) => {
                                for (mi, plane) in yg.chunks_exact_mut(ohw).enumerate() {
                                    plane.fill(bv[gi * s.mpg + mi]);
                                }
                            }
                            None => yg.fill(0.0),
                        }
                        sgemm(yg, a, b, true, Par::Seq);
                    }
                },
            );
        return;
    }
    if let Some(b) = bias {
        y.par_chunks_mut(ohw).enumerate().for_each(|(i, plane)| {
            let bv = b[i % s.m];
            for v in plane {
                *v += bv;
            }
        });
    }
}

fn depthwise_forward(s: &ConvShape, xn: &[f32], w: &[f32], yn: &mut [f32]) {
    let g = &s.g;
    let (h, wd, ohw) = (g.h, g.w, s.oh * s.ow);
    for c in 0..s.c {
        let xp = &xn[c * h * wd..(c + 1) * h * wd];
        let yp = &mut yn[c * ohw..(c + 1) * ohw];
        yp.fill(0.0);
        let wk = &w[c * g.kh * g.kw..(c + 1) * g.kh * g.kw];
        for ky in 0..g.kh {
            let offy = (ky * g.dilation[0]) as isize - g.pads[0] as isize;
            let (ylo, yhi) = Geom::valid(s.oh, g.stride[0], offy, h);
            for kx in 0..g.kw {
                let wv = wk[ky * g.kw + kx];
                let offx = (kx * g.dilation[1]) as isize - g.pads[1] as isize;
                let (xlo, xhi) = Geom::valid(s.ow, g.stride[1], offx, wd);
                if xlo >= xhi {
                    continue;
                }
                let ix0 = ((xlo * g.stride[1]) as isize + offx) as usize;
                for oy in ylo..yhi {
                    let iy = ((oy * g.stride[0]) as isize + offy) as usize;
                    let src = &xp[iy * wd..(iy + 1) * wd];
                    let dst = &mut yp[oy * s.ow + xlo..oy * s.ow + xhi];
                    if g.stride[1] == 1 {
                        for (d, v) in dst.iter_mut().zip(&src[ix0..ix0 + (xhi - xlo)]) {
                            *d += wv * *v;
                        }
                    } else {
                        for (k, d) in dst.iter_mut().enumerate() {
                            *d += wv * src[ix0 + k * g.stride[1]];
                        }
                    }
                }
            }
        }
    }
}

/// Visits every (kernel tap, output row) pair of a depthwise plane with the matching input row
/// offsets: `f(tap, out_range, in_start)` where the input index for output `o` is
/// `in_start + (o - out_range.start) * stride_w`.
fn depthwise_taps(s: &ConvShape, mut f: impl FnMut(usize, usize, usize, usize)) {
    let g = &s.g;
    for ky in 0..g.kh {
        let offy = (ky * g.dilation[0]) as isize - g.pads[0] as isize;
        let (ylo, yhi) = Geom::valid(s.oh, g.stride[0], offy, g.h);
        for kx in 0..g.kw {
            let offx = (kx * g.dilation[1]) as isize - g.pads[1] as isize;
            let (xlo, xhi) = Geom::valid(s.ow, g.stride[1], offx, g.w);
            if xlo >= xhi {
                continue;
            }
            let ix0 = ((xlo * g.stride[1]) as isize + offx) as usize;
            for oy in ylo..yhi {
                let iy = ((oy * g.stride[0]) as isize + offy) as usize;
                f(ky * g.kw + kx, oy * s.ow + xlo, xhi - xlo, iy * g.w + ix0);
            }
        }
    }
}

pub(crate) fn conv_backward_input(
    s: &ConvShape,
    group: usize,
    w: &[f32],
    dy: &[f32],
    dx: &mut [f32],
) {
    let chw = s.c * s.g.h * s.g.w;
    let ohw = s.oh * s.ow;
    let k = s.k();
    let hw = s.g.h * s.g.w;
    if s.depthwise() {
        let sw = s.g.stride[1];
        let kk = s.g.kh * s.g.kw;
        dx.par_chunks_mut(chw)
            .zip(dy.par_chunks(s.m * ohw))
            .for_each(|(dxn, dyn_)| {
                for c in 0..s.c {
                    let dxp = &mut dxn[c * hw..(c + 1) * hw];
                    let dyp = &dyn_[c * ohw..(c + 1) * ohw];
                    let wk = &w[c * kk..(c + 1) * kk];
                    depthwise_taps(s, |tap, o0, len, i0| {
                        let wv = wk[tap];
                        let src = &dyp[o0..o0 + len];
                        if sw == 1 {
                            for (d, v) in dxp[i0..i0 + len].iter_mut().zip(src) {
                                *d += wv * *v;
                            }
                        } else {
                            for (j, v) in src.iter().enumerate() {
                                dxp[i0 + j * sw] += wv * *v;
                            }
                        }
                    });
                }
            });
        return;
    }
    let pointwise = s.g.is_pointwise();
    dx.par_chunks_mut(chw)
        .zip(dy.par_chunks(s.m * ohw))
        .for_each_init(
            || vec![0.0f32; if pointwise { 0 } else { k * ohw }],
            |col, (dxn, dyn_)| {
                for gi in 0..group {
                    let a =
                        MatRef::row_major(&w[gi * s.mpg * k..(gi + 1) * s.mpg * k], s.mpg, k).t();
                    let b = MatRef::row_major(
                        &dyn_[gi * s.mpg * ohw..(gi + 1) * s.mpg * ohw],
                        s.mpg,
                        ohw,
                    );
                    let dxg = &mut dxn[gi * s.cpg * hw..(gi + 1) * s.cpg * hw];
                    if pointwise {
                        sgemm(dxg, a, b, false, Par::Seq);
                    } else {
                        sgemm(col, a, b, false, Par::Seq);
                        col2im(col, s.cpg, &s.g, s.oh, s.ow, dxg);
                    }
                }
            },
        );
}

/// Sum with eight independent partial sums, which the compiler keeps in one SIMD register
/// (a plain `iter().sum()` is a serial chain of scalar adds, since float addition is not
/// reassociated). The order is fixed, so the result is deterministic.
pub(crate) fn sum8(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += *v;
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for v in rest {
        s += *v;
    }
    s
}

/// Weight and bias gradients, summed per chunk of [`GRAD_CHUNK`] samples, chunks added in order.
pub(crate) fn conv_backward_params(
    s: &ConvShape,
    group: usize,
    x: &[f32],
    dy: &[f32],
    need_w: bool,
) -> (Vec<f32>, Vec<f32>) {
    let chw = s.c * s.g.h * s.g.w;
    let ohw = s.oh * s.ow;
    let k = s.k();
    let hw = s.g.h * s.g.w;
    let wlen = s.m * k;
    let pointwise = s.g.is_pointwise();
    let depthwise = s.depthwise();
    let partials: Vec<(Vec<f32>, Vec<f32>)> = x
        .par_chunks(chw * GRAD_CHUNK)
        .zip(dy.par_chunks(s.m * ohw * GRAD_CHUNK))
        .map(|(xc, dyc)| {
            let mut dw = vec![0.0f32; if need_w { wlen } else { 0 }];
            let mut db = vec![0.0f32; s.m];
            let mut col = vec![
                0.0f32;
                if pointwise || depthwise || !need_w {
                    0
                } else {
                    k * ohw
                }
            ];
            for (xn, dyn_) in xc.chunks(chw).zip(dyc.chunks(s.m * ohw)) {
                for (mi, d) in db.iter_mut().enumerate() {
                    *d += sum8(&dyn_[mi * ohw..(mi + 1) * ohw]);
                }
                if !need_w {
                    continue;
                }
                if depthwise {
                    let kk = s.g.kh * s.g.kw;
                    let sw = s.g.stride[1];
                    for c in 0..s.c {
                        let xp = &xn[c * hw..(c + 1) * hw];
                        let dyp = &dyn_[c * ohw..(c + 1) * ohw];
                        let dwk = &mut dw[c * kk..(c + 1) * kk];
                        depthwise_taps(s, |tap, o0, len, i0| {
                            let src = &dyp[o0..o0 + len];
                            let acc: f32 = if sw == 1 {
                                src.iter().zip(&xp[i0..i0 + len]).map(|(a, b)| a * b).sum()
                            } else {
                                src.iter()
                                    .enumerate()
                                    .map(|(j, a)| a * xp[i0 + j * sw])
                                    .sum()
                            };
                            dwk[tap] += acc;
                        });
                    }
                    continue;
                }
                for gi in 0..group {
                    let xg = &xn[gi * s.cpg * hw..(gi + 1) * s.cpg * hw];
                    let colm = if pointwise {
                        MatRef::row_major(xg, k, ohw)
                    } else {
                        im2col(xg, s.cpg, &s.g, s.oh, s.ow, &mut col);
                        MatRef::row_major(&col, k, ohw)
                    };
                    let a = MatRef::row_major(
                        &dyn_[gi * s.mpg * ohw..(gi + 1) * s.mpg * ohw],
                        s.mpg,
                        ohw,
                    );
                    sgemm(
                        &mut dw[gi * s.mpg * k..(gi + 1) * s.mpg * k],
                        a,
                        colm.t(),
                        true,
                        Par::Seq,
                    );
                }
            }
            (dw, db)
        })
        .collect();
    let mut dw = vec![0.0f32; if need_w { wlen } else { 0 }];
    let mut db = vec![0.0f32; s.m];
    for (pw, pb) in &partials {
        for (a, b) in dw.iter_mut().zip(pw) {
            *a += *b;
        }
        for (a, b) in db.iter_mut().zip(pb) {
            *a += *b;
        }
    }
    (dw, db)
}

/// Plain scalar reference convolution (direct 7-loop form, f64 accumulation).
pub fn conv2d_ref(x: &Tensor, w: &Tensor, b: Option<&Tensor>, a: &ConvAttrs) -> Result<Tensor> {
    let op = Conv2d::new(*a);
    let mut ins = vec![x, w];
    if let Some(b) = b {
        ins.push(b);
    }
    let s = op.shape(&ins)?;
    let g = &s.g;
    let mut y = vec![0.0f32; s.n * s.m * s.oh * s.ow];
    for n in 0..s.n {
        for m in 0..s.m {
            let gi = m / s.mpg;
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    let mut acc = b.map_or(0.0, |b| b.data()[m] as f64);
                    for ci in 0..s.cpg {
                        let c = gi * s.cpg + ci;
                        for ky in 0..g.kh {
                            for kx in 0..g.kw {
                                let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize
                                    - g.pads[0] as isize;
                                let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize
                                    - g.pads[1] as isize;
                                if iy < 0 || ix < 0 || iy as usize >= g.h || ix as usize >= g.w {
                                    continue;
                                }
                                acc += x.data()
                                    [((n * s.c + c) * g.h + iy as usize) * g.w + ix as usize]
                                    as f64
                                    * w.data()[((m * s.cpg + ci) * g.kh + ky) * g.kw + kx] as f64;
                            }
                        }
                    }
                    y[((n * s.m + m) * s.oh + oy) * s.ow + ox] = acc as f32;
                }
            }
        }
    }
    Tensor::new(&[s.n, s.m, s.oh, s.ow], y)
}
