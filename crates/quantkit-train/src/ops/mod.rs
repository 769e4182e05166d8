//! Differentiable operators, one per file. Each implements [`crate::tape::Op`].

pub mod add;
pub mod batch_norm;
pub mod conv;
pub mod conv_transpose;
pub mod elementwise;
pub mod im2col;
pub mod linear;
pub mod loss;
pub mod pool;
pub mod shape;

pub use add::Add;
pub use batch_norm::BatchNorm2d;
pub use conv::{Conv2d, ConvAttrs};
pub use conv_transpose::{ConvTranspose2d, ConvTransposeAttrs};
pub use elementwise::{HardSwish, Normalize, Relu, Sigmoid};
pub use linear::{Linear, MatMul};
pub use loss::{MseLoss, SoftmaxCrossEntropy};
pub use pool::{GlobalAvgPool, MaxPool2d, PoolAttrs};
pub use shape::{Flatten, Reshape};

#[cfg(test)]
mod gradcheck;
