//! `QuantizeLinear` (opsets 10, 13 `axis`, 19, 21 `block_size`/`output_dtype`, 23
//! `precision`): `y = saturate(round_half_even(x / y_scale) + y_zero_point)` (ONNX spec).
//! The division is done in the `precision` attribute's type (float, float16 or bfloat16,
//! both operands first converted to it) or else in the precision numpy's reference uses:
//! f16 when x and the scale are both f16, bfloat16 when both are bfloat16, f32 otherwise
//! (the spec's text says "the type of `y_scale`", the reference promotes both). The output type is the zero point's type (or `output_dtype`,
//! default uint8): u8/i8/u16/i16/u4/i4/u2/i2 (int32 as well), or a float8 type or float4
//! E2M1. For the float types the formula is the same, `y = cast(x / y_scale +
//! y_zero_point)` with the zero point's value (normally 0), the cast rounding to nearest
//! even as `Cast` does (`saturate`, default 1, for float8; float4 always saturates).
//! ONNX's reference evaluator ignores a float8 zero point; with the usual zero point 0
//! both agree.
//!
//! The rule itself is quantkit-core's ([`quantkit_core::quantize_value_wide`] element by
//! element, [`quantkit_core::quantize_code`] on the per-tensor 8- and 16-bit path, whose loop is
//! [`quantkit_kernels::quantize::quantize`]).

use super::{input, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};
use quantkit_core::formats::{bf16_decode, bf16_encode};
use quantkit_core::{quantize_value_wide, CodeType, QuotientPrecision};

/// quantkit-core's magic-number round half to even, used by `DynamicQuantizeLinear` too.
pub use quantkit_core::linear::round_half_even_saturating;

/// For each element of a tensor of shape `x`, the index into a quantization parameter of
/// shape `p`: per-tensor (one element), per-axis (1-D along `axis`) or blocked (same rank,
/// `axis` divided into blocks of `block`).
pub fn qparam_index(
    x: &[usize],
    p: &[usize],
    axis: i64,
    block: usize,
) -> Result<Vec<usize>, OpError> {
    let n: usize = x.iter().product();
    let plen: usize = p.iter().product();
    if plen == 1 && block == 0 {
        return Ok(vec![0; n]);
    }
    if x.is_empty() {
        // A scalar has no axis to quantize along (`norm_axis` accepts axis 0 of rank 0 for
        // the per-tensor case only).
        return Err(OpError::shape(
            "a one-element scale and zero point for a scalar input",
            p,
        ));
    }
    let a = norm_axis(axis, x.len())?;
    let inner: usize = x[a + 1..].iter().product();
    if block == 0 {
        if p.len() != 1 || p[0] != x[a] {
            return Err(OpError::shape(
                format!("scale of shape [{}] (axis {a})", x[a]),
                p,
            ));
        }
        return Ok((0..n).map(|i| (i / inner) % x[a]).collect());
    }
    let nb = x[a].div_ceil(block);
    let want: Vec<usize> = x
        .iter()
        .enumerate()
        .map(|(i, &d)| if i == a { nb } else { d })
        .collect();
    if p != want.as_slice() {
        return Err(OpError::shape(
            format!("blocked scale of shape {want:?}"),
            p,
        ));
    }
    let outer: usize = x[..a].iter().product();
    let mut idx = Vec::with_capacity(n);
    for o in 0..outer {
        for j in 0..x[a] {
            let base = (o * nb + j / block) * inner;
            idx.extend(base..base + inner);
        }
    }
    Ok(idx)
}

/// The quantized element type for an ONNX type code, if supported.
pub fn quant_dtype(code: i32) -> Result<DType, OpError> {
    match DType::from_onnx(code) {
        Some(
            d @ (DType::U8
            | DType::I8
            | DType::U16
            | DType::I16
            | DType::U4
            | DType::I4
            | DType::U2
            | DType::I2
            | DType::I32
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F4E2M1),
        ) => Ok(d),
        _ => Err(OpError::Unsupported(format!(
            "quantized type {}",
            DType::onnx_name(code)
        ))),
    }
}

/// Evaluates `QuantizeLinear`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, false)
}

/// [`eval`], with `generic = true` forcing the element-by-element i64 path that handles
/// every type and layout (the reference the per-tensor 8-bit fast path is tested against).
pub fn eval_with(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    generic: bool,
) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let s = input(inputs, 1)?;
    let zp = opt_input(inputs, 2);
    let axis = ctx.node.attr_int("axis", 1)?;
    let block = ctx.node.attr_int("block_size", 0)?.max(0) as usize;
    let attr_dtype = ctx.node.attr_int("output_dtype", 0)?;
    let out_dtype = match zp {
        Some(z) => {
            let d = quant_dtype(z.dtype.onnx_code())?;
            if attr_dtype != 0 && i64::from(d.onnx_code()) != attr_dtype {
                return Err(OpError::attr(
                    "output_dtype",
                    format!(
                        "{} differs from the zero point's type {d}",
                        DType::onnx_name(attr_dtype as i32)
                    ),
                ));
            }
            d
        }
        None if attr_dtype == 0 => DType::U8,
        None => quant_dtype(i32::try_from(attr_dtype).unwrap_or(0))?,
    };
    if out_dtype.minifloat().is_some() {
        return quantize_float(ctx, x, s, zp, out_dtype).map(|t| vec![t]);
    }
    let (lo, hi) = out_dtype
        .int_range()
        .ok_or_else(|| OpError::Unsupported(format!("quantized type {out_dtype}")))?;
    let zpv = match zp {
        Some(z) => {
            if z.shape != s.shape && z.len() != s.len() {
                return Err(OpError::shape(
                    format!("zero point shaped like the scale {:?}", s.shape),
                    &z.shape,
                ));
            }
            z.to_i64_vec()
        }
        None => vec![0; s.len()],
    };
    let (precision, explicit) = quotient_precision(ctx, x, s)?;
    // The fast path divides in f32, which is what an explicit `precision` = FLOAT asks too.
    if !generic && (explicit.is_none() || precision == QuotientPrecision::F32) {
        if let Some(t) = per_tensor_codes(x, s, &zpv, out_dtype, block)? {
            return Ok(vec![t]);
        }
    }
    let si = qparam_index(&x.shape, &s.shape, axis, block)?;
    let (xv, sv) = operands(x, s, explicit);
    let q: Vec<i64> = xv
        .iter()
        .zip(&si)
        .map(|(&v, &j)| quantize_value_wide(v, sv[j], zpv[j], lo, hi, precision))
        .collect();
    let t = make(DType::I64, x.shape.clone(), Data::I64(q))?;
    Ok(vec![t.cast(out_dtype)])
}

/// The precision of `x / y_scale`: the `precision` attribute (opset 23) if set, else as
/// ONNX's reference (numpy) divides: f16 when `x` and the scale are both f16, bfloat16 when
/// both are bfloat16, f32 otherwise. Also returns the explicitly requested type, to which
/// the reference first converts both operands. A `precision` other than float, float16
/// or bfloat16 (double) is reported unsupported rather than computed in f32.
fn quotient_precision(
    ctx: &OpCtx,
    x: &Tensor,
    s: &Tensor,
) -> Result<(QuotientPrecision, Option<DType>), OpError> {
    let code = ctx.node.attr_int("precision", 0)?;
    if code == 0 {
        let p = match (x.dtype, s.dtype) {
            (DType::F16, DType::F16) => QuotientPrecision::F16,
            (DType::BF16, DType::BF16) => QuotientPrecision::BF16,
            _ => QuotientPrecision::F32,
        };
        return Ok((p, None));
    }
    let d = i32::try_from(code).ok().and_then(DType::from_onnx);
    match d {
        Some(DType::F32) => Ok((QuotientPrecision::F32, d)),
        Some(DType::F16) => Ok((QuotientPrecision::F16, d)),
        Some(DType::BF16) => Ok((QuotientPrecision::BF16, d)),
        Some(other) if other.is_float() => Err(OpError::Unsupported(format!(
            "QuantizeLinear precision {other}"
        ))),
        _ => Err(OpError::attr(
            "precision",
            format!(
                "{} is not float, float16, bfloat16 or double",
                DType::onnx_name(code as i32)
            ),
        )),
    }
}

/// `x` and the scale as f32, first rounded to the explicitly requested `precision` type
/// (`x.astype(precision) / y_scale.astype(precision)` in the reference).
fn operands(x: &Tensor, s: &Tensor, explicit: Option<DType>) -> (Vec<f32>, Vec<f32>) {
    let round: fn(f32) -> f32 = match explicit {
        Some(DType::F16) => |v| half::f16::from_f32(v).to_f32(),
        Some(DType::BF16) => |v| bf16_decode(bf16_encode(v)),
        _ => |v| v,
    };
    let (mut xv, mut sv) = (x.to_f32_vec(), s.to_f32_vec());
    if explicit.is_some() {
        xv.iter_mut().for_each(|v| *v = round(*v));
        sv.iter_mut().for_each(|v| *v = round(*v));
    }
    (xv, sv)
}

/// QuantizeLinear to a float8 or float4 type: `cast(x / y_scale + y_zero_point)`.
fn quantize_float(
    ctx: &OpCtx,
    x: &Tensor,
    s: &Tensor,
    zp: Option<&Tensor>,
    out: DType,
) -> Result<Tensor, OpError> {
    let axis = ctx.node.attr_int("axis", 1)?;
    let block = ctx.node.attr_int("block_size", 0)?.max(0) as usize;
    let saturate = super::cast::cast_options(ctx.node)?.saturate;
    let Some(format) = out.minifloat() else {
        return Err(OpError::Unsupported(format!("quantized type {out}")));
    };
    let zpv = match zp {
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
    let (precision, explicit) = quotient_precision(ctx, x, s)?;
    let (xv, sv) = operands(x, s, explicit);
    let codes: Vec<u8> = xv
        .iter()
        .zip(&si)
        .map(|(&v, &j)| format.encode(precision.divide(v, sv[j]) + zpv[j], saturate))
        .collect();
    make(out, x.shape.clone(), Data::U8(codes))
}

/// The common case in one pass without index or i64 buffers: f32 input, one f32 scale, u8,
/// i8, u16 or i16 output (the 16-bit activations of W8A16/W16A16 models). The same codes as
/// the generic path: [`quantkit_core::quantize_code`] equals [`quantize_value_wide`] for a
/// zero point of the output type (quantkit-core's tests; `fast_path_equals_generic` below).
fn per_tensor_codes(
    x: &Tensor,
    s: &Tensor,
    zpv: &[i64],
    out: DType,
    block: usize,
) -> Result<Option<Tensor>, OpError> {
    let (Data::F32(xv), Data::F32(sv)) = (&x.data, &s.data) else {
        return Ok(None);
    };
    if sv.len() != 1 || block != 0 {
        return Ok(None);
    }
    // The zero point has the output type (checked by the caller when given, else 0), so it
    // fits in i32 and lies in the code range.
    let (sc, zp) = (sv[0], zpv[0] as i32);
    let data = match out {
        DType::U8 => Data::U8(quantize_codes(xv, sc, zp)),
        DType::I8 => Data::I8(quantize_codes(xv, sc, zp)),
        DType::U16 => Data::U16(quantize_codes(xv, sc, zp)),
        DType::I16 => Data::I16(quantize_codes(xv, sc, zp)),
        _ => return Ok(None),
    };
    make(out, x.shape.clone(), data).map(Some)
}

/// [`quantkit_core::quantize_code`] over a slice (SIMD where the dispatched ISA has it).
fn quantize_codes<T: CodeType>(x: &[f32], s: f32, zp: i32) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    quantkit_kernels::quantize::quantize(x, s, zp, &mut out);
    out
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let dt = match inp.get(2) {
        Some(z) => z.0,
        None => crate::tensor::DType::from_onnx(ctx.node.attr_int("output_dtype", 2).ok()? as i32)?,
    };
    Some(vec![(dt, x.1.clone())])
}

/// `QuantizeLinear` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("QuantizeLinear", 10, eval)
    .infer(infer)
    .facts(super::Facts {
        elementwise: true,
        ..super::Facts::QUANTIZED
    })
    .narrow_types();
