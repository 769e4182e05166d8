//! `TopK`: the `k` largest (or smallest) elements along `axis` (default -1) and their
//! int64 indices; both outputs have the input's shape with `axis` of size `k`. Opset 1 took
//! `k` as an attribute; 10 made it a one-element int64 input `K`; 11 added `largest`
//! (default 1), `sorted` (default 1) and negative axes; 24 only adds bfloat16. Equal values
//! are ordered by index, lower first, as the spec requires; the output is always sorted
//! (a valid order for `sorted = 0` too). NaN ranks above every number, as in numpy's sort.
//! Each slice is partitioned (`select_nth_unstable`) before the `k` kept elements are
//! sorted: O(n + k log k) per slice.

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, DType, Tensor};
use std::cmp::Ordering;

/// `k`: the attribute before opset 10, the one-element input `K` from 10 on.
fn k_of(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<i64, OpError> {
    if ctx.opset < 10 {
        return ctx.node.attr_int("k", -1).and_then(|k| match k {
            -1 if ctx.node.attr("k").is_none() => Err(OpError::attr("k", "missing")),
            k => Ok(k),
        });
    }
    let t = input(inputs, 1)?;
    match (&t.data, t.len()) {
        (Data::I64(v), 1) => Ok(v[0]),
        _ => Err(OpError::shape("a one-element int64 K", (&t.shape, t.dtype))),
    }
}

/// Total order with NaN above everything (NaNs equal among themselves).
pub(super) fn total<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    #[allow(clippy::eq_op)]
    let (na, nb) = (a != a, b != b);
    match (na, nb) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

/// Top `k` of each slice of `v` viewed as `[outer, n, inner]` along the middle axis.
fn top<T: PartialOrd + Copy>(
    v: &[T],
    (outer, n, inner): (usize, usize, usize),
    k: usize,
    largest: bool,
) -> (Vec<T>, Vec<i64>) {
    let mut vals = vec![None; outer * k * inner];
    let mut idx = vec![0i64; outer * k * inner];
    let order = |a: &(T, usize), b: &(T, usize)| {
        let by_value = if largest {
            total(&b.0, &a.0)
        } else {
            total(&a.0, &b.0)
        };
        by_value.then(a.1.cmp(&b.1))
    };
    if k == 0 {
        return (Vec::new(), idx);
    }
    let mut slice: Vec<(T, usize)> = Vec::with_capacity(n);
    for o in 0..outer {
        for i in 0..inner {
            slice.clear();
            slice.extend((0..n).map(|j| (v[(o * n + j) * inner + i], j)));
            if k < n {
                slice.select_nth_unstable_by(k - 1, order);
            }
            slice[..k].sort_by(order);
            for (r, &(x, j)) in slice[..k].iter().enumerate() {
                let at = (o * k + r) * inner + i;
                vals[at] = Some(x);
                idx[at] = j as i64;
            }
        }
    }
    (vals.into_iter().flatten().collect(), idx)
}

/// Evaluates `TopK`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.rank() == 0 {
        return Err(OpError::shape("rank ≥ 1", &x.shape));
    }
    let axis = norm_axis(ctx.node.attr_int("axis", -1)?, x.rank())?;
    let (largest, sorted) = if ctx.opset >= 11 {
        let l = ctx.node.attr_int("largest", 1)?;
        let s = ctx.node.attr_int("sorted", 1)?;
        (l != 0, s)
    } else {
        (true, 1)
    };
    let _ = sorted; // always sorted: also a valid result for sorted = 0
    let n = x.shape[axis];
    let k = k_of(ctx, inputs)?;
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= n)
        .ok_or_else(|| OpError::Invalid(format!("TopK: k = {k} outside [0, {n}] on axis {axis}")))?;
    let dims = (
        x.shape[..axis].iter().product(),
        n,
        x.shape[axis + 1..].iter().product(),
    );
    macro_rules! each {
        ($($v:ident),*) => {
            match &x.data {
                $(Data::$v(v) => {
                    let (vals, idx) = top(v, dims, k, largest);
                    (Data::$v(vals), idx)
                })*
                Data::Bool(_) => {
                    return Err(OpError::DType {
                        index: 0,
                        expected: "a numeric type".into(),
                        got: x.dtype.to_string(),
                    })
                }
            }
        };
    }
    let (vals, idx) = each!(F32, F64, F16, I8, U8, I16, U16, I32, U32, I64, U64);
    let mut shape = x.shape.clone();
    shape[axis] = k;
    Ok(vec![
        make(x.dtype, shape.clone(), vals)?,
        make(DType::I64, shape, Data::I64(idx))?,
    ])
}

/// Static shape rule: known when `k` is (an attribute or a constant `K`).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let k = if ctx.opset < 10 {
        ctx.node.attr_int("k", -1).ok()?
    } else {
        *inp.konst(ctx, 1)?.to_i64_vec().first()?
    };
    let axis = norm_axis(ctx.node.attr_int("axis", -1).ok()?, shape.len()).ok()?;
    let n = *shape.get(axis)?;
    let k = usize::try_from(k).ok().filter(|&k| k <= n)?;
    let mut out = shape.clone();
    out[axis] = k;
    Some(vec![(*dtype, out.clone()), (DType::I64, out)])
}

/// `TopK` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("TopK", 1, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn run(n: &Node, opset: i64, x: &Tensor, k: i64) -> Result<Vec<Tensor>, OpError> {
        let kt = Tensor::from_i64(&[1], vec![k]);
        eval(&OpCtx { node: n, opset }, &[Some(x), Some(&kt)])
    }

    #[test]
    fn largest_smallest_ties_and_nan() {
        let x = Tensor::from_f32(&[1, 5], vec![3.0, 1.0, 3.0, f32::NAN, 1.0]);
        let n = Node::new("t", "TopK", &["x", "k"], &["v", "i"]);
        let y = run(&n, 11, &x, 3).unwrap();
        assert!(y[0].as_f32().unwrap()[0].is_nan());
        assert_eq!(y[0].as_f32().unwrap()[1..], [3.0, 3.0]);
        assert_eq!(y[1], Tensor::from_i64(&[1, 3], vec![3, 0, 2]));
        let s = Node::new("t", "TopK", &["x", "k"], &["v", "i"]).with_attr("largest", AttrValue::Int(0));
        let y = run(&s, 11, &x, 3).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [1.0, 1.0, 3.0]);
        assert_eq!(y[1], Tensor::from_i64(&[1, 3], vec![1, 4, 0]));
        // Before opset 11 `largest` does not exist: always the largest.
        let y = run(&s, 10, &x, 1).unwrap();
        assert!(y[0].as_f32().unwrap()[0].is_nan());
    }

    #[test]
    fn axis_opset_1_attribute_and_bad_k() {
        let x = Tensor::from_i64(&[3, 2], vec![1, 6, 5, 2, 3, 4]);
        let n = Node::new("t", "TopK", &["x"], &["v", "i"])
            .with_attr("axis", AttrValue::Int(0))
            .with_attr("k", AttrValue::Int(2));
        let y = eval(&OpCtx { node: &n, opset: 1 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[2, 2], vec![5, 6, 3, 4]));
        assert_eq!(y[1], Tensor::from_i64(&[2, 2], vec![1, 0, 2, 2]));
        let n = Node::new("t", "TopK", &["x", "k"], &["v", "i"]);
        assert!(run(&n, 11, &x, 3).is_err());
        assert!(run(&n, 11, &x, -1).is_err());
        assert_eq!(run(&n, 11, &x, 0).unwrap()[0].shape, [3, 0]);
        let bad = Node::new("t", "TopK", &["x", "k"], &["v", "i"]).with_attr("axis", AttrValue::Int(2));
        assert!(run(&bad, 11, &x, 1).is_err());
        let two = Tensor::from_i64(&[2], vec![1, 1]);
        assert!(eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x), Some(&two)]).is_err());
    }
}
