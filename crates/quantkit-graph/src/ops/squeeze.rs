//! `Squeeze`: removes size-1 axes; `axes` is an attribute before opset 13, an input after.

use super::{input, ints_of, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Squeeze`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let axes = if ctx.opset >= 13 {
        opt_input(inputs, 1).map(ints_of)
    } else {
        ctx.node.attr_ints("axes")?
    };
    let shape: Vec<usize> = match axes {
        None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
        Some(axes) => {
            let mut drop = vec![false; x.rank()];
            for a in axes {
                let a = norm_axis(a, x.rank())?;
                if x.shape[a] != 1 {
                    return Err(OpError::shape(format!("size 1 at axis {a}"), &x.shape));
                }
                drop[a] = true;
            }
            x.shape
                .iter()
                .zip(&drop)
                .filter(|(_, &d)| !d)
                .map(|(&s, _)| s)
                .collect()
        }
    };
    Ok(vec![x
        .clone()
        .reshaped(shape)
        .map_err(|e| OpError::Invalid(e.to_string()))?])
}

/// Gradient: the output gradient under the input's shape.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::reshape_back(gi)
}

/// `Squeeze` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Squeeze", 1, eval)
        .backward(backward).facts(super::Facts {
    layout: true,
    monotone: true,
    ..super::Facts::MOVES
})
    .bf16_codes();
