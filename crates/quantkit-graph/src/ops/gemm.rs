//! `Gemm`: Y = alpha·op(A)·op(B) + beta·C, op = optional transpose; C broadcasts to [M, N]
//! (optional from opset 11).

use super::binary::broadcast;
use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::linalg::{hgemm_f32_acc, sgemm, MatRef};
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `Gemm`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    let n = ctx.node;
    let (alpha, beta) = (n.attr_float("alpha", 1.0)?, n.attr_float("beta", 1.0)?);
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
    // Borrowed when f32: a Gemm weight can be megabytes, copied for nothing every call.
    let (av, bv) = (super::conv::borrow_f32(a), super::conv::borrow_f32(b));
    let mut y = vec![0f32; m * nn];
    let (op_a, op_b) = (
        MatRef::row_major(&av, a.shape[1], ta),
        MatRef::row_major(&bv, b.shape[1], tb),
    );
    if a.dtype == DType::F16 && b.dtype == DType::F16 {
        return eval_f16(&y_f16_product(m, nn, k, op_a, op_b), [m, nn], alpha, beta, inputs);
    }
    sgemm(m, nn, k, op_a, op_b, &mut y, false, true);
    if alpha != 1.0 {
        y.iter_mut().for_each(|v| *v *= alpha);
    }
    if let Some(c) = opt_input(inputs, 2).filter(|c| c.len() == nn && c.shape.last() == Some(&nn) && c.rank() <= 2 && c.dtype == DType::F32) {
        // A bias row (`[N]` or `[1, N]`), the common case: added in place, the same
        // `y + β·c` as the broadcast below.
        let cv = c.as_f32().expect("checked f32");
        for row in y.chunks_exact_mut(nn.max(1)) {
            row.iter_mut().zip(cv).for_each(|(y, &c)| *y += beta * c);
        }
    } else if let Some(c) = opt_input(inputs, 2) {
        let cv = c.to_f32_vec();
        let (s2, out) = broadcast(&y, &[m, nn], &cv, &c.shape, |y, c| y + beta * c)?;
        if s2 != [m, nn] {
            return Err(OpError::shape(
                format!("C broadcastable to [{m}, {nn}]"),
                &c.shape,
            ));
        }
        y = out;
    }
    let t = make(DType::F32, vec![m, nn], Data::F32(y))?;
    Ok(vec![if a.dtype == DType::F32 {
        t
    } else {
        t.cast(a.dtype)
    }])
}

/// `op(A)·op(B)` of float16 operands by numpy's rule (f32 accumulation, one rounding to
/// f16: [`crate::linalg::hgemm_f32_acc`]).
fn y_f16_product(m: usize, n: usize, k: usize, a: MatRef, b: MatRef) -> Vec<f32> {
    let mut acc = vec![0f32; m * n];
    hgemm_f32_acc(m, n, k, a, b, &mut acc);
    acc.iter()
        .map(|&v| half::f16::from_f32(v).to_f32())
        .collect()
}

/// The rest of float16 `Gemm` as the ONNX reference computes it (`np.dot(a, b) * alpha +
/// c * beta` with f16 arrays and f32 attributes): the f16 product `p` is scaled in f32,
/// `C·β` is formed in f32 and added in f32, and the sum is rounded to f16 once; `C` is
/// ignored when `β = 0` (so an infinite `C` does not turn into NaN).
fn eval_f16(
    p: &[f32],
    [m, n]: [usize; 2],
    alpha: f32,
    beta: f32,
    inputs: &[Option<&Tensor>],
) -> Result<Vec<Tensor>, OpError> {
    let mut y: Vec<f32> = p.iter().map(|&v| v * alpha).collect();
    if let Some(c) = opt_input(inputs, 2).filter(|_| beta != 0.0) {
        let cv = c.to_f32_vec();
        let (s2, out) = broadcast(&y, &[m, n], &cv, &c.shape, |y, c| y + c * beta)?;
        if s2 != [m, n] {
            return Err(OpError::shape(
                format!("C broadcastable to [{m}, {n}]"),
                &c.shape,
            ));
        }
        y = out;
    }
    let y = y.iter().map(|&v| half::f16::from_f32(v)).collect();
    make(DType::F16, vec![m, n], Data::F16(y)).map(|t| vec![t])
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (a, b) = (inp.get(0)?, inp.get(1)?);
    let node = ctx.node;
    let ta = usize::from(node.attr_int("transA", 0).ok()? != 0);
    let tb = usize::from(node.attr_int("transB", 0).ok()? != 0);
    let (m, n) = (*a.1.get(ta)?, *b.1.get(1 - tb)?);
    Some(vec![(a.0, vec![m, n])])
}

/// Gradient of `Y = α·op(A)·op(B) + β·C`: `∂op(A) = α·G·op(B)ᵀ`, `∂op(B) = α·op(A)ᵀ·G`
/// (transposed back where `transA`/`transB`), `∂C = β·G` summed over C's broadcast axes.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    use super::grad::{f32s, tensor, unbroadcast};
    let a = input(gi.inputs, 0)?;
    let b = input(gi.inputs, 1)?;
    let n = ctx.node;
    let (alpha, beta) = (n.attr_float("alpha", 1.0)?, n.attr_float("beta", 1.0)?);
    let (ta, tb) = (n.attr_int("transA", 0)? != 0, n.attr_int("transB", 0)? != 0);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(OpError::shape("rank-2 A and B", (&a.shape, &b.shape)));
    }
    let (m, k) = if ta {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let nn = if tb { b.shape[0] } else { b.shape[1] };
    let (av, bv) = (f32s(gi.inputs, 0)?, f32s(gi.inputs, 1)?);
    let op_a = MatRef::row_major(&av, a.shape[1], ta);
    let op_b = MatRef::row_major(&bv, b.shape[1], tb);
    let gm = MatRef::row_major(gi.grad, nn, false);
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    let scaled = |mut v: Vec<f32>, s: f32| {
        if s != 1.0 {
            v.iter_mut().for_each(|x| *x *= s);
        }
        v
    };
    if gi.need(0) {
        let mut d = vec![0f32; m * k];
        if ta {
            sgemm(k, m, nn, op_b, t(gm), &mut d, false, true);
        } else {
            sgemm(m, k, nn, gm, t(op_b), &mut d, false, true);
        }
        out[0] = Some(tensor(&a.shape, scaled(d, alpha))?);
    }
    if gi.need(1) {
        let mut d = vec![0f32; k * nn];
        if tb {
            sgemm(nn, k, m, t(gm), op_a, &mut d, false, true);
        } else {
            sgemm(k, nn, m, t(op_a), gm, &mut d, false, true);
        }
        out[1] = Some(tensor(&b.shape, scaled(d, alpha))?);
    }
    if gi.need(2) {
        if let Some(c) = opt_input(gi.inputs, 2) {
            let d = unbroadcast(gi.grad, &[m, nn], &c.shape);
            out[2] = Some(tensor(&c.shape, scaled(d, beta))?);
        }
    }
    Ok(out)
}

/// The transpose of a strided view.
fn t(v: MatRef<'_>) -> MatRef<'_> {
    MatRef {
        data: v.data,
        rs: v.cs,
        cs: v.rs,
    }
}

/// `Gemm` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Gemm", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            weight: Some(1),
            quant_inputs: super::QuantInputs::First,
            qlinear: Some(super::OpKind::QGemm),
            integer: Some(super::OpKind::MatMulInteger),
            ..super::Facts::NONE
        });
