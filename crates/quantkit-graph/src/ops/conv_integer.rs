//! `ConvInteger`: `Y(int32) = conv(x − x_zero_point, w − w_zero_point)`, exact integer
//! convolution (padding contributes zero after the zero-point shift, i.e. pads hold
//! x_zero_point). `w_zero_point` may be per output channel.

use super::conv::ConvGeom;
use super::int_kernels::{self, IntPath};
use super::{first_i64, input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Exact integer convolution of zero-point-corrected operands (i64 accumulators), with an
/// optional bias per output channel.
pub fn conv_i64(g: &ConvGeom, x: &[i64], w: &[i64], bias: Option<&[i64]>) -> Vec<i64> {
    let p = g.out_len();
    let rows = g.col_rows();
    let mg = g.m / g.group;
    let in_len = g.c * g.in_sp.iter().product::<usize>();
    let mut y = vec![0i64; g.n * g.m * p];
    let mut col = vec![0i64; rows * p];
    for ni in 0..g.n {
        for gi in 0..g.group {
            g.im2col(
                &x[ni * in_len..(ni + 1) * in_len],
                gi * (g.c / g.group),
                &mut col,
                0,
            );
            for mi in 0..mg {
                let mo = gi * mg + mi;
                let wr = &w[mo * rows..(mo + 1) * rows];
                let yr = &mut y[(ni * g.m + mo) * p..(ni * g.m + mo + 1) * p];
                if let Some(b) = bias {
                    yr.fill(b[mo]);
                }
                for (r, &wv) in wr.iter().enumerate() {
                    if wv == 0 {
                        continue;
                    }
                    for (yv, &cv) in yr.iter_mut().zip(&col[r * p..(r + 1) * p]) {
                        *yv += wv * cv;
                    }
                }
            }
        }
    }
    y
}

/// Subtracts a per-tensor or per-output-channel zero point from weights `[M, ...]`.
pub fn shift_weights(w: &Tensor, zp: Option<&Tensor>) -> Result<Vec<i64>, OpError> {
    let mut wv = w.to_i64_vec();
    if let Some(z) = zp {
        let z = z.to_i64_vec();
        let m = w.shape[0];
        let per = w.len() / m.max(1);
        if z.len() == 1 {
            wv.iter_mut().for_each(|v| *v -= z[0]);
        } else if z.len() == m {
            wv.iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v -= z[i / per]);
        } else {
            return Err(OpError::shape(
                format!("weight zero point of 1 or {m} elements"),
                z.len(),
            ));
        }
    }
    Ok(wv)
}

/// Evaluates `ConvInteger`, on the `quantkit_kernels` convolution when the case is eligible
/// (see [`super::int_kernels`]), with the i64 reference otherwise.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, true).map(|(y, _)| y)
}

/// Evaluates `ConvInteger` with the i64 reference [`conv_i64`] only.
pub fn eval_reference(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, false).map(|(y, _)| y)
}

/// Evaluates `ConvInteger`, on the kernels when `use_kernels` is set and the case is
/// eligible, and reports which path computed the result.
pub fn eval_with(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    use_kernels: bool,
) -> Result<(Vec<Tensor>, IntPath), OpError> {
    let x = input(inputs, 0)?;
    let w = input(inputs, 1)?;
    let g = ConvGeom::new(ctx, &x.shape, &w.shape)?;
    let xz = match opt_input(inputs, 2) {
        Some(z) => first_i64(z, 2)?,
        None => 0,
    };
    let wz = match opt_input(inputs, 3) {
        Some(z) => z.to_i64_vec(),
        None => vec![0],
    };
    let mut shape = vec![g.n, g.m];
    shape.extend_from_slice(&g.out_sp);
    let single_xz = opt_input(inputs, 2).is_none_or(|z| z.len() == 1);
    if use_kernels && single_xz {
        if let Some(y) = int_kernels::conv_acc(&g, x, xz, w, &wz) {
            return Ok((
                vec![make(DType::I32, shape, Data::I32(y))?],
                IntPath::Kernel,
            ));
        }
    }
    let xv: Vec<i64> = x.to_i64_vec().iter().map(|v| v - xz).collect();
    let wv = shift_weights(w, opt_input(inputs, 3))?;
    let y = conv_i64(&g, &xv, &wv, None);
    Ok((
        vec![make(
            DType::I32,
            shape,
            Data::I32(y.iter().map(|&v| v as i32).collect()),
        )?],
        IntPath::Reference,
    ))
}

/// `ConvInteger` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("ConvInteger", 10, eval).facts(super::Facts::QUANTIZED);
