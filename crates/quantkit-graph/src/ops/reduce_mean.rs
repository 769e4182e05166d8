//! `ReduceMean` (axes attribute before opset 18, input from 18; `keepdims`,
//! `noop_with_empty_axes`). Sums in f64.
//!
//! Also the shared axis handling and accumulation of the other `Reduce*` operators
//! ([`reduce`], [`reduce_infer`]), which differ only in the opset where `axes` became an
//! input and in how they accumulate.

use super::{input, ints_of, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Data, Element, Tensor};

/// The `axes` of a `Reduce*` node: the attribute before `axes_input_since`, input 1 from
/// there on (`None` when absent).
fn axes_of(
    ctx: &OpCtx,
    axes_input: Option<&Tensor>,
    axes_input_since: i64,
) -> Result<Option<Vec<i64>>, OpError> {
    if ctx.opset >= axes_input_since {
        Ok(axes_input.map(ints_of))
    } else {
        ctx.node.attr_ints("axes")
    }
}

/// Which axes of a rank-`r` input are reduced, or `None` for the no-op case (empty axes
/// with `noop_with_empty_axes`). Empty or absent axes otherwise reduce every axis.
fn reduced_axes(ctx: &OpCtx, axes: Option<Vec<i64>>, r: usize) -> Result<Option<Vec<bool>>, OpError> {
    let axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&a| norm_axis(a, r))
            .collect::<Result<_, _>>()?,
        _ => {
            if ctx.node.attr_int("noop_with_empty_axes", 0)? != 0 {
                return Ok(None);
            }
            (0..r).collect()
        }
    };
    Ok(Some((0..r).map(|a| axes.contains(&a)).collect()))
}

/// Evaluates a `Reduce*` operator whose `axes` is an input from opset `axes_input_since`:
/// every reduced block is folded with `acc` from `init` (in f64, in element order), then
/// `finish(folded, count)` gives the output element (`count` = elements per block).
/// Outputs keep the input's type (float, int32/int64, uint32/uint64).
pub fn reduce(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    axes_input_since: i64,
    init: f64,
    acc: impl Fn(f64, f64) -> f64,
    finish: impl Fn(f64, usize) -> f64,
) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let keep = ctx.node.attr_int("keepdims", 1)? != 0;
    let axes = axes_of(ctx, opt_input(inputs, 1), axes_input_since)?;
    let Some(reduce) = reduced_axes(ctx, axes, r)? else {
        return Ok(vec![x.clone()]);
    };
    let out_full: Vec<usize> = (0..r)
        .map(|a| if reduce[a] { 1 } else { x.shape[a] })
        .collect();
    let ost = strides(&out_full);
    let n_out: usize = out_full.iter().product();
    let count: usize = (0..r).filter(|&a| reduce[a]).map(|a| x.shape[a]).product();
    let vals = x.to_f64_vec();
    let mut folded = vec![init; n_out];
    let mut counter = vec![0usize; r];
    for v in &vals {
        let o: usize = (0..r)
            .map(|a| if reduce[a] { 0 } else { counter[a] * ost[a] })
            .sum();
        folded[o] = acc(folded[o], *v);
        for a in (0..r).rev() {
            counter[a] += 1;
            if counter[a] < x.shape[a] {
                break;
            }
            counter[a] = 0;
        }
    }
    let out: Vec<f64> = folded.iter().map(|&s| finish(s, count)).collect();
    let shape = if keep {
        out_full
    } else {
        (0..r).filter(|&a| !reduce[a]).map(|a| x.shape[a]).collect()
    };
    let data = match &x.data {
        Data::F32(_) => Data::F32(out.iter().map(|&v| f32::from_f64(v)).collect()),
        Data::F64(_) => Data::F64(out),
        Data::F16(_) => Data::F16(out.iter().map(|&v| half::f16::from_f64(v)).collect()),
        Data::I32(_) => Data::I32(out.iter().map(|&v| v as i32).collect()),
        Data::I64(_) => Data::I64(out.iter().map(|&v| v as i64).collect()),
        Data::U32(_) => Data::U32(out.iter().map(|&v| v as u32).collect()),
        Data::U64(_) => Data::U64(out.iter().map(|&v| v as u64).collect()),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float or int32/int64/uint32/uint64".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    make(x.dtype, shape, data).map(|t| vec![t])
}

/// Static shape rule of a `Reduce*` operator whose `axes` is an input from opset
/// `axes_input_since` (known when the axes are an attribute or a constant input).
pub fn reduce_infer(
    ctx: &OpCtx,
    inp: &super::InferIn,
    axes_input_since: i64,
) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let axes_input = inp.konst(ctx, 1);
    let named = ctx.node.inputs.get(1).is_some_and(|n| !n.is_empty());
    if ctx.opset >= axes_input_since && axes_input.is_none() && named {
        return None; // axes computed at run time
    }
    let axes = axes_of(ctx, axes_input, axes_input_since).ok()?;
    let Some(reduce) = reduced_axes(ctx, axes, shape.len()).ok()? else {
        return Some(vec![(*dtype, shape.clone())]);
    };
    let keep = ctx.node.attr_int("keepdims", 1).ok()? != 0;
    let out = (0..shape.len())
        .filter_map(|a| match (reduce[a], keep) {
            (false, _) => Some(shape[a]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Some(vec![(*dtype, out)])
}

/// Evaluates `ReduceMean`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    reduce(ctx, inputs, 18, 0.0, |s, v| s + v, |s, n| s / n as f64)
}

/// Gradient: each input element gets `g / count` of the output element it was averaged
/// into (`count` = elements per reduced block); the no-op case passes `g` through.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if !gi.need(0) {
        return Ok(out);
    }
    let x = input(gi.inputs, 0)?;
    let r = x.rank();
    let axes = axes_of(ctx, opt_input(gi.inputs, 1), 18)?;
    let n = x.len();
    if gi.grad.len() != gi.output.len() {
        return Err(OpError::shape(
            format!("a gradient of {} elements", gi.output.len()),
            gi.grad.len(),
        ));
    }
    let Some(reduce) = reduced_axes(ctx, axes, r)? else {
        out[0] = Some(super::grad::tensor(&x.shape, gi.grad.to_vec())?);
        return Ok(out);
    };
    let out_full: Vec<usize> = (0..r)
        .map(|a| if reduce[a] { 1 } else { x.shape[a] })
        .collect();
    let ost = strides(&out_full);
    let count: usize = (0..r).filter(|&a| reduce[a]).map(|a| x.shape[a]).product();
    let inv = 1.0 / count.max(1) as f32;
    let mut d = Vec::with_capacity(n);
    let mut counter = vec![0usize; r];
    for _ in 0..n {
        let o: usize = (0..r)
            .map(|a| if reduce[a] { 0 } else { counter[a] * ost[a] })
            .sum();
        d.push(gi.grad[o] * inv);
        for a in (0..r).rev() {
            counter[a] += 1;
            if counter[a] < x.shape[a] {
                break;
            }
            counter[a] = 0;
        }
    }
    out[0] = Some(super::grad::tensor(&x.shape, d)?);
    Ok(out)
}

/// `ReduceMean` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceMean", 1, eval).backward(backward);
