//! `QGemm` (domain `com.microsoft`, ONNX Runtime contrib op; ONNX Runtime's quantizer writes
//! it for `Gemm` in QOperator form). With `op` the optional transposes:
//!
//! `acc = (op(A) − a_zp) · (op(B) − b_zp[j]) + C` in exact integers (`C` int32, scale
//! `a_scale·b_scale`, zero point 0, broadcast to `[M, N]`), then
//! `y = saturate(round_half_even(acc · (alpha·a_scale·b_scale[j] / y_scale)) + y_zp)`, or,
//! without `y_scale`, the float `acc · alpha·a_scale·b_scale[j]`. `b_scale`/`b_zp` are
//! per-tensor or per column `j` of `op(B)`. The multiplier is formed in f32 and applied in
//! f64, as [`super::qlinear_mat_mul`] does; ONNX Runtime applies it in f32, so its result
//! can differ by one step where `acc · m` lands within f32 rounding of a half.

use super::binary::broadcast;
use super::int_kernels::{self, IntPath};
use super::{first_i64, input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `QGemm`, with the accumulators from the `quantkit_kernels` GEMM when the case is
/// eligible (see [`super::int_kernels`]) and from the i64 reference loop otherwise; the
/// epilogue is the same either way.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, true).map(|(y, _)| y)
}

/// Evaluates `QGemm` with the i64 reference loop only.
pub fn eval_reference(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, false).map(|(y, _)| y)
}

/// Evaluates `QGemm`, with the accumulators from the kernels when `use_kernels` is set and
/// the case is eligible, and reports which path computed them.
pub fn eval_with(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    use_kernels: bool,
) -> Result<(Vec<Tensor>, IntPath), OpError> {
    let a = input(inputs, 0)?;
    let a_s = input(inputs, 1)?;
    let a_zp = input(inputs, 2)?;
    let b = input(inputs, 3)?;
    let b_s = input(inputs, 4)?;
    let b_zp = input(inputs, 5)?;
    let c = opt_input(inputs, 6);
    let y_s = opt_input(inputs, 7);
    let y_zp = opt_input(inputs, 8);
    let n = ctx.node;
    let alpha = n.attr_float("alpha", 1.0)?;
    let (ta, tb) = (n.attr_int("transA", 0)? != 0, n.attr_int("transB", 0)? != 0);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(OpError::shape("rank-2 A and B", (&a.shape, &b.shape)));
    }
    let (m, k) = if ta {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let (k2, nn) = if tb {
        (b.shape[1], b.shape[0])
    } else {
        (b.shape[0], b.shape[1])
    };
    if k != k2 {
        return Err(OpError::shape(
            format!("B with inner dimension {k}"),
            &b.shape,
        ));
    }
    if a_s.len() != 1 || a_zp.len() != 1 {
        return Err(OpError::shape(
            "scalar a_scale and a_zero_point",
            (&a_s.shape, &a_zp.shape),
        ));
    }
    let per_col = |t: &Tensor, what: &str| -> Result<(), OpError> {
        if t.len() == 1 || t.len() == nn {
            Ok(())
        } else {
            Err(OpError::shape(
                format!("{what} of 1 or {nn} elements"),
                &t.shape,
            ))
        }
    };
    per_col(b_s, "b_scale")?;
    per_col(b_zp, "b_zero_point")?;
    let az = first_i64(a_zp, 2)?;
    let bz = b_zp.to_i64_vec();
    // The kernels take A as rows `[M, K]`: transA is a copy of A transposed; transB is a
    // weight layout the packing reads directly.
    let transposed = (use_kernels && ta)
        .then(|| int_kernels::transposed_2d(a))
        .flatten();
    let a_rows = if ta { transposed.as_ref() } else { Some(a) };
    let layout = if tb {
        int_kernels::BLayout::Transposed
    } else {
        int_kernels::BLayout::Batched
    };
    let kernel_acc = match a_rows {
        Some(a_rows) if use_kernels => int_kernels::matmul_acc(a_rows, az, b, &bz, layout),
        _ => None,
    };
    let (mut acc, path) = match kernel_acc {
        Some((_, acc)) => (acc.into_iter().map(i64::from).collect(), IntPath::Kernel),
        None => (
            gemm_i64(&a.to_i64_vec(), az, ta, b, &bz, tb, m, k, nn),
            IntPath::Reference,
        ),
    };
    if let Some(c) = c {
        if c.dtype != DType::I32 {
            return Err(OpError::DType {
                index: 6,
                expected: "int32".into(),
                got: c.dtype.to_string(),
            });
        }
        let (shape, summed) = broadcast(&acc, &[m, nn], &c.to_i64_vec(), &c.shape, |y, c| y + c)?;
        if shape != [m, nn] {
            return Err(OpError::shape(
                format!("C broadcastable to [{m}, {nn}]"),
                &c.shape,
            ));
        }
        acc = summed;
    }
    let bsv = b_s.to_f32_vec();
    let a_sv = a_s.to_f32_vec()[0];
    let col_scale = |j: usize| bsv[if bsv.len() == 1 { 0 } else { j }];
    let shape = vec![m, nn];
    match (y_s, y_zp) {
        (Some(y_s), Some(y_zp)) => {
            let ys = *y_s
                .to_f32_vec()
                .first()
                .ok_or_else(|| OpError::shape("a non-empty y_scale", &y_s.shape))?;
            let mults: Vec<f64> = (0..nn)
                .map(|j| f64::from(alpha * (a_sv * col_scale(j)) / ys))
                .collect();
            let yz = first_i64(y_zp, 8)? as f64;
            let (lo, hi) = y_zp
                .dtype
                .int_range()
                .ok_or_else(|| OpError::Unsupported(format!("output type {}", y_zp.dtype)))?;
            let y: Vec<i64> = acc
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    ((v as f64 * mults[i % nn] + yz).round_ties_even() as i64).clamp(lo, hi)
                })
                .collect();
            Ok((
                vec![make(DType::I64, shape, Data::I64(y))?.cast(y_zp.dtype)],
                path,
            ))
        }
        (None, _) => {
            let y: Vec<f32> = acc
                .iter()
                .enumerate()
                .map(|(i, &v)| (v as f64 * f64::from(alpha * a_sv * col_scale(i % nn))) as f32)
                .collect();
            Ok((vec![make(DType::F32, shape, Data::F32(y))?], path))
        }
        (Some(_), None) => Err(OpError::MissingInput { index: 8 }),
    }
}

/// The reference accumulators `(op(A) − az) · (op(B) − bz[j])` in i64, `[M, N]`, for `av`
/// the elements of A and `b` stored `[K, N]` (or `[N, K]` when `tb`).
fn gemm_i64(
    av: &[i64],
    az: i64,
    ta: bool,
    b: &Tensor,
    bz: &[i64],
    tb: bool,
    m: usize,
    k: usize,
    nn: usize,
) -> Vec<i64> {
    let bv = b.to_i64_vec();
    let a_at = |i: usize, p: usize| if ta { av[p * m + i] } else { av[i * k + p] } - az;
    let b_at = |p: usize, j: usize| {
        let z = bz[if bz.len() == 1 { 0 } else { j }];
        (if tb { bv[j * k + p] } else { bv[p * nn + j] }) - z
    };
    let mut acc = vec![0i64; m * nn];
    for i in 0..m {
        for p in 0..k {
            let x = a_at(i, p);
            if x == 0 {
                continue;
            }
            for j in 0..nn {
                acc[i * nn + j] += x * b_at(p, j);
            }
        }
    }
    acc
}

/// `QGemm` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::microsoft("QGemm", eval).facts(super::Facts::QUANTIZED);
