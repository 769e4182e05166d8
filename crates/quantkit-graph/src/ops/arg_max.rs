//! `ArgMax`: the int64 index of the largest element along `axis` (default 0), keeping
//! that axis as size 1 when `keepdims` (default 1); ties give the first index, or the last
//! with `select_last_index` (opset 12). A NaN counts as larger than any number (the first
//! NaN wins, as in NumPy). An empty reduced axis is an error (there is no index to give).
//!
//! Also [`arg_extremum`], the shared body of `ArgMax` and `ArgMin`.

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `ArgMax` (`max = true`) or `ArgMin` (`max = false`).
pub fn arg_extremum(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    max: bool,
) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.dtype == DType::Bool {
        return Err(OpError::DType {
            index: 0,
            expected: "numeric".into(),
            got: x.dtype.to_string(),
        });
    }
    let r = x.rank();
    let axis = norm_axis(ctx.node.attr_int("axis", 0)?, r)?;
    let keep = ctx.node.attr_int("keepdims", 1)? != 0;
    let last = ctx.node.attr_int("select_last_index", 0)? != 0;
    let n = x.shape.get(axis).copied().unwrap_or(1);
    if n == 0 {
        return Err(OpError::shape(
            format!("a non-empty axis {axis}"),
            &x.shape,
        ));
    }
    let outer: usize = x.shape[..axis.min(r)].iter().product();
    let inner: usize = x.shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    let vals = x.to_f64_vec();
    // `better(v, best)`: v replaces the current best (strictly, or on ties with `last`).
    let better = |v: f64, best: f64| {
        if best.is_nan() {
            return last && v.is_nan();
        }
        if v.is_nan() {
            return true;
        }
        if v == best {
            return last;
        }
        (v > best) == max
    };
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| vals[(o * n + k) * inner + i];
            let mut best = 0usize;
            for k in 1..n {
                if better(at(k), at(best)) {
                    best = k;
                }
            }
            out.push(best as i64);
        }
    }
    let mut shape = x.shape.clone();
    if r > 0 {
        if keep {
            shape[axis] = 1;
        } else {
            shape.remove(axis);
        }
    }
    make(DType::I64, shape, Data::I64(out)).map(|t| vec![t])
}

/// Static shape rule: input 0's shape with `axis` kept as 1 or removed, as int64.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (_, shape) = inp.get(0)?;
    let axis = norm_axis(ctx.node.attr_int("axis", 0).ok()?, shape.len()).ok()?;
    let mut shape = shape.clone();
    if !shape.is_empty() {
        if ctx.node.attr_int("keepdims", 1).ok()? != 0 {
            shape[axis] = 1;
        } else {
            shape.remove(axis);
        }
    }
    Some(vec![(DType::I64, shape)])
}

/// Evaluates `ArgMax`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    arg_extremum(ctx, inputs, true)
}

/// `ArgMax` in the operator registry (an index output: no facts).
pub const DEF: super::OpDef = super::OpDef::onnx("ArgMax", 1, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn ties_nan_keepdims_and_empty_axis() {
        let x = Tensor::from_f32(&[2, 3], vec![1.0, 3.0, 3.0, 2.0, f32::NAN, f32::NAN]);
        let n = Node::new("a", "ArgMax", &["x"], &["y"]).with_attr("axis", AttrValue::Int(-1));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[2, 1], vec![1, 1]));
        let n = n
            .with_attr("select_last_index", AttrValue::Int(1))
            .with_attr("keepdims", AttrValue::Int(0));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[2], vec![2, 2]));
        let e = Tensor::zeros(DType::F32, &[2, 0]);
        assert!(eval(&OpCtx { node: &n, opset: 13 }, &[Some(&e)]).is_err());
        let bad = Node::new("a", "ArgMax", &["x"], &["y"]).with_attr("axis", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &bad, opset: 13 }, &[Some(&x)]).is_err());
    }
}
