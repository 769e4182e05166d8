//! Shape-only ops: `Flatten` (ONNX, axis 1) and `Reshape`.

use std::any::Any;

use crate::error::{shape_err, Result};
use crate::tape::Op;
use crate::tensor::Tensor;

/// `[N, d1, d2, ...] → [N, d1·d2·...]` (ONNX `Flatten` with axis 1).
#[derive(Debug, Default)]
pub struct Flatten;

impl Op for Flatten {
    fn name(&self) -> &'static str {
        "Flatten"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let s = inputs[0].shape();
        if s.is_empty() {
            return Err(shape_err("Flatten", "a tensor of rank ≥ 1", s));
        }
        let rest: usize = s[1..].iter().product();
        inputs[0].clone().reshape(&[s[0], rest])
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(grad.clone().reshape(inputs[0].shape())?)])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Reshape to a fixed shape with the same element count.
#[derive(Debug)]
pub struct Reshape {
    /// Target shape.
    pub shape: Vec<usize>,
}

impl Op for Reshape {
    fn name(&self) -> &'static str {
        "Reshape"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        inputs[0].clone().reshape(&self.shape)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(grad.clone().reshape(inputs[0].shape())?)])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
