//! Quantization parameters (scales and zero points) and their choice from a real range.
//!
//! Equations (3)–(6) of `docs/quantization.md`.

use crate::error::{CoreError, Result};
use crate::linear::RoundingMode;
use crate::scheme::{Granularity, QuantScheme};
use crate::tensor;

/// Smallest scale quantkit chooses: `2^−62`. It keeps every scale a normal `f32` (never
/// zero, NaN or subnormal) and keeps the bias scale `s_in · s_w` of two such scales a
/// normal `f32` too (`2^−124 > 2^−126`). Ranges narrower than `2^−62 · (qmax − qmin)` are
/// zero for any practical purpose.
pub const MIN_SCALE: f32 = 2.168_404_3e-19; // 2^-62

/// Scale used when the range is exactly `[0, 0]` (an all-zero tensor or channel): any
/// positive scale represents 0 exactly; 1.0 is what ONNX Runtime's quantizer picks.
pub const ZERO_RANGE_SCALE: f32 = 1.0;

/// Chooses `(scale, zero_point)` for real values in `[min, max]` under `scheme`.
///
/// The range is first widened to contain 0 (`min' = min(min, 0)`, `max' = max(max, 0)`),
/// so real 0 is always exactly representable (eq. 3) — zero padding and ReLU outputs must
/// quantize without error.
///
/// - Affine (eq. 4): `s = (max' − min') / (qmax − qmin)`,
///   `z = clamp(round_half_even(qmin − min'/s), qmin, qmax)`.
/// - Symmetric (eq. 5): `z = 0` for signed types, `z = (qmin + qmax + 1) / 2` (128 for u8)
///   for unsigned ones; `s = max(|min|, |max|) / min(qmax − z, z − qmin)`, so both `±amax`
///   stay inside the grid (for full-range i8 this is `amax / 127`, as TFLite; the code −128
///   is then unused).
///
/// Computed in `f64`, then rounded to `f32`; the scale is floored at [`MIN_SCALE`] and an
/// all-zero range gets [`ZERO_RANGE_SCALE`]. Errors (naming `tensor`) if `min`/`max` are not
/// finite or `min > max`.
pub fn choose_qparams(
    tensor: &str,
    min: f32,
    max: f32,
    scheme: &QuantScheme,
) -> Result<(f32, i32)> {
    for v in [min, max] {
        if !v.is_finite() {
            return Err(CoreError::NonFinite {
                tensor: tensor.to_string(),
                index: 0,
                value: v,
            });
        }
    }
    if min > max {
        return Err(CoreError::InvalidScheme(format!(
            "tensor '{tensor}': range min {min} > max {max}"
        )));
    }
    scheme.validate()?;
    let qmin = scheme.qmin();
    let qmax = scheme.qmax();
    let lo = f64::from(min.min(0.0));
    let hi = f64::from(max.max(0.0));
    if scheme.symmetric {
        let z = if scheme.signed {
            0
        } else {
            (qmin + qmax + 1) / 2
        };
        let amax = lo.abs().max(hi);
        let steps = f64::from((qmax - z).min(z - qmin));
        let s = finish_scale(amax / steps, amax == 0.0);
        Ok((s, z))
    } else {
        let s = finish_scale((hi - lo) / f64::from(qmax - qmin), hi == lo);
        let z = (f64::from(qmin) - lo / f64::from(s)).round_ties_even();
        let z = z.clamp(f64::from(qmin), f64::from(qmax)) as i32;
        Ok((s, z))
    }
}

fn finish_scale(s: f64, zero_range: bool) -> f32 {
    if zero_range {
        return ZERO_RANGE_SCALE;
    }
    // A finite f64 range over at least 3 steps always fits in f32 (|max − min| ≤ 2·f32::MAX).
    let s = s as f32;
    if s < MIN_SCALE {
        MIN_SCALE
    } else {
        s.min(f32::MAX)
    }
}

/// Quantizes a bias to int32 with scale `s_in · s_w` and zero point 0 (eq. 9):
/// `qb_j = saturate_i32(round_half_even(b_j / bs_j))` with `bs_j = f32(s_in · s_w,j)`,
/// the division in f32 as ONNX Runtime's quantizer and `QuantizeLinear` do.
///
/// `weight_scales` has one entry (per-tensor weights) or one per bias element (per output
/// channel). Returns the int32 bias and its scales (as stored in a QDQ graph). Errors,
/// naming `tensor`, on NaN/±Inf in the bias, a non-positive/non-finite scale, a bias scale
/// that underflows to a subnormal/zero f32, or a length mismatch.
pub fn quantize_bias(
    tensor: &str,
    bias: &[f32],
    input_scale: f32,
    weight_scales: &[f32],
) -> Result<(Vec<i32>, Vec<f32>)> {
    crate::tensor::check_finite(tensor, bias)?;
    if weight_scales.len() != 1 && weight_scales.len() != bias.len() {
        return Err(CoreError::ShapeMismatch {
            what: format!("bias '{tensor}': number of weight scales"),
            expected: format!("1 or {}", bias.len()),
            got: weight_scales.len().to_string(),
        });
    }
    let mut q = Vec::with_capacity(bias.len());
    let mut scales = Vec::with_capacity(weight_scales.len());
    for &sw in weight_scales {
        for s in [input_scale, sw] {
            if !(s.is_finite() && s > 0.0) {
                return Err(CoreError::InvalidScale {
                    tensor: tensor.to_string(),
                    scale: s,
                });
            }
        }
        let bs = input_scale * sw;
        if !bs.is_normal() {
            return Err(CoreError::InvalidScale {
                tensor: tensor.to_string(),
                scale: bs,
            });
        }
        scales.push(bs);
    }
    for (j, &b) in bias.iter().enumerate() {
        let bs = if scales.len() == 1 {
            scales[0]
        } else {
            scales[j]
        };
        q.push(crate::linear::quantize_value(
            b,
            bs,
            0,
            i32::MIN,
            i32::MAX,
            RoundingMode::HalfToEven,
        ));
    }
    Ok((q, scales))
}

/// Scales and zero points for one tensor under one scheme, laid out in the ONNX scale
/// tensor order (row-major over [`Granularity::param_shape`]).
#[derive(Debug, Clone, PartialEq)]
pub struct QParams {
    /// One scale per parameter slot (length 1 for per-tensor).
    pub scales: Vec<f32>,
    /// One zero point per parameter slot, same length as `scales`.
    pub zero_points: Vec<i32>,
    /// Lowest quantized value.
    pub qmin: i32,
    /// Highest quantized value.
    pub qmax: i32,
    /// Which elements share a slot.
    pub granularity: Granularity,
}

impl QParams {
    /// Per-tensor parameters given directly. Errors if the scale is not finite and positive
    /// or the zero point lies outside `[qmin, qmax]` of `scheme`.
    pub fn per_tensor(
        tensor: &str,
        scale: f32,
        zero_point: i32,
        scheme: &QuantScheme,
    ) -> Result<QParams> {
        let p = QParams {
            scales: vec![scale],
            zero_points: vec![zero_point],
            qmin: scheme.qmin(),
            qmax: scheme.qmax(),
            granularity: Granularity::PerTensor,
        };
        p.validate(tensor)?;
        Ok(p)
    }

    /// Parameters from one `(min, max)` range per slot ([`choose_qparams`] on each).
    pub fn from_ranges(
        tensor: &str,
        ranges: &[(f32, f32)],
        scheme: &QuantScheme,
    ) -> Result<QParams> {
        let mut scales = Vec::with_capacity(ranges.len());
        let mut zero_points = Vec::with_capacity(ranges.len());
        for &(lo, hi) in ranges {
            let (s, z) = choose_qparams(tensor, lo, hi, scheme)?;
            scales.push(s);
            zero_points.push(z);
        }
        Ok(QParams {
            scales,
            zero_points,
            qmin: scheme.qmin(),
            qmax: scheme.qmax(),
            granularity: scheme.granularity,
        })
    }

    /// Parameters from the min/max of `x` (shape `shape`) at the scheme's granularity.
    /// Errors on NaN/±Inf (naming `tensor` and the element) or a shape that does not match.
    pub fn from_tensor(
        tensor: &str,
        x: &[f32],
        shape: &[usize],
        scheme: &QuantScheme,
    ) -> Result<QParams> {
        let ranges = tensor::minmax_per_slot(tensor, x, shape, scheme.granularity)?;
        QParams::from_ranges(tensor, &ranges, scheme)
    }

    /// Checks every scale (finite, > 0) and zero point (inside `[qmin, qmax]`).
    pub fn validate(&self, tensor: &str) -> Result<()> {
        if self.scales.len() != self.zero_points.len() {
            return Err(CoreError::ShapeMismatch {
                what: format!("tensor '{tensor}': number of zero points"),
                expected: self.scales.len().to_string(),
                got: self.zero_points.len().to_string(),
            });
        }
        if self.qmin > self.qmax {
            return Err(CoreError::InvalidScheme(format!(
                "tensor '{tensor}': qmin {} > qmax {}",
                self.qmin, self.qmax
            )));
        }
        for &s in &self.scales {
            if !(s.is_finite() && s > 0.0) {
                return Err(CoreError::InvalidScale {
                    tensor: tensor.to_string(),
                    scale: s,
                });
            }
        }
        for &z in &self.zero_points {
            if z < self.qmin || z > self.qmax {
                return Err(CoreError::ZeroPointOutOfRange {
                    tensor: tensor.to_string(),
                    zero_point: z,
                    qmin: self.qmin,
                    qmax: self.qmax,
                });
            }
        }
        Ok(())
    }

    fn axis_block(&self) -> (usize, usize) {
        self.granularity.onnx_axis_block()
    }

    /// Quantizes `x` (eq. 1 element-wise).
    pub fn quantize(&self, x: &[f32], shape: &[usize], mode: RoundingMode) -> Result<Vec<i32>> {
        let (axis, block) = self.axis_block();
        tensor::quantize_linear(
            x,
            shape,
            &self.scales,
            &self.zero_points,
            axis,
            block,
            self.qmin,
            self.qmax,
            mode,
        )
    }

    /// Dequantizes `q` (eq. 2 element-wise).
    pub fn dequantize(&self, q: &[i32], shape: &[usize]) -> Result<Vec<f32>> {
        let (axis, block) = self.axis_block();
        tensor::dequantize_linear(q, shape, &self.scales, &self.zero_points, axis, block)
    }

    /// Fake-quantizes `x`: `dequantize(quantize(x))`, the float values the integer model
    /// effectively sees (used for QAT and error reports).
    pub fn fake_quantize(
        &self,
        x: &[f32],
        shape: &[usize],
        mode: RoundingMode,
    ) -> Result<Vec<f32>> {
        let q = self.quantize(x, shape, mode)?;
        self.dequantize(&q, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_example() {
        let s = QuantScheme::u8_affine();
        let (scale, z) = choose_qparams("x", -1.8, 0.5, &s).unwrap();
        assert_eq!(z, 200);
        assert!((f64::from(scale) - 2.3 / 255.0).abs() < 1e-9);
        let p = QParams::from_tensor("x", &[-1.8, -1.0, 0.0, 0.5], &[4], &s).unwrap();
        let q = p
            .quantize(&[-1.8, -1.0, 0.0, 0.5], &[4], RoundingMode::HalfToEven)
            .unwrap();
        assert_eq!(q, vec![0, 89, 200, 255]);
    }

    #[test]
    fn degenerate_ranges() {
        let u8a = QuantScheme::u8_affine();
        let i8s = QuantScheme::i8_symmetric();
        for scheme in [
            u8a,
            i8s,
            QuantScheme::new(4, true).unwrap(),
            u8a.with_narrow_range(true),
        ] {
            for (lo, hi) in [
                (0.0f32, 0.0f32),
                (3.0, 3.0),
                (-3.0, -3.0),
                (2.0, 5.0),
                (-5.0, -2.0),
                (0.0, 1e-44),
                (-1e-40, 1e-40),
                (-3e38, 3e38),
                (-f32::MAX, f32::MAX),
                (f32::MIN_POSITIVE, f32::MIN_POSITIVE),
            ] {
                let (s, z) = choose_qparams("t", lo, hi, &scheme).unwrap();
                assert!(s.is_normal() && s > 0.0, "{lo}..{hi}: scale {s}");
                assert!(
                    (scheme.qmin()..=scheme.qmax()).contains(&z),
                    "{lo}..{hi}: z {z}"
                );
                // Zero is exactly representable.
                let q = crate::quantize_value(
                    0.0,
                    s,
                    z,
                    scheme.qmin(),
                    scheme.qmax(),
                    RoundingMode::HalfToEven,
                );
                assert_eq!(crate::dequantize_value(q, s, z), 0.0);
            }
        }
        // A range not containing zero is widened to contain it.
        let (s, z) = choose_qparams("t", 2.0, 5.0, &u8a).unwrap();
        assert_eq!(z, 0);
        assert!((s - 5.0 / 255.0).abs() < 1e-7);
        let (_, z) = choose_qparams("t", -5.0, -2.0, &u8a).unwrap();
        assert_eq!(z, 255);
        assert!(choose_qparams("t", f32::NAN, 1.0, &u8a).is_err());
        assert!(choose_qparams("t", 0.0, f32::INFINITY, &u8a).is_err());
        assert!(choose_qparams("t", 1.0, 0.0, &u8a).is_err());
    }

    #[test]
    fn symmetric_choices() {
        let (s, z) = choose_qparams("w", -2.0, 1.0, &QuantScheme::i8_symmetric()).unwrap();
        assert_eq!(z, 0);
        assert_eq!(s, 2.0 / 127.0);
        let u = QuantScheme::u8_affine().with_symmetric(true);
        let (s, z) = choose_qparams("w", -2.0, 1.0, &u).unwrap();
        assert_eq!(z, 128);
        assert_eq!(s, 2.0 / 127.0);
        let n = QuantScheme::i8_symmetric().with_narrow_range(true);
        let (s, z) = choose_qparams("w", -2.0, 1.0, &n).unwrap();
        assert_eq!((s, z), (2.0 / 127.0, 0));
    }

    #[test]
    fn per_group_params_equal_per_tensor_of_each_block() {
        // shape [2, 5], blocks of 2 along axis 1 → scale shape [2, 3].
        let x: Vec<f32> = (0..10)
            .map(|i| (i as f32 - 4.5) * (1.0 + i as f32))
            .collect();
        let sch = QuantScheme::new(4, true)
            .unwrap()
            .with_granularity(Granularity::PerGroup {
                axis: 1,
                group_size: 2,
            });
        let p = QParams::from_tensor("w", &x, &[2, 5], &sch).unwrap();
        assert_eq!(p.scales.len(), 6);
        let q = p.quantize(&x, &[2, 5], RoundingMode::HalfToEven).unwrap();
        let blocks: [&[usize]; 6] = [&[0, 1], &[2, 3], &[4], &[5, 6], &[7, 8], &[9]];
        for (b, idx) in blocks.iter().enumerate() {
            let v: Vec<f32> = idx.iter().map(|&i| x[i]).collect();
            let pt = QParams::from_tensor(
                "w",
                &v,
                &[v.len()],
                &sch.with_granularity(Granularity::PerTensor),
            )
            .unwrap();
            assert_eq!(
                (pt.scales[0], pt.zero_points[0]),
                (p.scales[b], p.zero_points[b]),
                "block {b}"
            );
            let qt = pt
                .quantize(&v, &[v.len()], RoundingMode::HalfToEven)
                .unwrap();
            let qb: Vec<i32> = idx.iter().map(|&i| q[i]).collect();
            assert_eq!(qt, qb, "block {b}");
        }
    }

    #[test]
    fn bias_quantization() {
        let (q, s) = quantize_bias("fc.b", &[0.5, -0.25, 1e12], 0.5, &[0.1, 0.05, 0.1]).unwrap();
        assert_eq!(s, vec![0.5f32 * 0.1, 0.5f32 * 0.05, 0.5f32 * 0.1]);
        assert_eq!(q, vec![10, -10, i32::MAX]);
        assert!(quantize_bias("fc.b", &[1.0, 2.0], 0.5, &[0.1, 0.1, 0.1]).is_err());
        assert!(quantize_bias("fc.b", &[f32::NAN], 0.5, &[0.1]).is_err());
        assert!(quantize_bias("fc.b", &[1.0], 0.0, &[0.1]).is_err());
        assert!(quantize_bias("fc.b", &[1.0], 1e-30, &[1e-30]).is_err());
    }

    #[test]
    fn validate_rejects_bad_params() {
        let s = QuantScheme::u8_affine();
        assert!(matches!(
            QParams::per_tensor("x", 0.0, 0, &s),
            Err(CoreError::InvalidScale { .. })
        ));
        assert!(matches!(
            QParams::per_tensor("x", -1.0, 0, &s),
            Err(CoreError::InvalidScale { .. })
        ));
        assert!(matches!(
            QParams::per_tensor("x", f32::NAN, 0, &s),
            Err(CoreError::InvalidScale { .. })
        ));
        assert!(matches!(
            QParams::per_tensor("x", 1.0, 256, &s),
            Err(CoreError::ZeroPointOutOfRange { .. })
        ));
        assert!(QParams::per_tensor("x", 0.5, 255, &s).is_ok());
    }
}
