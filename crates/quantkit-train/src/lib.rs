//! Training for quantkit: a small reverse-mode autodiff tape over f32 NCHW tensors, the ops
//! the reference models need (forward and backward), optimizers, the model zoo and the
//! training loop. The same tape is meant to carry fake-quant nodes for QAT: any type that
//! implements [`tape::Op`] can be recorded.
//!
//! ```
//! use quantkit_train::{tape::Tape, tensor::Tensor, ops::Relu};
//! let mut tape = Tape::new();
//! let x = tape.variable(Tensor::new(&[3], vec![-1.0, 2.0, 3.0]).unwrap());
//! let y = tape.apply(Relu, &[x]).unwrap();
//! let grads = tape.backward(y).unwrap();
//! assert_eq!(grads.get(x).unwrap().data(), &[0.0, 1.0, 1.0]);
//! ```

pub mod augment;
pub mod error;
pub mod exact;
pub mod export;
pub mod gemm;
pub mod graph;
pub mod losses;
pub mod model;
pub mod ops;
pub mod optim;
pub mod params;
pub mod qat;
pub mod rng;
pub mod tape;
pub mod tensor;
pub mod trainer;
pub mod zoo;

pub use error::{Result, TrainError};
