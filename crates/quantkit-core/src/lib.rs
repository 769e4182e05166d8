//! Quantization math: schemes, parameters, quantize/dequantize, fixed-point multipliers,
//! error metrics and calibration observers.
//!
//! Every function implements a numbered equation of `docs/quantization.md` and is tested
//! against a higher-precision (f64 / wide-integer) reference, the ONNX node-test vectors and
//! ONNX Runtime.
//!
//! ```
//! use quantkit_core::{
//!     fixed_point::{FixedPointRounding, QuantizedMultiplier},
//!     observer::CalibrationMethod, ErrorMetrics, Granularity, QParams, QuantScheme,
//!     RoundingMode,
//! };
//!
//! // u8 affine parameters from a range (eq. 3-4): scale 2.3/255, zero point 200.
//! let x = [-1.8f32, -1.0, 0.0, 0.5];
//! let scheme = QuantScheme::u8_affine();
//! let p = QParams::from_tensor("x", &x, &[4], &scheme)?;
//! assert_eq!(p.zero_points, vec![200]);
//! let q = p.quantize(&x, &[4], RoundingMode::HalfToEven)?;
//! assert_eq!(q, vec![0, 89, 200, 255]);
//! let err = ErrorMetrics::compute(&x, &p.dequantize(&q, &[4])?)?;
//! assert!(err.max_abs <= f64::from(p.scales[0]) / 2.0);
//!
//! // Calibrate per channel from streamed batches with any observer.
//! let mut obs = "percentile=99.9".parse::<CalibrationMethod>()?
//!     .observer("w", Granularity::PerChannel { axis: 0 });
//! obs.observe(&[0.1, -0.2, 3.0, 4.0], &[2, 2])?;
//! let pc = obs.qparams(&QuantScheme::i8_symmetric())?;
//! assert_eq!(pc.scales.len(), 2);
//!
//! // Requantize an int32 accumulator by M = 0.0123 in fixed point (eq. 11-13).
//! let m = QuantizedMultiplier::from_f64(0.0123)?;
//! assert_eq!(m.apply(10_000, FixedPointRounding::DoubleRounding), 123);
//! # Ok::<(), quantkit_core::CoreError>(())
//! ```

#![deny(missing_docs)]

pub mod atomic;
pub mod error;
pub mod fixed_point;
pub mod formats;
pub mod limits;
pub mod linear;
pub mod metrics;
pub mod observer;
pub mod params;
pub mod quant_type;
pub mod scheme;
pub mod tensor;
pub mod weight_clip;

pub use error::{CoreError, Result};
pub use fixed_point::{FixedPointRounding, QuantizedMultiplier};
pub use linear::{
    dequantize_code, dequantize_value, quantize_code, quantize_value, quantize_value_wide,
    requantize_float, QuotientPrecision, RoundingMode,
};
pub use metrics::ErrorMetrics;
pub use observer::{
    CalibrationMethod, HistogramMethod, HistogramObserver, MinMaxObserver,
    MovingAverageMinMaxObserver, Observer,
};
pub use params::{choose_qparams, quantize_bias, QParams};
pub use quant_type::{CodeType, QuantType};
pub use scheme::{Granularity, QuantScheme};
pub use tensor::{dequantize_linear, quantize_linear};
pub use weight_clip::{mse_clip_ranges, WEIGHT_CLIP_STEPS};
