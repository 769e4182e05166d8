//! `MelWeightMatrix` (opset 17): the `[dft_length/2 + 1, num_mel_bins]` matrix of
//! triangular filters that maps a linear spectrum to mel bands. Inputs (scalars):
//! `num_mel_bins`, `dft_length`, `sample_rate` (integers), `lower_edge_hertz`,
//! `upper_edge_hertz` (floats); `output_datatype` (default float) picks the output type.
//!
//! Follows ONNX's reference exactly, including two details the prose leaves open: the
//! `num_mel_bins + 2` edges are spaced by `(high − low) / (num_mel_bins + 2)` in mel, and
//! each edge's bin is `floor((dft_length + 1)·hz / sample_rate)`.

use super::{first_i64, input, OpCtx};
use super::max_elements;
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};


fn int(inputs: &[Option<&Tensor>], i: usize, what: &str) -> Result<i64, OpError> {
    let t = input(inputs, i)?;
    if t.len() != 1 || t.dtype.is_float() {
        return Err(OpError::Invalid(format!("{what} must be one integer")));
    }
    first_i64(t, i)
}

fn float(inputs: &[Option<&Tensor>], i: usize, what: &str) -> Result<f64, OpError> {
    let t = input(inputs, i)?;
    if t.len() != 1 || !t.dtype.is_float() {
        return Err(OpError::Invalid(format!("{what} must be one float")));
    }
    Ok(t.to_f64_vec()[0])
}

/// Evaluates `MelWeightMatrix`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let mels = int(inputs, 0, "num_mel_bins")?;
    let dft = int(inputs, 1, "dft_length")?;
    let rate = int(inputs, 2, "sample_rate")?;
    let low = float(inputs, 3, "lower_edge_hertz")?;
    let high = float(inputs, 4, "upper_edge_hertz")?;
    if mels < 1 || dft < 1 || rate < 1 {
        return Err(OpError::Invalid(format!(
            "num_mel_bins {mels}, dft_length {dft} and sample_rate {rate} must be positive"
        )));
    }
    if !(low.is_finite() && high.is_finite() && 0.0 <= low && low < high) {
        return Err(OpError::Invalid(format!(
            "edges {low}..{high} Hz must be finite with 0 <= lower < upper"
        )));
    }
    let (mels, dft) = (mels as usize, dft as usize);
    let bins = dft / 2 + 1;
    if bins.checked_mul(mels).is_none_or(|n| n > max_elements()) {
        return Err(OpError::Invalid(format!(
            "a {bins}×{mels} matrix is larger than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
        )));
    }
    let mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / std::f64::consts::LN_10;
    let (lo_mel, hi_mel) = (mel(low), mel(high));
    let edges = mels + 2;
    let step = (hi_mel - lo_mel) / edges as f64;
    let bin_of = |k: usize| -> Result<usize, OpError> {
        let m = k as f64 * step + lo_mel;
        let hz = 700.0 * (m / 2595.0 * std::f64::consts::LN_10).exp_m1();
        let b = ((dft as f64 + 1.0) * hz / rate as f64).floor();
        if b < 0.0 || b >= bins as f64 {
            return Err(OpError::Invalid(format!(
                "edge {hz:.1} Hz falls outside the {bins} bins (upper_edge_hertz above the Nyquist rate?)"
            )));
        }
        Ok(b as usize)
    };
    let f: Vec<usize> = (0..edges).map(bin_of).collect::<Result<_, _>>()?;
    let mut out = vec![0f64; bins * mels];
    for i in 0..mels {
        let (l, c, h) = (f[i], f[i + 1], f[i + 2]);
        if c == l {
            out[c * mels + i] = 1.0;
        } else {
            for j in l..=c {
                out[j * mels + i] = (j - l) as f64 / (c - l) as f64;
            }
        }
        if h > c {
            for j in c..h {
                out[j * mels + i] = (h - j) as f64 / (h - c) as f64;
            }
        }
    }
    let code = ctx.node.attr_int("output_datatype", 1)?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx)
        .ok_or_else(|| OpError::Invalid(format!("output_datatype {code} is not supported")))?;
    let t = Tensor::new(vec![bins, mels], Data::F64(out))
        .map_err(|e| OpError::Invalid(e.to_string()))?;
    Ok(vec![t.cast(to)])
}

/// `MelWeightMatrix` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("MelWeightMatrix", 17, eval);
