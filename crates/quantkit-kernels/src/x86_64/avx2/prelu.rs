//! `avx2_prelu_u8_8`: PRelu on u8 codes per channel ([`crate::prelu`]), 8 channels of one
//! pixel per step in f32 lanes, the same IEEE steps as the portable loop (the slope's
//! product is formed in every lane and blended in where `v < 0`, which selects the same
//! value), so the same bytes. Channels past the last multiple of 8 take the portable
//! per-code steps.

use std::arch::x86_64::*;

use crate::x86_64::avx512vnni::prelu::PreluArgs;

const MAGIC: f32 = 12_582_912.0;

/// One code, the portable loop's steps (max/min as quantize_code has them).
#[inline(always)]
#[allow(clippy::manual_clamp)]
fn one(a: &PreluArgs<'_>, x: u8, k: f32) -> u8 {
    let v = (x as f32 - a.z_in) * a.s_in;
    let v = if v < 0.0 { k * v } else { v };
    let r = (v / a.s_out + MAGIC) - MAGIC;
    (r + a.z_out).max(0.0).min(255.0) as u8
}

/// Maps `data` (whole pixels of `slopes.len()` channels) in place.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn avx2_prelu_u8_8(a: &PreluArgs<'_>, data: &mut [u8]) {
    let c = a.slopes.len();
    let full = c / 8 * 8;
    let (s_in, z_in) = (_mm256_set1_ps(a.s_in), _mm256_set1_ps(a.z_in));
    let (s_out, z_out) = (_mm256_set1_ps(a.s_out), _mm256_set1_ps(a.z_out));
    let (magic, zero, top) = (
        _mm256_set1_ps(MAGIC),
        _mm256_setzero_ps(),
        _mm256_set1_ps(255.0),
    );
    for px in data.chunks_exact_mut(c) {
        let p = px.as_mut_ptr();
        for c0 in (0..full).step_by(8) {
            // SAFETY: bytes and slopes c0..c0+8 lie inside this pixel (c0 + 8 ≤ full ≤ c).
            unsafe {
                let x = _mm_loadl_epi64(p.add(c0).cast());
                let k = _mm256_loadu_ps(a.slopes.as_ptr().add(c0));
                let v = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)), z_in);
                let v = _mm256_mul_ps(v, s_in);
                let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, zero);
                let v = _mm256_blendv_ps(v, _mm256_mul_ps(k, v), neg);
                let r = _mm256_sub_ps(_mm256_add_ps(_mm256_div_ps(v, s_out), magic), magic);
                let y = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, z_out), zero), top);
                let y = _mm256_cvttps_epi32(y);
                let w =
                    _mm_packus_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y));
                _mm_storel_epi64(p.add(c0).cast(), _mm_packus_epi16(w, w));
            }
        }
        for (q, &k) in px[full..].iter_mut().zip(&a.slopes[full..]) {
            *q = one(a, *q, k);
        }
    }
}
