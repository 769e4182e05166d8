//! Typed errors of the kernel entry points.

use thiserror::Error;

/// What went wrong when calling a kernel. Every variant names the operation and the
/// offending argument so that the engine can attach the node name.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// A buffer does not have the length the shape implies.
    #[error("{op}: `{arg}` has {got} elements, expected {expected}")]
    BufferLength {
        /// Kernel name, e.g. `gemm`.
        op: &'static str,
        /// Argument name, e.g. `a`.
        arg: &'static str,
        /// Length implied by the shape.
        expected: usize,
        /// Length received.
        got: usize,
    },
    /// A per-channel parameter vector has neither 1 nor the channel count as length.
    #[error("{op}: `{arg}` has {got} entries, expected 1 or {channels}")]
    ChannelCount {
        /// Kernel name.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// Number of output channels.
        channels: usize,
        /// Length received.
        got: usize,
    },
    /// A shape or parameter is outside what the kernel supports.
    #[error("{op}: invalid argument `{arg}`: {reason}")]
    InvalidArgument {
        /// Kernel name.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// Human-readable reason.
        reason: String,
    },
    /// An instruction set was requested that this CPU does not support.
    #[error("instruction set `{isa}` requested but not supported by this CPU")]
    UnsupportedIsa {
        /// The instruction set name.
        isa: &'static str,
    },
}

/// Result alias for kernel calls.
pub type Result<T> = std::result::Result<T, KernelError>;
