//! `QuantizeLinear` (opsets 10, 13 `axis`, 19, 21 `block_size`/`output_dtype`):
//! `y = saturate(round_half_even(x / y_scale) + y_zero_point)` (ONNX spec). The division
//! is done in the precision numpy's reference uses: f16 when x and the scale are both
//! f16, f32 otherwise. The output type is the zero point's type (or `output_dtype`,
//! default uint8): u8/i8/u16/i16/u4/i4 (int32 as well); float8/float4/2-bit types are
//! unsupported.

use super::{input, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};
use half::f16;

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
            | DType::I32),
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
    let out_dtype = match zp {
        Some(z) => z.dtype,
        None => quant_dtype(ctx.node.attr_int("output_dtype", 2)? as i32)?,
    };
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
    if !generic {
        if let Some(t) = per_tensor_8bit(x, s, &zpv, out_dtype, block)? {
            return Ok(vec![t]);
        }
    }
    let si = qparam_index(&x.shape, &s.shape, axis, block)?;
    let both_f16 = x.dtype == DType::F16 && s.dtype == DType::F16;
    let xv = x.to_f32_vec();
    let sv = s.to_f32_vec();
    let q: Vec<i64> = xv
        .iter()
        .zip(&si)
        .map(|(&v, &j)| {
            let d = if both_f16 {
                f16::from_f32(v / sv[j]).to_f32()
            } else {
                v / sv[j]
            };
            let r = d.round_ties_even();
            let r = if r.is_nan() { 0 } else { r as i64 };
            (r.saturating_add(zpv[j])).clamp(lo, hi)
        })
        .collect();
    let t = make(DType::I64, x.shape.clone(), Data::I64(q))?;
    Ok(vec![t.cast(out_dtype)])
}

/// Round half to even as `(d + 1.5·2²³) − 1.5·2²³` (the FPU's round-to-nearest-even; Rust
/// never enables fast-math, so the pair is not folded): equal to `round_ties_even` for
/// |d| < 2²², and for larger |d| a value of the same sign and at least 2²² − 1 in magnitude —
/// so for any result that is then saturated to a 16-bit or narrower range it is
/// interchangeable with `round_ties_even`, which is a libm call on baseline x86-64 and
/// keeps loops from vectorising. NaN stays NaN.
#[inline(always)]
pub fn round_half_even_saturating(d: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    (d + MAGIC) - MAGIC
}

/// The common case in one pass without index or i64 buffers: f32 input, one f32 scale, u8
/// or i8 output. Same arithmetic as the generic path: `x / s` in f32, round half to even
/// ([`round_half_even_saturating`]), NaN → 0, `+ zp`, saturate.
fn per_tensor_8bit(
    x: &Tensor,
    s: &Tensor,
    zpv: &[i64],
    out: DType,
    block: usize,
) -> Result<Option<Tensor>, OpError> {
    let (Data::F32(xv), Data::F32(sv)) = (&x.data, &s.data) else {
        return Ok(None);
    };
    if sv.len() != 1 || block != 0 || !matches!(out, DType::U8 | DType::I8) {
        return Ok(None);
    }
    // An 8-bit zero point (the output type is the zero point's), so it fits in i32.
    let (sc, zp) = (sv[0], zpv[0] as i32);
    let data = match out {
        DType::U8 => Data::U8(quantize_8bit(xv, sc, zp)),
        _ => Data::I8(quantize_8bit(xv, sc, zp)),
    };
    make(out, x.shape.clone(), data).map(Some)
}

/// An 8-bit code type: u8 or i8.
pub trait Code8: Copy + Send + Sync + 'static {
    /// The smallest code, as f32.
    const LO: f32;
    /// The largest code, as f32.
    const HI: f32;
    /// The code of an integer in `LO..=HI`.
    fn from_i32(v: i32) -> Self;
}
impl Code8 for u8 {
    const LO: f32 = 0.0;
    const HI: f32 = 255.0;
    #[inline(always)]
    fn from_i32(v: i32) -> Self {
        v as u8
    }
}
impl Code8 for i8 {
    const LO: f32 = -128.0;
    const HI: f32 = 127.0;
    #[inline(always)]
    fn from_i32(v: i32) -> Self {
        v as i8
    }
}

/// One element of the per-tensor 8-bit path: `clamp(round_half_even(v / s) + zp, LO, HI)`
/// with NaN → `zp`, all in f32 (`v / s` is a true f32 division, never a multiply by the
/// reciprocal). Shared with the integer engine's fused input step, so executor and engine
/// compute the same codes by construction.
#[inline(always)]
pub fn quantize_8bit_one<T: Code8>(v: f32, s: f32, zp: i32) -> T {
    let d = v / s;
    let r = if d.is_nan() {
        0.0
    } else {
        round_half_even_saturating(d)
    };
    // `max`/`min` rather than `clamp` (whose `lo ≤ hi` assertion keeps loops scalar); for
    // a non-NaN value they are the same.
    let c = (r + zp as f32).max(T::LO).min(T::HI);
    // SAFETY: `c` is inside the code range, so finite and an i32: `r` is not NaN (NaN became
    // 0) and `zp as f32` is finite, so `r + zp` is not NaN; ±∞ and huge values are clamped.
    T::from_i32(unsafe { c.to_int_unchecked::<i32>() })
}

/// [`quantize_8bit_one`] over a slice, compiled again with AVX2 for CPUs that have it (the
/// same IEEE operations, so the same codes).
fn quantize_8bit<T: Code8>(x: &[f32], s: f32, zp: i32) -> Vec<T> {
    #[inline(always)]
    fn body<T: Code8>(x: &[f32], s: f32, zp: i32) -> Vec<T> {
        // An indexed loop over a zeroed buffer rather than `collect` (whose growth path kept
        // the loop scalar).
        let mut out = vec![T::from_i32(0); x.len()];
        for (o, &v) in out.iter_mut().zip(x) {
            *o = quantize_8bit_one(v, s, zp);
        }
        out
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn body_avx2<T: Code8>(x: &[f32], s: f32, zp: i32) -> Vec<T> {
        body(x, s, zp)
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was just detected.
        return unsafe { body_avx2(x, s, zp) };
    }
    body(x, s, zp)
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
    });
