//! `avx512vnni_gemm_u8i8_i32_8x32` and its 512-bit output epilogues.

use std::arch::x86_64::*;

use crate::gemm::{Epilogue, TILE, VNNI_KGROUP, VNNI_MR, VNNI_NR};
use crate::output::QuantType;

/// Bytes of one k-group of a weight panel: 32 columns × 4 k = two zmm loads.
const GROUP_BYTES: usize = VNNI_NR * VNNI_KGROUP;

/// AVX-512 VNNI microkernel: `R ≤ 8` rows × 32 columns, over `kgroups` groups of four k.
///
/// `a` is a packed activation panel (`[g][8]` words, each four stored u8 values of one row,
/// lowest byte = lowest k); `b` a packed weight panel (`[g][32][4]` i8). Writes
/// `out[32·r + c] = Σ_k a[r][k]·b[k][c]` (wrapping i32) for `r < R`.
///
/// # Safety
/// The CPU must support AVX-512 F and VNNI; `a` must hold `kgroups·8` words and `b`
/// `kgroups·128` bytes.
#[target_feature(enable = "avx512f,avx512vnni")]
pub unsafe fn avx512vnni_gemm_u8i8_i32_8x32<const R: usize>(
    kgroups: usize,
    a: &[u32],
    b: &[i8],
    out: &mut [i32; TILE],
) {
    debug_assert!(a.len() >= kgroups * VNNI_MR && b.len() >= kgroups * GROUP_BYTES);
    let ap = a.as_ptr() as *const i32;
    let bp = b.as_ptr();
    let mut acc0 = [_mm512_setzero_si512(); R];
    let mut acc1 = [_mm512_setzero_si512(); R];
    // With one or two rows, 2·R dependency chains cannot hide the latency of `vpdpbusd`:
    // odd k-groups go to a second set of accumulators, added at the end (wrapping addition
    // is associative, so the result is the same).
    let split = R <= 2;
    let mut acc2 = [_mm512_setzero_si512(); R];
    let mut acc3 = [_mm512_setzero_si512(); R];
    let mut g = 0;
    if split {
        while g + 2 <= kgroups {
            // SAFETY: g + 1 < kgroups: bytes [128g, 128g + 256) of `b` and words
            // [8g, 8g + 16) of `a` are in bounds.
            unsafe {
                let b0 = _mm512_loadu_si512(bp.add(g * GROUP_BYTES) as *const _);
                let b1 = _mm512_loadu_si512(bp.add(g * GROUP_BYTES + 64) as *const _);
                let b2 = _mm512_loadu_si512(bp.add(g * GROUP_BYTES + 128) as *const _);
                let b3 = _mm512_loadu_si512(bp.add(g * GROUP_BYTES + 192) as *const _);
                for r in 0..R {
                    let av = _mm512_set1_epi32(*ap.add(g * VNNI_MR + r));
                    let aw = _mm512_set1_epi32(*ap.add(g * VNNI_MR + VNNI_MR + r));
                    acc0[r] = _mm512_dpbusd_epi32(acc0[r], av, b0);
                    acc1[r] = _mm512_dpbusd_epi32(acc1[r], av, b1);
                    acc2[r] = _mm512_dpbusd_epi32(acc2[r], aw, b2);
                    acc3[r] = _mm512_dpbusd_epi32(acc3[r], aw, b3);
                }
            }
            g += 2;
        }
    }
    while g < kgroups {
        // SAFETY: g < kgroups, so bytes [128g, 128g + 128) of `b` and words [8g, 8g + R)
        // of `a` are in bounds (the caller's layout; asserted in debug builds).
        unsafe {
            let b0 = _mm512_loadu_si512(bp.add(g * GROUP_BYTES) as *const _);
            let b1 = _mm512_loadu_si512(bp.add(g * GROUP_BYTES + 64) as *const _);
            for r in 0..R {
                let av = _mm512_set1_epi32(*ap.add(g * VNNI_MR + r));
                acc0[r] = _mm512_dpbusd_epi32(acc0[r], av, b0);
                acc1[r] = _mm512_dpbusd_epi32(acc1[r], av, b1);
            }
        }
        g += 1;
    }
    for r in 0..R {
        if split {
            acc0[r] = _mm512_add_epi32(acc0[r], acc2[r]);
            acc1[r] = _mm512_add_epi32(acc1[r], acc3[r]);
        }
        // SAFETY: row r of the tile is out[32r..32r+32] with r < R ≤ 8 and TILE = 256.
        unsafe {
            let row = out.as_mut_ptr().add(r * VNNI_NR);
            _mm512_storeu_si512(row as *mut _, acc0[r]);
            _mm512_storeu_si512(row.add(16) as *mut _, acc1[r]);
        }
    }
}

/// Lane mask of the first `n.min(16)` lanes.
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as __mmask16
    }
}

/// Zero-point correction (K1) of 16 columns of one tile row: tile columns `cc..cc+16`,
/// output columns `c..c+16`.
#[inline(always)]
unsafe fn corrected(ep: &Epilogue<'_>, raw: *const i32, rowsum: i32, c: usize) -> __m512i {
    // SAFETY: `raw` points at 16 tile values; the column vectors of the epilogue are padded
    // to whole 32-column panels and `c` is inside a panel at a multiple of 16.
    unsafe {
        let mut v = _mm512_add_epi32(
            _mm512_loadu_si512(raw as *const _),
            _mm512_loadu_si512(ep.colterm.as_ptr().add(c) as *const _),
        );
        if let Some(zw) = ep.zw {
            let zwv = _mm512_loadu_si512(zw.as_ptr().add(c) as *const _);
            v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zwv, _mm512_set1_epi32(rowsum)));
        }
        v
    }
}

/// Writes the valid `rows × cols` part of a raw tile as i32 (plain MatMulInteger output),
/// with masked stores for the last columns.
///
/// # Safety
/// AVX-512 F must be available; `out` must be valid for `rows` rows of stride `ldc` from
/// column `c0` with `cols` columns; `c0` is a multiple of 32.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx512_epilogue_i32(
    ep: &Epilogue<'_>,
    tile: &[i32; TILE],
    rowsums: &[i32],
    rows: usize,
    c0: usize,
    cols: usize,
    out: *mut i32,
    ldc: usize,
) {
    for (r, &rowsum) in rowsums.iter().enumerate().take(rows) {
        for cc in (0..cols).step_by(16) {
            // SAFETY: see the function contract; masked-off lanes are not written.
            unsafe {
                let v = corrected(ep, tile.as_ptr().add(r * VNNI_NR + cc), rowsum, c0 + cc);
                _mm512_mask_storeu_epi32(out.add(r * ldc + c0 + cc), lanes(cols - cc), v);
            }
        }
    }
}

/// Writes the valid part of a raw tile through the float-scale output stage (K2, K3a, K4)
/// as 8-bit values: the same IEEE conversion, multiply, min/max and round-half-even
/// conversion as [`crate::output::float_requant`] (`vcvtps2dq` under the default MXCSR),
/// then `vpmovdb` (truncation, exact because the value is already clamped into `T`'s range)
/// and a masked byte store.
///
/// `W` is the tile's row stride: 32 for the GEMM's 8×32 tiles, 16 for the 16-column tiles
/// of `TileWriter` (Winograd, the direct and few-channel convs with a fused pool), which
/// take one zmm per row here against two ymm in the AVX2 store.
///
/// # Safety
/// As [`avx512_epilogue_i32`], with AVX-512 BW and VL too and `out` pointing at `T`
/// elements; `T` must be one byte wide (u8 or i8); `cols ≤ W`, and the column vectors
/// (`ep`, `scales`) padded to a multiple of 16 past `c0`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn avx512_epilogue_float<T: QuantType, const W: usize>(
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
    debug_assert_eq!(std::mem::size_of::<T>(), 1);
    let lo_f = _mm512_set1_ps((lo as i64 - z as i64) as f32);
    let hi_f = _mm512_set1_ps((hi as i64 - z as i64) as f32);
    let zv = _mm512_set1_epi32(z);
    for (r, &rowsum) in rowsums.iter().enumerate().take(rows) {
        for cc in (0..cols).step_by(16) {
            // SAFETY: see the function contract; `scales` is padded like the column terms;
            // masked-off lanes are not written.
            unsafe {
                let v = corrected(ep, tile.as_ptr().add(r * W + cc), rowsum, c0 + cc);
                let s = _mm512_loadu_ps(scales.as_ptr().add(c0 + cc));
                let f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
                let f = _mm512_min_ps(_mm512_max_ps(f, lo_f), hi_f);
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zv);
                let bytes = _mm512_cvtepi32_epi8(q);
                _mm_mask_storeu_epi8(
                    out.add(r * ldc + c0 + cc) as *mut i8,
                    lanes(cols - cc),
                    bytes,
                );
            }
        }
    }
}

/// AVX-512 VNNI microkernel on i16 operands (Winograd's GEMMs): `R ≤ 6` rows × 16 columns,
/// the contract of [`crate::generic::gemm::generic_gemm_i16_6x16`] (A rows of `kgroups`
/// words at stride `lda` words, B `[g][16][2]` i16).
///
/// One k-group of a 16-column panel is 32 i16, one zmm: `vpdpwssd` multiplies each pair
/// of signed words by the row's broadcast pair, adds the two products and the accumulator
/// lane **without saturation** (that is `vpdpwssds`), i.e. exactly the scalar kernel's
/// wrapping `acc + a0·b0 + a1·b1` (the pair sum itself is at most `2·1020·2295` in
/// magnitude for Winograd's operands, far inside i32). Even and odd k-groups go to two
/// sets of accumulators, added at the end, so `2R` dependency chains hide the instruction's
/// latency (wrapping addition is associative: the same result).
///
/// # Safety
/// The CPU must support AVX-512 F and VNNI; `a` must hold `(R−1)·lda + kgroups` words and
/// `b` `kgroups·32` values.
#[target_feature(enable = "avx512f,avx512vnni")]
pub unsafe fn avx512vnni_gemm_i16_6x16<const R: usize>(
    kgroups: usize,
    a: &[u32],
    lda: usize,
    b: &[i16],
    out: &mut [i32; TILE],
) {
    debug_assert!(R == 0 || a.len() >= (R - 1) * lda + kgroups);
    debug_assert!(b.len() >= kgroups * I16_PANEL);
    // SAFETY: word r·lda + g (r < R, g < kgroups) of `a` and values [32g, 32g+32) of `b`
    // exist (the caller's contract); AVX-512 F/VNNI are enabled here.
    unsafe { i16_tile::<R>(kgroups, |g| (a.as_ptr().add(g) as *const i32, lda), b, out) }
}

/// i16 values of one k-group of a 16-column i16 panel: one zmm.
const I16_PANEL: usize = crate::gemm::NR * 2;

/// The body of the i16 microkernel: `row(g)` gives the address of k-group `g`'s word of
/// row 0 and the stride (in words) between rows.
///
/// # Safety
/// AVX-512 F and VNNI must be enabled in the caller; for every `g < kgroups` and `r < R`,
/// `row(g).0 + r·row(g).1` and values [32g, 32g+32) of `b` must be readable.
#[inline(always)]
unsafe fn i16_tile<const R: usize>(
    kgroups: usize,
    row: impl Fn(usize) -> (*const i32, usize),
    b: &[i16],
    out: &mut [i32; TILE],
) {
    let mut even = [_mm512_setzero_si512(); R];
    let mut odd = [_mm512_setzero_si512(); R];
    let bp = b.as_ptr();
    let mut g = 0;
    while g + 2 <= kgroups {
        // SAFETY: g + 1 < kgroups: the function contract.
        unsafe {
            let b0 = _mm512_loadu_si512(bp.add(g * I16_PANEL) as *const _);
            let b1 = _mm512_loadu_si512(bp.add((g + 1) * I16_PANEL) as *const _);
            let (p0, s0) = row(g);
            let (p1, s1) = row(g + 1);
            for r in 0..R {
                even[r] = _mm512_dpwssd_epi32(even[r], _mm512_set1_epi32(*p0.add(r * s0)), b0);
                odd[r] = _mm512_dpwssd_epi32(odd[r], _mm512_set1_epi32(*p1.add(r * s1)), b1);
            }
        }
        g += 2;
    }
    if g < kgroups {
        // SAFETY: g < kgroups: the function contract.
        unsafe {
            let b0 = _mm512_loadu_si512(bp.add(g * I16_PANEL) as *const _);
            let (p0, s0) = row(g);
            for (r, e) in even.iter_mut().enumerate() {
                *e = _mm512_dpwssd_epi32(*e, _mm512_set1_epi32(*p0.add(r * s0)), b0);
            }
        }
    }
    for r in 0..R {
        // SAFETY: row r of the tile is out[16r..16r+16] (R ≤ 6, 96 ≤ TILE).
        unsafe {
            _mm512_storeu_si512(
                out.as_mut_ptr().add(r * crate::gemm::NR) as *mut _,
                _mm512_add_epi32(even[r], odd[r]),
            )
        };
    }
}

/// AVX-512 VNNI direct-convolution tile: 8 activation rows read in place × 32 columns, the
/// contract of [`crate::generic::gemm::generic_conv_u8i8_i32_8x32_indirect`] (word `g` of
/// row `r` at `x + rows[r] + koff[g]`, `b` `[g][32][4]` i8), `vpdpbusd` as in
/// [`avx512vnni_gemm_u8i8_i32_8x32`]: 16 accumulators, each k-group one broadcast per row
/// straight from the image and two weight loads.
///
/// # Safety
/// The CPU must support AVX-512 F and VNNI; for every `r` and `g`, bytes
/// `rows[r] + koff[g]..+4` of `x` must exist, and `b` must hold `koff.len()·128` bytes.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(crate) unsafe fn avx512vnni_conv_u8i8_i32_8x32_indirect(
    x: *const u8,
    rows: &[usize; 8],
    koff: &[usize],
    b: *const i8,
    out: &mut [crate::gemm::Tile; 2],
) {
    let mut acc0 = [_mm512_setzero_si512(); 8];
    let mut acc1 = [_mm512_setzero_si512(); 8];
    let p: [*const u8; 8] = std::array::from_fn(|r| x.wrapping_add(rows[r]));
    for (g, &o) in koff.iter().enumerate() {
        // SAFETY: the function contract.
        unsafe {
            let b0 = _mm512_loadu_si512(b.add(g * GROUP_BYTES) as *const _);
            let b1 = _mm512_loadu_si512(b.add(g * GROUP_BYTES + 64) as *const _);
            for r in 0..8 {
                let av = _mm512_set1_epi32((p[r].add(o) as *const i32).read_unaligned());
                acc0[r] = _mm512_dpbusd_epi32(acc0[r], av, b0);
                acc1[r] = _mm512_dpbusd_epi32(acc1[r], av, b1);
            }
        }
    }
    for r in 0..8 {
        // SAFETY: row r of each 16-column tile is [16r, 16r + 16) of its TILE values.
        unsafe {
            _mm512_storeu_si512(out[0].0.as_mut_ptr().add(r * 16) as *mut _, acc0[r]);
            _mm512_storeu_si512(out[1].0.as_mut_ptr().add(r * 16) as *mut _, acc1[r]);
        }
    }
}
