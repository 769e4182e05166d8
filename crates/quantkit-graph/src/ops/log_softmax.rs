//! `LogSoftmax`: `y = x − max − log Σ exp(x − max)` over the softmax blocks. Opset ≥ 13:
//! along one `axis` (default −1); opsets < 13: the input coerced to 2-D at `axis`
//! (default 1), as [`super::softmax::blocks`] describes. Computes in f64.

use super::softmax::{blocks, float_data};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `LogSoftmax`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if !x.dtype.is_float() {
        return Err(OpError::DType {
            index: 0,
            expected: "float".into(),
            got: x.dtype.to_string(),
        });
    }
    let (outer, len, inner) = blocks(ctx, x)?;
    let v = x.to_f64_vec();
    let mut y = vec![0f32; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| (o * len + k) * inner + i;
            let m = (0..len).map(|k| v[at(k)]).fold(f64::NEG_INFINITY, f64::max);
            let lse = (0..len).map(|k| (v[at(k)] - m).exp()).sum::<f64>().ln();
            for k in 0..len {
                y[at(k)] = (v[at(k)] - m - lse) as f32;
            }
        }
    }
    make(x.dtype, x.shape.clone(), float_data(x.dtype, y)?).map(|t| vec![t])
}

/// `LogSoftmax` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("LogSoftmax", 1, eval).infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn before_13_the_input_is_coerced_to_2d() {
        let x = Tensor::from_f32(&[2, 2, 2], vec![0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0]);
        let n = Node::new("l", "LogSoftmax", &["x"], &["y"]).with_attr("axis", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x)]).unwrap();
        let lse = (0..4).map(|k| (k as f64).exp()).sum::<f64>().ln();
        let want: Vec<f32> = (0..4)
            .map(|k| (k as f64 - lse) as f32)
            .chain([-(4f32.ln()); 4])
            .collect();
        for (a, b) in y[0].as_f32().unwrap().iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        // From 13 the same axis is a single axis: pairs along axis 1.
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        let pair = -(1f32 + 2f32.exp()).ln();
        assert!((y[0].as_f32().unwrap()[0] - pair).abs() < 1e-6);
    }
}
