//! `ScatterElements`: a copy of `data` where each element of `updates` is written to the
//! position its index names along `axis` (the inverse of GatherElements):
//! `out[indices[i][j]][j] = updates[i][j]` for `axis = 0`. `indices` (int32/int64) and
//! `updates` share a shape of the data's rank, no larger than the data off `axis`; negative
//! indices count from the end, out-of-range ones are errors. Opset 16 added `reduction`
//! (`none`, `add`, `mul`), 18 `max` and `min`: the update is combined with the value there,
//! in index order (with `none` and duplicate indices the last update wins). Opset 11
//! introduced it, 13 only adds bfloat16. `eval_reduce` is shared with `Scatter`.

use super::gather_elements::positions;
use super::index::{indices_of, scatter, Reduction};
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Scatters with the given reduction (`Scatter` passes [`Reduction::None`]).
pub(super) fn eval_reduce(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    r: Reduction,
) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let it = input(inputs, 1)?;
    let u = input(inputs, 2)?;
    if x.rank() == 0 {
        return Err(OpError::shape("rank ≥ 1", &x.shape));
    }
    if u.shape != it.shape {
        return Err(OpError::shape(
            format!("updates of the indices' shape {:?}", it.shape),
            &u.shape,
        ));
    }
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, x.rank())?;
    let dst = positions(&x.shape, &it.shape, &indices_of(it, 1)?, axis)?;
    let data = scatter(&x.data, &dst, &u.data, r).ok_or_else(|| OpError::DType {
        index: 2,
        expected: x.dtype.to_string(),
        got: u.dtype.to_string(),
    })?;
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// Evaluates `ScatterElements`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_reduce(ctx, inputs, Reduction::parse(ctx.node, ctx.opset)?)
}

/// `ScatterElements` in the operator registry: same type and shape as `data`.
pub const DEF: super::OpDef =
    super::OpDef::onnx("ScatterElements", 11, eval).infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn node(reduction: &str) -> Node {
        Node::new("s", "ScatterElements", &["x", "i", "u"], &["y"])
            .with_attr("axis", AttrValue::Int(1))
            .with_attr("reduction", AttrValue::String(reduction.as_bytes().to_vec()))
    }

    #[test]
    fn every_reduction_with_duplicates() {
        let x = Tensor::from_f32(&[1, 3], vec![1.0, 2.0, 3.0]);
        let i = Tensor::from_i64(&[1, 2], vec![1, -2]);
        let u = Tensor::from_f32(&[1, 2], vec![5.0, 0.5]);
        let run = |r: &str, opset| {
            let n = node(r);
            eval(&OpCtx { node: &n, opset }, &[Some(&x), Some(&i), Some(&u)])
        };
        let got = |r: &str| run(r, 18).unwrap()[0].as_f32().unwrap().to_vec();
        assert_eq!(got("none"), [1.0, 0.5, 3.0]);
        assert_eq!(got("add"), [1.0, 7.5, 3.0]);
        assert_eq!(got("mul"), [1.0, 5.0, 3.0]);
        assert_eq!(got("max"), [1.0, 5.0, 3.0]);
        assert_eq!(got("min"), [1.0, 0.5, 3.0]);
        assert!(run("max", 16).is_err());
        assert!(run("add", 13).is_err());
        assert!(run("sum", 18).is_err());
    }

    #[test]
    fn bad_indices_shapes_and_types() {
        let n = node("none");
        let ctx = OpCtx { node: &n, opset: 18 };
        let x = Tensor::from_f32(&[1, 3], vec![1.0, 2.0, 3.0]);
        let u = Tensor::from_f32(&[1, 1], vec![5.0]);
        let oob = Tensor::from_i64(&[1, 1], vec![3]);
        assert!(eval(&ctx, &[Some(&x), Some(&oob), Some(&u)]).is_err());
        let i = Tensor::from_i64(&[1, 1], vec![0]);
        let u2 = Tensor::from_f32(&[1, 2], vec![5.0, 6.0]);
        assert!(eval(&ctx, &[Some(&x), Some(&i), Some(&u2)]).is_err());
        let ui = Tensor::from_i64(&[1, 1], vec![5]);
        assert!(eval(&ctx, &[Some(&x), Some(&i), Some(&ui)]).is_err());
        let s = Tensor::from_f32(&[], vec![1.0]);
        assert!(eval(&ctx, &[Some(&s), Some(&i), Some(&u)]).is_err());
    }
}
