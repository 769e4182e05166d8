//! Portable scalar kernels: the reference every SIMD path must equal bit for bit.

pub mod gemm;
