//! `Slice` (opsets 1 with attributes, 10+ with inputs starts/ends/axes/steps; negative steps
//! and out-of-range bounds are clamped as the spec says).

use super::{input, ints_of, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// Evaluates `Slice`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (count, idx) = gather_index(ctx, inputs)?;
    make(x.dtype, count, x.data.gather(&idx)).map(|t| vec![t])
}

/// Gradient of the data input: each output element's `g` added to the input element it
/// was read from (the rest 0); starts, ends, axes and steps get none.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let x = input(gi.inputs, 0)?;
        let (_, idx) = gather_index(ctx, gi.inputs)?;
        if idx.len() != gi.grad.len() {
            return Err(OpError::shape(
                format!("a gradient of {} elements", idx.len()),
                gi.grad.len(),
            ));
        }
        let mut d = vec![0f32; x.len()];
        for (&i, g) in idx.iter().zip(gi.grad) {
            d[i] += g;
        }
        out[0] = Some(super::grad::tensor(&x.shape, d)?);
    }
    Ok(out)
}

/// The output shape of a `Slice` and, per output element, the flat index of the input
/// element it copies.
fn gather_index(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
) -> Result<(Vec<usize>, Vec<usize>), OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let (starts, ends, axes, steps) = if ctx.opset < 10 {
        let s = ctx
            .node
            .attr_ints("starts")?
            .ok_or_else(|| OpError::attr("starts", "required"))?;
        let e = ctx
            .node
            .attr_ints("ends")?
            .ok_or_else(|| OpError::attr("ends", "required"))?;
        let a = ctx.node.attr_ints("axes")?;
        (s, e, a, None)
    } else {
        (
            ints_of(input(inputs, 1)?),
            ints_of(input(inputs, 2)?),
            opt_input(inputs, 3).map(ints_of),
            opt_input(inputs, 4).map(ints_of),
        )
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(OpError::Invalid(
            "starts, ends, axes and steps differ in length".into(),
        ));
    }
    // Per axis: first index, step, count.
    let mut first = vec![0i64; r];
    let mut step = vec![1i64; r];
    let mut count: Vec<usize> = x.shape.clone();
    for i in 0..starts.len() {
        let a = norm_axis(axes[i], r)?;
        let d = x.shape[a] as i64;
        let s = steps[i];
        if s == 0 {
            return Err(OpError::Invalid("slice step 0".into()));
        }
        let fix = |v: i64| if v < 0 { v + d } else { v };
        let (mut b, mut e) = (fix(starts[i]), fix(ends[i]));
        let n = if s > 0 {
            b = b.clamp(0, d);
            e = e.clamp(0, d);
            if e > b {
                (e - b + s - 1) / s
            } else {
                0
            }
        } else {
            b = b.clamp(-1, d - 1);
            e = e.clamp(-1, d - 1);
            if b > e {
                (b - e - s - 1) / (-s)
            } else {
                0
            }
        };
        first[a] = b;
        step[a] = s;
        count[a] = n as usize;
    }
    let st = strides(&x.shape);
    let n: usize = count.iter().product();
    let mut idx = Vec::with_capacity(n);
    let mut counter = vec![0usize; r];
    for _ in 0..n {
        let off: i64 = (0..r)
            .map(|a| (first[a] + step[a] * counter[a] as i64) * st[a] as i64)
            .sum();
        idx.push(off as usize);
        for ax in (0..r).rev() {
            counter[ax] += 1;
            if counter[ax] < count[ax] {
                break;
            }
            counter[ax] = 0;
        }
    }
    Ok((count, idx))
}

/// `Slice` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Slice", 1, eval)
    .backward(backward)
    .facts(super::Facts {
    moves_values: true,
    monotone: true,
    ..super::Facts::NONE
})
    .bf16_codes();
