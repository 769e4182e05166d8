//! `avx2_pack_a_pairs`: the AVX2 version of the activation packing for the pair geometry.

use std::arch::x86_64::*;

use crate::gemm::MR;

/// Packs `rows ≤ MR` rows of `k` bytes each (row `r` is `bytes[r·k..(r+1)·k]`) into the pair
/// layout of `crate::gemm::pack_a_panel`: word `dst[g·MR + r]` holds
/// `(a[2g] ^ flip) | (a[2g+1] ^ flip) << 16` (an odd `k` leaves the high half of the last
/// group zero), and `sums[r] = Σ_k (a[k] ^ flip)`. Words of rows `rows..MR` are written as
/// zero for the groups the vector loop covers and left untouched elsewhere (the caller
/// clears padding rows first).
///
/// Sixteen k-values (eight groups) of all rows at a time: each row is loaded, flipped and
/// zero-extended to sixteen u16 (exactly the eight words of that row), the 8×8 word block
/// (rows 6 and 7 zero) is transposed with unpack/permute, and each group's six words are
/// stored with one 32-byte store whose two spare lanes land on the next group's first two
/// words, rewritten by the next store (so the loop stops a group short of the end); the
/// last ≤ 16 bytes of each row go through a zero-padded buffer and exact six-word stores.
///
/// # Safety
/// The CPU must support AVX2; `bytes.len() ≥ rows·k`, `dst.len() ≥ ⌈k/2⌉·MR`,
/// `sums.len() ≥ rows`, `rows ≤ MR`.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_pack_a_pairs(
    bytes: &[u8],
    k: usize,
    rows: usize,
    flip: u8,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    const { assert!(MR == 6) };
    let kgroups = k.div_ceil(2);
    debug_assert!(rows <= MR && bytes.len() >= rows * k && dst.len() >= kgroups * MR);
    // Blocks of 16 bytes that lie inside every row and leave at least one group after them.
    let mut blocks = 0;
    while 16 * (blocks + 1) <= k && 8 * (blocks + 1) < kgroups {
        blocks += 1;
    }
    let fl = _mm_set1_epi8(flip as i8);
    let zero = _mm_setzero_si128();
    let mut sad = [_mm_setzero_si128(); MR];
    let bp = bytes.as_ptr();
    let dp = dst.as_mut_ptr();
    for b in 0..blocks {
        let mut v = [_mm256_setzero_si256(); 8];
        for r in 0..rows {
            // SAFETY: 16(b+1) ≤ k, so bytes [r·k + 16b, r·k + 16b + 16) are in row r.
            let x = _mm_xor_si128(
                unsafe { _mm_loadu_si128(bp.add(r * k + 16 * b) as *const __m128i) },
                fl,
            );
            sad[r] = _mm_add_epi64(sad[r], _mm_sad_epu8(x, zero));
            v[r] = _mm256_cvtepu8_epi16(x);
        }
        let cols = transpose8(&v);
        for (j, c) in cols.iter().enumerate() {
            let g = 8 * b + j;
            // SAFETY: g + 1 < kgroups, so words [6g, 6g + 8) are inside dst.
            unsafe { _mm256_storeu_si256(dp.add(g * MR) as *mut __m256i, *c) };
        }
    }
    // The tail (at most 16 bytes per row, see the loop bound): each row's bytes, flipped,
    // in a zeroed 16-byte buffer (so an odd k leaves the last high half zero), through the
    // same transpose; each remaining group's six words are stored exactly.
    let tail = k - 16 * blocks;
    debug_assert!(tail <= 16);
    if tail > 0 {
        let mut v = [_mm256_setzero_si256(); 8];
        for r in 0..rows {
            let mut buf = [0u8; 16];
            for (d, &b) in buf.iter_mut().zip(&bytes[r * k + 16 * blocks..(r + 1) * k]) {
                *d = b ^ flip;
            }
            // SAFETY: `buf` is 16 bytes.
            let x = unsafe { _mm_loadu_si128(buf.as_ptr() as *const __m128i) };
            sad[r] = _mm_add_epi64(sad[r], _mm_sad_epu8(x, zero));
            v[r] = _mm256_cvtepu8_epi16(x);
        }
        let cols = transpose8(&v);
        for (j, c) in cols.iter().enumerate().take(tail.div_ceil(2)) {
            let mut words = [0u32; 8];
            // SAFETY: `words` is 32 bytes.
            unsafe { _mm256_storeu_si256(words.as_mut_ptr() as *mut __m256i, *c) };
            let g = 8 * blocks + j;
            dst[g * MR..(g + 1) * MR].copy_from_slice(&words[..MR]);
        }
    }
    for (r, sum) in sums.iter_mut().enumerate().take(rows) {
        let s = sad[r];
        *sum = (_mm_cvtsi128_si64(s) + _mm_extract_epi64::<1>(s)) as i32;
    }
}

/// Transposes an 8×8 block of 32-bit words: `out[j]` lane `i` = `v[i]` lane `j`.
#[target_feature(enable = "avx2")]
fn transpose8(v: &[__m256i; 8]) -> [__m256i; 8] {
    let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
    let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
    let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
    let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
    let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}
