//! Calibration observers: stream batches of a tensor, keep bounded state, and produce a
//! clipping range (hence scale and zero point) per slot.
//!
//! - [`MinMaxObserver`] — running min/max (exact merge).
//! - [`MovingAverageMinMaxObserver`] — exponential moving average of per-batch min/max.
//! - [`HistogramObserver`] with [`HistogramMethod::Percentile`], [`HistogramMethod::Entropy`]
//!   (TensorRT's KL-divergence calibration) or [`HistogramMethod::Mse`] (the clip range that
//!   minimises the expected quantization MSE for the target scheme).
//!
//! All of them work per-tensor, per-channel and per-group (one state per parameter slot,
//! see [`crate::tensor::SlotMap`]), reject NaN/±Inf with an error naming the tensor, keep no
//! raw data, are deterministic, and merge.

mod histogram;
mod methods;

use std::any::Any;
use std::fmt::Debug;
use std::str::FromStr;

pub use histogram::{Histogram, DEFAULT_BINS};

use crate::error::{CoreError, Result};
use crate::params::QParams;
use crate::scheme::{Granularity, QuantScheme};
use crate::tensor::{check_finite, minmax_per_slot, SlotMap};

/// A streaming calibration observer for one tensor.
pub trait Observer: Debug + Send {
    /// The observed tensor's name (used in error messages).
    fn tensor(&self) -> &str;
    /// The granularity the observer was built for.
    fn granularity(&self) -> Granularity;
    /// Observes one batch `x` of shape `shape`. Errors on NaN/±Inf, on a shape whose slot
    /// count differs from earlier batches, or on a bad axis.
    fn observe(&mut self, x: &[f32], shape: &[usize]) -> Result<()>;
    /// Folds another observer of the same kind and configuration into this one.
    fn merge(&mut self, other: &dyn Observer) -> Result<()>;
    /// The clip range `(lo, hi)` chosen for each slot under `scheme`. Errors if nothing has
    /// been observed.
    fn ranges(&self, scheme: &QuantScheme) -> Result<Vec<(f32, f32)>>;
    /// Scales and zero points for `scheme` (its granularity is replaced by the observer's).
    fn qparams(&self, scheme: &QuantScheme) -> Result<QParams> {
        let s = scheme.with_granularity(self.granularity());
        QParams::from_ranges(self.tensor(), &self.ranges(&s)?, &s)
    }
    /// For [`Observer::merge`]'s type check.
    fn as_any(&self) -> &dyn Any;
}

/// The calibration methods, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CalibrationMethod {
    /// `minmax`
    MinMax,
    /// `ema=M` (momentum M, default 0.01 when written `ema`)
    MovingAverage {
        /// Weight of each new batch, in (0, 1].
        momentum: f32,
    },
    /// `percentile=P` (P in (0, 100], e.g. 99.99)
    Percentile(f64),
    /// `entropy`
    Entropy,
    /// `mse`
    Mse,
    /// `auto`: per tensor, the best of the minmax, percentile=99.99, mse and entropy ranges.
    /// On its own (this crate) "best" is the smallest quantization MSE of the tensor
    /// itself; quantkit-ptq judges the candidates ([`HistogramObserver::candidates`]) by
    /// the error of the tensor's consumers instead.
    Auto,
}

impl FromStr for CalibrationMethod {
    type Err = CoreError;
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        let (name, arg) = match s.split_once('=') {
            Some((n, a)) => (n.to_string(), Some(a.to_string())),
            None => (s.clone(), None),
        };
        let num = |a: &Option<String>| -> Result<f64> {
            a.as_deref()
                .unwrap_or("")
                .parse::<f64>()
                .map_err(|_| CoreError::InvalidScheme(format!("method '{s}': bad number")))
        };
        match (name.as_str(), &arg) {
            ("minmax", None) => Ok(CalibrationMethod::MinMax),
            ("entropy", None) | ("kl", None) => Ok(CalibrationMethod::Entropy),
            ("mse", None) => Ok(CalibrationMethod::Mse),
            ("auto", None) => Ok(CalibrationMethod::Auto),
            ("ema", None) => Ok(CalibrationMethod::MovingAverage { momentum: 0.01 }),
            ("ema", Some(_)) => {
                let m = num(&arg)?;
                if !(m > 0.0 && m <= 1.0) {
                    return Err(CoreError::InvalidScheme(format!(
                        "method '{s}': momentum must be in (0, 1]"
                    )));
                }
                Ok(CalibrationMethod::MovingAverage { momentum: m as f32 })
            }
            ("percentile", Some(_)) => {
                let p = num(&arg)?;
                if !(p > 0.0 && p <= 100.0) {
                    return Err(CoreError::InvalidScheme(format!(
                        "method '{s}': percentile must be in (0, 100]"
                    )));
                }
                Ok(CalibrationMethod::Percentile(p))
            }
            _ => Err(CoreError::InvalidScheme(format!(
                "unknown calibration method '{s}' (minmax, ema[=M], percentile=P, entropy, mse, auto)"
            ))),
        }
    }
}

impl CalibrationMethod {
    /// A boxed observer of this method for `tensor` at `granularity`.
    pub fn observer(self, tensor: &str, granularity: Granularity) -> Box<dyn Observer> {
        match self {
            CalibrationMethod::MinMax => Box::new(MinMaxObserver::new(tensor, granularity)),
            CalibrationMethod::MovingAverage { momentum } => Box::new(
                MovingAverageMinMaxObserver::new(tensor, granularity, momentum),
            ),
            CalibrationMethod::Percentile(p) => Box::new(HistogramObserver::new(
                tensor,
                granularity,
                HistogramMethod::Percentile(p),
            )),
            CalibrationMethod::Entropy => Box::new(HistogramObserver::new(
                tensor,
                granularity,
                HistogramMethod::Entropy,
            )),
            CalibrationMethod::Mse => Box::new(HistogramObserver::new(
                tensor,
                granularity,
                HistogramMethod::Mse,
            )),
            CalibrationMethod::Auto => Box::new(HistogramObserver::new(
                tensor,
                granularity,
                HistogramMethod::Auto,
            )),
        }
    }
}

fn check_slots(tensor: &str, have: usize, got: usize) -> Result<()> {
    if have != 0 && have != got {
        return Err(CoreError::ShapeMismatch {
            what: format!("observer for tensor '{tensor}': number of parameter slots"),
            expected: have.to_string(),
            got: got.to_string(),
        });
    }
    Ok(())
}

fn empty(tensor: &str) -> CoreError {
    CoreError::NoData {
        tensor: tensor.to_string(),
    }
}

fn downcast<'a, T: 'static>(me: &str, other: &'a dyn Observer) -> Result<&'a T> {
    other.as_any().downcast_ref::<T>().ok_or_else(|| {
        CoreError::InvalidScheme(format!(
            "cannot merge observers of different kinds for tensor '{me}'"
        ))
    })
}

/// Running minimum and maximum per slot. Merge is exact.
#[derive(Debug, Clone, PartialEq)]
pub struct MinMaxObserver {
    tensor: String,
    granularity: Granularity,
    ranges: Vec<(f32, f32)>,
}

impl MinMaxObserver {
    /// A new observer.
    pub fn new(tensor: &str, granularity: Granularity) -> Self {
        MinMaxObserver {
            tensor: tensor.to_string(),
            granularity,
            ranges: Vec::new(),
        }
    }
}

impl Observer for MinMaxObserver {
    fn tensor(&self) -> &str {
        &self.tensor
    }
    fn granularity(&self) -> Granularity {
        self.granularity
    }
    fn observe(&mut self, x: &[f32], shape: &[usize]) -> Result<()> {
        let r = minmax_per_slot(&self.tensor, x, shape, self.granularity)?;
        check_slots(&self.tensor, self.ranges.len(), r.len())?;
        if x.is_empty() {
            return Ok(());
        }
        if self.ranges.is_empty() {
            self.ranges = r;
        } else {
            for (a, b) in self.ranges.iter_mut().zip(r) {
                *a = (a.0.min(b.0), a.1.max(b.1));
            }
        }
        Ok(())
    }
    fn merge(&mut self, other: &dyn Observer) -> Result<()> {
        let o: &MinMaxObserver = downcast(&self.tensor, other)?;
        if o.ranges.is_empty() {
            return Ok(());
        }
        check_slots(&self.tensor, self.ranges.len(), o.ranges.len())?;
        if self.ranges.is_empty() {
            self.ranges = o.ranges.clone();
        } else {
            for (a, b) in self.ranges.iter_mut().zip(&o.ranges) {
                *a = (a.0.min(b.0), a.1.max(b.1));
            }
        }
        Ok(())
    }
    fn ranges(&self, _scheme: &QuantScheme) -> Result<Vec<(f32, f32)>> {
        if self.ranges.is_empty() {
            return Err(empty(&self.tensor));
        }
        Ok(self.ranges.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Exponential moving average of each batch's min and max:
/// `r ← (1 − momentum)·r + momentum·r_batch`, initialised with the first batch
/// (PyTorch's `MovingAverageMinMaxObserver`, `averaging_constant = momentum`).
///
/// Merge: an EMA depends on batch order, so no merge can equal a sequential pass. quantkit
/// merges by averaging the two estimates weighted by their batch counts — exact when both
/// sides saw identical statistics, an approximation otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct MovingAverageMinMaxObserver {
    tensor: String,
    granularity: Granularity,
    momentum: f32,
    batches: u64,
    ranges: Vec<(f32, f32)>,
}

impl MovingAverageMinMaxObserver {
    /// A new observer; `momentum` is clamped into `(0, 1]` (values ≤ 0 become 0.01).
    pub fn new(tensor: &str, granularity: Granularity, momentum: f32) -> Self {
        let momentum = if momentum > 0.0 && momentum <= 1.0 {
            momentum
        } else if momentum > 1.0 {
            1.0
        } else {
            0.01
        };
        MovingAverageMinMaxObserver {
            tensor: tensor.to_string(),
            granularity,
            momentum,
            batches: 0,
            ranges: Vec::new(),
        }
    }
}

impl Observer for MovingAverageMinMaxObserver {
    fn tensor(&self) -> &str {
        &self.tensor
    }
    fn granularity(&self) -> Granularity {
        self.granularity
    }
    fn observe(&mut self, x: &[f32], shape: &[usize]) -> Result<()> {
        let r = minmax_per_slot(&self.tensor, x, shape, self.granularity)?;
        check_slots(&self.tensor, self.ranges.len(), r.len())?;
        if x.is_empty() {
            return Ok(());
        }
        if self.ranges.is_empty() {
            self.ranges = r;
        } else {
            let m = f64::from(self.momentum);
            for (a, b) in self.ranges.iter_mut().zip(r) {
                a.0 = ((1.0 - m) * f64::from(a.0) + m * f64::from(b.0)) as f32;
                a.1 = ((1.0 - m) * f64::from(a.1) + m * f64::from(b.1)) as f32;
            }
        }
        self.batches += 1;
        Ok(())
    }
    fn merge(&mut self, other: &dyn Observer) -> Result<()> {
        let o: &MovingAverageMinMaxObserver = downcast(&self.tensor, other)?;
        if o.batches == 0 {
            return Ok(());
        }
        check_slots(&self.tensor, self.ranges.len(), o.ranges.len())?;
        if self.batches == 0 {
            self.ranges = o.ranges.clone();
        } else {
            let (wa, wb) = (self.batches as f64, o.batches as f64);
            for (a, b) in self.ranges.iter_mut().zip(&o.ranges) {
                a.0 = ((wa * f64::from(a.0) + wb * f64::from(b.0)) / (wa + wb)) as f32;
                a.1 = ((wa * f64::from(a.1) + wb * f64::from(b.1)) / (wa + wb)) as f32;
            }
        }
        self.batches += o.batches;
        Ok(())
    }
    fn ranges(&self, _scheme: &QuantScheme) -> Result<Vec<(f32, f32)>> {
        if self.ranges.is_empty() {
            return Err(empty(&self.tensor));
        }
        Ok(self.ranges.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// How a [`HistogramObserver`] turns its histogram into a clip range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HistogramMethod {
    /// Keep the central `P` percent: `(quantile(1 − P/100), quantile(P/100))` for affine
    /// schemes; for symmetric schemes `±quantile_|x|(P/100)`.
    Percentile(f64),
    /// TensorRT entropy calibration (minimum KL divergence), see `methods::entropy_threshold`.
    Entropy,
    /// The clip range minimising the quantization MSE over the histogram.
    Mse,
    /// The candidate of [`HistogramObserver::candidates`] with the smallest quantization
    /// MSE over the histogram.
    Auto,
}

/// A named candidate range of `auto`: `(method, (lo, hi))`.
pub type Candidate = (&'static str, (f32, f32));

/// The percentile `auto` tries (the issue-18 measurement's best percentile on the zoo).
pub const AUTO_PERCENTILE: f64 = 99.99;

/// Histogram-based observer: one [`Histogram`] per slot (bounded memory: `bins` counters
/// per slot), exact merge.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramObserver {
    tensor: String,
    granularity: Granularity,
    method: HistogramMethod,
    bins: usize,
    hists: Vec<Histogram>,
}

impl HistogramObserver {
    /// A new observer with [`DEFAULT_BINS`] bins per slot.
    pub fn new(tensor: &str, granularity: Granularity, method: HistogramMethod) -> Self {
        Self::with_bins(tensor, granularity, method, DEFAULT_BINS)
    }

    /// A new observer with `bins` bins per slot (at least 16).
    pub fn with_bins(
        tensor: &str,
        granularity: Granularity,
        method: HistogramMethod,
        bins: usize,
    ) -> Self {
        HistogramObserver {
            tensor: tensor.to_string(),
            granularity,
            method,
            bins: bins.max(16),
            hists: Vec::new(),
        }
    }

    /// The per-slot histograms.
    pub fn histograms(&self) -> &[Histogram] {
        &self.hists
    }

    /// The candidate ranges `auto` chooses from, per slot: `minmax` (the observed range),
    /// `percentile` ([`AUTO_PERCENTILE`]), `mse` and `entropy`, in that order, each under
    /// `scheme` as its own method would give it.
    pub fn candidates(&self, scheme: &QuantScheme) -> Result<Vec<Vec<Candidate>>> {
        if self.hists.is_empty() {
            return Err(empty(&self.tensor));
        }
        self.hists
            .iter()
            .map(|h| methods::candidates(h, scheme))
            .collect()
    }
}

impl Observer for HistogramObserver {
    fn tensor(&self) -> &str {
        &self.tensor
    }
    fn granularity(&self) -> Granularity {
        self.granularity
    }
    fn observe(&mut self, x: &[f32], shape: &[usize]) -> Result<()> {
        let map = SlotMap::new(shape, self.granularity)?;
        if map.len() != x.len() {
            return Err(CoreError::ShapeMismatch {
                what: format!(
                    "tensor '{}' with shape {shape:?}: number of elements",
                    self.tensor
                ),
                expected: map.len().to_string(),
                got: x.len().to_string(),
            });
        }
        check_slots(&self.tensor, self.hists.len(), map.slots())?;
        check_finite(&self.tensor, x)?;
        if self.hists.is_empty() {
            self.hists = vec![Histogram::new(self.bins); map.slots()];
        }
        if let Granularity::PerTensor = self.granularity {
            self.hists[0].add(x.iter().copied());
        } else {
            // Gather each slot's values so each histogram re-grids at most once per batch.
            let mut per: Vec<Vec<f32>> = vec![Vec::new(); map.slots()];
            map.for_each(|i, s| per[s].push(x[i]));
            for (h, v) in self.hists.iter_mut().zip(per) {
                h.add(v.into_iter());
            }
        }
        Ok(())
    }
    fn merge(&mut self, other: &dyn Observer) -> Result<()> {
        let o: &HistogramObserver = downcast(&self.tensor, other)?;
        if o.hists.is_empty() {
            return Ok(());
        }
        if o.bins != self.bins {
            return Err(CoreError::InvalidScheme(format!(
                "tensor '{}': cannot merge histograms with {} and {} bins",
                self.tensor, self.bins, o.bins
            )));
        }
        check_slots(&self.tensor, self.hists.len(), o.hists.len())?;
        if self.hists.is_empty() {
            self.hists = o.hists.clone();
        } else {
            for (a, b) in self.hists.iter_mut().zip(&o.hists) {
                a.merge(b)?;
            }
        }
        Ok(())
    }
    fn ranges(&self, scheme: &QuantScheme) -> Result<Vec<(f32, f32)>> {
        if self.hists.is_empty() {
            return Err(empty(&self.tensor));
        }
        self.hists
            .iter()
            .map(|h| methods::clip_range(h, self.method, scheme))
            .collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
