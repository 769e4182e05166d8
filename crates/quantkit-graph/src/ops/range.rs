//! `Range` (opset 11): `start, start + delta, …` up to but excluding `limit`, from three
//! scalar inputs of one type (float, double, int16, int32, int64; also float16, which the
//! ONNX node suite uses though the schema does not list it);
//! `n = max(⌈(limit − start) / delta⌉, 0)` elements, element `i` = `start + i·delta`.
//! A zero `delta` and outputs above
//! [`super::max_elements()`] elements are errors.

use super::max_elements;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// One scalar operand.
fn scalar<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, OpError> {
    let t = input(inputs, i)?;
    if t.len() != 1 {
        return Err(OpError::shape(format!("a scalar at input {i}"), &t.shape));
    }
    Ok(t)
}

/// Number of elements, checked.
fn count(start: f64, limit: f64, delta: f64) -> Result<usize, OpError> {
    if delta == 0.0 || delta.is_nan() {
        return Err(OpError::Invalid(format!("Range: delta is {delta}")));
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    if n.is_nan() || n > max_elements() as f64 {
        return Err(OpError::Invalid(format!(
            "Range({start}, {limit}, {delta}) has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
        )));
    }
    Ok(n as usize)
}

/// Evaluates `Range`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let (s, l, d) = (scalar(inputs, 0)?, scalar(inputs, 1)?, scalar(inputs, 2)?);
    for (i, t) in [(1, l), (2, d)] {
        if t.dtype != s.dtype {
            return Err(OpError::DType {
                index: i,
                expected: s.dtype.to_string(),
                got: t.dtype.to_string(),
            });
        }
    }
    let (sf, lf, df) = (s.to_f64_vec()[0], l.to_f64_vec()[0], d.to_f64_vec()[0]);
    let n = count(sf, lf, df)?;
    let ints = || {
        let (a, b) = (s.to_i64_vec()[0], d.to_i64_vec()[0]);
        (0..n as i64).map(move |i| a.wrapping_add(i.wrapping_mul(b)))
    };
    let data = match &s.data {
        Data::F32(v) => {
            let (a, b) = (v[0], d.to_f32_vec()[0]);
            Data::F32((0..n).map(|i| a + i as f32 * b).collect())
        }
        Data::F16(v) => {
            let (a, b) = (v[0].to_f32(), d.to_f32_vec()[0]);
            Data::F16((0..n).map(|i| half::f16::from_f32(a + i as f32 * b)).collect())
        }
        Data::F64(_) => Data::F64((0..n).map(|i| sf + i as f64 * df).collect()),
        Data::I16(_) => Data::I16(ints().map(|v| v as i16).collect()),
        Data::I32(_) => Data::I32(ints().map(|v| v as i32).collect()),
        Data::I64(_) => Data::I64(ints().collect()),
        _ => {
            return Err(OpError::DType {
                index: 0,
                expected: "float, double, float16, int16, int32 or int64".into(),
                got: s.dtype.to_string(),
            })
        }
    };
    make(s.dtype, vec![n], data).map(|t| vec![t])
}

/// Static shape rule: known when the three operands are constants.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let v = |i| inp.konst(ctx, i).and_then(|t: &Tensor| t.to_f64_vec().first().copied());
    let n = count(v(0)?, v(1)?, v(2)?).ok()?;
    Some(vec![(inp.konst(ctx, 0)?.dtype, vec![n])])
}

/// `Range` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Range", 11, eval).infer(infer)
    .bf16_widen();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn counts_by_ceiling_and_rejects_zero_delta_and_huge_ranges() {
        let n = Node::new("r", "Range", &["s", "l", "d"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 11 };
        let i = |v: i64| Tensor::from_i64(&[], vec![v]);
        let y = eval(&ctx, &[Some(&i(10)), Some(&i(4)), Some(&i(-3))]).unwrap();
        assert_eq!(y[0], Tensor::from_i64(&[2], vec![10, 7]));
        let y = eval(&ctx, &[Some(&i(1)), Some(&i(0)), Some(&i(1))]).unwrap();
        assert_eq!(y[0].shape, [0]);
        assert!(eval(&ctx, &[Some(&i(1)), Some(&i(5)), Some(&i(0))]).is_err());
        assert!(eval(&ctx, &[Some(&i(0)), Some(&i(i64::MAX)), Some(&i(1))]).is_err());
        let f = Tensor::scalar_f32(1.0);
        assert!(matches!(
            eval(&ctx, &[Some(&i(0)), Some(&f), Some(&i(1))]),
            Err(OpError::DType { index: 1, .. })
        ));
    }
}
