//! `DequantizeLinear` (opsets 10, 13 `axis`, 19, 21 `block_size`):
//! `y = (x − x_zero_point) · x_scale` (ONNX spec), computed as an exact integer difference
//! times the scale in f32, returned in the scale's type (f32 or f16): quantkit-core's
//! [`quantkit_core::dequantize_value`] (per-tensor 8-bit codes: [`quantkit_core::dequantize_code`],
//! whose loop is [`quantkit_kernels::quantize::dequantize`]).

use super::quantize_linear::qparam_index;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};
use quantkit_core::{dequantize_value, QuantType};

/// Evaluates `DequantizeLinear`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let s = input(inputs, 1)?;
    let zp = opt_input(inputs, 2);
    if x.dtype.int_range().is_none() || x.dtype == DType::I64 {
        return Err(OpError::Unsupported(format!(
            "DequantizeLinear of {}",
            x.dtype
        )));
    }
    if let Some(z) = zp {
        if z.dtype != x.dtype {
            return Err(OpError::DType {
                index: 2,
                expected: x.dtype.to_string(),
                got: z.dtype.to_string(),
            });
        }
    }
    let axis = ctx.node.attr_int("axis", 1)?;
    let block = ctx.node.attr_int("block_size", 0)?.max(0) as usize;
    let zpv = zp
        .map(|z| z.to_i64_vec())
        .unwrap_or_else(|| vec![0; s.len()]);
    if zpv.len() != s.len() {
        return Err(OpError::shape(
            format!("zero point shaped like the scale {:?}", s.shape),
            zp.map(|z| z.shape.clone()),
        ));
    }
    let sv = s.to_f32_vec();
    if sv.len() == 1 && block == 0 && s.dtype == DType::F32 {
        // Per tensor: one pass over the codes, no index or i64 buffers; the same
        // `(q − zp) as f32 · s` (the difference of two 8-/16-bit codes is exact in f32).
        let (z, sc) = (zpv[0], sv[0]);
        let y: Option<Vec<f32>> = match (&x.data, i32::try_from(z)) {
            (Data::U8(q), Ok(z)) => Some(dequantize_8bit(q, z, sc)),
            (Data::I8(q), Ok(z)) => Some(dequantize_8bit(q, z, sc)),
            _ => None,
        };
        if let Some(y) = y {
            return Ok(vec![make(DType::F32, x.shape.clone(), Data::F32(y))?]);
        }
    }
    let si = qparam_index(&x.shape, &s.shape, axis, block)?;
    let y: Vec<f32> = x
        .to_i64_vec()
        .iter()
        .zip(&si)
        .map(|(&q, &j)| dequantize_value(q, sv[j], zpv[j]))
        .collect();
    let t = make(DType::F32, x.shape.clone(), Data::F32(y))?;
    Ok(vec![if s.dtype == DType::F32 {
        t
    } else {
        t.cast(s.dtype)
    }])
}

/// [`quantkit_core::dequantize_code`] over 8-bit codes (SIMD where the dispatched ISA has
/// it): `(q − z) as f32 · s` with the difference in i32 (exact for an 8-bit zero point).
fn dequantize_8bit<T: QuantType>(q: &[T], z: i32, s: f32) -> Vec<f32> {
    let mut out = vec![0f32; q.len()];
    quantkit_kernels::quantize::dequantize(q, s, z, &mut out);
    out
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (x, s) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(s.0, x.1.clone())])
}

/// `DequantizeLinear` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("DequantizeLinear", 10, eval)
    .infer(infer)
    .facts(super::Facts {
        elementwise: true,
        ..super::Facts::QUANTIZED
    });
