//! MSE-optimal clipping of a constant tensor (weights), per parameter slot.
//!
//! A weight is known in full, so its clip range can be chosen on the exact values rather
//! than on a histogram (the activation observers' [`crate::HistogramMethod::Mse`]): for
//! each slot (an output channel, the whole tensor, or a block), every clip ratio
//! `α = k / WEIGHT_CLIP_STEPS`, `k = WEIGHT_CLIP_STEPS, …, 1`, gives the range
//! `α·(min', max')` (`min' = min(min, 0)`, `max' = max(max, 0)`, as equation (3) widens
//! it), its scale and zero point by [`choose_qparams`], and the error
//!
//! ```text
//! E(α) = Σ_i (x_i − DQ(Q(x_i)))²        (Q, DQ: equations (1)–(2), half to even)
//! ```
//!
//! summed in f64 over the slot's values. The smallest `E` wins; ties keep the larger `α`.
//! `α = 1` is the min/max range, so the result never has a larger error than min/max
//! (for a symmetric weight scheme, `max|x| / q_max`). This is the per-channel clip search
//! of most low-bit recipes (e.g. the MSE initialisation of LSQ-style QAT); quantkit's QAT
//! starts its narrow weight scales from it (`docs/qat.md`).

use crate::error::{CoreError, Result};
use crate::linear::{dequantize_value, quantize_value, RoundingMode};
use crate::params::choose_qparams;
use crate::scheme::QuantScheme;
use crate::tensor::{check_finite, SlotMap};

/// Number of clip ratios tried per slot: `α = k / WEIGHT_CLIP_STEPS` for
/// `k = WEIGHT_CLIP_STEPS, …, 1` (steps of 0.5 % of the min/max range).
pub const WEIGHT_CLIP_STEPS: usize = 200;

/// The clip range `α·(min', max')` of each slot of `x` (shape `shape`, slots from
/// `scheme.granularity`) that minimises the quantization error `E(α)` under `scheme`
/// (module docs). Feed the result to [`crate::QParams::from_ranges`] with the same
/// scheme. Errors on NaN/±Inf (naming `tensor` and the element) or a shape that does not
/// match `x`.
pub fn mse_clip_ranges(
    tensor: &str,
    x: &[f32],
    shape: &[usize],
    scheme: &QuantScheme,
) -> Result<Vec<(f32, f32)>> {
    let map = SlotMap::new(shape, scheme.granularity)?;
    if map.len() != x.len() {
        return Err(CoreError::ShapeMismatch {
            what: format!("tensor '{tensor}' with shape {shape:?}: number of elements"),
            expected: map.len().to_string(),
            got: x.len().to_string(),
        });
    }
    check_finite(tensor, x)?;
    scheme.validate()?;
    let mut per: Vec<Vec<f32>> = vec![Vec::new(); map.slots()];
    map.for_each(|i, s| per[s].push(x[i]));
    per.iter().map(|v| slot_range(tensor, v, scheme)).collect()
}

/// The search of one slot.
fn slot_range(tensor: &str, v: &[f32], scheme: &QuantScheme) -> Result<(f32, f32)> {
    let lo = v.iter().copied().fold(0f32, f32::min);
    let hi = v.iter().copied().fold(0f32, f32::max);
    let (qmin, qmax) = (scheme.qmin(), scheme.qmax());
    let mut best = (f64::INFINITY, (lo, hi));
    for k in (1..=WEIGHT_CLIP_STEPS).rev() {
        let a = k as f32 / WEIGHT_CLIP_STEPS as f32;
        let r = (lo * a, hi * a);
        let (s, z) = choose_qparams(tensor, r.0, r.1, scheme)?;
        // Stops as soon as the partial sum reaches the best error: such a candidate can no
        // longer win (ties keep the earlier, wider one).
        let mut e = 0f64;
        for &x in v {
            let d = f64::from(x)
                - f64::from(dequantize_value(
                    quantize_value(x, s, z, qmin, qmax, RoundingMode::HalfToEven),
                    s,
                    z,
                ));
            e += d * d;
            if e >= best.0 {
                break;
            }
        }
        if e < best.0 {
            best = (e, r);
        }
    }
    Ok(best.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::QParams;
    use crate::scheme::Granularity;

    /// Deterministic bell-shaped values (sum of four uniforms), with `outliers` of them
    /// replaced by values 6–12× the bulk's spread.
    fn channel(n: usize, seed: u64, outliers: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut u = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut v: Vec<f32> = (0..n)
            .map(|_| (u() + u() + u() + u() - 2.0) * 0.05)
            .collect();
        for j in 0..outliers.min(n) {
            let sign = if u() < 0.5 { -1.0 } else { 1.0 };
            v[(j * 7919) % n] = sign * (0.3 + 0.3 * u());
        }
        v
    }

    fn error(x: &[f32], r: (f32, f32), scheme: &QuantScheme) -> f64 {
        let (s, z) = choose_qparams("", r.0, r.1, scheme).unwrap();
        x.iter()
            .map(|&v| {
                let q = quantize_value(
                    v,
                    s,
                    z,
                    scheme.qmin(),
                    scheme.qmax(),
                    RoundingMode::HalfToEven,
                );
                let d = f64::from(v) - f64::from(dequantize_value(q, s, z));
                d * d
            })
            .sum()
    }

    /// Every ratio's full error, the smallest kept (ties: the larger ratio): the search
    /// without its early exit, written out.
    fn exhaustive(x: &[f32], scheme: &QuantScheme) -> (f32, f32) {
        let lo = x.iter().copied().fold(0f32, f32::min);
        let hi = x.iter().copied().fold(0f32, f32::max);
        let mut all: Vec<(f64, usize, (f32, f32))> = (1..=WEIGHT_CLIP_STEPS)
            .map(|k| {
                let a = k as f32 / WEIGHT_CLIP_STEPS as f32;
                let r = (lo * a, hi * a);
                (error(x, r, scheme), k, r)
            })
            .collect();
        all.sort_by(|p, q| p.0.total_cmp(&q.0).then(q.1.cmp(&p.1)));
        all[0].2
    }

    /// Per-channel weights `[C, 3, 3, 3]` (axis 0) and `[K, C]` Gemm weights (axis 1), bell
    /// shaped and outlier heavy, at 2, 3, 4 and 8 bits: the search equals the exhaustive
    /// reference bit for bit, and its error is never above `max|x| / q_max`'s.
    #[test]
    fn clip_search_equals_exhaustive_and_never_loses_to_max() {
        let (c, k) = (12usize, 27usize);
        let mut conv = Vec::new();
        for ch in 0..c {
            conv.extend(channel(k, ch as u64 + 1, [0, 0, 1, 3][ch % 4]));
        }
        let gemm_t: Vec<Vec<f32>> = (0..c)
            .map(|ch| channel(40, 100 + ch as u64, ch % 3))
            .collect();
        // [40, C] with column ch = gemm_t[ch].
        let gemm: Vec<f32> = (0..40)
            .flat_map(|r| (0..c).map(move |ch| (r, ch)))
            .map(|(r, ch)| gemm_t[ch][r])
            .collect();
        let mut strictly_better = 0;
        for bits in [2u8, 3, 4, 8] {
            let base = QuantScheme::new(bits, true).unwrap().with_symmetric(true);
            for (x, shape, axis, cols) in [
                (&conv, vec![c, 3, 3, 3], 0usize, None),
                (&gemm, vec![40, c], 1, Some(&gemm_t)),
            ] {
                let scheme = base.with_granularity(Granularity::PerChannel { axis });
                let r = mse_clip_ranges("w", x, &shape, &scheme).unwrap();
                let mm = QParams::from_tensor("w", x, &shape, &scheme).unwrap();
                assert_eq!(r.len(), c);
                for (ch, &rc) in r.iter().enumerate() {
                    let v: Vec<f32> = match cols {
                        Some(t) => t[ch].clone(),
                        None => x[ch * k..(ch + 1) * k].to_vec(),
                    };
                    assert_eq!(
                        rc,
                        exhaustive(&v, &scheme),
                        "{bits} bits, axis {axis}, channel {ch}"
                    );
                    let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let e_max = error(&v, (-amax, amax), &scheme);
                    let e = error(&v, rc, &scheme);
                    assert!(e <= e_max, "{bits} bits, channel {ch}: {e} > {e_max}");
                    // max/q_max is the min/max scale of the symmetric scheme.
                    assert_eq!(
                        choose_qparams("", -amax, amax, &scheme).unwrap().0,
                        mm.scales[ch]
                    );
                    if e < e_max {
                        strictly_better += 1;
                    }
                }
            }
        }
        // Outliers make clipping pay at narrow widths.
        assert!(strictly_better >= 20, "{strictly_better}");
        // Per tensor: one range.
        let t = QuantScheme::new(4, true).unwrap().with_symmetric(true);
        let r = mse_clip_ranges("w", &conv, &[c, 3, 3, 3], &t).unwrap();
        assert_eq!(r, vec![exhaustive(&conv, &t)]);
    }

    /// An outlier-heavy channel at 4 bits: a clipped range, with well under the error of
    /// max/q_max; a channel of zeros keeps its (empty) range; a bell-shaped channel
    /// clips a little at 4 bits and barely at 8.
    #[test]
    fn outliers_are_clipped_at_four_bits() {
        let s4 = QuantScheme::new(4, true).unwrap().with_symmetric(true);
        // Two weights 3–6× the bulk's largest among 4,096.
        let v = channel(4096, 9, 2);
        let r = mse_clip_ranges("w", &v, &[4096], &s4).unwrap()[0];
        let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(r.1 < 0.6 * amax, "{r:?} of {amax}");
        assert!(error(&v, r, &s4) < 0.5 * error(&v, (-amax, amax), &s4));
        assert_eq!(
            mse_clip_ranges("w", &[0.0; 9], &[9], &s4).unwrap()[0],
            (0.0, 0.0)
        );
        let b = channel(4096, 3, 0);
        let bmax = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        let r4 = mse_clip_ranges("w", &b, &[4096], &s4).unwrap()[0];
        let s8 = QuantScheme::new(8, true).unwrap().with_symmetric(true);
        let r8 = mse_clip_ranges("w", &b, &[4096], &s8).unwrap()[0];
        assert!(r4.1 < bmax && r8.1 > r4.1, "{r4:?} {r8:?} of {bmax}");
    }

    #[test]
    fn bad_input_names_the_tensor() {
        let s = QuantScheme::new(4, true).unwrap().with_symmetric(true);
        let e = mse_clip_ranges("conv1.weight", &[1.0, f32::NAN], &[2], &s).unwrap_err();
        assert!(e.to_string().contains("conv1.weight"), "{e}");
        let e = mse_clip_ranges("conv1.weight", &[1.0; 3], &[2, 2], &s).unwrap_err();
        assert!(e.to_string().contains("conv1.weight"), "{e}");
    }
}
