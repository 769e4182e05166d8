//! Shared helper for element-wise float operators (not an operator itself).

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};
use half::f16;
use rayon::prelude::*;

/// Elements per parallel chunk: below this, threading costs more than it saves.
const CHUNK: usize = 1 << 15;

/// Applies `f` to every element of a float tensor (f32 natively; f64 and f16 via f64/f32).
pub fn map_float(
    t: &Tensor,
    f: impl Fn(f64) -> f64 + Sync,
    g: impl Fn(f32) -> f32 + Sync,
) -> Result<Tensor, OpError> {
    let data = match &t.data {
        // One pass that writes the output (no copy of the input first).
        Data::F32(v) => Data::F32(if v.len() > CHUNK {
            v.par_iter().with_min_len(CHUNK).map(|&x| g(x)).collect()
        } else {
            v.iter().map(|&x| g(x)).collect()
        }),
        Data::F64(v) => Data::F64(v.iter().map(|&x| f(x)).collect()),
        Data::F16(v) => Data::F16(v.iter().map(|&x| f16::from_f32(g(x.to_f32()))).collect()),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float, double or float16".into(),
                got: t.dtype.to_string(),
            })
        }
    };
    make(t.dtype, t.shape.clone(), data)
}

/// Evaluates a one-input element-wise float operator.
pub fn eval_unary(
    _ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    f: impl Fn(f64) -> f64 + Sync,
    g: impl Fn(f32) -> f32 + Sync,
) -> Result<Vec<Tensor>, OpError> {
    Ok(vec![map_float(input(inputs, 0)?, f, g)?])
}
