//! `RMSNormalization` (opset 23): y = x / √(mean(x²) + epsilon) · scale, the mean taken
//! over the axes `axis..` (default −1) and `scale` unidirectionally broadcast to `x`.
//! `stash_type` names the precision of the first stage; quantkit always accumulates in
//! f64, at least as precise as any the attribute names.

use super::norm::require_float;
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_index, broadcast_shapes, DType, Data, Tensor};

/// Evaluates `RMSNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let scale = input(inputs, 1)?;
    require_float(x, 0)?;
    require_float(scale, 1)?;
    let axis = norm_axis(ctx.node.attr_int("axis", -1)?, x.rank())?;
    let eps = ctx.node.attr_float("epsilon", 1e-5)? as f64;
    if broadcast_shapes(&scale.shape, &x.shape).as_deref() != Some(x.shape.as_slice()) {
        return Err(OpError::shape(
            format!("scale unidirectionally broadcastable to {:?}", x.shape),
            &scale.shape,
        ));
    }
    let inner: usize = x.shape[axis..].iter().product();
    let si = broadcast_index(&scale.shape, &x.shape);
    let sv = scale.to_f64_vec();
    let xv = x.to_f64_vec();
    let mut y = vec![0f64; xv.len()];
    if inner > 0 {
        for (r, (row, out)) in xv.chunks(inner).zip(y.chunks_mut(inner)).enumerate() {
            let ms = row.iter().map(|v| v * v).sum::<f64>() / inner as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            for (j, (o, &v)) in out.iter_mut().zip(row).enumerate() {
                *o = v * inv * sv[si[r * inner + j]];
            }
        }
    }
    Ok(vec![
        make(DType::F64, x.shape.clone(), Data::F64(y))?.cast(x.dtype)
    ])
}

/// `RMSNormalization` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("RMSNormalization", 23, eval)
    .infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn scale_broadcasts_to_the_input_and_bad_axes_fail() {
        let n = Node::new("r", "RMSNormalization", &["x", "s"], &["y"])
            .with_attr("epsilon", AttrValue::Float(0.0));
        let ctx = OpCtx { node: &n, opset: 23 };
        let x = Tensor::from_f32(&[2, 2], vec![3.0, 4.0, 0.0, 2.0]);
        let s = Tensor::from_f32(&[2], vec![1.0, 10.0]);
        let y = eval(&ctx, &[Some(&x), Some(&s)]).unwrap();
        let r0 = (12.5f32).sqrt();
        let r1 = (2.0f32).sqrt();
        let want = [3.0 / r0, 40.0 / r0, 0.0, 20.0 / r1];
        for (a, b) in y[0].as_f32().unwrap().iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        let s3 = Tensor::from_f32(&[3], vec![1.0; 3]);
        assert!(matches!(
            eval(&ctx, &[Some(&x), Some(&s3)]),
            Err(OpError::ShapeMismatch { .. })
        ));
        let n = n.with_attr("axis", AttrValue::Int(2));
        assert!(eval(&OpCtx { node: &n, opset: 23 }, &[Some(&x), Some(&s)]).is_err());
    }
}
