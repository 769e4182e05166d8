//! `MatMul` with numpy semantics: 1-D operands are promoted (and the added axis removed),
//! leading batch dimensions broadcast.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::linalg::{sgemm, MatRef};
use crate::tensor::{broadcast_shapes, strides, DType, Data, Tensor};

/// Evaluates `MatMul` (float types; computed in f32).
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    let av = a.to_f32_vec();
    let bv = b.to_f32_vec();
    let (shape, y) = matmul_f32(&av, &a.shape, &bv, &b.shape)?;
    let t = make(DType::F32, shape, Data::F32(y))?;
    Ok(vec![if a.dtype == DType::F32 {
        t
    } else {
        t.cast(a.dtype)
    }])
}

/// Batched, broadcasting matrix product of row-major f32 operands.
pub fn matmul_f32(
    a: &[f32],
    ash: &[usize],
    b: &[f32],
    bsh: &[usize],
) -> Result<(Vec<usize>, Vec<f32>), OpError> {
    let (out_shape, batch, m, k, n) = matmul_shapes(ash, bsh)?;
    let (ab, bb) = (batch_index(ash, &batch), batch_index(bsh, &batch));
    let nb = ab.len();
    let mut y = vec![0f32; nb * m * n];
    for (i, c) in y.chunks_mut((m * n).max(1)).enumerate().take(nb) {
        let ao = &a[ab[i] * m * k..];
        let bo = &b[bb[i] * k * n..];
        sgemm(
            m,
            n,
            k,
            MatRef {
                data: ao,
                rs: k,
                cs: 1,
            },
            MatRef {
                data: bo,
                rs: n,
                cs: 1,
            },
            c,
            false,
            true,
        );
    }
    Ok((out_shape, y))
}

/// Shapes of a numpy matmul: (output shape, batch shape, m, k, n).
#[allow(clippy::type_complexity)]
pub fn matmul_shapes(
    ash: &[usize],
    bsh: &[usize],
) -> Result<(Vec<usize>, Vec<usize>, usize, usize, usize), OpError> {
    if ash.is_empty() || bsh.is_empty() {
        return Err(OpError::shape("operands of rank ≥ 1", (ash, bsh)));
    }
    let a2: Vec<usize> = if ash.len() == 1 {
        vec![1, ash[0]]
    } else {
        ash.to_vec()
    };
    let b2: Vec<usize> = if bsh.len() == 1 {
        vec![bsh[0], 1]
    } else {
        bsh.to_vec()
    };
    let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != k2 {
        return Err(OpError::shape(
            format!("inner dimensions equal ({k})"),
            (ash, bsh),
        ));
    }
    let batch = broadcast_shapes(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .ok_or_else(|| OpError::shape("broadcastable batch dimensions", (ash, bsh)))?;
    let mut out = batch.clone();
    if ash.len() > 1 {
        out.push(m);
    }
    if bsh.len() > 1 {
        out.push(n);
    }
    Ok((out, batch, m, k, n))
}

/// For each batch index of `batch`, the matrix index in an operand of shape `sh`.
fn batch_index(sh: &[usize], batch: &[usize]) -> Vec<usize> {
    let own: Vec<usize> = if sh.len() > 2 {
        sh[..sh.len() - 2].to_vec()
    } else {
        Vec::new()
    };
    let _ = strides(&own);
    crate::tensor::broadcast_index(&own, batch)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let _ = ctx;
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    Some(vec![(a.0, matmul_shapes(&a.1, &b.1).ok()?.0)])
}

/// `MatMul` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("MatMul", 1, eval)
        .infer(infer)
        .facts(super::Facts {
            weight: Some(1),
            quant_inputs: super::QuantInputs::All,
            qlinear: Some(super::OpKind::QLinearMatMul),
            integer: Some(super::OpKind::MatMulInteger),
            ..super::Facts::NONE
        });
