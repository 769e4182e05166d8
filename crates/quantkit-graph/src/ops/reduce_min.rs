//! `ReduceMin`: the smallest element over `axes` (the attribute before opset 18, the
//! optional int64 input from 18), with `keepdims` and `noop_with_empty_axes` as in the
//! other `Reduce*` operators. NaN propagates. A reduction over an empty set gives the
//! type's highest value (+inf for floats, `true` for bool). Shares
//! [`super::reduce_max::extremum`] with `ReduceMax`.

use super::reduce_max::{extremum, AXES_INPUT_SINCE};
use super::reduce_mean::reduce_infer;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `ReduceMin`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    extremum(ctx, inputs, false)
}

/// Static shape rule (known when the axes are an attribute or a constant).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    reduce_infer(ctx, inp, AXES_INPUT_SINCE)
}

/// `ReduceMin` in the operator registry: non-decreasing in its input, no integer form.
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceMin", 1, eval)
    .infer(infer)
    .facts(super::Facts {
        monotone: true,
        ..super::Facts::NONE
    })
    .bf16_widen();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};
    use crate::tensor::DType;

    #[test]
    fn min_over_all_axes_and_empty_set() {
        let x = Tensor::from_f32(&[2, 2], vec![4.0, -1.0, 3.0, 2.0]);
        let n = Node::new("r", "ReduceMin", &["x"], &["y"]);
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 1], vec![-1.0]));
        let n = n.with_attr("axes", AttrValue::Ints(vec![0]));
        let e = Tensor::zeros(DType::F32, &[0, 2]);
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&e)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[1, 2], vec![f32::INFINITY; 2]));
    }
}
