//! `Clip`: y = min(max(x, min), max). `min`/`max` are attributes before opset 11 and optional
//! inputs after; they default to the type's lowest/highest value. Works on floats and ints.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{Element, Tensor};
use crate::{map_data, DType};

/// Evaluates `Clip`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (lo, hi) = if ctx.opset < 11 {
        (
            ctx.node.attr_float("min", f32::NEG_INFINITY)? as f64,
            ctx.node.attr_float("max", f32::INFINITY)? as f64,
        )
    } else {
        let get = |i: usize, d: f64| {
            opt_input(inputs, i)
                .and_then(|t| t.to_f64_vec().first().copied())
                .unwrap_or(d)
        };
        (get(1, f64::NEG_INFINITY), get(2, f64::INFINITY))
    };
    if x.dtype == DType::Bool {
        return Err(OpError::DType {
            index: 0,
            expected: "numeric".into(),
            got: "bool".into(),
        });
    }
    // ONNX: when min > max, every output is max (min(max(x, min), max)).
    fn clip<T: Element + PartialOrd>(v: &[T], lo: f64, hi: f64) -> Vec<T> {
        v.iter()
            .map(|&x| {
                let f = x.to_f64();
                if f.is_nan() {
                    x
                } else {
                    let y = f.max(lo).min(hi);
                    if y == f {
                        x
                    } else {
                        T::from_f64(y)
                    }
                }
            })
            .collect()
    }
    let data = map_data!(&x.data, v => clip(v, lo, hi));
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// `Clip` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Clip", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        quant_inputs: super::QuantInputs::First,
        elementwise: true,
        monotone: true,
        clamp: true,
        ..super::Facts::NONE
    });
