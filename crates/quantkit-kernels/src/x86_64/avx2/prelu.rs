//! `avx2_prelu_u8_8`: PRelu on u8 codes per channel ([`crate::prelu`]), 8 codes per step
//! in f32 lanes with the slopes repeated across pixels, the same IEEE steps as the portable loop (the slope's
//! product is formed in every lane and blended in where `v < 0`, which selects the same
//! value), so the same bytes. The last codes past a multiple of 8 take the portable
//! per-code steps.

use std::arch::x86_64::*;

use crate::x86_64::avx512vnni::prelu::{lcm16, PreluArgs};

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
    let (s_in, z_in) = (_mm256_set1_ps(a.s_in), _mm256_set1_ps(a.z_in));
    let (s_out, z_out) = (_mm256_set1_ps(a.s_out), _mm256_set1_ps(a.z_out));
    let (magic, zero, top) = (
        _mm256_set1_ps(MAGIC),
        _mm256_setzero_ps(),
        _mm256_set1_ps(255.0),
    );
    // The slopes repeated to a multiple of 8 lanes, so codes go in straight 8-byte vectors
    // across pixels (see the AVX-512 kernel); the last `n mod 8` codes take the portable
    // steps.
    let period = lcm16(c);
    let ext: Vec<f32> = (0..period).map(|i| a.slopes[i % c]).collect();
    let n = data.len() / c * c;
    let full = n / 8 * 8;
    let p = data.as_mut_ptr();
    for i in (0..full).step_by(8) {
        // SAFETY: bytes i..i+8 lie inside `data` (i + 8 ≤ full ≤ n); the slope window
        // (i mod period)..+8 lies inside `ext` (period is a multiple of 16, i of 8).
        unsafe {
            let x = _mm_loadl_epi64(p.add(i).cast());
            let k = _mm256_loadu_ps(ext.as_ptr().add(i % period));
            let v = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)), z_in);
            let v = _mm256_mul_ps(v, s_in);
            let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, zero);
            let v = _mm256_blendv_ps(v, _mm256_mul_ps(k, v), neg);
            let r = _mm256_sub_ps(_mm256_add_ps(_mm256_div_ps(v, s_out), magic), magic);
            let y = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(r, z_out), zero), top);
            let y = _mm256_cvttps_epi32(y);
            let w = _mm_packus_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y));
            _mm_storel_epi64(p.add(i).cast(), _mm_packus_epi16(w, w));
        }
    }
    for (i, q) in data[full..n].iter_mut().enumerate() {
        *q = one(a, *q, a.slopes[(full + i) % c]);
    }
}
