//! The integer conv step, produced by `compile/conv.rs` (QDQ `Conv`, `QLinearConv`).

use super::{alloc_len, bad, check_dtype, first, kernel_err, nhwc_input, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data};
use quantkit_kernels::conv::{
    conv2d_output_shape, conv2d_quant, conv2d_quant_max_pool, ConvParams, ConvWeights, NhwcInput,
};
use quantkit_kernels::output::OutputStage;

/// Integer conv: `DQ → Conv → [Relu|Clip] → Q` as one NHWC kernel call.
pub(crate) struct ConvStep {
    pub weights: ConvWeights,
    pub stage: OutputStage,
    /// A following MaxPool on the codes (`→ Q → DQ → MaxPool → Q` with one set of
    /// parameters), run by the conv call itself.
    pub pool: Option<ConvParams>,
    pub x_dtype: DType,
    pub x_zp: i32,
    pub y_dtype: DType,
    pub desc: String,
}

impl Kernel for ConvStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let x = nhwc_input(step, x)?;
        let s = &x.shape;
        let shape = [s[0], s[1], s[2], s[3]];
        let mut out_shape = conv2d_output_shape(shape, &self.weights).map_err(kernel_err(step))?;
        if let Some(p) = &self.pool {
            let [ph, pw] = p
                .output_size(out_shape[1], out_shape[2])
                .map_err(kernel_err(step))?;
            out_shape = [out_shape[0], ph, pw, out_shape[3]];
        }
        let len = alloc_len(step, "output", &out_shape)?;
        let zp = self.x_zp;
        macro_rules! go {
            ($data:expr, $O:ty, $mk:ident) => {{
                let input = NhwcInput {
                    data: $data,
                    shape,
                    zero_point: zp,
                };
                let mut out = vec![<$O>::default(); len];
                match &self.pool {
                    Some(p) => {
                        conv2d_quant_max_pool(&input, &self.weights, &self.stage, p, &mut out)
                            .map(|_| ())
                    }
                    None => conv2d_quant(&input, &self.weights, &self.stage, &mut out),
                }
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
