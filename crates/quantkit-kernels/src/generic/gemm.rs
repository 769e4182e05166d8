//! Scalar GEMM microkernel on the packed layouts of [`crate::gemm`].

use crate::gemm::{Tile, KGROUP, MR, NR, TILE};

/// The table entry of [`generic_gemm_u8i8_i32_6x16`]: `rows ≤ 6` rows (checks the panel
/// lengths; the kernel indexes them anyway).
pub(crate) fn generic_tile_u8i8_6x16(
    rows: usize,
    kgroups: usize,
    a: &[u32],
    b: &[i8],
    tile: &mut Tile,
) {
    let t = &mut tile.0;
    match rows {
        1 => generic_gemm_u8i8_i32_6x16::<1>(kgroups, a, b, t),
        2 => generic_gemm_u8i8_i32_6x16::<2>(kgroups, a, b, t),
        3 => generic_gemm_u8i8_i32_6x16::<3>(kgroups, a, b, t),
        4 => generic_gemm_u8i8_i32_6x16::<4>(kgroups, a, b, t),
        5 => generic_gemm_u8i8_i32_6x16::<5>(kgroups, a, b, t),
        _ => generic_gemm_u8i8_i32_6x16::<6>(kgroups, a, b, t),
    }
}

/// The table entry of [`generic_gemm_i16_6x16`]: `rows ≤ 6` rows of A at stride `lda`.
pub(crate) fn generic_tile_i16_6x16(
    rows: usize,
    kgroups: usize,
    a: &[u32],
    lda: usize,
    b: &[i16],
    out: &mut [i32; TILE],
) {
    match rows {
        1 => generic_gemm_i16_6x16::<1>(kgroups, a, lda, b, out),
        2 => generic_gemm_i16_6x16::<2>(kgroups, a, lda, b, out),
        3 => generic_gemm_i16_6x16::<3>(kgroups, a, lda, b, out),
        4 => generic_gemm_i16_6x16::<4>(kgroups, a, lda, b, out),
        5 => generic_gemm_i16_6x16::<5>(kgroups, a, lda, b, out),
        _ => generic_gemm_i16_6x16::<6>(kgroups, a, lda, b, out),
    }
}

/// `generic_gemm_u8i8_i32_6x16`: raw products of `R ≤ 6` packed activation rows with one
/// packed weight panel of 16 columns, over `kgroups` groups of [`KGROUP`] k-values.
///
/// `a` is a packed activation panel (`[g][MR]` words, each word two zero-extended u8 as
/// i16 halves, low half = even k); `b` a packed weight panel (`[g][NR][KGROUP]` i8).
/// Writes `out[r·16 + c] = Σ_k a[r][k]·b[k][c]` with wrapping i32 arithmetic (exact for
/// K < 2^31 / (255·128) ≈ 65 800, see `docs/kernels.md`).
pub fn generic_gemm_u8i8_i32_6x16<const R: usize>(
    kgroups: usize,
    a: &[u32],
    b: &[i8],
    out: &mut [i32; TILE],
) {
    let mut acc = [[0i32; NR]; R];
    for g in 0..kgroups {
        let bg = &b[g * NR * KGROUP..(g + 1) * NR * KGROUP];
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let word = a[g * MR + r];
            let a0 = (word & 0xffff) as i32;
            let a1 = (word >> 16) as i32;
            for (c, acc_rc) in acc_r.iter_mut().enumerate() {
                let p = a0 * bg[c * 2] as i32 + a1 * bg[c * 2 + 1] as i32;
                *acc_rc = acc_rc.wrapping_add(p);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        out[r * NR..(r + 1) * NR].copy_from_slice(acc_r);
    }
}

/// `generic_gemm_i16_6x16`: raw products of `R ≤ 6` i16 rows with one panel of 16 i16
/// weight columns, over `kgroups` pairs of k (the Winograd transform domain of
/// [`crate::winograd`], whose values exceed 8 bits).
///
/// Row `r` of A is the `kgroups` words `a[r·lda..]`, each two i16 (low half = even k); `b`
/// is `[g][16][2]` i16. Writes `out[r·16 + c] = Σ_k a[r][k]·b[k][c]` with wrapping i32
/// arithmetic, as `vpmaddwd` + `vpaddd` compute it.
pub fn generic_gemm_i16_6x16<const R: usize>(
    kgroups: usize,
    a: &[u32],
    lda: usize,
    b: &[i16],
    out: &mut [i32; TILE],
) {
    i16_tile::<R>(kgroups, |g, r| a[r * lda + g], b, out)
}

/// `generic_gemm_i16_indirect_6x16`: [`generic_gemm_i16_6x16`] with an *indirect* A: word
/// `g` of row `r` is `a[offsets[g] + r]` (each k-group's 6 rows are consecutive words
/// somewhere in `a`, e.g. a run of output pixels in a plane of the few-channel conv), so A
/// needs no packing. Same arithmetic, same result.
pub fn generic_gemm_i16_indirect_6x16(
    a: &[u32],
    offsets: &[usize],
    b: &[i16],
    out: &mut [i32; TILE],
) {
    i16_tile::<6>(offsets.len(), |g, r| a[offsets[g] + r], b, out)
}

/// The body of both scalar i16 kernels: `word(g, r)` is k-group `g`'s word of row `r`.
fn i16_tile<const R: usize>(
    kgroups: usize,
    word: impl Fn(usize, usize) -> u32,
    b: &[i16],
    out: &mut [i32; TILE],
) {
    let mut acc = [[0i32; NR]; R];
    for g in 0..kgroups {
        let bg = &b[g * NR * 2..(g + 1) * NR * 2];
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let word = word(g, r);
            let a0 = word as u16 as i16 as i32;
            let a1 = (word >> 16) as u16 as i16 as i32;
            for (c, acc_rc) in acc_r.iter_mut().enumerate() {
                let p = (a0 * bg[c * 2] as i32).wrapping_add(a1 * bg[c * 2 + 1] as i32);
                *acc_rc = acc_rc.wrapping_add(p);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        out[r * NR..(r + 1) * NR].copy_from_slice(acc_r);
    }
}

/// `generic_conv_u8i8_i32_8x32_indirect`: raw products of 8 activation rows read in place
/// (no packing) with one weight panel of 32 columns in the quads layout, the direct
/// convolution's register tile.
///
/// Word `g` of row `r` is the four stored u8 values at `x[rows[r] + koff[g]..+4]` (lowest
/// k in the lowest byte: four consecutive channels of one tap of a padded NHWC image);
/// `b` is `[g][32][4]` i8. Writes `out[h][r·16 + c] = Σ_k a[r][k]·b[k][16h + c]` with
/// wrapping i32 arithmetic, as `vpdpbusd` computes it.
///
/// # Panics
/// When a word or the panel lies outside `x` or `b`.
pub(crate) fn generic_conv_u8i8_i32_8x32_indirect(
    x: &[u8],
    rows: &[usize; 8],
    koff: &[usize],
    b: &[i8],
    out: &mut [Tile; 2],
) {
    let mut acc = [[0i32; 32]; 8];
    for (g, &o) in koff.iter().enumerate() {
        let bg = &b[g * 128..(g + 1) * 128];
        for (acc_r, &base) in acc.iter_mut().zip(rows) {
            let a = &x[base + o..base + o + 4];
            for (c, acc_rc) in acc_r.iter_mut().enumerate() {
                let mut p = 0i32;
                for i in 0..4 {
                    p = p.wrapping_add(a[i] as i32 * bg[c * 4 + i] as i32);
                }
                *acc_rc = acc_rc.wrapping_add(p);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        out[0].0[r * NR..(r + 1) * NR].copy_from_slice(&acc_r[..NR]);
        out[1].0[r * NR..(r + 1) * NR].copy_from_slice(&acc_r[NR..]);
    }
}
