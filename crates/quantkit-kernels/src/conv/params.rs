//! What a convolution is given: its geometry (ONNX attributes), the activation element
//! types, the NHWC input, and output pixel positions.

use crate::error::{KernelError, Result};
use crate::gemm::Activations;
use crate::output::QuantType;

/// Geometry of a 2-D convolution (ONNX attribute names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvParams {
    /// Kernel `[kh, kw]`.
    pub kernel: [usize; 2],
    /// Strides `[sh, sw]` (≥ 1).
    pub stride: [usize; 2],
    /// Dilations `[dh, dw]` (≥ 1).
    pub dilation: [usize; 2],
    /// Padding `[top, left, bottom, right]` (ONNX `pads` order is `[t, l, b, r]` for 2-D).
    pub pads: [usize; 4],
    /// Number of groups (divides C_in and C_out).
    pub groups: usize,
}

impl ConvParams {
    /// A `kh×kw` kernel with stride 1, dilation 1, no padding, one group.
    pub fn new(kh: usize, kw: usize) -> Self {
        ConvParams {
            kernel: [kh, kw],
            stride: [1, 1],
            dilation: [1, 1],
            pads: [0; 4],
            groups: 1,
        }
    }

    /// Whether this is the 2×2 stride-2 window without dilation or padding: each output
    /// reads its own 2×2 block of inputs (the pooling window with fast paths).
    pub fn is_pair_window(&self) -> bool {
        self.kernel == [2, 2]
            && self.stride == [2, 2]
            && self.dilation == [1, 1]
            && self.pads == [0; 4]
    }

    /// Output `[oh, ow]` for an input of `[h, w]`, or an error if the kernel does not fit.
    pub fn output_size(&self, h: usize, w: usize) -> Result<[usize; 2]> {
        let mut out = [0; 2];
        for (i, (&x, (p0, p1))) in [h, w]
            .iter()
            .zip([(self.pads[0], self.pads[2]), (self.pads[1], self.pads[3])])
            .enumerate()
        {
            // Checked: the geometry comes from a model file, and a wrapped span or padded
            // size gives a plausible wrong output size (issue 20).
            let span = self.kernel[i]
                .checked_sub(1)
                .and_then(|k| self.dilation[i].checked_mul(k))
                .and_then(|v| v.checked_add(1));
            let padded = x.checked_add(p0).and_then(|v| v.checked_add(p1));
            let (Some(span), Some(padded)) = (span, padded) else {
                return Err(KernelError::InvalidArgument {
                    op: "conv2d",
                    arg: "params",
                    reason: format!(
                        "kernel {:?} (dilation {:?}) over input {h}×{w} with pads {:?} overflows",
                        self.kernel, self.dilation, self.pads
                    ),
                });
            };
            if self.stride[i] == 0 || self.dilation[i] == 0 || self.kernel[i] == 0 || padded < span
            {
                return Err(KernelError::InvalidArgument {
                    op: "conv2d",
                    arg: "params",
                    reason: format!("kernel {:?} (dilation {:?}) does not fit input {h}×{w} with pads {:?}, or a zero stride/dilation", self.kernel, self.dilation, self.pads),
                });
            }
            out[i] = (padded - span) / self.stride[i] + 1;
        }
        Ok(out)
    }
}

/// An 8-bit activation element type (u8 or i8) for the conv entry points.
pub trait ActElem: QuantType {
    /// True for i8.
    const SIGNED: bool;
    /// Wraps a `[m, k]` matrix of this type as GEMM activations.
    fn activations(data: &[Self], m: usize, k: usize, zero_point: i32) -> Activations<'_>;
    /// The values' bytes (u8 as is, i8 as bit patterns).
    fn as_bytes(data: &[Self]) -> &[u8];
}
impl ActElem for u8 {
    const SIGNED: bool = false;
    fn activations(data: &[u8], m: usize, k: usize, zero_point: i32) -> Activations<'_> {
        Activations::u8(data, m, k, zero_point)
    }
    fn as_bytes(data: &[u8]) -> &[u8] {
        data
    }
}
impl ActElem for i8 {
    const SIGNED: bool = true;
    fn activations(data: &[i8], m: usize, k: usize, zero_point: i32) -> Activations<'_> {
        Activations::i8(data, m, k, zero_point)
    }
    fn as_bytes(data: &[i8]) -> &[u8] {
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, data.len()) }
    }
}

/// An NHWC input tensor with its zero point.
#[derive(Debug, Clone, Copy)]
pub struct NhwcInput<'a, T> {
    /// Elements in `[n, h, w, c]` order.
    pub data: &'a [T],
    /// `[n, h, w, c]`.
    pub shape: [usize; 4],
    /// Zero point (fills the padding).
    pub zero_point: i32,
}

/// The output pixel `(b, oy, ox)` of the flat index `(b·oh + oy)·ow + ox`, moved on without
/// divisions (the row gatherers walk panels pixel by pixel).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PixelPos {
    pub b: usize,
    pub oy: usize,
    pub ox: usize,
}

impl PixelPos {
    /// The position of flat pixel `pixel` in an `oh × ow` output.
    pub(crate) fn at(pixel: usize, oh: usize, ow: usize) -> Self {
        PixelPos {
            b: pixel / (oh * ow),
            oy: pixel / ow % oh,
            ox: pixel % ow,
        }
    }

    /// Moves `n` pixels on, `n ≤ ow − ox` (to the end of the current row at most).
    #[inline(always)]
    pub(crate) fn advance(&mut self, n: usize, oh: usize, ow: usize) {
        self.ox += n;
        if self.ox == ow {
            self.ox = 0;
            self.oy += 1;
            if self.oy == oh {
                self.oy = 0;
                self.b += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ConvParams;

    /// Issue 20: pads or dilations from a mutated model near `usize::MAX` wrapped into a
    /// plausible output size; now an error.
    #[test]
    fn output_size_overflow_is_an_error() {
        let mut p = ConvParams::new(3, 3);
        assert_eq!(p.output_size(4, 4).unwrap(), [2, 2]);
        p.pads = [usize::MAX - 1, 0, usize::MAX - 1, 0];
        let e = p.output_size(4, 4).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
        let mut d = ConvParams::new(3, 3);
        d.dilation = [usize::MAX / 2 + 1, 1];
        assert!(d.output_size(4, 4).is_err());
    }
}
