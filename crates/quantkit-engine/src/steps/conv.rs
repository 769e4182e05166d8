//! The integer conv step, produced by `compile/conv.rs` (QDQ `Conv`, `QLinearConv`).

use super::{alloc_len, bad, check_dtype, first, kernel_err, nhwc_input, Kernel, Table};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data};
use quantkit_kernels::conv::{
    conv2d_output_shape, conv2d_quant, conv2d_quant_max_pool, ConvParams, ConvWeights, NhwcInput,
};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::prelu::PreluCodes;

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
    /// A per-channel PRelu on the u8 output codes that read only them, absorbed by the
    /// plan ([`Kernel::absorb`]): computed in the output's own buffer right after the conv.
    pub prelu: Option<PreluCodes>,
    /// A table step that read only this conv's codes (after the PRelu, if any), absorbed
    /// by the plan ([`Kernel::absorb`]): applied to the output in its own buffer right
    /// after the conv, while it is in cache (HardSwish, Sigmoid... after a conv). The
    /// step's output type is then the table's.
    pub table: Option<Table>,
    pub desc: String,
}

impl Kernel for ConvStep {
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
                let mut t = $mk(out_shape.to_vec(), out);
                if let (Some(p), Data::U8(d)) = (&self.prelu, &mut t.data) {
                    p.apply(d).map_err(kernel_err(step))?;
                }
                match &self.table {
                    Some(tb) => tb.apply_in_place(t),
                    None => t,
                }
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
        format!(
            "{}{}{}",
            self.desc,
            if self.prelu.is_some() { " + prelu" } else { "" },
            if self.table.is_some() { " + table" } else { "" }
        )
    }
    fn absorb(&mut self, next: &dyn Kernel) -> bool {
        // The codes this step writes now: the table's type, else the conv's (a PRelu keeps
        // u8).
        let out = self.table.as_ref().map_or(self.y_dtype, |t| t.out);
        if let Some(p) = next.as_channel_table() {
            let Some(arith) = p.arith.as_ref() else {
                return false;
            };
            let fits = self.pool.is_none()
                && self.table.is_none()
                && self.prelu.is_none()
                && self.y_dtype == DType::U8
                && p.x_dtype == DType::U8
                && p.out == DType::U8
                && p.rank == 4
                && arith.channels() == self.weights.c_out();
            if fits {
                self.prelu = Some(arith.clone());
            }
            return fits;
        }
        let Some(t2) = next
            .as_table_step()
            .and_then(|n| n.table.as_ref().map(|t| (n, t)))
        else {
            return false;
        };
        let (n, t2) = t2;
        if n.x_dtype != out {
            return false;
        }
        self.table = Some(match self.table.take() {
            Some(t1) => Table {
                bytes: t1.bytes.iter().map(|&b| t2.bytes[b as usize]).collect(),
                out: t2.out,
            },
            None => t2.clone(),
        });
        true
    }
}
