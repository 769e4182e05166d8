//! Fixed-point requantization: a real multiplier `M > 0` as `M0 · 2^(shift − 31)` with `M0` a
//! Q0.31 `i32`, applied to an `i32` accumulator with integer arithmetic only.
//!
//! This is the output stage of integer-only inference (equations (9)–(11) of
//! `docs/quantization.md`): with `M = s_in · s_w / s_out`, the requantized output is
//! `y = z_out + round(M · acc)`. The two rounding variants are TFLite's:
//!
//! - [`FixedPointRounding::DoubleRounding`] — gemmlowp's
//!   `SaturatingRoundingDoublingHighMul` followed by `RoundingDivideByPOT` (TFLite's default
//!   `MultiplyByQuantizedMultiplier`);
//! - [`FixedPointRounding::SingleRounding`] — TFLite's `TFLITE_SINGLE_ROUNDING` variant: one
//!   64-bit product, one rounding right shift.
//!
//! Sources: gemmlowp `fixedpoint/fixedpoint.h`, TFLite `kernels/internal/common.h` and
//! `quantization_util.cc` (read for semantics; this is an independent implementation).

use crate::error::{CoreError, Result};

/// Which integer rounding [`QuantizedMultiplier::apply`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FixedPointRounding {
    /// gemmlowp / TFLite default:
    /// `rounding_divide_by_pot(saturating_rounding_doubling_high_mul(acc · 2^l, M0), r)`
    /// with `l = max(shift, 0)`, `r = max(−shift, 0)`. Two roundings (the first ties towards
    /// +∞, the second ties away from zero); the result is within `0.5 + 2^−(r+1)` (≤ 1) of the exact `acc · M0 · 2^(shift−31)`.
    #[default]
    DoubleRounding,
    /// TFLite single rounding: `(acc · M0 + 2^(t−1)) >> t` with `t = 31 − shift`, computed in
    /// 64 bits (arithmetic shift). One rounding, half towards +∞; the result is the exact
    /// `acc · M0 · 2^(shift−31)` rounded to nearest (ties up).
    SingleRounding,
}

/// A positive real multiplier in fixed point: `M ≈ multiplier · 2^(shift − 31)`.
///
/// `multiplier` is `M0` in Q0.31, in `[2^30, 2^31 − 1]` for every non-zero multiplier made
/// by [`QuantizedMultiplier::from_f64`]; `shift` is a *left* shift (TFLite's convention):
/// negative for `M < 0.5`, positive for `M ≥ 1`. `from_f64` keeps `shift` in `[−31, 30]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantizedMultiplier {
    /// `M0`, the significand in Q0.31 (`M0 / 2^31 ∈ [0.5, 1)`), or 0 for a flushed multiplier.
    pub multiplier: i32,
    /// Power-of-two exponent: `M = M0 · 2^(shift − 31)`. Positive means a left shift.
    pub shift: i32,
}

impl QuantizedMultiplier {
    /// The zero multiplier (every accumulator maps to 0).
    pub const ZERO: QuantizedMultiplier = QuantizedMultiplier {
        multiplier: 0,
        shift: 0,
    };

    /// Splits `m` into `(M0, shift)` with `m = (M0 / 2^31) · 2^shift`, `M0 / 2^31 ∈ [0.5, 1)`
    /// (TFLite `QuantizeMultiplier`):
    ///
    /// 1. `m = q · 2^e` with `q ∈ [0.5, 1)` (C `frexp`);
    /// 2. `M0 = round_half_away(q · 2^31)`; if that is `2^31`, use `2^30` and `e + 1`;
    /// 3. `shift = e`.
    ///
    /// The relative error of the representation is at most `2^−31` (`|M − m| ≤ 2^(shift−32)`).
    ///
    /// Tiny multipliers: if `shift < −31` (i.e. `m < 2^−32`) the result is
    /// [`QuantizedMultiplier::ZERO`]. This flush is exact for round-to-nearest: every `i32`
    /// accumulator times such an `m` has magnitude below `0.5`, so the rounded result is 0
    /// anyway. `m == 0` also gives `ZERO`.
    ///
    /// Errors: `m` negative, NaN or infinite, or so large that it rounds to `2^30` or more
    /// (`shift` would exceed 30, which the single-rounding path cannot take; TFLite silently
    /// saturates these to a wrong multiplier, quantkit refuses).
    pub fn from_f64(m: f64) -> Result<QuantizedMultiplier> {
        if !m.is_finite() {
            return Err(CoreError::InvalidMultiplier {
                value: m,
                reason: "not finite",
            });
        }
        if m < 0.0 {
            return Err(CoreError::InvalidMultiplier {
                value: m,
                reason: "negative",
            });
        }
        if m == 0.0 {
            return Ok(Self::ZERO);
        }
        let Some((q, mut e)) = frexp(m) else {
            // Subnormal f64: far below 2^-32, flushes to zero like any tiny multiplier.
            return Ok(Self::ZERO);
        };
        // q·2^31 is an exact scaling of q; f64::round is half away from zero (C round).
        let mut q_fixed = (q * 2f64.powi(31)).round() as i64;
        debug_assert!(q_fixed <= 1i64 << 31);
        if q_fixed == 1i64 << 31 {
            q_fixed /= 2;
            e += 1;
        }
        if e < -31 {
            return Ok(Self::ZERO);
        }
        if e > 30 {
            return Err(CoreError::InvalidMultiplier {
                value: m,
                reason:
                    "too large (shift would exceed 30; the single-rounding path needs shift <= 30)",
            });
        }
        Ok(QuantizedMultiplier {
            multiplier: q_fixed as i32,
            shift: e,
        })
    }

    /// The requantization multiplier of eq. (10), `M = s_in · s_w / s_out` computed in f64,
    /// in fixed point (see [`QuantizedMultiplier::from_f64`]). Errors if a scale is not
    /// finite and positive, or `M` is too large.
    pub fn from_scales(s_in: f32, s_w: f32, s_out: f32) -> Result<QuantizedMultiplier> {
        for s in [s_in, s_w, s_out] {
            if !(s.is_finite() && s > 0.0) {
                return Err(CoreError::InvalidMultiplier {
                    value: f64::from(s),
                    reason: "scales must be finite and positive",
                });
            }
        }
        Self::from_f64(f64::from(s_in) * f64::from(s_w) / f64::from(s_out))
    }

    /// The real value this fixed-point multiplier represents exactly:
    /// `multiplier · 2^(shift − 31)`.
    pub fn to_f64(self) -> f64 {
        f64::from(self.multiplier) * 2f64.powi(self.shift - 31)
    }

    /// Computes `round(acc · M0 · 2^(shift − 31))` with the given rounding variant,
    /// saturated to the `i32` range.
    ///
    /// Exact integer formulas (`l = max(shift, 0)`, `r = max(−shift, 0)`, `t = 31 − shift`):
    ///
    /// - `DoubleRounding`: `rounding_divide_by_pot(srdhm(acc · 2^l, M0), r)`
    ///   where `srdhm` is [`saturating_rounding_doubling_high_mul`] and
    ///   `rounding_divide_by_pot` is [`rounding_divide_by_pot`]. Identical to TFLite's
    ///   `MultiplyByQuantizedMultiplier` whenever `acc · 2^l` fits in `i32`. When it does
    ///   not (C++ overflow, undefined behaviour in TFLite), quantkit evaluates the same
    ///   formula in wide integers and saturates the final result, so a large
    ///   product saturates to `i32::MIN`/`i32::MAX` instead of wrapping.
    /// - `SingleRounding`: `(acc · M0 + 2^(t−1)) >> t` in 64 (here 128) bits, saturated to
    ///   `i32` (TFLite only `DCHECK`s that it fits).
    ///
    /// Shifts outside `[−31, 30]` (only possible for a hand-built value) are handled by the
    /// same formulas in wide arithmetic.
    #[inline]
    pub fn apply(self, acc: i32, mode: FixedPointRounding) -> i32 {
        let m0 = i64::from(self.multiplier);
        match mode {
            FixedPointRounding::DoubleRounding => {
                if (0..=31).contains(&self.shift) || (-31..0).contains(&self.shift) {
                    let l = self.shift.max(0);
                    let r = (-self.shift).max(0);
                    let x = i64::from(acc) << l;
                    if let Ok(x32) = i32::try_from(x) {
                        // The TFLite path, bit for bit.
                        return rounding_divide_by_pot(
                            saturating_rounding_doubling_high_mul(x32, self.multiplier),
                            r,
                        );
                    }
                    // acc·2^l overflows i32: same two roundings in wide integers, then saturate.
                    let high = srdhm_wide(i128::from(x), i128::from(m0));
                    return saturate_i32(rdbp_wide(high, r as u32));
                }
                // Hand-built shift outside TFLite's range: wide arithmetic throughout.
                let (l, r) = if self.shift > 0 {
                    (self.shift.min(96) as u32, 0)
                } else {
                    (0, (-self.shift).min(126) as u32)
                };
                let x = i128::from(acc) << l.min(64);
                let high = srdhm_wide(x, i128::from(m0));
                saturate_i32(rdbp_wide(high, r))
            }
            FixedPointRounding::SingleRounding => {
                let t = 31 - self.shift;
                if (1..=62).contains(&t) && self.multiplier >= 0 {
                    // TFLite's 64-bit path: |acc·M0| ≤ 2^62 and the rounding term ≤ 2^61,
                    // so the sum fits in i64.
                    let p = i64::from(acc) * m0 + (1i64 << (t - 1));
                    return (p >> t).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
                }
                let p = i128::from(acc) * i128::from(m0);
                if t <= 0 {
                    let l = (-t).min(64) as u32;
                    return saturate_i32(p << l);
                }
                let t = t.min(126) as u32;
                saturate_i32((p + (1i128 << (t - 1))) >> t)
            }
        }
    }
}

/// gemmlowp `SaturatingRoundingDoublingHighMul`: the high 32 bits of `2·a·b`, rounded to
/// nearest.
///
/// Exact formula: `p = a·b` (64-bit); `nudge = 2^30` if `p ≥ 0` else `1 − 2^30`;
/// result `= trunc((p + nudge) / 2^31)` (division truncating towards zero). The single
/// overflow case `a = b = i32::MIN` (true result `2^31`) saturates to `i32::MAX`.
///
/// Note on ties: despite the sign-dependent nudge this is `floor(p / 2^31 + 1/2)` for every
/// `p`, i.e. ties round towards +∞ (`−0.5 → 0`, `0.5 → 1`), not away from zero. (For
/// `p < 0`, `trunc((p + 1 − 2^30)/2^31) = ceil(...)`, which equals `floor((2p + 2^31)/2^32)`
/// because `2p + 2^31 + 1` is odd.) The tests check this against exact integer arithmetic.
#[inline]
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let p = i64::from(a) * i64::from(b);
    let nudge = if p >= 0 { 1i64 << 30 } else { 1 - (1i64 << 30) };
    // |p| < 2^62 here, so p + nudge cannot overflow and the quotient fits in i32.
    ((p + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp `RoundingDivideByPOT`: `x / 2^exponent` rounded to nearest, ties away from zero.
///
/// Exact formula: `mask = 2^exponent − 1`; `remainder = x & mask`;
/// `threshold = (mask >> 1) + (1 if x < 0 else 0)`;
/// result `= (x >> exponent) + (1 if remainder > threshold else 0)` (arithmetic shift).
///
/// `exponent` must be in `0..=31` as in gemmlowp; larger exponents are accepted and give the
/// correctly rounded result (0, or −1 for `i32::MIN` at exponent 32). Panics if `exponent`
/// is negative — that is a left shift, a caller bug.
#[inline]
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    assert!(
        exponent >= 0,
        "rounding_divide_by_pot: negative exponent {exponent}"
    );
    let e = exponent.min(62) as u32;
    let x = i64::from(x);
    let mask = (1i64 << e) - 1;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i64::from(x < 0);
    ((x >> e) + i64::from(remainder > threshold)) as i32
}

/// `srdhm` without the i32 restriction: `floor(a·b / 2^31 + 1/2)`.
fn srdhm_wide(a: i128, b: i128) -> i128 {
    let p = a * b;
    let nudge = if p >= 0 {
        1i128 << 30
    } else {
        1 - (1i128 << 30)
    };
    (p + nudge) / (1i128 << 31)
}

/// `rounding_divide_by_pot` without the i32 restriction.
fn rdbp_wide(x: i128, e: u32) -> i128 {
    let mask = (1i128 << e) - 1;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i128::from(x < 0);
    (x >> e) + i128::from(remainder > threshold)
}

fn saturate_i32(v: i128) -> i32 {
    v.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32
}

/// C `frexp` for positive, finite, normal `m`: `m = q · 2^e`, `q ∈ [0.5, 1)`.
/// `None` for subnormal input.
fn frexp(m: f64) -> Option<(f64, i32)> {
    let bits = m.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        return None;
    }
    // Replace the exponent by that of 0.5 (biased 1022).
    let q = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    Some((q, biased - 1022))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact rational reference: `acc · M0 / 2^t`, returned as (numerator, t).
    fn exact(qm: QuantizedMultiplier, acc: i32) -> (i128, i32) {
        (i128::from(acc) * i128::from(qm.multiplier), 31 - qm.shift)
    }

    /// Round-half-up of num/2^t, in wide integers.
    fn round_half_up(num: i128, t: i32) -> i128 {
        if t <= 0 {
            num << (-t)
        } else {
            (num + (1i128 << (t - 1))) >> t
        }
    }

    fn accs() -> Vec<i32> {
        let mut v = vec![
            0,
            1,
            -1,
            2,
            -2,
            3,
            -3,
            127,
            -128,
            255,
            1 << 15,
            -(1 << 15),
            (1 << 20) + 7,
            -(1 << 20) - 7,
            i32::MAX,
            i32::MIN,
            i32::MAX - 1,
            i32::MIN + 1,
        ];
        // Deterministic pseudo-random accumulators (xorshift).
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let shift = (s >> 59) as u32; // 0..31: spread the magnitudes
            v.push((s as i32) >> shift);
        }
        v
    }

    fn multipliers() -> Vec<f64> {
        let mut v = vec![
            1e-9,
            2f64.powi(-31),
            2f64.powi(-31) * 1.5,
            0.0003,
            0.01,
            0.1,
            0.25,
            0.5,
            0.7,
            1.0 - 1e-12,
            1.0 - 2f64.powi(-32),
            1.0,
            1.0 + 1e-12,
            1.0 + 2f64.powi(-30),
            1.5,
            2.0,
            3.7,
            1000.0,
            65535.9,
            2f64.powi(29) * 1.9,
        ];
        let mut m = 1.234e-8f64;
        while m < 1e8 {
            v.push(m);
            m *= 3.7;
        }
        v
    }

    #[test]
    fn srdhm_edge_cases() {
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MIN),
            i32::MAX
        );
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MAX),
            -i32::MAX
        );
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MAX, i32::MAX),
            i32::MAX - 1
        );
        assert_eq!(saturating_rounding_doubling_high_mul(0, i32::MIN), 0);
        // 1 · 2^30 / 2^31 = 0.5 → 1; −0.5 → 0 (ties towards +∞, see the doc comment).
        assert_eq!(saturating_rounding_doubling_high_mul(1, 1 << 30), 1);
        assert_eq!(saturating_rounding_doubling_high_mul(-1, 1 << 30), 0);
        assert_eq!(saturating_rounding_doubling_high_mul(-3, 1 << 30), -1); // −1.5 → −1
                                                                            // Just below a tie.
        assert_eq!(saturating_rounding_doubling_high_mul(1, (1 << 30) - 1), 0);
        assert_eq!(saturating_rounding_doubling_high_mul(-1, (1 << 30) - 1), 0);
    }

    #[test]
    fn srdhm_against_wide_reference() {
        for &a in &accs() {
            for &b in &accs()[..200] {
                let want = if a == i32::MIN && b == i32::MIN {
                    i32::MAX
                } else {
                    // floor(a·b/2^31 + 1/2) in exact integers (arithmetic shift = floor).
                    let p = i128::from(a) * i128::from(b);
                    ((p + (1i128 << 30)) >> 31) as i32
                };
                assert_eq!(saturating_rounding_doubling_high_mul(a, b), want, "{a}*{b}");
            }
        }
    }

    #[test]
    fn rdbp_edge_cases_and_reference() {
        assert_eq!(rounding_divide_by_pot(5, 0), 5);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 0), i32::MIN);
        assert_eq!(rounding_divide_by_pot(3, 1), 2); // 1.5 → 2
        assert_eq!(rounding_divide_by_pot(-3, 1), -2); // −1.5 → −2
        assert_eq!(rounding_divide_by_pot(5, 2), 1); // 1.25 → 1
        assert_eq!(rounding_divide_by_pot(-6, 2), -2); // −1.5 → −2
        assert_eq!(rounding_divide_by_pot(i32::MAX, 31), 1); // 0.99… → 1
        assert_eq!(rounding_divide_by_pot(i32::MIN, 31), -1);
        assert_eq!(rounding_divide_by_pot(1 << 30, 31), 1); // 0.5 → 1
        assert_eq!(rounding_divide_by_pot(-(1 << 30), 31), -1); // −0.5 → −1
        assert_eq!(rounding_divide_by_pot((1 << 30) - 1, 31), 0);
        assert_eq!(rounding_divide_by_pot(i32::MAX, 40), 0);
        for &x in &accs() {
            for e in 0..=31 {
                let num = i128::from(x);
                let half = if e == 0 { 0 } else { 1i128 << (e - 1) };
                let mag = (num.abs() + half) >> e;
                let want = if num < 0 { -mag } else { mag };
                assert_eq!(
                    i128::from(rounding_divide_by_pot(x, e)),
                    want,
                    "x={x} e={e}"
                );
            }
        }
    }

    #[test]
    fn from_f64_representation() {
        for &m in &multipliers() {
            let qm = QuantizedMultiplier::from_f64(m).unwrap();
            if m < 2f64.powi(-32) {
                assert_eq!(qm, QuantizedMultiplier::ZERO, "m={m}");
                continue;
            }
            assert!(qm.multiplier >= 1 << 30, "m={m} {qm:?}");
            assert!((-31..=30).contains(&qm.shift), "m={m} {qm:?}");
            let err = (qm.to_f64() - m).abs();
            assert!(err <= 2f64.powi(qm.shift - 32), "m={m} {qm:?} err={err}");
            assert!(err / m <= 2f64.powi(-31), "m={m}");
        }
        // M just below 1 rounds up to exactly 1 → M0 = 2^30, shift 1.
        let qm = QuantizedMultiplier::from_f64(1.0 - 2f64.powi(-40)).unwrap();
        assert_eq!(
            qm,
            QuantizedMultiplier {
                multiplier: 1 << 30,
                shift: 1
            }
        );
        let qm = QuantizedMultiplier::from_f64(1.0).unwrap();
        assert_eq!(
            qm,
            QuantizedMultiplier {
                multiplier: 1 << 30,
                shift: 1
            }
        );
        let qm = QuantizedMultiplier::from_f64(0.75).unwrap();
        assert_eq!(
            qm,
            QuantizedMultiplier {
                multiplier: 3 << 29,
                shift: 0
            }
        );
        let qm = QuantizedMultiplier::from_f64(0.5).unwrap();
        assert_eq!(
            qm,
            QuantizedMultiplier {
                multiplier: 1 << 30,
                shift: 0
            }
        );
        // Smallest multiplier that is not flushed: 2^-32 → M0 = 2^30, shift -31.
        let qm = QuantizedMultiplier::from_f64(2f64.powi(-32)).unwrap();
        assert_eq!(
            qm,
            QuantizedMultiplier {
                multiplier: 1 << 30,
                shift: -31
            }
        );
        let qm = QuantizedMultiplier::from_f64(2f64.powi(-33)).unwrap();
        assert_eq!(qm, QuantizedMultiplier::ZERO);
        assert_eq!(
            QuantizedMultiplier::from_f64(0.0).unwrap(),
            QuantizedMultiplier::ZERO
        );
        assert_eq!(
            QuantizedMultiplier::from_f64(f64::MIN_POSITIVE / 4.0).unwrap(),
            QuantizedMultiplier::ZERO
        );
        for bad in [-1.0, f64::NAN, f64::INFINITY, 2f64.powi(31)] {
            assert!(QuantizedMultiplier::from_f64(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn single_rounding_is_exact_round_half_up() {
        for &m in &multipliers() {
            let qm = QuantizedMultiplier::from_f64(m).unwrap();
            for &acc in &accs() {
                let (num, t) = exact(qm, acc);
                let want = round_half_up(num, t).clamp(i32::MIN.into(), i32::MAX.into());
                let got = qm.apply(acc, FixedPointRounding::SingleRounding);
                assert_eq!(i128::from(got), want, "m={m} acc={acc} {qm:?}");
            }
        }
    }

    #[test]
    fn double_rounding_within_bound_of_exact() {
        for &m in &multipliers() {
            let qm = QuantizedMultiplier::from_f64(m).unwrap();
            let r = (-qm.shift).max(0);
            for &acc in &accs() {
                let (num, t) = exact(qm, acc);
                let got = qm.apply(acc, FixedPointRounding::DoubleRounding);
                let single = qm.apply(acc, FixedPointRounding::SingleRounding);
                // |got − num/2^t| ≤ 0.5 + 2^−(r+1), unless saturated.
                if got != i32::MAX && got != i32::MIN {
                    let diff = (i128::from(got) << t.max(0)) - (num << (-t).max(0));
                    let bound_x2 = (1i128 << t.max(0)) + (1i128 << (t - r).max(0));
                    assert!(
                        2 * diff.abs() <= bound_x2,
                        "m={m} acc={acc} {qm:?} got={got}"
                    );
                }
                assert!(
                    (i64::from(got) - i64::from(single)).abs() <= 1,
                    "m={m} acc={acc}"
                );
            }
        }
    }

    #[test]
    fn apply_against_f64_reference() {
        // Versus the real multiplier m (not its fixed-point form): the extra error is at
        // most |acc| · |M − m| ≤ |acc| · 2^(shift−32).
        for &m in &multipliers() {
            let qm = QuantizedMultiplier::from_f64(m).unwrap();
            for &acc in &accs() {
                let real = f64::from(acc) * m;
                if real.abs() >= 2f64.powi(31) {
                    continue;
                }
                let repr = f64::from(acc).abs() * 2f64.powi(qm.shift - 32);
                for mode in [
                    FixedPointRounding::DoubleRounding,
                    FixedPointRounding::SingleRounding,
                ] {
                    let got = f64::from(qm.apply(acc, mode));
                    assert!(
                        (got - real).abs() <= 1.0 + repr + 1e-6,
                        "m={m} acc={acc} {mode:?} got={got} real={real}"
                    );
                }
            }
        }
    }

    #[test]
    fn from_scales_computes_m_in_f64() {
        let qm = QuantizedMultiplier::from_scales(0.02, 0.003, 0.05).unwrap();
        let m = 0.02f32 as f64 * 0.003f32 as f64 / 0.05f32 as f64;
        assert!((qm.to_f64() - m).abs() <= m * 2f64.powi(-31));
        assert!(QuantizedMultiplier::from_scales(0.0, 1.0, 1.0).is_err());
        assert!(QuantizedMultiplier::from_scales(1.0, 1.0, f32::NAN).is_err());
        // M ≥ 1 is fine: shift becomes positive.
        assert!(
            QuantizedMultiplier::from_scales(1.0, 1.0, 0.25)
                .unwrap()
                .shift
                > 0
        );
    }

    #[test]
    fn shift_zero_and_extremes() {
        // shift 0: M0/2^31 ∈ [0.5, 1); shift 30: M ≈ 2^30; shift −31: M ≈ 2^−32.
        let qm = QuantizedMultiplier {
            multiplier: 1 << 30,
            shift: 0,
        }; // 0.5
           // r = 0: only the srdhm rounding happens, ties towards +∞.
        assert_eq!(qm.apply(3, FixedPointRounding::DoubleRounding), 2); // 1.5 → 2
        assert_eq!(qm.apply(-3, FixedPointRounding::DoubleRounding), -1); // −1.5 → −1
                                                                          // r > 0: the final rounding divide is half away from zero: 0.25·(−6) = −1.5 → −2.
        let quarter = QuantizedMultiplier::from_f64(0.25).unwrap();
        assert_eq!(quarter.apply(-6, FixedPointRounding::DoubleRounding), -2);
        assert_eq!(quarter.apply(-6, FixedPointRounding::SingleRounding), -1);
        assert_eq!(qm.apply(3, FixedPointRounding::SingleRounding), 2); // ties up
        assert_eq!(qm.apply(-3, FixedPointRounding::SingleRounding), -1);
        let big = QuantizedMultiplier::from_f64(2f64.powi(29)).unwrap();
        assert_eq!(big.shift, 30);
        assert_eq!(big.apply(3, FixedPointRounding::DoubleRounding), 3 << 29);
        assert_eq!(big.apply(5, FixedPointRounding::DoubleRounding), i32::MAX);
        assert_eq!(big.apply(-5, FixedPointRounding::DoubleRounding), i32::MIN);
        assert_eq!(big.apply(5, FixedPointRounding::SingleRounding), i32::MAX);
        let tiny = QuantizedMultiplier {
            multiplier: 1 << 30,
            shift: -31,
        }; // 2^-32
           // Exact: (2^31−1)·2^−32 = 0.4999… The double rounding first rounds to 2^30 (= 0.5·2^31)
           // and then 0.5 → 1: the classic double-rounding error, within the documented bound.
        assert_eq!(tiny.apply(i32::MAX, FixedPointRounding::DoubleRounding), 1);
        assert_eq!(tiny.apply(i32::MAX, FixedPointRounding::SingleRounding), 0);
        assert_eq!(tiny.apply(i32::MIN, FixedPointRounding::DoubleRounding), -1); // −0.5 → −1
        assert_eq!(tiny.apply(i32::MIN, FixedPointRounding::SingleRounding), 0); // −0.5 → 0 (up)
                                                                                 // M0 = i32::MIN is not produced by from_f64 but must not misbehave.
        let neg = QuantizedMultiplier {
            multiplier: i32::MIN,
            shift: 0,
        };
        assert_eq!(
            neg.apply(i32::MIN, FixedPointRounding::DoubleRounding),
            i32::MAX
        );
        assert_eq!(
            neg.apply(i32::MIN, FixedPointRounding::SingleRounding),
            i32::MAX
        );
        // Hand-built shifts beyond TFLite's range use the wide formulas.
        let far = QuantizedMultiplier {
            multiplier: 1 << 30,
            shift: -40,
        };
        assert_eq!(far.apply(i32::MAX, FixedPointRounding::DoubleRounding), 0);
        let left = QuantizedMultiplier {
            multiplier: 1 << 30,
            shift: 40,
        };
        assert_eq!(left.apply(1, FixedPointRounding::SingleRounding), i32::MAX);
        assert_eq!(left.apply(0, FixedPointRounding::DoubleRounding), 0);
    }
}
