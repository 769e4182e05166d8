//! `Scatter` (opset 9, deprecated in 11 in favour of ScatterElements, which has the same
//! meaning): writes `updates` into a copy of `data` at the positions `indices` name along
//! `axis`. Evaluated by [`super::scatter_elements`] without a reduction.

use super::index::Reduction;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Scatter`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    super::scatter_elements::eval_reduce(ctx, inputs, Reduction::None)
}

/// `Scatter` in the operator registry: same type and shape as `data`.
pub const DEF: super::OpDef = super::OpDef::onnx("Scatter", 9, eval).infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn writes_along_axis_0_by_default() {
        let n = Node::new("s", "Scatter", &["x", "i", "u"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 9 };
        let x = Tensor::from_f32(&[2, 2], vec![0.0; 4]);
        let i = Tensor::new(vec![1, 2], crate::tensor::Data::I32(vec![1, 0])).unwrap();
        let u = Tensor::from_f32(&[1, 2], vec![7.0, 8.0]);
        let y = eval(&ctx, &[Some(&x), Some(&i), Some(&u)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 2], vec![0.0, 8.0, 7.0, 0.0]));
        let oob = Tensor::from_i64(&[1, 2], vec![2, 0]);
        assert!(eval(&ctx, &[Some(&x), Some(&oob), Some(&u)]).is_err());
    }
}
