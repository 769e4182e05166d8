//! Quantization math: schemes, parameters, quantize/dequantize, fixed-point multipliers,
//! error metrics and calibration observers.
//!
//! Every function implements a numbered equation of `docs/quantization.md` and is tested
//! against a higher-precision (f64 / wide-integer) reference.

pub mod error;
pub mod fixed_point;
pub mod linear;
pub mod metrics;
pub mod observer;
pub mod params;
pub mod scheme;
pub mod tensor;

pub use error::{CoreError, Result};
pub use fixed_point::{FixedPointRounding, QuantizedMultiplier};
pub use linear::{dequantize_value, quantize_value, RoundingMode};
pub use metrics::ErrorMetrics;
pub use observer::{
    CalibrationMethod, HistogramMethod, HistogramObserver, MinMaxObserver,
    MovingAverageMinMaxObserver, Observer,
};
pub use params::{choose_qparams, QParams};
pub use scheme::{Granularity, QuantScheme};
pub use tensor::{dequantize_linear, quantize_linear};
