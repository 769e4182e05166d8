//! `DFT` (opset 17 and 20): the discrete Fourier transform of input 0 along one axis.
//!
//! The last axis of the input holds one value (a real signal) or two (real, imaginary);
//! the output's last axis holds two. Input 1 (`dft_length`, optional) zero-pads or
//! truncates the transformed axis; `onesided` keeps the `n/2 + 1` non-redundant
//! frequencies of a real signal's transform, and with `inverse` it is a one-sided
//! inverse (irfft) whose output is real (last axis 1) and of length `dft_length`
//! (default `2·(m − 1)`). The axis is the attribute `axis` (default 1) before opset 20
//! and the optional input 2 (default −2) from opset 20; it may not be the last axis.
//! Computed in f64 with `rustfft`, so any length costs `O(n log n)`; the result is cast
//! back to the input's type.

use super::{first_i64, input, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};
use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

/// Longest transform accepted.
pub const MAX_DFT: usize = 1 << 26;

/// A signal as `[outer, n, inner]` complex values (`re`, `im` kept apart).
pub struct Lines {
    /// Product of the axes before the transformed one.
    pub outer: usize,
    /// Length of the transformed axis.
    pub n: usize,
    /// Product of the axes between the transformed one and the last (complex) axis.
    pub inner: usize,
    /// Values, `[outer][n][inner]`.
    pub data: Vec<Complex<f64>>,
}

impl Lines {
    /// Reads a `[..., n, ..., 1|2]` tensor, transforming along `axis` (not the last).
    pub fn of(x: &Tensor, axis: usize) -> Result<Lines, OpError> {
        let r = x.rank();
        if r < 2 || axis + 1 >= r {
            return Err(OpError::Invalid(format!(
                "axis {axis} of a rank-{r} signal: the last axis holds (real, imaginary)"
            )));
        }
        let c = x.shape[r - 1];
        if c != 1 && c != 2 {
            return Err(OpError::shape("a last axis of 1 (real) or 2 (complex)", &x.shape));
        }
        if !x.dtype.is_float() {
            return Err(OpError::DType {
                index: 0,
                expected: "float".into(),
                got: x.dtype.to_string(),
            });
        }
        let v = x.to_f64_vec();
        let data = if c == 1 {
            v.iter().map(|&re| Complex::new(re, 0.0)).collect()
        } else {
            v.chunks_exact(2).map(|p| Complex::new(p[0], p[1])).collect()
        };
        Ok(Lines {
            outer: x.shape[..axis].iter().product(),
            n: x.shape[axis],
            inner: x.shape[axis + 1..r - 1].iter().product(),
            data,
        })
    }

    /// Transforms every line to length `len` (zero-padding or truncating the input to it
    /// first): forward, or inverse scaled by `1/len`.
    pub fn transform(&self, len: usize, inverse: bool) -> Lines {
        let mut planner = FftPlanner::<f64>::new();
        let fft = if inverse {
            planner.plan_fft_inverse(len)
        } else {
            planner.plan_fft_forward(len)
        };
        let (outer, n, inner) = (self.outer, self.n, self.inner);
        let mut out = vec![Complex::new(0.0, 0.0); outer * len * inner];
        let mut buf = vec![Complex::new(0.0, 0.0); len];
        let scale = if inverse { 1.0 / len as f64 } else { 1.0 };
        for o in 0..outer {
            for i in 0..inner {
                for (k, b) in buf.iter_mut().enumerate() {
                    *b = if k < n {
                        self.data[(o * n + k) * inner + i]
                    } else {
                        Complex::new(0.0, 0.0)
                    };
                }
                if len > 0 {
                    fft.process(&mut buf);
                }
                for (k, b) in buf.iter().enumerate() {
                    out[(o * len + k) * inner + i] = b * scale;
                }
            }
        }
        Lines {
            outer,
            n: len,
            inner,
            data: out,
        }
    }

    /// The first `keep` frequencies of each line.
    pub fn truncated(self, keep: usize) -> Lines {
        if keep >= self.n {
            return self;
        }
        let (outer, n, inner) = (self.outer, self.n, self.inner);
        let mut data = Vec::with_capacity(outer * keep * inner);
        for o in 0..outer {
            data.extend_from_slice(&self.data[o * n * inner..(o * n + keep) * inner]);
        }
        Lines {
            outer,
            n: keep,
            inner,
            data,
        }
    }

    /// The full Hermitian spectrum of length `len` whose first half is this one-sided
    /// spectrum (as `numpy.fft.irfft` completes it: the imaginary parts of frequency 0
    /// and, for even `len`, of `len/2` are dropped).
    pub fn hermitian(&self, len: usize) -> Lines {
        let (outer, n, inner) = (self.outer, self.n, self.inner);
        let zero = Complex::new(0.0, 0.0);
        let mut data = vec![zero; outer * len * inner];
        let half = len / 2;
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| {
                    if k < n {
                        self.data[(o * n + k) * inner + i]
                    } else {
                        zero
                    }
                };
                for k in 0..len {
                    let mut v = if k <= half { at(k) } else { at(len - k).conj() };
                    if k == 0 || (len.is_multiple_of(2) && k == half) {
                        v.im = 0.0;
                    }
                    data[(o * len + k) * inner + i] = v;
                }
            }
        }
        Lines {
            outer,
            n: len,
            inner,
            data,
        }
    }

    /// A tensor of shape `lead ++ [n] ++ mid ++ [2]` (or `[1]`, real parts only, when
    /// `real`), cast to `dtype`.
    pub fn to_tensor(
        &self,
        lead: &[usize],
        mid: &[usize],
        real: bool,
        dtype: DType,
    ) -> Result<Tensor, OpError> {
        let mut shape = lead.to_vec();
        shape.push(self.n);
        shape.extend_from_slice(mid);
        shape.push(if real { 1 } else { 2 });
        let v: Vec<f64> = if real {
            self.data.iter().map(|c| c.re).collect()
        } else {
            self.data.iter().flat_map(|c| [c.re, c.im]).collect()
        };
        let t = Tensor::new(shape, Data::F64(v)).map_err(|e| OpError::Invalid(e.to_string()))?;
        Ok(t.cast(dtype))
    }
}

/// A length read from an optional scalar input, checked to be in `1..=MAX_DFT`.
pub fn length(t: Option<&Tensor>, what: &str) -> Result<Option<usize>, OpError> {
    let Some(t) = t else { return Ok(None) };
    if t.len() != 1 || t.dtype.is_float() {
        return Err(OpError::Invalid(format!(
            "{what} must be one integer, got {}{:?}",
            t.dtype, t.shape
        )));
    }
    let v = first_i64(t, 0)?;
    if v < 1 || v as u64 > MAX_DFT as u64 {
        return Err(OpError::Invalid(format!("{what} {v} outside 1..={MAX_DFT}")));
    }
    Ok(Some(v as usize))
}

/// Evaluates `DFT`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let r = x.rank() as i64;
    let axis = if ctx.opset >= 20 {
        match opt_input(inputs, 2) {
            Some(a) if a.len() == 1 && !a.dtype.is_float() => first_i64(a, 0)?,
            Some(a) => return Err(OpError::shape("a one-element integer axis", &a.shape)),
            None => -2,
        }
    } else {
        ctx.node.attr_int("axis", 1)?
    };
    // The axis counts the complex axis too (opset 20: in [-r, -2] or [0, r-2]).
    if axis < -r || axis >= r - 1 || axis == -1 {
        return Err(OpError::Invalid(format!(
            "axis {axis} of a rank-{r} signal (the last axis holds real/imaginary parts)"
        )));
    }
    let axis = if axis < 0 { axis + r } else { axis } as usize;
    let inverse = ctx.node.attr_int("inverse", 0)? != 0;
    let onesided = ctx.node.attr_int("onesided", 0)? != 0;
    let lines = Lines::of(x, axis)?;
    let given = length(opt_input(inputs, 1), "dft_length")?;
    let lead = &x.shape[..axis];
    let mid = &x.shape[axis + 1..x.shape.len() - 1];
    if inverse && onesided {
        let len = match given {
            Some(l) => l,
            None => 2 * lines.n.saturating_sub(1),
        };
        if len == 0 {
            return Err(OpError::Invalid(
                "a one-sided inverse of one frequency needs dft_length".into(),
            ));
        }
        let full = lines.hermitian(len).transform(len, true);
        return Ok(vec![full.to_tensor(lead, mid, true, x.dtype)?]);
    }
    let len = given.unwrap_or(lines.n);
    if len == 0 {
        return Err(OpError::Invalid("an empty transform axis".into()));
    }
    if onesided && x.shape[x.shape.len() - 1] != 1 {
        return Err(OpError::Invalid(
            "onesided needs a real input (last axis 1)".into(),
        ));
    }
    let mut y = lines.transform(len, inverse);
    if onesided {
        y = y.truncated(len / 2 + 1);
    }
    Ok(vec![y.to_tensor(lead, mid, false, x.dtype)?])
}

/// `DFT` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("DFT", 17, eval);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn matches_a_direct_sum_and_inverts() {
        // A direct O(n²) transform of a real signal of length 5, padded to 6.
        let x: Vec<f32> = vec![1.0, -2.0, 0.5, 3.0, 0.25];
        let t = Tensor::from_f32(&[1, 5, 1], x.clone());
        let n = Node::new("d", "DFT", &["x", "len"], &["y"]);
        let len = Tensor::from_i64(&[], vec![6]);
        let y = eval(&OpCtx { node: &n, opset: 20 }, &[Some(&t), Some(&len)]).unwrap();
        assert_eq!(y[0].shape, vec![1, 6, 2]);
        let got = y[0].to_f64_vec();
        for k in 0..6 {
            let (mut re, mut im) = (0.0f64, 0.0f64);
            for (j, &v) in x.iter().enumerate() {
                let a = -2.0 * std::f64::consts::PI * (k * j) as f64 / 6.0;
                re += v as f64 * a.cos();
                im += v as f64 * a.sin();
            }
            assert!((got[2 * k] - re).abs() < 1e-5 && (got[2 * k + 1] - im).abs() < 1e-5);
        }
        // Inverse of the forward transform is the (padded) signal.
        let n_inv = n.clone().with_attr("inverse", AttrValue::Int(1));
        let back = eval(&OpCtx { node: &n_inv, opset: 20 }, &[Some(&y[0])]).unwrap();
        let b = back[0].to_f64_vec();
        for (j, &v) in x.iter().enumerate() {
            assert!((b[2 * j] - v as f64).abs() < 1e-5 && b[2 * j + 1].abs() < 1e-5);
        }
        // One-sided forward then one-sided inverse of length 6 gives the signal back.
        let n_one = n.clone().with_attr("onesided", AttrValue::Int(1));
        let half = eval(&OpCtx { node: &n_one, opset: 20 }, &[Some(&t), Some(&len)]).unwrap();
        assert_eq!(half[0].shape, vec![1, 4, 2]);
        let n_irfft = n_one.with_attr("inverse", AttrValue::Int(1));
        let r = eval(&OpCtx { node: &n_irfft, opset: 20 }, &[Some(&half[0])]).unwrap();
        assert_eq!(r[0].shape, vec![1, 6, 1]);
        let rv = r[0].to_f64_vec();
        for (j, &v) in x.iter().enumerate() {
            assert!((rv[j] - v as f64).abs() < 1e-5, "{j}: {} vs {v}", rv[j]);
        }
    }

    #[test]
    fn rejects_bad_axes_and_lengths() {
        let t = Tensor::from_f32(&[1, 4, 1], vec![0.0; 4]);
        let n = Node::new("d", "DFT", &["x", "len", "axis"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 20 };
        for a in [-1, 2, 3, -4] {
            let axis = Tensor::from_i64(&[], vec![a]);
            assert!(eval(&ctx, &[Some(&t), None, Some(&axis)]).is_err(), "axis {a}");
        }
        for l in [0, -3, 1 << 40] {
            let len = Tensor::from_i64(&[], vec![l]);
            assert!(eval(&ctx, &[Some(&t), Some(&len)]).is_err(), "length {l}");
        }
        let three = Tensor::from_f32(&[1, 4, 3], vec![0.0; 12]);
        assert!(eval(&ctx, &[Some(&three)]).is_err());
    }
}
