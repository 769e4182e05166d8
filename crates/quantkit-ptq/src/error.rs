//! Errors of the post-training quantizer. Every variant names the node, tensor or input it
//! is about.

use quantkit_core::CoreError;
use quantkit_data::DataError;
use quantkit_graph::GraphError;

/// A failure while preparing, calibrating or quantizing a model.
#[derive(Debug, thiserror::Error)]
pub enum PtqError {
    /// The graph could not be executed, folded or exported.
    #[error("{context}: {source}")]
    Graph {
        /// What was being done.
        context: String,
        /// The underlying graph error.
        #[source]
        source: Box<GraphError>,
    },
    /// Quantization parameters could not be chosen or applied.
    #[error("{context}: {source}")]
    Core {
        /// What was being done (names the tensor).
        context: String,
        /// The underlying error.
        #[source]
        source: Box<CoreError>,
    },
    /// The calibration data could not be read.
    #[error("calibration data: {0}")]
    Data(#[from] Box<DataError>),
    /// A calibration sample holds NaN or ±Inf.
    #[error("calibration data for input `{input}`: non-finite value {value} in batch {batch} (sample {sample})")]
    NonFiniteInput {
        /// Model input name.
        input: String,
        /// Batch index (0-based).
        batch: usize,
        /// Sample index inside the batch.
        sample: usize,
        /// The offending value.
        value: f32,
    },
    /// A calibration batch does not fit the model input.
    #[error("calibration data does not fit model input `{input}`: model expects {expected}, data has shape {got:?}")]
    InputMismatch {
        /// Model input name.
        input: String,
        /// Declared type and shape.
        expected: String,
        /// Shape of the batch.
        got: Vec<usize>,
    },
    /// The model input is not something calibration data can feed.
    #[error("model input `{input}`: {reason}")]
    UnsupportedInput {
        /// Model input name.
        input: String,
        /// Why.
        reason: String,
    },
    /// `--exclude` names a node that does not exist.
    #[error("--exclude: no node named `{name}` in the model (nodes are e.g. {known})")]
    UnknownNode {
        /// The name given.
        name: String,
        /// A few existing node names.
        known: String,
    },
    /// The model has nothing to quantize.
    #[error("the model has no quantizable operator (Conv, ConvTranspose, Gemm, MatMul with a constant weight, ...){0}")]
    NothingToQuantize(String),
    /// The calibration source yielded no sample.
    #[error("calibration data is empty")]
    EmptyCalibration,
    /// An option is out of range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A model feature the quantizer cannot handle.
    #[error("node `{node}` ({op_type}): {reason}")]
    Unsupported {
        /// Node name.
        node: String,
        /// Operator.
        op_type: String,
        /// Why.
        reason: String,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, PtqError>;

pub(crate) fn core(context: impl Into<String>) -> impl FnOnce(CoreError) -> PtqError {
    let context = context.into();
    move |source| PtqError::Core {
        context,
        source: Box::new(source),
    }
}

pub(crate) fn graph(context: impl Into<String>) -> impl FnOnce(GraphError) -> PtqError {
    let context = context.into();
    move |source| PtqError::Graph {
        context,
        source: Box::new(source),
    }
}

impl From<DataError> for PtqError {
    fn from(e: DataError) -> Self {
        PtqError::Data(Box::new(e))
    }
}
