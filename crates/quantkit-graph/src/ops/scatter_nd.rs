//! `ScatterND`: a copy of `data` (rank r) where the slices named by the index tuples on the
//! last axis of int64 `indices` (rank q, `m = indices.shape[-1]` ≤ r) are replaced by
//! `updates` of shape `indices.shape[..q−1] ++ data.shape[m..]`. Opset 16 added
//! `reduction` (`none`, `add`, `mul`), 18 `max` and `min`: updates are combined with the
//! values there in index order (with `none` and duplicate tuples the last one wins).
//! Opset 11 introduced it, 13 only adds bfloat16. Negative indices count from the end;
//! out-of-range ones are errors.

use super::gather_nd::slice_offsets;
use super::index::{indices_of, scatter, Reduction};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `ScatterND`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let it = input(inputs, 1)?;
    let u = input(inputs, 2)?;
    let r = Reduction::parse(ctx.node, ctx.opset)?;
    let (offs, slice) = slice_offsets(&x.shape, &it.shape, &indices_of(it, 1)?, 0)?;
    let q = it.rank();
    let m = it.shape[q - 1];
    let mut want = it.shape[..q - 1].to_vec();
    want.extend_from_slice(&x.shape[m..]);
    if u.shape != want {
        return Err(OpError::shape(format!("updates of shape {want:?}"), &u.shape));
    }
    let mut dst = Vec::with_capacity(u.len());
    for o in offs {
        dst.extend(o..o + slice);
    }
    let data = scatter(&x.data, &dst, &u.data, r).ok_or_else(|| OpError::DType {
        index: 2,
        expected: x.dtype.to_string(),
        got: u.dtype.to_string(),
    })?;
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// `ScatterND` in the operator registry: same type and shape as `data`.
pub const DEF: super::OpDef = super::OpDef::onnx("ScatterND", 11, eval).infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn slices_reductions_and_errors() {
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let i = Tensor::from_i64(&[2, 1], vec![1, 1]);
        let u = Tensor::from_f32(&[2, 2], vec![10.0, 20.0, 30.0, 40.0]);
        let run = |red: &str, i: &Tensor, u: &Tensor| {
            let n = Node::new("s", "ScatterND", &["x", "i", "u"], &["y"])
                .with_attr("reduction", AttrValue::String(red.as_bytes().to_vec()));
            eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x), Some(i), Some(u)])
        };
        let f = |t: Vec<Tensor>| t[0].as_f32().unwrap().to_vec();
        assert_eq!(f(run("none", &i, &u).unwrap()), [1.0, 2.0, 30.0, 40.0]);
        assert_eq!(f(run("add", &i, &u).unwrap()), [1.0, 2.0, 43.0, 64.0]);
        assert_eq!(f(run("min", &i, &u).unwrap()), [1.0, 2.0, 3.0, 4.0]);
        let e = Tensor::from_i64(&[1, 2], vec![0, -1]);
        let one = Tensor::from_f32(&[1], vec![9.0]);
        assert_eq!(f(run("mul", &e, &one).unwrap()), [1.0, 18.0, 3.0, 4.0]);
        let oob = Tensor::from_i64(&[1, 2], vec![0, 2]);
        assert!(run("none", &oob, &one).is_err());
        let wrong = Tensor::from_f32(&[2], vec![9.0, 9.0]);
        assert!(run("none", &e, &wrong).is_err());
        let long = Tensor::from_i64(&[1, 3], vec![0, 0, 0]);
        assert!(run("none", &long, &one).is_err());
    }
}
