//! `STFT` (opset 17): the short-time Fourier transform of `signal` `[batch, length, 1|2]`.
//!
//! Frame `f` starts at `f·frame_step` (input 1, a scalar); it holds `window_len` samples
//! (the length of input 2, `window`, else `frame_length`), multiplied by the window, and
//! is transformed with length `frame_length` (input 3; default: the window's length, else
//! the whole signal). There are `1 + (length − frame_length) / frame_step` frames; the
//! output is `[batch, frames, bins, 2]`, `bins = frame_length/2 + 1` when `onesided`
//! (default 1), else `frame_length`. Transforms go through [`super::dft::Lines`].

use super::dft::{length, Lines, MAX_DFT};
use super::{first_i64, input, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;
use rustfft::num_complex::Complex;

/// Evaluates `STFT`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.rank() != 3 {
        return Err(OpError::shape("a [batch, length, 1|2] signal", &x.shape));
    }
    let signal = Lines::of(x, 1)?;
    let (batch, len) = (x.shape[0], x.shape[1]);
    let step_t = input(inputs, 1)?;
    if step_t.len() != 1 || step_t.dtype.is_float() {
        return Err(OpError::shape("a one-element integer frame_step", &step_t.shape));
    }
    let step = first_i64(step_t, 1)?;
    if step < 1 || step as u64 > MAX_DFT as u64 {
        return Err(OpError::Invalid(format!("frame_step {step} must be positive")));
    }
    let step = step as usize;
    let window = opt_input(inputs, 2).map(|w| {
        if w.rank() == 1 && w.dtype.is_float() {
            Ok(w.to_f64_vec())
        } else {
            Err(OpError::shape("a rank-1 float window", &w.shape))
        }
    });
    let window = window.transpose()?;
    let frame_len = match length(opt_input(inputs, 3), "frame_length")? {
        Some(l) => l,
        None => window.as_ref().map_or(len, |w| w.len()),
    };
    let window = window.unwrap_or_else(|| vec![1.0; frame_len]);
    let win_len = window.len();
    if win_len == 0 || win_len > len || frame_len > len {
        return Err(OpError::Invalid(format!(
            "window of {win_len} and frame_length {frame_len} for a signal of {len} samples"
        )));
    }
    let frames = 1 + (len - frame_len) / step;
    let onesided = ctx.node.attr_int("onesided", 1)? != 0;
    if onesided && x.shape[2] != 1 {
        return Err(OpError::Invalid("onesided needs a real signal (last axis 1)".into()));
    }
    // Every frame, windowed, as lines [batch·frames, win_len].
    let zero = Complex::new(0.0, 0.0);
    let mut data = Vec::with_capacity(batch * frames * win_len);
    for b in 0..batch {
        for f in 0..frames {
            for (k, w) in window.iter().enumerate() {
                let at = f * step + k;
                let v = if at < len { signal.data[b * len + at] } else { zero };
                data.push(v * *w);
            }
        }
    }
    let framed = Lines {
        outer: batch * frames,
        n: win_len,
        inner: 1,
        data,
    };
    let mut y = framed.transform(frame_len, false);
    if onesided {
        y = y.truncated(frame_len / 2 + 1);
    }
    Ok(vec![y.to_tensor(&[batch, frames], &[], false, x.dtype)?])
}

/// `STFT` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("STFT", 17, eval);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn frames_and_errors() {
        let x = Tensor::from_f32(&[1, 8, 1], (0..8).map(|v| v as f32).collect());
        let n = Node::new("s", "STFT", &["x", "step", "w", "len"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 17 };
        let step = Tensor::from_i64(&[], vec![2]);
        let fl = Tensor::from_i64(&[], vec![4]);
        let y = eval(&ctx, &[Some(&x), Some(&step), None, Some(&fl)]).unwrap();
        // 1 + (8 - 4) / 2 = 3 frames of 4/2 + 1 = 3 bins; bin 0 is the frame's sum.
        assert_eq!(y[0].shape, vec![1, 3, 3, 2]);
        let v = y[0].to_f64_vec();
        assert!((v[0] - 6.0).abs() < 1e-9 && (v[6] - 14.0).abs() < 1e-9);
        let zero = Tensor::from_i64(&[], vec![0]);
        assert!(eval(&ctx, &[Some(&x), Some(&zero), None, Some(&fl)]).is_err());
        let long = Tensor::from_i64(&[], vec![9]);
        assert!(eval(&ctx, &[Some(&x), Some(&step), None, Some(&long)]).is_err());
        let flat = Tensor::from_f32(&[8], vec![0.0; 8]);
        assert!(eval(&ctx, &[Some(&flat), Some(&step)]).is_err());
    }
}
