//! `QLinearConv`: `acc = conv(x − x_zp, w − w_zp) + B(int32)` in exact integers, then
//! `y = saturate(round_half_even(acc · (x_scale·w_scale / y_scale)) + y_zp)` with the
//! multiplier per output channel when `w_scale` is 1-D (ONNX spec and reference).

use super::conv::ConvGeom;
use super::conv_integer::{conv_i64, shift_weights};
use super::qlinear_mat_mul::multiplier;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `QLinearConv`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let x_s = input(inputs, 1)?;
    let x_zp = input(inputs, 2)?;
    let w = input(inputs, 3)?;
    let w_s = input(inputs, 4)?;
    let w_zp = input(inputs, 5)?;
    let y_s = input(inputs, 6)?;
    let y_zp = input(inputs, 7)?;
    let g = ConvGeom::new(ctx, &x.shape, &w.shape)?;
    let xz = x_zp.to_i64_vec()[0];
    let xv: Vec<i64> = x.to_i64_vec().iter().map(|v| v - xz).collect();
    let wv = shift_weights(w, Some(w_zp))?;
    let bias = opt_input(inputs, 8).map(|b| b.to_i64_vec());
    if let Some(b) = &bias {
        if b.len() != g.m {
            return Err(OpError::shape(format!("bias of {} elements", g.m), b.len()));
        }
    }
    let acc = conv_i64(&g, &xv, &wv, bias.as_deref());
    let ws = w_s.to_f32_vec();
    if ws.len() != 1 && ws.len() != g.m {
        return Err(OpError::shape(
            format!("w_scale of 1 or {} elements", g.m),
            &w_s.shape,
        ));
    }
    let mults: Vec<f64> = ws
        .iter()
        .map(|&s| multiplier(x_s, s, y_s, w_s.dtype)[0])
        .collect();
    let yz = y_zp.to_i64_vec()[0] as f64;
    let (lo, hi) = y_zp
        .dtype
        .int_range()
        .ok_or_else(|| OpError::Unsupported(format!("output type {}", y_zp.dtype)))?;
    let p = g.out_len();
    let y: Vec<i64> = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let m = mults[if mults.len() == 1 {
                0
            } else {
                (i / p.max(1)) % g.m
            }];
            ((v as f64 * m + yz).round_ties_even() as i64).clamp(lo, hi)
        })
        .collect();
    let mut shape = vec![g.n, g.m];
    shape.extend_from_slice(&g.out_sp);
    Ok(vec![make(DType::I64, shape, Data::I64(y))?.cast(y_zp.dtype)])
}
