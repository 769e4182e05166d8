//! The integer transposed-conv step, produced by `compile/conv_transpose.rs` (QDQ
//! `ConvTranspose`).

use super::{alloc_len, bad, check_dtype, first, kernel_err, nhwc_input, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::ops::conv_transpose::ConvTransposeAttrs;
use quantkit_graph::{DType, Data};
use quantkit_kernels::conv::NhwcInput;
use quantkit_kernels::deconv::{deconv2d_quant_padded, DeconvWeights};
use quantkit_kernels::output::OutputStage;

/// Integer ConvTranspose: `DQ → ConvTranspose → [Relu|Clip] → Q` as one NHWC kernel call
/// (int8 GEMM + exact i32 col2im, then the conv steps' output stage: int32 bias, float or
/// fixed-point requantization, fused clamp).
pub(crate) struct ConvTransposeStep {
    pub weights: DeconvWeights,
    /// The node's attributes: the pads are resolved per run from the input's size
    /// (`auto_pad`, `output_shape`) by the executor's own rule.
    pub attrs: ConvTransposeAttrs,
    pub stage: OutputStage,
    pub x_dtype: DType,
    pub x_zp: i32,
    pub y_dtype: DType,
    pub desc: String,
}

impl ConvTransposeStep {
    /// `[top, left, bottom, right]` pads for an input of `[h, w]`.
    fn pads(&self, step: &Step, hw: [usize; 2]) -> Result<[usize; 4]> {
        let k = self.weights.params().kernel;
        let (pb, out) = self
            .attrs
            .resolve(&hw, &k)
            .map_err(|e| bad(step, "input 0", e.to_string()))?;
        let full = self
            .attrs
            .full(&hw, &k)
            .map_err(|e| bad(step, "input 0", e.to_string()))?;
        let mut pads = [pb[0], pb[1], 0, 0];
        for i in 0..2 {
            // The end pad: what is cropped after the output. An `output_shape` larger than
            // the full output would need a negative one (zero-filled rows the kernel does
            // not write).
            pads[2 + i] = full[i]
                .checked_sub(pb[i])
                .and_then(|v| v.checked_sub(out[i]))
                .filter(|_| out[i] > 0)
                .ok_or_else(|| {
                    bad(
                        step,
                        "input 0",
                        format!(
                            "output size {out:?} for input {hw:?} is outside the transposed conv's full output {full:?}"
                        ),
                    )
                })?;
        }
        Ok(pads)
    }
}

impl Kernel for ConvTransposeStep {
    fn per_image(&self, _consts: &[Option<&quantkit_graph::Tensor>]) -> bool {
        // NHWC images, one kernel call over whole images: no value crosses images.
        true
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let x = nhwc_input(step, x)?;
        let s = &x.shape;
        let shape = [s[0], s[1], s[2], s[3]];
        let pads = self.pads(step, [s[1], s[2]])?;
        let out_shape = self
            .weights
            .output_shape_padded(shape, pads)
            .map_err(kernel_err(step))?;
        let len = alloc_len(step, "output", &out_shape)?;
        // The column buffer the kernel allocates: one i32 per input pixel and tap·channel.
        let [kh, kw] = self.weights.params().kernel;
        alloc_len(
            step,
            "column buffer",
            &[s[0], s[1], s[2], kh, kw, self.weights.c_out()],
        )?;
        let zp = self.x_zp;
        macro_rules! go {
            ($data:expr, $O:ty, $mk:ident) => {{
                let input = NhwcInput {
                    data: $data,
                    shape,
                    zero_point: zp,
                };
                let mut out = vec![<$O>::default(); len];
                deconv2d_quant_padded(&input, &self.weights, pads, &self.stage, &mut out)
                    .map_err(kernel_err(step))?;
                $mk(out_shape.to_vec(), out)
            }};
        }
        let t = match (&x.data, self.y_dtype) {
            (Data::U8(d), DType::U8) => go!(d, u8, tensor_u8),
            (Data::U8(d), _) => go!(d, i8, tensor_i8),
            (Data::I8(d), DType::U8) => go!(d, u8, tensor_u8),
            (Data::I8(d), _) => go!(d, i8, tensor_i8),
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        Ok(vec![Val {
            tensor: t,
            nhwc: true,
        }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}
