//! AVX2 kernels.
//!
//! Exactness: AVX2's `vpmaddubsw` (u8×i8 pairs summed to i16) saturates when both products
//! of a pair are large (255·127·2 > 32767), which would make results wrong. These kernels
//! instead sign-extend the i8 weights to i16 (`vpmovsxbw`), keep activations as
//! zero-extended i16 (packed once per call), and multiply with `vpmaddwd`: each i32 lane gets
//! `a0·b0 + a1·b1` with `|a0·b0 + a1·b1| ≤ 2·255·128`, computed exactly. Per 16 MACs this
//! is one multiply uop, the same multiply-port cost per MAC as the saturating
//! `vpmaddubsw`+`vpmaddwd` pair.

pub mod gemm;
pub mod pack;
pub mod peak;
