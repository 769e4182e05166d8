//! Weight averaging: an exponential moving average of the trained parameters (Polyak &
//! Juditsky 1992; the form of TensorFlow's `ExponentialMovingAverage` and timm's
//! `ModelEmaV2`), which QAT evaluates and exports instead of the last step's parameters
//! (`docs/qat.md`, "Weight averaging").
//!
//! After every optimizer step `t = 0, 1, …` each trainable parameter's average moves
//! towards the parameter:
//!
//! ```text
//! a_{t+1} = d_t · a_t + (1 − d_t) · p_{t+1},   a_0 = p_0                        (EMA)
//! d_t     = decay                               (constant)
//! d_t     = min(decay, (1 + t) / (10 + t))      (with warm-up, TensorFlow's num_updates)
//! ```
//!
//! so the state the average started from still weighs `Π_t d_t` in it
//! ([`Ema::start_weight`]): with a constant decay `d` after `T` steps that is `d^T` (at
//! `d = 0.999`, 39 % after 937 steps), with the warm-up `Π (1 + t)/(10 + t)`, which is
//! below 10⁻⁶ after 100 steps. The averages are kept in f64: at `d = 0.9999` a step adds
//! `10⁻⁴` of a change that is itself about the learning rate, below an f32 weight's last
//! bit.

use crate::error::{Result, TrainError};
use crate::params::ParamStore;

/// The moving average of a [`ParamStore`]'s trainable parameters.
#[derive(Clone, Debug)]
pub struct Ema {
    decay: f64,
    warmup: bool,
    updates: u64,
    /// Per parameter (by index in the store): its average, `None` when the parameter was
    /// not trainable at the last [`Ema::reset`].
    shadow: Vec<Option<Vec<f64>>>,
    start_weight: f64,
}

impl Ema {
    /// An average with decay `decay` (in `[0, 1)`), optionally with the warm-up
    /// `min(decay, (1 + t)/(10 + t))`, started at the current values of `params`.
    pub fn new(decay: f32, warmup: bool, params: &ParamStore) -> Result<Ema> {
        if !(decay.is_finite() && (0.0..1.0).contains(&decay)) {
            return Err(TrainError::Graph(format!(
                "EMA decay {decay}: expected a number in [0, 1)"
            )));
        }
        let mut e = Ema {
            decay: f64::from(decay),
            warmup,
            updates: 0,
            shadow: Vec::new(),
            start_weight: 1.0,
        };
        e.reset(params);
        Ok(e)
    }

    /// The decay of update `t` (counted from the last [`Ema::reset`]).
    pub fn decay_at(&self, t: u64) -> f64 {
        if self.warmup {
            self.decay.min((1.0 + t as f64) / (10.0 + t as f64))
        } else {
            self.decay
        }
    }

    /// Restarts the average at the current values of `params` (its trainable ones).
    pub fn reset(&mut self, params: &ParamStore) {
        self.shadow = params
            .iter()
            .map(|p| {
                p.trainable
                    .then(|| p.value.data().iter().map(|&v| f64::from(v)).collect())
            })
            .collect();
        self.updates = 0;
        self.start_weight = 1.0;
    }

    /// One update after an optimizer step: `a ← d_t·a + (1 − d_t)·p` for every averaged
    /// parameter (written `a += (1 − d_t)(p − a)`).
    pub fn update(&mut self, params: &ParamStore) {
        if self.shadow.len() != params.len() {
            self.reset(params);
            return;
        }
        let d = self.decay_at(self.updates);
        let w = 1.0 - d;
        for (a, p) in self.shadow.iter_mut().zip(params.iter()) {
            let Some(a) = a else { continue };
            for (a, &v) in a.iter_mut().zip(p.value.data()) {
                *a += w * (f64::from(v) - *a);
            }
        }
        self.updates += 1;
        self.start_weight *= d;
    }

    /// Writes the averages into `params` (rounded to f32); parameters without an average
    /// keep their values.
    pub fn apply(&self, params: &mut ParamStore) {
        for (a, p) in self.shadow.iter().zip(params.iter_mut()) {
            let Some(a) = a else { continue };
            if a.len() != p.value.len() {
                continue;
            }
            for (v, &a) in p.value.data_mut().iter_mut().zip(a) {
                *v = a as f32;
            }
        }
    }

    /// The decay set at construction.
    pub fn decay(&self) -> f32 {
        self.decay as f32
    }

    /// Whether the decay warms up.
    pub fn warmup(&self) -> bool {
        self.warmup
    }

    /// Updates since the last reset.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// The weight of the state the average started from (the last reset) in the average:
    /// `Π_t d_t` over the updates so far.
    pub fn start_weight(&self) -> f64 {
        self.start_weight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    fn store(w: &[f32], b: f32, frozen: f32) -> ParamStore {
        let mut ps = ParamStore::new();
        ps.add(
            "w",
            Tensor::new(&[w.len()], w.to_vec()).unwrap(),
            true,
            true,
        );
        ps.add("b", Tensor::new(&[1], vec![b]).unwrap(), true, false);
        ps.add(
            "running",
            Tensor::new(&[1], vec![frozen]).unwrap(),
            false,
            false,
        );
        ps
    }

    fn set(ps: &mut ParamStore, w: &[f32], b: f32, frozen: f32) {
        ps.get_mut(0).value.data_mut().copy_from_slice(w);
        ps.get_mut(1).value.data_mut()[0] = b;
        ps.get_mut(2).value.data_mut()[0] = frozen;
    }

    /// The average of a tiny model's three parameters over three steps, against the
    /// formula written out by hand: constant decay, then the warm-up's decays
    /// 1/10, 2/11, 3/12; a non-trainable tensor is left as it is.
    #[test]
    fn averages_follow_the_formula() {
        let traj: [([f32; 2], f32); 3] =
            [([1.0, -2.0], 0.5), ([3.0, 0.0], -0.5), ([2.0, 4.0], 1.0)];
        let start = ([0.0f32, 1.0], 0.25f32);
        for warmup in [false, true] {
            let mut ps = store(&start.0, start.1, 7.0);
            let mut e = Ema::new(0.5, warmup, &ps).unwrap();
            let (mut aw, mut ab) = (
                [f64::from(start.0[0]), f64::from(start.0[1])],
                f64::from(start.1),
            );
            let mut weight = 1.0;
            for (t, (w, b)) in traj.iter().enumerate() {
                set(&mut ps, w, *b, 100.0 + t as f32);
                e.update(&ps);
                let d = if warmup {
                    [0.1, 2.0 / 11.0, 0.25][t]
                } else {
                    0.5
                };
                for i in 0..2 {
                    aw[i] = d * aw[i] + (1.0 - d) * f64::from(w[i]);
                }
                ab = d * ab + (1.0 - d) * f64::from(*b);
                weight *= d;
            }
            // By hand for the constant decay: a = 0.5³·p0 + 0.5³·p1 + 0.5²·p2 + 0.5·p3.
            if !warmup {
                let w0 = 0.125 * 0.0 + 0.125 * 1.0 + 0.25 * 3.0 + 0.5 * 2.0;
                assert!((aw[0] - w0).abs() < 1e-12, "{} vs {w0}", aw[0]);
            }
            let mut out = ps.clone();
            e.apply(&mut out);
            let got = out.get(0).value.data().to_vec();
            let close = |g: f32, w: f64| (f64::from(g) - w).abs() < 1e-6;
            assert!(
                close(got[0], aw[0]) && close(got[1], aw[1]),
                "warmup {warmup}: {got:?} against {aw:?}"
            );
            assert!(close(out.get(1).value.data()[0], ab), "warmup {warmup}");
            // Not trainable: not averaged, keeps the current value.
            assert_eq!(out.get(2).value.data()[0], 102.0);
            assert!((e.start_weight() - weight).abs() < 1e-12);
            assert_eq!(e.updates(), 3);
        }
    }

    #[test]
    fn warm_up_caps_the_decay_and_reset_restarts() {
        let ps = store(&[1.0], 0.0, 0.0);
        let mut e = Ema::new(0.999, true, &ps).unwrap();
        assert_eq!(e.decay_at(0), 0.1);
        assert!((e.decay_at(90) - 91.0 / 100.0).abs() < 1e-15);
        // The decay is the f32 given, widened.
        assert_eq!(e.decay_at(100_000), f64::from(0.999f32));
        let mut ps2 = ps.clone();
        ps2.get_mut(0).value.data_mut()[0] = 5.0;
        e.update(&ps2);
        e.reset(&ps2);
        assert_eq!((e.updates(), e.start_weight()), (0, 1.0));
        let mut out = ps.clone();
        e.apply(&mut out);
        assert_eq!(out.get(0).value.data()[0], 5.0);
        for bad in [1.0, -0.1, f32::NAN] {
            assert!(Ema::new(bad, false, &ps).is_err(), "{bad}");
        }
    }
}
