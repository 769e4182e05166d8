//! `QLinearMatMul`: `acc = (a − a_zp)·(b − b_zp[j])` in exact integers, then
//! `y = saturate(round_half_even(acc · (a_scale·b_scale[j] / y_scale)) + y_zp)`, where
//! `b_scale`/`b_zero_point` are per tensor or, as the ONNX spec allows, per column `j` of a
//! 2-D `b`. The multiplier is formed in the scales' own precision (f32, or f16 with rounding
//! after each operation) and applied in f64, as the ONNX reference implementation does.

use super::int_kernels::{self, IntPath};
use super::mat_mul_integer::matmul_i64;
use super::{first_i64, input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};
use half::f16;

/// `a·b/c` in the scales' precision (f16 rounds after every operation, like numpy).
pub fn multiplier(a: &Tensor, b: f32, c: &Tensor, b_dtype: DType) -> Vec<f64> {
    let av = a.to_f32_vec();
    let cv = c.to_f32_vec();
    let f16_math = a.dtype == DType::F16 && b_dtype == DType::F16 && c.dtype == DType::F16;
    av.iter()
        .map(|&x| {
            if f16_math {
                let p = f16::from_f32(x * b).to_f32();
                f16::from_f32(p / cv[0]).to_f64()
            } else {
                ((x * b) / cv[0]) as f64
            }
        })
        .collect()
}

/// Evaluates `QLinearMatMul`, with the accumulators from the `quantkit_kernels` GEMM when the
/// case is eligible (see [`super::int_kernels`]) and from the i64 reference otherwise; the
/// epilogue is the same either way.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, true).map(|(y, _)| y)
}

/// Evaluates `QLinearMatMul` with the i64 reference [`matmul_i64`] only.
pub fn eval_reference(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, false).map(|(y, _)| y)
}

/// Evaluates `QLinearMatMul`, with the accumulators from the kernels when `use_kernels` is
/// set and the case is eligible, and reports which path computed them.
pub fn eval_with(
    _ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    use_kernels: bool,
) -> Result<(Vec<Tensor>, IntPath), OpError> {
    let a = input(inputs, 0)?;
    let a_s = input(inputs, 1)?;
    let a_zp = input(inputs, 2)?;
    let b = input(inputs, 3)?;
    let b_s = input(inputs, 4)?;
    let b_zp = input(inputs, 5)?;
    let y_s = input(inputs, 6)?;
    let y_zp = input(inputs, 7)?;
    for (i, t) in [(1, a_s), (2, a_zp), (6, y_s), (7, y_zp)] {
        if t.len() != 1 {
            return Err(OpError::Unsupported(format!(
                "per-axis quantization parameter at input {i} of QLinearMatMul"
            )));
        }
    }
    let n = *b.shape.last().unwrap_or(&1);
    for (i, t) in [(4, b_s), (5, b_zp)] {
        if t.len() != 1 && (t.len() != n || b.rank() != 2) {
            return Err(OpError::shape(
                format!("input {i} of 1 element, or {n} (one per column of a 2-D b)"),
                &t.shape,
            ));
        }
    }
    let az = first_i64(a_zp, 2)?;
    let bz = b_zp.to_i64_vec();
    let kernel_acc = use_kernels
        .then(|| int_kernels::matmul_acc(a, az, b, &bz, int_kernels::BLayout::Batched))
        .flatten();
    let (shape, acc, path) = match kernel_acc {
        Some((shape, acc)) => (
            shape,
            acc.into_iter().map(i64::from).collect(),
            IntPath::Kernel,
        ),
        None => {
            let av: Vec<i64> = a.to_i64_vec().iter().map(|v| v - az).collect();
            let bv: Vec<i64> = b
                .to_i64_vec()
                .iter()
                .enumerate()
                .map(|(i, v)| v - bz[if bz.len() == 1 { 0 } else { i % n }])
                .collect();
            let (shape, acc) = matmul_i64(&av, &a.shape, &bv, &b.shape)?;
            (shape, acc, IntPath::Reference)
        }
    };
    let mults: Vec<f64> = b_s
        .to_f32_vec()
        .iter()
        .map(|&s| multiplier(a_s, s, y_s, b_s.dtype)[0])
        .collect();
    let yz = first_i64(y_zp, 7)? as f64;
    let (lo, hi) = y_zp
        .dtype
        .int_range()
        .ok_or_else(|| OpError::Unsupported(format!("output type {}", y_zp.dtype)))?;
    let y: Vec<i64> = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let m = mults[if mults.len() == 1 { 0 } else { i % n }];
            ((v as f64 * m + yz).round_ties_even() as i64).clamp(lo, hi)
        })
        .collect();
    Ok((
        vec![make(DType::I64, shape, Data::I64(y))?.cast(y_zp.dtype)],
        path,
    ))
}

/// `QLinearMatMul` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("QLinearMatMul", 10, eval).facts(super::Facts::QUANTIZED);
