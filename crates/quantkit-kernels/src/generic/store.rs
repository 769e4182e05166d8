//! Scalar output stages of a register tile: the zero-point corrections (K1) and either the
//! plain i32 result or the float requantization (K2, K3a, K4) of `crate::output`.

use crate::gemm::{Epilogue, TILE};
use crate::output::{float_requant, QuantType};

/// Writes the corrected `rows × cols` block of a raw tile (row stride `NR`) as i32.
///
/// # Safety
/// `out` (pointing at output row `r0`) must be valid for `rows` rows of stride `ldc` from
/// column `c0` with `cols` columns, and written by no other thread.
// Tile rows and output columns are indexed together; iterators would obscure that.
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
pub unsafe fn generic_store_i32<const NR: usize>(
    ep: &Epilogue<'_>,
    tile: &[i32; TILE],
    rowsums: &[i32],
    rows: usize,
    c0: usize,
    cols: usize,
    out: *mut i32,
    ldc: usize,
) {
    for r in 0..rows {
        for c in 0..cols {
            let v = ep.corrected(tile[r * NR + c], rowsums[r], c0 + c);
            // SAFETY: (r, c0 + c) is inside the block of the function contract.
            unsafe { *out.add(r * ldc + c0 + c) = v };
        }
    }
}

/// Writes the corrected block through the float output stage: `scales` per padded column,
/// `(z, lo, hi)` the output zero point and clamp range.
///
/// # Safety
/// As [`generic_store_i32`], with `out` pointing at `T` elements.
#[allow(clippy::needless_range_loop, clippy::too_many_arguments)]
pub unsafe fn generic_store_float<T: QuantType, const NR: usize>(
    ep: &Epilogue<'_>,
    scales: &[f32],
    (z, lo, hi): (i32, i32, i32),
    tile: &[i32; TILE],
    rowsums: &[i32],
    rows: usize,
    c0: usize,
    cols: usize,
    out: *mut T,
    ldc: usize,
) {
    for r in 0..rows {
        for c in 0..cols {
            let v = ep.corrected(tile[r * NR + c], rowsums[r], c0 + c);
            let y = float_requant(v, scales[c0 + c], z, lo, hi);
            // SAFETY: as in `generic_store_i32`.
            unsafe { *out.add(r * ldc + c0 + c) = T::from_clamped(y) };
        }
    }
}
