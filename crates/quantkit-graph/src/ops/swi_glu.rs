//! `SwiGLU` (opset 28): `Y = A · σ(α·A) · B` for a gate `A` and a value `B` of the same
//! shape (no broadcasting), `alpha` default 1.0 (the `Swish` of the same `alpha`).
//! Float inputs; computed in f64 per element and cast back.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `SwiGLU`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = input(inputs, 0)?;
    let b = input(inputs, 1)?;
    if a.shape != b.shape {
        return Err(OpError::shape(format!("B of shape {:?} (as A)", a.shape), &b.shape));
    }
    if !a.dtype.is_float() || a.dtype != b.dtype {
        return Err(OpError::DType {
            index: 1,
            expected: format!("float, as A ({})", a.dtype),
            got: b.dtype.to_string(),
        });
    }
    let alpha = ctx.node.attr_float("alpha", 1.0)? as f64;
    let y: Vec<f64> = a
        .to_f64_vec()
        .into_iter()
        .zip(b.to_f64_vec())
        .map(|(g, v)| g / (1.0 + (-alpha * g).exp()) * v)
        .collect();
    let t = Tensor::new(a.shape.clone(), Data::F64(y)).map_err(|e| OpError::Invalid(e.to_string()))?;
    Ok(vec![t.cast(a.dtype)])
}

/// `SwiGLU` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("SwiGLU", 28, eval)
    .infer(super::same_as_first)
    .facts(super::Facts::ELEMENTWISE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn gate_times_value_and_shape_check() {
        let n = Node::new("s", "SwiGLU", &["a", "b"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 28 };
        let a = Tensor::from_f32(&[2], vec![0.0, 2.0]);
        let b = Tensor::from_f32(&[2], vec![3.0, 0.5]);
        let y = eval(&ctx, &[Some(&a), Some(&b)]).unwrap()[0].to_f32_vec();
        let want = 2.0 / (1.0 + (-2.0f32).exp()) * 0.5;
        assert_eq!(y[0], 0.0);
        assert!((y[1] - want).abs() < 1e-6);
        let c = Tensor::from_f32(&[1, 2], vec![0.0; 2]);
        assert!(eval(&ctx, &[Some(&a), Some(&c)]).is_err());
    }
}
