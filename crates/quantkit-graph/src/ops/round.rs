//! `Round`: the nearest integer, halves to the even one (`round(2.5) = 2`,
//! `round(-4.5) = -4`); integers, ±0, NaN and ±∞ are returned unchanged. Non-decreasing, so
//! `monotone` as `Floor` and `Ceil` are.
//!
//! Float, double and float16 (later opsets only add bfloat16, which the IR does not hold).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Round`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, f64::round_ties_even, f32::round_ties_even)
}

/// `Round` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Round", 11, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;
    use crate::tensor::Data;

    #[test]
    fn halves_go_to_even_and_specials_pass_through() {
        let n = Node::new("r", "Round", &["x"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 22 };
        let x = Tensor::from_f32(
            &[8],
            vec![0.5, 1.5, 2.5, -2.5, -0.5, 2.3, f32::INFINITY, -0.0],
        );
        let y = eval(&ctx, &[Some(&x)]).unwrap();
        let v = y[0].as_f32().unwrap();
        assert_eq!(&v[..7], &[0.0, 2.0, 2.0, -2.0, -0.0, 2.0, f32::INFINITY]);
        assert!(v[4].is_sign_negative() && v[7].is_sign_negative());
        let d = Tensor::new(vec![2], Data::F64(vec![4.5, f64::NAN])).unwrap();
        let y = eval(&ctx, &[Some(&d)]).unwrap();
        let v = y[0].to_f64_vec();
        assert_eq!(v[0], 4.0);
        assert!(v[1].is_nan());
        // Integers are not a Round type.
        let i = Tensor::from_i64(&[1], vec![3]);
        assert!(matches!(
            eval(&ctx, &[Some(&i)]),
            Err(OpError::DType { .. })
        ));
    }
}
