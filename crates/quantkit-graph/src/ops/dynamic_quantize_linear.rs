//! `DynamicQuantizeLinear`: u8 quantization with a scale and zero point derived from the
//! data (ONNX spec): range [min(0, min x), max(0, max x)], `scale = range / 255` (1/255 when
//! the range is empty), `zp = saturate(round_half_even(−min / scale))`,
//! `y = saturate(round_half_even(x / scale) + zp)`; all in f32 as the reference does.

use super::quantize_linear::round_half_even_saturating;
use super::{f32_input, input, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `DynamicQuantizeLinear`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let v = f32_input(inputs, 0)?;
    let (y, scale, zp) = quantize(v);
    Ok(vec![
        Tensor::new(x.shape.clone(), Data::U8(y)).map_err(|e| OpError::Invalid(e.to_string()))?,
        Tensor::scalar_f32(scale),
        Tensor::new(vec![], Data::U8(vec![zp])).map_err(|e| OpError::Invalid(e.to_string()))?,
    ])
}

/// The operator's arithmetic on `v`: the codes (same order), the scale and the zero point.
/// Also what the integer engine's dynamic step runs, so the two are the same code.
///
/// Two passes the compiler vectorises: min and max in eight lanes (`f32::max`/`min` ignore
/// NaN and are associative on the rest, so the lane split finds the same extremes; only the
/// sign of a zero extreme can differ, and a ±0 bound gives the same scale and zero point),
/// then the codes with [`round_half_even_saturating`] instead of the libm call that
/// `round_ties_even` is on baseline x86-64 (|x / scale| ≤ 255 for every finite x, since
/// the range contains x).
pub fn quantize(v: &[f32]) -> (Vec<u8>, f32, u8) {
    let (mut hi, mut lo) = ([0f32; 8], [0f32; 8]);
    let chunks = v.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            // `f32::max`/`min` as selects (a NaN `c[j]` compares false and is skipped; the
            // lanes start at 0 and never become NaN), which compile to `maxps`/`minps`.
            hi[j] = if c[j] > hi[j] { c[j] } else { hi[j] };
            lo[j] = if c[j] < lo[j] { c[j] } else { lo[j] };
        }
    }
    let maxx = hi.iter().chain(rest).copied().fold(0f32, f32::max);
    let minx = lo.iter().chain(rest).copied().fold(0f32, f32::min);
    let scale = if maxx == minx { 1.0 } else { maxx - minx } / 255.0;
    let zp = (0.0 - minx / scale).clamp(0.0, 255.0).round_ties_even();
    let q = v
        .iter()
        .map(|&t| (round_half_even_saturating(t / scale) + zp).clamp(0.0, 255.0) as u8)
        .collect();
    (q, scale, zp as u8)
}

/// `DynamicQuantizeLinear` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("DynamicQuantizeLinear", 11, eval).facts(super::Facts::QUANTIZED);
