//! `QLinearAveragePool` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's
//! quantizer writes it for `AveragePool` in QOperator form). Inputs `X, x_scale,
//! x_zero_point?, y_scale, y_zero_point?`, per-tensor parameters, u8 or i8 codes; the
//! attributes of `AveragePool` (`kernel_shape`, `strides`, `pads`/`auto_pad`, `ceil_mode`,
//! `count_include_pad`, see [`super::average_pool`]) plus `channels_last` (0: `[N, C, D...]`,
//! the default; 1: `[N, D..., C]`, output likewise):
//!
//! `y = saturate(round_half_even(m / y_s) + y_zp)` with `m = (Σ(x − x_zp))·x_s / count` in
//! f32 over each window, the average of the dequantized values (padding counts as 0, and in
//! the divisor only with `count_include_pad`; the sum of the integer differences is exact).
//! ONNX Runtime's kernel computes the average with its own f32 operation order and can
//! differ from this by one code where the exact value lies within f32 rounding of a half.

use super::pool::PoolGeom;
use super::qlinear::{
    check_arity, codes, make_codes, to_channels_first, to_channels_last, QParams,
};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearAveragePool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    check_arity(inputs, 5, "QLinearAveragePool")?;
    let x = codes(inputs, 0)?;
    let xp = QParams::read(inputs, 1, 2, x.dtype)?;
    let yp = QParams::read(inputs, 3, 4, x.dtype)?;
    let channels_last = ctx.node.attr_int("channels_last", 0)? != 0;
    let include = ctx.node.attr_int("count_include_pad", 0)? != 0;
    if x.rank() < 3 {
        return Err(OpError::shape("input of rank ≥ 3", &x.shape));
    }
    let q = x.to_i64_vec();
    let (shape, q) = if channels_last {
        to_channels_first(&q, &x.shape)
    } else {
        (x.shape.clone(), q)
    };
    let g = PoolGeom::new(ctx, &shape)?;
    let centered: Vec<i64> = q.iter().map(|&v| v - xp.zp).collect();
    let y = g.map_windows(&centered, |xc, taps| {
        let mut sum = 0i64;
        let mut cnt = 0usize;
        for &(t, in_padded) in taps {
            if let Some(i) = t {
                sum += xc[i];
            }
            if (include && in_padded) || (!include && t.is_some()) {
                cnt += 1;
            }
        }
        let mean = if cnt == 0 {
            f32::NAN
        } else {
            sum as f32 * xp.scale / cnt as f32
        };
        yp.quantize(mean)
    });
    let mut out_shape = shape[..2].to_vec();
    out_shape.extend_from_slice(&g.out_sp);
    let (out_shape, y) = if channels_last {
        to_channels_last(&y, &out_shape)
    } else {
        (out_shape, y)
    };
    Ok(vec![make_codes(x.dtype, out_shape, &y)?])
}

/// `QLinearAveragePool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearAveragePool", eval);
