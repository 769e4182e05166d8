//! AVX2 depthwise conv in 16-channel blocks (`conv/dw_blocks.rs`, equations D1, D2).

use core::arch::x86_64::*;

use crate::conv::dw_blocks::{DwArgs, DW_BLOCK};

/// `a.n` output pixels of one row: per 16-channel block, two 8-lane i32 accumulators
/// start at (D1)'s initial values; per tap pair the two taps' 16 codes are widened to i16
/// (`vpmovzxbw` / `vpmovsxbw`), interleaved (`vpunpck{l,h}wd`) and multiplied with the
/// packed weight pairs (`vpmaddwd`); then (D2) in f32 and one 16-byte store.
///
/// # Safety
/// The CPU must have AVX2, and `a.in_bounds(out.len())` must hold.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn avx2_dw_u8i16_16<const SIGNED: bool>(a: &DwArgs<'_>, out: &mut [u8]) {
    let pairs = a.taps.len() / 2;
    let blocks = a.cp / DW_BLOCK;
    let x = a.x.as_ptr();
    let zv = _mm256_set1_epi32(a.z);
    let lo_f = _mm256_set1_ps((a.lo as i64 - a.z as i64) as f32);
    let hi_f = _mm256_set1_ps((a.hi as i64 - a.z as i64) as f32);
    let low_byte = _mm256_set1_epi16(0xff);
    for px in 0..a.n {
        let at = x.add(a.base + px * a.step);
        for blk in 0..blocks {
            let xb = at.add(blk * DW_BLOCK);
            let init = a.init.as_ptr().add(blk * DW_BLOCK);
            let mut acc0 = _mm256_loadu_si256(init as *const __m256i);
            let mut acc1 = _mm256_loadu_si256(init.add(8) as *const __m256i);
            let mut w = a.w.as_ptr().add(blk * pairs * 2 * DW_BLOCK);
            for pr in 0..pairs {
                let c0 = _mm_loadu_si128(xb.add(*a.taps.get_unchecked(2 * pr)) as *const __m128i);
                let c1 =
                    _mm_loadu_si128(xb.add(*a.taps.get_unchecked(2 * pr + 1)) as *const __m128i);
                let (v0, v1) = if SIGNED {
                    (_mm256_cvtepi8_epi16(c0), _mm256_cvtepi8_epi16(c1))
                } else {
                    (_mm256_cvtepu8_epi16(c0), _mm256_cvtepu8_epi16(c1))
                };
                let w0 = _mm256_loadu_si256(w as *const __m256i);
                let w1 = _mm256_loadu_si256(w.add(16) as *const __m256i);
                acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(v0, v1), w0));
                acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(v0, v1), w1));
                w = w.add(2 * DW_BLOCK);
            }
            let sc = a.scale.as_ptr().add(blk * DW_BLOCK);
            let f0 = _mm256_mul_ps(_mm256_cvtepi32_ps(acc0), _mm256_loadu_ps(sc));
            let f1 = _mm256_mul_ps(_mm256_cvtepi32_ps(acc1), _mm256_loadu_ps(sc.add(8)));
            let f0 = _mm256_min_ps(_mm256_max_ps(f0, lo_f), hi_f);
            let f1 = _mm256_min_ps(_mm256_max_ps(f1, lo_f), hi_f);
            let q0 = _mm256_add_epi32(_mm256_cvtps_epi32(f0), zv);
            let q1 = _mm256_add_epi32(_mm256_cvtps_epi32(f1), zv);
            // In-lane pack: lane 0 = channels 0–3 | 4–7, lane 1 = 8–11 | 12–15.
            let q = _mm256_and_si256(_mm256_packs_epi32(q0, q1), low_byte);
            let b = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi16(q, q));
            let bytes = _mm256_castsi256_si128(b);
            let o = px * a.c_out + blk * DW_BLOCK;
            let len = (a.c_out - blk * DW_BLOCK).min(DW_BLOCK);
            if len == DW_BLOCK {
                _mm_storeu_si128(out.as_mut_ptr().add(o) as *mut __m128i, bytes);
            } else {
                let mut tmp = [0u8; DW_BLOCK];
                _mm_storeu_si128(tmp.as_mut_ptr() as *mut __m128i, bytes);
                out[o..o + len].copy_from_slice(&tmp[..len]);
            }
        }
    }
}
