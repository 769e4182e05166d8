//! 2-D transposed convolution (ONNX `ConvTranspose`, group 1): the adjoint of convolution, so
//! forward is GEMM + col2im and the input gradient is im2col + GEMM.

use std::any::Any;

use rayon::prelude::*;

use super::conv::GRAD_CHUNK;
use super::im2col::{col2im, im2col, Geom};
use crate::error::{attr_err, shape_err, Result};
use crate::gemm::{sgemm, MatRef, Par};
use crate::tape::Op;
use crate::tensor::Tensor;

/// ConvTranspose attributes: strides, pads (top, left, bottom, right), dilations,
/// output padding (h, w). Group must be 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeAttrs {
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right).
    pub pads: [usize; 4],
    /// Dilations (h, w).
    pub dilation: [usize; 2],
    /// Extra rows/columns added at the bottom/right of the output.
    pub output_padding: [usize; 2],
}

impl ConvTransposeAttrs {
    /// Stride `s`, no padding (the usual 2×2 stride-2 upsampler is `new(2)`).
    pub fn new(stride: usize) -> Self {
        Self {
            stride: [stride, stride],
            pads: [0; 4],
            dilation: [1, 1],
            output_padding: [0, 0],
        }
    }
}

/// ConvTranspose op. Inputs: `x [N, C, H, W]`, `w [C, M, kh, kw]`, optional `b [M]`.
/// Output `[N, M, (H-1)·s - pt - pb + d·(k-1) + 1 + output_padding, ...]`.
#[derive(Debug)]
pub struct ConvTranspose2d {
    attrs: ConvTransposeAttrs,
}

struct Shape {
    n: usize,
    c: usize,
    m: usize,
    h: usize,
    w: usize,
    /// Geometry of the *output* image seen as a convolution input.
    g: Geom,
}

impl ConvTranspose2d {
    /// A transposed convolution with the given attributes.
    pub fn new(attrs: ConvTransposeAttrs) -> Self {
        Self { attrs }
    }

    fn shape(&self, inputs: &[&Tensor]) -> Result<Shape> {
        let op = "ConvTranspose";
        let a = &self.attrs;
        if inputs.len() < 2 || inputs.len() > 3 {
            return Err(attr_err(
                op,
                format!("needs 2 or 3 inputs, got {}", inputs.len()),
            ));
        }
        if a.stride.contains(&0) || a.dilation.contains(&0) {
            return Err(attr_err(op, "strides and dilations must be ≥ 1"));
        }
        if a.output_padding[0] >= a.stride[0] && a.output_padding[0] >= a.dilation[0]
            || a.output_padding[1] >= a.stride[1] && a.output_padding[1] >= a.dilation[1]
        {
            return Err(attr_err(
                op,
                "output_padding must be smaller than stride or dilation",
            ));
        }
        let [n, c, h, w] = inputs[0].dims4(op)?;
        let [wc, m, kh, kw] = inputs[1].dims4(op)?;
        if wc != c || kh == 0 || kw == 0 {
            return Err(shape_err(
                op,
                format!("weight [{c}, M, kh, kw]"),
                inputs[1].shape(),
            ));
        }
        if let Some(b) = inputs.get(2) {
            if b.shape() != [m] {
                return Err(shape_err(op, format!("bias [{m}]"), b.shape()));
            }
        }
        let full_h = (h - 1) * a.stride[0] + a.dilation[0] * (kh - 1) + 1 + a.output_padding[0];
        let full_w = (w - 1) * a.stride[1] + a.dilation[1] * (kw - 1) + 1 + a.output_padding[1];
        if h == 0 || w == 0 || full_h <= a.pads[0] + a.pads[2] || full_w <= a.pads[1] + a.pads[3] {
            return Err(shape_err(
                op,
                "an input whose output is not empty after padding",
                inputs[0].shape(),
            ));
        }
        let g = Geom {
            h: full_h - a.pads[0] - a.pads[2],
            w: full_w - a.pads[1] - a.pads[3],
            kh,
            kw,
            stride: a.stride,
            pads: a.pads,
            dilation: a.dilation,
        };
        debug_assert_eq!(g.out_hw(), Some((h, w)));
        Ok(Shape { n, c, m, h, w, g })
    }
}

impl Op for ConvTranspose2d {
    fn name(&self) -> &'static str {
        "ConvTranspose"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s = self.shape(inputs)?;
        let (x, wt) = (inputs[0].data(), inputs[1].data());
        let (hw, ohw) = (s.h * s.w, s.g.h * s.g.w);
        let kk = s.m * s.g.kh * s.g.kw;
        let mut y = vec![0.0f32; s.n * s.m * ohw];
        y.par_chunks_mut(s.m * ohw)
            .zip(x.par_chunks(s.c * hw))
            .for_each_init(
                || vec![0.0f32; kk * hw],
                |col, (yn, xn)| {
                    let a = MatRef::row_major(wt, s.c, kk).t();
                    sgemm(col, a, MatRef::row_major(xn, s.c, hw), false, Par::Seq);
                    col2im(col, s.m, &s.g, s.h, s.w, yn);
                    if let Some(b) = inputs.get(2) {
                        for (mi, plane) in yn.chunks_mut(ohw).enumerate() {
                            let bv = b.data()[mi];
                            for v in plane {
                                *v += bv;
                            }
                        }
                    }
                },
            );
        Tensor::new(&[s.n, s.m, s.g.h, s.g.w], y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let s = self.shape(inputs)?;
        let (x, wt, dy) = (inputs[0].data(), inputs[1].data(), grad.data());
        let (hw, ohw) = (s.h * s.w, s.g.h * s.g.w);
        let kk = s.m * s.g.kh * s.g.kw;
        let dx = if needs[0] {
            let mut dx = vec![0.0f32; x.len()];
            dx.par_chunks_mut(s.c * hw)
                .zip(dy.par_chunks(s.m * ohw))
                .for_each_init(
                    || vec![0.0f32; kk * hw],
                    |col, (dxn, dyn_)| {
                        im2col(dyn_, s.m, &s.g, s.h, s.w, col);
                        let a = MatRef::row_major(wt, s.c, kk);
                        sgemm(dxn, a, MatRef::row_major(col, kk, hw), false, Par::Seq);
                    },
                );
            Some(Tensor::new(inputs[0].shape(), dx)?)
        } else {
            None
        };
        let need_w = needs[1];
        let need_b = needs.get(2).copied().unwrap_or(false);
        let mut out = vec![dx];
        if need_w || need_b {
            let partials: Vec<(Vec<f32>, Vec<f32>)> = x
                .par_chunks(s.c * hw * GRAD_CHUNK)
                .zip(dy.par_chunks(s.m * ohw * GRAD_CHUNK))
                .map(|(xc, dyc)| {
                    let mut dw = vec![0.0f32; if need_w { s.c * kk } else { 0 }];
                    let mut db = vec![0.0f32; s.m];
                    let mut col = vec![0.0f32; if need_w { kk * hw } else { 0 }];
                    for (xn, dyn_) in xc.chunks(s.c * hw).zip(dyc.chunks(s.m * ohw)) {
                        for (mi, d) in db.iter_mut().enumerate() {
                            *d += super::conv::sum8(&dyn_[mi * ohw..(mi + 1) * ohw]);
                        }
                        if need_w {
                            im2col(dyn_, s.m, &s.g, s.h, s.w, &mut col);
                            let a = MatRef::row_major(xn, s.c, hw);
                            sgemm(
                                &mut dw,
                                a,
                                MatRef::row_major(&col, kk, hw).t(),
                                true,
                                Par::Seq,
                            );
                        }
                    }
                    (dw, db)
                })
                .collect();
            let mut dw = vec![0.0f32; if need_w { s.c * kk } else { 0 }];
            let mut db = vec![0.0f32; s.m];
            for (pw, pb) in &partials {
                for (a, b) in dw.iter_mut().zip(pw) {
                    *a += *b;
                }
                for (a, b) in db.iter_mut().zip(pb) {
                    *a += *b;
                }
            }
            out.push(if need_w {
                Some(Tensor::new(inputs[1].shape(), dw)?)
            } else {
                None
            });
            if inputs.len() == 3 {
                out.push(if need_b {
                    Some(Tensor::new(&[s.m], db)?)
                } else {
                    None
                });
            }
        } else {
            out.push(None);
            if inputs.len() == 3 {
                out.push(None);
            }
        }
        Ok(out)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Plain scalar reference: scatter every input pixel through the kernel (f64 accumulation).
pub fn conv_transpose2d_ref(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    a: &ConvTransposeAttrs,
) -> Result<Tensor> {
    let op = ConvTranspose2d::new(*a);
    let mut ins = vec![x, w];
    if let Some(b) = b {
        ins.push(b);
    }
    let s = op.shape(&ins)?;
    let (oh, ow) = (s.g.h, s.g.w);
    let mut y = vec![0.0f64; s.n * s.m * oh * ow];
    for n in 0..s.n {
        for m in 0..s.m {
            let bv = b.map_or(0.0, |b| b.data()[m] as f64);
            for v in &mut y[(n * s.m + m) * oh * ow..(n * s.m + m + 1) * oh * ow] {
                *v = bv;
            }
            for c in 0..s.c {
                for iy in 0..s.h {
                    for ix in 0..s.w {
                        for ky in 0..s.g.kh {
                            for kx in 0..s.g.kw {
                                let oy = (iy * a.stride[0] + ky * a.dilation[0]) as isize
                                    - a.pads[0] as isize;
                                let ox = (ix * a.stride[1] + kx * a.dilation[1]) as isize
                                    - a.pads[1] as isize;
                                if oy < 0 || ox < 0 || oy as usize >= oh || ox as usize >= ow {
                                    continue;
                                }
                                y[((n * s.m + m) * oh + oy as usize) * ow + ox as usize] += x.data()
                                    [((n * s.c + c) * s.h + iy) * s.w + ix]
                                    as f64
                                    * w.data()[((c * s.m + m) * s.g.kh + ky) * s.g.kw + kx] as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    Tensor::new(
        &[s.n, s.m, oh, ow],
        y.into_iter().map(|v| v as f32).collect(),
    )
}
