//! `Pow`: y = x^e with broadcasting; base and exponent may have different types
//! (opset 12+); the output has the base's type. Integer powers are computed exactly.

use super::binary::broadcast;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Pow`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let e = input(inputs, 1)?;
    let (shape, data) = match (&x.data, &e.data) {
        (Data::F32(a), Data::F32(b)) => {
            let (s, v) = broadcast(a, &x.shape, b, &e.shape, f32::powf)?;
            (s, Data::F32(v))
        }
        (Data::I64(_) | Data::I32(_), _) if !e.dtype.is_float() => {
            let (a, b) = (x.to_i64_vec(), e.to_i64_vec());
            let (s, v) = broadcast(&a, &x.shape, &b, &e.shape, |p, q| {
                if q < 0 {
                    0
                } else {
                    p.wrapping_pow(q.min(u32::MAX as i64) as u32)
                }
            })?;
            (s, Tensor::from_i64(&[v.len()], v).cast(x.dtype).data)
        }
        _ => {
            let (a, b) = (x.to_f64_vec(), e.to_f64_vec());
            let (s, v) = broadcast(&a, &x.shape, &b, &e.shape, f64::powf)?;
            let t = Tensor::new(vec![v.len()], Data::F64(v))
                .map_err(|e| OpError::Invalid(e.to_string()))?;
            (s, t.cast(x.dtype).data)
        }
    };
    make(x.dtype, shape, data).map(|t| vec![t])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, crate::tensor::broadcast_shapes(&a.1, &b.1)?)])
}

/// Gradient (float base and exponent): `∂x = g · e · x^(e−1)`, `∂e = g · y · ln x`
/// (`y = x^e`; 0 where `y = 0`), each summed over the axes it was broadcast along. The
/// exponent of a LayerNormalization written out (`Pow(x − μ, 2)`) is a constant and gets
/// no gradient.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{broadcast_to, f32s, tensor, unbroadcast};
    let _ = ctx;
    let out_shape = &gi.output.shape;
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    let xs = &input(gi.inputs, 0)?.shape;
    let es = &input(gi.inputs, 1)?.shape;
    let x = broadcast_to(&f32s(gi.inputs, 0)?, xs, out_shape);
    let e = broadcast_to(&f32s(gi.inputs, 1)?, es, out_shape);
    if gi.need(0) {
        let d: Vec<f32> = gi
            .grad
            .iter()
            .zip(x.iter().zip(&e))
            .map(|(g, (&x, &e))| {
                if e == 0.0 {
                    0.0
                } else if e == 2.0 {
                    g * 2.0 * x
                } else {
                    g * e * x.powf(e - 1.0)
                }
            })
            .collect();
        out[0] = Some(tensor(xs, unbroadcast(&d, out_shape, xs))?);
    }
    if gi.need(1) {
        let y = gi.output.to_f32_vec();
        let d: Vec<f32> = gi
            .grad
            .iter()
            .zip(y.iter().zip(&x))
            .map(|(g, (&y, &x))| if y == 0.0 { 0.0 } else { g * y * x.ln() })
            .collect();
        out[1] = Some(tensor(es, unbroadcast(&d, out_shape, es))?);
    }
    Ok(out)
}

/// `Pow` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Pow", 1, eval)
    .backward(backward)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE);
