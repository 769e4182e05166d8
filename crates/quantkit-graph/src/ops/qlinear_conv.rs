//! `QLinearConv`: `acc = conv(x − x_zp, w − w_zp) + B(int32)` in exact integers, then
//! `y = saturate(round_half_even(acc · (x_scale·w_scale / y_scale)) + y_zp)` with the
//! multiplier per output channel when `w_scale` is 1-D (ONNX spec and reference).

use super::conv::ConvGeom;
use super::conv_integer::{conv_i64, shift_weights};
use super::int_kernels::{self, IntPath};
use super::qlinear_mat_mul::multiplier;
use super::{first_i64, input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `QLinearConv`, with the accumulators from the `quantkit_kernels` convolution
/// when the case is eligible (see [`super::int_kernels`]) and from the i64 reference
/// otherwise; the epilogue is the same either way.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, true).map(|(y, _)| y)
}

/// Evaluates `QLinearConv` with the i64 reference [`conv_i64`] only.
pub fn eval_reference(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_with(ctx, inputs, false).map(|(y, _)| y)
}

/// Evaluates `QLinearConv`, with the accumulators from the kernels when `use_kernels` is set
/// and the case is eligible, and reports which path computed them.
pub fn eval_with(
    ctx: &OpCtx,
    inputs: &[Option<&Tensor>],
    use_kernels: bool,
) -> Result<(Vec<Tensor>, IntPath), OpError> {
    let x = input(inputs, 0)?;
    let x_s = input(inputs, 1)?;
    let x_zp = input(inputs, 2)?;
    let w = input(inputs, 3)?;
    let w_s = input(inputs, 4)?;
    let w_zp = input(inputs, 5)?;
    let y_s = input(inputs, 6)?;
    let y_zp = input(inputs, 7)?;
    for (i, t) in [(1, x_s), (6, y_s)] {
        if t.is_empty() {
            return Err(OpError::shape(
                format!("a non-empty tensor at input {i}"),
                &t.shape,
            ));
        }
    }
    let g = ConvGeom::new(ctx, &x.shape, &w.shape)?;
    let xz = first_i64(x_zp, 2)?;
    let yz = first_i64(y_zp, 7)? as f64;
    let bias = opt_input(inputs, 8).map(|b| b.to_i64_vec());
    if let Some(b) = &bias {
        if b.len() != g.m {
            return Err(OpError::shape(format!("bias of {} elements", g.m), b.len()));
        }
    }
    let ws = w_s.to_f32_vec();
    if ws.len() != 1 && ws.len() != g.m {
        return Err(OpError::shape(
            format!("w_scale of 1 or {} elements", g.m),
            &w_s.shape,
        ));
    }
    // The bias is added in i64 after the kernel (not folded into its i32 accumulators), so
    // the overflow guard only has to bound the convolution itself.
    let kernel_acc = (use_kernels && x_zp.len() == 1)
        .then(|| int_kernels::conv_acc(&g, x, xz, w, &w_zp.to_i64_vec()))
        .flatten();
    let (acc, path) = match kernel_acc {
        Some(acc32) => {
            let p = g.out_len().max(1);
            let acc = acc32
                .iter()
                .enumerate()
                .map(|(i, &v)| i64::from(v) + bias.as_ref().map_or(0, |b| b[(i / p) % g.m]))
                .collect();
            (acc, IntPath::Kernel)
        }
        None => {
            let xv: Vec<i64> = x.to_i64_vec().iter().map(|v| v - xz).collect();
            let wv = shift_weights(w, Some(w_zp))?;
            (conv_i64(&g, &xv, &wv, bias.as_deref()), IntPath::Reference)
        }
    };
    let mults: Vec<f64> = ws
        .iter()
        .map(|&s| multiplier(x_s, s, y_s, w_s.dtype)[0])
        .collect();
    let (lo, hi) = y_zp
        .dtype
        .int_range()
        .ok_or_else(|| OpError::Unsupported(format!("output type {}", y_zp.dtype)))?;
    let p = g.out_len();
    let y: Vec<i64> = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let m = mults[if mults.len() == 1 {
                0
            } else {
                (i / p.max(1)) % g.m
            }];
            ((v as f64 * m + yz).round_ties_even() as i64).clamp(lo, hi)
        })
        .collect();
    let mut shape = vec![g.n, g.m];
    shape.extend_from_slice(&g.out_sp);
    Ok((
        vec![make(DType::I64, shape, Data::I64(y))?.cast(y_zp.dtype)],
        path,
    ))
}

/// `QLinearConv` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("QLinearConv", 10, eval).facts(super::Facts::QUANTIZED);
