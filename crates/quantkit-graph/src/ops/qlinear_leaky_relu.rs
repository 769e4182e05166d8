//! `QLinearLeakyRelu` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's
//! quantizer writes it for `LeakyRelu` in QOperator form). Inputs `X, X_scale,
//! X_zero_point?, Y_scale, Y_zero_point?`, per-tensor parameters, u8 or i8 codes; attribute
//! `alpha` (default 0.01):
//!
//! `y = saturate(round_half_even(f(x_s·(x − x_zp)) / y_s) + y_zp)` with `f(v) = v` for
//! `v ≥ 0` and `alpha·v` otherwise, in f32, through a 256-entry table. ONNX Runtime builds
//! the same kind of table; where its arithmetic order differs it can differ from this by one
//! code.

use super::qlinear::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearLeakyRelu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 0.01)?;
    eval_unary(inputs, "QLinearLeakyRelu", move |v| {
        if v >= 0.0 {
            v
        } else {
            alpha * v
        }
    })
}

/// `QLinearLeakyRelu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearLeakyRelu", eval);
