//! `QLinearConcat` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's
//! quantizer writes it for `Concat` in QOperator form). Inputs `Y_scale, Y_zero_point`, then
//! one `(X_i, X_i_scale, X_i_zero_point)` triplet per concatenated tensor; attribute `axis`
//! (negative allowed). Per-tensor parameters, u8 or i8 codes, all of Y's type:
//!
//! each `X_i` is requantized to Y's parameters,
//! `saturate(round_half_even(x_s·(x − x_zp) / y_s) + y_zp)` in f32 (the identity when its
//! parameters are Y's), then the parts are joined as [`super::concat`] does. ONNX Runtime
//! requantizes through a table built from the same formula; it can differ from this by one
//! code only where its f32 arithmetic order differs at a half.

use super::qlinear::{codes, make_codes, same_dtype, QParams};
use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `QLinearConcat`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let len = inputs.len();
    // Inputs: 2 + 3·k, the last zero point possibly left off.
    let k = len.saturating_sub(2).div_ceil(3);
    if k == 0 || 2 + 3 * k - len > 1 {
        return Err(OpError::Invalid(format!(
            "QLinearConcat takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) \
             triplets, got {len} inputs"
        )));
    }
    input(inputs, 0)?;
    let first = codes(inputs, 2)?;
    let dtype = inputs
        .get(1)
        .copied()
        .flatten()
        .map_or(first.dtype, |z| z.dtype);
    let yp = QParams::read(inputs, 0, 1, dtype)?;
    let mut parts = Vec::with_capacity(k);
    for j in 0..k {
        let i = 2 + 3 * j;
        let x = codes(inputs, i)?;
        same_dtype(x, i, dtype)?;
        let xp = QParams::read(inputs, i + 1, i + 2, dtype)?;
        if xp == yp {
            parts.push(x.clone());
        } else {
            let q: Vec<i64> = x
                .to_i64_vec()
                .iter()
                .map(|&v| yp.quantize(xp.dequantize(v)))
                .collect();
            parts.push(make_codes(dtype, x.shape.clone(), &q)?);
        }
    }
    let refs: Vec<Option<&Tensor>> = parts.iter().map(Some).collect();
    super::concat::eval(ctx, &refs)
}

/// `QLinearConcat` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QLinearConcat", eval);
