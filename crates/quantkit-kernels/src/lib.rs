//! Integer kernels: int8 GEMM/GEMV, convolution, pooling, lookup tables and output stages,
//! with run-time SIMD dispatch.
//!
//! Layout: `generic/` holds the portable scalar version of every kernel (the reference the
//! SIMD code must equal bit for bit), `x86_64/<isa>/` the SIMD versions, and [`dispatch`]
//! picks one ISA per process (overridable with `QUANTKIT_ISA`) whose kernel table
//! ([`dispatch::Kernels`]: the generic entries, overridden by each ISA module's `plug`) is
//! the only way any kernel reaches SIMD code. The numeric contracts (zero-point algebra,
//! output stages) are derived in `docs/kernels.md`.
//!
//! ```
//! use quantkit_kernels::gemm::{gemm_quant, Activations, PackedWeights, WeightLayout};
//! use quantkit_kernels::output::OutputStage;
//!
//! // A [1, 3] u8 with zero point 1, W [3, 2] i8 (per-tensor zero point 0).
//! let a = [1u8, 2, 3];
//! let w = [1i8, -1, 2, 0, 3, 1];
//! let packed = PackedWeights::from_i8(&w, 3, 2, WeightLayout::KxN, &[0]).unwrap();
//! // Σ(a−1)·w = [0·1+1·2+2·3, 0·−1+1·0+2·1] = [8, 2]; ×0.5, + zero point 10.
//! let stage = OutputStage::float(vec![0.5], 10);
//! let mut y = [0u8; 2];
//! gemm_quant(&Activations::u8(&a, 1, 3, 1), &packed, &stage, &mut y).unwrap();
//! assert_eq!(y, [14, 11]);
//! ```

pub mod conv;
pub mod deconv;
pub mod dispatch;
pub mod eltwise;
pub mod error;
pub mod gemm;
pub mod generic;
pub mod lut;
pub mod output;
pub mod par;
pub mod peak;
pub mod pool;
pub mod prelu;
pub mod quantize;
pub mod reference;
pub mod transpose;
pub mod winograd;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;

pub use dispatch::Isa;
pub use error::{KernelError, Result};
