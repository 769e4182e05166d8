//! Training for quantkit, on the graph IR: any float graph runs forward through the
//! operator registry's `eval` (the float executor's own f32 forward, so there is one per
//! operator in the project) and backward through each operator's `OpDef::backward`
//! ([`graph::GraphNet`]). On top of it: losses, optimizers, the model zoo and its training
//! loop ([`trainer`]), and quantization-aware training from the PTQ plan ([`qat`]).
//!
//! ```
//! use std::collections::HashMap;
//! use quantkit_graph::{DType, Graph, Node, OpKind, Tensor, ValueInfo};
//! use quantkit_train::graph::GraphNet;
//!
//! // y = Relu(x · W): the weight is trainable because MatMul reads it as input 1.
//! let mut g = Graph::default();
//! g.opset_imports = vec![(String::new(), 17)];
//! g.inputs.push(ValueInfo::new("x", DType::F32, &[1, 2]));
//! g.outputs.push(ValueInfo::new("y", DType::F32, &[1, 1]));
//! g.initializers.insert("w".into(), Tensor::from_f32(&[2, 1], vec![1.0, -1.0]));
//! g.nodes.push(Node::of(OpKind::MatMul, "mm", &["x", "w"], &["h"]));
//! g.nodes.push(Node::of(OpKind::Relu, "relu", &["h"], &["y"]));
//! let mut net = GraphNet::build(&g, &HashMap::new(), &HashMap::new()).unwrap();
//! let v = net.forward(vec![Tensor::from_f32(&[1, 2], vec![3.0, 1.0])]).unwrap();
//! assert_eq!(net.outputs(&v)[0].to_f32_vec(), vec![2.0]);
//! net.backward(&v, vec![Some(vec![1.0])]).unwrap();
//! // ∂y/∂W = xᵀ where the ReLU passes.
//! assert_eq!(net.params.iter().next().unwrap().grad.data(), &[3.0, 1.0]);
//! ```

pub mod augment;
pub mod ema;
pub mod error;
pub mod exact;
pub mod export;
pub mod graph;
pub mod losses;
pub mod model;
pub mod optim;
pub mod params;
pub mod profile;
pub mod qat;
pub mod qat_init;
pub mod rng;
pub mod tensor;
pub mod trainer;
pub mod zoo;

pub use error::{Result, TrainError};
