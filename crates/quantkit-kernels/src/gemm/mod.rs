//! Integer GEMM / GEMV: `C[M,N] = (A[M,K] − za) · (W[K,N] − zw)`, u8 or i8 activations, i8
//! (or u8) weights packed once ahead of time, i32 accumulation, and either a plain i32
//! output (MatMulInteger / ConvInteger) or a fused [`OutputStage`] to u8/i8.
//!
//! # Zero points (equation K1 of `docs/kernels.md`)
//! ```text
//! Σ_k (a−za)(w−zw) = Σ_k a·w − zw·Σ_k a − za·Σ_k w + K·za·zw
//! ```
//! The kernels compute only `Σ a·w`; the row sums `Σ a` are taken while packing A, the
//! column sums `Σ w` once when packing the weights. So any zero points (per-tensor
//! activations, per-tensor or per-column weights) cost O(M·N) extra work, not O(M·N·K).
//!
//! # i8 activations
//! i8 activations are stored as `a + 128` (a bit flip of the sign) and their zero point as
//! `za + 128`; `(a+128) − (za+128) = a − za`, so the same u8 kernels and the same
//! correction (K1) give the exact i8 result at the same speed. u8 weights are stored the
//! other way round, as `w − 128` with zero point `zw − 128`.
//!
//! # Exactness
//! Every path computes the exact integer result of (K1) as long as it fits in i32; with
//! zero points inside the 8-bit ranges `|a−za|, |w−zw| ≤ 255`, which holds for
//! `K ≤ 33 025` ([`MAX_K`]); larger K is rejected. Intermediate terms use wrapping i32
//! arithmetic, which is exact modulo 2^32 and hence exact for the final value.
//!
//! # Packed weight layout
//! Weights are given as `[K, N]` (ONNX MatMul's B) or `[N, K]` (conv weights `O×(I·kh·kw)`)
//! and stored in panels of `nr` output columns. Within a panel, for each group `g` of
//! `kgroup` consecutive k, `nr·kgroup` bytes: `w[kgroup·g + i][c]` at `c·kgroup + i`. K is
//! padded to a multiple of `kgroup` and N to a multiple of `nr` with zeros (which contribute
//! nothing). The geometry depends on the ISA the weights are packed for (see
//! [`PanelGeometry`]): scalar and AVX2 use pairs (`vpmaddwd`) in panels of 16 columns,
//! AVX-512 VNNI quads (`vpdpbusd`) in panels of 32. Weights are packed for the dispatched
//! ISA; a call on another ISA (tests, benchmarks) repacks them for that call.
//!
//! # Threads
//! Work is split over blocks of rows and column panels with rayon (the caller's pool; use
//! `ThreadPool::install` to bound it). Each output element is computed by one task with the
//! same instruction sequence whatever the split, so results are bit-identical for any
//! thread count.
//!
//! # Files
//! `geometry` (tile and panel shapes), `weights` (packed weights), `activations` (the A
//! operand), `pack` (activation panels), `block` (blocking, threads, the task loop), `sink`
//! (corrections and output stages of a tile), `sums` (exact sums for the fused conv + max
//! pool), `batched` (MatMul of two activation tensors: B packed at run time); this file
//! holds the entry points. Micro-kernels, packers and stores come from the
//! kernel table ([`crate::dispatch::Kernels`]).

mod activations;
mod batched;
mod block;
mod geometry;
mod pack;
mod sink;
mod sums;
mod weights;

pub use activations::Activations;
pub use batched::{
    matmul_codes_quant, matmul_codes_quant_with, matmul_codes_shape, CodeTensor, Codes,
};
pub use geometry::{PanelGeometry, KGROUP, MAX_K, MR, NR, VNNI_KGROUP, VNNI_MR, VNNI_NR};
pub(crate) use geometry::{Tile, TILE};
pub use sink::Epilogue;
pub(crate) use sink::TileWriter;
pub(crate) use sums::{gemm_sums_serial, PanelSums, SerialBuf};
pub use weights::{PackedWeights, WeightLayout};

use crate::dispatch::{self, table_for, Isa};
use crate::error::{KernelError, Result};
use crate::output::{OutputStage, QuantType};
use block::run;
use sink::{column_terms, Sink};

/// `out[M,N] = Σ_k (a − za)(w − zw)` as i32 (ONNX MatMulInteger), on the process's
/// dispatched ISA ([`dispatch::isa`]).
pub fn gemm_i32(a: &Activations<'_>, w: &PackedWeights, out: &mut [i32]) -> Result<()> {
    gemm_i32_with(dispatch::isa(), a, w, out)
}

/// [`gemm_i32`] on an explicitly chosen ISA (tests and benchmarks).
pub fn gemm_i32_with(
    isa: Isa,
    a: &Activations<'_>,
    w: &PackedWeights,
    out: &mut [i32],
) -> Result<()> {
    let mmm = table_for(isa)?.mmm();
    check_shapes("gemm_i32", a, w, out.len())?;
    let w = &*w.for_geometry(mmm.geometry);
    let colterm = column_terms(a, w, None);
    run::<u8>(
        mmm,
        a,
        w,
        &colterm,
        Sink::i32(out.as_mut_ptr(), &mmm.store),
        w.n,
    );
    Ok(())
}

/// `out[M,N] = stage(Σ_k (a − za)(w − zw))` with the fused output stage (bias,
/// requantization, output zero point, activation clamp) written as u8 or i8, on the
/// dispatched ISA. For M = 1 this is the GEMV path.
pub fn gemm_quant<T: QuantType>(
    a: &Activations<'_>,
    w: &PackedWeights,
    stage: &OutputStage,
    out: &mut [T],
) -> Result<()> {
    gemm_quant_with(dispatch::isa(), a, w, stage, out)
}

/// [`gemm_quant`] on an explicitly chosen ISA.
pub fn gemm_quant_with<T: QuantType>(
    isa: Isa,
    a: &Activations<'_>,
    w: &PackedWeights,
    stage: &OutputStage,
    out: &mut [T],
) -> Result<()> {
    let mmm = table_for(isa)?.mmm();
    check_shapes("gemm_quant", a, w, out.len())?;
    let w = &*w.for_geometry(mmm.geometry);
    stage.validate("gemm_quant", w.n)?;
    let colterm = column_terms(a, w, stage.bias.as_deref());
    let npad = w.n_panels * w.geom.nr;
    let sink = Sink::quantized(stage, w.n, npad, out.as_mut_ptr(), &mmm.store);
    run::<T>(mmm, a, w, &colterm, sink, w.n);
    Ok(())
}

/// Strided variants for conv: write the `M × w.n` result into `out` with row stride `ldc`
/// (`out` must hold `(M−1)·ldc + w.n` elements; checked). With `pairs`, on the table's
/// pairs-geometry family ([`crate::dispatch::Kernels`]'s `pairs`) instead of its GEMM.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided<T: QuantType>(
    isa: Isa,
    pairs: bool,
    a: &Activations<'_>,
    w: &PackedWeights,
    stage: Option<&OutputStage>,
    out_i32: Option<&mut [i32]>,
    out_q: Option<&mut [T]>,
    ldc: usize,
) -> Result<()> {
    let table = table_for(isa)?;
    let mmm = if pairs { table.pairs() } else { table.mmm() };
    check_shapes("conv", a, w, a.m * w.n)?;
    let w = &*w.for_geometry(mmm.geometry);
    let need = if a.m == 0 { 0 } else { (a.m - 1) * ldc + w.n };
    match (stage, out_i32, out_q) {
        (None, Some(out), _) => {
            assert!(
                out.len() >= need && ldc >= w.n,
                "conv output buffer too small"
            );
            let colterm = column_terms(a, w, None);
            let sink = Sink::i32(out.as_mut_ptr(), &mmm.store);
            run::<u8>(mmm, a, w, &colterm, sink, ldc);
        }
        (Some(stage), _, Some(out)) => {
            assert!(
                out.len() >= need && ldc >= w.n,
                "conv output buffer too small"
            );
            stage.validate("conv", w.n)?;
            let colterm = column_terms(a, w, stage.bias.as_deref());
            let npad = w.n_panels * w.geom.nr;
            let sink = Sink::quantized(stage, w.n, npad, out.as_mut_ptr(), &mmm.store);
            run::<T>(mmm, a, w, &colterm, sink, ldc);
        }
        _ => unreachable!("conv passes either an i32 output or a stage with a quantized output"),
    }
    Ok(())
}

fn check_shapes(
    op: &'static str,
    a: &Activations<'_>,
    w: &PackedWeights,
    out_len: usize,
) -> Result<()> {
    if a.k != w.k {
        return Err(KernelError::InvalidArgument {
            op,
            arg: "a",
            reason: format!("activations have K = {}, weights K = {}", a.k, w.k),
        });
    }
    if a.len() != a.m * a.k {
        return Err(KernelError::BufferLength {
            op,
            arg: "a",
            expected: a.m * a.k,
            got: a.len(),
        });
    }
    if out_len != a.m * w.n {
        return Err(KernelError::BufferLength {
            op,
            arg: "out",
            expected: a.m * w.n,
            got: out_len,
        });
    }
    Ok(())
}
