//! `ArrayFeatureExtractor` (ai.onnx.ml, version 1): picks entries of the last axis of `X`
//! by the int64 `Y` indices (flattened), giving `X.shape[..-1] + [len(Y)]`; a 1-D `X`
//! gives one row `[1, len(Y)]`, as ONNX Runtime and the ONNX reference do. Indices must
//! lie in `[0, X.shape[-1])`.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `ArrayFeatureExtractor`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let y = input(inputs, 1)?;
    if y.dtype.is_float() {
        return Err(OpError::DType {
            index: 1,
            expected: "int64 indices".into(),
            got: y.dtype.to_string(),
        });
    }
    let width = *x
        .shape
        .last()
        .ok_or_else(|| OpError::shape("X of rank ≥ 1", &x.shape))?;
    let picks: Vec<usize> = y
        .to_i64_vec()
        .into_iter()
        .map(|i| usize::try_from(i).ok().filter(|&i| i < width))
        .collect::<Option<_>>()
        .ok_or_else(|| OpError::Invalid(format!("an index of Y is outside [0, {width})")))?;
    let rows = x.len() / width.max(1);
    let total = rows
        .checked_mul(picks.len())
        .filter(|&n| n <= 1 << 28)
        .ok_or_else(|| OpError::Invalid("output is too large".into()))?;
    let mut idx = Vec::with_capacity(total);
    for r in 0..rows {
        idx.extend(picks.iter().map(|&p| r * width + p));
    }
    let mut shape = if x.rank() == 1 { vec![1] } else { x.shape[..x.rank() - 1].to_vec() };
    shape.push(picks.len());
    Ok(vec![Tensor::new(shape, x.data.gather(&idx))
        .map_err(|e| OpError::Invalid(e.to_string()))?
        .with_dtype(x.dtype)])
}

/// `ArrayFeatureExtractor` in the operator registry (domain `ai.onnx.ml`).
pub const DEF: super::OpDef = super::OpDef::onnx("ArrayFeatureExtractor", 1, eval)
    .domain(super::ML_DOMAIN);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn picks_last_axis_entries() {
        let n = Node::new("a", "ArrayFeatureExtractor", &["x", "y"], &["z"]);
        let ctx = OpCtx { node: &n, opset: 1 };
        let x = Tensor::from_f32(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let y = Tensor::from_i64(&[2], vec![2, 0]);
        let z = eval(&ctx, &[Some(&x), Some(&y)]).unwrap();
        assert_eq!(z[0].shape, vec![2, 2]);
        assert_eq!(z[0].to_f32_vec(), vec![2.0, 0.0, 5.0, 3.0]);
        let v = Tensor::from_f32(&[3], vec![7.0, 8.0, 9.0]);
        assert_eq!(eval(&ctx, &[Some(&v), Some(&y)]).unwrap()[0].shape, vec![1, 2]);
        let bad = Tensor::from_i64(&[1], vec![3]);
        assert!(eval(&ctx, &[Some(&x), Some(&bad)]).is_err());
    }
}
