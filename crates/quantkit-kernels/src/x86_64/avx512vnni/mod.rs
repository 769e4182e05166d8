//! AVX-512 VNNI kernels.
//!
//! Exactness: `vpdpbusd` multiplies four unsigned bytes by four signed bytes, adds the four
//! products (each at most 255·128 in magnitude) and the accumulator lane in 32-bit
//! arithmetic **without saturation** (that is `vpdpbusds`), so every lane is the exact sum
//! modulo 2^32, and exact for the K the GEMM accepts. Activations are stored as u8 (i8
//! activations flipped by +128) and weights as i8, which is exactly the operand order of
//! the instruction. One instruction retires 64 MACs.

pub mod gemm;
pub mod peak;
