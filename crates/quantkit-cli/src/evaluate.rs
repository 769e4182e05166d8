//! Evaluating a model on a data set: `quantkit_data` batches in, a [`Runner`] in the middle,
//! top-1 accuracy or reconstruction MSE out, optionally against a float reference.
//!
//! This lives in the CLI, not in a library crate, because it owns no numerics: batches come
//! from `quantkit-data`, execution from `quantkit-graph` or `quantkit-engine`, the
//! comparison metrics from `quantkit_core::ErrorMetrics`. The CLI is the one crate that
//! depends on every executor, so it is where a runner is picked. Should a library need
//! evaluation (QAT validation, a report crate), this module moves there with typed errors.

use anyhow::{bail, ensure, Context, Result};
use quantkit_core::ErrorMetrics;
use quantkit_data::feed::Layout;
use quantkit_data::{BatchOptions, DataSource};
use quantkit_graph::{load_model, DType, Dim, Graph, Tensor, ValueInfo};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Something that runs a model on one batch and returns its first output.
///
/// The integer engine plugs in by implementing this for its compiled plan and adding a
/// [`Backend`] variant that loads it; nothing else in `eval` changes.
pub trait Runner: Send + Sync {
    /// The model file, for messages.
    fn path(&self) -> &Path;
    /// The model's first input (the one a single-tensor source feeds).
    fn input(&self) -> &ValueInfo;
    /// The name of the output that is scored (the model's first output).
    fn output_name(&self) -> &str;
    /// Runs one batch: every input by name.
    fn run(&self, inputs: Vec<(String, Tensor)>) -> Result<Tensor>;
}

/// Which executor runs a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// `quantkit_graph::execute`: float operators, and QDQ graphs with exact
    /// Quantize/DequantizeLinear (integer arithmetic simulated in float).
    #[default]
    Float,
    /// `quantkit_engine`: the QDQ graph compiled into integer kernel steps (float islands
    /// for what has no integer pattern).
    Engine,
}

impl Backend {
    /// Loads `path` for this backend.
    pub fn load(self, path: &Path) -> Result<Box<dyn Runner>> {
        let graph =
            load_model(path).with_context(|| format!("loading the model {}", path.display()))?;
        self.wrap(path, graph)
    }

    /// Wraps an already loaded graph; `path` names it in messages.
    pub fn wrap(self, path: &Path, graph: Graph) -> Result<Box<dyn Runner>> {
        match self {
            Backend::Float => Ok(Box::new(FloatExecutor::new(path, graph)?)),
            Backend::Engine => Ok(Box::new(EngineRunner::new(path, &graph)?)),
        }
    }

    /// The default for a model: the engine when it is quantized — Q/DQ nodes (QDQ, and the
    /// edges of a QOperator model) or QOperator nodes (`QLinearConv`, `QLinearMatMul`,
    /// `QGemm`, also when the model takes and returns codes) or dynamic quantization
    /// (`DynamicQuantizeLinear`, `ConvInteger`, `MatMulInteger`) — the float executor
    /// otherwise.
    pub fn for_graph(graph: &Graph) -> Backend {
        let quantized = graph.nodes.iter().any(|n| n.facts().quantized);
        if quantized {
            Backend::Engine
        } else {
            Backend::Float
        }
    }

    /// The backend that runs quantized models: the integer engine.
    pub fn int8() -> Backend {
        Backend::Engine
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Float => "float executor",
            Backend::Engine => "integer engine",
        }
    }
}

/// Checks that a graph has an input to feed and an output to score.
fn check_io(path: &Path, graph: &Graph) -> Result<()> {
    ensure!(
        !graph.inputs.is_empty(),
        "{}: the model has no inputs",
        path.display()
    );
    ensure!(
        !graph.outputs.is_empty(),
        "{}: the model has no outputs",
        path.display()
    );
    Ok(())
}

/// The integer engine: a plan compiled once from the QDQ graph.
pub struct EngineRunner {
    path: PathBuf,
    input: ValueInfo,
    output: String,
    plan: quantkit_engine::Plan,
}

impl EngineRunner {
    /// Compiles `graph` with the default options (float-scale requantization).
    pub fn new(path: &Path, graph: &Graph) -> Result<Self> {
        Self::with_options(path, graph, &quantkit_engine::EngineOptions::default())
    }

    /// Compiles `graph` with `options`.
    pub fn with_options(
        path: &Path,
        graph: &Graph,
        options: &quantkit_engine::EngineOptions,
    ) -> Result<Self> {
        check_io(path, graph)?;
        let plan = quantkit_engine::compile(graph, options)
            .with_context(|| format!("compiling {} for the integer engine", path.display()))?;
        Ok(EngineRunner {
            path: path.to_path_buf(),
            input: graph.inputs[0].clone(),
            output: graph.outputs[0].name.clone(),
            plan,
        })
    }

    /// The compiled plan (its report says which nodes run as integer kernels).
    pub fn plan(&self) -> &quantkit_engine::Plan {
        &self.plan
    }
}

impl Runner for EngineRunner {
    fn path(&self) -> &Path {
        &self.path
    }
    fn input(&self) -> &ValueInfo {
        &self.input
    }
    fn output_name(&self) -> &str {
        &self.output
    }
    fn run(&self, inputs: Vec<(String, Tensor)>) -> Result<Tensor> {
        let outputs = self
            .plan
            .run(inputs)
            .with_context(|| format!("running {} on the integer engine", self.path.display()))?;
        outputs
            .into_iter()
            .find(|(n, _)| *n == self.output)
            .map(|(_, t)| t)
            .with_context(|| {
                format!(
                    "{}: output `{}` was not produced",
                    self.path.display(),
                    self.output
                )
            })
    }
}

/// The graph crate's float executor.
pub struct FloatExecutor {
    path: PathBuf,
    graph: Graph,
}

impl FloatExecutor {
    /// Wraps an already loaded graph; `path` names it in messages.
    pub fn new(path: &Path, graph: Graph) -> Result<Self> {
        check_io(path, &graph)?;
        Ok(FloatExecutor {
            path: path.to_path_buf(),
            graph,
        })
    }
}

impl Runner for FloatExecutor {
    fn path(&self) -> &Path {
        &self.path
    }
    fn input(&self) -> &ValueInfo {
        &self.graph.inputs[0]
    }
    fn output_name(&self) -> &str {
        &self.graph.outputs[0].name
    }
    fn run(&self, inputs: Vec<(String, Tensor)>) -> Result<Tensor> {
        let outputs = quantkit_graph::execute(&self.graph, inputs)
            .with_context(|| format!("running {}", self.path.display()))?;
        let want = self.output_name();
        outputs
            .into_iter()
            .find(|(n, _)| n == want)
            .map(|(_, t)| t)
            .with_context(|| format!("{}: output `{want}` was not produced", self.path.display()))
    }
}

/// What is scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Top-1 accuracy (fraction correct) of `[N, C]` logits against the labels.
    Accuracy,
    /// Mean squared error between an output shaped like the input and the input.
    Mse,
}

impl Metric {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Accuracy => "accuracy",
            Metric::Mse => "mse",
        }
    }
}

/// How much of the data to evaluate and in what batches.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Samples per batch (ignored for an `.npz` of arrays, whose arrays are the batches,
    /// and replaced by the model's batch size when its input fixes one).
    pub batch: usize,
    /// Evaluate only the first N samples (runs, for per-run `NAME__K` arrays).
    pub limit: Option<usize>,
    /// Labels for an `.npz` of named arrays (one per stacked sample).
    pub labels: Option<PathBuf>,
}

/// The reference model's numbers on the same batches.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// The reference's own metric value.
    pub value: f64,
    /// Fraction of samples where both models' top-1 classes agree (classifiers only).
    pub agreement: Option<f64>,
    /// Model outputs against reference outputs (the reference is the signal).
    pub error: ErrorMetrics,
    /// Time spent in the reference runner.
    pub seconds: f64,
}

/// The result of [`evaluate`].
#[derive(Clone, Debug)]
pub struct Outcome {
    /// What `value` measures.
    pub metric: Metric,
    /// Accuracy as a fraction, or the MSE.
    pub value: f64,
    /// Samples evaluated.
    pub samples: usize,
    /// Samples scored correct (accuracy only).
    pub correct: Option<usize>,
    /// Time spent in the model's runner.
    pub seconds: f64,
    /// Present when a reference was given.
    pub reference: Option<Comparison>,
}

/// Running sums of one model's metric.
#[derive(Default)]
struct Score {
    correct: usize,
    sq_err: f64,
    values: usize,
    seconds: f64,
    /// Keep predictions and outputs for a comparison with a reference.
    keep: bool,
    /// Top-1 classes (kept only when a comparison needs them).
    predictions: Vec<usize>,
    /// All outputs (kept only when a comparison needs them: `ErrorMetrics` works on whole
    /// tensors, and cosine/SQNR of the whole output are not combinations of per-batch values).
    outputs: Vec<f32>,
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best
}

/// Fits the data's batch shape to the model input or says precisely why not.
fn check_fits(runner: &dyn Runner, data: &Path, shape: &[usize]) -> Result<()> {
    let vi = runner.input();
    let bad = |why: String| {
        anyhow::anyhow!(
            "data {} gives batches of shape {shape:?} (samples {:?}), which do not fit input `{}` \
             {} of {}: {why}",
            data.display(),
            &shape[1.min(shape.len())..],
            vi.name,
            vi.describe(),
            runner.path().display()
        )
    };
    if let Some(dt) = vi.dtype {
        if dt != DType::F32 {
            return Err(bad(format!(
                "the data is float32, the input is {dt} (evaluation feeds float32 only)"
            )));
        }
    }
    if let Some(dims) = &vi.shape {
        if dims.len() != shape.len() {
            return Err(bad(format!(
                "rank {} against rank {}",
                shape.len(),
                dims.len()
            )));
        }
        for (axis, (d, &n)) in dims.iter().zip(shape).enumerate() {
            if let Dim::Known(k) = d {
                if *k != n {
                    return Err(bad(format!("axis {axis} is {n}, the model expects {k}")));
                }
            }
        }
    }
    Ok(())
}

/// The model's fixed batch size, if its input declares one.
fn fixed_batch(runner: &dyn Runner) -> Option<usize> {
    runner.input().shape.as_ref()?.first()?.known()
}

/// Runs one batch of `n` samples through `runner` and checks the output is float, finite
/// and batched.
fn run_checked(
    runner: &dyn Runner,
    inputs: &[(String, Tensor)],
    n: usize,
    first_sample: usize,
) -> Result<(Tensor, f64)> {
    let t0 = Instant::now();
    let y = runner.run(inputs.to_vec())?;
    let secs = t0.elapsed().as_secs_f64();
    let out = runner.output_name();
    let model = runner.path().display();
    let values = y
        .as_f32()
        .with_context(|| format!("{model}: output `{out}` is {}, not float32", y.dtype))?;
    ensure!(
        y.shape.first() == Some(&n),
        "{model}: output `{out}` has shape {:?}, expected a leading batch dimension of {n}",
        y.shape
    );
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        let per = values.len() / n;
        bail!(
            "{model}: output `{out}` holds {} for sample {} (data index {}); \
             the model or the data is broken",
            values[i],
            i / per.max(1),
            first_sample + i / per.max(1)
        );
    }
    Ok((y, secs))
}

/// Decides the metric from the first batch: an output shaped like the input is a
/// reconstruction, `[N, C]` is logits.
fn metric_for(runner: &dyn Runner, x: &Tensor, y: &Tensor) -> Result<Metric> {
    if y.shape == x.shape {
        Ok(Metric::Mse)
    } else if y.shape.len() == 2 && y.shape[1] > 0 {
        Ok(Metric::Accuracy)
    } else {
        bail!(
            "{}: output `{}` has shape {:?}; evaluation scores [N, C] logits (accuracy) or an \
             output shaped like the input {:?} (reconstruction MSE)",
            runner.path().display(),
            runner.output_name(),
            y.shape,
            x.shape
        )
    }
}

impl Score {
    fn new(keep: bool) -> Self {
        Score {
            keep,
            ..Score::default()
        }
    }

    /// Adds one batch: `x` the input, `y` the checked output of `runner`, `first` the data
    /// index of the batch's first sample.
    fn add(
        &mut self,
        metric: Metric,
        x: &Tensor,
        y: &Tensor,
        labels: Option<&[i64]>,
        runner: &dyn Runner,
        first: usize,
    ) -> Result<()> {
        let out = y.as_f32().context("output checked to be float32")?;
        match metric {
            Metric::Accuracy => {
                let labels = labels.context("labels checked to be present")?;
                let classes = y.shape[1];
                for (i, (row, &label)) in out.chunks(classes).zip(labels).enumerate() {
                    ensure!(
                        (0..classes as i64).contains(&label),
                        "label {label} of data index {} is outside the {classes} classes of \
                         output `{}` of {}",
                        first + i,
                        runner.output_name(),
                        runner.path().display()
                    );
                    let p = argmax(row);
                    self.correct += usize::from(p as i64 == label);
                    if self.keep {
                        self.predictions.push(p);
                    }
                }
            }
            Metric::Mse => {
                let input = x.as_f32().context("input built from float32")?;
                self.sq_err += input
                    .iter()
                    .zip(out)
                    .map(|(&a, &b)| {
                        let d = f64::from(a) - f64::from(b);
                        d * d
                    })
                    .sum::<f64>();
                self.values += out.len();
            }
        }
        if self.keep {
            self.outputs.extend_from_slice(out);
        }
        Ok(())
    }

    fn value(&self, metric: Metric, samples: usize) -> f64 {
        match metric {
            Metric::Accuracy => self.correct as f64 / samples as f64,
            Metric::Mse => self.sq_err / self.values as f64,
        }
    }
}

/// Evaluates `model` (and `reference`, on the same batches) on `data`. `data_path` names
/// the data in messages; `progress(done, total)` is called after every batch with sample
/// counts (`total` is `None` for an `.npz` of arrays, whose sizes are known only when read).
pub fn evaluate(
    model: &dyn Runner,
    reference: Option<&dyn Runner>,
    data: &mut DataSource,
    data_path: &Path,
    options: &EvalOptions,
    mut progress: impl FnMut(usize, Option<usize>),
) -> Result<Outcome> {
    ensure!(
        options.limit != Some(0),
        "--limit 0: there is nothing to evaluate"
    );
    ensure!(
        options.batch > 0,
        "--batch 0: batches need at least one sample"
    );
    let mut batch = options.batch;
    if let Some(k) = fixed_batch(model) {
        batch = k;
    }
    if let Some(r) = reference {
        if let Some(k) = fixed_batch(r) {
            ensure!(
                k == batch,
                "the model {} takes batches of {batch} and the reference {} batches of {k}",
                model.path().display(),
                r.path().display()
            );
            batch = k;
        }
    }
    let total = match data {
        DataSource::Samples(d) => Some(options.limit.map_or(d.len(), |l| l.min(d.len()))),
        DataSource::Arrays(_) => options.limit,
        DataSource::Named(f) => match f.layout() {
            Layout::Stacked { .. } => Some(options.limit.map_or(f.len(), |l| l.min(f.len()))),
            Layout::PerRun { .. } => None,
        },
    };
    let keep = reference.is_some();
    // The metric and the per-sample output shape, fixed by the first batch.
    let mut first: Option<(Metric, Vec<usize>)> = None;
    let mut samples = 0usize;
    let mut mine = Score::new(keep);
    let mut theirs = Score::new(keep);
    let mut agree = 0usize;
    let mut step =
        |inputs: Vec<(String, Tensor)>, labels: Option<&[i64]>, n: usize| -> Result<()> {
            // The tensor an autoencoder reconstructs: the first input.
            let x = &inputs[0].1;
            let (y, secs) = run_checked(model, &inputs, n, samples)?;
            mine.seconds += secs;
            let (m, per_sample) = match &first {
                Some(f) => f.clone(),
                None => {
                    let m = metric_for(model, x, &y)?;
                    let f = (m, y.shape[1..].to_vec());
                    first = Some(f.clone());
                    f
                }
            };
            if m == Metric::Accuracy && labels.is_none() {
                bail!(
                    "{} is a classifier (output `{}` {:?}) but the data {} has no labels; \
                 give them with --labels FILE",
                    model.path().display(),
                    model.output_name(),
                    y.shape,
                    data_path.display()
                );
            }
            let consistent = match m {
                Metric::Mse => y.shape == x.shape,
                Metric::Accuracy => y.shape[1..] == per_sample[..],
            };
            ensure!(
                consistent,
                "{}: output `{}` has shape {:?} for input {:?}, but {:?} per sample on earlier \
             batches",
                model.path().display(),
                model.output_name(),
                y.shape,
                x.shape,
                per_sample
            );
            mine.add(m, x, &y, labels, model, samples)?;
            if let Some(r) = reference {
                let (ry, secs) = run_checked(r, &inputs, n, samples)?;
                theirs.seconds += secs;
                ensure!(
                    ry.shape == y.shape,
                    "the reference {} gives output `{}` of shape {:?}, the model {} gives {:?}",
                    r.path().display(),
                    r.output_name(),
                    ry.shape,
                    model.path().display(),
                    y.shape
                );
                let before = theirs.predictions.len();
                theirs.add(m, x, &ry, labels, r, samples)?;
                agree += mine.predictions[before..]
                    .iter()
                    .zip(&theirs.predictions[before..])
                    .filter(|(a, b)| a == b)
                    .count();
            }
            samples += n;
            progress(samples, total);
            Ok(())
        };
    if let DataSource::Named(feeds) = data {
        // Labels of the stacked layout: one per sample, from --labels.
        let labels = match (&options.labels, feeds.layout()) {
            (None, _) => None,
            (Some(l), Layout::Stacked { .. }) => Some(
                quantkit_data::source::read_labels_npy(l, feeds.len())
                    .with_context(|| format!("reading labels {}", l.display()))?,
            ),
            (Some(l), Layout::PerRun { .. }) => bail!(
                "--labels {}: labels go with arrays that stack every sample (NAME), not \
                 with per-run arrays (NAME__K) whose runs may differ in size",
                l.display()
            ),
        };
        let mut done = 0usize;
        for run in feeds
            .runs(batch, options.limit)
            .with_context(|| format!("reading {}", data_path.display()))?
        {
            let run = run.with_context(|| format!("reading {}", data_path.display()))?;
            let n = run.samples;
            let inputs = quantkit_ptq::run_tensors(run)?;
            let l = labels.as_ref().map(|l| &l[done..done + n]);
            step(inputs, l, n)?;
            done += n;
        }
    } else {
        let opts = BatchOptions {
            batch_size: batch,
            // An `.npz` of arrays counts arrays in `limit`; samples are cut below instead.
            limit: match data {
                DataSource::Samples(_) => options.limit,
                _ => None,
            },
            ..BatchOptions::default()
        };
        let mut seen = 0usize;
        for b in data
            .batches(&opts)
            .with_context(|| format!("reading {}", data_path.display()))?
        {
            let mut b = b.with_context(|| format!("reading {}", data_path.display()))?;
            let Some(&n) = b.shape.first() else {
                bail!("{}: a batch without a batch dimension", data_path.display());
            };
            if let Some(limit) = options.limit {
                if seen >= limit {
                    break;
                }
                if seen + n > limit {
                    let take = limit - seen;
                    b.data.truncate(b.data.len() / n * take);
                    b.shape[0] = take;
                    if let Some(l) = &mut b.labels {
                        l.truncate(take);
                    }
                }
            }
            let n = b.shape[0];
            if n == 0 {
                continue;
            }
            check_fits(model, data_path, &b.shape)?;
            if let Some(r) = reference {
                check_fits(r, data_path, &b.shape)?;
            }
            let x = Tensor::from_f32(&b.shape, std::mem::take(&mut b.data));
            step(
                vec![(model.input().name.clone(), x)],
                b.labels.as_deref(),
                n,
            )?;
            seen += n;
        }
    }
    let (metric, _) = first.with_context(|| format!("{}: no samples", data_path.display()))?;
    let reference = match reference {
        None => None,
        Some(_) => Some(Comparison {
            value: theirs.value(metric, samples),
            agreement: (metric == Metric::Accuracy).then(|| agree as f64 / samples as f64),
            error: ErrorMetrics::compute(&theirs.outputs, &mine.outputs)?,
            seconds: theirs.seconds,
        }),
    };
    Ok(Outcome {
        metric,
        value: mine.value(metric, samples),
        samples,
        correct: (metric == Metric::Accuracy).then_some(mine.correct),
        seconds: mine.seconds,
        reference,
    })
}
