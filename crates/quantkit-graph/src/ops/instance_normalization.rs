//! `InstanceNormalization` (opset 6; opset 1's `consumed_inputs` is ignored):
//! `y = scale[c] · (x − mean) / √(var + epsilon) + B[c]`, the mean and (biased) variance
//! taken per image and channel over the spatial axes of an `N × C × D1 × ...` input.

use super::norm::{mean_var, per_channel, require_float};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `InstanceNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    if x.rank() < 2 {
        return Err(OpError::shape("an input of rank ≥ 2 (N × C × ...)", &x.shape));
    }
    let eps = ctx.node.attr_float("epsilon", 1e-5)? as f64;
    let c = x.shape[1];
    let scale = per_channel(input(inputs, 1)?, 1, c, "scale")?;
    let bias = per_channel(input(inputs, 2)?, 2, c, "B")?;
    let inner: usize = x.shape[2..].iter().product();
    let xv = x.to_f64_vec();
    let mut y = vec![0f64; xv.len()];
    if inner > 0 {
        for (i, (row, out)) in xv.chunks(inner).zip(y.chunks_mut(inner)).enumerate() {
            let ch = i % c;
            let (m, var) = mean_var(row.iter().copied());
            let k = scale[ch] / (var + eps).sqrt();
            for (o, &v) in out.iter_mut().zip(row) {
                *o = (v - m) * k + bias[ch];
            }
        }
    }
    Ok(vec![
        make(DType::F64, x.shape.clone(), Data::F64(y))?.cast(x.dtype)
    ])
}

/// `InstanceNormalization` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("InstanceNormalization", 6, eval)
    .infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn normalizes_each_channel_and_checks_parameter_shapes() {
        let n = Node::new("i", "InstanceNormalization", &["x", "s", "b"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 6 };
        let x = Tensor::from_f32(&[1, 2, 2], vec![1.0, 3.0, 10.0, 10.0]);
        let s = Tensor::from_f32(&[2], vec![1.0, 1.0]);
        let b = Tensor::from_f32(&[2], vec![0.0, 5.0]);
        let y = eval(&ctx, &[Some(&x), Some(&s), Some(&b)]).unwrap();
        let v = y[0].as_f32().unwrap();
        assert!((v[0] + 1.0).abs() < 1e-4 && (v[1] - 1.0).abs() < 1e-4);
        assert_eq!(&v[2..], &[5.0, 5.0]);
        let s3 = Tensor::from_f32(&[3], vec![1.0; 3]);
        assert!(matches!(
            eval(&ctx, &[Some(&x), Some(&s3), Some(&b)]),
            Err(OpError::ShapeMismatch { .. })
        ));
        let xi = Tensor::from_i64(&[1, 2, 1], vec![1, 2]);
        assert!(matches!(
            eval(&ctx, &[Some(&xi), Some(&s), Some(&b)]),
            Err(OpError::DType { .. })
        ));
        assert!(matches!(
            eval(&ctx, &[Some(&x), Some(&s)]),
            Err(OpError::MissingInput { index: 2 })
        ));
    }
}
