//! `Gather`: picks slices along `axis` by (possibly negative) indices; output shape is
//! `data[..axis] ++ indices ++ data[axis+1..]`.

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Gather`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let ind = input(inputs, 1)?;
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, x.rank())?;
    let d = x.shape[axis] as i64;
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut ids = Vec::with_capacity(ind.len());
    for i in ind.to_i64_vec() {
        let j = if i < 0 { i + d } else { i };
        if j < 0 || j >= d {
            return Err(OpError::Invalid(format!(
                "index {i} out of range for axis size {d}"
            )));
        }
        ids.push(j as usize);
    }
    let mut idx = Vec::with_capacity(outer * ids.len() * inner);
    for o in 0..outer {
        for &j in &ids {
            let base = (o * d as usize + j) * inner;
            idx.extend(base..base + inner);
        }
    }
    let mut shape = x.shape[..axis].to_vec();
    shape.extend_from_slice(&ind.shape);
    shape.extend_from_slice(&x.shape[axis + 1..]);
    make(x.dtype, shape, x.data.gather(&idx)).map(|t| vec![t])
}

/// `Gather` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Gather", 1, eval).facts(super::Facts {
    moves_values: true,
    ..super::Facts::NONE
})
    .bf16_codes();
