//! `AveragePool` (N-D, pads / auto_pad, strides, dilations (opset 19), ceil_mode,
//! count_include_pad). With count_include_pad the divisor counts taps inside the padded
//! input; otherwise only taps inside the input itself.

use super::pool::PoolGeom;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `AveragePool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let g = PoolGeom::new(ctx, &x.shape)?;
    let include = ctx.node.attr_int("count_include_pad", 0)? != 0;
    let v = x.to_f64_vec();
    let y = g.map_windows(&v, |xp, taps| {
        let mut s = 0.0;
        let mut cnt = 0usize;
        for &(t, in_padded) in taps {
            if let Some(i) = t {
                s += xp[i];
            }
            if (include && in_padded) || (!include && t.is_some()) {
                cnt += 1;
            }
        }
        if cnt == 0 {
            f64::NAN
        } else {
            s / cnt as f64
        }
    });
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&g.out_sp);
    Ok(vec![
        make(crate::DType::F64, shape, Data::F64(y))?.cast(x.dtype)
    ])
}
