//! Calibration: runs the float executor over calibration batches and feeds every tensor
//! that will be quantized to its observer. Memory is bounded by the observers (min/max or
//! histograms), never by the amount of data.

use crate::error::{graph, PtqError, Result};
use crate::feed::run_tensors;
use quantkit_core::{CalibrationMethod, Granularity, Observer};
use quantkit_data::feed::Layout;
use quantkit_data::npy::NpyData;
use quantkit_data::{BatchOptions, DataSource};
use quantkit_graph::{execute_with, DType, Dim, Graph, Tensor};
use std::collections::{HashMap, HashSet};

/// Observers and facts gathered by [`calibrate`].
#[derive(Debug)]
pub struct Calibration {
    /// One per-tensor observer per observed float tensor.
    pub observers: HashMap<String, Box<dyn Observer>>,
    /// Rank of every value seen (used by the opset upgrade).
    pub ranks: HashMap<String, usize>,
    /// Tensors that were asked for but turned out not to be float.
    pub non_float: HashSet<String>,
    /// Samples run.
    pub samples: usize,
    /// Batches run.
    pub batches: usize,
    /// The first feeds run, up to [`crate::auto::AUTO_SAMPLES`] samples, kept for
    /// `--method auto` (empty for the other methods).
    pub kept: Vec<Vec<(String, Tensor)>>,
}

/// Options of [`calibrate`].
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// Observer kind.
    pub method: CalibrationMethod,
    /// Use at most this many samples (arrays for an `.npz` of batches).
    pub limit: Option<usize>,
    /// Samples per executor call.
    pub batch_size: usize,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            method: CalibrationMethod::MinMax,
            limit: None,
            batch_size: 32,
        }
    }
}

/// The single float input that a single-tensor source (`.npy`, IDX, image folder, `.npz` of
/// batches) feeds; models with several or non-float inputs take an `.npz` of arrays named
/// after their inputs instead ([`DataSource::Named`]).
pub fn calibration_input(g: &Graph) -> Result<(String, Option<Vec<Dim>>)> {
    let real: Vec<_> = g
        .inputs
        .iter()
        .filter(|i| !g.initializers.contains_key(&i.name))
        .collect();
    if real.len() != 1 {
        return Err(PtqError::UnsupportedInput {
            input: real
                .iter()
                .map(|i| i.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
            reason: format!(
                "a single-tensor source (.npy, IDX, image folder, .npz of batches) feeds exactly \
                 one model input, the model has {}: give an .npz with one array per input, \
                 named after it (see docs/data.md)",
                real.len()
            ),
        });
    }
    let vi = real[0];
    if let Some(dt) = vi.dtype {
        if dt != DType::F32 {
            return Err(PtqError::UnsupportedInput {
                input: vi.name.clone(),
                reason: format!(
                    "type {dt}: a single-tensor source is read as float32; give an .npz with \
                     an array named `{}` of that type (see docs/data.md)",
                    vi.name
                ),
            });
        }
    }
    Ok((vi.name.clone(), vi.shape.clone()))
}

/// Checks a batch against the declared input shape; returns the chunk size to run (the
/// batch is split when the model fixes its batch dimension to a divisor of it).
fn fit_batch(input: &str, declared: &Option<Vec<Dim>>, shape: &[usize]) -> Result<usize> {
    let Some(d) = declared else {
        return Ok(shape[0].max(1));
    };
    let bad = || PtqError::InputMismatch {
        input: input.to_string(),
        expected: format!(
            "float32[{}]",
            d.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        got: shape.to_vec(),
    };
    if d.len() != shape.len() {
        return Err(bad());
    }
    for (k, (dim, &n)) in d.iter().zip(shape).enumerate().skip(1) {
        let _ = k;
        if let Dim::Known(m) = dim {
            if *m != n {
                return Err(bad());
            }
        }
    }
    match d[0] {
        Dim::Known(m) if m != shape[0] => {
            if m > 0 && shape[0].is_multiple_of(m) {
                Ok(m)
            } else {
                Err(bad())
            }
        }
        _ => Ok(shape[0].max(1)),
    }
}

/// Runs the float executor over `data` and observes every tensor of `tensors` (per-tensor
/// ranges, observer from `opts.method`). `progress(samples_done, total_estimate)` is called
/// after each batch. Errors name the input (wrong shape, NaN) or the node that failed.
pub fn calibrate(
    g: &Graph,
    data: &mut DataSource,
    tensors: &HashSet<String>,
    opts: &CalibrateOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Calibration> {
    let mut state = Observing {
        tensors,
        opts,
        observers: HashMap::new(),
        ranks: HashMap::new(),
        non_float: HashSet::new(),
        kept: Vec::new(),
        kept_samples: 0,
    };
    if let DataSource::Named(feeds) = data {
        return calibrate_named(g, feeds, state, progress);
    }
    let (input, declared) = calibration_input(g)?;
    let total = opts.limit.map_or(data.len(), |l| l.min(data.len()));
    let bopts = BatchOptions {
        batch_size: opts.batch_size.max(1),
        limit: opts.limit,
        ..BatchOptions::default()
    };
    let arrays = matches!(data, DataSource::Arrays(_));
    let mut samples = 0;
    let mut batches = 0;
    for (bi, batch) in data.batches(&bopts)?.enumerate() {
        let batch = batch?;
        if batch.shape.is_empty() {
            return Err(PtqError::InputMismatch {
                input: input.clone(),
                expected: "a tensor with a batch dimension".into(),
                got: batch.shape.clone(),
            });
        }
        let per: usize = batch.shape[1..].iter().product();
        if let Some(pos) = batch.data.iter().position(|v| !v.is_finite()) {
            return Err(PtqError::NonFiniteInput {
                input: input.clone(),
                batch: bi,
                sample: pos / per.max(1),
                value: batch.data[pos],
            });
        }
        let chunk = fit_batch(&input, &declared, &batch.shape)?;
        let n = batch.shape[0];
        let mut start = 0;
        while start < n {
            let m = chunk.min(n - start);
            let mut shape = batch.shape.clone();
            shape[0] = m;
            let t = Tensor::from_f32(&shape, batch.data[start * per..(start + m) * per].to_vec());
            let what = format!("running the float model on calibration batch {bi}");
            state.run(g, vec![(input.clone(), t)], &what)?;
            start += m;
        }
        samples += n;
        batches += 1;
        progress(if arrays { batches } else { samples }, total);
    }
    state.finish(samples, batches)
}

/// The observers being filled.
struct Observing<'a> {
    tensors: &'a HashSet<String>,
    opts: &'a CalibrateOptions,
    observers: HashMap<String, Box<dyn Observer>>,
    ranks: HashMap<String, usize>,
    non_float: HashSet<String>,
    kept: Vec<Vec<(String, Tensor)>>,
    kept_samples: usize,
}

impl Observing<'_> {
    /// Runs the float executor once and feeds every wanted float value to its observer.
    fn run(&mut self, g: &Graph, inputs: Vec<(String, Tensor)>, what: &str) -> Result<()> {
        if self.opts.method == CalibrationMethod::Auto
            && self.kept_samples < crate::auto::AUTO_SAMPLES
        {
            self.kept_samples += inputs
                .first()
                .map_or(1, |(_, t)| t.shape.first().copied().unwrap_or(1));
            self.kept.push(inputs.clone());
        }
        let mut err: Option<PtqError> = None;
        let (tensors, opts) = (self.tensors, self.opts);
        let (observers, ranks, non_float) =
            (&mut self.observers, &mut self.ranks, &mut self.non_float);
        execute_with(g, inputs, |name, t| {
            ranks.insert(name.to_string(), t.rank());
            if err.is_some() || !tensors.contains(name) {
                return;
            }
            let Some(x) = t.as_f32() else {
                non_float.insert(name.to_string());
                return;
            };
            let obs = observers
                .entry(name.to_string())
                .or_insert_with(|| opts.method.observer(name, Granularity::PerTensor));
            if let Err(e) = obs.observe(x, &t.shape) {
                err = Some(PtqError::Core {
                    context: format!("calibrating tensor `{name}`"),
                    source: Box::new(e),
                });
            }
        })
        .map_err(graph(what))?;
        err.map_or(Ok(()), Err)
    }

    fn finish(self, samples: usize, batches: usize) -> Result<Calibration> {
        if samples == 0 {
            return Err(PtqError::EmptyCalibration);
        }
        Ok(Calibration {
            observers: self.observers,
            ranks: self.ranks,
            non_float: self.non_float,
            samples,
            batches,
            kept: self.kept,
        })
    }
}

/// Calibration on an `.npz` whose arrays feed every input by name: one executor call per
/// run (`batch_size` samples of the stacked arrays, or one `NAME__K` feed); float inputs
/// are checked for NaN/±Inf, integer inputs are fed as they are.
fn calibrate_named(
    g: &Graph,
    feeds: &mut quantkit_data::NamedFeeds,
    mut state: Observing<'_>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Calibration> {
    let per_run = matches!(feeds.layout(), Layout::PerRun { .. });
    let bs = state.opts.batch_size.max(1);
    let limit = state.opts.limit;
    let total = if per_run {
        feeds.run_count(bs, limit)?
    } else {
        limit.map_or(feeds.len(), |l| l.min(feeds.len()))
    };
    let (mut samples, mut batches) = (0, 0);
    for (bi, run) in feeds.runs(bs, limit)?.enumerate() {
        let run = run?;
        let n = run.samples;
        for (name, a) in &run.arrays {
            if let NpyData::F32(v) = &a.data {
                if let Some(pos) = v.iter().position(|x| !x.is_finite()) {
                    let per = v.len() / n.max(1);
                    return Err(PtqError::NonFiniteInput {
                        input: name.clone(),
                        batch: bi,
                        sample: pos / per.max(1),
                        value: v[pos],
                    });
                }
            }
        }
        let what = format!("running the float model on calibration run {bi}");
        state.run(g, run_tensors(run)?, &what)?;
        samples += n;
        batches += 1;
        progress(if per_run { batches } else { samples }, total);
    }
    state.finish(samples, batches)
}
