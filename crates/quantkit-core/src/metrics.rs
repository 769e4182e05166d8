//! Error metrics between a reference tensor and its approximation (f64 accumulation).

use crate::error::{CoreError, Result};

/// How far `approx` is from `reference`. All sums are accumulated in `f64`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorMetrics {
    /// Mean squared error `Σ(x − x̂)² / n` (0 for empty input).
    pub mse: f64,
    /// Signal-to-quantization-noise ratio `10·log10(Σx² / Σ(x − x̂)²)` in dB; `+∞` when the
    /// error is zero, `−∞` when the signal is zero but the error is not, and 0 when both are.
    pub sqnr_db: f64,
    /// Largest `|x − x̂|`.
    pub max_abs: f64,
    /// Cosine similarity `x·x̂ / (‖x‖‖x̂‖)`; 1 if both are all-zero, 0 if only one is.
    pub cosine: f64,
    /// Relative L2 error `‖x − x̂‖ / ‖x‖`; 0 if both are zero, `+∞` if only `x` is.
    pub rel_l2: f64,
}

impl ErrorMetrics {
    /// Computes every metric. Errors if the lengths differ.
    pub fn compute(reference: &[f32], approx: &[f32]) -> Result<ErrorMetrics> {
        if reference.len() != approx.len() {
            return Err(CoreError::ShapeMismatch {
                what: "error metrics: length of the approximation".into(),
                expected: reference.len().to_string(),
                got: approx.len().to_string(),
            });
        }
        let (mut sx, mut sy, mut se, mut sxy, mut max_abs) = (0f64, 0f64, 0f64, 0f64, 0f64);
        for (&a, &b) in reference.iter().zip(approx) {
            let (a, b) = (f64::from(a), f64::from(b));
            let e = a - b;
            sx += a * a;
            sy += b * b;
            se += e * e;
            sxy += a * b;
            max_abs = max_abs.max(e.abs());
        }
        let n = reference.len();
        let mse = if n == 0 { 0.0 } else { se / n as f64 };
        let sqnr_db = match (sx == 0.0, se == 0.0) {
            (_, true) if sx == 0.0 => 0.0,
            (_, true) => f64::INFINITY,
            (true, false) => f64::NEG_INFINITY,
            (false, false) => 10.0 * (sx / se).log10(),
        };
        let cosine = match (sx == 0.0, sy == 0.0) {
            (true, true) => 1.0,
            (true, false) | (false, true) => 0.0,
            _ => sxy / (sx.sqrt() * sy.sqrt()),
        };
        let rel_l2 = if sx == 0.0 {
            if se == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (se / sx).sqrt()
        };
        Ok(ErrorMetrics {
            mse,
            sqnr_db,
            max_abs,
            cosine,
            rel_l2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let m = ErrorMetrics::compute(&[1.0, -2.0, 2.0], &[1.0, -2.0, 1.0]).unwrap();
        assert!((m.mse - 1.0 / 3.0).abs() < 1e-15);
        assert!((m.sqnr_db - 10.0 * 9f64.log10()).abs() < 1e-12);
        assert_eq!(m.max_abs, 1.0);
        assert!((m.rel_l2 - 1.0 / 3.0).abs() < 1e-15);
        assert!((m.cosine - 7.0 / (3.0 * 6f64.sqrt())).abs() < 1e-15);
        let z = ErrorMetrics::compute(&[0.0, 0.0], &[0.0, 0.0]).unwrap();
        assert_eq!((z.sqnr_db, z.cosine, z.rel_l2), (0.0, 1.0, 0.0));
        let p = ErrorMetrics::compute(&[1.0], &[1.0]).unwrap();
        assert_eq!(p.sqnr_db, f64::INFINITY);
        assert!(ErrorMetrics::compute(&[1.0], &[]).is_err());
    }
}
