//! Shared helpers of the normalization operators (InstanceNormalization,
//! GroupNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization); not
//! an operator itself. Statistics are accumulated in f64 whatever the element type.

use crate::error::OpError;
use crate::tensor::{DType, Tensor};

/// Checks that input `index` is float, double or float16.
pub fn require_float(t: &Tensor, index: usize) -> Result<(), OpError> {
    if matches!(t.dtype, DType::F32 | DType::F64 | DType::F16) {
        Ok(())
    } else {
        Err(OpError::DType {
            index,
            expected: "float, double or float16".into(),
            got: t.dtype.to_string(),
        })
    }
}

/// Mean and (biased) variance of `v`; (0, 0) for an empty slice.
pub fn mean_var(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let (mut n, mut s) = (0usize, 0f64);
    for x in v.clone() {
        n += 1;
        s += x;
    }
    if n == 0 {
        return (0.0, 0.0);
    }
    let m = s / n as f64;
    let var = v.map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
    (m, var)
}

/// A per-channel parameter (`scale`, `bias`) of InstanceNormalization/GroupNormalization:
/// a tensor of exactly `n` elements (shape `[n]`), as f64.
pub fn per_channel(t: &Tensor, index: usize, n: usize, what: &str) -> Result<Vec<f64>, OpError> {
    require_float(t, index)?;
    if t.shape.as_slice() != [n] {
        return Err(OpError::shape(format!("{what} of shape [{n}]"), &t.shape));
    }
    Ok(t.to_f64_vec())
}
