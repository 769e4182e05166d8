//! Scalar linear (affine) quantization of one value, exactly as ONNX `QuantizeLinear` /
//! `DequantizeLinear` (opset ≥ 13) define it.
//!
//! Equations (1) and (2) of `docs/quantization.md`:
//!
//! ```text
//! q = saturate_[qmin, qmax]( round(x / s) + z )      (1)  quantize_value
//! x̂ = (q − z) · s                                     (2)  dequantize_value
//! ```

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

/// Round half to even without a libm call: for `|v| < 2^22`, adding and subtracting
/// `1.5·2^23` in f32 leaves exactly the nearest integer (ties to even, IEEE default rounding
/// of the addition); larger magnitudes and non-finite values take `round_ties_even`
/// (every f32 ≥ 2^23 is already an integer). Tested against `round_ties_even` below.
#[inline]
fn round_half_even(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23
    if v.abs() < 4_194_304.0 {
        // The result keeps the sign of zero only loosely (−0.4 → +0.0); callers add an
        // integer zero point, so the sign of zero never matters.
        (v + MAGIC) - MAGIC
    } else {
        v.round_ties_even()
    }
}

/// Quantizes one value: `q = clamp(round(x / scale) + zero_point, qmin, qmax)`, equation (1).
///
/// The division `x / scale` is done in `f32` (ONNX: the type of `y_scale` sets the precision
/// of the division), then rounded with `mode`; the zero point is added exactly (in `f64`,
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
    let r = mode.round(x / scale);
    if r.is_nan() {
        return zero_point.clamp(qmin, qmax);
    }
    // f64 holds every i32 and every integral f32 below 2^53 exactly; larger magnitudes
    // saturate anyway, so the clamp below is exact.
    let v = f64::from(r) + f64::from(zero_point);
    v.clamp(f64::from(qmin), f64::from(qmax)) as i32
}

/// Dequantizes one value: `x̂ = (q − zero_point) · scale`, equation (2).
///
/// Computed as ONNX `DequantizeLinear` does: the integer difference first (exact, in `i64` to
/// rule out overflow), converted to `f32`, then one `f32` multiplication. For every quantized
/// type up to 16 bits the difference is exactly representable in `f32`.
#[inline]
pub fn dequantize_value(q: i32, scale: f32, zero_point: i32) -> f32 {
    (i64::from(q) - i64::from(zero_point)) as f32 * scale
}

#[cfg(test)]
mod tests {
    use super::*;

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
