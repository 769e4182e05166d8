//! Graph IR, ONNX import/export, one file per operator, passes, and the float executor.
//!
//! ```no_run
//! use quantkit_graph::{load_model, execute_with, Tensor};
//! let graph = load_model("model.onnx")?;
//! let x = Tensor::from_f32(&[1, 3, 48, 192], vec![0.0; 3 * 48 * 192]);
//! let outputs = execute_with(&graph, vec![("x".into(), x)], |name, t| {
//!     println!("{name}: {:?}", t.shape); // calibration observers hook in here
//! })?;
//! # Ok::<(), quantkit_graph::GraphError>(())
//! ```

// Kernels index several arrays with one loop counter and take many geometry arguments;
// rewriting them as iterator chains or parameter structs would hide the formulas.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

pub mod conformance;
pub mod error;
pub mod exec;
pub mod ir;
pub mod linalg;
pub mod onnx;
pub mod ops;
pub mod passes;
pub mod shape_infer;
pub mod tensor;

pub use error::{GraphError, OpError, Result};
pub use exec::{execute, execute_with, plan};
pub use ir::{AttrValue, Dim, Graph, ModelMeta, Node, Uses, ValueInfo};
pub use onnx::{export_model, import_model, load_model, load_tensor_pb, save_model};
pub use ops::{Facts, OpKind, QuantInputs, MS_DOMAIN};
pub use tensor::{CastOptions, DType, Data, Element, Tensor};
