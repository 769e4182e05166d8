//! Quantize / dequantize over n-d tensors (row-major slices plus a shape), with ONNX's
//! per-tensor, per-axis and blocked granularities.

use crate::error::{CoreError, Result};
use crate::linear::{dequantize_value, quantize_value, RoundingMode};
use crate::scheme::Granularity;

/// Maps each element of a row-major tensor to its (scale, zero point) slot.
///
/// With `outer = Π shape[..axis]`, `dim = shape[axis]`, `inner = Π shape[axis+1..]`, the
/// element at `(o, c, i)` uses slot `0` (per-tensor), `c` (per-axis) or
/// `(o · ceil(dim/B) + c/B) · inner + i` (blocked, block size `B`) — the row-major index in
/// the ONNX scale tensor whose shape is the input shape with `ceil(dim/B)` along `axis`.
#[derive(Debug, Clone, Copy)]
pub struct SlotMap {
    outer: usize,
    dim: usize,
    inner: usize,
    kind: Granularity,
    slots: usize,
}

impl SlotMap {
    /// Builds the map for `shape` at `granularity`, checking the axis and block size.
    pub fn new(shape: &[usize], granularity: Granularity) -> Result<SlotMap> {
        let slots = granularity.param_count(shape)?;
        let (axis, _) = granularity.onnx_axis_block();
        let (outer, dim, inner) = match granularity {
            Granularity::PerTensor => (1, shape.iter().product(), 1),
            _ => (
                shape[..axis].iter().product(),
                shape[axis],
                shape[axis + 1..].iter().product(),
            ),
        };
        Ok(SlotMap {
            outer,
            dim,
            inner,
            kind: granularity,
            slots,
        })
    }

    /// Number of slots (length of the scale tensor).
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Number of elements of the tensor.
    pub fn len(&self) -> usize {
        self.outer * self.dim * self.inner
    }

    /// True for an empty tensor.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f(flat_index, slot)` for every element in row-major order.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(usize, usize)) {
        match self.kind {
            Granularity::PerTensor => (0..self.len()).for_each(|i| f(i, 0)),
            Granularity::PerChannel { .. } => {
                let mut flat = 0;
                for _ in 0..self.outer {
                    for c in 0..self.dim {
                        for _ in 0..self.inner {
                            f(flat, c);
                            flat += 1;
                        }
                    }
                }
            }
            Granularity::PerGroup { group_size, .. } => {
                let nb = self.dim.div_ceil(group_size);
                let mut flat = 0;
                for o in 0..self.outer {
                    for c in 0..self.dim {
                        let base = (o * nb + c / group_size) * self.inner;
                        for i in 0..self.inner {
                            f(flat, base + i);
                            flat += 1;
                        }
                    }
                }
            }
        }
    }
}

/// Resolves ONNX `(scale length, axis, block_size)` to a granularity: a single scale with
/// `block_size == 0` is per-tensor, `block_size == 0` otherwise is per-axis, `block_size > 0`
/// is blocked.
fn onnx_granularity(n_scales: usize, axis: usize, block_size: usize) -> Result<Granularity> {
    if block_size > 0 {
        Ok(Granularity::PerGroup {
            axis,
            group_size: block_size,
        })
    } else if n_scales == 1 {
        // A single scale is per-tensor; for shape[axis] == 1 per-axis would be the same.
        Ok(Granularity::PerTensor)
    } else {
        Ok(Granularity::PerChannel { axis })
    }
}

fn check_len(what: &str, expected: usize, got: usize) -> Result<()> {
    if expected != got {
        return Err(CoreError::ShapeMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            got: got.to_string(),
        });
    }
    Ok(())
}

fn prepare(
    len: usize,
    shape: &[usize],
    scales: &[f32],
    zero_points: &[i32],
    axis: usize,
    block_size: usize,
) -> Result<SlotMap> {
    let g = onnx_granularity(scales.len(), axis, block_size)?;
    let map = SlotMap::new(shape, g)?;
    check_len(
        &format!("input with shape {shape:?}: number of elements"),
        map.len(),
        len,
    )?;
    check_len(
        &format!("input with shape {shape:?} ({g:?}): number of scales"),
        map.slots(),
        scales.len(),
    )?;
    if !zero_points.is_empty() {
        check_len(
            "number of zero points (must equal number of scales)",
            scales.len(),
            zero_points.len(),
        )?;
    }
    for &s in scales {
        if !(s.is_finite() && s > 0.0) {
            return Err(CoreError::InvalidScale {
                tensor: "x".into(),
                scale: s,
            });
        }
    }
    Ok(map)
}

/// ONNX `QuantizeLinear` (opset 13–21 semantics) over a row-major tensor:
/// `y = saturate(round(x / scale) + zero_point)` (eq. 1) with per-tensor (`scales.len() == 1`,
/// `block_size == 0`), per-axis (`scales.len() == shape[axis]`, `block_size == 0`) or blocked
/// (`block_size > 0`, scales in the blocked shape) parameters. `zero_points` may be empty
/// (all zero, as when ONNX's optional input is absent).
///
/// Errors: element count ≠ product of `shape`, wrong number of scales / zero points, an axis
/// out of range, a scale that is not finite and positive, a zero point outside
/// `[qmin, qmax]`. NaN elements follow [`quantize_value`]'s policy (→ zero point).
#[allow(clippy::too_many_arguments)]
pub fn quantize_linear(
    x: &[f32],
    shape: &[usize],
    scales: &[f32],
    zero_points: &[i32],
    axis: usize,
    block_size: usize,
    qmin: i32,
    qmax: i32,
    mode: RoundingMode,
) -> Result<Vec<i32>> {
    let map = prepare(x.len(), shape, scales, zero_points, axis, block_size)?;
    for &z in zero_points {
        if z < qmin || z > qmax {
            return Err(CoreError::ZeroPointOutOfRange {
                tensor: "x".into(),
                zero_point: z,
                qmin,
                qmax,
            });
        }
    }
    let mut out = vec![0i32; x.len()];
    map.for_each(|i, s| {
        let z = zero_points.get(s).copied().unwrap_or(0);
        out[i] = quantize_value(x[i], scales[s], z, qmin, qmax, mode);
    });
    Ok(out)
}

/// ONNX `DequantizeLinear` over a row-major tensor: `y = (q − zero_point) · scale` (eq. 2),
/// with the same layouts and checks as [`quantize_linear`].
pub fn dequantize_linear(
    q: &[i32],
    shape: &[usize],
    scales: &[f32],
    zero_points: &[i32],
    axis: usize,
    block_size: usize,
) -> Result<Vec<f32>> {
    let map = prepare(q.len(), shape, scales, zero_points, axis, block_size)?;
    let mut out = vec![0f32; q.len()];
    map.for_each(|i, s| {
        let z = zero_points.get(s).copied().unwrap_or(0);
        out[i] = dequantize_value(q[i], scales[s], z);
    });
    Ok(out)
}

/// Errors with [`CoreError::NonFinite`] (naming `tensor` and the first bad element) if `x`
/// contains NaN or ±Inf.
pub fn check_finite(tensor: &str, x: &[f32]) -> Result<()> {
    // Blocks without an early exit vectorise; only a block that has a non-finite value is
    // searched for its index.
    if x.chunks(1024)
        .all(|b| b.iter().fold(true, |ok, v| ok & v.is_finite()))
    {
        return Ok(());
    }
    match x.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(CoreError::NonFinite {
            tensor: tensor.to_string(),
            index,
            value: x[index],
        }),
    }
}

/// `(min, max)` of each parameter slot of `x`. Errors on non-finite data or a shape mismatch.
/// A slot with no elements (only possible for an empty tensor) gets `(0, 0)`.
pub fn minmax_per_slot(
    tensor: &str,
    x: &[f32],
    shape: &[usize],
    granularity: Granularity,
) -> Result<Vec<(f32, f32)>> {
    let map = SlotMap::new(shape, granularity)?;
    check_len(
        &format!("tensor '{tensor}' with shape {shape:?}: number of elements"),
        map.len(),
        x.len(),
    )?;
    check_finite(tensor, x)?;
    let mut r = vec![(f32::INFINITY, f32::NEG_INFINITY); map.slots()];
    match granularity {
        // Each slot is whole contiguous runs: reduce run by run.
        Granularity::PerTensor => r[0] = run_minmax(x, r[0]),
        Granularity::PerChannel { .. } if map.inner > 0 => {
            for (k, run) in x.chunks_exact(map.inner).enumerate() {
                let e = &mut r[k % map.dim];
                *e = run_minmax(run, *e);
            }
        }
        _ => map.for_each(|i, s| {
            let v = x[i];
            let e = &mut r[s];
            e.0 = e.0.min(v);
            e.1 = e.1.max(v);
        }),
    }
    for e in &mut r {
        if e.0 > e.1 {
            *e = (0.0, 0.0);
        }
    }
    Ok(r)
}

/// `(min, max)` of `acc` and the values of `x`, which must be finite (the caller checked):
/// 16 lanes at a time, so it vectorises. Min and max of finite values do not depend on the
/// order they are taken in, except for the sign of a zero result, which no range computation
/// sees (`choose_qparams` widens the range to hold 0 first).
fn run_minmax(x: &[f32], acc: (f32, f32)) -> (f32, f32) {
    const L: usize = 16;
    let mut lo = [acc.0; L];
    let mut hi = [acc.1; L];
    let mut blocks = x.chunks_exact(L);
    for b in &mut blocks {
        for j in 0..L {
            lo[j] = if b[j] < lo[j] { b[j] } else { lo[j] };
            hi[j] = if b[j] > hi[j] { b[j] } else { hi[j] };
        }
    }
    let (mut a, mut z) = acc;
    for &v in blocks.remainder().iter().chain(&lo) {
        a = if v < a { v } else { a };
    }
    for &v in blocks.remainder().iter().chain(&hi) {
        z = if v > z { v } else { z };
    }
    (a, z)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The run-wise reduction equals an element-by-element reference for every
        /// granularity, including runs shorter than a 16-lane block and signed zeros (equal
        /// by `==`, the only sense in which a range's zero matters).
        #[test]
        fn minmax_per_slot_equals_the_element_reference(
            shape in proptest::collection::vec(1usize..7, 1..4),
            seed in 0u64..1000,
            axis_pick in 0usize..3,
            group_size in 1usize..4,
        ) {
            let n: usize = shape.iter().product();
            let mut z = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    z = z.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    match z >> 60 {
                        0 => -0.0,
                        1 => 0.0,
                        _ => ((z >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 200.0,
                    }
                })
                .collect();
            let axis = axis_pick % shape.len();
            for g in [
                Granularity::PerTensor,
                Granularity::PerChannel { axis },
                Granularity::PerGroup { axis, group_size },
            ] {
                let got = minmax_per_slot("t", &x, &shape, g).unwrap();
                let map = SlotMap::new(&shape, g).unwrap();
                let mut want = vec![(f32::INFINITY, f32::NEG_INFINITY); map.slots()];
                map.for_each(|i, s| {
                    want[s].0 = want[s].0.min(x[i]);
                    want[s].1 = want[s].1.max(x[i]);
                });
                for e in &mut want {
                    if e.0 > e.1 {
                        *e = (0.0, 0.0);
                    }
                }
                proptest::prop_assert_eq!(got, want, "{:?} {:?}", shape, g);
            }
        }
    }

    #[test]
    fn per_axis_and_blocked_layouts() {
        // shape [2, 3], axis 1: scale per column.
        let x = [1.0, 2.0, 3.0, -1.0, -2.0, -3.0];
        let q = quantize_linear(
            &x,
            &[2, 3],
            &[1.0, 2.0, 3.0],
            &[0, 1, 2],
            1,
            0,
            -128,
            127,
            RoundingMode::HalfToEven,
        )
        .unwrap();
        assert_eq!(q, vec![1, 2, 3, -1, 0, 1]);
        // Blocked along axis 1 with block 2: shape [2, 3] → scales shape [2, 2].
        let q = quantize_linear(
            &x,
            &[2, 3],
            &[1.0, 0.5, 2.0, 0.25],
            &[],
            1,
            2,
            -128,
            127,
            RoundingMode::HalfToEven,
        )
        .unwrap();
        assert_eq!(q, vec![1, 2, 6, -0, -1, -12]);
        let d = dequantize_linear(&q, &[2, 3], &[1.0, 0.5, 2.0, 0.25], &[], 1, 2).unwrap();
        assert_eq!(d, vec![1.0, 2.0, 3.0, 0.0, -2.0, -3.0]);
        // Blocked along axis 0 of [3, 2] with block 2 → scales shape [2, 2].
        let q = quantize_linear(
            &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            &[3, 2],
            &[1.0, 0.5, 0.25, 0.125],
            &[],
            0,
            2,
            -128,
            127,
            RoundingMode::HalfToEven,
        )
        .unwrap();
        assert_eq!(q, vec![1, 2, 1, 2, 4, 8]);
    }

    #[test]
    fn errors() {
        let m = RoundingMode::HalfToEven;
        assert!(matches!(
            quantize_linear(&[1.0; 5], &[2, 3], &[1.0], &[0], 0, 0, 0, 255, m),
            Err(CoreError::ShapeMismatch { .. })
        ));
        assert!(matches!(
            quantize_linear(&[1.0; 6], &[2, 3], &[1.0, 1.0], &[], 1, 0, 0, 255, m),
            Err(CoreError::ShapeMismatch { .. })
        ));
        assert!(matches!(
            quantize_linear(&[1.0; 6], &[2, 3], &[0.0], &[], 1, 0, 0, 255, m),
            Err(CoreError::InvalidScale { .. })
        ));
        assert!(matches!(
            quantize_linear(&[1.0; 6], &[2, 3], &[1.0], &[300], 1, 0, 0, 255, m),
            Err(CoreError::ZeroPointOutOfRange { .. })
        ));
        assert!(matches!(
            minmax_per_slot("act", &[1.0, f32::NAN], &[2], Granularity::PerTensor),
            Err(CoreError::NonFinite { index: 1, .. })
        ));
        let e = minmax_per_slot("act", &[1.0, f32::INFINITY], &[2], Granularity::PerTensor)
            .unwrap_err();
        assert!(e.to_string().contains("'act'"), "{e}");
    }
}
