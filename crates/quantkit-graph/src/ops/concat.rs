//! `Concat`: joins tensors along `axis` (negative allowed); all other dimensions must agree.

use super::{make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Concat`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let parts: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let first = parts.first().ok_or(OpError::MissingInput { index: 0 })?;
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, first.rank())?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for (i, p) in parts.iter().enumerate() {
        if p.dtype != first.dtype {
            return Err(OpError::DType {
                index: i,
                expected: first.dtype.to_string(),
                got: p.dtype.to_string(),
            });
        }
        let same = p.rank() == first.rank()
            && p.shape
                .iter()
                .zip(&first.shape)
                .enumerate()
                .all(|(a, (x, y))| a == axis || x == y);
        if !same {
            return Err(OpError::shape(
                format!("shapes matching {:?} except axis {axis}", first.shape),
                &p.shape,
            ));
        }
        shape[axis] += p.shape[axis];
    }
    let outer: usize = first.shape[..axis].iter().product();
    let datas: Vec<&Data> = parts.iter().map(|p| &p.data).collect();
    let flat = Data::concat(&datas).ok_or_else(|| OpError::Invalid("mixed storage".into()))?;
    // Build the gather order: for each outer index, each part's contiguous block.
    let mut offsets = Vec::with_capacity(parts.len());
    let mut off = 0;
    for p in &parts {
        offsets.push(off);
        off += p.len();
    }
    let mut idx = Vec::with_capacity(off);
    for o in 0..outer {
        for (p, &base) in parts.iter().zip(&offsets) {
            let block: usize = p.shape[axis..].iter().product();
            idx.extend(base + o * block..base + (o + 1) * block);
        }
    }
    make(first.dtype, shape, flat.gather(&idx)).map(|t| vec![t])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let all: Vec<&super::Info> = inp.ins.iter().copied().collect::<Option<Vec<_>>>()?;
    let f = all.first()?;
    let a = super::norm_axis(ctx.node.attr_int("axis", 0).ok()?, f.1.len()).ok()?;
    let mut s = f.1.clone();
    s[a] = all.iter().map(|i| i.1.get(a).copied().unwrap_or(0)).sum();
    Some(vec![(f.0, s)])
}

/// Gradient: the output gradient cut back into the inputs' blocks along `axis`.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let parts: Vec<&Tensor> = gi.inputs.iter().flatten().copied().collect();
    let first = parts.first().ok_or(OpError::MissingInput { index: 0 })?;
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, first.rank())?;
    let outer: usize = first.shape[..axis].iter().product();
    let mut grads: Vec<Vec<f32>> = parts.iter().map(|p| Vec::with_capacity(p.len())).collect();
    let mut off = 0;
    for _ in 0..outer {
        for (p, g) in parts.iter().zip(grads.iter_mut()) {
            let block: usize = p.shape[axis..].iter().product();
            g.extend_from_slice(&gi.grad[off..off + block]);
            off += block;
        }
    }
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    let mut k = 0;
    for (i, o) in out.iter_mut().enumerate() {
        if gi.inputs[i].is_some() {
            if gi.need(i) {
                *o = Some(super::grad::tensor(&parts[k].shape, std::mem::take(&mut grads[k]))?);
            }
            k += 1;
        }
    }
    Ok(out)
}

/// `Concat` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Concat", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            quant_inputs: super::QuantInputs::All,
            moves_values: true,
            qlinear: Some(super::OpKind::QLinearConcat),
            ..super::Facts::NONE
        })
    .bf16_codes();
