//! Values inside a running plan: a tensor plus its memory order. Integer 4-D tensors live
//! in NHWC (what the conv and pool kernels read); everything the graph crate's operators
//! see is in ONNX's NCHW order.

use quantkit_graph::{map_data, Data, Tensor};
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
    let data = map_data!(&t.data, v => gather4(v, &shape, st));
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
