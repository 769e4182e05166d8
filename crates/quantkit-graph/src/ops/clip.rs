//! `Clip`: y = min(max(x, min), max). `min`/`max` are attributes before opset 11 and optional
//! inputs after; they default to the type's lowest/highest value. Works on floats and ints.

use super::{input, make, opt_input, OpCtx, OpKind};
use crate::error::OpError;
use crate::ir::Node;
use crate::tensor::{Element, Tensor};
use crate::{map_data, DType};

/// The interval an activation clamps to: Clip's bounds with the opset rules (attributes
/// `min`/`max` before opset 11, optional inputs 1 and 2 from 11 on), or Relu's `[0, +∞)`.
/// An absent bound is infinite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClipBounds {
    /// Lower bound (`-∞` when absent).
    pub lo: f64,
    /// Upper bound (`+∞` when absent).
    pub hi: f64,
}

impl ClipBounds {
    /// The bounds of a Clip or Relu node (an operator whose facts say `clamp`), in a model of
    /// default-domain opset `opset`. `bound(i)` gives the value of input `i` (a scalar
    /// tensor) when the caller knows it; an input bound it does not know is an error.
    pub fn of(
        node: &Node,
        opset: i64,
        bound: impl Fn(usize) -> Option<f64>,
    ) -> Result<ClipBounds, OpError> {
        if node.is(OpKind::Relu) {
            return Ok(ClipBounds {
                lo: 0.0,
                hi: f64::INFINITY,
            });
        }
        if !node.is(OpKind::Clip) {
            return Err(OpError::Invalid(format!(
                "{} is not a clamp (Relu or Clip)",
                node.op_type
            )));
        }
        if opset < 11 {
            return Ok(ClipBounds {
                lo: node.attr_float("min", f32::NEG_INFINITY)? as f64,
                hi: node.attr_float("max", f32::INFINITY)? as f64,
            });
        }
        let get = |i: usize, default: f64| match node.inputs.get(i).filter(|v| !v.is_empty()) {
            None => Ok(default),
            Some(v) => bound(i)
                .ok_or_else(|| OpError::Invalid(format!("Clip bound `{v}` is not a known scalar"))),
        };
        Ok(ClipBounds {
            lo: get(1, f64::NEG_INFINITY)?,
            hi: get(2, f64::INFINITY)?,
        })
    }
}

/// Evaluates `Clip`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    // An empty bound tensor counts as absent, as it always has here.
    let b = ClipBounds::of(ctx.node, ctx.opset, |i| {
        Some(
            opt_input(inputs, i)
                .and_then(|t| t.to_f64_vec().first().copied())
                .unwrap_or(if i == 1 {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }),
        )
    })?;
    let (lo, hi) = (b.lo, b.hi);
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
    // f32 with bounds that are f32 values (always, unless a bound came from a wider
    // type): the same comparisons in f32, which vectorise. The result is one of x, lo, hi
    // either way, so it is the same value as the f64 path's.
    if let crate::tensor::Data::F32(v) = &x.data {
        let (l, h) = (lo as f32, hi as f32);
        if f64::from(l) == lo && f64::from(h) == hi {
            let y = v
                .iter()
                .map(|&x| {
                    let y = x.max(l).min(h);
                    if x.is_nan() || y == x {
                        x
                    } else {
                        y
                    }
                })
                .collect();
            return make(x.dtype, x.shape.clone(), crate::tensor::Data::F32(y)).map(|t| vec![t]);
        }
    }
    let data = map_data!(&x.data, v => clip(v, lo, hi));
    make(x.dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// Gradient: `g` where `lo ≤ x ≤ hi`, 0 where clipped; the bounds get none.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let inputs = gi.inputs;
    let b = ClipBounds::of(ctx.node, ctx.opset, |i| {
        Some(
            opt_input(inputs, i)
                .and_then(|t| t.to_f64_vec().first().copied())
                .unwrap_or(if i == 1 {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }),
        )
    })?;
    let (lo, hi) = (b.lo, b.hi);
    super::grad::unary(gi, move |x, _| {
        let x = x as f64;
        if x >= lo && x <= hi {
            1.0
        } else {
            0.0
        }
    })
}

/// `Clip` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Clip", 1, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        quant_inputs: super::QuantInputs::First,
        elementwise: true,
        monotone: true,
        clamp: true,
        ..super::Facts::NONE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    /// The f32 path gives the bits the element-generic (f64) path gives, on NaN, signed
    /// zeros, infinities, values at the bounds, absent bounds and min > max.
    #[test]
    fn f32_path_equals_the_generic_path_bit_for_bit() {
        let xs = vec![
            f32::NAN,
            -0.0,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -1.5,
            0.25,
            6.0,
            6.000_001,
            -3.0,
            1e30,
        ];
        let n = Node::new("c", "Clip", &["x", "lo", "hi"], &["y"]);
        let bounds = [
            (Some(0.0f32), Some(6.0f32)),
            (Some(-0.0), None),
            (None, Some(0.25)),
            (Some(1.0), Some(-1.0)),
            (None, None),
        ];
        for (lo, hi) in bounds {
            let run = |x: Tensor, lo: Option<Tensor>, hi: Option<Tensor>| {
                eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x), lo.as_ref(), hi.as_ref()])
                    .unwrap()
                    .remove(0)
            };
            let f32_out = run(
                Tensor::from_f32(&[xs.len()], xs.clone()),
                lo.map(|v| Tensor::from_f32(&[], vec![v])),
                hi.map(|v| Tensor::from_f32(&[], vec![v])),
            );
            let as64 = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
            let f64_out = run(
                Tensor::new(vec![xs.len()], crate::tensor::Data::F64(as64(&xs))).unwrap(),
                lo.map(|v| Tensor::new(vec![], crate::tensor::Data::F64(vec![v.into()])).unwrap()),
                hi.map(|v| Tensor::new(vec![], crate::tensor::Data::F64(vec![v.into()])).unwrap()),
            );
            let a: Vec<u32> = f32_out.to_f32_vec().iter().map(|v| v.to_bits()).collect();
            let b: Vec<u32> = f64_out.to_f64_vec().iter().map(|&v| (v as f32).to_bits()).collect();
            assert_eq!(a, b, "bounds {lo:?} {hi:?}");
        }
    }
}
