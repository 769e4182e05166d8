//! `HammingWindow` (opset 17): `w[n] = α − β·cos(2π·n / N')` with `α = 25/46`, `β = 1 − α`
//! (the values ONNX's reference uses), `N'` as in [`super::hann_window`].

use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `HammingWindow`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = 25.0 / 46.0;
    super::hann_window::window(ctx, inputs, |n, d| {
        alpha - (1.0 - alpha) * (2.0 * std::f64::consts::PI * n / d).cos()
    })
}

/// `HammingWindow` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("HammingWindow", 17, eval);
