//! `avx2_gemm_u8i8_i32_6x16` and its output epilogue; `avx2_gemm_i16_6x16` for Winograd.

use std::arch::x86_64::*;

use crate::gemm::{Epilogue, KGROUP, MR, NR, TILE};
use crate::output::QuantType;

/// AVX2 microkernel: `R ≤ 6` rows × 16 columns, same contract as
/// [`crate::generic::gemm::generic_gemm_u8i8_i32_6x16`].
///
/// # Safety
/// The CPU must support AVX2; `a` must hold `kgroups·MR` words and `b` `kgroups·NR·KGROUP`
/// bytes.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_gemm_u8i8_i32_6x16<const R: usize>(
    kgroups: usize,
    a: &[u32],
    b: &[i8],
    out: &mut [i32; TILE],
) {
    debug_assert!(a.len() >= kgroups * MR && b.len() >= kgroups * NR * KGROUP);
    let mut acc0 = [_mm256_setzero_si256(); R];
    let mut acc1 = [_mm256_setzero_si256(); R];
    let ap = a.as_ptr() as *const i32;
    let bp = b.as_ptr();
    for g in 0..kgroups {
        // SAFETY: g < kgroups, so bytes [32g, 32g+32) of `b` and words [6g, 6g+R) of `a`
        // are in bounds (checked by the caller's layout, asserted above in debug builds).
        unsafe {
            let b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(bp.add(g * 32) as *const __m128i));
            let b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(bp.add(g * 32 + 16) as *const __m128i));
            for r in 0..R {
                let av = _mm256_set1_epi32(*ap.add(g * MR + r));
                acc0[r] = _mm256_add_epi32(acc0[r], _mm256_madd_epi16(av, b0));
                acc1[r] = _mm256_add_epi32(acc1[r], _mm256_madd_epi16(av, b1));
            }
        }
    }
    for r in 0..R {
        // SAFETY: row r of the tile is out[16r..16r+16] (R ≤ 6, 96 ≤ TILE): two 32-byte stores.
        unsafe {
            let row = out.as_mut_ptr().add(r * NR);
            _mm256_storeu_si256(row as *mut __m256i, acc0[r]);
            _mm256_storeu_si256(row.add(8) as *mut __m256i, acc1[r]);
        }
    }
}

/// AVX2 microkernel on i16 operands: `R ≤ 6` rows × 16 columns, same contract as
/// [`crate::generic::gemm::generic_gemm_i16_6x16`] (A rows of `kgroups` words at stride
/// `lda` words, B `[g][16][2]` i16 loaded as is, no widening).
///
/// # Safety
/// The CPU must support AVX2; `a` must hold `(R−1)·lda + kgroups` words and `b`
/// `kgroups·32` values.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_gemm_i16_6x16<const R: usize>(
    kgroups: usize,
    a: &[u32],
    lda: usize,
    b: &[i16],
    out: &mut [i32; TILE],
) {
    debug_assert!(R == 0 || a.len() >= (R - 1) * lda + kgroups);
    debug_assert!(b.len() >= kgroups * NR * 2);
    // SAFETY: word r·lda + g (r < R, g < kgroups) of `a` and values [32g, 32g+32) of `b`
    // exist (the caller's contract, asserted above in debug builds); AVX2 is enabled here.
    unsafe { i16_tile::<R>(kgroups, |g| (a.as_ptr().add(g) as *const i32, lda), b, out) }
}

/// AVX2 tile of 6 rows read in place, same contract as
/// [`crate::generic::gemm::generic_gemm_i16_rows_6x16`]: the 6×16 tile of
/// [`avx2_gemm_i16_6x16`] (12 accumulators, `vpmaddwd` + `vpaddd`) with each row's word
/// broadcast from its own address.
///
/// # Safety
/// The CPU must support AVX2. (Bounds are checked here: every word `rows[r] + koff[g]`
/// lies in `a` and `b` holds `koff.len()·32` values.)
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_gemm_i16_rows_6x16(
    a: &[u32],
    rows: &[usize; 6],
    koff: &[usize],
    b: &[i16],
    out: &mut [i32; TILE],
) {
    assert!(b.len() >= koff.len() * NR * 2);
    let reach = rows.iter().max().copied().unwrap_or(0) + koff.iter().max().copied().unwrap_or(0);
    assert!(koff.is_empty() || reach < a.len());
    let ap = a.as_ptr() as *const i32;
    let bp = b.as_ptr();
    let r: [*const i32; 6] = std::array::from_fn(|i| ap.wrapping_add(rows[i]));
    let mut acc0 = [_mm256_setzero_si256(); 6];
    let mut acc1 = [_mm256_setzero_si256(); 6];
    for (g, &o) in koff.iter().enumerate() {
        // SAFETY: word rows[i] + o ≤ reach < a.len() and values [32g, 32g+32) of `b` exist
        // (asserted above); AVX2 is enabled here.
        unsafe {
            let b0 = _mm256_loadu_si256(bp.add(g * 32) as *const __m256i);
            let b1 = _mm256_loadu_si256(bp.add(g * 32 + 16) as *const __m256i);
            for i in 0..6 {
                let av = _mm256_set1_epi32(*r[i].add(o));
                acc0[i] = _mm256_add_epi32(acc0[i], _mm256_madd_epi16(av, b0));
                acc1[i] = _mm256_add_epi32(acc1[i], _mm256_madd_epi16(av, b1));
            }
        }
    }
    for i in 0..6 {
        // SAFETY: row i of the tile is out[16i..16i+16] (6·16 ≤ TILE).
        unsafe {
            let row = out.as_mut_ptr().add(i * NR);
            _mm256_storeu_si256(row as *mut __m256i, acc0[i]);
            _mm256_storeu_si256(row.add(8) as *mut __m256i, acc1[i]);
        }
    }
}

/// AVX2 tiles of 2×2 max-pool windows with an indirect A, same contract as
/// [`crate::generic::gemm::generic_gemm_i16_window_4x16`]: per window the 4 rows × 16
/// columns stay in 8 accumulators across every k-group (`vpmaddwd` + `vpaddd`), are
/// reduced with `vpmaxsd` and stored once: no 6×16 tile is written, read back and
/// reduced per pair of conv rows.
///
/// # Safety
/// The CPU must support AVX2. (Bounds are checked here: every word `rows[r] + w·step +
/// koff[g]` (`w < windows ≤ 6`) lies in `a` and `b` holds `koff.len()·32` values.)
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_gemm_i16_window_4x16(
    a: &[u32],
    rows: &[usize; 4],
    step: usize,
    windows: usize,
    koff: &[usize],
    b: &[i16],
    out: &mut [i32; TILE],
) {
    assert!(windows * NR <= TILE && b.len() >= koff.len() * NR * 2);
    if windows == 0 || koff.is_empty() {
        for w in 0..windows {
            out[w * NR..(w + 1) * NR].fill(0);
        }
        return;
    }
    let reach = rows.iter().max().copied().unwrap_or(0)
        + (windows - 1) * step
        + koff.iter().max().copied().unwrap_or(0);
    assert!(reach < a.len());
    let ap = a.as_ptr() as *const i32;
    let bp = b.as_ptr();
    for w in 0..windows {
        let r: [*const i32; 4] = std::array::from_fn(|i| {
            // SAFETY: rows[i] + w·step ≤ reach < a.len() (asserted above).
            unsafe { ap.add(rows[i] + w * step) }
        });
        let mut acc0 = [_mm256_setzero_si256(); 4];
        let mut acc1 = [_mm256_setzero_si256(); 4];
        for (g, &o) in koff.iter().enumerate() {
            // SAFETY: word rows[i] + w·step + o ≤ reach of `a` and values [32g, 32g+32)
            // of `b` exist (asserted above); AVX2 is enabled here.
            unsafe {
                let b0 = _mm256_loadu_si256(bp.add(g * 32) as *const __m256i);
                let b1 = _mm256_loadu_si256(bp.add(g * 32 + 16) as *const __m256i);
                for i in 0..4 {
                    let av = _mm256_set1_epi32(*r[i].add(o));
                    acc0[i] = _mm256_add_epi32(acc0[i], _mm256_madd_epi16(av, b0));
                    acc1[i] = _mm256_add_epi32(acc1[i], _mm256_madd_epi16(av, b1));
                }
            }
        }
        let m0 = _mm256_max_epi32(
            _mm256_max_epi32(acc0[0], acc0[1]),
            _mm256_max_epi32(acc0[2], acc0[3]),
        );
        let m1 = _mm256_max_epi32(
            _mm256_max_epi32(acc1[0], acc1[1]),
            _mm256_max_epi32(acc1[2], acc1[3]),
        );
        // SAFETY: row w of the tile is out[16w..16w+16] (w < windows ≤ 6, asserted).
        unsafe {
            let row = out.as_mut_ptr().add(w * NR);
            _mm256_storeu_si256(row as *mut __m256i, m0);
            _mm256_storeu_si256(row.add(8) as *mut __m256i, m1);
        }
    }
}

/// The body of the i16 microkernel: `row(g)` gives the address of k-group `g`'s word of
/// row 0 and the stride (in words) between rows.
///
/// # Safety
/// AVX2 must be enabled in the caller; for every `g < kgroups` and `r < R`, `row(g).0 +
/// r·row(g).1` and values [32g, 32g+32) of `b` must be readable.
#[inline(always)]
unsafe fn i16_tile<const R: usize>(
    kgroups: usize,
    row: impl Fn(usize) -> (*const i32, usize),
    b: &[i16],
    out: &mut [i32; TILE],
) {
    let mut acc0 = [_mm256_setzero_si256(); R];
    let mut acc1 = [_mm256_setzero_si256(); R];
    let bp = b.as_ptr();
    for g in 0..kgroups {
        // SAFETY: the function contract.
        unsafe {
            let b0 = _mm256_loadu_si256(bp.add(g * 32) as *const __m256i);
            let b1 = _mm256_loadu_si256(bp.add(g * 32 + 16) as *const __m256i);
            let (p, stride) = row(g);
            for r in 0..R {
                let av = _mm256_set1_epi32(*p.add(r * stride));
                acc0[r] = _mm256_add_epi32(acc0[r], _mm256_madd_epi16(av, b0));
                acc1[r] = _mm256_add_epi32(acc1[r], _mm256_madd_epi16(av, b1));
            }
        }
    }
    for r in 0..R {
        // SAFETY: row r of the tile is out[16r..16r+16] (R ≤ 6, 96 ≤ TILE).
        unsafe {
            let row = out.as_mut_ptr().add(r * NR);
            _mm256_storeu_si256(row as *mut __m256i, acc0[r]);
            _mm256_storeu_si256(row.add(8) as *mut __m256i, acc1[r]);
        }
    }
}

/// Zero-point correction (K1) of one tile row chunk of 8 columns starting at `c`.
#[inline(always)]
unsafe fn corrected(ep: &Epilogue<'_>, raw: &[i32], rowsum: i32, c: usize, cc: usize) -> __m256i {
    // SAFETY: `cc + 8 ≤ raw.len()` and `c + 8 ≤` padded column count (column vectors of the
    // epilogue are padded to whole panels).
    unsafe {
        let mut v = _mm256_add_epi32(
            _mm256_loadu_si256(raw.as_ptr().add(cc) as *const __m256i),
            _mm256_loadu_si256(ep.colterm.as_ptr().add(c) as *const __m256i),
        );
        if let Some(zw) = ep.zw {
            let zwv = _mm256_loadu_si256(zw.as_ptr().add(c) as *const __m256i);
            v = _mm256_sub_epi32(v, _mm256_mullo_epi32(zwv, _mm256_set1_epi32(rowsum)));
        }
        v
    }
}

/// Writes the valid `rows × cols` part of a raw tile as i32 (plain MatMulInteger output).
///
/// # Safety
/// AVX2 must be available; `out` must be valid for `rows` rows of stride `ldc` from
/// column `c0` with `cols` columns; `c0` is a multiple of [`NR`].
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx2_epilogue_i32(
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
        for cc in (0..NR).step_by(8) {
            if cc >= cols {
                break;
            }
            // SAFETY: see the function contract.
            unsafe {
                let v = corrected(ep, &tile[r * NR..(r + 1) * NR], rowsums[r], c0 + cc, cc);
                let dst = out.add(r * ldc + c0 + cc);
                if cols - cc >= 8 {
                    _mm256_storeu_si256(dst as *mut __m256i, v);
                } else {
                    let mut tmp = [0i32; 8];
                    _mm256_storeu_si256(tmp.as_mut_ptr() as *mut __m256i, v);
                    std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, cols - cc);
                }
            }
        }
    }
}

/// Writes the valid part of a raw tile through the float-scale output stage (K2, K3a, K4).
/// Bit-identical to [`crate::output::float_requant`]: the same IEEE conversion, multiply,
/// min/max, and round-half-even conversion (`vcvtps2dq` under the default MXCSR, which
/// Rust code never changes).
///
/// # Safety
/// As [`avx2_epilogue_i32`], with `out` pointing at `T` elements.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx2_epilogue_float<T: QuantType>(
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
    // The packed 8-byte stores below assume one-byte codes (u8/i8, the only QuantTypes).
    const { assert!(std::mem::size_of::<T>() == 1) };
    let lo_f = _mm256_set1_ps((lo as i64 - z as i64) as f32);
    let hi_f = _mm256_set1_ps((hi as i64 - z as i64) as f32);
    let zv = _mm256_set1_epi32(z);
    for r in 0..rows {
        for cc in (0..NR).step_by(8) {
            if cc >= cols {
                break;
            }
            // SAFETY: see the function contract; `scales` is padded like the column terms.
            unsafe {
                let v = corrected(ep, &tile[r * NR..(r + 1) * NR], rowsums[r], c0 + cc, cc);
                let s = _mm256_loadu_ps(scales.as_ptr().add(c0 + cc));
                let f = _mm256_mul_ps(_mm256_cvtepi32_ps(v), s);
                let f = _mm256_min_ps(_mm256_max_ps(f, lo_f), hi_f);
                let q = _mm256_add_epi32(_mm256_cvtps_epi32(f), zv);
                let dst = out.add(r * ldc + c0 + cc);
                if cols - cc >= 8 {
                    // Eight codes already in [lo, hi] ⊆ T's range: narrow i32 → i16 → 8-bit
                    // with saturating packs (exact on in-range values) and one 8-byte store.
                    let w = _mm_packs_epi32(
                        _mm256_castsi256_si128(q),
                        _mm256_extracti128_si256::<1>(q),
                    );
                    let b = if T::MIN < 0 {
                        _mm_packs_epi16(w, w)
                    } else {
                        _mm_packus_epi16(w, w)
                    };
                    _mm_storel_epi64(dst as *mut __m128i, b);
                } else {
                    let mut tmp = [0i32; 8];
                    _mm256_storeu_si256(tmp.as_mut_ptr() as *mut __m256i, q);
                    for (i, &t) in tmp.iter().enumerate().take(cols - cc) {
                        *dst.add(i) = T::from_clamped(t);
                    }
                }
            }
        }
    }
}
