//! The error type of the numeric core.

use thiserror::Error;

/// Errors of `quantkit-core`. Every variant names what it is about (a tensor, a parameter) so
/// the message can be shown to a user as is.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A real multiplier that cannot be turned into a fixed-point multiplier.
    #[error("cannot represent multiplier {value} as Q0.31 fixed point: {reason}")]
    InvalidMultiplier {
        /// The offending multiplier.
        value: f64,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A NaN or infinite value where finite data is required (calibration, range choice).
    #[error("tensor '{tensor}': non-finite value {value} at flat index {index}")]
    NonFinite {
        /// The tensor's name (empty when the caller gave none).
        tensor: String,
        /// Row-major flat index of the first offending element.
        index: usize,
        /// The offending value.
        value: f32,
    },
    /// A scale that is zero, negative, subnormal, NaN or infinite.
    #[error("tensor '{tensor}': invalid scale {scale} (must be finite, positive and normal)")]
    InvalidScale {
        /// The tensor's name.
        tensor: String,
        /// The offending scale.
        scale: f32,
    },
    /// A zero point outside the quantized type's range.
    #[error("tensor '{tensor}': zero point {zero_point} outside [{qmin}, {qmax}]")]
    ZeroPointOutOfRange {
        /// The tensor's name.
        tensor: String,
        /// The offending zero point.
        zero_point: i32,
        /// Lowest quantized value.
        qmin: i32,
        /// Highest quantized value.
        qmax: i32,
    },
    /// Lengths or shapes that do not agree.
    #[error("{what}: expected {expected}, got {got}")]
    ShapeMismatch {
        /// What was being checked (e.g. "tensor 'x': number of scales").
        what: String,
        /// What was expected, as text (a length or a shape).
        expected: String,
        /// What was given.
        got: String,
    },
    /// An observer asked for a range before it saw any data.
    #[error("observer for tensor '{tensor}' has not seen any data")]
    NoData {
        /// The tensor's name.
        tensor: String,
    },
    /// An invalid quantization scheme or argument (bit width, axis, group size, range...).
    #[error("invalid quantization setting: {0}")]
    InvalidScheme(String),
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, CoreError>;
