//! `Transpose`: permutes axes (default: reverses them).

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// Evaluates `Transpose`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank();
    let perm: Vec<usize> = match ctx.node.attr_ints("perm")? {
        Some(p) => p.iter().map(|&a| a as usize).collect(),
        None => (0..r).rev().collect(),
    };
    let mut seen = vec![false; r];
    if perm.len() != r
        || perm
            .iter()
            .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
    {
        return Err(OpError::attr(
            "perm",
            format!("{perm:?} is not a permutation of rank {r}"),
        ));
    }
    Ok(vec![transpose(x, &perm)?])
}

/// Permutes the axes of `x`: output axis i is input axis `perm[i]`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor, OpError> {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let st = strides(&x.shape);
    let src_st: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let n = x.len();
    let mut idx = Vec::with_capacity(n);
    let r = shape.len();
    let mut counter = vec![0usize; r];
    let mut cur = 0usize;
    for _ in 0..n {
        idx.push(cur);
        for ax in (0..r).rev() {
            counter[ax] += 1;
            cur += src_st[ax];
            if counter[ax] < shape[ax] {
                break;
            }
            cur -= src_st[ax] * counter[ax];
            counter[ax] = 0;
        }
    }
    make(x.dtype, shape, x.data.gather(&idx))
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let perm: Vec<usize> = match ctx.node.attr_ints("perm").ok()? {
        Some(p) => p.iter().map(|&v| v as usize).collect(),
        None => (0..x.1.len()).rev().collect(),
    };
    Some(vec![(
        x.0,
        perm.iter()
            .map(|&p| x.1.get(p).copied())
            .collect::<Option<Vec<_>>>()?,
    )])
}

/// Gradient: the output gradient transposed by the inverse permutation.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let x = input(gi.inputs, 0)?;
        let r = x.rank();
        let perm: Vec<usize> = match ctx.node.attr_ints("perm")? {
            Some(p) => p.iter().map(|&a| a as usize).collect(),
            None => (0..r).rev().collect(),
        };
        let mut inv = vec![0; r];
        for (i, &p) in perm.iter().enumerate() {
            *inv.get_mut(p).ok_or_else(|| OpError::attr("perm", "out of range"))? = i;
        }
        let g = super::grad::tensor(&gi.output.shape, gi.grad.to_vec())?;
        out[0] = Some(transpose(&g, &inv)?);
    }
    Ok(out)
}

/// `Transpose` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Transpose", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            layout: true,
            monotone: true,
            ..super::Facts::MOVES
        })
    .bf16_codes();
