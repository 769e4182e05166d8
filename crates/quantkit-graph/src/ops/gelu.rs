//! `Gelu`: opset 20; exact y = x/2·(1 + erf(x/√2)), or the tanh approximation when approximate = "tanh".

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Gelu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let approx = ctx.node.attr_string("approximate", "none")?;
    match approx.as_str() {
        "none" => eval_unary(ctx, inputs, gelu_exact, |x| gelu_exact(x as f64) as f32),
        "tanh" => eval_unary(ctx, inputs, gelu_tanh, |x| gelu_tanh(x as f64) as f32),
        other => Err(OpError::attr(
            "approximate",
            format!("unknown value {other}"),
        )),
    }
}

fn gelu_exact(x: f64) -> f64 {
    0.5 * x * (1.0 + super::erf::erf64(x / std::f64::consts::SQRT_2))
}

/// tanh approximation: x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Hendrycks & Gimpel 2016).
fn gelu_tanh(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

/// `Gelu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Gelu", 20, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    });
