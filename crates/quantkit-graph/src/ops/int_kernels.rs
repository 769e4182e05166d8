//! The integer operators' bridge to `quantkit_kernels`: exact i32 accumulators of
//! `conv(x − x_zp, w − w_zp)` and `(A − a_zp)·(B − b_zp)` computed by the optimized
//! kernels instead of the i64 reference loops, for the cases where that is provably exact.
//!
//! Eligible: 8-bit operands (u8 or i8 activations, i8 or u8 weights) with zero points inside
//! their type's range, a reduction length `K ≤ quantkit_kernels::gemm::MAX_K`, and the
//! overflow guard `K · max|a − a_zp| · max|w − w_zp| < 2³¹` (maxima over the actual
//! values), which bounds every accumulator inside i32, where the kernels' wrapping i32
//! arithmetic is exact. Everything else returns `None` and the operator runs its i64
//! reference (`conv_i64`, `matmul_i64`), which stays the definition both paths are tested
//! against. The operators' epilogues (bias, requantization in f64) are unchanged.

use super::conv::ConvGeom;
use super::mat_mul::matmul_shapes;
use crate::tensor::{broadcast_index, DType, Data, Tensor};
use quantkit_kernels::conv::{conv2d_i32, conv2d_output_shape, ConvParams, ConvWeights, NhwcInput};
use quantkit_kernels::gemm::{gemm_i32, Activations, PackedWeights, WeightLayout, MAX_K};

/// Which implementation computed an integer operator's accumulators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntPath {
    /// The optimized i32 kernels of `quantkit_kernels` (SIMD dispatched at run time).
    Kernel,
    /// The plain i64 reference loops.
    Reference,
}

/// An 8-bit integer tensor's elements, borrowed.
#[derive(Clone, Copy)]
enum Q8<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
}

impl<'a> Q8<'a> {
    /// The elements of `t` if its logical type is exactly u8 or i8.
    fn of(t: &'a Tensor) -> Option<Q8<'a>> {
        match (t.dtype, &t.data) {
            (DType::U8, Data::U8(v)) => Some(Q8::U8(v)),
            (DType::I8, Data::I8(v)) => Some(Q8::I8(v)),
            _ => None,
        }
    }

    /// The value range of the element type.
    fn range(self) -> (i64, i64) {
        match self {
            Q8::U8(_) => (0, 255),
            Q8::I8(_) => (-128, 127),
        }
    }

    /// Whether `z` is a value of the element type.
    fn holds(self, z: i64) -> bool {
        let (lo, hi) = self.range();
        (lo..=hi).contains(&z)
    }

    /// `max |v − z|` over the elements (0 when empty).
    fn max_dev(self, z: i64) -> i64 {
        let (lo, hi) = match self {
            Q8::U8(v) => min_max(v.iter().map(|&x| x as i64)),
            Q8::I8(v) => min_max(v.iter().map(|&x| x as i64)),
        };
        if lo > hi {
            0
        } else {
            (lo - z).abs().max((hi - z).abs())
        }
    }

    /// `max |v[i] − z[col(i)]|` with a zero point per column.
    fn max_dev_by(self, zs: &[i64], col: impl Fn(usize) -> usize) -> i64 {
        let dev = |i: usize, v: i64| (v - zs[col(i)]).abs();
        match self {
            Q8::U8(v) => v.iter().enumerate().map(|(i, &x)| dev(i, x as i64)).max(),
            Q8::I8(v) => v.iter().enumerate().map(|(i, &x)| dev(i, x as i64)).max(),
        }
        .unwrap_or(0)
    }
}

fn min_max(it: impl Iterator<Item = i64>) -> (i64, i64) {
    it.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// The overflow guard: every accumulator `Σ_K (a − a_zp)(w − w_zp)` has magnitude at most
/// `K · max_a · max_w`; below 2³¹ it fits in i32, and the kernels (which also reject
/// `K > MAX_K`) are exact.
pub fn accumulators_fit_i32(k: usize, max_a: i64, max_w: i64) -> bool {
    k <= MAX_K && (k as i128) * (max_a as i128) * (max_w as i128) < (1i128 << 31)
}

/// Weights in the kernels' stored i8 domain with zero points to match: i8 as they are, u8
/// as `w − 128` with zero points `zw − 128`, which leaves every `w − zw` unchanged (the
/// kernels' own convention for u8 weights, `docs/kernels.md`).
fn stored_weights<'a>(w: Q8<'a>, zs: &[i64]) -> (std::borrow::Cow<'a, [i8]>, Vec<i32>) {
    match w {
        Q8::I8(v) => (v.into(), zs.iter().map(|&z| z as i32).collect()),
        Q8::U8(v) => (
            v.iter()
                .map(|&x| (x ^ 0x80) as i8)
                .collect::<Vec<_>>()
                .into(),
            zs.iter().map(|&z| z as i32 - 128).collect(),
        ),
    }
}

/// `[N, C, H, W]` → `[N, H, W, C]`.
fn nchw_to_nhwc<T: Copy + Default>(x: &[T], n: usize, c: usize, hw: usize) -> Vec<T> {
    let mut y = vec![T::default(); x.len()];
    for ni in 0..n {
        let src = &x[ni * c * hw..(ni + 1) * c * hw];
        let dst = &mut y[ni * c * hw..(ni + 1) * c * hw];
        for ci in 0..c {
            for (p, &v) in src[ci * hw..(ci + 1) * hw].iter().enumerate() {
                dst[p * c + ci] = v;
            }
        }
    }
    y
}

/// `[R, C]` → `[C, R]`.
fn transpose<T: Copy + Default>(x: &[T], rows: usize, cols: usize) -> Vec<T> {
    let mut y = vec![T::default(); x.len()];
    for r in 0..rows {
        for c in 0..cols {
            y[c * rows + r] = x[r * cols + c];
        }
    }
    y
}

/// Whether the convolution `g` of `x` (zero point `xz`) with `w` (zero points `wz`, 1 or
/// `M`) runs on the kernels: 2-D spatial (rank-4 NCHW), 8-bit operands, zero points in
/// range, nothing empty, and [`accumulators_fit_i32`].
fn conv_eligible(g: &ConvGeom, x: &Tensor, xz: i64, w: &Tensor, wz: &[i64]) -> bool {
    let (Some(xq), Some(wq)) = (Q8::of(x), Q8::of(w)) else {
        return false;
    };
    g.k.len() == 2
        && xq.holds(xz)
        && (wz.len() == 1 || wz.len() == g.m)
        && wz.iter().all(|&z| wq.holds(z))
        && g.n > 0
        && g.c > 0
        && g.m > 0
        && g.out_len() > 0
        && g.in_sp.iter().all(|&d| d > 0)
        && {
            let per = w.len() / g.m;
            let max_w = if wz.len() == 1 {
                wq.max_dev(wz[0])
            } else {
                wq.max_dev_by(wz, |i| i / per)
            };
            accumulators_fit_i32(g.col_rows(), xq.max_dev(xz), max_w)
        }
}

/// The i32 accumulators `conv(x − xz, w − wz)` in NCHW order, computed by
/// `quantkit_kernels::conv` (input transposed to NHWC, weights packed, output transposed
/// back), or `None` when the case is not eligible (see the module docs) and the caller must
/// use `conv_i64`. `x` and `w` must be the tensors `g` was built from.
pub(crate) fn conv_acc(
    g: &ConvGeom,
    x: &Tensor,
    xz: i64,
    w: &Tensor,
    wz: &[i64],
) -> Option<Vec<i32>> {
    if !conv_eligible(g, x, xz, w, wz) {
        return None;
    }
    let (h, wd) = (g.in_sp[0], g.in_sp[1]);
    let params = ConvParams {
        kernel: [g.k[0], g.k[1]],
        stride: [g.strides[0], g.strides[1]],
        dilation: [g.dilations[0], g.dilations[1]],
        pads: [g.pad_begin[0], g.pad_begin[1], g.pad_end[0], g.pad_end[1]],
        groups: g.group,
    };
    let (wv, wzs) = stored_weights(Q8::of(w)?, wz);
    let cw = ConvWeights::new(&wv, g.m, g.c, params, &wzs).ok()?;
    let shape = [g.n, h, wd, g.c];
    let os = conv2d_output_shape(shape, &cw).ok()?;
    if os != [g.n, g.out_sp[0], g.out_sp[1], g.m] {
        return None;
    }
    let mut out = vec![0i32; os.iter().product()];
    let zero_point = xz as i32;
    match Q8::of(x)? {
        Q8::U8(v) => {
            let data = nchw_to_nhwc(v, g.n, g.c, h * wd);
            let input = NhwcInput {
                data: &data,
                shape,
                zero_point,
            };
            conv2d_i32(&input, &cw, &mut out).ok()?;
        }
        Q8::I8(v) => {
            let data = nchw_to_nhwc(v, g.n, g.c, h * wd);
            let input = NhwcInput {
                data: &data,
                shape,
                zero_point,
            };
            conv2d_i32(&input, &cw, &mut out).ok()?;
        }
    }
    let p = g.out_len();
    let mut y = vec![0i32; out.len()];
    for ni in 0..g.n {
        let src = &out[ni * p * g.m..(ni + 1) * p * g.m];
        let dst = &mut y[ni * p * g.m..(ni + 1) * p * g.m];
        for (pi, row) in src.chunks_exact(g.m).enumerate() {
            for (mi, &v) in row.iter().enumerate() {
                dst[mi * p + pi] = v;
            }
        }
    }
    Some(y)
}

/// How a matrix product's right operand is laid out.
#[derive(Clone, Copy)]
pub(crate) enum BLayout {
    /// `[.., K, N]` with numpy batch broadcasting against A (MatMul).
    Batched,
    /// A single `[N, K]` matrix (Gemm with `transB`).
    Transposed,
}

/// The i32 accumulators `(A − za)·(B − zb[j])` with the output shape, computed by
/// `quantkit_kernels::gemm`, or `None` when the case is not eligible (see the module docs)
/// and the caller must use `matmul_i64`.
///
/// `a` is `[.., M, K]` (rank ≥ 1, numpy matmul semantics) and `b` laid out as `layout` says;
/// `zb` holds one zero point or one per column `j < N`, applied in every batch (the
/// reference's convention). A per-row `a` zero point is not eligible: the caller passes
/// a single `za`.
pub(crate) fn matmul_acc(
    a: &Tensor,
    za: i64,
    b: &Tensor,
    zb: &[i64],
    layout: BLayout,
) -> Option<(Vec<usize>, Vec<i32>)> {
    let (aq, bq) = (Q8::of(a)?, Q8::of(b)?);
    let (out_shape, batch, m, k, n) = match layout {
        BLayout::Batched => matmul_shapes(&a.shape, &b.shape).ok()?,
        BLayout::Transposed => {
            if a.rank() != 2 || b.rank() != 2 || a.shape[1] != b.shape[1] {
                return None;
            }
            let (m, k, n) = (a.shape[0], a.shape[1], b.shape[0]);
            (vec![m, n], Vec::new(), m, k, n)
        }
    };
    if m == 0
        || k == 0
        || n == 0
        || !aq.holds(za)
        || !(zb.len() == 1 || zb.len() == n)
        || !zb.iter().all(|&z| bq.holds(z))
    {
        return None;
    }
    let max_b = if zb.len() == 1 {
        bq.max_dev(zb[0])
    } else {
        match layout {
            BLayout::Batched => bq.max_dev_by(zb, |i| i % n),
            BLayout::Transposed => bq.max_dev_by(zb, |i| i / k),
        }
    };
    if !accumulators_fit_i32(k, aq.max_dev(za), max_b) {
        return None;
    }
    let (wv, wzs) = stored_weights(bq, zb);
    let wl = match layout {
        BLayout::Batched => WeightLayout::KxN,
        BLayout::Transposed => WeightLayout::NxK,
    };
    // One packing per distinct B matrix (a 2-D B, the usual constant weight, is packed once).
    let packs = wv
        .chunks_exact(k * n)
        .map(|bm| PackedWeights::from_i8(bm, k, n, wl, &wzs).ok())
        .collect::<Option<Vec<_>>>()?;
    let own = |s: &[usize]| s[..s.len().saturating_sub(2)].to_vec();
    let (ai, bi) = match layout {
        BLayout::Batched => (
            broadcast_index(&own(&a.shape), &batch),
            broadcast_index(&own(&b.shape), &batch),
        ),
        BLayout::Transposed => (vec![0], vec![0]),
    };
    let mut y = vec![0i32; ai.len() * m * n];
    let za = za as i32;
    let gemm = |rows: std::ops::Range<usize>, w: &PackedWeights, out: &mut [i32]| {
        let mm = rows.len();
        let (r0, r1) = (rows.start * k, rows.end * k);
        match aq {
            Q8::U8(v) => gemm_i32(&Activations::u8(&v[r0..r1], mm, k, za), w, out),
            Q8::I8(v) => gemm_i32(&Activations::i8(&v[r0..r1], mm, k, za), w, out),
        }
        .ok()
    };
    if packs.len() == 1 && ai.iter().enumerate().all(|(bt, &i)| i == bt) {
        // One weight matrix and A's batches in order: a single GEMM over all rows.
        gemm(0..ai.len() * m, &packs[0], &mut y)?;
    } else {
        for (bt, out) in y.chunks_exact_mut(m * n).enumerate() {
            gemm(ai[bt] * m..(ai[bt] + 1) * m, &packs[bi[bt]], out)?;
        }
    }
    Some((out_shape, y))
}

/// `a` `[K, M]` of an 8-bit type as a contiguous `[M, K]` tensor of the same type (Gemm's
/// `transA`); `None` for other types.
pub(crate) fn transposed_2d(a: &Tensor) -> Option<Tensor> {
    if a.rank() != 2 {
        return None;
    }
    let (r, c) = (a.shape[0], a.shape[1]);
    let data = match Q8::of(a)? {
        Q8::U8(v) => Data::U8(transpose(v, r, c)),
        Q8::I8(v) => Data::I8(transpose(v, r, c)),
    };
    Tensor::new(vec![c, r], data).ok()
}
