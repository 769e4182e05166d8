//! `Scan` (opset 8, and the opset 9+ form): iterates `body` over slices of the scan inputs,
//! threading state variables, and stacks the per-iteration scan outputs.
//!
//! - Opset 9+: inputs are N initial states then M = `num_scan_inputs` scan inputs, each
//!   sliced along `scan_input_axes[i]` (default 0), forward or backward
//!   (`scan_input_directions`); scan output k is stacked along `scan_output_axes[k]`
//!   (negative counts from the end of the output's rank), prepending when
//!   `scan_output_directions[k]` is 1.
//! - Opset 8: input 0 is the optional `sequence_lens`, then states and scan inputs that all
//!   have a leading batch axis; each batch element is scanned on axis 1 (`directions` per
//!   scan input), and outputs keep the batch axis. `sequence_lens` shorter than the
//!   sequence (padded batches) is not supported.
//!
//! The body reads enclosing values by name; the executor runs it through [`run`].

use super::max_elements;
use super::{norm_axis, OpCtx};
use crate::error::{GraphError, OpError};
use crate::exec::ControlCtx;
use crate::ir::Graph;
use crate::tensor::{Data, Tensor};

/// `Scan` needs the enclosing scope: the executor calls [`run`] instead.
pub fn eval(_ctx: &OpCtx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    Err(OpError::Unsupported(
        "Scan runs its body in the executor, which gives it the enclosing scope".into(),
    ))
}

/// `x` with axis `axis` moved to the front (a copy unless it already is).
pub(crate) fn axis_first(x: &Tensor, axis: usize) -> Result<Tensor, OpError> {
    if axis == 0 {
        return Ok(x.clone());
    }
    let mut perm: Vec<usize> = (0..x.rank()).collect();
    perm.remove(axis);
    perm.insert(0, axis);
    super::transpose::transpose(x, &perm)
}

/// Slice `t` of a tensor whose axis 0 is the scanned one (the axis removed).
pub(crate) fn slice0(x: &Tensor, t: usize) -> Result<Tensor, OpError> {
    let inner: usize = x.shape[1..].iter().product();
    let idx: Vec<usize> = (t * inner..(t + 1) * inner).collect();
    super::make(x.dtype, x.shape[1..].to_vec(), x.data.gather(&idx))
}

/// Stacks equally shaped tensors along a new axis 0 (`what` names them in errors).
pub(crate) fn stack(parts: &[Tensor], what: &str) -> Result<Tensor, OpError> {
    let first = parts
        .first()
        .ok_or_else(|| OpError::Invalid(format!("{what}: nothing to stack")))?;
    if let Some(p) = parts
        .iter()
        .find(|p| p.shape != first.shape || p.dtype != first.dtype)
    {
        return Err(OpError::Invalid(format!(
            "{what}: iterations produced {}{:?} and {}{:?}; scan outputs must keep one type and shape",
            first.dtype, first.shape, p.dtype, p.shape
        )));
    }
    let data = Data::concat(&parts.iter().map(|p| &p.data).collect::<Vec<_>>())
        .ok_or_else(|| OpError::Invalid(format!("{what}: mixed storage")))?;
    let mut shape = vec![parts.len()];
    shape.extend_from_slice(&first.shape);
    super::make(first.dtype, shape, data)
}

/// Moves axis 0 of `x` to `axis`.
pub(crate) fn axis_to(x: Tensor, axis: usize) -> Result<Tensor, OpError> {
    if axis == 0 {
        return Ok(x);
    }
    let mut perm: Vec<usize> = (1..x.rank()).collect();
    perm.insert(axis, 0);
    super::transpose::transpose(&x, &perm)
}

/// Adds `t`'s elements to a running count of accumulated scan-output elements, failing
/// past [`max_elements()`] (a loop must not grow memory without bound).
pub(crate) fn account(total: &mut usize, t: &Tensor, what: &str) -> Result<(), OpError> {
    *total = total
        .checked_add(t.len())
        .filter(|&n| n <= max_elements())
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "{what}: scan outputs exceed {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })?;
    Ok(())
}

/// The per-input integer list attribute `name` (length `n`, default 0s).
fn per_input(ctx: &ControlCtx, name: &str, n: usize) -> Result<Vec<i64>, GraphError> {
    let v = ctx
        .node
        .attr_ints(name)
        .map_err(|e| ctx.err(e))?
        .unwrap_or_else(|| vec![0; n]);
    if v.len() != n {
        return Err(ctx.err(OpError::attr(
            name,
            format!("{} values for {n} inputs/outputs", v.len()),
        )));
    }
    Ok(v)
}

fn direction(ctx: &ControlCtx, name: &str, d: i64) -> Result<bool, GraphError> {
    match d {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(ctx.err(OpError::attr(name, format!("direction {d}: 0 or 1")))),
    }
}

/// One scan: `states` and `scans` (scanned axis first, `reverse[i]` per scan input) through
/// `body`; returns the final states and the scan outputs stacked along axis 0, in the order
/// of `out_reverse` (a reversed output is prepended).
fn scan_once(
    ctx: &mut ControlCtx,
    body: &Graph,
    states: Vec<Tensor>,
    scans: &[Tensor],
    reverse: &[bool],
    out_reverse: &[bool],
) -> Result<(Vec<Tensor>, Vec<Tensor>), GraphError> {
    let n = states.len();
    let k = out_reverse.len();
    let len = scans.first().map_or(0, |s| s.shape[0]);
    if let Some(s) = scans.iter().find(|s| s.shape[0] != len) {
        return Err(ctx.err(OpError::shape(
            format!("scan inputs of one sequence length {len}"),
            &s.shape,
        )));
    }
    let mut states = states;
    let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(len); k];
    let mut total = 0usize;
    for t in 0..len {
        let mut args = states;
        for (s, &rev) in scans.iter().zip(reverse) {
            let i = if rev { len - 1 - t } else { t };
            args.push(slice0(s, i).map_err(|e| ctx.err(e))?);
        }
        let mut res = ctx.run(body, args)?;
        if res.len() != n + k {
            return Err(ctx.err(OpError::Invalid(format!(
                "the body returns {} values, {n} states + {k} scan outputs expected",
                res.len()
            ))));
        }
        let scanned = res.split_off(n);
        states = res;
        for (o, v) in outs.iter_mut().zip(scanned) {
            account(&mut total, &v, "Scan").map_err(|e| ctx.err(e))?;
            o.push(v);
        }
    }
    let mut stacked = Vec::with_capacity(k);
    for (mut o, &rev) in outs.into_iter().zip(out_reverse) {
        if rev {
            o.reverse();
        }
        if o.is_empty() {
            return Err(ctx.err(OpError::Unsupported(
                "Scan over a sequence of length 0 (the scan outputs' shapes are unknown)".into(),
            )));
        }
        stacked.push(stack(&o, "Scan").map_err(|e| ctx.err(e))?);
    }
    Ok((states, stacked))
}

/// Runs the scan.
pub fn run(ctx: &mut ControlCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, GraphError> {
    let node = ctx.node;
    let body = node.attr_graph("body").map_err(|e| ctx.err(e))?;
    let m = node.attr_int("num_scan_inputs", -1).map_err(|e| ctx.err(e))?;
    if m < 1 {
        return Err(ctx.err(OpError::attr(
            "num_scan_inputs",
            format!("{m}: at least 1 required"),
        )));
    }
    let m = m as usize;
    let v8 = ctx.opset < 9;
    let first = usize::from(v8);
    if inputs.len() < first + m {
        return Err(ctx.err(OpError::Invalid(format!(
            "{} inputs for {m} scan inputs",
            inputs.len()
        ))));
    }
    let n = inputs.len() - first - m;
    if body.outputs.len() < n {
        return Err(ctx.err(OpError::Invalid(format!(
            "the body has {} outputs for {n} states",
            body.outputs.len()
        ))));
    }
    let k = body.outputs.len() - n;
    if node.outputs.len() != n + k {
        return Err(ctx.err(OpError::Invalid(format!(
            "{} outputs, {n} states + {k} scan outputs expected",
            node.outputs.len()
        ))));
    }
    let mut all = Vec::with_capacity(n + m);
    for i in first..inputs.len() {
        all.push(super::input(inputs, i).map_err(|e| ctx.err(e))?.clone());
    }
    let scans_in = all.split_off(n);
    let states = all;
    if v8 {
        return run_v8(ctx, body, inputs.first().copied().flatten(), states, scans_in, k);
    }
    let in_axes = per_input(ctx, "scan_input_axes", m)?;
    let in_dirs = per_input(ctx, "scan_input_directions", m)?;
    let out_axes = per_input(ctx, "scan_output_axes", k)?;
    let out_dirs = per_input(ctx, "scan_output_directions", k)?;
    let mut scans = Vec::with_capacity(m);
    let mut reverse = Vec::with_capacity(m);
    for (i, s) in scans_in.iter().enumerate() {
        if s.rank() == 0 {
            return Err(ctx.err(OpError::shape("scan inputs of rank ≥ 1", &s.shape)));
        }
        let ax = norm_axis(in_axes[i], s.rank()).map_err(|e| ctx.err(e))?;
        scans.push(axis_first(s, ax).map_err(|e| ctx.err(e))?);
        reverse.push(direction(ctx, "scan_input_directions", in_dirs[i])?);
    }
    let out_rev = out_dirs
        .iter()
        .map(|&d| direction(ctx, "scan_output_directions", d))
        .collect::<Result<Vec<_>, _>>()?;
    let (mut outs, stacked) = scan_once(ctx, body, states, &scans, &reverse, &out_rev)?;
    for (s, &ax) in stacked.into_iter().zip(&out_axes) {
        let ax = norm_axis(ax, s.rank()).map_err(|e| ctx.err(e))?;
        outs.push(axis_to(s, ax).map_err(|e| ctx.err(e))?);
    }
    Ok(outs)
}

/// Opset 8: every state and scan input has a batch axis 0; each batch element is scanned
/// on its axis 1.
fn run_v8(
    ctx: &mut ControlCtx,
    body: &Graph,
    seq_lens: Option<&Tensor>,
    states: Vec<Tensor>,
    scans_in: Vec<Tensor>,
    k: usize,
) -> Result<Vec<Tensor>, GraphError> {
    let m = scans_in.len();
    let dirs = per_input(ctx, "directions", m)?;
    let reverse = dirs
        .iter()
        .map(|&d| direction(ctx, "directions", d))
        .collect::<Result<Vec<_>, _>>()?;
    let batch = scans_in[0].shape.first().copied().unwrap_or(0);
    for t in states.iter().chain(&scans_in) {
        if t.rank() == 0 || t.shape[0] != batch {
            return Err(ctx.err(OpError::shape(
                format!("a leading batch axis of {batch} (opset-8 Scan)"),
                &t.shape,
            )));
        }
    }
    if let Some(s) = scans_in.iter().find(|s| s.rank() < 2) {
        return Err(ctx.err(OpError::shape("scan inputs [batch, sequence, ...]", &s.shape)));
    }
    let len = scans_in[0].shape[1];
    if let Some(l) = seq_lens {
        if l.to_i64_vec().iter().any(|&v| v != len as i64) {
            return Err(ctx.err(OpError::Unsupported(format!(
                "sequence_lens {:?} other than the full length {len}",
                l.to_i64_vec()
            ))));
        }
    }
    if batch == 0 {
        return Err(ctx.err(OpError::Unsupported("Scan over a batch of 0".into())));
    }
    let mut state_out: Vec<Vec<Tensor>> = vec![Vec::new(); states.len()];
    let mut scan_out: Vec<Vec<Tensor>> = vec![Vec::new(); k];
    for b in 0..batch {
        let st = states
            .iter()
            .map(|s| slice0(s, b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ctx.err(e))?;
        let sc = scans_in
            .iter()
            .map(|s| slice0(s, b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ctx.err(e))?;
        let (st, so) = scan_once(ctx, body, st, &sc, &reverse, &vec![false; k])?;
        for (acc, v) in state_out.iter_mut().zip(st) {
            acc.push(v);
        }
        for (acc, v) in scan_out.iter_mut().zip(so) {
            acc.push(v);
        }
    }
    state_out
        .iter()
        .chain(&scan_out)
        .map(|parts| stack(parts, "Scan").map_err(|e| ctx.err(e)))
        .collect()
}

/// The final states keep the initial states' types and shapes (opset 9+).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    if ctx.opset < 9 {
        return None;
    }
    let m = usize::try_from(ctx.node.attr_int("num_scan_inputs", -1).ok()?).ok()?;
    let n = ctx.node.inputs.len().checked_sub(m)?;
    let body = ctx.node.attr_graph("body").ok()?;
    if n == 0 || ctx.node.outputs.len() != body.outputs.len() || body.outputs.len() < n {
        return None;
    }
    // The states only (shape inference zips outputs with the infos it gets); the scan
    // outputs' shapes would need the body's own inference.
    (0..n).map(|i| inp.get(i).cloned()).collect()
}

/// `Scan` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Scan", 8, eval)
    .infer(infer)
    .control(run);
