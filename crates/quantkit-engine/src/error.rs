//! Typed errors of the engine. Every variant names the node or tensor concerned.

use quantkit_graph::{GraphError, OpError};
use quantkit_kernels::KernelError;

/// Errors of [`crate::compile`] and [`crate::Plan::run`].
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// An input name the graph does not declare.
    #[error("unknown input `{name}` (the model's inputs: {known})")]
    UnknownInput {
        /// The name given.
        name: String,
        /// The declared inputs, comma separated.
        known: String,
    },
    /// A declared input was not given.
    #[error("input `{name}` is missing")]
    MissingInput {
        /// Input name.
        name: String,
    },
    /// An input tensor whose type or shape differs from the declaration.
    #[error("input `{name}`: expected {expected}, got {got}")]
    InputMismatch {
        /// Input name.
        name: String,
        /// Declared type and shape.
        expected: String,
        /// Given type and shape.
        got: String,
    },
    /// A node whose operator neither an integer kernel nor the graph crate implements.
    #[error("node `{node}`: no implementation of {domain}::{op_type}")]
    UnknownOp {
        /// Node name.
        node: String,
        /// Operator.
        op_type: String,
        /// Operator domain.
        domain: String,
    },
    /// A value read by a step that nothing produces.
    #[error("node `{node}`: value `{value}` is never produced")]
    MissingValue {
        /// Node name.
        node: String,
        /// Value name.
        value: String,
    },
    /// A float-island (or layout) operator failed.
    #[error("node `{node}` ({op_type}): {source}")]
    Op {
        /// Node name.
        node: String,
        /// Operator.
        op_type: String,
        /// The operator's error.
        source: OpError,
    },
    /// A control-flow node (If, Loop, Scan) failed while the float executor ran its
    /// subgraphs (the source names the inner node).
    #[error("node `{node}` (control flow): {source}")]
    Control {
        /// Node name.
        node: String,
        /// The executor's error.
        source: Box<quantkit_graph::GraphError>,
    },
    /// An integer kernel rejected its operands.
    #[error("node `{node}` ({op_type}), integer kernel: {source}")]
    Kernel {
        /// Node name (the pattern's anchor node).
        node: String,
        /// Operator.
        op_type: String,
        /// The kernel's error.
        source: KernelError,
    },
    /// An integer step got a tensor it cannot take (wrong rank or element type).
    #[error("node `{node}` ({op_type}): input `{value}`: {reason}")]
    BadOperand {
        /// Node name.
        node: String,
        /// Operator.
        op_type: String,
        /// Value name.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// A graph-level error (structure, constant folding).
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// Result alias of the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
