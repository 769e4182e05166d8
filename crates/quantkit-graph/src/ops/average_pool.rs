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
    let out_len: usize = g.out_sp.iter().product();
    let mut y = vec![0f64; g.planes * out_len];
    g.for_each_window(|_, o, taps| {
        let mut s = 0.0;
        let mut cnt = 0usize;
        for &(t, in_padded) in taps {
            if let Some(i) = t {
                s += v[i];
            }
            if (include && in_padded) || (!include && t.is_some()) {
                cnt += 1;
            }
        }
        y[o] = if cnt == 0 { f64::NAN } else { s / cnt as f64 };
    });
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(&g.out_sp);
    Ok(vec![
        make(crate::DType::F64, shape, Data::F64(y))?.cast(x.dtype)
    ])
}
