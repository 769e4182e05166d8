//! `Elu` (opset 6; opset 1's `consumed_inputs` is ignored): y = x for x > 0,
//! alpha · (eˣ − 1) otherwise, `alpha` defaulting to 1. Not declared `monotone`: a negative
//! `alpha` makes it decreasing below zero.

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Elu`. bfloat16 rounds where the ONNX reference does
/// (`np.where(x > 0, x, alpha * np.expm1(x))` with an `ml_dtypes` array and an f32
/// `alpha`): `expm1` is rounded to bfloat16, then the product with `alpha` is formed in f32
/// and rounded again.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let alpha = ctx.node.attr_float("alpha", 1.0)?;
    let x = super::input(inputs, 0)?;
    if let (crate::DType::BF16, crate::Data::U16(c)) = (x.dtype, &x.data) {
        use quantkit_core::formats::{bf16_decode, bf16_encode};
        let y = c
            .iter()
            .map(|&c| {
                let v = bf16_decode(c);
                if v > 0.0 {
                    c
                } else {
                    bf16_encode(alpha * bf16_decode(bf16_encode(v.exp_m1())))
                }
            })
            .collect();
        return super::make(x.dtype, x.shape.clone(), crate::Data::U16(y)).map(|t| vec![t]);
    }
    let a64 = alpha as f64;
    eval_unary(
        ctx,
        inputs,
        move |x| if x > 0.0 { x } else { a64 * x.exp_m1() },
        move |x| if x > 0.0 { x } else { alpha * x.exp_m1() },
    )
}

/// `Elu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Elu", 6, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        ..super::Facts::ELEMENTWISE
    })
    .bf16_codes();
