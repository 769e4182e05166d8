//! `avx2_lut_u8_32`: a 256-entry byte table applied to 32 bytes at a time with `vpshufb`
//! (AVX2 has no 256-byte permute).
//!
//! The table is 16 rows of 16 bytes, row `h` holding the entries of the codes whose high
//! nibble is `h`, each broadcast to both 128-bit lanes. `vpshufb` looks up the low 4 bits of
//! each index byte and writes 0 where bit 7 of the index is set, so row `h` is looked up
//! with the index `sat(x − 16h + 0x70)`: with `y = x − 16h` (wrapping), `y + 0x70`
//! saturated at 255 is below 0x80 exactly when `y < 16`, i.e. when the high nibble of `x`
//! is `h` (for `x < 16h` the wrapped `y` is ≥ 0x10 too), and keeps the low nibble there.
//! So exactly one row writes a non-zero candidate for each byte, and the OR of the 16
//! lookups is `table[x]`. 4 vector operations per row, 64 per 32 bytes, against 32 scalar
//! loads, lookups and stores. The tail (fewer than 32 bytes) goes through a stack copy, so
//! no byte outside `data` is read or written.

use std::arch::x86_64::*;

/// `data[i] = table[data[i]]`, bit for bit `generic_lut_u8`.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn avx2_lut_u8_32(table: &[u8; 256], data: &mut [u8]) {
    // SAFETY: `table` holds 256 bytes: 16 unaligned 16-byte loads at 0, 16, ..., 240.
    let rows: [__m256i; 16] = std::array::from_fn(|h| unsafe {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(table.as_ptr().add(16 * h).cast()))
    });
    let look = |x: __m256i| {
        let (bias, step) = (_mm256_set1_epi8(0x70), _mm256_set1_epi8(0x10));
        let mut y = x;
        let mut r = _mm256_setzero_si256();
        for row in &rows {
            r = _mm256_or_si256(r, _mm256_shuffle_epi8(*row, _mm256_adds_epu8(y, bias)));
            y = _mm256_sub_epi8(y, step);
        }
        r
    };
    let n = data.len();
    let p = data.as_mut_ptr();
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: bytes i..i+32 lie inside `data` (loop condition).
        unsafe {
            let x = _mm256_loadu_si256(p.add(i).cast());
            _mm256_storeu_si256(p.add(i).cast(), look(x));
        }
        i += 32;
    }
    if i < n {
        let mut buf = [0u8; 32];
        buf[..n - i].copy_from_slice(&data[i..]);
        // SAFETY: `buf` holds 32 bytes.
        unsafe {
            let x = _mm256_loadu_si256(buf.as_ptr().cast());
            _mm256_storeu_si256(buf.as_mut_ptr().cast(), look(x));
        }
        data[i..].copy_from_slice(&buf[..n - i]);
    }
}
