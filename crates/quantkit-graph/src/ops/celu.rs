//! `Celu` (opset 12): y = max(0, x) + min(0, alpha · (e^(x/alpha) − 1)), `alpha`
//! defaulting to 1. `alpha = 0` divides by zero and is rejected (the spec is silent).
//! Its slope is e^(x/alpha) > 0 below zero and 1 above for any non-zero `alpha`, so it is
//! `monotone`.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Celu`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 1.0)?;
    if alpha == 0.0 || !alpha.is_finite() {
        return Err(OpError::attr(
            "alpha",
            format!("expected a finite non-zero value, got {alpha}"),
        ));
    }
    let a64 = alpha as f64;
    eval_unary(
        ctx,
        inputs,
        move |x| x.max(0.0) + (a64 * (x / a64).exp_m1()).min(0.0),
        move |x| x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0),
    )
}

/// `Celu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Celu", 12, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    })
    .bf16_widen();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn zero_alpha_is_an_attribute_error_and_values_follow_the_formula() {
        let x = Tensor::from_f32(&[3], vec![-2.0, 0.0, 3.0]);
        let n = Node::new("c", "Celu", &["x"], &["y"]).with_attr("alpha", AttrValue::Float(2.0));
        let y = eval(&OpCtx { node: &n, opset: 12 }, &[Some(&x)]).unwrap();
        let v = y[0].as_f32().unwrap();
        assert!((v[0] - 2.0 * ((-1.0f32).exp() - 1.0)).abs() < 1e-6);
        assert_eq!(&v[1..], &[0.0, 3.0]);
        let n = Node::new("c", "Celu", &["x"], &["y"]).with_attr("alpha", AttrValue::Float(0.0));
        assert!(matches!(
            eval(&OpCtx { node: &n, opset: 12 }, &[Some(&x)]),
            Err(OpError::Attribute { .. })
        ));
    }
}
