//! `Loop` (opsets 1–24): runs `body` while the trip count `M` (optional int64 scalar) is
//! not reached and the condition (optional bool) holds, threading N loop-carried values;
//! the body's K further outputs are scan outputs, stacked along a new axis 0 over the
//! iterations.
//!
//! The body's inputs are `(iteration_num, condition, carried...)` and its outputs
//! `(condition, carried..., scan outputs...)`. Without a condition input the body's
//! condition output is ignored (the spec's `for` form); with neither `M` nor a condition
//! the loop would never end, which is an error here. Carried values may change shape
//! between iterations (opset 11+); scan outputs must keep one shape. After zero iterations
//! a scan output is an empty tensor of the body output's declared type (float when
//! undeclared) and shape `[0, dims...]` when its dims are declared, else `[0]`. Scan
//! outputs are capped at [`super::max_elements()`] elements in all.
//! Sequence-typed carried values (opset 13+) are not values the IR holds.

use super::scan::{account, stack};
use super::OpCtx;
use crate::error::{GraphError, OpError};
use crate::exec::ControlCtx;
use crate::tensor::{DType, Tensor};

/// `Loop` needs the enclosing scope: the executor calls [`run`] instead.
pub fn eval(_ctx: &OpCtx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    Err(OpError::Unsupported(
        "Loop runs its body in the executor, which gives it the enclosing scope".into(),
    ))
}

/// Runs the loop.
pub fn run(ctx: &mut ControlCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, GraphError> {
    let node = ctx.node;
    let body = node.attr_graph("body").map_err(|e| ctx.err(e))?;
    let trip = match super::opt_input(inputs, 0) {
        Some(t) => {
            if !matches!(t.dtype, DType::I64) || t.len() != 1 {
                return Err(ctx.err(OpError::Invalid(format!(
                    "the trip count M must be one int64, got {}{:?}",
                    t.dtype, t.shape
                ))));
            }
            Some(t.to_i64_vec()[0])
        }
        None => None,
    };
    let mut cond = match super::opt_input(inputs, 1) {
        Some(c) => Some(super::r#if::condition(c, "the condition").map_err(|e| ctx.err(e))?),
        None => None,
    };
    if trip.is_none() && cond.is_none() {
        return Err(ctx.err(OpError::Unsupported(
            "a Loop with neither a trip count nor a condition never ends".into(),
        )));
    }
    let mut carried: Vec<Tensor> = Vec::new();
    for i in 2..inputs.len().max(2) {
        carried.push(super::input(inputs, i).map_err(|e| ctx.err(e))?.clone());
    }
    let n = carried.len();
    if body.inputs.len() != n + 2 {
        return Err(ctx.err(OpError::Invalid(format!(
            "the body has {} inputs, 2 + {n} loop-carried expected",
            body.inputs.len()
        ))));
    }
    let k = body
        .outputs
        .len()
        .checked_sub(1 + n)
        .ok_or_else(|| {
            ctx.err(OpError::Invalid(format!(
                "the body has {} outputs, at least 1 + {n} expected",
                body.outputs.len()
            )))
        })?;
    if node.outputs.len() > n + k {
        return Err(ctx.err(OpError::Invalid(format!(
            "{} outputs, at most {n} carried + {k} scan outputs",
            node.outputs.len()
        ))));
    }
    let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); k];
    let mut total = 0usize;
    let mut i: i64 = 0;
    while trip.is_none_or(|m| i < m) && cond.unwrap_or(true) {
        let mut args = Vec::with_capacity(n + 2);
        args.push(Tensor::from_i64(&[], vec![i]));
        args.push(Tensor::new(vec![], crate::tensor::Data::Bool(vec![true])).expect("scalar"));
        args.extend(carried);
        let mut res = ctx.run(body, args)?;
        if res.len() != 1 + n + k {
            return Err(ctx.err(OpError::Invalid(format!(
                "the body returned {} values, 1 + {n} + {k} expected",
                res.len()
            ))));
        }
        let scanned = res.split_off(1 + n);
        let c = res.remove(0);
        if cond.is_some() {
            cond = Some(super::r#if::condition(&c, "the body's condition output").map_err(|e| ctx.err(e))?);
        }
        carried = res;
        for (acc, v) in scans.iter_mut().zip(scanned) {
            account(&mut total, &v, "Loop").map_err(|e| ctx.err(e))?;
            acc.push(v);
        }
        i += 1;
    }
    let mut outs = carried;
    for (j, parts) in scans.iter().enumerate() {
        let t = if parts.is_empty() {
            let o = &body.outputs[1 + n + j];
            let mut shape = vec![0];
            shape.extend(o.static_shape().unwrap_or_default());
            Tensor::zeros(o.dtype.unwrap_or(DType::F32), &shape)
        } else {
            stack(parts, "Loop").map_err(|e| ctx.err(e))?
        };
        outs.push(t);
    }
    outs.truncate(node.outputs.len());
    Ok(outs)
}

/// Output infos, as far as they are determinable (shape inference zips the node's outputs
/// with the prefix returned): a carried value whose initial info the body's output
/// declares unchanged keeps it; a scan output of a body output with a static shape is
/// `[M, shape...]` when the trip count `M` is a constant and there is no condition input
/// (the loop then runs exactly `M` times).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let body = ctx.node.attr_graph("body").ok()?;
    let n = ctx.node.inputs.len().checked_sub(2)?;
    let k = body.outputs.len().checked_sub(1 + n)?;
    let declared = |o: &crate::ir::ValueInfo| Some((o.dtype?, o.static_shape()?));
    let mut out = Vec::new();
    for j in 0..n {
        let init = inp.get(2 + j)?;
        if declared(&body.outputs[1 + j]).as_ref() != Some(init) {
            return (!out.is_empty()).then_some(out);
        }
        out.push(init.clone());
    }
    let no_cond = ctx.node.inputs.get(1).is_none_or(|c| c.is_empty());
    let trips = inp
        .konst(ctx, 0)
        .filter(|t| t.dtype == DType::I64 && t.len() == 1)
        .map(|t| t.to_i64_vec()[0]);
    if let (true, Some(m)) = (no_cond, trips) {
        let m = usize::try_from(m.max(0)).ok()?;
        for j in 0..k {
            let Some((dt, shape)) = declared(&body.outputs[1 + n + j]) else {
                break;
            };
            let mut s = vec![m];
            s.extend(shape);
            out.push((dt, s));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `Loop` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Loop", 1, eval)
    .infer(infer)
    .control(run);
