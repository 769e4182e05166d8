//! Quantized 2-D transposed convolution (ONNX ConvTranspose / QLinearConvTranspose) on NHWC.
//!
//! `out[n, iy·s + ky·d − pad_top, ix·s + kx·d − pad_left, co] += (x[n,iy,ix,ci] − zx)·(w[ci,co,ky,kx] − zw[co])`.
//! Computed as one int8 GEMM `[N·H·W, C_in] × [C_in, kh·kw·C_out]` (weights packed once,
//! zero points per output channel handled by the GEMM's (K1)), then an exact i32 scatter-add
//! ("col2im") and the per-channel output stage — so per-output-channel weight scales work
//! as in conv. One group only for now.

use crate::conv::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::{self, Isa};
use crate::error::{KernelError, Result};
use crate::gemm::{gemm_i32_with, PackedWeights};
use crate::output::{OutputStage, QuantType};

/// Transposed-conv weights packed once.
pub struct DeconvWeights {
    params: ConvParams,
    output_padding: [usize; 2],
    c_in: usize,
    c_out: usize,
    packed: PackedWeights,
}

impl DeconvWeights {
    /// Packs ONNX-ordered i8 weights `[c_in, c_out, kh, kw]` with zero point(s) (1 or `c_out`).
    /// `params.groups` must be 1; `output_padding` as ONNX's attribute.
    pub fn new(
        weights: &[i8],
        c_in: usize,
        c_out: usize,
        params: ConvParams,
        output_padding: [usize; 2],
        zero_points: &[i32],
    ) -> Result<Self> {
        const OP: &str = "deconv2d";
        if params.groups != 1 {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "groups",
                reason: format!("groups = {} not supported yet (only 1)", params.groups),
            });
        }
        let [kh, kw] = params.kernel;
        if kh == 0 || kw == 0 || params.stride.contains(&0) || params.dilation.contains(&0) {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "params",
                reason: "zero kernel, stride or dilation".into(),
            });
        }
        let expected = c_in * c_out * kh * kw;
        if weights.len() != expected {
            return Err(KernelError::BufferLength {
                op: OP,
                arg: "weights",
                expected,
                got: weights.len(),
            });
        }
        if zero_points.len() != 1 && zero_points.len() != c_out {
            return Err(KernelError::ChannelCount {
                op: OP,
                arg: "weight zero_points",
                channels: c_out,
                got: zero_points.len(),
            });
        }
        let n = kh * kw * c_out;
        let zps: Vec<i32> = (0..n)
            .map(|j| {
                if zero_points.len() == 1 {
                    zero_points[0]
                } else {
                    zero_points[j % c_out]
                }
            })
            .collect();
        let geom = crate::dispatch::kernels().geometry();
        let packed = PackedWeights::from_fn(geom, c_in, n, &zps, |ci, j| {
            let (tap, co) = (j / c_out, j % c_out);
            weights[((ci * c_out + co) * kh + tap / kw) * kw + tap % kw]
        })?;
        Ok(DeconvWeights {
            params,
            output_padding,
            c_in,
            c_out,
            packed,
        })
    }

    /// Output `[n, oh, ow, c_out]` for an NHWC input shape:
    /// `o = (i − 1)·s − pad_begin − pad_end + d·(k − 1) + 1 + output_padding`.
    pub fn output_shape(&self, input: [usize; 4]) -> Result<[usize; 4]> {
        let p = &self.params;
        let mut o = [0usize; 2];
        for i in 0..2 {
            let full = (input[1 + i].max(1) - 1) * p.stride[i]
                + p.dilation[i] * (p.kernel[i] - 1)
                + 1
                + self.output_padding[i];
            let pads = p.pads[i] + p.pads[i + 2];
            if input[1 + i] == 0 || full <= pads {
                return Err(KernelError::InvalidArgument {
                    op: "deconv2d",
                    arg: "params",
                    reason: format!("padding {pads} leaves no output for input {:?}", input),
                });
            }
            o[i] = full - pads;
        }
        Ok([input[0], o[0], o[1], self.c_out])
    }
}

fn accumulate<T: ActElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
) -> Result<(Vec<i32>, [usize; 4])> {
    let [n, h, wd, c] = x.shape;
    if c != w.c_in || x.data.len() != n * h * wd * c {
        return Err(KernelError::BufferLength {
            op: "deconv2d",
            arg: "input",
            expected: n * h * wd * w.c_in,
            got: x.data.len(),
        });
    }
    let os = w.output_shape(x.shape)?;
    let [_, oh, ow, c_out] = os;
    let p = &w.params;
    let [kh, kw] = p.kernel;
    let m = n * h * wd;
    let cols_n = kh * kw * c_out;
    let mut cols = vec![0i32; m * cols_n];
    gemm_i32_with(
        isa,
        &T::activations(x.data, m, c, x.zero_point),
        &w.packed,
        &mut cols,
    )?;
    let mut acc = vec![0i32; n * oh * ow * c_out];
    for b in 0..n {
        for iy in 0..h {
            for ix in 0..wd {
                let row = &cols[((b * h + iy) * wd + ix) * cols_n..][..cols_n];
                for ky in 0..kh {
                    let oy = (iy * p.stride[0] + ky * p.dilation[0]) as isize - p.pads[0] as isize;
                    if oy < 0 || oy >= oh as isize {
                        continue;
                    }
                    for kx in 0..kw {
                        let ox =
                            (ix * p.stride[1] + kx * p.dilation[1]) as isize - p.pads[1] as isize;
                        if ox < 0 || ox >= ow as isize {
                            continue;
                        }
                        let dst = &mut acc[((b * oh + oy as usize) * ow + ox as usize) * c_out..]
                            [..c_out];
                        let src = &row[(ky * kw + kx) * c_out..][..c_out];
                        for (d, &s) in dst.iter_mut().zip(src) {
                            *d = d.wrapping_add(s);
                        }
                    }
                }
            }
        }
    }
    Ok((acc, os))
}

/// ConvTranspose with i32 output (no bias), NHWC; returns the output shape.
pub fn deconv2d_i32_with<T: ActElem>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    out: &mut [i32],
) -> Result<[usize; 4]> {
    let (acc, os) = accumulate(isa, x, w)?;
    if out.len() != acc.len() {
        return Err(KernelError::BufferLength {
            op: "deconv2d",
            arg: "output",
            expected: acc.len(),
            got: out.len(),
        });
    }
    out.copy_from_slice(&acc);
    Ok(os)
}

/// QLinearConvTranspose: the transposed conv followed by the per-channel output stage.
pub fn deconv2d_quant_with<T: ActElem, O: QuantType>(
    isa: Isa,
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    stage: &OutputStage,
    out: &mut [O],
) -> Result<[usize; 4]> {
    stage.validate("deconv2d", w.c_out)?;
    let (acc, os) = accumulate(isa, x, w)?;
    if out.len() != acc.len() {
        return Err(KernelError::BufferLength {
            op: "deconv2d",
            arg: "output",
            expected: acc.len(),
            got: out.len(),
        });
    }
    for (i, (o, &a)) in out.iter_mut().zip(&acc).enumerate() {
        *o = stage.apply(a, i % w.c_out);
    }
    Ok(os)
}

/// [`deconv2d_quant_with`] on the dispatched ISA.
pub fn deconv2d_quant<T: ActElem, O: QuantType>(
    x: &NhwcInput<'_, T>,
    w: &DeconvWeights,
    stage: &OutputStage,
    out: &mut [O],
) -> Result<[usize; 4]> {
    deconv2d_quant_with(dispatch::isa(), x, w, stage, out)
}
