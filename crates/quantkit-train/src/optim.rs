//! Optimizers: SGD with momentum and weight decay, Adam / AdamW, and the cosine learning-rate
//! schedule the training loop uses.

use crate::params::ParamStore;

/// Updates the trainable parameters from their gradients.
pub trait Optimizer: Send {
    /// One update with learning rate `lr`.
    fn step(&mut self, params: &mut ParamStore, lr: f32);
}

/// SGD with (optionally Nesterov) momentum and L2 weight decay, PyTorch's formulation:
/// `g ← g + wd·w; v ← μ·v + g; w ← w − lr·(nesterov ? g + μ·v : v)`.
#[derive(Clone, Debug)]
pub struct Sgd {
    /// Momentum μ.
    pub momentum: f32,
    /// L2 weight decay on parameters marked `decay`.
    pub weight_decay: f32,
    /// Nesterov momentum.
    pub nesterov: bool,
    velocity: Vec<Vec<f32>>,
}

impl Sgd {
    /// SGD with momentum `momentum` and weight decay `weight_decay`.
    pub fn new(momentum: f32, weight_decay: f32) -> Self {
        Self {
            momentum,
            weight_decay,
            nesterov: false,
            velocity: Vec::new(),
        }
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, params: &mut ParamStore, lr: f32) {
        if self.velocity.len() != params.len() {
            self.velocity = params.iter().map(|p| vec![0.0; p.value.len()]).collect();
        }
        for (p, v) in params.iter_mut().zip(&mut self.velocity) {
            if !p.trainable {
                continue;
            }
            let wd = if p.decay { self.weight_decay } else { 0.0 };
            let (w, g) = (p.value.data_mut(), p.grad.data());
            for ((w, g), v) in w.iter_mut().zip(g).zip(v.iter_mut()) {
                let g = g + wd * *w;
                *v = self.momentum * *v + g;
                let d = if self.nesterov {
                    g + self.momentum * *v
                } else {
                    *v
                };
                *w -= lr * d;
            }
        }
    }
}

/// Adam (Kingma & Ba, 2015) with bias correction; `decoupled` weight decay gives AdamW
/// (Loshchilov & Hutter, 2019): `w ← w − lr·wd·w` applied separately from the adaptive step.
#[derive(Clone, Debug)]
pub struct Adam {
    /// β₁.
    pub beta1: f32,
    /// β₂.
    pub beta2: f32,
    /// ε.
    pub eps: f32,
    /// Weight decay on parameters marked `decay`.
    pub weight_decay: f32,
    /// AdamW (decoupled) rather than L2-in-the-gradient decay.
    pub decoupled: bool,
    /// Largest step of a weight tensor (a parameter with `decay`) relative to its RMS:
    /// its update is scaled by `min(1, r·rms(W)/lr)` (0 = no limit). Adam moves every
    /// element by about `lr` whatever its size, so a layer whose weights are far smaller
    /// than `lr` (PP-OCRv4 det's head after BN folding: RMS 3·10⁻⁵) is rewritten in a few
    /// steps; the limit bounds each step to `r` of the tensor's own size instead, and
    /// leaves tensors with `rms(W) ≥ lr/r` alone.
    pub max_step_ratio: f32,
    t: i32,
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl Adam {
    /// Adam with the usual β₁ = 0.9, β₂ = 0.999, ε = 1e-8 and AdamW decay `weight_decay`.
    pub fn new(weight_decay: f32) -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            decoupled: true,
            max_step_ratio: 0.0,
            t: 0,
            m: Vec::new(),
            v: Vec::new(),
        }
    }
}

impl Optimizer for Adam {
    fn step(&mut self, params: &mut ParamStore, lr: f32) {
        if self.m.len() != params.len() {
            self.m = params.iter().map(|p| vec![0.0; p.value.len()]).collect();
            self.v = self.m.clone();
        }
        self.t += 1;
        let bc1 = 1.0 - self.beta1.powi(self.t);
        let bc2 = 1.0 - self.beta2.powi(self.t);
        for ((p, m), v) in params.iter_mut().zip(&mut self.m).zip(&mut self.v) {
            if !p.trainable {
                continue;
            }
            let wd = if p.decay { self.weight_decay } else { 0.0 };
            let lr = if p.decay && self.max_step_ratio > 0.0 && lr > 0.0 {
                let d = p.value.data();
                let rms = (d.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>()
                    / d.len().max(1) as f64)
                    .sqrt() as f32;
                lr * (self.max_step_ratio * rms / lr).min(1.0)
            } else {
                lr
            };
            let (w, g) = (p.value.data_mut(), p.grad.data());
            for (((w, g), m), v) in w.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                let g = if self.decoupled { *g } else { g + wd * *w };
                if self.decoupled {
                    *w -= lr * wd * *w;
                }
                *m = self.beta1 * *m + (1.0 - self.beta1) * g;
                *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
                let mh = *m / bc1;
                let vh = *v / bc2;
                *w -= lr * mh / (vh.sqrt() + self.eps);
            }
        }
    }
}

/// Learning rate at `step` of `total`: linear warm-up over `warmup` steps, then cosine decay
/// to zero (Loshchilov & Hutter, "SGDR", 2017, without restarts).
pub fn cosine_lr(base: f32, step: usize, total: usize, warmup: usize) -> f32 {
    if step < warmup {
        return base * (step + 1) as f32 / warmup as f32;
    }
    let span = total.saturating_sub(warmup).max(1);
    let t = (step - warmup).min(span) as f32 / span as f32;
    base * 0.5 * (1.0 + (std::f32::consts::PI * t).cos())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    /// Minimises (w − 3)² and checks that each optimizer gets there.
    fn converges(opt: &mut dyn Optimizer, lr: f32, steps: usize) -> f32 {
        let mut ps = ParamStore::new();
        let id = ps.add("w", Tensor::new(&[1], vec![0.0]).unwrap(), true, false);
        for _ in 0..steps {
            let w = ps.get(id).value.data()[0];
            ps.get_mut(id).grad.data_mut()[0] = 2.0 * (w - 3.0);
            opt.step(&mut ps, lr);
        }
        ps.get(id).value.data()[0]
    }

    #[test]
    fn optimizers_minimise_a_quadratic() {
        assert!((converges(&mut Sgd::new(0.9, 0.0), 0.05, 300) - 3.0).abs() < 1e-3);
        assert!((converges(&mut Adam::new(0.0), 0.1, 500) - 3.0).abs() < 1e-2);
    }

    /// The step limit scales a small weight tensor's update to `r·rms(W)` and leaves a
    /// large one's at `lr`; biases (no `decay`) are never limited.
    #[test]
    fn adam_step_limit_is_relative_to_the_weights() {
        let mut ps = ParamStore::new();
        let small = ps.add(
            "small",
            Tensor::new(&[2], vec![1e-5, -1e-5]).unwrap(),
            true,
            true,
        );
        let large = ps.add(
            "large",
            Tensor::new(&[2], vec![0.5, -0.5]).unwrap(),
            true,
            true,
        );
        let bias = ps.add(
            "bias",
            Tensor::new(&[2], vec![1e-5, -1e-5]).unwrap(),
            true,
            false,
        );
        for id in [small, large, bias] {
            ps.get_mut(id).grad.data_mut().fill(1.0);
        }
        let mut opt = Adam::new(0.0);
        opt.max_step_ratio = 0.01;
        opt.step(&mut ps, 1e-3);
        // Adam's first step is lr·sign(g) (up to eps).
        let moved = |id: usize, v: f32| (ps.get(id).value.data()[0] - v).abs();
        assert!(
            (moved(small, 1e-5) - 1e-7).abs() < 1e-9,
            "{}",
            moved(small, 1e-5)
        );
        assert!((moved(large, 0.5) - 1e-3).abs() < 1e-6);
        assert!((moved(bias, 1e-5) - 1e-3).abs() < 1e-6);
        let mut off = Adam::new(0.0);
        let mut ps2 = ParamStore::new();
        let id = ps2.add("small", Tensor::new(&[1], vec![1e-5]).unwrap(), true, true);
        ps2.get_mut(id).grad.data_mut()[0] = 1.0;
        off.step(&mut ps2, 1e-3);
        assert!((ps2.get(id).value.data()[0] - (1e-5 - 1e-3)).abs() < 1e-7);
    }

    #[test]
    fn sgd_matches_hand_computed_steps() {
        let mut ps = ParamStore::new();
        let id = ps.add("w", Tensor::new(&[1], vec![1.0]).unwrap(), true, true);
        let mut opt = Sgd::new(0.5, 0.1);
        ps.get_mut(id).grad.data_mut()[0] = 2.0;
        opt.step(&mut ps, 0.1); // g = 2.1, v = 2.1, w = 1 - 0.21
        assert!((ps.get(id).value.data()[0] - 0.79).abs() < 1e-6);
        opt.step(&mut ps, 0.1); // g = 2 + 0.079, v = 1.05 + 2.079, w = 0.79 - 0.3129
        assert!((ps.get(id).value.data()[0] - 0.4771).abs() < 1e-5);
    }

    #[test]
    fn cosine_schedule_shape() {
        assert_eq!(cosine_lr(1.0, 0, 100, 10), 0.1);
        assert!((cosine_lr(1.0, 10, 110, 10) - 1.0).abs() < 1e-6);
        assert!((cosine_lr(1.0, 60, 110, 10) - 0.5).abs() < 1e-6);
        assert!(cosine_lr(1.0, 110, 110, 10).abs() < 1e-6);
    }
}
