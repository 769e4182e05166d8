//! `Size` (opset 1; 13, 19, 21, 23, 24 and 25 only add element types): the number of
//! elements of the input, as an int64 scalar.

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Size`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    Ok(vec![Tensor::from_i64(&[], vec![x.len() as i64])])
}

/// Static shape rule: an int64 scalar, whatever the input.
pub fn infer(_ctx: &OpCtx, _inp: &super::InferIn) -> Option<Vec<super::Info>> {
    Some(vec![(crate::tensor::DType::I64, Vec::new())])
}

/// `Size` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Size", 1, eval).infer(infer)
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;
    use crate::tensor::{DType, Tensor};

    #[test]
    fn counts_elements_of_any_type() {
        let n = Node::new("s", "Size", &["x"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 21 };
        let x = Tensor::zeros(DType::U8, &[2, 0, 3]);
        assert_eq!(eval(&ctx, &[Some(&x)]).unwrap()[0], Tensor::from_i64(&[], vec![0]));
        let x = Tensor::zeros(DType::Bool, &[2, 3]);
        assert_eq!(eval(&ctx, &[Some(&x)]).unwrap()[0], Tensor::from_i64(&[], vec![6]));
        assert!(eval(&ctx, &[None]).is_err());
    }
}
