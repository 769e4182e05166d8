//! `avx512vbmi_lut_u8_64`: a 256-entry byte table applied to 64 bytes at a time with
//! `vpermi2b` (AVX-512 VBMI).
//!
//! The table sits in four zmm registers. `vpermi2b` indexes 128 bytes (two registers) by
//! the low 7 bits of each index byte, so one lookup in the lower half and one in the upper
//! half give both candidates, and bit 7 of the index (`vpmovb2m`) picks one: three
//! shuffle-port instructions per 64 bytes instead of 64 scalar loads and stores. The tail
//! (fewer than 64 bytes) uses masked loads and stores, so no byte outside `data` is read or
//! written.

use std::arch::x86_64::*;

/// `data[i] = table[data[i]]`, bit for bit `generic_lut_u8`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VBMI.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub unsafe fn avx512vbmi_lut_u8_64(table: &[u8; 256], data: &mut [u8]) {
    let t = table.as_ptr();
    // SAFETY: `table` holds 256 bytes: four unaligned 64-byte loads at 0, 64, 128, 192.
    let (t0, t1, t2, t3) = unsafe {
        (
            _mm512_loadu_si512(t.cast()),
            _mm512_loadu_si512(t.add(64).cast()),
            _mm512_loadu_si512(t.add(128).cast()),
            _mm512_loadu_si512(t.add(192).cast()),
        )
    };
    let look = |x: __m512i| {
        let lo = _mm512_permutex2var_epi8(t0, x, t1);
        let hi = _mm512_permutex2var_epi8(t2, x, t3);
        _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), lo, hi)
    };
    let n = data.len();
    let p = data.as_mut_ptr();
    let mut i = 0;
    while i + 64 <= n {
        // SAFETY: bytes i..i+64 lie inside `data` (loop condition).
        unsafe {
            let x = _mm512_loadu_si512(p.add(i).cast());
            _mm512_storeu_si512(p.add(i).cast(), look(x));
        }
        i += 64;
    }
    if i < n {
        let m: __mmask64 = (1u64 << (n - i)) - 1;
        // SAFETY: the mask covers bytes i..n only (n − i < 64); masked-off bytes are neither
        // read nor written (AVX-512 masked memory operations suppress their faults).
        unsafe {
            let x = _mm512_maskz_loadu_epi8(m, p.add(i).cast());
            _mm512_mask_storeu_epi8(p.add(i).cast(), m, look(x));
        }
    }
}
