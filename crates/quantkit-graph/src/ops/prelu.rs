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

/// `PRelu` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("PRelu", 1, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts::ELEMENTWISE);
