//! `Binarizer` (ai.onnx.ml, version 1): `1` where the input exceeds `threshold` (default
//! 0), else `0`, in the input's element type (NaN is not above any threshold).

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{Data, Tensor};

/// Evaluates `Binarizer`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.dtype.is_float() || matches!(x.dtype, crate::tensor::DType::I32 | crate::tensor::DType::I64) {
        let t = ctx.node.attr_float("threshold", 0.0)? as f64;
        let y: Vec<f64> = x
            .to_f64_vec()
            .into_iter()
            .map(|v| if v > t { 1.0 } else { 0.0 })
            .collect();
        let y = Tensor::new(x.shape.clone(), Data::F64(y)).map_err(|e| OpError::Invalid(e.to_string()))?;
        Ok(vec![y.cast(x.dtype)])
    } else {
        Err(OpError::DType {
            index: 0,
            expected: "float, double, int32 or int64".into(),
            got: x.dtype.to_string(),
        })
    }
}

/// `Binarizer` in the operator registry (domain `ai.onnx.ml`).
pub const DEF: super::OpDef = super::OpDef::onnx("Binarizer", 1, eval)
    .domain(super::ML_DOMAIN)
    .infer(super::same_as_first)
    .facts(super::Facts::ELEMENTWISE);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn above_threshold_is_one() {
        let n = Node::new("b", "Binarizer", &["x"], &["y"]).with_attr("threshold", AttrValue::Float(0.5));
        let x = Tensor::from_f32(&[4], vec![0.5, 0.6, -1.0, f32::NAN]);
        let y = eval(&OpCtx { node: &n, opset: 1 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f32_vec(), vec![0.0, 1.0, 0.0, 0.0]);
        assert!(eval(&OpCtx { node: &n, opset: 1 }, &[Some(&Tensor::zeros(crate::tensor::DType::U8, &[1]))]).is_err());
    }
}
