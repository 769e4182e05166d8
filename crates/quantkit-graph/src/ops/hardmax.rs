//! `Hardmax`: 1 at the first maximum of each softmax block, 0 elsewhere. Opset ≥ 13: along
//! one `axis` (default −1); opsets < 13: the input coerced to 2-D at `axis` (default 1),
//! as [`super::softmax::blocks`] describes.

use super::softmax::{blocks, float_data};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Hardmax`.
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
            let best = (1..len).fold(0, |b, k| if v[at(k)] > v[at(b)] { k } else { b });
            if len > 0 {
                y[at(best)] = 1.0;
            }
        }
    }
    make(x.dtype, x.shape.clone(), float_data(x.dtype, y)?).map(|t| vec![t])
}

/// `Hardmax` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Hardmax", 1, eval).infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn first_maximum_per_block_before_and_from_13() {
        let x = Tensor::from_f32(&[2, 2, 2], vec![0.0, 3.0, 3.0, 1.0, 5.0, 5.0, 5.0, 5.0]);
        let n = Node::new("h", "Hardmax", &["x"], &["y"]).with_attr("axis", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &n, opset: 11 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        let y = eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].as_f32().unwrap(), [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    }
}
