//! Scalar GEMM microkernel on the packed layouts of [`crate::gemm`].

use crate::gemm::{KGROUP, MR, NR, TILE};

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
