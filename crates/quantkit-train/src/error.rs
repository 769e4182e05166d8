//! Typed errors of the training crate.

use std::path::PathBuf;

/// Everything that can go wrong while building, running or training a model.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An operator received a tensor of the wrong shape.
    #[error("{op}: shape mismatch: expected {expected}, got {got:?}")]
    ShapeMismatch {
        /// Operator (or node) name.
        op: String,
        /// What the operator needs, in words.
        expected: String,
        /// The shape it received.
        got: Vec<usize>,
    },
    /// An operator attribute is outside what the operator supports.
    #[error("{op}: invalid attribute: {msg}")]
    InvalidAttribute {
        /// Operator (or node) name.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// A data file is malformed (truncated, bad magic, inconsistent counts).
    #[error("{}: {msg}", path.display())]
    Data {
        /// The offending file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// Reading a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The loss became NaN or infinite.
    #[error("loss is not finite ({value}) at epoch {epoch}, step {step}; lower the learning rate")]
    NonFiniteLoss {
        /// The loss value.
        value: f32,
        /// Epoch (0-based).
        epoch: usize,
        /// Step within the epoch (0-based).
        step: usize,
    },
    /// A graph cannot be trained (an unknown value, a failing node...).
    #[error("{0}")]
    Graph(String),
    /// A node on the path from a trained parameter to the loss has an operator without a
    /// gradient (`OpDef::backward`).
    #[error("node `{node}` ({op_type}): the operator has no gradient yet, so the graph cannot be trained through it")]
    NoBackward {
        /// Node name.
        node: String,
        /// Its operator.
        op_type: String,
    },
    /// The architecture name is not in the zoo.
    #[error("unknown architecture `{0}` (known: lenet, resnet8, mobilenet, mlp, autoencoder)")]
    UnknownArch(String),
    /// Training and evaluation need labelled data.
    #[error("{}: training and evaluation need a label file", path.display())]
    MissingLabels {
        /// The image file without labels.
        path: PathBuf,
    },
    /// A label is outside 0..=255 (the zoo's classifiers take class indices).
    #[error("{}: sample {index} has label {label}, expected a class index in 0..=255", path.display())]
    BadLabel {
        /// The data source.
        path: PathBuf,
        /// Sample index.
        index: usize,
        /// The label found.
        label: i64,
    },
    /// Writing the ONNX model failed.
    #[error("{}: ONNX export failed: {msg}", path.display())]
    Export {
        /// The output file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// Loading a data set failed.
    #[error(transparent)]
    Dataset(#[from] quantkit_data::DataError),
    /// A gradient was asked of a value that does not require one.
    #[error("backward: {0}")]
    Backward(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, TrainError>;

pub(crate) fn shape_err(op: &str, expected: impl Into<String>, got: &[usize]) -> TrainError {
    TrainError::ShapeMismatch {
        op: op.to_string(),
        expected: expected.into(),
        got: got.to_vec(),
    }
}
