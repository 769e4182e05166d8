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

/// `generic_gemm_i16_rows_6x16`: [`generic_gemm_i16_6x16`] of 6 rows read in place: word
/// `g` of row `r` is `a[rows[r] + koff[g]]` (a pixel's base in the few-channel planes and
/// the offset of word `g` from it), so A needs no packing. Same arithmetic, same result.
///
/// # Panics
/// When a word or the panel lies outside `a` or `b`.
pub fn generic_gemm_i16_rows_6x16(
    a: &[u32],
    rows: &[usize; 6],
    koff: &[usize],
    b: &[i16],
    out: &mut [i32; TILE],
) {
    i16_tile::<6>(koff.len(), |g, r| a[rows[r] + koff[g]], b, out)
}

/// `generic_gemm_i16_window_4x16`: the exact sums of `windows ≤ 6` windows of 4 rows
/// (the four conv pixels of a 2×2 max-pool window) with one 16-column i16 panel, each
/// window reduced to its maximum: word `g` of row `r` of window `w` is
/// `a[rows[r] + w·step + koff[g]]` (two i16 values, low half first, as
/// [`generic_gemm_i16_6x16`] reads them), `out[16w + c] = max_r Σ_g` pair
/// products, in wrapping i32 as `vpmaddwd` + `vpaddd` compute them. Rows of `out` past
/// `windows` are left as they are.
///
/// # Panics
/// When `windows > 6` or a word or the panel lies outside `a` or `b`.
pub fn generic_gemm_i16_window_4x16(
    a: &[u32],
    rows: &[usize; 4],
    step: usize,
    windows: usize,
    koff: &[usize],
    b: &[i16],
    out: &mut [i32; TILE],
) {
    assert!(windows * NR <= TILE);
    let mut sums = [0i32; TILE];
    for w in 0..windows {
        let rows: [usize; 4] = std::array::from_fn(|r| rows[r] + w * step);
        i16_tile::<4>(koff.len(), |g, r| a[rows[r] + koff[g]], b, &mut sums);
        for c in 0..NR {
            let m = (0..4).map(|r| sums[r * NR + c]).max().expect("4 rows");
            out[w * NR + c] = m;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::{table_for, Isa};

    /// The window kernel (and the 6-row tile on the same operands): scalar against a plain
    /// i64 maximum of sums (i64 sums), and every ISA's table entry against it bit for bit, on stored u8 pairs with i8-range weights
    /// (the few-channel planes' operands) at both ends of their ranges, k-group counts
    /// 0–40, 0–6 windows, strides 1–3, rows of `out` past the windows untouched.
    #[test]
    fn window_and_rows_kernels_equal_the_reference_on_every_isa() {
        let mut state = 0x853c_49e6_748f_ea9bu64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..300 {
            let kg = case % 41;
            let windows = case % 7;
            let step = 1 + case % 3;
            let extreme = case % 5 == 0;
            let a: Vec<u32> = (0..600)
                .map(|_| {
                    let (lo, hi) = if extreme {
                        (255, 255)
                    } else {
                        (next() as u32 & 0xff, (next() >> 8) as u32 & 0xff)
                    };
                    lo | hi << 16
                })
                .collect();
            let b: Vec<i16> = (0..kg * NR * 2)
                .map(|_| {
                    if extreme {
                        -128
                    } else {
                        (next() % 256) as i16 - 128
                    }
                })
                .collect();
            let koff: Vec<usize> = (0..kg).map(|_| (next() % 300) as usize).collect();
            let rows: [usize; 4] = std::array::from_fn(|_| (next() % 250) as usize);
            let mut want = [7i32; TILE];
            for w in 0..windows {
                for c in 0..NR {
                    let m = (0..4)
                        .map(|r| {
                            koff.iter()
                                .enumerate()
                                .map(|(g, &o)| {
                                    let word = a[rows[r] + w * step + o];
                                    let (a0, a1) = ((word & 0xffff) as i64, (word >> 16) as i64);
                                    a0 * b[g * 32 + 2 * c] as i64
                                        + a1 * b[g * 32 + 2 * c + 1] as i64
                                })
                                .sum::<i64>()
                        })
                        .max()
                        .unwrap();
                    want[w * NR + c] = i32::try_from(m).unwrap();
                }
            }
            // The 6-row tile on the same operands: rows 0..6 at rows[r % 4] + r.
            let rows6: [usize; 6] = std::array::from_fn(|r| rows[r % 4] + r);
            let mut want6 = [7i32; TILE];
            for (r, &base) in rows6.iter().enumerate() {
                for c in 0..NR {
                    let s: i64 = koff
                        .iter()
                        .enumerate()
                        .map(|(g, &o)| {
                            let word = a[base + o];
                            let (a0, a1) = ((word & 0xffff) as i64, (word >> 16) as i64);
                            a0 * b[g * 32 + 2 * c] as i64 + a1 * b[g * 32 + 2 * c + 1] as i64
                        })
                        .sum();
                    want6[r * NR + c] = i32::try_from(s).unwrap();
                }
            }
            let mut got6 = [7i32; TILE];
            generic_gemm_i16_rows_6x16(&a, &rows6, &koff, &b, &mut got6);
            assert_eq!(got6, want6, "scalar rows, case {case}");
            for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
                let k = table_for(isa).unwrap();
                let mut got6 = [7i32; TILE];
                (k.i16().rows)(&a, &rows6, &koff, &b, &mut got6);
                assert_eq!(got6, want6, "{isa} rows, case {case}");
            }
            let mut got = [7i32; TILE];
            generic_gemm_i16_window_4x16(&a, &rows, step, windows, &koff, &b, &mut got);
            assert_eq!(got, want, "scalar, case {case}");
            for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
                let k = table_for(isa).unwrap();
                let mut got = [7i32; TILE];
                (k.i16().window)(&a, &rows, step, windows, &koff, &b, &mut got);
                assert_eq!(got, want, "{isa}, case {case}");
            }
        }
    }
}
