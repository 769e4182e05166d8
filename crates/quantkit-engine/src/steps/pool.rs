//! The max pool step on 8-bit codes, produced by `compile/pool.rs`.

use super::codes::Table;
use super::{alloc_len, bad, check_dtype, first, kernel_err, nhwc_input, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data};
use quantkit_kernels::conv::ConvParams;
use quantkit_kernels::pool::max_pool;

/// Max pool on codes (max commutes with the monotone DQ → Q map), then the table when the
/// output's parameters differ from the input's.
pub(crate) struct MaxPoolStep {
    pub params: ConvParams,
    pub x_dtype: DType,
    pub table: Option<Table>,
}

impl Kernel for MaxPoolStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let x = nhwc_input(step, x)?;
        let s = &x.shape;
        let shape = [s[0], s[1], s[2], s[3]];
        let [oh, ow] = self
            .params
            .output_size(s[1], s[2])
            .map_err(kernel_err(step))?;
        let out_shape = vec![s[0], oh, ow, s[3]];
        let len = alloc_len(step, "output", &out_shape)?;
        let t = match &x.data {
            Data::U8(d) => {
                let mut out = vec![0u8; len];
                max_pool(d, shape, &self.params, &mut out).map_err(kernel_err(step))?;
                tensor_u8(out_shape, out)
            }
            Data::I8(d) => {
                let mut out = vec![0i8; len];
                max_pool(d, shape, &self.params, &mut out).map_err(kernel_err(step))?;
                tensor_i8(out_shape, out)
            }
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        let v = Val {
            tensor: t,
            nhwc: true,
        };
        Ok(vec![match &self.table {
            Some(tb) => tb.apply(v),
            None => v,
        }])
    }
    fn describe(&self) -> String {
        format!(
            "max_pool {} {}x{}{}",
            self.x_dtype,
            self.params.kernel[0],
            self.params.kernel[1],
            if self.table.is_some() {
                " + requant table"
            } else {
                ""
            }
        )
    }
}
