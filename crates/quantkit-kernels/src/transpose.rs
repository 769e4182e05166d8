//! Per-image matrix transposes: the NCHW ↔ NHWC layout changes of the integer engine
//! (`[C, H·W]` ↔ `[H·W, C]` per image).
//!
//! Blocked 32×32 so that both sides stay in cache whatever the strides, images in parallel;
//! 1–4 rows (an RGB or grey image's channels) are interleaved plane by plane; whole blocks of
//! bytes (8-bit codes) go through four SSE2 16×16 byte transposes each. A transpose only
//! copies values, so every path gives the same result (tested below). The SSE2 path is
//! chosen in [`transpose_images_with`] from [`crate::dispatch::isa`], so
//! `QUANTKIT_ISA=scalar` makes it scalar.

use rayon::prelude::*;

use crate::dispatch::{isa, Isa};

/// Block edge of the cache-blocked copy (and of the SSE2 byte path: four 16×16 blocks).
const B: usize = 32;

/// Transposes every `[rows, cols]` matrix of `v` (one per image, `v.len()` a multiple of
/// `rows · cols`) into `[cols, rows]`: `out[i·L + c·rows + r] = v[i·L + r·cols + c]` with
/// `L = rows · cols`.
pub fn transpose_images<T: Copy + Send + Sync>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    transpose_images_with(isa(), v, rows, cols)
}

/// [`transpose_images`] on `isa`: when the table of `isa` has a SIMD copy of the
/// element-wise passes, whole byte blocks take SSE2 (part of x86-64, so every such ISA has
/// it); an ISA the CPU lacks runs the scalar loop.
pub fn transpose_images_with<T: Copy + Send + Sync>(
    isa: Isa,
    v: &[T],
    rows: usize,
    cols: usize,
) -> Vec<T> {
    let len = rows * cols;
    let Some(&first) = v.first() else {
        return Vec::new();
    };
    let mut out = vec![first; v.len()];
    // Bytes (u8/i8 codes): whole 32×32 blocks go through four SSE2 16×16 transposes.
    let bytes = cfg!(target_arch = "x86_64")
        && std::mem::size_of::<T>() == 1
        && crate::dispatch::table_for(isa).is_ok_and(|k| k.elementwise().is_simd())
        && std::mem::align_of::<T>() == 1;
    if crate::par::in_serial() {
        // Inside a chunk of whole images: the other workers have chunks of their own.
        out.chunks_mut(len)
            .zip(v.chunks(len))
            .for_each(|(dst, src)| transpose_one(src, dst, rows, cols, bytes));
    } else {
        out.par_chunks_mut(len)
            .zip(v.par_chunks(len))
            .for_each(|(dst, src)| transpose_one(src, dst, rows, cols, bytes));
    }
    out
}

/// One image; `bytes` says whether the whole byte blocks go through SSE2.
fn transpose_one<T: Copy>(src: &[T], dst: &mut [T], rows: usize, cols: usize, bytes: bool) {
    // Few rows (an RGB or grey image's channels into NHWC): interleave planes.
    match rows {
        1 => return dst.copy_from_slice(src),
        2 => return interleave::<T, 2>(src, dst, cols),
        3 => return interleave::<T, 3>(src, dst, cols),
        4 => return interleave::<T, 4>(src, dst, cols),
        _ => {}
    }
    #[cfg(target_arch = "x86_64")]
    if bytes {
        // SAFETY: `bytes` holds only for T of one byte with alignment 1 (u8 or i8 here), so
        // its slices can be viewed as bytes; the values written are copies of existing values.
        let (s8, d8) = unsafe {
            (
                std::slice::from_raw_parts(src.as_ptr() as *const u8, src.len()),
                std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u8, dst.len()),
            )
        };
        transpose_bytes_sse2(s8, d8, rows, cols);
    }
    for r0 in (0..rows).step_by(B) {
        let r1 = (r0 + B).min(rows);
        for c0 in (0..cols).step_by(B) {
            // Whole 32×32 blocks of bytes are done already (SSE2).
            if bytes && r1 - r0 == B && c0 + B <= cols {
                continue;
            }
            for c in c0..(c0 + B).min(cols) {
                let d = &mut dst[c * rows + r0..c * rows + r1];
                // A strided iterator: no bounds check per element.
                let s = src[r0 * cols + c..].iter().step_by(cols);
                for (o, &v) in d.iter_mut().zip(s) {
                    *o = v;
                }
            }
        }
    }
}

/// `dst[p·R + r] = src[r·cols + p]`: R planes of `cols` values interleaved.
fn interleave<T: Copy, const R: usize>(src: &[T], dst: &mut [T], cols: usize) {
    let planes: [&[T]; R] = std::array::from_fn(|r| &src[r * cols..(r + 1) * cols]);
    for (p, d) in dst[..R * cols].chunks_exact_mut(R).enumerate() {
        for r in 0..R {
            d[r] = planes[r][p];
        }
    }
}

/// The whole 32×32 blocks of [`transpose_images`] on one image of bytes (`src` `[rows,
/// cols]` into `dst` `[cols, rows]`), as four 16×16 SSE2 transposes each (SSE2 is part of
/// x86-64); the caller does the partial blocks at the edges.
#[cfg(target_arch = "x86_64")]
fn transpose_bytes_sse2(src: &[u8], dst: &mut [u8], rows: usize, cols: usize) {
    assert!(src.len() >= rows * cols && dst.len() >= rows * cols);
    for r0 in (0..rows.saturating_sub(B - 1)).step_by(B) {
        for c0 in (0..cols.saturating_sub(B - 1)).step_by(B) {
            for (dr, dc) in [(0, 0), (0, 16), (16, 0), (16, 16)] {
                // SAFETY: rows r0+dr..+16 and columns c0+dc..+16 lie inside the image
                // (r0 + 32 ≤ rows, c0 + 32 ≤ cols), in both src and dst (asserted sizes).
                unsafe {
                    transpose16x16(
                        src.as_ptr().add((r0 + dr) * cols + c0 + dc),
                        cols,
                        dst.as_mut_ptr().add((c0 + dc) * rows + r0 + dr),
                        rows,
                    )
                };
            }
        }
    }
}

/// `dst[j·dst_stride + i] = src[i·src_stride + j]` for a 16×16 block of bytes: four rounds
/// of unpacks (bytes, words, dwords, qwords), each doubling the run of rows a lane holds
/// for one column.
///
/// # Safety
/// The 16 rows of 16 bytes at `src` (stride `src_stride`) and at `dst` (stride
/// `dst_stride`) must be valid, and not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn transpose16x16(src: *const u8, src_stride: usize, dst: *mut u8, dst_stride: usize) {
    use std::arch::x86_64::*;
    // SAFETY (every load/store): inside the blocks the caller vouches for; SSE2 is baseline.
    unsafe {
        let r: [__m128i; 16] =
            std::array::from_fn(|i| _mm_loadu_si128(src.add(i * src_stride) as *const __m128i));
        // a[k][h]: rows 2k, 2k+1; columns 8h..8h+8 (one 16-bit lane per column).
        let a: [[__m128i; 2]; 8] = std::array::from_fn(|k| {
            [
                _mm_unpacklo_epi8(r[2 * k], r[2 * k + 1]),
                _mm_unpackhi_epi8(r[2 * k], r[2 * k + 1]),
            ]
        });
        // b[m][q]: rows 4m..4m+4; columns 4q..4q+4.
        let b: [[__m128i; 4]; 4] = std::array::from_fn(|m| {
            std::array::from_fn(|q| {
                let (x, y) = (a[2 * m][q / 2], a[2 * m + 1][q / 2]);
                if q % 2 == 0 {
                    _mm_unpacklo_epi16(x, y)
                } else {
                    _mm_unpackhi_epi16(x, y)
                }
            })
        });
        // c[n][s]: rows 8n..8n+8; columns 2s, 2s+1.
        let c: [[__m128i; 8]; 2] = std::array::from_fn(|n| {
            std::array::from_fn(|s| {
                let (x, y) = (b[2 * n][s / 2], b[2 * n + 1][s / 2]);
                if s % 2 == 0 {
                    _mm_unpacklo_epi32(x, y)
                } else {
                    _mm_unpackhi_epi32(x, y)
                }
            })
        });
        for (s, (&x, &y)) in c[0].iter().zip(&c[1]).enumerate() {
            let lo = _mm_unpacklo_epi64(x, y);
            let hi = _mm_unpackhi_epi64(x, y);
            _mm_storeu_si128(dst.add(2 * s * dst_stride) as *mut __m128i, lo);
            _mm_storeu_si128(dst.add((2 * s + 1) * dst_stride) as *mut __m128i, hi);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definition: `out[i·L + c·rows + r] = v[i·L + r·cols + c]`.
    fn naive<T: Copy>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
        let len = rows * cols;
        let mut out = v.to_vec();
        for (i, img) in v.chunks(len).enumerate() {
            for r in 0..rows {
                for c in 0..cols {
                    out[i * len + c * rows + r] = img[r * cols + c];
                }
            }
        }
        out
    }

    /// Every ISA (SSE2 byte blocks or not) equals the plain definition, for bytes and wider
    /// values, on shapes around the 16/32 block edges and the 1–4-row interleaves.
    #[test]
    fn every_path_equals_the_plain_transpose() {
        let dims = [1usize, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 64, 65, 70];
        for &rows in &dims {
            for &cols in &dims {
                for images in [1usize, 3] {
                    let n = images * rows * cols;
                    let bytes: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
                    let signed: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
                    let wide: Vec<f32> = (0..n).map(|i| i as f32).collect();
                    for isa in Isa::ALL.into_iter().filter(|i| i.is_supported()) {
                        let at = format!("{isa}, {images}×[{rows}, {cols}]");
                        let got = transpose_images_with(isa, &bytes, rows, cols);
                        assert_eq!(got, naive(&bytes, rows, cols), "{at}");
                        let got = transpose_images_with(isa, &signed, rows, cols);
                        assert_eq!(got, naive(&signed, rows, cols), "{at}");
                        let got = transpose_images_with(isa, &wide, rows, cols);
                        assert_eq!(got, naive(&wide, rows, cols), "{at}");
                    }
                }
            }
        }
        assert!(transpose_images_with::<u8>(Isa::Scalar, &[], 3, 4).is_empty());
    }
}
