//! `BlackmanWindow` (opset 17): `w[n] = 0.42 − 0.5·cos(2π·n / N') + 0.08·cos(4π·n / N')`,
//! `N'` as in [`super::hann_window`].

use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `BlackmanWindow`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let pi = std::f64::consts::PI;
    super::hann_window::window(ctx, inputs, |n, d| {
        0.42 - 0.5 * (2.0 * pi * n / d).cos() + 0.08 * (4.0 * pi * n / d).cos()
    })
}

/// `BlackmanWindow` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("BlackmanWindow", 17, eval);
