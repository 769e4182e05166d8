//! `QLinearGlobalAveragePool` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX
//! Runtime's quantizer writes it for `GlobalAveragePool` in QOperator form). Inputs
//! `X, x_scale, x_zero_point, y_scale, y_zero_point`, per-tensor parameters, u8 or i8 codes;
//! attribute `channels_last` (0: `[N, C, D...]` → `[N, C, 1...]`, the default; 1:
//! `[N, D..., C]` → `[N, 1..., C]`):
//!
//! `y = saturate(round_half_even(m / y_s) + y_zp)` with `m = (Σ(x − x_zp))·x_s / n` in f32,
//! the mean of the dequantized values over the `n` spatial positions (the sum of the integer
//! differences is exact). ONNX Runtime's kernel (MLAS) computes the same mean with its own
//! f32 operation order and can differ from this by one code where the exact value lies
//! within f32 rounding of a half.

use super::qlinear::{check_arity, codes, make_codes, QParams};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearGlobalAveragePool`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    check_arity(inputs, 5, "QLinearGlobalAveragePool")?;
    let x = codes(inputs, 0)?;
    let xp = QParams::read(inputs, 1, 2, x.dtype)?;
    let yp = QParams::read(inputs, 3, 4, x.dtype)?;
    let channels_last = ctx.node.attr_int("channels_last", 0)? != 0;
    let r = x.rank();
    if r < 3 {
        let want = if channels_last {
            "input [N, D..., C]"
        } else {
            "input [N, C, D...]"
        };
        return Err(OpError::shape(want, &x.shape));
    }
    let (n, c) = if channels_last {
        (x.shape[0], x.shape[r - 1])
    } else {
        (x.shape[0], x.shape[1])
    };
    let sp: usize = if channels_last {
        x.shape[1..r - 1].iter().product()
    } else {
        x.shape[2..].iter().product()
    };
    if sp == 0 {
        return Err(OpError::shape("a non-empty spatial extent", &x.shape));
    }
    let q = x.to_i64_vec();
    let mut y = vec![0i64; n * c];
    for b in 0..n {
        for ch in 0..c {
            let sum: i64 = if channels_last {
                (0..sp).map(|s| q[(b * sp + s) * c + ch] - xp.zp).sum()
            } else {
                let base = (b * c + ch) * sp;
                q[base..base + sp].iter().map(|&v| v - xp.zp).sum()
            };
            let mean = sum as f32 * xp.scale / sp as f32;
            y[b * c + ch] = yp.quantize(mean);
        }
    }
    let mut shape = vec![n];
    if channels_last {
        shape.extend(std::iter::repeat_n(1, r - 2));
        shape.push(c);
    } else {
        shape.push(c);
        shape.extend(std::iter::repeat_n(1, r - 2));
    }
    Ok(vec![make_codes(x.dtype, shape, &y)?])
}

/// `QLinearGlobalAveragePool` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearGlobalAveragePool", eval);
