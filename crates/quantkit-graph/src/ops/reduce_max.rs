//! `ReduceMax`: the largest element over `axes` (the attribute before opset 18, the
//! optional int64 input from 18), with `keepdims` and `noop_with_empty_axes` as in the
//! other `Reduce*` operators ([`super::reduce_mean::reduce`]). NaN propagates. A reduction
//! over an empty set gives the type's lowest value (-inf for floats, `false` for bool).
//!
//! Also [`extremum`], the shared body of `ReduceMax` and `ReduceMin`: float, int32/int64
//! and uint32/uint64 inputs fold in f64 (int64 values beyond 2^53 round); bool and the
//! narrow integer types are widened to int32 and narrowed back.

use super::reduce_mean::{reduce, reduce_infer};
use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Tensor};

/// Opset from which `axes` is an input.
pub const AXES_INPUT_SINCE: i64 = 18;

/// Evaluates `ReduceMax` (`max = true`) or `ReduceMin` (`max = false`).
pub fn extremum(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    max: bool,
) -> Result<Vec<Tensor>, OpError> {
    let init = if max {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    };
    let pick = move |s: f64, v: f64| {
        if s.is_nan() || (max && v <= s) || (!max && v >= s) {
            s
        } else {
            v
        }
    };
    let x = input(inputs, 0)?;
    let narrow = match x.dtype {
        DType::Bool => Some((0.0, 1.0)),
        DType::I8 | DType::U8 | DType::I16 | DType::U16 => {
            x.dtype.int_range().map(|(lo, hi)| (lo as f64, hi as f64))
        }
        _ => None,
    };
    let Some((lo, hi)) = narrow else {
        return reduce(ctx, inputs, AXES_INPUT_SINCE, init, pick, |s, _| s);
    };
    // Widened to int32, the empty-set identity clamps to the type's own lowest/highest.
    let wide = x.cast(DType::I32);
    let mut wide_inputs = inputs.to_vec();
    wide_inputs[0] = Some(&wide);
    let bound = if max { lo } else { hi };
    let out = reduce(ctx, &wide_inputs, AXES_INPUT_SINCE, bound, pick, |s, _| s)?;
    Ok(out.into_iter().map(|t| t.cast(x.dtype)).collect())
}

/// Evaluates `ReduceMax`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    extremum(ctx, inputs, true)
}

/// Static shape rule (known when the axes are an attribute or a constant).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    reduce_infer(ctx, inp, AXES_INPUT_SINCE)
}

/// `ReduceMax` in the operator registry: non-decreasing in its input (no integer form;
/// not marked as moving values, since the empty set gives a value not in the input).
pub const DEF: super::OpDef = super::OpDef::onnx("ReduceMax", 1, eval)
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
    use crate::tensor::Data;

    #[test]
    fn max_over_axes_nan_empty_set_and_bool() {
        let x = Tensor::from_f32(&[2, 3], vec![1.0, 5.0, 3.0, f32::NAN, 2.0, 0.0]);
        let n = Node::new("r", "ReduceMax", &["x"], &["y"])
            .with_attr("axes", AttrValue::Ints(vec![1]))
            .with_attr("keepdims", AttrValue::Int(0));
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        let v = y[0].as_f32().unwrap();
        assert_eq!(y[0].shape, vec![2]);
        assert_eq!(v[0], 5.0);
        assert!(v[1].is_nan());
        let n = Node::new("r", "ReduceMax", &["x", "a"], &["y"]);
        let a = Tensor::from_i64(&[1], vec![1]);
        let e = Tensor::zeros(DType::F32, &[2, 0]);
        let y = eval(&OpCtx { node: &n, opset: 18 }, &[Some(&e), Some(&a)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2, 1], vec![f32::NEG_INFINITY; 2]));
        let b = Tensor::zeros(DType::Bool, &[2, 0]);
        let y = eval(&OpCtx { node: &n, opset: 20 }, &[Some(&b), Some(&a)]).unwrap();
        assert_eq!(y[0].data, Data::Bool(vec![false, false]));
        let b = Tensor::new(vec![2, 2], Data::Bool(vec![false, true, false, false])).unwrap();
        let y = eval(&OpCtx { node: &n, opset: 20 }, &[Some(&b), Some(&a)]).unwrap();
        assert_eq!(y[0].data, Data::Bool(vec![true, false]));
        let bad = Tensor::from_i64(&[1], vec![2]);
        assert!(eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x), Some(&bad)]).is_err());
    }
}
