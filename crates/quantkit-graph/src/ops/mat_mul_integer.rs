//! `MatMulInteger`: `Y(int32) = (A − a_zero_point) · (B − b_zero_point)` with numpy matmul
//! broadcasting; `a_zero_point` is per-tensor or per-row of A, `b_zero_point` per-tensor or
//! per-column of B (ONNX spec). Exact i64 accumulation, checked to fit i32.

use super::int_kernels::{self, IntPath};
use super::mat_mul::matmul_shapes;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_index, DType, Data, Tensor};

/// Integer matmul of already zero-point-corrected operands (i32 result).
pub fn matmul_i64(
    a: &[i64],
    ash: &[usize],
    b: &[i64],
    bsh: &[usize],
) -> Result<(Vec<usize>, Vec<i64>), OpError> {
    let (out, batch, m, k, n) = matmul_shapes(ash, bsh)?;
    let own = |s: &[usize]| {
        if s.len() > 2 {
            s[..s.len() - 2].to_vec()
        } else {
            Vec::new()
        }
    };
    let (ai, bi) = (
        broadcast_index(&own(ash), &batch),
        broadcast_index(&own(bsh), &batch),
    );
    let mut y = vec![0i64; ai.len() * m * n];
    for bt in 0..ai.len() {
        let (ao, bo) = (ai[bt] * m * k, bi[bt] * k * n);
        for i in 0..m {
            for p in 0..k {
                let av = a[ao + i * k + p];
                if av == 0 {
                    continue;
                }
                for j in 0..n {
                    y[bt * m * n + i * n + j] += av * b[bo + p * n + j];
                }
            }
        }
    }
    Ok((out, y))
}

/// Evaluates `MatMulInteger`, on the `quantkit_kernels` GEMM when the case is eligible
/// (see [`super::int_kernels`]), with the i64 reference otherwise.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, true).map(|(y, _)| y)
}

/// Evaluates `MatMulInteger` with the i64 reference [`matmul_i64`] only.
pub fn eval_reference(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, false).map(|(y, _)| y)
}

/// Evaluates `MatMulInteger`, on the kernels when `use_kernels` is set and the case is
/// eligible (per-tensor `a_zero_point`), and reports which path computed the result.
pub fn eval_with(
    _ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    use_kernels: bool,
) -> Result<(Vec<Tensor>, IntPath), OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    if use_kernels {
        let za = opt_input(inputs, 2).map(|z| z.to_i64_vec());
        let zb = opt_input(inputs, 3).map_or_else(|| vec![0], |z| z.to_i64_vec());
        if let Some(za) = za
            .as_deref()
            .map_or(Some(0), |z| (z.len() == 1).then(|| z[0]))
        {
            if let Some((shape, y)) =
                int_kernels::matmul_acc(a, za, b, &zb, int_kernels::BLayout::Batched)
            {
                return Ok((
                    vec![make(DType::I32, shape, Data::I32(y))?],
                    IntPath::Kernel,
                ));
            }
        }
    }
    let mut av = a.to_i64_vec();
    let mut bv = b.to_i64_vec();
    if let Some(z) = opt_input(inputs, 2) {
        let z = z.to_i64_vec();
        let k = *a.shape.last().unwrap_or(&1);
        if z.len() == 1 {
            av.iter_mut().for_each(|v| *v -= z[0]);
        } else {
            let rows = a.shape.get(a.rank().wrapping_sub(2)).copied().unwrap_or(1);
            if z.len() != rows {
                return Err(OpError::shape(
                    format!("a_zero_point of 1 or {rows} elements"),
                    z.len(),
                ));
            }
            av.iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v -= z[(i / k) % rows]);
        }
    }
    if let Some(z) = opt_input(inputs, 3) {
        let z = z.to_i64_vec();
        let n = *b.shape.last().unwrap_or(&1);
        if z.len() == 1 {
            bv.iter_mut().for_each(|v| *v -= z[0]);
        } else if z.len() == n {
            bv.iter_mut().enumerate().for_each(|(i, v)| *v -= z[i % n]);
        } else {
            return Err(OpError::shape(
                format!("b_zero_point of 1 or {n} elements"),
                z.len(),
            ));
        }
    }
    let (shape, y) = matmul_i64(&av, &a.shape, &bv, &b.shape)?;
    if y.iter()
        .any(|&v| v < i32::MIN as i64 || v > i32::MAX as i64)
    {
        return Err(OpError::Invalid("int32 accumulator overflow".into()));
    }
    Ok((
        vec![make(
            DType::I32,
            shape,
            Data::I32(y.iter().map(|&v| v as i32).collect()),
        )?],
        IntPath::Reference,
    ))
}

/// `MatMulInteger` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("MatMulInteger", 10, eval).facts(super::Facts::QUANTIZED);
