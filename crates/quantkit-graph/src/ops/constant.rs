//! `Constant`: outputs its attribute value. Import turns Constant nodes into initializers;
//! this implementation serves graphs built in code.

use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Constant`.
pub fn eval(ctx: &OpCtx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    match crate::onnx::constant_value(ctx.node) {
        Ok(Some(t)) => Ok(vec![t]),
        Ok(None) => Err(OpError::Unsupported(
            "Constant of a string or sparse value".into(),
        )),
        Err(e) => Err(OpError::Invalid(e.to_string())),
    }
}

/// `Constant` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Constant", 1, eval);
