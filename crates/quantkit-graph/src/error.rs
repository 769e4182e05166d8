//! Typed errors of the graph crate.

/// Error raised by one operator's evaluation or shape inference, before the executor adds
/// the node's name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    /// Shapes or ranks that the operator cannot accept.
    #[error("shape mismatch: expected {expected}, got {got}")]
    ShapeMismatch {
        /// What the operator needs.
        expected: String,
        /// What it was given.
        got: String,
    },
    /// A missing or malformed attribute.
    #[error("attribute `{name}`: {reason}")]
    Attribute {
        /// Attribute name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An input of a type the operator does not accept.
    #[error("input {index} has dtype {got}, expected {expected}")]
    DType {
        /// Input position.
        index: usize,
        /// Accepted types.
        expected: String,
        /// Given type.
        got: String,
    },
    /// A required input is absent.
    #[error("required input {index} is missing")]
    MissingInput {
        /// Input position.
        index: usize,
    },
    /// A legal ONNX feature this implementation does not support (yet).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Any other invalid operand.
    #[error("{0}")]
    Invalid(String),
    /// An output or buffer larger than the resource limits allow
    /// ([`quantkit_core::limits::Limits`]). Boxed: it is rare, and keeps `OpError` (held by
    /// every `GraphError::Op`) small.
    #[error(transparent)]
    Limit(Box<quantkit_core::limits::LimitError>),
}

impl From<quantkit_core::limits::LimitError> for OpError {
    fn from(e: quantkit_core::limits::LimitError) -> OpError {
        OpError::Limit(Box::new(e))
    }
}

impl OpError {
    /// Shorthand for a shape mismatch.
    pub fn shape(expected: impl Into<String>, got: impl std::fmt::Debug) -> OpError {
        OpError::ShapeMismatch {
            expected: expected.into(),
            got: format!("{got:?}"),
        }
    }
    /// Shorthand for an attribute error.
    pub fn attr(name: &str, reason: impl Into<String>) -> OpError {
        OpError::Attribute {
            name: name.to_string(),
            reason: reason.into(),
        }
    }
}

/// Errors of import, export, passes and execution. Every variant names the file, node or
/// tensor concerned.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The bytes are not a valid (complete) protobuf message.
    #[error("{what}: invalid or truncated protobuf: {source}")]
    Decode {
        /// File or message described.
        what: String,
        /// prost's description.
        source: prost::DecodeError,
    },
    /// The protobuf decoded but does not describe a usable model.
    #[error("{what}: invalid model: {reason}")]
    InvalidModel {
        /// File or element.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor's payload cannot be read.
    #[error("tensor `{tensor}`: {reason}")]
    InvalidTensor {
        /// Tensor name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor of an element type the IR does not hold (float8, bfloat16, string...).
    #[error("tensor `{tensor}`: data type {dtype} is not supported")]
    UnsupportedType {
        /// Tensor name.
        tensor: String,
        /// ONNX type name.
        dtype: String,
    },
    /// A node reads a value that no node, input or initializer produces.
    #[error("node `{node}` ({op_type}) reads `{value}`, which is neither a graph input, an initializer nor a node output")]
    MissingValue {
        /// Node name.
        node: String,
        /// Node op type.
        op_type: String,
        /// Missing value name.
        value: String,
    },
    /// No implementation for an operator.
    #[error("node `{node}`: unknown operator `{op_type}` in domain `{domain}`")]
    UnknownOp {
        /// Node name.
        node: String,
        /// Op type.
        op_type: String,
        /// Domain ("" is ai.onnx).
        domain: String,
    },
    /// An operator failed.
    #[error("node `{node}` ({op_type}): {source}")]
    Op {
        /// Node name.
        node: String,
        /// Op type.
        op_type: String,
        /// The operator's error.
        source: OpError,
    },
    /// The graph has a cycle or an output nobody produces.
    #[error("graph: {0}")]
    Structure(String),
    /// A tensor or file claiming more than the resource limits allow
    /// ([`quantkit_core::limits::Limits`]; the message names it and the size it claims).
    #[error(transparent)]
    Limit(#[from] quantkit_core::limits::LimitError),
    /// An input given to `execute` that the graph does not declare.
    #[error("`{name}` is not an input of the graph (inputs: {known})")]
    UnknownInput {
        /// Given name.
        name: String,
        /// Declared inputs.
        known: String,
    },
    /// A declared graph input that was not given.
    #[error("graph input `{name}` was not provided")]
    MissingInput {
        /// Input name.
        name: String,
    },
    /// A graph input given with the wrong dtype or shape.
    #[error("graph input `{name}`: expected {expected}, got {got}")]
    InputMismatch {
        /// Input name.
        name: String,
        /// Declared type/shape.
        expected: String,
        /// Given type/shape.
        got: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = GraphError> = std::result::Result<T, E>;
