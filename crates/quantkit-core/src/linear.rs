//! Scalar linear (affine) quantization of one value, exactly as ONNX `QuantizeLinear` /
//! `DequantizeLinear` (opset ≥ 13) define it: the one definition every layer calls (the
//! graph executor's operators, the kernels' output stages and element-wise passes, the
//! integer engine).
//!
//! Equations (1) and (2) of `docs/quantization.md`, and the float-scale requantization of
//! section 4 (equation (10) in ONNX Runtime's float form):
//!
//! ```text
//! q  = saturate_[qmin, qmax]( round(x / s) + z )            (1)   quantize_value,
//!                                                                 quantize_value_wide,
//!                                                                 quantize_code
//! x̂  = (q − z) · s                                           (2)   dequantize_value,
//!                                                                 dequantize_code
//! qy = saturate_[lo, hi]( round_half_even(f32(acc)·M) + z )  (10)  requantize_float
//! ```
//!
//! Why more than one function per equation: [`quantize_value`] is the general form (any
//! code range up to i32, a choice of rounding); [`quantize_value_wide`] is the same rule
//! for 64-bit ranges and f16 quotients (the graph's generic QuantizeLinear);
//! [`quantize_code`] is the same rule written with f32 operations only so that loops over
//! it vectorise, and equals [`quantize_value`] for every 8- and 16-bit code type
//! ([`CodeType`]) and in-range zero point (tested below). [`requantize_float`] is a different computation — a
//! multiplication by a precomputed f32 multiplier, clamped before rounding as ONNX
//! Runtime's MLAS does — not a division by a scale, so it has its own name.

use crate::quant_type::CodeType;

/// How `x / s` is rounded to an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RoundingMode {
    /// Round half to even (banker's rounding): what ONNX `QuantizeLinear`, ONNX Runtime and
    /// numpy's `rint` do. The default.
    #[default]
    HalfToEven,
    /// Round half away from zero (C `round`): what TFLite's reference quantize uses.
    HalfAwayFromZero,
}

impl RoundingMode {
    /// Rounds `v` to an integral value (still as `f32`) with this mode.
    #[inline]
    pub fn round(self, v: f32) -> f32 {
        match self {
            RoundingMode::HalfToEven => round_half_even(v),
            RoundingMode::HalfAwayFromZero => v.round(),
        }
    }
}

/// The precision of the division `x / s` in equation (1). ONNX's reference (numpy) divides
/// in the input's float type: f16 when `x` and `y_scale` are both f16, bfloat16 when both
/// are bfloat16, f32 otherwise (or the type QuantizeLinear's `precision` attribute names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum QuotientPrecision {
    /// One f32 division (`x` or the scale is f32). The default.
    #[default]
    F32,
    /// The f32 quotient rounded to f16 (round to nearest even), as numpy's f16 division
    /// gives for f16 `x` and scale (both exactly representable in f32, whose 24-bit
    /// significand makes the double rounding innocuous).
    F16,
    /// The f32 quotient rounded to bfloat16 (nearest even), as ml_dtypes' bfloat16 division
    /// gives (8-bit significands: the f32 quotient's 24 bits again make the double
    /// rounding innocuous).
    BF16,
}

impl QuotientPrecision {
    /// `x / scale` in this precision, returned as f32.
    #[inline(always)]
    pub fn divide(self, x: f32, scale: f32) -> f32 {
        match self {
            QuotientPrecision::F32 => x / scale,
            QuotientPrecision::F16 => half::f16::from_f32(x / scale).to_f32(),
            QuotientPrecision::BF16 => {
                crate::formats::bf16_decode(crate::formats::bf16_encode(x / scale))
            }
        }
    }
}

/// Round half to even without a libm call (baseline x86-64 has no `roundss`, so
/// `f32::round_ties_even` becomes a call to `rintf` and keeps loops scalar): for
/// `|v| < 2^22`, adding and subtracting `1.5·2^23` in f32 leaves exactly the nearest integer
/// (ties to even, IEEE default rounding of the addition; Rust never enables fast-math, so
/// the pair is not folded); larger magnitudes and non-finite values take `round_ties_even`
/// (every f32 ≥ 2^23 is already an integer). Equal to `round_ties_even` for every f32
/// (tested below), up to the sign of a zero result.
#[inline(always)]
pub fn round_half_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    if v.abs() < 4_194_304.0 {
        // The result keeps the sign of zero only loosely (−0.4 → +0.0); callers add an
        // integer zero point, so the sign of zero never matters.
        (v + MAGIC) - MAGIC
    } else {
        v.round_ties_even()
    }
}

/// Round half to even as `(d + 1.5·2²³) − 1.5·2²³` alone, without [`round_half_even`]'s
/// branch: equal to `round_ties_even` for |d| < 2²², and for larger |d| a value of the same
/// sign and at least 2²² − 1 in magnitude (±∞ stays ±∞, NaN stays NaN) — so for any result
/// that is then saturated to a 16-bit or narrower range it is interchangeable with
/// `round_ties_even`, and branch-free loops over it vectorise.
#[inline(always)]
pub fn round_half_even_saturating(d: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    (d + MAGIC) - MAGIC
}

/// The saturation of equation (1): `clamp(r + zero_point, qmin, qmax)` for an integral
/// (already rounded) `r`, exact in i64: `r as i64` is exact below 2^63 and saturates above
/// (±∞ included), where the clamp saturates anyway. NaN counts as 0, so it maps to the zero
/// point clamped into the range.
#[inline(always)]
fn saturate(r: f32, zero_point: i64, qmin: i64, qmax: i64) -> i64 {
    let r = if r.is_nan() { 0 } else { r as i64 };
    r.saturating_add(zero_point).clamp(qmin, qmax)
}

/// Quantizes one value: `q = clamp(round(x / scale) + zero_point, qmin, qmax)`, equation (1).
///
/// The division `x / scale` is done in `f32` (ONNX: the type of `y_scale` sets the precision
/// of the division), then rounded with `mode`; the zero point is added exactly (in `i64`,
/// so no integer overflow is possible) and the result saturated to `[qmin, qmax]`.
///
/// Non-finite input, quantkit's documented policy:
/// - `+∞` saturates to `qmax`, `−∞` to `qmin` (as ONNX saturation implies);
/// - NaN maps to `zero_point` clamped into `[qmin, qmax]`, i.e. to the code of real 0. The
///   ONNX reference (numpy) leaves NaN → integer cast platform-defined and ONNX Runtime's
///   result depends on the SIMD path, so no portable behaviour exists to copy; mapping to
///   "real zero" is the least harmful and is deterministic. Calibration code rejects NaN
///   with [`crate::CoreError::NonFinite`] before it gets here.
///
/// The caller is responsible for `scale` being positive and finite and `qmin <= qmax`
/// (the tensor-level functions check this). With `scale == 0` the result saturates by the
/// sign of `x` (and `0/0` is NaN → zero point).
#[inline]
pub fn quantize_value(
    x: f32,
    scale: f32,
    zero_point: i32,
    qmin: i32,
    qmax: i32,
    mode: RoundingMode,
) -> i32 {
    // The result lies in [qmin, qmax], so it is an i32.
    saturate(
        mode.round(x / scale),
        zero_point.into(),
        qmin.into(),
        qmax.into(),
    ) as i32
}

/// Equation (1) as ONNX `QuantizeLinear` defines it for any integer output type up to 64
/// bits: `q = clamp(round_half_even(x / scale) + zero_point, qmin, qmax)` with the quotient
/// in `precision` ([`QuotientPrecision::F16`] when `x` and the scale are both f16), round
/// half to even, the zero point added in i64 (saturating) and the result saturated;
/// non-finite input as [`quantize_value`] (`±∞` → `qmax`/`qmin`, NaN → the zero point
/// clamped into range). For i32 arguments and f32 precision it equals
/// `quantize_value(.., RoundingMode::HalfToEven)`.
#[inline]
pub fn quantize_value_wide(
    x: f32,
    scale: f32,
    zero_point: i64,
    qmin: i64,
    qmax: i64,
    precision: QuotientPrecision,
) -> i64 {
    saturate(
        round_half_even(precision.divide(x, scale)),
        zero_point,
        qmin,
        qmax,
    )
}

/// Equation (1) to an 8- or 16-bit code: `clamp(round_half_even(x / scale) + zero_point, T::MIN,
/// T::MAX)` with NaN → `zero_point`, written with f32 operations only (one true f32
/// division — never a multiplication by the reciprocal —, [`round_half_even_saturating`],
/// an f32 addition of the zero point, `max`/`min`) so that a loop over it vectorises.
///
/// Equal to `quantize_value(x, scale, zero_point, T::MIN, T::MAX, RoundingMode::HalfToEven)`
/// for every `x` and `scale` whenever `zero_point` lies in `[T::MIN, T::MAX]` (as the zero
/// point of an 8- or 16-bit tensor does): below 2^22 every step is exact (`r + zero_point`
/// stays below 2^23 in magnitude), and above it both saturate (`|r| ≥ 2^22 − 1` exceeds
/// every 16-bit range by more than any in-range zero point). The graph's QuantizeLinear fast path, the engine's input prologue and their
/// SIMD loops (`quantkit_kernels::quantize`) all call this.
#[inline(always)]
pub fn quantize_code<T: CodeType>(x: f32, scale: f32, zero_point: i32) -> T {
    let d = x / scale;
    let r = if d.is_nan() {
        0.0
    } else {
        round_half_even_saturating(d)
    };
    // `max`/`min` rather than `clamp` (whose `lo ≤ hi` assertion keeps loops scalar); for
    // a non-NaN value they are the same.
    let c = (r + zero_point as f32)
        .max(T::MIN as f32)
        .min(T::MAX as f32);
    // SAFETY: `c` is inside the code range, so finite and an i32: `r` is not NaN (NaN became
    // 0) and `zero_point as f32` is finite, so `r + zero_point` is not NaN; ±∞ and huge
    // values are clamped.
    T::from_clamped(unsafe { c.to_int_unchecked::<i32>() })
}

/// Dequantizes one value: `x̂ = (q − zero_point) · scale`, equation (2).
///
/// Computed as ONNX `DequantizeLinear` does: the integer difference first (in `i64`, exact
/// for every code type up to 32 bits), converted to `f32`, then one `f32` multiplication.
/// For every quantized type up to 16 bits the difference is exactly representable in `f32`.
#[inline]
pub fn dequantize_value<I: Into<i64>>(q: I, scale: f32, zero_point: I) -> f32 {
    (q.into() - zero_point.into()) as f32 * scale
}

/// Equation (2) for an 8- or 16-bit code: `(q − zero_point) as f32 · scale` with the
/// difference in i32 (i32 → f32 converts in vector registers where i64 → f32 does not).
/// Equal to [`dequantize_value`] whenever `zero_point` is a code of `T` (the difference,
/// at most 65,535 in magnitude, is then exact in i32 and in f32).
#[inline(always)]
pub fn dequantize_code<T: CodeType>(q: T, scale: f32, zero_point: i32) -> f32 {
    (q.to_i32() - zero_point) as f32 * scale
}

/// Float-scale requantization of an int32 accumulator (ONNX Runtime MLAS
/// `MlasRequantizeOutput`; `docs/kernels.md` K3a, `docs/quantization.md` section 4):
///
/// ```text
/// v = f32(acc) · multiplier                 (f32 conversion and multiply, round to nearest even)
/// v = min(max(v, f32(lo − z)), f32(hi − z))
/// y = round_half_even(v) + z                (wrapping i32 add; the result is in [lo, hi])
/// ```
///
/// Not equation (1): the scale enters as a multiplier precomputed by the caller, not a
/// divisor, and the clamp comes before the rounding as in MLAS. Since `lo − z` and `hi − z`
/// are integers (exact in f32 for `|lo − z|, |hi − z| ≤ 2^24`), clamping first equals
/// `clamp(round_half_even(v) + z, lo, hi)`. No NaN arises for a finite multiplier.
#[inline(always)]
pub fn requantize_float(acc: i32, multiplier: f32, zero_point: i32, lo: i32, hi: i32) -> i32 {
    let lo_f = (lo as i64 - zero_point as i64) as f32;
    let hi_f = (hi as i64 - zero_point as i64) as f32;
    let v = (acc as f32) * multiplier;
    let v = v.max(lo_f).min(hi_f);
    (round_half_even(v) as i32).wrapping_add(zero_point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant_type::QuantType;

    #[test]
    fn issue_example_u8() {
        // scale 2.3/255, zero point 200 (issue 2's example): [0, 89, 200, 255].
        let s = 2.3f32 / 255.0;
        let q: Vec<i32> = [-1.8f32, -1.0, 0.0, 0.5]
            .iter()
            .map(|&x| quantize_value(x, s, 200, 0, 255, RoundingMode::HalfToEven))
            .collect();
        assert_eq!(q, vec![0, 89, 200, 255]);
    }

    #[test]
    fn ties_round_to_even_or_away() {
        let he = RoundingMode::HalfToEven;
        let ha = RoundingMode::HalfAwayFromZero;
        // Values taken from the ONNX QuantizeLinear node test (x / 2 with ties).
        for (x, even, away) in [
            (1.0f32, 0, 1),
            (3.0, 2, 2),
            (5.0, 2, 3),
            (-1.0, 0, -1),
            (-3.0, -2, -2),
            (-5.0, -2, -3),
        ] {
            assert_eq!(quantize_value(x, 2.0, 0, -128, 127, he), even, "x={x}");
            assert_eq!(quantize_value(x, 2.0, 0, -128, 127, ha), away, "x={x}");
        }
    }

    #[test]
    fn fast_round_matches_round_ties_even() {
        let mut v = vec![
            0.5f32, 1.5, 2.5, -0.5, -1.5, -2.5, 4194303.5, -4194303.5, 4194304.0,
        ];
        v.extend([
            8388607.5f32,
            1e10,
            -1e10,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-40,
        ]);
        let mut s = 0x1234_5678_9abc_def1u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(f32::from_bits(s as u32));
        }
        for x in v {
            if x.is_nan() {
                assert!(round_half_even(x).is_nan());
                continue;
            }
            let (a, b) = (round_half_even(x), x.round_ties_even());
            assert!(a == b, "{x}: {a} vs {b}");
        }
    }

    #[test]
    fn saturation_and_non_finite() {
        let m = RoundingMode::HalfToEven;
        assert_eq!(quantize_value(1e30, 0.1, 5, -8, 7, m), 7);
        assert_eq!(quantize_value(-1e30, 0.1, 5, -8, 7, m), -8);
        assert_eq!(quantize_value(f32::INFINITY, 0.1, 0, 0, 255, m), 255);
        assert_eq!(quantize_value(f32::NEG_INFINITY, 0.1, 0, 0, 255, m), 0);
        assert_eq!(quantize_value(f32::NAN, 0.1, 128, 0, 255, m), 128);
        // Zero point outside the range still yields a value inside it.
        assert_eq!(quantize_value(f32::NAN, 0.1, 300, 0, 255, m), 255);
        // Large zero point plus large rounded value: no i32 overflow.
        assert_eq!(
            quantize_value(3e9, 1.0, i32::MAX, i32::MIN, i32::MAX, m),
            i32::MAX
        );
    }

    /// xorshift64 values: random bit patterns (every class of f32) and random magnitudes.
    fn awkward_values() -> Vec<f32> {
        let mut v = vec![
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            127.5,
            128.5,
            -128.5,
            255.5,
            4_194_303.5,
            4_194_304.5,
            -8_388_607.0,
            1e10,
            -1e10,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-40,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            v.push(if i % 2 == 0 {
                f32::from_bits(s as u32)
            } else {
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 700.0
            });
        }
        v
    }

    /// The implementation `quantize_value` had before it shared `saturate` with the wide
    /// form: the zero point added in f64. Pins that the i64 saturation computes the same.
    fn quantize_value_f64(x: f32, s: f32, z: i32, qmin: i32, qmax: i32, m: RoundingMode) -> i32 {
        let r = m.round(x / s);
        if r.is_nan() {
            return z.clamp(qmin, qmax);
        }
        (f64::from(r) + f64::from(z)).clamp(f64::from(qmin), f64::from(qmax)) as i32
    }

    #[test]
    fn i64_saturation_equals_the_former_f64_one() {
        let ranges = [
            (0, 255, 0),
            (-128, 127, -128),
            (0, 15, 15),
            (-32768, 32767, 1000),
            (i32::MIN, i32::MAX, i32::MAX),
            (i32::MIN, i32::MAX, i32::MIN),
            (0, 255, 300),
        ];
        for x in awkward_values() {
            for s in [1.0f32, 0.37, 3e-5, 1e-30, 0.0] {
                for (lo, hi, z) in ranges {
                    for m in [RoundingMode::HalfToEven, RoundingMode::HalfAwayFromZero] {
                        let want = quantize_value_f64(x, s, z, lo, hi, m);
                        assert_eq!(quantize_value(x, s, z, lo, hi, m), want, "{x} {s} {z}");
                    }
                    let wide = quantize_value_wide(
                        x,
                        s,
                        z.into(),
                        lo.into(),
                        hi.into(),
                        QuotientPrecision::F32,
                    );
                    let v = quantize_value(x, s, z, lo, hi, RoundingMode::HalfToEven);
                    assert_eq!(wide, i64::from(v), "{x} {s} {z}");
                }
            }
        }
    }

    #[test]
    fn wide_form_saturates_64_bit_ranges() {
        let p = QuotientPrecision::F32;
        let (lo, hi) = (0, i64::from(u32::MAX));
        assert_eq!(quantize_value_wide(3e9, 1.0, 7, lo, hi, p), 3_000_000_007);
        assert_eq!(quantize_value_wide(f32::INFINITY, 1.0, 7, lo, hi, p), hi);
        assert_eq!(quantize_value_wide(f32::NAN, 1.0, 7, lo, hi, p), 7);
        assert_eq!(
            quantize_value_wide(f32::MAX, 1.0, i64::MAX, i64::MIN, i64::MAX, p),
            i64::MAX
        );
    }

    #[test]
    fn f16_quotient_rounds_before_the_integer_rounding() {
        // 2.5004 / 1: f32 keeps it above the tie (→ 3); f16 (spacing 2^-9 near 2.5) rounds
        // it to 2.5 exactly, which then rounds half to even (→ 2).
        let (f32p, f16p) = (QuotientPrecision::F32, QuotientPrecision::F16);
        assert_eq!(quantize_value_wide(2.5004, 1.0, 0, -128, 127, f32p), 3);
        assert_eq!(quantize_value_wide(2.5004, 1.0, 0, -128, 127, f16p), 2);
        // Beyond f16's range the quotient is ±∞ and saturates.
        assert_eq!(quantize_value_wide(1e6, 1.0, 0, -128, 127, f16p), 127);
        assert_eq!(
            f16p.divide(1.0, 3.0),
            half::f16::from_f32(1.0 / 3.0).to_f32()
        );
    }

    fn code_equals_value<T: QuantType + Into<i32> + std::fmt::Debug>() {
        let xs = awkward_values();
        for z in T::MIN..=T::MAX {
            for s in [1.0f32, 0.5, 0.0123, 3.7, 1e-30, 0.0] {
                for &x in xs.iter().step_by(if z % 17 == 0 { 1 } else { 97 }) {
                    let c: T = quantize_code(x, s, z);
                    let v = quantize_value(x, s, z, T::MIN, T::MAX, RoundingMode::HalfToEven);
                    assert_eq!(c.into(), v, "x {x}, scale {s}, zero point {z}");
                }
            }
            for q in T::MIN..=T::MAX {
                let d = dequantize_code(T::from_clamped(q), 0.037, z);
                assert_eq!(d.to_bits(), dequantize_value(q, 0.037, z).to_bits());
            }
        }
    }

    #[test]
    fn code_form_equals_the_general_form_u8() {
        code_equals_value::<u8>();
    }

    #[test]
    fn code_form_equals_the_general_form_i8() {
        code_equals_value::<i8>();
    }

    /// The 16-bit code types: every code, at zero points at both ends of the range, zero
    /// and in between (all 65,536 zero points times every code would take minutes).
    fn code_equals_value_16<T: CodeType + Into<i32> + std::fmt::Debug>() {
        let xs = awkward_values();
        let mid = (T::MIN + T::MAX) / 2;
        let zs = [
            T::MIN,
            T::MIN + 1,
            -1,
            0,
            1,
            127,
            128,
            mid,
            T::MAX - 1,
            T::MAX,
        ];
        for z in zs.into_iter().filter(|z| (T::MIN..=T::MAX).contains(z)) {
            for s in [1.0f32, 0.5, 0.0123, 3.7, 1e-30, 0.0, 3.1e-5] {
                for &x in &xs {
                    let c: T = quantize_code(x, s, z);
                    let v = quantize_value(x, s, z, T::MIN, T::MAX, RoundingMode::HalfToEven);
                    assert_eq!(c.into(), v, "x {x}, scale {s}, zero point {z}");
                }
                // Every integer code and the ties between them, as quotients.
                for q in (T::MIN - 2)..=(T::MAX + 2) {
                    for x in [q as f32, q as f32 + 0.5] {
                        let c: T = quantize_code(x, 1.0, z);
                        let v = quantize_value(x, 1.0, z, T::MIN, T::MAX, RoundingMode::HalfToEven);
                        assert_eq!(c.into(), v, "x {x}, zero point {z}");
                    }
                }
            }
            for q in T::MIN..=T::MAX {
                let d = dequantize_code(T::from_clamped(q), 0.037, z);
                assert_eq!(d.to_bits(), dequantize_value(q, 0.037, z).to_bits());
            }
        }
    }

    #[test]
    fn code_form_equals_the_general_form_u16() {
        code_equals_value_16::<u16>();
    }

    #[test]
    fn code_form_equals_the_general_form_i16() {
        code_equals_value_16::<i16>();
    }

    #[test]
    fn saturating_rounding_equals_round_ties_even_below_2_pow_22() {
        for x in awkward_values() {
            let r = round_half_even_saturating(x);
            if x.is_nan() {
                assert!(r.is_nan());
            } else if x.abs() < 4_194_304.0 {
                assert_eq!(r, x.round_ties_even(), "{x}");
            } else {
                assert_eq!(r.signum(), x.signum(), "{x}");
                assert!(r.abs() >= 4_194_303.0, "{x}");
            }
        }
    }

    #[test]
    fn float_requantization_clamps_like_rounding_then_saturating() {
        let mut s = 0x1234_5678_9abc_def1u64;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let acc = (s >> 32) as i32 >> (s % 24);
            let m = f32::from_bits(0x3000_0000 + (s as u32 & 0x0fff_ffff));
            let z = (s >> 8) as u8 as i32 - 128;
            let (lo, hi) = if s & 1 == 0 {
                (-128, 127)
            } else {
                (z.max(-128), 127)
            };
            let want = (((acc as f32) * m).round_ties_even() as i64 + i64::from(z))
                .clamp(lo.into(), hi.into()) as i32;
            assert_eq!(requantize_float(acc, m, z, lo, hi), want, "{acc} {m} {z}");
        }
    }

    #[test]
    fn dequantize_matches_onnx_order() {
        assert_eq!(dequantize_value(0, 0.5, 128), -64.0);
        assert_eq!(dequantize_value(255, 0.5, 128), 63.5);
        assert_eq!(
            dequantize_value(i32::MIN, 1.0, i32::MAX),
            -4294967295.0f64 as f32
        );
    }
}
