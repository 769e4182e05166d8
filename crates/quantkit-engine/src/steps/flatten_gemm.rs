//! A GEMM step's input read through an absorbed `Flatten(axis = 1)`, matched by
//! `compile/flatten_gemm.rs`; [`super::GemmStep`] runs it.

use quantkit_kernels::gemm::{PackedWeights, WeightLayout};
use std::sync::OnceLock;

/// A GEMM whose A is `Flatten(axis = 1)` of the step's input, read in place: the ONNX
/// order `[d0, d1·d2·…]` is the input's own bytes when it is stored NCHW, and an NHWC
/// `[n, h, w, c]` input is the `[n, h·w·c]` matrix of the same products in (h, w, c) order,
/// so it is multiplied by a copy of the weights whose K rows are permuted from (c, h, w) to
/// (h, w, c) order. Column sums, weight zero points and the output stage are per output
/// column and do not move.
pub(crate) struct FlatInput {
    /// The unpacked weights as handed to [`PackedWeights::from_i8`].
    w: Vec<i8>,
    layout: WeightLayout,
    zero_points: Vec<i32>,
    /// The permuted weights, packed for the first NHWC `[h, w, c]` the step sees; an input
    /// of another shape takes the transposing path.
    nhwc: OnceLock<([usize; 3], PackedWeights)>,
}

impl FlatInput {
    pub fn new(w: Vec<i8>, layout: WeightLayout, zero_points: Vec<i32>) -> Self {
        FlatInput {
            w,
            layout,
            zero_points,
            nhwc: OnceLock::new(),
        }
    }

    /// The weights for an NHWC input of spatial shape `hwc` (`h·w·c = K`), packed on first
    /// use; `None` when they were packed for another shape.
    pub(super) fn nhwc_weights(
        &self,
        hwc: [usize; 3],
        k: usize,
        n: usize,
    ) -> quantkit_kernels::Result<Option<&PackedWeights>> {
        if self.nhwc.get().is_none() {
            let w = permute_k_chw_to_hwc(&self.w, hwc, k, n, self.layout);
            let packed = PackedWeights::from_i8(&w, k, n, self.layout, &self.zero_points)?;
            // Another thread may have won the race with another shape; `get` decides below.
            let _ = self.nhwc.set((hwc, packed));
        }
        let (shape, packed) = self.nhwc.get().expect("set above");
        Ok((*shape == hwc).then_some(packed))
    }
}

/// `w` (`[K, N]` or `[N, K]`, K in (c, h, w) order with `[h, w, c] = hwc`) with its K
/// index in (h, w, c) order: new row `(y·W + x)·C + ch` is old row `ch·H·W + y·W + x`.
pub(crate) fn permute_k_chw_to_hwc(
    w: &[i8],
    [h, wd, c]: [usize; 3],
    k: usize,
    n: usize,
    layout: WeightLayout,
) -> Vec<i8> {
    debug_assert_eq!(h * wd * c, k);
    debug_assert_eq!(w.len(), k * n);
    let old = |kn: usize| (kn % c) * h * wd + kn / c;
    let mut out = vec![0i8; w.len()];
    match layout {
        WeightLayout::KxN => {
            for (kn, row) in out.chunks_exact_mut(n.max(1)).enumerate().take(k) {
                let ko = old(kn);
                row.copy_from_slice(&w[ko * n..(ko + 1) * n]);
            }
        }
        WeightLayout::NxK => {
            for (dst, src) in out.chunks_exact_mut(k.max(1)).zip(w.chunks_exact(k.max(1))) {
                for (kn, d) in dst.iter_mut().enumerate() {
                    *d = src[old(kn)];
                }
            }
        }
    }
    out
}
