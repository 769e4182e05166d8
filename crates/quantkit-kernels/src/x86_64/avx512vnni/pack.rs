//! `avx512vnni_pack_a_quads`: the vector version of the activation packing for the quads
//! geometry (AVX-512 VNNI's 8-row panels).

use std::arch::x86_64::*;

use crate::gemm::VNNI_MR;

/// Packs `rows ≤ 8` rows of `k` bytes each (row `r` is `bytes[r·k..(r+1)·k]`) into the quads
/// layout, exactly as [`crate::generic::pack::generic_pack_a_quads`]: word `dst[g·8 + r]`
/// holds the four bytes `a[4g..4g+4] ^ flip` (lowest k in the lowest byte, a partial last
/// group zero-padded), and `sums[r] = Σ_k (a[k] ^ flip)`. Words of rows `rows..8` are
/// written as zero for the groups the vector loop covers and left untouched elsewhere (the
/// caller clears padding rows first).
///
/// Thirty-two bytes (eight groups) of all rows at a time: each row's 32 bytes are loaded
/// and flipped (their sum taken with `vpsadbw`), the 8×8 block of 32-bit words is
/// transposed with unpack/permute, and each group's eight words are one 32-byte store; the
/// last < 32 bytes of each row go the scalar way.
///
/// # Safety
/// The CPU must support AVX2 (implied by AVX-512 VNNI); `bytes.len() ≥ rows·k`,
/// `dst.len() ≥ ⌈k/4⌉·8`, `sums.len() ≥ rows`, `rows ≤ 8`.
#[target_feature(enable = "avx2")]
pub unsafe fn avx512vnni_pack_a_quads(
    bytes: &[u8],
    k: usize,
    rows: usize,
    flip: u8,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    const { assert!(VNNI_MR == 8) };
    debug_assert!(rows <= VNNI_MR && bytes.len() >= rows * k && dst.len() >= k.div_ceil(4) * 8);
    let blocks = k / 32;
    let fl = _mm256_set1_epi8(flip as i8);
    let zero = _mm256_setzero_si256();
    let mut sad = [_mm256_setzero_si256(); VNNI_MR];
    let bp = bytes.as_ptr();
    let dp = dst.as_mut_ptr();
    for b in 0..blocks {
        let mut v = [_mm256_setzero_si256(); VNNI_MR];
        for r in 0..rows {
            // SAFETY: 32(b+1) ≤ k, so bytes [r·k + 32b, r·k + 32b + 32) are in row r.
            let x = _mm256_xor_si256(
                unsafe { _mm256_loadu_si256(bp.add(r * k + 32 * b) as *const __m256i) },
                fl,
            );
            sad[r] = _mm256_add_epi64(sad[r], _mm256_sad_epu8(x, zero));
            v[r] = x;
        }
        let cols = transpose8x8_epi32(&v);
        for (j, c) in cols.iter().enumerate() {
            // SAFETY: group 8b + j < k/4 ≤ ⌈k/4⌉, so words [8(8b+j), 8(8b+j) + 8) are in dst.
            unsafe { _mm256_storeu_si256(dp.add((8 * b + j) * VNNI_MR) as *mut __m256i, *c) };
        }
    }
    let flip4 = u32::from_ne_bytes([flip; 4]);
    for r in 0..rows {
        let s = sad[r];
        let mut sum = (_mm256_extract_epi64::<0>(s)
            + _mm256_extract_epi64::<1>(s)
            + _mm256_extract_epi64::<2>(s)
            + _mm256_extract_epi64::<3>(s)) as i32;
        let row = &bytes[r * k..(r + 1) * k];
        let tail = &row[32 * blocks..];
        sum += tail.iter().map(|&v| (v ^ flip) as i32).sum::<i32>();
        sums[r] = sum;
        let mut chunks = tail.chunks_exact(4);
        for (i, c) in chunks.by_ref().enumerate() {
            dst[(8 * blocks + i) * VNNI_MR + r] =
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ flip4;
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

/// Transposes an 8×8 block of 32-bit words: output `j` holds word `j` of every input.
#[inline(always)]
fn transpose8x8_epi32(v: &[__m256i; 8]) -> [__m256i; 8] {
    // SAFETY: register-only AVX2 instructions; the caller enables AVX2.
    unsafe {
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
}
