//! Batch normalisation over the channels of an NCHW tensor (Ioffe & Szegedy, 2015), in
//! training mode (batch statistics, which the model folds into running statistics) and in
//! inference mode (running statistics, as ONNX `BatchNormalization`).

use std::any::Any;

use rayon::prelude::*;

use crate::error::{attr_err, shape_err, Result};
use crate::tape::Op;
use crate::tensor::Tensor;

/// BatchNorm op. Inputs: `x [N, C, H, W]` (or `[N, C]`), `scale [C]`, `bias [C]`,
/// `running_mean [C]`, `running_var [C]`.
///
/// Training: `y = (x - μ_B)/sqrt(σ²_B + eps)·scale + bias` with the biased batch variance;
/// after forward, [`BatchNorm2d::batch_mean`] and [`BatchNorm2d::batch_var_unbiased`] give
/// what the running statistics should move towards (PyTorch's convention).
/// Inference: the same with the running statistics, which get no gradient.
#[derive(Debug)]
pub struct BatchNorm2d {
    /// Added to the variance before the square root.
    pub eps: f32,
    /// Use batch statistics (true) or running statistics (false).
    pub training: bool,
    mean: Vec<f32>,
    invstd: Vec<f32>,
    var_unbiased: Vec<f32>,
}

impl BatchNorm2d {
    /// A batch norm in training or inference mode.
    pub fn new(eps: f32, training: bool) -> Self {
        Self {
            eps,
            training,
            mean: Vec::new(),
            invstd: Vec::new(),
            var_unbiased: Vec::new(),
        }
    }

    /// Per-channel mean of the last training batch.
    pub fn batch_mean(&self) -> &[f32] {
        &self.mean
    }

    /// Per-channel unbiased variance of the last training batch.
    pub fn batch_var_unbiased(&self) -> &[f32] {
        &self.var_unbiased
    }

    fn dims(inputs: &[&Tensor]) -> Result<(usize, usize, usize)> {
        if inputs.len() != 5 {
            return Err(attr_err(
                "BatchNormalization",
                format!("needs 5 inputs, got {}", inputs.len()),
            ));
        }
        let x = inputs[0];
        let (n, c, hw) = match x.shape() {
            [n, c, h, w] => (*n, *c, h * w),
            [n, c] => (*n, *c, 1),
            s => return Err(shape_err("BatchNormalization", "[N, C, H, W] or [N, C]", s)),
        };
        for t in &inputs[1..] {
            if t.shape() != [c] {
                return Err(shape_err(
                    "BatchNormalization",
                    format!("a per-channel tensor [{c}]"),
                    t.shape(),
                ));
            }
        }
        Ok((n, c, hw))
    }
}

/// Sums `f(x, dy)` over channel `ci` of an NCHW buffer (f64 accumulation).
fn channel_sum(
    a: &[f32],
    b: &[f32],
    n: usize,
    c: usize,
    hw: usize,
    ci: usize,
    f: impl Fn(f32, f32) -> f64,
) -> f64 {
    let mut s = 0.0f64;
    for ni in 0..n {
        let o = (ni * c + ci) * hw;
        s += a[o..o + hw]
            .iter()
            .zip(&b[o..o + hw])
            .map(|(x, y)| f(*x, *y))
            .sum::<f64>();
    }
    s
}

impl Op for BatchNorm2d {
    fn name(&self) -> &'static str {
        "BatchNormalization"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (n, c, hw) = Self::dims(inputs)?;
        let x = inputs[0].data();
        let (scale, bias) = (inputs[1].data(), inputs[2].data());
        let m = (n * hw) as f64;
        if self.training {
            if n * hw < 2 {
                return Err(shape_err(
                    "BatchNormalization",
                    "at least 2 values per channel in training mode",
                    inputs[0].shape(),
                ));
            }
            let stats: Vec<(f32, f32, f32)> = (0..c)
                .into_par_iter()
                .map(|ci| {
                    let mean = channel_sum(x, x, n, c, hw, ci, |v, _| v as f64) / m;
                    let ss = channel_sum(x, x, n, c, hw, ci, |v, _| {
                        let d = v as f64 - mean;
                        d * d
                    });
                    let var = ss / m;
                    (
                        mean as f32,
                        (1.0 / (var + self.eps as f64).sqrt()) as f32,
                        (ss / (m - 1.0)) as f32,
                    )
                })
                .collect();
            self.mean = stats.iter().map(|s| s.0).collect();
            self.invstd = stats.iter().map(|s| s.1).collect();
            self.var_unbiased = stats.iter().map(|s| s.2).collect();
        } else {
            self.mean = inputs[3].data().to_vec();
            self.invstd = inputs[4]
                .data()
                .iter()
                .map(|v| 1.0 / (v + self.eps).sqrt())
                .collect();
        }
        let mut y = vec![0.0f32; x.len()];
        let (mean, invstd) = (&self.mean, &self.invstd);
        y.par_chunks_mut(hw)
            .zip(x.par_chunks(hw))
            .enumerate()
            .for_each(|(i, (yp, xp))| {
                let ci = i % c;
                let a = invstd[ci] * scale[ci];
                let b = bias[ci] - mean[ci] * a;
                for (yv, xv) in yp.iter_mut().zip(xp) {
                    *yv = xv * a + b;
                }
            });
        Tensor::new(inputs[0].shape(), y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let (n, c, hw) = Self::dims(inputs)?;
        let x = inputs[0].data();
        let dy = grad.data();
        let scale = inputs[1].data();
        let m = (n * hw) as f64;
        let (mean, invstd) = (&self.mean, &self.invstd);
        // Per channel: Σdy and Σdy·x̂, x̂ = (x - μ)·invstd.
        let sums: Vec<(f64, f64)> = (0..c)
            .into_par_iter()
            .map(|ci| {
                let (mu, is) = (mean[ci] as f64, invstd[ci] as f64);
                let sdy = channel_sum(dy, dy, n, c, hw, ci, |g, _| g as f64);
                let sdyx = channel_sum(x, dy, n, c, hw, ci, |v, g| g as f64 * (v as f64 - mu) * is);
                (sdy, sdyx)
            })
            .collect();
        let dx = if needs[0] {
            let mut dx = vec![0.0f32; x.len()];
            let training = self.training;
            dx.par_chunks_mut(hw)
                .zip(x.par_chunks(hw).zip(dy.par_chunks(hw)))
                .enumerate()
                .for_each(|(i, (dp, (xp, gp)))| {
                    let ci = i % c;
                    let (mu, is, g) = (mean[ci], invstd[ci], scale[ci]);
                    if training {
                        // dx = γ·invstd/M · (M·dy − Σdy − x̂·Σdy·x̂)  (Ioffe & Szegedy, §3).
                        let k = g * is;
                        let a = (sums[ci].0 / m) as f32;
                        let b = (sums[ci].1 / m) as f32;
                        for ((d, xv), gv) in dp.iter_mut().zip(xp).zip(gp) {
                            let xh = (xv - mu) * is;
                            *d = k * (gv - a - xh * b);
                        }
                    } else {
                        let k = g * is;
                        for (d, gv) in dp.iter_mut().zip(gp) {
                            *d = k * gv;
                        }
                    }
                });
            Some(Tensor::new(inputs[0].shape(), dx)?)
        } else {
            None
        };
        let dscale = needs[1]
            .then(|| Tensor::new(&[c], sums.iter().map(|s| s.1 as f32).collect()))
            .transpose()?;
        let dbias = needs[2]
            .then(|| Tensor::new(&[c], sums.iter().map(|s| s.0 as f32).collect()))
            .transpose()?;
        Ok(vec![dx, dscale, dbias, None, None])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
