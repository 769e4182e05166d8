//! `CumSum`: running sums of input 0 along the axis given by input 1 (an int32/int64
//! scalar or one-element tensor, possibly negative). `exclusive` (default 0) leaves out
//! the current element (the first sum is 0); `reverse` (default 0) sums from the end.
//! Floats and 32-bit integers sum in f64; int64/uint64 sum exactly (wrapping on overflow).

use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Element, Tensor};

/// Running sums of `v`, viewed as `[outer, n, inner]`, along the middle axis, with the
/// accumulator `A` (`zero`, `add`, conversion back to the element type `T`). CumProd
/// runs it with a product.
pub(super) fn scan<T: Copy, A: Copy>(
    v: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    exclusive: bool,
    reverse: bool,
    zero: A,
    add: impl Fn(A, T) -> A,
    back: impl Fn(A) -> T,
) -> Vec<T> {
    let mut out: Vec<T> = v.to_vec();
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = zero;
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                let at = (o * n + k) * inner + i;
                if exclusive {
                    out[at] = back(acc);
                    acc = add(acc, v[at]);
                } else {
                    acc = add(acc, v[at]);
                    out[at] = back(acc);
                }
            }
        }
    }
    out
}

/// Evaluates `CumSum`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let a = input(inputs, 1)?;
    let axis = match a.to_i64_vec().as_slice() {
        [v] => *v,
        _ => return Err(OpError::shape("a one-element axis", &a.shape)),
    };
    let r = x.rank();
    let axis = norm_axis(axis, r)?;
    let exclusive = ctx.node.attr_int("exclusive", 0)? != 0;
    let reverse = ctx.node.attr_int("reverse", 0)? != 0;
    let n = x.shape.get(axis).copied().unwrap_or(1);
    let outer: usize = x.shape[..axis.min(r)].iter().product();
    let inner: usize = x.shape.get(axis + 1..).map_or(1, |s| s.iter().product());
    let (e, rv) = (exclusive, reverse);
    fn f<T: Element>(v: &[T], o: usize, n: usize, i: usize, e: bool, r: bool) -> Vec<T> {
        scan(v, o, n, i, e, r, 0.0, |s, x: T| s + x.to_f64(), T::from_f64)
    }
    let data = match &x.data {
        Data::F32(v) => Data::F32(f(v, outer, n, inner, e, rv)),
        Data::F64(v) => Data::F64(f(v, outer, n, inner, e, rv)),
        Data::F16(v) => Data::F16(f(v, outer, n, inner, e, rv)),
        Data::I32(v) => Data::I32(f(v, outer, n, inner, e, rv)),
        Data::U32(v) => Data::U32(f(v, outer, n, inner, e, rv)),
        Data::I64(v) => Data::I64(scan(v, outer, n, inner, e, rv, 0i64, i64::wrapping_add, |s| s)),
        Data::U64(v) => Data::U64(scan(v, outer, n, inner, e, rv, 0u64, u64::wrapping_add, |s| s)),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float or int32/int64/uint32/uint64".into(),
                got: x.dtype.to_string(),
            })
        }
    };
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// `CumSum` in the operator registry: same type and shape as input 0, non-decreasing in
/// it, no integer form.
pub const DEF: super::OpDef = super::OpDef::onnx("CumSum", 11, eval)
    .infer(super::same_as_first)
    .facts(super::Facts {
        monotone: true,
        ..super::Facts::NONE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn exclusive_reverse_and_bad_axis() {
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let n = Node::new("c", "CumSum", &["x", "a"], &["y"]);
        let a = Tensor::from_i64(&[], vec![-1]);
        let y = eval(&OpCtx { node: &n, opset: 14 }, &[Some(&x), Some(&a)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 2], vec![1.0, 3.0, 3.0, 7.0]));
        let n = n
            .with_attr("exclusive", AttrValue::Int(1))
            .with_attr("reverse", AttrValue::Int(1));
        let a0 = Tensor::from_i64(&[], vec![0]);
        let y = eval(&OpCtx { node: &n, opset: 14 }, &[Some(&x), Some(&a0)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 2], vec![3.0, 4.0, 0.0, 0.0]));
        let bad = Tensor::from_i64(&[], vec![2]);
        assert!(eval(&OpCtx { node: &n, opset: 14 }, &[Some(&x), Some(&bad)]).is_err());
        let two = Tensor::from_i64(&[2], vec![0, 1]);
        assert!(eval(&OpCtx { node: &n, opset: 14 }, &[Some(&x), Some(&two)]).is_err());
    }
}
