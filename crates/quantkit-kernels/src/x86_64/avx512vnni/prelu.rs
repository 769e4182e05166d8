//! `avx512_prelu_u8_16`: PRelu on u8 codes per channel ([`crate::prelu`]), 16 codes per
//! step in f32 lanes with the slopes repeated across pixels — the same IEEE steps as the portable loop (subtract,
//! multiply, compare, masked multiply, divide, the round-half-even magic, add, max, min,
//! truncate), so the same bytes; the portable loop's `f32` division does not vectorise
//! across its per-channel slope pattern, which made it 1.4 ns per code.

use std::arch::x86_64::*;

/// The parameters as the loop reads them.
pub(crate) struct PreluArgs<'a> {
    pub(crate) slopes: &'a [f32],
    pub(crate) s_in: f32,
    pub(crate) z_in: f32,
    pub(crate) s_out: f32,
    pub(crate) z_out: f32,
}

/// The least common multiple of `c` and 16.
pub(crate) fn lcm16(c: usize) -> usize {
    let (mut a, mut b) = (c, 16);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    c / a * 16
}

/// Maps `data` (whole pixels of `slopes.len()` channels) in place.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL; `data.len()` must be a multiple of the channel
/// count (checked by the caller; the loop only touches whole pixels either way).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn avx512_prelu_u8_16(a: &PreluArgs<'_>, data: &mut [u8]) {
    const MAGIC: f32 = 12_582_912.0;
    let c = a.slopes.len();
    let (s_in, z_in) = (_mm512_set1_ps(a.s_in), _mm512_set1_ps(a.z_in));
    let (s_out, z_out) = (_mm512_set1_ps(a.s_out), _mm512_set1_ps(a.z_out));
    let (magic, zero, top) = (
        _mm512_set1_ps(MAGIC),
        _mm512_setzero_ps(),
        _mm512_set1_ps(255.0),
    );
    // The slopes repeated to a multiple of 16 lanes (`lcm(c, 16)` values), so the codes are
    // read and written in straight 16-byte vectors across pixels: a masked store per pixel
    // followed by the next pixel's masked load of the same 16 bytes stalls on store
    // forwarding (P-Net's 10 channels ran at ~80 cycles per pixel that way).
    let period = lcm16(c);
    let ext: Vec<f32> = (0..period).map(|i| a.slopes[i % c]).collect();
    let n = data.len() / c * c;
    let p = data.as_mut_ptr();
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 {
            !0
        } else {
            (1u16 << (n - i)) - 1
        };
        // SAFETY: lanes i..i+16 masked to i..n lie inside `data`; the slope window
        // (i mod period)..+16 lies inside `ext` (period is a multiple of 16 and i of 16).
        unsafe {
            let x = _mm_maskz_loadu_epi8(m, p.add(i).cast());
            let k = _mm512_loadu_ps(ext.as_ptr().add(i % period));
            let v = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x)), z_in);
            let v = _mm512_mul_ps(v, s_in);
            let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, zero);
            let v = _mm512_mask_mul_ps(v, neg, k, v);
            let r = _mm512_sub_ps(_mm512_add_ps(_mm512_div_ps(v, s_out), magic), magic);
            let y = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, z_out), zero), top);
            let b = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(y));
            _mm_mask_storeu_epi8(p.add(i).cast(), m, b);
        }
        i += 16;
    }
}
