//! `LayerNormalization` (opset 17): normalizes over axes `axis..` then applies scale and
//! bias; optional outputs Mean and InvStdDev have the input shape with those axes set to 1.
//! Statistics are computed in f64.

use super::{input, make, norm_axis, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_index, DType, Data, Tensor};

/// Evaluates `LayerNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    let bias = opt_input(inputs, 2);
    let axis = norm_axis(ctx.node.attr_int("axis", -1)?, x.rank())?;
    let eps = ctx.node.attr_float("epsilon", 1e-5)? as f64;
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis..].iter().product();
    let norm_shape = &x.shape[axis..];
    // Checked before indexing: a Scale or B of higher rank than the normalised axes (or
    // not broadcastable to them) has no meaning and would index out of range.
    for (what, t) in [("scale", Some(scale)), ("bias", bias)] {
        let Some(t) = t else { continue };
        if crate::tensor::broadcast_shapes(&t.shape, norm_shape).as_deref() != Some(norm_shape) {
            return Err(OpError::shape(
                format!("{what} broadcastable to the normalised axes {norm_shape:?}"),
                &t.shape,
            ));
        }
    }
    let si = broadcast_index(&scale.shape, norm_shape);
    let sv = scale.to_f64_vec();
    let bv = bias.map(|b| (b.to_f64_vec(), broadcast_index(&b.shape, norm_shape)));
    let xv = x.to_f64_vec();
    let mut y = vec![0f64; xv.len()];
    let mut means = Vec::with_capacity(outer);
    let mut inv = Vec::with_capacity(outer);
    for o in 0..outer {
        let row = &xv[o * inner..(o + 1) * inner];
        let m = row.iter().sum::<f64>() / inner as f64;
        let var = row.iter().map(|v| (v - m).powi(2)).sum::<f64>() / inner as f64;
        let is = 1.0 / (var + eps).sqrt();
        for j in 0..inner {
            let mut v = (row[j] - m) * is * sv[si[j]];
            if let Some((b, bi)) = &bv {
                v += b[bi[j]];
            }
            y[o * inner + j] = v;
        }
        means.push(m);
        inv.push(is);
    }
    let mut stat_shape = x.shape[..axis].to_vec();
    stat_shape.extend(std::iter::repeat_n(1, x.rank() - axis));
    Ok(vec![
        make(DType::F64, x.shape.clone(), Data::F64(y))?.cast(x.dtype),
        make(DType::F64, stat_shape.clone(), Data::F64(means))?.cast(DType::F32),
        make(DType::F64, stat_shape, Data::F64(inv))?.cast(DType::F32),
    ])
}

/// `LayerNormalization` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("LayerNormalization", 17, eval).infer(super::registry::same_as_first);
