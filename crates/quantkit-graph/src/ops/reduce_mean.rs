//! `ReduceMean` (axes attribute before opset 18, input from 18; `keepdims`,
//! `noop_with_empty_axes`). Sums in f64.

use super::{input, ints_of, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Data, Element, Tensor};

/// Evaluates `ReduceMean`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let keep = ctx.node.attr_int("keepdims", 1)? != 0;
    let axes = if ctx.opset >= 18 {
        opt_input(inputs, 1).map(ints_of)
    } else {
        ctx.node.attr_ints("axes")?
    };
    let axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<Result<_, _>>()?,
        _ => {
            if ctx.node.attr_int("noop_with_empty_axes", 0)? != 0 {
                return Ok(vec![x.clone()]);
            }
            (0..r).collect()
        }
    };
    let reduce: Vec<bool> = (0..r).map(|a| axes.contains(&a)).collect();
    let out_full: Vec<usize> = (0..r)
        .map(|a| if reduce[a] { 1 } else { x.shape[a] })
        .collect();
    let ost = strides(&out_full);
    let n_out: usize = out_full.iter().product();
    let count: usize = (0..r).filter(|&a| reduce[a]).map(|a| x.shape[a]).product();
    let vals = x.to_f64_vec();
    let mut sum = vec![0f64; n_out];
    let mut counter = vec![0usize; r];
    for v in &vals {
        let o: usize = (0..r)
            .map(|a| if reduce[a] { 0 } else { counter[a] * ost[a] })
            .sum();
        sum[o] += v;
        for a in (0..r).rev() {
            counter[a] += 1;
            if counter[a] < x.shape[a] {
                break;
            }
            counter[a] = 0;
        }
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / count as f64).collect();
    let shape = if keep {
        out_full
    } else {
        (0..r).filter(|&a| !reduce[a]).map(|a| x.shape[a]).collect()
    };
    let data = match &x.data {
        Data::F32(_) => Data::F32(mean.iter().map(|&v| f32::from_f64(v)).collect()),
        Data::F64(_) => Data::F64(mean),
        Data::F16(_) => Data::F16(mean.iter().map(|&v| half::f16::from_f64(v)).collect()),
        Data::I32(_) => Data::I32(mean.iter().map(|&v| v as i32).collect()),
        Data::I64(_) => Data::I64(mean.iter().map(|&v| v as i64).collect()),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float or int32/int64".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    make(x.dtype, shape, data).map(|t| vec![t])
}

/// `ReduceMean` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceMean", 1, eval);
