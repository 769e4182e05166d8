//! A dense f32 tensor: a shape and a row-major (NCHW for images) buffer. It holds the
//! trainable parameters and their gradients ([`crate::params::ParamStore`], the
//! optimizers) and the zoo's image batches; every operator runs on `quantkit-graph`'s
//! tensors.

use crate::error::{shape_err, Result};

/// Dense f32 tensor in row-major order (images are NCHW).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl Tensor {
    /// Builds a tensor; fails when `data.len()` is not the product of `shape`.
    pub fn new(shape: &[usize], data: Vec<f32>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(shape_err(
                "Tensor::new",
                format!("{} elements for shape {shape:?}", n),
                &[data.len()],
            ));
        }
        Ok(Self {
            shape: shape.to_vec(),
            data,
        })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: &[usize]) -> Self {
        Self::full(shape, 0.0)
    }

    /// A tensor filled with `v`.
    pub fn full(shape: &[usize], v: f32) -> Self {
        Self {
            shape: shape.to_vec(),
            data: vec![v; shape.iter().product()],
        }
    }

    /// A scalar (shape `[]`).
    pub fn scalar(v: f32) -> Self {
        Self {
            shape: vec![],
            data: vec![v],
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The elements, row-major.
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// The elements, mutable.
    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// Consumes the tensor, returning its buffer.
    pub fn into_data(self) -> Vec<f32> {
        self.data
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the tensor has no element.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The same buffer under another shape with the same element count.
    pub fn reshape(mut self, shape: &[usize]) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != self.data.len() {
            return Err(shape_err(
                "reshape",
                format!("{} elements for shape {shape:?}", n),
                &self.shape,
            ));
        }
        self.shape = shape.to_vec();
        Ok(self)
    }
}
