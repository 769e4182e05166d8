//! `Sum`: element-wise sum of one or more inputs. Opsets < 8 require equal shapes; from 8
//! the inputs broadcast (numpy rules), which also covers the equal-shape case.

use super::binary::{eval_arith, Arith};
use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{broadcast_shapes, Tensor};

/// Evaluates `Sum`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let mut acc = input(inputs, 0)?.clone();
    for i in 1..inputs.len() {
        let x = input(inputs, i)?;
        acc = eval_arith(Arith::Add, &[Some(&acc), Some(x)])
            .map_err(|e| match e {
                OpError::DType { expected, got, .. } => OpError::DType {
                    index: i,
                    expected,
                    got,
                },
                e => e,
            })?
            .remove(0);
    }
    Ok(vec![acc])
}

/// Static shape rule: the broadcast of every input shape.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let first = inp.get(0)?;
    let mut shape = first.1.clone();
    for i in 1..inp.ins.len() {
        shape = broadcast_shapes(&shape, &inp.get(i)?.1)?;
    }
    Some(vec![(first.0, shape)])
}

/// `Sum` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Sum", 1, eval)
    .infer(infer)
    .facts(super::Facts::ELEMENTWISE);
