//! `BatchNormalization`: y = scale·(x − mean)/√(var + ε) + B per channel (axis 1).
//! With `training_mode` = 1 (opset 14+) the batch statistics are used and the running
//! statistics are returned as `momentum·running + (1 − momentum)·batch` (population var).

use super::{f32_input, input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};
use rayon::prelude::*;

/// Evaluates `BatchNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let xv = x.to_f32_vec();
    let (scale, bias) = (f32_input(inputs, 1)?, f32_input(inputs, 2)?);
    let (rmean, rvar) = (f32_input(inputs, 3)?, f32_input(inputs, 4)?);
    let eps = ctx.node.attr_float("epsilon", 1e-5)?;
    let momentum = ctx.node.attr_float("momentum", 0.9)?;
    let training = ctx.node.attr_int("training_mode", 0)? != 0;
    if x.rank() < 2 {
        return Err(OpError::shape("input of rank ≥ 2", &x.shape));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let plane: usize = x.shape[2..].iter().product();
    for (i, t) in [scale, bias, rmean, rvar].iter().enumerate() {
        if t.len() != c {
            return Err(OpError::shape(
                format!("input {} with {c} elements", i + 1),
                t.len(),
            ));
        }
    }
    let (mean, var): (Vec<f32>, Vec<f32>) = if training {
        let cnt = (n * plane) as f64;
        // Channels in parallel; within one, the values in index order (batch-major), so
        // the sums do not depend on the thread count.
        (0..c)
            .into_par_iter()
            .map(|ci| {
                let planes = || (0..n).map(|ni| &xv[(ni * c + ci) * plane..(ni * c + ci + 1) * plane]);
                let m = planes()
                    .map(|p| sum4(p, |v| v as f64))
                    .fold(0.0, |a, b| a + b)
                    / cnt;
                let v = planes()
                    .map(|p| sum4(p, |v| (v as f64 - m).powi(2)))
                    .fold(0.0, |a, b| a + b)
                    / cnt;
                (m as f32, v as f32)
            })
            .unzip()
    } else {
        (rmean.to_vec(), rvar.to_vec())
    };
    let mut y = xv;
    if plane > 0 {
        y.par_chunks_mut(plane).enumerate().for_each(|(i, p)| {
            let ci = i % c;
            let k = scale[ci] / (var[ci] + eps).sqrt();
            let b = bias[ci] - mean[ci] * k;
            p.iter_mut().for_each(|v| *v = *v * k + b);
        });
    }
    let mut out = vec![make(DType::F32, x.shape.clone(), Data::F32(y))?.cast(x.dtype)];
    if training {
        let rm: Vec<f32> = (0..c)
            .map(|i| momentum * rmean[i] + (1.0 - momentum) * mean[i])
            .collect();
        let rv: Vec<f32> = (0..c)
            .map(|i| momentum * rvar[i] + (1.0 - momentum) * var[i])
            .collect();
        out.push(Tensor::from_f32(&[c], rm));
        out.push(Tensor::from_f32(&[c], rv));
    }
    Ok(out)
}

/// Gradient of output 0. Inference mode (`training_mode = 0`, the running statistics are
/// constants): `∂x = g·γ/σ`, `∂γ = Σ g·(x − μ)/σ`, `∂β = Σ g` with `σ = √(var + ε)`.
/// Training mode (batch statistics, biased variance): `∂x = γ/(σ·M) · (M·g − Σg − x̂·Σ g·x̂)`
/// over the `M = N·H·W` values of a channel. The running statistics get no gradient.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let x = input(gi.inputs, 0)?;
    let xv = super::grad::f32s(gi.inputs, 0)?;
    let (scale, rmean, rvar) = (
        f32_input(gi.inputs, 1)?,
        f32_input(gi.inputs, 3)?,
        f32_input(gi.inputs, 4)?,
    );
    let eps = ctx.node.attr_float("epsilon", 1e-5)?;
    let training = ctx.node.attr_int("training_mode", 0)? != 0;
    if x.rank() < 2 || scale.len() != x.shape[1] {
        return Err(OpError::shape("input [N, C, ...] and C scales", &x.shape));
    }
    let (n, c) = (x.shape[0], x.shape[1]);
    let plane: usize = x.shape[2..].iter().product();
    let g = gi.grad;
    if g.len() != x.len() {
        return Err(OpError::shape(
            format!("output gradient of {} elements", x.len()),
            g.len(),
        ));
    }
    let m = (n * plane) as f64;
    // Per channel, in parallel (each in index order, batch-major, so the result does not
    // depend on the thread count): the statistics and the two gradient sums.
    let stats: Vec<(f64, f64, f64, f64)> = (0..c)
        .into_par_iter()
        .map(|ci| {
            let at = |ni: usize| (ni * c + ci) * plane..(ni * c + ci + 1) * plane;
            let (mean, var) = if training {
                let mu = (0..n)
                    .map(|ni| sum4(&xv[at(ni)], |v| v as f64))
                    .fold(0.0, |a, b| a + b)
                    / m;
                let v = (0..n)
                    .map(|ni| sum4(&xv[at(ni)], |v| (v as f64 - mu).powi(2)))
                    .fold(0.0, |a, b| a + b)
                    / m;
                (mu, v)
            } else {
                (rmean[ci] as f64, rvar[ci] as f64)
            };
            let sigma = (var + eps as f64).sqrt();
            // Σg and Σg·x̂ with x̂ = (x − μ)/σ, as Σg·x − μ·Σg over σ: four partial sums
            // per plane (a single f64 chain is bound by the adder's latency).
            let (mut sg, mut sgx_raw) = (0f64, 0f64);
            for ni in 0..n {
                let (xs, gs) = (&xv[at(ni)], &g[at(ni)]);
                let (mut a, mut b) = ([0f64; 4], [0f64; 4]);
                let (xc, gc) = (xs.chunks_exact(4), gs.chunks_exact(4));
                let (xr, gr) = (xc.remainder(), gc.remainder());
                for (x4, g4) in xc.zip(gc) {
                    for l in 0..4 {
                        a[l] += g4[l] as f64;
                        b[l] += g4[l] as f64 * x4[l] as f64;
                    }
                }
                let (mut pa, mut pb) = ((a[0] + a[1]) + (a[2] + a[3]), (b[0] + b[1]) + (b[2] + b[3]));
                for (&xi, &gi) in xr.iter().zip(gr) {
                    pa += gi as f64;
                    pb += gi as f64 * xi as f64;
                }
                sg += pa;
                sgx_raw += pb;
            }
            (mean, sigma, sg, (sgx_raw - mean * sg) / sigma)
        })
        .collect();
    let dg: Vec<f32> = stats.iter().map(|s| s.3 as f32).collect();
    let db: Vec<f32> = stats.iter().map(|s| s.2 as f32).collect();
    let mut dx = vec![0f32; x.len()];
    if plane > 0 {
        dx.par_chunks_mut(plane).enumerate().for_each(|(i, dp)| {
            let ci = i % c;
            let (mean, sigma, sg, sgx) = stats[ci];
            let k = scale[ci] as f64 / sigma;
            let (xp, gp) = (&xv[i * plane..(i + 1) * plane], &g[i * plane..(i + 1) * plane]);
            if training {
                // k/M·(M·g − Σg − x̂·Σg·x̂) = α·g + β·x + γ per channel, in f32 so the
                // loop vectorises.
                let alpha = k as f32;
                let beta = (-k * sgx / (m * sigma)) as f32;
                let gamma = (k * (sgx * mean / sigma - sg) / m) as f32;
                for ((d, &xi), &gi) in dp.iter_mut().zip(xp).zip(gp) {
                    *d = alpha * gi + beta * xi + gamma;
                }
            } else {
                for (d, &gi) in dp.iter_mut().zip(gp) {
                    *d = (gi as f64 * k) as f32;
                }
            }
        });
    }
    let mut out: Vec<Option<Tensor>> = vec![None; gi.inputs.len()];
    if gi.need(0) {
        out[0] = Some(super::grad::tensor(&x.shape, dx)?);
    }
    if gi.need(1) {
        out[1] = Some(super::grad::tensor(&[c], dg)?);
    }
    if gi.need(2) {
        out[2] = Some(super::grad::tensor(&[c], db)?);
    }
    Ok(out)
}

/// `Σ f(x)` over a slice with four f64 partial sums in a fixed order (deterministic; a
/// single chain of f64 additions runs at the adder's latency).
fn sum4(x: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut a = [0f64; 4];
    let chunks = x.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in a.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    let mut s = (a[0] + a[1]) + (a[2] + a[3]);
    for &v in rest {
        s += f(v);
    }
    s
}

/// `BatchNormalization` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("BatchNormalization", 1, eval)
        .backward(backward).infer(super::registry::same_as_first);
