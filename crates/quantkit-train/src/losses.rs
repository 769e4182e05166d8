//! Losses on plain f32 outputs, each returning the mean loss over the batch and its
//! gradient with respect to the model output (the seed of `GraphNet::backward`).
//!
//! - cross-entropy of softmax logits `[N, K]` with class labels;
//! - mean squared error against a target (regressors, autoencoders);
//! - distillation against a teacher's outputs: KL(p_teacher ‖ p_student) on softmax with
//!   temperature T, scaled by T² (Hinton et al. 2015), or MSE on the raw outputs.
//!
//! Sums run in f64.

/// Which loss a training run minimises.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossKind {
    /// Softmax cross-entropy with labels.
    CrossEntropy,
    /// Mean squared error against the target (the input itself for an autoencoder).
    Mse,
    /// KL divergence to the teacher's softmax at temperature `T`, times `T²`.
    DistillKl {
        /// Temperature.
        temperature: f32,
    },
    /// Mean squared error to the teacher's raw outputs.
    DistillMse,
}

fn softmax_row(z: &[f32], t: f32) -> Vec<f64> {
    let m = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let e: Vec<f64> = z
        .iter()
        .map(|&v| ((v as f64 - m) / t as f64).exp())
        .collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// Mean softmax cross-entropy of logits `[N, K]` (row-major) with `labels`.
pub fn cross_entropy(logits: &[f32], k: usize, labels: &[usize]) -> (f32, Vec<f32>) {
    let n = labels.len().max(1);
    let mut grad = vec![0f32; logits.len()];
    let mut loss = 0f64;
    for ((row, g), &l) in logits.chunks(k).zip(grad.chunks_mut(k)).zip(labels) {
        let p = softmax_row(row, 1.0);
        loss -= p[l.min(k - 1)].max(1e-300).ln();
        for (j, gj) in g.iter_mut().enumerate() {
            *gj = ((p[j] - f64::from(u8::from(j == l))) / n as f64) as f32;
        }
    }
    ((loss / n as f64) as f32, grad)
}

/// Mean squared error `mean((y − t)²)`.
pub fn mse(y: &[f32], t: &[f32]) -> (f32, Vec<f32>) {
    let n = y.len().max(1) as f64;
    let loss: f64 = y
        .iter()
        .zip(t)
        .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
        .sum::<f64>()
        / n;
    let grad = y
        .iter()
        .zip(t)
        .map(|(&a, &b)| (2.0 * (a as f64 - b as f64) / n) as f32)
        .collect();
    (loss as f32, grad)
}

/// `T² · mean_n KL(softmax(teacher/T) ‖ softmax(student/T))` over rows of `k`; its
/// gradient is `T · (p_s − p_t) / N`.
pub fn distill_kl(student: &[f32], teacher: &[f32], k: usize, t: f32) -> (f32, Vec<f32>) {
    let n = (student.len() / k.max(1)).max(1);
    let mut grad = vec![0f32; student.len()];
    let mut loss = 0f64;
    for ((s, te), g) in student
        .chunks(k)
        .zip(teacher.chunks(k))
        .zip(grad.chunks_mut(k))
    {
        let (ps, pt) = (softmax_row(s, t), softmax_row(te, t));
        for j in 0..k {
            if pt[j] > 0.0 {
                loss += pt[j] * (pt[j].ln() - ps[j].max(1e-300).ln());
            }
            g[j] = (t as f64 * (ps[j] - pt[j]) / n as f64) as f32;
        }
    }
    ((loss * (t * t) as f64 / n as f64) as f32, grad)
}

/// `T² · mean_n KL(q_teacher ‖ q_student)` over rows of `k` when both are already
/// probabilities (the output of a Softmax), with `q = softmax(ln p / T)` (at T = 1, `q = p`):
/// the loss is computed on `probs`, the student's probabilities before any output
/// quantization. The returned gradient is with respect to those probabilities,
/// `T · (q_s − q_t) / (N · p_s)`, chosen so that the Softmax's own backward
/// (`p ⊙ (g − ⟨p, g⟩)`, and the entries sum to 0) turns it into `T · (q_s − q_t) / N` on
/// its logits — the gradient of the same KL computed on the logits (`p_s` is floored at
/// 1e-30).
pub fn distill_kl_probs(probs: &[f32], teacher: &[f32], k: usize, t: f32) -> (f32, Vec<f32>) {
    let n = (probs.len() / k.max(1)).max(1);
    let t = f64::from(t);
    let soften = |p: &[f32]| -> Vec<f64> {
        let l: Vec<f64> = p
            .iter()
            .map(|&v| f64::from(v).max(1e-30).ln() / t)
            .collect();
        let m = l.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        let e: Vec<f64> = l.iter().map(|v| (v - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|v| v / s).collect()
    };
    let mut loss = 0f64;
    let mut grad = vec![0f32; probs.len()];
    for ((ps, pt), g) in probs
        .chunks(k)
        .zip(teacher.chunks(k))
        .zip(grad.chunks_mut(k))
    {
        let (qs, qt) = (soften(ps), soften(pt));
        for j in 0..k {
            if qt[j] > 0.0 {
                loss += qt[j] * (qt[j].ln() - qs[j].max(1e-300).ln());
            }
            let p = f64::from(ps[j]).max(1e-30);
            g[j] = (t * (qs[j] - qt[j]) / n as f64 / p) as f32;
        }
    }
    ((loss * t * t / n as f64) as f32, grad)
}

/// Mean squared error divided by `norm` (the variance of the teacher's output, so the
/// loss is dimensionless: 1 − R² when the student predicts the teacher's mean).
pub fn mse_normalised(y: &[f32], t: &[f32], norm: f32) -> (f32, Vec<f32>) {
    let (l, mut g) = mse(y, t);
    let norm = if norm.is_finite() && norm > 0.0 {
        norm
    } else {
        1.0
    };
    g.iter_mut().for_each(|v| *v /= norm);
    (l / norm, g)
}

/// The loss of `kind` for `output` (`[N, K]`, row length `k`), given labels or a target.
pub fn compute(
    kind: LossKind,
    output: &[f32],
    k: usize,
    labels: Option<&[usize]>,
    target: Option<&[f32]>,
) -> Option<(f32, Vec<f32>)> {
    Some(match kind {
        LossKind::CrossEntropy => cross_entropy(output, k, labels?),
        LossKind::Mse | LossKind::DistillMse => mse(output, target?),
        LossKind::DistillKl { temperature } => distill_kl(output, target?, k, temperature),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd(f: impl Fn(&[f32]) -> f32, x: &[f32], g: &[f32]) {
        for j in 0..x.len() {
            let (mut a, mut b) = (x.to_vec(), x.to_vec());
            a[j] += 1e-3;
            b[j] -= 1e-3;
            let num = (f(&a) as f64 - f(&b) as f64) / 2e-3;
            assert!(
                (num - g[j] as f64).abs() < 1e-3 + 1e-2 * num.abs(),
                "[{j}]: analytic {} numeric {num}",
                g[j]
            );
        }
    }

    #[test]
    fn loss_gradients_match_finite_differences() {
        let x: Vec<f32> = (0..12).map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0).collect();
        let t: Vec<f32> = (0..12).map(|i| ((i * 5 % 7) as f32 - 3.0) / 2.0).collect();
        let labels = [1, 3, 0];
        let (_, g) = cross_entropy(&x, 4, &labels);
        fd(|v| cross_entropy(v, 4, &labels).0, &x, &g);
        let (_, g) = mse(&x, &t);
        fd(|v| mse(v, &t).0, &x, &g);
        for temp in [1.0, 4.0] {
            let (_, g) = distill_kl(&x, &t, 4, temp);
            fd(|v| distill_kl(v, &t, 4, temp).0, &x, &g);
        }
        let p: Vec<f32> = x
            .chunks(4)
            .flat_map(|r| softmax_row(r, 1.0).into_iter().map(|v| v as f32))
            .collect();
        let q: Vec<f32> = t
            .chunks(4)
            .flat_map(|r| softmax_row(r, 1.0).into_iter().map(|v| v as f32))
            .collect();
        // At T = 1 the loss is the plain KL of the probabilities (finite differences in
        // p); at any T, the probability gradient taken through the softmax's backward is
        // the gradient of the same KL computed on the logits, and so is the loss.
        let (_, g) = distill_kl_probs(&p, &q, 4, 1.0);
        fd(|v| distill_kl_probs(v, &q, 4, 1.0).0, &p, &g);
        for temp in [1.0f32, 3.0] {
            let (lp, g) = distill_kl_probs(&p, &q, 4, temp);
            let (ll, gl) = distill_kl(&x, &t, 4, temp);
            assert!((lp - ll).abs() < 1e-5, "T {temp}: {lp} vs {ll}");
            for (r, (gp, pr)) in gl.chunks(4).zip(g.chunks(4).zip(p.chunks(4))) {
                let dot: f32 = gp.iter().zip(pr).map(|(a, b)| a * b).sum();
                for j in 0..4 {
                    let via = pr[j] * (gp[j] - dot);
                    assert!((via - r[j]).abs() < 1e-5, "T {temp}: {via} vs {}", r[j]);
                }
            }
        }
        let (l, g) = mse_normalised(&x, &t, 4.0);
        assert!((l - mse(&x, &t).0 / 4.0).abs() < 1e-6);
        fd(|v| mse_normalised(v, &t, 4.0).0, &x, &g);
        // KL of identical distributions is 0.
        assert!(distill_kl(&x, &x, 4, 2.0).0.abs() < 1e-6);
    }
}
