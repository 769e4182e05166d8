//! `ReduceSum`: sums over `axes` (the attribute before opset 13, the optional int64 input
//! from 13), keeping reduced axes as size 1 when `keepdims` (default 1). Empty or absent
//! axes reduce every axis, or with `noop_with_empty_axes` (opset 13) return the input.
//! A reduction over an empty set gives 0. Sums in f64 (int64 sums beyond 2^53 round).

use super::reduce_mean::{reduce, reduce_infer};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Opset from which `axes` is an input.
const AXES_INPUT_SINCE: i64 = 13;

/// Evaluates `ReduceSum`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    reduce(ctx, inputs, AXES_INPUT_SINCE, 0.0, |s, v| s + v, |s, _| s)
}

/// Static shape rule (known when the axes are an attribute or a constant).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    reduce_infer(ctx, inp, AXES_INPUT_SINCE)
}

/// `ReduceSum` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceSum", 1, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn axes_attribute_before_13_and_input_from_13() {
        let x = Tensor::from_f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let n = Node::new("r", "ReduceSum", &["x"], &["y"])
            .with_attr("axes", AttrValue::Ints(vec![-1]))
            .with_attr("keepdims", AttrValue::Int(0));
        let y = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2], vec![6.0, 15.0]));
        let n = Node::new("r", "ReduceSum", &["x", "a"], &["y"]);
        let a = Tensor::from_i64(&[1], vec![0]);
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x), Some(&a)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 3], vec![5.0, 7.0, 9.0]));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x), None]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 1], vec![21.0]));
        let n = n.with_attr("noop_with_empty_axes", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x), None]).unwrap();
        assert_eq!(y[0], x);
        let bad = Tensor::from_i64(&[1], vec![2]);
        assert!(eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x), Some(&bad)]).is_err());
    }
}
