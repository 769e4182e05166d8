//! Values inside a running plan: a tensor plus its memory order. Integer 4-D tensors live
//! in NHWC (what the conv and pool kernels read); everything the graph crate's operators
//! see is in ONNX's NCHW order.

use quantkit_graph::{map_data, Data, Tensor};
use quantkit_kernels::transpose::transpose_images;
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
    // The two layout changes are a transpose of each image's [C, H·W] or [H·W, C] matrix
    // (the kernels' blocked transpose, SSE2 for bytes unless QUANTKIT_ISA=scalar).
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
