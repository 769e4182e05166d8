//! x86-64 SIMD kernels, one folder per instruction set. Every function here is
//! `#[target_feature]`-gated and only reached through [`crate::dispatch`] after run-time
//! detection.

pub mod avx2;
pub mod avx512vnni;
