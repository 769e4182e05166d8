//! `CumProd` (opset 26): running products of input 0 along the axis given by input 1 (an
//! int32/int64 scalar or one-element tensor, possibly negative). `exclusive` (default 0)
//! leaves out the current element (the first product is 1); `reverse` (default 0)
//! multiplies from the end. Floats multiply in f64 and round once per output (as CumSum
//! sums); integers multiply exactly, wrapping on overflow. Shares CumSum's scan.

use super::cum_sum::scan;
use super::index::scalar_of;
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Element, Tensor};

/// Evaluates `CumProd`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let axis = scalar_of(input(inputs, 1)?, 1)?;
    let r = x.rank();
    if r == 0 {
        return Err(OpError::shape("rank ≥ 1", &x.shape));
    }
    let axis = norm_axis(axis, r)?;
    let e = ctx.node.attr_int("exclusive", 0)? != 0;
    let rv = ctx.node.attr_int("reverse", 0)? != 0;
    let n = x.shape[axis];
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    fn f<T: Element>(v: &[T], o: usize, n: usize, i: usize, e: bool, r: bool) -> Vec<T> {
        scan(v, o, n, i, e, r, 1.0, |p, x: T| p * x.to_f64(), T::from_f64)
    }
    macro_rules! int {
        ($v:expr, $one:expr, $t:ty) => {
            scan($v, outer, n, inner, e, rv, $one, <$t>::wrapping_mul, |p| p)
        };
    }
    let data = match &x.data {
        Data::F32(v) => Data::F32(f(v, outer, n, inner, e, rv)),
        Data::F64(v) => Data::F64(f(v, outer, n, inner, e, rv)),
        Data::F16(v) => Data::F16(f(v, outer, n, inner, e, rv)),
        Data::I32(v) => Data::I32(int!(v, 1i32, i32)),
        Data::U32(v) => Data::U32(int!(v, 1u32, u32)),
        Data::I64(v) => Data::I64(int!(v, 1i64, i64)),
        Data::U64(v) => Data::U64(int!(v, 1u64, u64)),
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

/// `CumProd` in the operator registry: same type and shape as input 0.
pub const DEF: super::OpDef = super::OpDef::onnx("CumProd", 26, eval).infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn the_spec_example_every_mode_and_bad_axis() {
        let x = Tensor::from_f32(&[3], vec![1.0, 2.0, 3.0]);
        let a = Tensor::from_i64(&[], vec![0]);
        let run = |e: i64, r: i64, a: &Tensor| {
            let n = Node::new("c", "CumProd", &["x", "a"], &["y"])
                .with_attr("exclusive", AttrValue::Int(e))
                .with_attr("reverse", AttrValue::Int(r));
            eval(&OpCtx { node: &n, opset: 26 }, &[Some(&x), Some(a)])
        };
        let v = |e, r| run(e, r, &a).unwrap()[0].as_f32().unwrap().to_vec();
        assert_eq!(v(0, 0), [1.0, 2.0, 6.0]);
        assert_eq!(v(1, 0), [1.0, 1.0, 2.0]);
        assert_eq!(v(0, 1), [6.0, 6.0, 3.0]);
        assert_eq!(v(1, 1), [6.0, 3.0, 1.0]);
        assert!(run(0, 0, &Tensor::from_i64(&[], vec![1])).is_err());
        assert!(run(0, 0, &Tensor::from_f32(&[], vec![0.0])).is_err());
        let n = Node::new("c", "CumProd", &["x", "a"], &["y"]);
        let big = Tensor::new(vec![2], Data::I32(vec![1 << 20, 1 << 20])).unwrap();
        let y = eval(&OpCtx { node: &n, opset: 26 }, &[Some(&big), Some(&a)]).unwrap();
        assert_eq!(y[0].data, Data::I32(vec![1 << 20, 0]));
    }
}
