//! `PRelu`: y = x for x ≥ 0, slope·x otherwise; `slope` broadcasts to x (unidirectionally).

use super::binary::broadcast;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `PRelu`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let s = input(inputs, 1)?;
    let (shape, data) = match (&x.data, &s.data) {
        (Data::F32(a), Data::F32(b)) => {
            let (sh, v) = broadcast(
                a,
                &x.shape,
                b,
                &s.shape,
                |x, k| if x < 0.0 { k * x } else { x },
            )?;
            (sh, Data::F32(v))
        }
        _ => {
            let (a, b) = (x.to_f64_vec(), s.to_f64_vec());
            let (sh, v) = broadcast(
                &a,
                &x.shape,
                &b,
                &s.shape,
                |x, k| if x < 0.0 { k * x } else { x },
            )?;
            (
                sh,
                crate::Tensor::from_f32(&[v.len()], v.iter().map(|&v| v as f32).collect())
                    .cast(x.dtype)
                    .data,
            )
        }
    };
    if shape != x.shape {
        return Err(OpError::shape(
            format!("slope broadcastable to {:?}", x.shape),
            &s.shape,
        ));
    }
    make(x.dtype, shape, data).map(|t| vec![t])
}

/// Gradient: `∂x = g` where `x ≥ 0`, `g · slope` below; `∂slope = Σ g · x` over `x < 0`,
/// summed over the axes the slope was broadcast along.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{broadcast_to, f32s, tensor, unbroadcast};
    let _ = ctx;
    let (x, s) = (input(gi.inputs, 0)?, input(gi.inputs, 1)?);
    let (xv, sv) = (f32s(gi.inputs, 0)?, f32s(gi.inputs, 1)?);
    let sb = broadcast_to(&sv, &s.shape, &x.shape);
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let d = gi
            .grad
            .iter()
            .zip(xv.iter().zip(&sb))
            .map(|(g, (&x, &k))| if x < 0.0 { g * k } else { *g })
            .collect();
        out[0] = Some(tensor(&x.shape, d)?);
    }
    if gi.need(1) {
        let d: Vec<f32> = gi
            .grad
            .iter()
            .zip(xv.iter())
            .map(|(g, &x)| if x < 0.0 { g * x } else { 0.0 })
            .collect();
        out[1] = Some(tensor(&s.shape, unbroadcast(&d, &x.shape, &s.shape))?);
    }
    Ok(out)
}

/// `PRelu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("PRelu", 1, eval)
        .backward(backward)
    .infer(super::registry::same_as_first)
    .facts(super::Facts::ELEMENTWISE);
