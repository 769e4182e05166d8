//! `MatMul` with numpy semantics: 1-D operands are promoted (and the added axis removed),
//! leading batch dimensions broadcast.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::linalg::{hgemm_f32_acc, sgemm, MatRef};
use crate::tensor::{broadcast_shapes, strides, DType, Data, Tensor};

/// Evaluates `MatMul`: float32 (and the other float types) computed in f32; float16 by
/// numpy's rule ([`matmul_f16`]).
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    let av = a.to_f32_vec();
    let bv = b.to_f32_vec();
    if a.dtype == DType::F16 && b.dtype == DType::F16 {
        let (shape, y) = matmul_f16(&av, &a.shape, &bv, &b.shape)?;
        return make(DType::F16, shape, Data::F16(y)).map(|t| vec![t]);
    }
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

/// Batched, broadcasting matrix product of float16 operands (given as their exact f32
/// values) with numpy's float16 rule, which the ONNX reference evaluator and the node
/// tests' expected outputs follow: f32 products, an f32 accumulator in ascending `k`,
/// one rounding to f16 per output ([`crate::linalg::hgemm_f32_acc`]). Rounding the sum once
/// from a blocked f32 GEMM instead differs from the reference in the last f16 bit now and
/// then; rounding every partial sum to f16 would differ far more often.
pub fn matmul_f16(
    a: &[f32],
    ash: &[usize],
    b: &[f32],
    bsh: &[usize],
) -> Result<(Vec<usize>, Vec<half::f16>), OpError> {
    let (out_shape, batch, m, k, n) = matmul_shapes(ash, bsh)?;
    let (ab, bb) = (batch_index(ash, &batch), batch_index(bsh, &batch));
    let mut acc = vec![0f32; m * n];
    let mut y = Vec::with_capacity(ab.len() * m * n);
    for (&ia, &ib) in ab.iter().zip(&bb) {
        hgemm_f32_acc(
            m,
            n,
            k,
            MatRef {
                data: &a[ia * m * k..],
                rs: k,
                cs: 1,
            },
            MatRef {
                data: &b[ib * k * n..],
                rs: n,
                cs: 1,
            },
            &mut acc,
        );
        y.extend(acc.iter().map(|&v| half::f16::from_f32(v)));
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

/// Gradient of `Y = A·B` for `A [..., M, K]` and a 2-D `B [K, N]` (the batch folded into
/// M), or operands of equal rank ≥ 2 with the same batch dims: `∂A = G·Bᵀ`, `∂B = Σ Aᵀ·G`.
/// Other shapes (1-D operands, broadcast batches) are `Unsupported`.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{f32s, tensor};
    let _ = ctx;
    let (a, b) = (input(gi.inputs, 0)?, input(gi.inputs, 1)?);
    let (ar, br) = (a.rank(), b.rank());
    let batched = ar >= 2 && br == ar && a.shape[..ar - 2] == b.shape[..br - 2];
    if ar < 2 || !(br == 2 || batched) {
        return Err(OpError::Unsupported(format!(
            "MatMul gradient for shapes {:?} × {:?}",
            a.shape, b.shape
        )));
    }
    let (k, n) = (b.shape[br - 2], b.shape[br - 1]);
    let m = a.shape[ar - 2];
    let (nb_a, nb_b) = if br == 2 {
        (a.len() / (m * k).max(1), 1)
    } else {
        let nb = a.shape[..ar - 2].iter().product::<usize>();
        (nb, nb)
    };
    // With a 2-D B the batch folds into the rows of one product.
    let (rows, reps) = if br == 2 { (nb_a * m, 1) } else { (m, nb_a) };
    let (av, bv) = (f32s(gi.inputs, 0)?, f32s(gi.inputs, 1)?);
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        let mut d = vec![0f32; a.len()];
        for r in 0..reps {
            let g = &gi.grad[r * rows * n..(r + 1) * rows * n];
            let bb = &bv[(r % nb_b) * k * n..(r % nb_b + 1) * k * n];
            sgemm(
                rows,
                k,
                n,
                MatRef::row_major(g, n, false),
                MatRef::row_major(bb, n, true),
                &mut d[r * rows * k..(r + 1) * rows * k],
                false,
                true,
            );
        }
        out[0] = Some(tensor(&a.shape, d)?);
    }
    if gi.need(1) {
        let mut d = vec![0f32; b.len()];
        for r in 0..reps {
            let g = &gi.grad[r * rows * n..(r + 1) * rows * n];
            let aa = &av[r * rows * k..(r + 1) * rows * k];
            let db = &mut d[(r % nb_b) * k * n..(r % nb_b + 1) * k * n];
            sgemm(
                k,
                n,
                rows,
                MatRef::row_major(aa, k, true),
                MatRef::row_major(g, n, false),
                db,
                br == 2 && r > 0,
                true,
            );
        }
        out[1] = Some(tensor(&b.shape, d)?);
    }
    Ok(out)
}

/// `MatMul` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("MatMul", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            weight: Some(1),
            quant_inputs: super::QuantInputs::All,
            qlinear: Some(super::OpKind::QLinearMatMul),
            integer: Some(super::OpKind::MatMulInteger),
            ..super::Facts::NONE
        })
    .bf16_widen();
