//! `DynamicQuantizeLinear`: u8 quantization with a scale and zero point derived from the
//! data (ONNX spec): range [min(0, min x), max(0, max x)], `scale = range / 255` (1/255 when
//! the range is empty), `zp = saturate(round_half_even(−min / scale))`,
//! `y = saturate(round_half_even(x / scale) + zp)`; all in f32 as the reference does.

use super::{f32_input, input, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `DynamicQuantizeLinear`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let v = f32_input(inputs, 0)?;
    let maxx = v.iter().copied().fold(0f32, f32::max);
    let minx = v.iter().copied().fold(0f32, f32::min);
    let scale = if maxx == minx { 1.0 } else { maxx - minx } / 255.0;
    let zp = (0.0 - minx / scale).clamp(0.0, 255.0).round_ties_even();
    let y: Vec<u8> = v
        .iter()
        .map(|&t| ((t / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8)
        .collect();
    Ok(vec![
        Tensor::new(x.shape.clone(), Data::U8(y)).map_err(|e| OpError::Invalid(e.to_string()))?,
        Tensor::scalar_f32(scale),
        Tensor::new(vec![], Data::U8(vec![zp as u8]))
            .map_err(|e| OpError::Invalid(e.to_string()))?,
    ])
}
