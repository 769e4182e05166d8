//! `Selu` (opset 6): y = gamma · x for x > 0, gamma · alpha · (eˣ − 1) otherwise, with
//! the defaults alpha ≈ 1.6733 and gamma ≈ 1.0507 (the float32 values the spec states). Not
//! declared `monotone`: negative attributes make it decreasing.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Default `alpha` (the spec's float32 constant).
pub const ALPHA: f32 = 1.673_263_2;
/// Default `gamma` (the spec's float32 constant).
pub const GAMMA: f32 = 1.050_701;

/// Evaluates `Selu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", ALPHA)?;
    let gamma = ctx.node.attr_float("gamma", GAMMA)?;
    let (a64, g64) = (alpha as f64, gamma as f64);
    eval_unary(
        ctx,
        inputs,
        move |x| g64 * if x > 0.0 { x } else { a64 * x.exp_m1() },
        move |x| gamma * if x > 0.0 { x } else { alpha * x.exp_m1() },
    )
}

/// `Selu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Selu", 6, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
