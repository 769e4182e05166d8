//! Shared helper for ONNX Runtime's per-tensor QLinear contrib operators (`QLinearAdd`,
//! `QLinearMul`, `QLinearConcat`, the QLinear pools and activations; not an operator itself).
//!
//! Each of them is defined as "dequantize the inputs, apply the float operator, quantize the
//! result" with per-tensor parameters: `dequantize(q) = (q − zp)·scale` and
//! `quantize(v) = saturate(round_half_even(v / scale) + zp)`, both in f32, as in
//! [`super::dequantize_linear`] and [`super::quantize_linear`]. Codes are u8 or i8 (the
//! types ONNX Runtime registers these kernels for); an absent zero point is 0 of the
//! tensor's type.

use super::{input, make, opt_input};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Per-tensor quantization parameters of one quantized operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QParams {
    /// Scale (f32, positive for meaningful results).
    pub scale: f32,
    /// Zero point.
    pub zp: i64,
    /// Code type (u8 or i8).
    pub dtype: DType,
}

impl QParams {
    /// Reads the scale at input `s` and the optional zero point at `z` for codes of type
    /// `dtype`: the scale must be one f32, the zero point one element of `dtype`.
    pub fn read(
        inputs: &[Option<&Tensor>],
        s: usize,
        z: usize,
        dtype: DType,
    ) -> Result<QParams, OpError> {
        let st = input(inputs, s)?;
        if st.dtype != DType::F32 {
            return Err(OpError::DType {
                index: s,
                expected: "float".into(),
                got: st.dtype.to_string(),
            });
        }
        if st.len() != 1 {
            return Err(OpError::shape(
                format!("a scalar (per-tensor) scale at input {s}"),
                &st.shape,
            ));
        }
        let zp = match opt_input(inputs, z) {
            None => 0,
            Some(zt) => {
                if zt.dtype != dtype {
                    return Err(OpError::DType {
                        index: z,
                        expected: dtype.to_string(),
                        got: zt.dtype.to_string(),
                    });
                }
                if zt.len() != 1 {
                    return Err(OpError::shape(
                        format!("a scalar (per-tensor) zero point at input {z}"),
                        &zt.shape,
                    ));
                }
                zt.to_i64_vec()[0]
            }
        };
        Ok(QParams {
            scale: st.to_f32_vec()[0],
            zp,
            dtype,
        })
    }

    /// `(q − zp)·scale` in f32 (the difference of two 8-bit codes is exact).
    pub fn dequantize(&self, q: i64) -> f32 {
        (q - self.zp) as f32 * self.scale
    }

    /// `saturate(round_half_even(v / scale) + zp)` with an f32 quotient, NaN → `zp`:
    /// quantkit-core's equation (1) ([`quantkit_core::quantize_value_wide`]), as
    /// [`super::quantize_linear`] computes it.
    pub fn quantize(&self, v: f32) -> i64 {
        let (lo, hi) = self.dtype.int_range().unwrap_or((0, 255));
        quantkit_core::quantize_value_wide(
            v,
            self.scale,
            self.zp,
            lo,
            hi,
            quantkit_core::QuotientPrecision::F32,
        )
    }
}

/// Input `i`, which must hold u8 or i8 codes.
pub fn codes<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, OpError> {
    let t = input(inputs, i)?;
    if !matches!(t.dtype, DType::U8 | DType::I8) {
        return Err(OpError::DType {
            index: i,
            expected: "uint8 or int8".into(),
            got: t.dtype.to_string(),
        });
    }
    Ok(t)
}

/// Checks that the node has at most `max` inputs (trailing optional ones may be absent).
pub fn check_arity(inputs: &[Option<&Tensor>], max: usize, op: &str) -> Result<(), OpError> {
    if inputs.len() > max {
        return Err(OpError::Invalid(format!(
            "{op} takes at most {max} inputs, got {}",
            inputs.len()
        )));
    }
    Ok(())
}

/// Checks that input `i` has the code type `dtype`.
pub fn same_dtype(t: &Tensor, i: usize, dtype: DType) -> Result<(), OpError> {
    if t.dtype != dtype {
        return Err(OpError::DType {
            index: i,
            expected: dtype.to_string(),
            got: t.dtype.to_string(),
        });
    }
    Ok(())
}

/// A tensor of `dtype` codes (u8/i8) from values already saturated to its range.
pub fn make_codes(dtype: DType, shape: Vec<usize>, q: &[i64]) -> Result<Tensor, OpError> {
    let data = match dtype {
        DType::U8 => Data::U8(q.iter().map(|&v| v as u8).collect()),
        DType::I8 => Data::I8(q.iter().map(|&v| v as i8).collect()),
        other => return Err(OpError::Unsupported(format!("QLinear output of {other}"))),
    };
    make(dtype, shape, data)
}

/// `y = quantize_y(f(dequantize_x(x)))` for an element-wise operator with inputs
/// `X, X_scale, X_zero_point?, Y_scale, Y_zero_point?` (QLinearSigmoid, QLinearLeakyRelu).
/// The 256 possible codes are mapped once through a table.
pub fn eval_unary(
    inputs: &[Option<&Tensor>],
    op: &str,
    f: impl Fn(f32) -> f32,
) -> Result<Vec<Tensor>, OpError> {
    check_arity(inputs, 5, op)?;
    let x = codes(inputs, 0)?;
    let xp = QParams::read(inputs, 1, 2, x.dtype)?;
    let yp = QParams::read(inputs, 3, 4, x.dtype)?;
    let (lo, _) = x.dtype.int_range().unwrap_or((0, 255));
    let table: Vec<i64> = (0..256)
        .map(|i| yp.quantize(f(xp.dequantize(lo + i))))
        .collect();
    let y: Vec<i64> = x
        .to_i64_vec()
        .iter()
        .map(|&q| table[(q - lo) as usize])
        .collect();
    Ok(vec![make_codes(x.dtype, x.shape.clone(), &y)?])
}

/// Channels-last `[N, D..., C]` values to channels-first `[N, C, D...]`; returns the new
/// shape and the values (rank ≥ 3).
pub fn to_channels_first(x: &[i64], shape_cl: &[usize]) -> (Vec<usize>, Vec<i64>) {
    let r = shape_cl.len();
    let (n, c) = (shape_cl[0], shape_cl[r - 1]);
    let sp: usize = shape_cl[1..r - 1].iter().product();
    let mut out = vec![0i64; x.len()];
    for b in 0..n {
        for s in 0..sp {
            for ch in 0..c {
                out[(b * c + ch) * sp + s] = x[(b * sp + s) * c + ch];
            }
        }
    }
    let mut shape = vec![n, c];
    shape.extend_from_slice(&shape_cl[1..r - 1]);
    (shape, out)
}

/// The inverse of [`to_channels_first`]: `[N, C, D...]` values to `[N, D..., C]`.
pub fn to_channels_last(x: &[i64], shape_cf: &[usize]) -> (Vec<usize>, Vec<i64>) {
    let r = shape_cf.len();
    let (n, c) = (shape_cf[0], shape_cf[1]);
    let sp: usize = shape_cf[2..].iter().product();
    let mut out = vec![0i64; x.len()];
    for b in 0..n {
        for ch in 0..c {
            for s in 0..sp {
                out[(b * sp + s) * c + ch] = x[(b * c + ch) * sp + s];
            }
        }
    }
    let mut shape = vec![n];
    shape.extend_from_slice(&shape_cf[2..r]);
    shape.push(c);
    (shape, out)
}

/// `C = quantize_c(dequantize_a(A) ∘ dequantize_b(B))` with numpy broadcasting, for inputs
/// `A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale, C_zero_point?`
/// (QLinearAdd, QLinearMul). A, B and the zero points share one code type.
pub fn eval_binary(
    inputs: &[Option<&Tensor>],
    op: &str,
    f: impl Fn(f32, f32) -> f32,
) -> Result<Vec<Tensor>, OpError> {
    check_arity(inputs, 8, op)?;
    let a = codes(inputs, 0)?;
    let b = codes(inputs, 3)?;
    same_dtype(b, 3, a.dtype)?;
    let ap = QParams::read(inputs, 1, 2, a.dtype)?;
    let bp = QParams::read(inputs, 4, 5, a.dtype)?;
    let cp = QParams::read(inputs, 6, 7, a.dtype)?;
    let (shape, y) = super::binary::broadcast(
        &a.to_i64_vec(),
        &a.shape,
        &b.to_i64_vec(),
        &b.shape,
        |qa, qb| cp.quantize(f(ap.dequantize(qa), bp.dequantize(qb))),
    )?;
    Ok(vec![make_codes(a.dtype, shape, &y)?])
}
