//! `DequantizeLinear` (opsets 10, 13 `axis`, 19, 21 `block_size`, 23 `output_dtype`):
//! `y = (x − x_zero_point) · x_scale` (ONNX spec), computed as an exact integer difference
//! times the scale in f32, returned in `output_dtype` or else the scale's type (f32, f16,
//! bf16). Float8 and float4 inputs use the same formula on their decoded values (the zero
//! point is normally 0; ONNX's reference refuses a non-zero float8 one and ignores a float4
//! one). quantkit-core's
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
    let out_dtype = match ctx.node.attr_int("output_dtype", 0)? {
        0 => s.dtype,
        code => i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx)
            .filter(|d| d.is_float() || *d == DType::BF16)
            .ok_or_else(|| {
                OpError::attr(
                    "output_dtype",
                    format!("{} is not a float type", DType::onnx_name(code as i32)),
                )
            })?,
    };
    let finish = |t: Tensor| if out_dtype == DType::F32 { t } else { t.cast(out_dtype) };
    if x.dtype.minifloat().is_some() {
        return dequantize_float(ctx, x, s, zp).map(|t| vec![finish(t)]);
    }
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
            return Ok(vec![finish(make(DType::F32, x.shape.clone(), Data::F32(y))?)]);
        }
    }
    let si = qparam_index(&x.shape, &s.shape, axis, block)?;
    let y: Vec<f32> = x
        .to_i64_vec()
        .iter()
        .zip(&si)
        .map(|(&q, &j)| dequantize_value(q, sv[j], zpv[j]))
        .collect();
    Ok(vec![finish(make(DType::F32, x.shape.clone(), Data::F32(y))?)])
}

/// DequantizeLinear of float8/float4 codes: `(x − x_zero_point) · x_scale` on the decoded
/// values, in f32.
fn dequantize_float(
    ctx: &OpCtx,
    x: &Tensor,
    s: &Tensor,
    zp: Option<&Tensor>,
) -> Result<Tensor, OpError> {
    let axis = ctx.node.attr_int("axis", 1)?;
    let block = ctx.node.attr_int("block_size", 0)?.max(0) as usize;
    let zpv = match zp {
        Some(z) if z.dtype != x.dtype => {
            return Err(OpError::DType {
                index: 2,
                expected: x.dtype.to_string(),
                got: z.dtype.to_string(),
            })
        }
        Some(z) if z.len() != s.len() => {
            return Err(OpError::shape(
                format!("zero point shaped like the scale {:?}", s.shape),
                &z.shape,
            ))
        }
        Some(z) => z.to_f32_vec(),
        None => vec![0.0; s.len()],
    };
    let si = qparam_index(&x.shape, &s.shape, axis, block)?;
    let sv = s.to_f32_vec();
    let y: Vec<f32> = x
        .to_f32_vec()
        .iter()
        .zip(&si)
        .map(|(&v, &j)| (v - zpv[j]) * sv[j])
        .collect();
    make(DType::F32, x.shape.clone(), Data::F32(y))
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
    let (x, s) = (inp.get(0)?, inp.get(1)?);
    let out = match ctx.node.attr_int("output_dtype", 0).ok()? {
        0 => s.0,
        code => DType::from_onnx(i32::try_from(code).ok()?)?,
    };
    Some(vec![(out, x.1.clone())])
}

/// `DequantizeLinear` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("DequantizeLinear", 10, eval)
    .infer(infer)
    .facts(super::Facts {
        elementwise: true,
        ..super::Facts::QUANTIZED
    })
    .narrow_types();
