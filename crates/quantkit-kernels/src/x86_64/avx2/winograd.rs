//! `avx2_winograd_input_16`: the Winograd input transform of 16 channels in registers.

use std::arch::x86_64::*;

/// Positions of the 4×4 transform domain.
const XI: usize = 16;

/// `V = Bᵀ d B` of channels `c0..c0+16` with AVX2: the 16 source pixels widened to i16
/// minus the zero point (one `vpmovzxbw`/`vpmovsxbw` and one `vpsubw` each), the transform
/// in sixteen registers, sixteen 32-byte stores to `v[ξ·plane + off + c0..]`. Same values
/// as `crate::generic::winograd::winograd_input`.
///
/// # Safety
/// AVX2 must be available; every `src[k]` must hold at least `c0 + 16` bytes and `v` at
/// least `15·plane + off + c0 + 16` values.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_winograd_input_16(
    src: &[&[u8]; XI],
    signed: bool,
    c0: usize,
    za: i32,
    v: &mut [i16],
    plane: usize,
    off: usize,
) {
    debug_assert!(src.iter().all(|s| s.len() >= c0 + 16));
    debug_assert!(v.len() >= (XI - 1) * plane + off + c0 + 16);
    // SAFETY: the function contract (AVX2, bounds).
    unsafe {
        let zv = _mm256_set1_epi16(za as i16);
        let mut d = [_mm256_setzero_si256(); XI];
        for (dk, sk) in d.iter_mut().zip(src) {
            let raw = _mm_loadu_si128(sk.as_ptr().add(c0) as *const __m128i);
            let wide = if signed {
                _mm256_cvtepi8_epi16(raw)
            } else {
                _mm256_cvtepu8_epi16(raw)
            };
            *dk = _mm256_sub_epi16(wide, zv);
        }
        // Bᵀ down each column j, then along each row i (as in the scalar transform).
        let mut t = [_mm256_setzero_si256(); XI];
        for j in 0..4 {
            let (d0, d1, d2, d3) = (d[j], d[4 + j], d[8 + j], d[12 + j]);
            t[j] = _mm256_sub_epi16(d0, d2);
            t[4 + j] = _mm256_add_epi16(d1, d2);
            t[8 + j] = _mm256_sub_epi16(d2, d1);
            t[12 + j] = _mm256_sub_epi16(d1, d3);
        }
        let p = v.as_mut_ptr().add(off + c0);
        for i in 0..4 {
            let (t0, t1, t2, t3) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
            let out = [
                _mm256_sub_epi16(t0, t2),
                _mm256_add_epi16(t1, t2),
                _mm256_sub_epi16(t2, t1),
                _mm256_sub_epi16(t1, t3),
            ];
            for (j, o) in out.into_iter().enumerate() {
                _mm256_storeu_si256(p.add((4 * i + j) * plane) as *mut __m256i, o);
            }
        }
    }
}
