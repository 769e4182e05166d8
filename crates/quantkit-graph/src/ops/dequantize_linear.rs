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
use quantkit_core::{dequantize_value, CodeType};

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
            (Data::U8(q), Ok(z)) => Some(dequantize_codes(q, z, sc)),
            (Data::I8(q), Ok(z)) => Some(dequantize_codes(q, z, sc)),
            (Data::U16(q), Ok(z)) => Some(dequantize_codes(q, z, sc)),
            (Data::I16(q), Ok(z)) => Some(dequantize_codes(q, z, sc)),
            _ => None,
        };
        if let Some(y) = y {
            return Ok(vec![finish(make(DType::F32, x.shape.clone(), Data::F32(y))?)]);
        }
    }
    if let Some(y) = per_axis_runs(x, s, &sv, &zpv, axis, block) {
        return Ok(vec![finish(make(DType::F32, x.shape.clone(), Data::F32(y))?)]);
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

/// Per-axis (per-channel) dequantization of integer codes with an f32 scale vector, run by
/// run: the elements sharing one scale are contiguous runs of the axes after `axis`, so
/// each run is one loop with a fixed scale and zero point, without the i64 copy and the
/// per-element scale index of the general path. The same `dequantize_value` per element.
/// `None` when the layout is not plain per-axis (the general path then checks and errors).
fn per_axis_runs(
    x: &Tensor,
    s: &Tensor,
    sv: &[f32],
    zpv: &[i64],
    axis: i64,
    block: usize,
) -> Option<Vec<f32>> {
    let r = x.rank() as i64;
    let ax = if axis < 0 { axis + r } else { axis };
    if block != 0 || s.dtype != DType::F32 || s.rank() != 1 || !(0..r).contains(&ax) {
        return None;
    }
    let ax = ax as usize;
    let dim = sv.len();
    let inner: usize = x.shape[ax + 1..].iter().product();
    if x.shape[ax] != dim || dim < 2 || inner == 0 || zpv.len() != dim {
        return None;
    }
    fn runs<T: Copy + Into<i64>>(q: &[T], inner: usize, sv: &[f32], zpv: &[i64]) -> Vec<f32> {
        let mut y = Vec::with_capacity(q.len());
        for (k, run) in q.chunks_exact(inner).enumerate() {
            let j = k % sv.len();
            let (sc, z) = (sv[j], zpv[j]);
            y.extend(run.iter().map(|&v| dequantize_value(v.into(), sc, z)));
        }
        y
    }
    match &x.data {
        Data::I8(q) => Some(runs(q, inner, sv, zpv)),
        Data::U8(q) => Some(runs(q, inner, sv, zpv)),
        Data::I16(q) => Some(runs(q, inner, sv, zpv)),
        Data::U16(q) => Some(runs(q, inner, sv, zpv)),
        Data::I32(q) => Some(runs(q, inner, sv, zpv)),
        _ => None,
    }
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

/// [`quantkit_core::dequantize_code`] over 8- or 16-bit codes (SIMD where the dispatched ISA
/// has it): `(q − z) as f32 · s` with the difference in i32 (exact for a zero point of the
/// code type, which the caller checked: it has the codes' type).
fn dequantize_codes<T: CodeType>(q: &[T], z: i32, s: f32) -> Vec<f32> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    /// The per-axis runs give the general path's values (scale index from `qparam_index`,
    /// `dequantize_value` on i64) for every axis of several shapes and code types.
    #[test]
    fn per_axis_runs_equal_the_general_path() {
        for shape in [vec![3usize, 4], vec![2, 3, 5], vec![4, 1, 2, 3], vec![2, 2, 1]] {
            for axis in 0..shape.len() {
                let dim = shape[axis];
                let n: usize = shape.iter().product();
                let sv: Vec<f32> = (0..dim).map(|j| 0.01 + 0.37 * j as f32).collect();
                let codes: Vec<i64> = (0..n as i64).map(|i| (i * 37) % 251 - 120).collect();
                let zp: Vec<i64> = (0..dim as i64).map(|j| (j * 5) % 11 - 5).collect();
                let si = qparam_index(&shape, &[dim], axis as i64, 0).unwrap();
                let want: Vec<f32> = codes
                    .iter()
                    .zip(&si)
                    .map(|(&q, &j)| dequantize_value(q, sv[j], zp[j]))
                    .collect();
                let node = Node::new("d", "DequantizeLinear", &["x", "s", "z"], &["y"])
                    .with_attr("axis", AttrValue::Int(axis as i64 - shape.len() as i64));
                let as_i8 = |v: &[i64]| v.iter().map(|&c| c as i8).collect::<Vec<_>>();
                let as_i32 = |v: &[i64]| v.iter().map(|&c| c as i32).collect::<Vec<_>>();
                for (x, z) in [
                    (Data::I8(as_i8(&codes)), Data::I8(as_i8(&zp))),
                    (Data::I32(as_i32(&codes)), Data::I32(as_i32(&zp))),
                ] {
                    let x = Tensor::new(shape.clone(), x).unwrap();
                    let s = Tensor::from_f32(&[dim], sv.clone());
                    let z = Tensor::new(vec![dim], z).unwrap();
                    let y = eval(&OpCtx { node: &node, opset: 21 }, &[Some(&x), Some(&s), Some(&z)])
                        .unwrap();
                    assert_eq!(y[0].to_f32_vec(), want, "{shape:?} axis {axis}");
                }
            }
        }
    }
}
