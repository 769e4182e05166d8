//! Scalar activation packers: rows of stored bytes into the panels the micro-kernels read
//! (layouts in `crate::gemm`'s module docs).

use crate::gemm::{MR, VNNI_MR};

/// Pairs geometry (6-row panels): word `dst[g·6 + r]` holds `(a[2g] ^ flip) | (a[2g+1] ^
/// flip) << 16` (an odd `k` leaves the high half of the last group zero), and `sums[r] =
/// Σ_k (a[k] ^ flip)`, for rows `r < rows` of `panel` (`k` bytes each).
pub fn generic_pack_a_pairs(
    panel: &[u8],
    rows: usize,
    k: usize,
    flip: u8,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    for (r, sum) in sums.iter_mut().enumerate().take(rows) {
        let row = &panel[r * k..(r + 1) * k];
        *sum = row.iter().map(|&v| (v ^ flip) as i32).sum();
        let mut chunks = row.chunks_exact(2);
        for (g, c) in chunks.by_ref().enumerate() {
            dst[g * MR + r] = (c[0] ^ flip) as u32 | (((c[1] ^ flip) as u32) << 16);
        }
        if let [v] = chunks.remainder() {
            dst[(k / 2) * MR + r] = (v ^ flip) as u32;
        }
    }
}

/// Quads geometry (8-row panels, AVX-512 VNNI): word `dst[g·8 + r]` holds the four bytes
/// `a[4g..4g+4] ^ flip`, lowest k in the lowest byte (a partial last group is zero-padded),
/// and `sums[r] = Σ_k (a[k] ^ flip)`.
pub fn generic_pack_a_quads(
    panel: &[u8],
    rows: usize,
    k: usize,
    flip: u8,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    let flip4 = u32::from_ne_bytes([flip; 4]);
    for (r, sum) in sums.iter_mut().enumerate().take(rows) {
        let row = &panel[r * k..(r + 1) * k];
        *sum = row.iter().map(|&v| (v ^ flip) as i32).sum();
        let mut chunks = row.chunks_exact(4);
        for (g, c) in chunks.by_ref().enumerate() {
            dst[g * VNNI_MR + r] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ flip4;
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 4];
            for (wi, &v) in w.iter_mut().zip(rest) {
                *wi = v ^ flip;
            }
            dst[(k / 4) * VNNI_MR + r] = u32::from_le_bytes(w);
        }
    }
}
