//! Values inside a running plan: a tensor plus its memory order. Integer 4-D tensors live
//! in NHWC (what the conv and pool kernels read); everything the graph crate's operators
//! see is in ONNX's NCHW order.

use quantkit_graph::{map_data, Data, Tensor};
use rayon::prelude::*;
use std::borrow::Cow;

/// A tensor and whether its 4-D data is stored NHWC. `tensor.shape` is the stored
/// (physical) shape: `[n, h, w, c]` when `nhwc`.
#[derive(Debug, Clone)]
pub(crate) struct Val {
    pub tensor: Tensor,
    pub nhwc: bool,
}

impl Val {
    pub fn nchw(tensor: Tensor) -> Val {
        Val {
            tensor,
            nhwc: false,
        }
    }

    /// The tensor in ONNX order (a transpose only when stored NHWC).
    pub fn to_nchw(&self) -> Cow<'_, Tensor> {
        if self.nhwc {
            Cow::Owned(permute4(&self.tensor, [0, 3, 1, 2]))
        } else {
            Cow::Borrowed(&self.tensor)
        }
    }

    /// The tensor in NHWC order; `None` unless it is 4-D.
    pub fn to_nhwc(&self) -> Option<Cow<'_, Tensor>> {
        if self.tensor.rank() != 4 {
            return None;
        }
        Some(if self.nhwc {
            Cow::Borrowed(&self.tensor)
        } else {
            Cow::Owned(permute4(&self.tensor, [0, 2, 3, 1]))
        })
    }

    /// Consumes the value, returning it in ONNX order.
    pub fn into_nchw(self) -> Tensor {
        if self.nhwc {
            permute4(&self.tensor, [0, 3, 1, 2])
        } else {
            self.tensor
        }
    }
}

/// `out` axis `i` is input axis `perm[i]` of a 4-D tensor.
pub(crate) fn permute4(t: &Tensor, perm: [usize; 4]) -> Tensor {
    let s = &t.shape;
    let shape: Vec<usize> = perm.iter().map(|&p| s[p]).collect();
    let in_strides = [s[1] * s[2] * s[3], s[2] * s[3], s[3], 1];
    let st: [usize; 4] = std::array::from_fn(|i| in_strides[perm[i]]);
    // The two layout changes are a transpose of each image's [C, H·W] or [H·W, C] matrix.
    let per_image = match perm {
        [0, 2, 3, 1] => Some((s[1], s[2] * s[3])),
        [0, 3, 1, 2] => Some((s[1] * s[2], s[3])),
        _ => None,
    };
    let data = match per_image {
        Some((rows, cols)) => map_data!(&t.data, v => transpose_images(v, rows, cols)),
        None => map_data!(&t.data, v => gather4(v, &shape, st)),
    };
    Tensor {
        dtype: t.dtype,
        shape,
        data,
    }
}

/// Transposes every `[rows, cols]` matrix of `v` (one per image), in 32×32 blocks so that
/// both sides stay in cache whatever the strides, images in parallel; 1–4 rows are
/// interleaved plane by plane, and whole blocks of bytes use SSE2.
fn transpose_images<T: Copy + Send + Sync>(v: &[T], rows: usize, cols: usize) -> Vec<T> {
    const B: usize = 32;
    let len = rows * cols;
    let Some(&first) = v.first() else {
        return Vec::new();
    };
    let mut out = vec![first; v.len()];
    // Bytes (u8/i8 codes): whole 32×32 blocks go through four SSE2 16×16 transposes.
    let bytes = std::mem::size_of::<T>() == 1 && std::mem::align_of::<T>() == 1;
    out.par_chunks_mut(len)
        .zip(v.par_chunks(len))
        .for_each(|(dst, src)| {
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
                // SAFETY: T is one byte with alignment 1 (u8 or i8 here), so its slices can be
                // viewed as bytes; the values written are copies of existing values.
                let (s8, d8) = unsafe {
                    (
                        std::slice::from_raw_parts(src.as_ptr() as *const u8, src.len()),
                        std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut u8, dst.len()),
                    )
                };
                transpose_bytes_sse2(s8, d8, rows, cols);
            }
            let _ = bytes;
            for r0 in (0..rows).step_by(B) {
                let r1 = (r0 + B).min(rows);
                for c0 in (0..cols).step_by(B) {
                    // Whole 32×32 blocks of bytes are done already (SSE2).
                    #[cfg(target_arch = "x86_64")]
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
        });
    out
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
    for r0 in (0..rows.saturating_sub(31)).step_by(32) {
        for c0 in (0..cols.saturating_sub(31)).step_by(32) {
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
        for s in 0..8 {
            let lo = _mm_unpacklo_epi64(c[0][s], c[1][s]);
            let hi = _mm_unpackhi_epi64(c[0][s], c[1][s]);
            _mm_storeu_si128(dst.add(2 * s * dst_stride) as *mut __m128i, lo);
            _mm_storeu_si128(dst.add((2 * s + 1) * dst_stride) as *mut __m128i, hi);
        }
    }
}

fn gather4<T: Copy>(v: &[T], shape: &[usize], st: [usize; 4]) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for a in 0..shape[0] {
        for b in 0..shape[1] {
            for c in 0..shape[2] {
                let base = a * st[0] + b * st[1] + c * st[2];
                out.extend((0..shape[3]).map(|d| v[base + d * st[3]]));
            }
        }
    }
    out
}

/// Builds a tensor from 8-bit integer data of the given kind.
pub(crate) fn tensor_u8(shape: Vec<usize>, v: Vec<u8>) -> Tensor {
    Tensor {
        dtype: quantkit_graph::DType::U8,
        shape,
        data: Data::U8(v),
    }
}

/// Builds an i8 tensor.
pub(crate) fn tensor_i8(shape: Vec<usize>, v: Vec<i8>) -> Tensor {
    Tensor {
        dtype: quantkit_graph::DType::I8,
        shape,
        data: Data::I8(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked per-image transpose equals the plain strided gather for both layout
    /// changes, on shapes that are not multiples of the block (and a 1×1 image).
    #[test]
    fn layout_transposes_equal_the_strided_gather() {
        let shapes = [
            [2, 3, 37, 41],
            [1, 64, 5, 7],
            [3, 33, 1, 1],
            [1, 1, 40, 33],
            [2, 256, 8, 8],
            [1, 70, 9, 11],
            [2, 2, 5, 3],
            [2, 4, 3, 6],
        ];
        for (shape, signed) in shapes.into_iter().flat_map(|s| [(s, false), (s, true)]) {
            let len: usize = shape.iter().product();
            let t = Tensor {
                dtype: quantkit_graph::DType::U8,
                shape: shape.to_vec(),
                data: if signed {
                    Data::I8((0..len).map(|i| (i * 7 % 251) as u8 as i8).collect())
                } else {
                    Data::U8((0..len).map(|i| (i * 7 % 251) as u8).collect())
                },
            };
            for perm in [[0, 2, 3, 1], [0, 3, 1, 2]] {
                let got = permute4(&t, perm);
                let s = &t.shape;
                let in_strides = [s[1] * s[2] * s[3], s[2] * s[3], s[3], 1];
                let st: [usize; 4] = std::array::from_fn(|i| in_strides[perm[i]]);
                let want = map_data!(&t.data, v => gather4(v, &got.shape, st));
                assert_eq!(got.data, want, "{shape:?} {perm:?}");
                let back = permute4(
                    &got,
                    if perm == [0, 2, 3, 1] {
                        [0, 3, 1, 2]
                    } else {
                        [0, 2, 3, 1]
                    },
                );
                assert_eq!(back.data, t.data, "{shape:?} {perm:?} round trip");
            }
        }
    }
}
