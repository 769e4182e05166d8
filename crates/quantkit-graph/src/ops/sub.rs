//! `Sub`: element-wise sub with numpy broadcasting (ONNX opsets 7, 13, 14).

use super::binary::{eval_arith, Arith};
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Sub`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_arith(Arith::Sub, inputs)
}
