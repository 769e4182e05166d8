//! Automatic mixed precision (issue 18, `quantkit quantize --target METRIC=VALUE`): choose,
//! per layer, int8, int8 activations with 4-bit weights, int16 activations with int8
//! weights (W8A16), int16 activations and weights (W16A16), or float, so that the model output meets a target measured against the
//! float model, with as much of the model in integer as possible.
//!
//! The search ([`search`]) starts from the fully quantized model and uses the sensitivity
//! ranking of [`crate::analyze`] (the share of the output error that goes away when one
//! layer is left in float):
//!
//! 1. **Smallest prefix**: the first `k` layers of the ranking get int16 activations (their
//!    inputs and output), for the smallest `k` that meets the target, found by doubling
//!    `k` and bisecting between the last miss and the first hit (`O(log k)` passes of the
//!    evaluation data); only if int16 everywhere is not enough, the first `k` weighted
//!    layers get 16-bit weights too ([`Precision::Wide16`], the others int16), and only if
//!    that is not enough everywhere either, the first `k` go to float (the others int16
//!    with 16-bit weights), the same way. [`SearchOptions::no_int16`] skips the 16-bit
//!    steps, as before int16 existed. Layers of an `If` branch the calibration data never take
//!    ([`Setup::unreached`]) are not moved: they cannot change what the data measure.
//! 2. **Pruning by groups**: every changed layer is tried back in int8 at once; where the
//!    target no longer holds, each half (the less sensitive first), down to single layers;
//!    a layer that cannot go back to int8 tries the cheaper 16-bit precisions (int16, then
//!    16-bit weights for a float layer). Errors of different layers
//!    interact, so a layer the prefix needed can become unnecessary once others change.
//!
//! With a confidence level ([`Evaluation::with_confidence`]) an agreement target is judged
//! on the one-sided lower confidence bound of the agreement ([`wilson_lower_bound`]), not
//! on the share measured, so the choice keeps a margin that shrinks with more samples.
//! 3. **4-bit weights** (when allowed): the int8 layers with weights, least sensitive first,
//!    get 4-bit weights where the target still holds.
//!
//! A layer is what [`crate::analyze`] calls one: a quantized node with its fused Relu/Clip.
//! Leaving it float removes its weight quantization and its output Q/DQ (as the
//! sensitivity passes do); its input stays quantized when another quantized node reads it.
//!
//! A [`MixedConfig`] is the choice per layer; [`Setup::mixed`] writes its QDQ graph, so a
//! saved choice can be re-applied to the same model (`quantkit quantize --config FILE`).

use crate::analyze::{all_nodes, analyze_with, AnalyzeOptions, Feed, Setup, Stage};
use crate::error::{graph as graph_err, PtqError, Result};
use crate::reuse::{Keep, Outputs, Reuse};
use quantkit_graph::{execute, Graph, Tensor};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The precision of one layer.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Precision {
    /// The setup's weights (int8 unless `--weight-bits` says otherwise) and 8-bit activations.
    #[serde(rename = "int8")]
    Int8,
    /// 4-bit symmetric weights (stored as int8), 8-bit activations.
    #[serde(rename = "int8-w4")]
    Weight4,
    /// The setup's weights (int8) and 16-bit activations on the layer's inputs and output
    /// (symmetric int16, per tensor; ONNX Runtime's W8A16 / `QInt16`): opset-21 Q/DQ.
    /// ONNX Runtime and quantkit's engine run such a layer as DQ → float op → Q.
    #[serde(rename = "int16")]
    Act16,
    /// 16-bit weights (symmetric int16 per output channel) and 16-bit activations
    /// (W16A16): [`Precision::Act16`] with weights 256 times finer, for layers whose int8
    /// weights are what is left of the error (PP-OCRv4's recognizer: int16 activations on
    /// every layer gave 0.9722 of the frames of 500 fresh lines; the same file with its
    /// activation Q/DQ removed, int8 weights only, 0.9722 too — the weights are the whole
    /// gap).
    /// Opset-21 int16 DequantizeLinear on the weights. Only the
    /// weighted layers differ from [`Precision::Act16`].
    #[serde(rename = "int16-w16")]
    Wide16,
    /// Left in float: float weights, no Q/DQ on its output.
    #[serde(rename = "float")]
    Float,
}

impl Precision {
    /// `int8`, `int8-w4`, `int16`, `int16-w16` or `float`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Int8 => "int8",
            Precision::Weight4 => "int8-w4",
            Precision::Act16 => "int16",
            Precision::Wide16 => "int16-w16",
            Precision::Float => "float",
        }
    }
}

/// A choice of precision per layer (by the layer's first node name). Layers not named are
/// int8.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MixedConfig {
    /// Layer → precision.
    pub layers: BTreeMap<String, Precision>,
}

impl MixedConfig {
    /// The precision of `layer` (int8 when not named).
    pub fn get(&self, layer: &str) -> Precision {
        self.layers.get(layer).copied().unwrap_or(Precision::Int8)
    }
    /// Sets the precision of `layer`; int8 removes the entry.
    pub fn set(&mut self, layer: &str, p: Precision) {
        if p == Precision::Int8 {
            self.layers.remove(layer);
        } else {
            self.layers.insert(layer.to_string(), p);
        }
    }
    /// Layers with precision `p`, in name order.
    pub fn with(&self, p: Precision) -> Vec<String> {
        self.layers
            .iter()
            .filter(|(_, &q)| q == p)
            .map(|(l, _)| l.clone())
            .collect()
    }
}

/// What a target measures, against the float model's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Share of samples whose top-1 class (argmax over the last axis of the first output)
    /// agrees with the float model's; the target is a minimum in `[0, 1]`. A first output
    /// with one score per sample (last axis of size 1: a detector's probability or logit)
    /// is read as a yes/no decision instead: score > 0.5 when every float output of the
    /// evaluation data lies in `[0, 1]` (a probability), else score > 0 (a logit).
    Agreement,
    /// Cosine of all outputs (flattened) against the float outputs; a minimum.
    Cosine,
    /// Output SQNR in dB; a minimum.
    Sqnr,
    /// Top-1 accuracy drop against the labels, in percentage points (float accuracy minus
    /// quantized accuracy); a maximum. Needs labels.
    Accuracy,
}

/// A target: `METRIC=VALUE`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Target {
    /// What is measured.
    pub metric: Metric,
    /// The bound (a minimum, or for [`Metric::Accuracy`] the largest drop in points).
    pub value: f64,
}

impl std::str::FromStr for Target {
    type Err = PtqError;
    fn from_str(s: &str) -> Result<Target> {
        let bad = |why: &str| PtqError::InvalidOption(format!("--target {s}: {why}"));
        let (m, v) = s
            .split_once('=')
            .ok_or_else(|| bad("expected METRIC=VALUE, e.g. agreement=0.99"))?;
        let metric = match m.trim().to_ascii_lowercase().as_str() {
            "agreement" | "top1" => Metric::Agreement,
            "cosine" => Metric::Cosine,
            "sqnr" => Metric::Sqnr,
            "accuracy" => Metric::Accuracy,
            other => {
                return Err(bad(&format!(
                    "unknown metric `{other}` (agreement, cosine, sqnr, accuracy)"
                )))
            }
        };
        let value: f64 = v
            .trim()
            .trim_end_matches("dB")
            .trim_end_matches("pt")
            .trim()
            .parse()
            .map_err(|_| bad("the value is not a number"))?;
        if !value.is_finite() {
            return Err(bad("the value must be finite"));
        }
        match metric {
            Metric::Agreement | Metric::Cosine if !(0.0..=1.0).contains(&value) => {
                Err(bad("agreement and cosine are between 0 and 1"))
            }
            Metric::Accuracy if value < 0.0 => Err(bad(
                "accuracy is the largest drop in points allowed, 0 or more",
            )),
            _ => Ok(Target { metric, value }),
        }
    }
}

impl Target {
    /// Whether `m` meets the target. For [`Metric::Agreement`] measured with a confidence
    /// level ([`Evaluation::with_confidence`]), the lower confidence bound must meet it, not
    /// only the share measured.
    pub fn met(&self, m: &Measured) -> bool {
        match self.judged(m) {
            Some(v) if self.metric == Metric::Accuracy => v <= self.value + 1e-9,
            Some(v) => v >= self.value - 1e-12,
            None => false,
        }
    }
    /// The measured value of the target's metric (`None`: not measurable, e.g. no class
    /// axis or no labels).
    pub fn value_of(&self, m: &Measured) -> Option<f64> {
        match self.metric {
            Metric::Agreement => m.agreement,
            Metric::Cosine => Some(m.cosine),
            Metric::Sqnr => Some(m.sqnr_db),
            Metric::Accuracy => m.accuracy_drop_pt,
        }
    }
    /// The value the target is judged on: the lower confidence bound of the agreement when
    /// it was measured with one, else [`Target::value_of`].
    pub fn judged(&self, m: &Measured) -> Option<f64> {
        match (self.metric, m.agreement_lower_bound) {
            (Metric::Agreement, Some(b)) => Some(b),
            _ => self.value_of(m),
        }
    }
    /// How far `m` is from meeting the target, larger is better (for "best found").
    fn score(&self, m: &Measured) -> f64 {
        match (self.metric, self.judged(m)) {
            (_, None) => f64::NEG_INFINITY,
            (Metric::Accuracy, Some(v)) => -v,
            (_, Some(v)) => v,
        }
    }
}

/// The model-output figures of one configuration against the float model.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Measured {
    /// Top-1 agreement with the float model (`null` without a class axis), or agreement of
    /// the yes/no decisions of a single score per sample ([`Metric::Agreement`]).
    pub agreement: Option<f64>,
    /// The one-sided lower confidence bound of the agreement at the evaluation's confidence
    /// level ([`Evaluation::with_confidence`]; Wilson score interval over the samples
    /// counted), `None` without a confidence level or without agreement.
    pub agreement_lower_bound: Option<f64>,
    /// Samples the agreement counts (rows of the class axis: frames of a `[N, T, C]`
    /// output).
    pub agreement_samples: usize,
    /// Effective number of independent samples behind the lower bound. Equal to
    /// `agreement_samples` when each input gives one row; when an input gives several rows
    /// (frames of one text line, pixels of one image) they are not independent, and the
    /// bound is computed over inputs as clusters ([`clustered_lower_bound`]): between the
    /// number of inputs and the number of rows.
    pub agreement_effective_samples: f64,
    /// Inputs the agreement's rows come from (the first output's batch entries; equal to
    /// `agreement_samples` with one row per input).
    pub agreement_inputs: usize,
    /// Cosine of all outputs against the float outputs.
    pub cosine: f64,
    /// Output SQNR in dB (`null` in JSON when exact).
    pub sqnr_db: f64,
    /// Quantized top-1 accuracy against the labels, when given.
    pub accuracy: Option<f64>,
    /// Float top-1 accuracy against the labels, when given.
    pub float_accuracy: Option<f64>,
    /// `100 · (float_accuracy − accuracy)`, percentage points.
    pub accuracy_drop_pt: Option<f64>,
}

/// Evaluation data with the float model's outputs, computed once.
pub struct Evaluation<'a> {
    data: &'a [Feed],
    labels: Option<&'a [i64]>,
    float_outputs: Vec<Vec<(String, Tensor)>>,
    float_correct: Option<usize>,
    /// The decision threshold when the first output holds one score per sample
    /// ([`Metric::Agreement`]).
    threshold: Option<f32>,
    /// Confidence level of the agreement's lower bound (`None`: no bound).
    confidence: Option<f64>,
    /// Rows the agreement counts over all batches (`None` without predictions).
    rows: Option<usize>,
    /// Inputs those rows come from (the clusters of [`clustered_lower_bound`]).
    inputs: Option<usize>,
    /// Batches run by [`Evaluation::measure_until_with`] so far (every configuration
    /// measured on this data counts): what shows that confirmation samples were never run
    /// by the search.
    batches_run: std::sync::atomic::AtomicUsize,
}

/// The standard normal quantile `Φ⁻¹(p)` for `0 < p < 1` (Acklam's rational
/// approximation, relative error below 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// The one-sided lower bound at confidence `level` (e.g. 0.95) of a proportion measured as
/// `k` successes of `n`: the Wilson score bound
/// `(p̂ + z²/2n − z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)`, `z = Φ⁻¹(level)`. It is 0 for
/// `n = 0` and below `k/n` otherwise (`n/(n+z²)` for `k = n`: 561 samples all agreeing
/// give 0.9952 at 95 %).
pub fn wilson_lower_bound(k: usize, n: usize, level: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    wilson_lower_bound_of(k as f64 / n as f64, n as f64, level)
}

/// The lower bound of the agreement of rows that come in clusters, one cluster per input
/// (`per_input[i] = (rows agreeing, rows)`): the Wilson bound of the share of agreeing
/// rows with an *effective* number of samples instead of the row count, and that number.
/// Rows of one input (the frames of one text line) agree or disagree together far more
/// than rows of different inputs, so counting them as independent overstates the evidence
/// (PP-OCRv4's recognizer: 24 frames per line, a bound of 0.990 over 768 frames of 32
/// lines, 0.981 on new lines). The effective number is `p̂(1−p̂)/v`, with `v` the
/// cluster-sampling variance of the ratio estimator,
/// `Σ(aᵢ − p̂·mᵢ)² / (n(n−1)·m̄²)` over the `n` inputs; it is kept between `n` (rows of an
/// input all alike) and the row count (independent rows). When every row agrees (or none
/// does) `v` is 0 and says nothing about the clustering, so the bound takes the
/// conservative `n`. One row per input gives exactly [`wilson_lower_bound`].
pub fn clustered_lower_bound(per_input: &[(usize, usize)], level: f64) -> (f64, f64) {
    let k: usize = per_input.iter().map(|c| c.0).sum();
    let rows: usize = per_input.iter().map(|c| c.1).sum();
    let n = per_input.len();
    if rows == 0 {
        return (0.0, 0.0);
    }
    if per_input.iter().all(|c| c.1 == 1) {
        return (wilson_lower_bound(k, rows, level), rows as f64);
    }
    let p = k as f64 / rows as f64;
    let (lo, hi) = (n as f64, rows as f64);
    let n_eff = if k == 0 || k == rows || n < 2 {
        lo
    } else {
        let mean = hi / lo;
        let ss: f64 = per_input
            .iter()
            .map(|&(a, m)| (a as f64 - p * m as f64).powi(2))
            .sum();
        let v = ss / (lo * (lo - 1.0) * mean * mean);
        if v > 0.0 {
            (p * (1.0 - p) / v).clamp(lo, hi)
        } else {
            hi
        }
    };
    (wilson_lower_bound_of(p, n_eff, level), n_eff)
}

/// [`wilson_lower_bound`] of a share `p` over `n` (possibly effective, fractional) samples.
fn wilson_lower_bound_of(p: f64, n: f64, level: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    let z = normal_quantile(level.clamp(1e-9, 1.0 - 1e-9));
    let z2 = z * z;
    let centre = p + z2 / (2.0 * n);
    let spread = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - spread) / (1.0 + z2 / n)).clamp(0.0, 1.0)
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold(
            (0, f32::NEG_INFINITY),
            |m, (i, &x)| if x > m.1 { (i, x) } else { m },
        )
        .0
}

/// Rows of the first output's class axis (`None` when it has none).
fn rows(t: &Tensor) -> Option<(&[f32], usize)> {
    let c = t.shape.last().copied().unwrap_or(0);
    let v = t.as_f32()?;
    (t.rank() >= 2 && c > 1).then_some((v, c))
}

/// The scores of an output with one score per sample (rank ≥ 2, last axis 1).
fn scores(t: &Tensor) -> Option<&[f32]> {
    let v = t.as_f32()?;
    (t.rank() >= 2 && t.shape.last() == Some(&1)).then_some(v)
}

/// Predicted classes of the first output: argmax rows, or yes/no decisions of single
/// scores at `threshold`.
fn predictions(t: &Tensor, threshold: Option<f32>) -> Option<Vec<usize>> {
    if let Some((v, c)) = rows(t) {
        return Some(v.chunks(c).map(argmax).collect());
    }
    let th = threshold?;
    scores(t).map(|v| v.iter().map(|&x| usize::from(x > th)).collect())
}

impl<'a> Evaluation<'a> {
    /// Runs the float graph of `setup` on `data` (one feed per batch). `labels`, when given,
    /// hold one class per sample of the feeds in order.
    pub fn new(setup: &Setup, data: &'a [Feed], labels: Option<&'a [i64]>) -> Result<Self> {
        if data.is_empty() {
            return Err(PtqError::InvalidOption(
                "the target needs at least one evaluation batch".into(),
            ));
        }
        let mut float_outputs = Vec::with_capacity(data.len());
        for (bi, feed) in data.iter().enumerate() {
            float_outputs.push(
                execute(&setup.float, feed.clone())
                    .map_err(graph_err(format!("running the float model on batch {bi}")))?,
            );
        }
        // One score per sample: a probability when every float score lies in [0, 1].
        let firsts: Vec<&Tensor> = float_outputs
            .iter()
            .filter_map(|o| o.first().map(|(_, t)| t))
            .collect();
        let threshold = firsts.iter().all(|t| scores(t).is_some()).then(|| {
            let probability = firsts
                .iter()
                .filter_map(|t| scores(t))
                .all(|v| v.iter().all(|x| (0.0..=1.0).contains(x)));
            if probability {
                0.5
            } else {
                0.0
            }
        });
        let rows = float_outputs
            .iter()
            .map(|o| {
                o.first()
                    .and_then(|(_, t)| predictions(t, threshold))
                    .map(|p| p.len())
            })
            .sum::<Option<usize>>();
        // As measure_until_with counts clusters: the batch axis splits the rows evenly.
        let inputs = float_outputs
            .iter()
            .map(|o| {
                o.first().and_then(|(_, t)| {
                    let n = predictions(t, threshold)?.len();
                    let b = t.shape.first().copied().unwrap_or(1).max(1);
                    Some(if n % b == 0 { b.min(n) } else { n })
                })
            })
            .sum::<Option<usize>>();
        let mut e = Evaluation {
            data,
            labels,
            float_outputs,
            float_correct: None,
            threshold,
            confidence: None,
            rows,
            inputs,
            batches_run: std::sync::atomic::AtomicUsize::new(0),
        };
        if let Some(l) = labels {
            let mut correct = 0;
            let mut n = 0;
            for outs in &e.float_outputs {
                let Some(pred) = outs.first().and_then(|(_, t)| predictions(t, e.threshold)) else {
                    return Err(PtqError::InvalidOption(
                        "accuracy needs a first output with a class axis (or one score per \
                         sample)"
                            .into(),
                    ));
                };
                for p in pred {
                    let Some(&y) = l.get(n) else {
                        return Err(PtqError::InvalidOption(format!(
                            "{} labels for more evaluation samples",
                            l.len()
                        )));
                    };
                    correct += usize::from(p as i64 == y);
                    n += 1;
                }
            }
            if n != l.len() {
                return Err(PtqError::InvalidOption(format!(
                    "{} labels for {n} evaluation samples",
                    l.len()
                )));
            }
            e.float_correct = Some(correct);
        }
        Ok(e)
    }

    /// Judges agreement targets on the one-sided lower bound of the agreement at confidence
    /// `level` (in `(0, 1)`, e.g. 0.95; [`wilson_lower_bound`]) instead of the share
    /// measured, so a configuration is accepted only when the evaluation samples leave
    /// little doubt that it meets the target on fresh data; `None` (or 0) judges the share.
    /// Errors on a level outside `[0, 1)`.
    pub fn with_confidence(mut self, level: Option<f64>) -> Result<Self> {
        match level {
            Some(c) if !(0.0..1.0).contains(&c) => Err(PtqError::InvalidOption(format!(
                "confidence level {c}: expected 0 (no bound) or a level in (0, 1), e.g. 0.95"
            ))),
            Some(c) if c > 0.0 => {
                self.confidence = Some(c);
                Ok(self)
            }
            _ => {
                self.confidence = None;
                Ok(self)
            }
        }
    }

    /// The confidence level of the agreement's lower bound, if any.
    pub fn confidence(&self) -> Option<f64> {
        self.confidence
    }

    /// Batches of this data run so far, over every configuration measured on it.
    pub fn batches_run(&self) -> usize {
        self.batches_run.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Inputs the agreement's rows come from (`None`: the first output has no class axis
    /// nor one score per sample). With several rows per input these are what the lower
    /// bound counts when every row agrees.
    pub fn inputs(&self) -> Option<usize> {
        self.inputs
    }

    /// Errors when `target` is an agreement and this data cannot show it at confidence
    /// `level` even if every input agrees (the bound of `n` of `n`, `n/(n+z²)`, is below
    /// the target); `what` names the data and `hint` says what to change. The message gives
    /// the number of inputs it takes.
    pub fn check_enough(&self, target: Target, level: f64, what: &str, hint: &str) -> Result<()> {
        let (Metric::Agreement, Some(n)) = (target.metric, self.inputs) else {
            return Ok(());
        };
        enough(n, target, level, what, hint)
    }

    /// Samples in the evaluation data (rows of the first float output's class axis, or
    /// batch entries).
    pub fn samples(&self) -> usize {
        self.data
            .iter()
            .map(|f| {
                f.first()
                    .map_or(0, |(_, t)| t.shape.first().copied().unwrap_or(1))
            })
            .sum()
    }

    /// The decision threshold when the first output holds one score per sample (0.5 for a
    /// probability, 0 for a logit; [`Metric::Agreement`]), `None` otherwise.
    pub fn decision_threshold(&self) -> Option<f32> {
        self.threshold
    }

    /// Measures `graph` (a quantized variant of the setup's float graph) on the data.
    pub fn measure(&self, graph: &Graph) -> Result<Measured> {
        Ok(self.measure_until(graph, None)?.0)
    }

    /// The highest agreement (the lower bound with a confidence level) a graph can still
    /// reach after `disagree` disagreements: every other sample agreeing. With several rows
    /// per input this counts the rows as independent, which can only overstate the clustered
    /// bound ([`clustered_lower_bound`]: a smaller share or fewer effective samples), so it
    /// stays an upper bound and early stopping stays exact.
    pub fn best_agreement_after(&self, disagree: usize) -> Option<f64> {
        let n = self.rows?;
        let k = n.saturating_sub(disagree);
        Some(match self.confidence {
            Some(c) => wilson_lower_bound(k, n, c),
            None => k as f64 / n.max(1) as f64,
        })
    }

    /// [`Evaluation::measure`], stopped early once the agreement (its lower bound with a
    /// confidence level) provably stays below `stop_below` whatever the remaining batches
    /// give: then the figures are of the batches run, and the second value is the number
    /// of agreement samples counted (`None`: every batch ran). The agreement and its bound
    /// of a stopped measurement are at most what the whole data would have given, so a
    /// target above `stop_below` is not met by them either.
    pub fn measure_until(
        &self,
        graph: &Graph,
        stop_below: Option<f64>,
    ) -> Result<(Measured, Option<usize>)> {
        self.measure_until_with(
            &mut |bi, feed| {
                execute(graph, feed.clone()).map_err(graph_err(format!(
                    "running the quantized model on batch {bi}"
                )))
            },
            stop_below,
        )
    }

    /// [`Evaluation::measure_until`] with the outputs of batch `bi` given by `run(bi, feed)`
    /// (e.g. from [`Reuse`], which runs only what a graph changes), called for the batches
    /// in order.
    pub fn measure_until_with(
        &self,
        run: &mut dyn FnMut(usize, &Feed) -> Result<Outputs>,
        stop_below: Option<f64>,
    ) -> Result<(Measured, Option<usize>)> {
        let mut stopped = None;
        let (mut rr, mut aa, mut ra, mut noise) = (0f64, 0f64, 0f64, 0f64);
        let (mut agree, mut nrows, mut correct, mut classes) = (0usize, 0usize, 0usize, true);
        let mut clusters: Vec<(usize, usize)> = Vec::new();
        let mut label_i = 0;
        for (bi, (feed, reference)) in self.data.iter().zip(&self.float_outputs).enumerate() {
            self.batches_run
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let outs = run(bi, feed)?;
            for (k, ((_, r), (_, a))) in reference.iter().zip(&outs).enumerate() {
                let (Some(rv), Some(av)) = (r.as_f32(), a.as_f32()) else {
                    continue;
                };
                for (&x, &y) in rv.iter().zip(av) {
                    let (x, y) = (f64::from(x), f64::from(y));
                    rr += x * x;
                    aa += y * y;
                    ra += x * y;
                    noise += (x - y) * (x - y);
                }
                if k == 0 {
                    match (
                        predictions(r, self.threshold),
                        predictions(a, self.threshold),
                    ) {
                        (Some(px), Some(py)) if px.len() == py.len() => {
                            // Rows per input: the batch axis splits the rows evenly.
                            let b = r.shape.first().copied().unwrap_or(1).max(1);
                            let per = if px.len() % b == 0 {
                                (px.len() / b).max(1)
                            } else {
                                1
                            };
                            for (i, (px, py)) in px.into_iter().zip(py).enumerate() {
                                let hit = usize::from(px == py);
                                if i % per == 0 {
                                    clusters.push((0, 0));
                                }
                                if let Some(c) = clusters.last_mut() {
                                    c.0 += hit;
                                    c.1 += 1;
                                }
                                agree += hit;
                                nrows += 1;
                                if let Some(l) = self.labels {
                                    correct += usize::from(l.get(label_i) == Some(&(py as i64)));
                                    label_i += 1;
                                }
                            }
                        }
                        _ => classes = false,
                    }
                }
            }
            if let (Some(v), true, Some(best)) = (
                stop_below,
                classes,
                self.best_agreement_after(nrows - agree),
            ) {
                if best < v && bi + 1 < self.data.len() {
                    stopped = Some(nrows);
                    break;
                }
            }
        }
        let cosine = if rr == 0.0 && aa == 0.0 {
            1.0
        } else if rr == 0.0 || aa == 0.0 {
            0.0
        } else {
            ra / (rr.sqrt() * aa.sqrt())
        };
        let sqnr_db = match (rr == 0.0, noise == 0.0) {
            (_, true) => f64::INFINITY,
            (true, false) => f64::NEG_INFINITY,
            _ => 10.0 * (rr / noise).log10(),
        };
        let n = if stopped.is_some() {
            label_i
        } else {
            self.labels.map_or(0, <[i64]>::len)
        }
        .max(1) as f64;
        let accuracy = self.labels.map(|_| correct as f64 / n);
        // Of every sample (a stopped measurement's accuracy is of the samples run).
        let float_accuracy = self
            .float_correct
            .map(|c| c as f64 / self.labels.map_or(0, <[i64]>::len).max(1) as f64);
        let has_agreement = classes && nrows > 0;
        let bound = self
            .confidence
            .filter(|_| has_agreement)
            .map(|c| clustered_lower_bound(&clusters, c));
        let m = Measured {
            agreement: has_agreement.then(|| agree as f64 / nrows as f64),
            agreement_lower_bound: bound.map(|b| b.0),
            agreement_samples: if has_agreement { nrows } else { 0 },
            agreement_effective_samples: match (has_agreement, bound) {
                (false, _) => 0.0,
                (true, Some(b)) => b.1,
                (true, None) => nrows as f64,
            },
            agreement_inputs: if has_agreement { clusters.len() } else { 0 },
            cosine,
            sqnr_db,
            accuracy,
            float_accuracy,
            accuracy_drop_pt: accuracy.zip(float_accuracy).map(|(q, f)| 100.0 * (f - q)),
        };
        Ok((m, stopped))
    }
}

impl Setup {
    /// The QDQ graph of `config`: float layers without their weight and output
    /// quantization, 4-bit layers with 4-bit weights, int16 layers with 16-bit Q/DQ on the
    /// activations they read and write, int16-w16 layers as int16 ones
    /// with int16 weights (an activation shared with an int8 layer is int16 for
    /// both: a tensor has one Q/DQ pair; the graph is then at opset 21). Errors on a layer
    /// name the plan does not have, or when every weighted layer is float (nothing left to
    /// quantize).
    pub fn mixed(&self, config: &MixedConfig) -> Result<Graph> {
        let layers = self.layers();
        let known: HashMap<&str, &crate::analyze::Layer> =
            layers.iter().map(|l| (l.nodes[0].as_str(), l)).collect();
        for name in config.layers.keys() {
            if !known.contains_key(name.as_str()) {
                let some: Vec<&str> = layers.iter().take(6).map(|l| l.nodes[0].as_str()).collect();
                return Err(PtqError::InvalidOption(format!(
                    "mixed-precision configuration: `{name}` is not a quantized layer of this model \
                     (layers are named by their first node, e.g. {})",
                    some.join(", ")
                )));
            }
        }
        let mut float_nodes: HashSet<&str> = HashSet::new();
        let mut drop: HashSet<&str> = HashSet::new();
        let mut bits: HashMap<String, u8> = HashMap::new();
        let mut wide: HashSet<&str> = HashSet::new();
        let by_name: HashMap<&str, &quantkit_graph::Node> = all_nodes(&self.float)
            .into_iter()
            .map(|n| (n.name.as_str(), n))
            .collect();
        for (name, p) in &config.layers {
            let l = known[name.as_str()];
            match p {
                Precision::Int8 => {}
                Precision::Act16 | Precision::Wide16 => {
                    for n in l.nodes.iter().filter_map(|n| by_name.get(n.as_str())) {
                        wide.extend(crate::analyze::node_acts(n));
                    }
                    if *p == Precision::Wide16 {
                        for n in &l.nodes {
                            bits.insert(n.clone(), crate::qdq::WEIGHT_BITS_16);
                        }
                    }
                }
                Precision::Float => {
                    float_nodes.extend(l.nodes.iter().map(String::as_str));
                    drop.extend(l.output.iter().map(String::as_str));
                }
                Precision::Weight4 => {
                    for n in &l.nodes {
                        bits.insert(n.clone(), 4.min(self.options.weight_bits));
                    }
                }
            }
        }
        let weighted: Vec<&str> = all_nodes(&self.float)
            .into_iter()
            .filter(|n| n.facts().weight.is_some() && self.plan.quantized.contains(&n.name))
            .map(|n| n.name.as_str())
            .collect();
        if !weighted.is_empty() && weighted.iter().all(|n| float_nodes.contains(n)) {
            return Err(PtqError::NothingToQuantize(
                " (the mixed-precision configuration leaves every weighted layer in float)".into(),
            ));
        }
        self.variant_bits(&|n| !float_nodes.contains(n), &drop, &bits, &wide)
    }

    /// Names of the plan's layers (first node of each) in graph order, with their operators.
    pub fn layer_names(&self) -> Vec<(String, String)> {
        self.layers()
            .into_iter()
            .map(|l| (l.nodes[0].clone(), l.op))
            .collect()
    }
}

/// Evaluation samples the search's sensitivity ranking runs its passes on
/// ([`AnalyzeOptions::sensitivity_samples`]): a ranking needs far fewer than a target's
/// bound, and fewer samples let the passes cover more layers within
/// [`SearchOptions::ranking_budget`].
pub const RANKING_SAMPLES: usize = 32;

/// Options of [`search`].
#[derive(Debug, Clone, Default)]
pub struct SearchOptions {
    /// Try 4-bit weights on the least sensitive int8 layers.
    pub allow_weight4: bool,
    /// Leave at most this many layers in float (`None`: no limit other than keeping at
    /// least one weighted layer in integer).
    pub max_float: Option<usize>,
    /// Time for the sensitivity ranking ([`AnalyzeOptions::budget`]); `None`: every layer.
    pub ranking_budget: Option<std::time::Duration>,
    /// Never try int16 activations ([`Precision::Act16`]) nor 16-bit weights
    /// ([`Precision::Wide16`]): a guilty layer goes straight to float, as before int16 existed (`quantkit quantize --no-int16`).
    pub no_int16: bool,
    /// Memory budget of the values [`Reuse`] keeps, bytes (`None`: `QUANTKIT_REUSE_BYTES`
    /// or [`crate::reuse::DEFAULT_BUDGET`]; 0 runs every configuration in full).
    pub reuse_bytes: Option<usize>,
    /// After the first configuration that meets the target, a step that gives quality back
    /// (pruning, 4-bit weights) is kept only if the output SQNR on the search samples stays
    /// within this many dB of that configuration's, besides meeting the target (`None`:
    /// the target alone). An agreement count saturates when every search sample agrees,
    /// so it cannot tell prune steps apart; the SQNR can (`quantkit quantize
    /// --prune-floor`).
    pub prune_floor_db: Option<f64>,
}

/// One configuration the search measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Step {
    /// What was tried, e.g. `float conv2` or `int8 conv2 (prune)`.
    pub action: String,
    /// The target's metric after it.
    pub value: Option<f64>,
    /// The value the target was judged on: the agreement's lower confidence bound when the
    /// evaluation has a confidence level, else `value`.
    pub judged: Option<f64>,
    /// Whether the target held.
    pub met: bool,
    /// Whether the step was kept.
    pub kept: bool,
    /// Cosine of all outputs against the float outputs, over the samples measured (those
    /// before `stopped_after` when stopped early): a continuous figure beside the
    /// agreement count, which saturates when every sample agrees.
    pub cosine: f64,
    /// Output SQNR in dB over the same samples (`null` in JSON when exact).
    pub sqnr_db: f64,
    /// The target held but the step was not kept: its output SQNR fell below the floor
    /// ([`SearchOptions::prune_floor_db`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub below_floor: bool,
    /// Set when the configuration was stopped early: the agreement samples counted before
    /// it provably could not meet the target (`value` and `judged` are of those samples).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_after: Option<usize>,
    /// Set when the configuration, stopped early, was run again on every sample because
    /// nothing met the target and it could be the best found ([`SearchResult::rerun_in_full`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full: Option<FullRun>,
    /// Wall time of the step: writing its QDQ graph and measuring it.
    pub seconds: f64,
    /// The configuration measured.
    #[serde(skip)]
    pub config: MixedConfig,
}

/// The figures of a configuration stopped early and run again on every sample.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct FullRun {
    /// The target's metric on every sample.
    pub value: Option<f64>,
    /// The value judged on every sample.
    pub judged: Option<f64>,
    /// Wall time of the run again, seconds.
    pub seconds: f64,
}

/// The result of [`search`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct SearchResult {
    /// The target.
    pub target: Target,
    /// Whether the chosen configuration meets it: on the confirmation samples when
    /// [`confirm`] ran (`confirmation`), else on the samples the search chose on (then
    /// optimistic: see `optimistic`).
    pub met: bool,
    /// Whether the search's own choice met the target on the samples it measured.
    pub search_met: bool,
    /// The chosen configuration (when the target is not met: the best one found).
    pub config: MixedConfig,
    /// Its figures on the samples the search measured (the search figure; biased upwards
    /// by the choice among many configurations: see [`confirm`]).
    pub measured: Measured,
    /// The fully quantized (int8) model's figures.
    pub int8: Measured,
    /// Layers in the order the ranking put them (most to blame first), with their
    /// `recovered` share where sensitivity ran.
    pub ranking: Vec<(String, Option<f64>)>,
    /// Every configuration measured, in order.
    pub steps: Vec<Step>,
    /// The configurations that met the target and were taken, in order (the first is the
    /// most conservative: the prefix result, or all int8; the last the search's choice).
    pub accepted: Vec<Accepted>,
    /// Evaluation samples the search measured on.
    pub samples: usize,
    /// The confirmation of the choice on samples the search never measured ([`confirm`]);
    /// `None`: not confirmed, `met` and `measured` are of the samples the search chose on.
    pub confirmation: Option<Confirmation>,
    /// Where the search's time went, in seconds.
    pub seconds: SearchTimes,
    /// Configurations whose run stopped early, once they provably could not meet an
    /// agreement target (nor beat the best found): see [`Step::stopped_after`].
    pub stopped_early: usize,
    /// Of those, the ones run again on every sample because nothing met the target and
    /// each could still be the best found ([`Step::full`]), so the best reported is the
    /// best of full runs.
    pub rerun_in_full: usize,
    /// Nodes run against nodes full runs would have run ([`crate::reuse`]).
    pub reuse: ReuseStats,
}

/// Where [`search`]'s time went, in seconds (wall time).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SearchTimes {
    /// The sensitivity ranking ([`crate::analyze`]).
    pub ranking: f64,
    /// Writing the QDQ graph of each configuration ([`Setup::mixed`]).
    pub build: f64,
    /// Running the configurations on the evaluation data.
    pub measure: f64,
}

/// What [`search`] reports progress on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchStage {
    /// The analysis (passes and sensitivity).
    Ranking(Stage),
    /// Configurations measured so far (`done`, `total` is an upper bound).
    Search,
}

/// A part of [`search`] that begins ([`SearchEvent::Begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Measuring the fully quantized (int8) model on the evaluation samples.
    Int8,
    /// The sensitivity ranking ([`crate::analyze`]): the float and int8 passes over
    /// `batches` batches, then sensitivity passes on up to `layers` layers (as many as fit
    /// in [`SearchOptions::ranking_budget`]) on [`RANKING_SAMPLES`] samples.
    Ranking {
        /// Evaluation batches of the first passes.
        batches: usize,
        /// Layers of the model.
        layers: usize,
    },
    /// The smallest prefix of `candidates` ranked layers that meets the target with
    /// `precision` (doubling, then bisection).
    Prefix {
        /// The precision the prefix gets.
        precision: Precision,
        /// Layers it may take.
        candidates: usize,
    },
    /// Putting the `changed` layers back in int8 where the target allows, by groups.
    Prune {
        /// Layers off int8 before pruning.
        changed: usize,
    },
    /// 4-bit weights on the int8 weighted layers, least sensitive first.
    Weight4,
    /// Nothing met the target: running again on every sample the configurations stopped
    /// early that could still be the best found (at most `stopped`).
    RerunStopped {
        /// Configurations stopped early.
        stopped: usize,
    },
}

/// What [`search`] reports as it goes: `quantkit quantize --target` draws its progress
/// bars, or writes plain lines, from these.
#[derive(Debug, Clone, Copy)]
pub enum SearchEvent<'a> {
    /// A part of the search begins.
    Begin(Phase),
    /// `done` of `total` in a stage: feeds of the ranking's passes, layers of its
    /// sensitivity passes, configurations measured (`total` an upper bound).
    Progress {
        /// The stage.
        stage: SearchStage,
        /// Done so far.
        done: usize,
        /// Of this many.
        total: usize,
    },
    /// A configuration was measured: `step` is [`SearchResult::steps`]`[index]`.
    Measured {
        /// Its index in the steps.
        index: usize,
        /// The step.
        step: &'a Step,
    },
    /// A configuration stopped early was run again on every sample ([`Step::full`]).
    Rerun {
        /// Its index in the steps.
        index: usize,
        /// The step, with [`Step::full`] set.
        step: &'a Step,
    },
}

/// The measuring side of [`search`]: runs configurations, records the steps, keeps the
/// best one found and the times.
struct Runner<'s, 'e, 'p> {
    setup: &'s Setup,
    eval: &'e Evaluation<'e>,
    reuse: Reuse<'e>,
    target: Target,
    steps: Vec<Step>,
    best: (MixedConfig, Measured),
    times: SearchTimes,
    measured: usize,
    /// Configurations stopped early.
    stopped: usize,
    /// Those configurations (by step), with the highest judged agreement each could have
    /// reached.
    unfinished: Vec<(usize, f64)>,
    /// Stopped configurations run again on every sample.
    rerun: usize,
    total_hint: usize,
    progress: &'p mut dyn FnMut(SearchEvent<'_>),
    /// The output SQNR a kept step may not fall below ([`SearchOptions::prune_floor_db`]),
    /// set when pruning begins.
    floor: Option<f64>,
    /// The configurations that met the target, in the order the search accepted them.
    accepted: Vec<Accepted>,
}

impl Runner<'_, '_, '_> {
    /// Records that the configuration of step `step` met the target and was taken.
    /// Whether the last step measured was kept (run with `keep_if_met`: the target held
    /// and the output SQNR stayed above the floor).
    fn last_kept(&self) -> bool {
        self.steps.last().is_some_and(|s| s.kept)
    }

    fn accept(&mut self, step: usize, c: &MixedConfig, m: &Measured) {
        self.accepted.push(Accepted {
            step,
            action: self.steps[step].action.clone(),
            config: c.clone(),
            measured: *m,
        });
    }

    /// Measures `c`, records the step (`kept` when `keep_if_met` is false, else whether
    /// the target held) and updates the best configuration found.
    fn run(&mut self, c: &MixedConfig, action: String, keep_if_met: bool) -> Result<Measured> {
        self.measured += 1;
        (self.progress)(SearchEvent::Progress {
            stage: SearchStage::Search,
            done: self.measured,
            total: self.total_hint.max(self.measured),
        });
        let t0 = std::time::Instant::now();
        let g = self.setup.mixed(c)?;
        let t1 = std::time::Instant::now();
        // An agreement target: stop running the configuration once it provably cannot meet
        // the target. The choice is the same as running every batch; when nothing meets,
        // [`Runner::finish_stopped`] runs the stopped ones that could be the best found.
        let stop_below = (self.target.metric == Metric::Agreement).then_some(self.target.value);
        let (m, stopped) = measure_reusing(self.eval, &mut self.reuse, &g, stop_below)?;
        self.times.build += (t1 - t0).as_secs_f64();
        self.times.measure += t1.elapsed().as_secs_f64();
        let met = stopped.is_none() && self.target.met(&m);
        let below_floor = met
            && keep_if_met
            && self
                .floor
                .is_some_and(|f| m.sqnr_db < f || m.sqnr_db.is_nan());
        if let Some(n) = stopped {
            self.stopped += 1;
            let agree = (m.agreement.unwrap_or(0.0) * n as f64).round() as usize;
            let most = self.eval.best_agreement_after(n - agree.min(n));
            self.unfinished
                .push((self.steps.len(), most.unwrap_or(f64::INFINITY)));
        }
        self.steps.push(Step {
            action,
            value: self.target.value_of(&m),
            judged: self.target.judged(&m),
            met,
            kept: !keep_if_met || (met && !below_floor),
            cosine: m.cosine,
            sqnr_db: m.sqnr_db,
            below_floor,
            stopped_after: stopped,
            full: None,
            seconds: t0.elapsed().as_secs_f64(),
            config: c.clone(),
        });
        let index = self.steps.len() - 1;
        (self.progress)(SearchEvent::Measured {
            index,
            step: &self.steps[index],
        });
        if stopped.is_none() && self.better(&m, c, &self.best.1, &self.best.0) {
            self.best = (c.clone(), m);
        }
        Ok(m)
    }

    /// When the target was not met: runs in full the configurations stopped early that
    /// could still beat the best found (highest reachable agreement first), so the best
    /// found is the one of running every configuration in full.
    fn finish_stopped(&mut self) -> Result<()> {
        let mut left = std::mem::take(&mut self.unfinished);
        if left.is_empty() {
            return Ok(());
        }
        (self.progress)(SearchEvent::Begin(Phase::RerunStopped {
            stopped: left.len(),
        }));
        left.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (index, most) in left {
            if most < self.target.score(&self.best.1) {
                break;
            }
            let c = self.steps[index].config.clone();
            let t0 = std::time::Instant::now();
            let g = self.setup.mixed(&c)?;
            let t1 = std::time::Instant::now();
            let m = measure_reusing(self.eval, &mut self.reuse, &g, None)?.0;
            self.times.build += (t1 - t0).as_secs_f64();
            self.times.measure += t1.elapsed().as_secs_f64();
            self.rerun += 1;
            self.steps[index].full = Some(FullRun {
                value: self.target.value_of(&m),
                judged: self.target.judged(&m),
                seconds: t0.elapsed().as_secs_f64(),
            });
            (self.progress)(SearchEvent::Rerun {
                index,
                step: &self.steps[index],
            });
            if self.better(&m, &c, &self.best.1, &self.best.0) {
                self.best = (c, m);
            }
        }
        Ok(())
    }

    /// The reuse figures: those of the ranking in `s`, the configurations' from the
    /// counters less the ranking's.
    fn stats(&self, s: ReuseStats) -> ReuseStats {
        ReuseStats {
            nodes_run: self.reuse.nodes_run - s.ranking_nodes_run,
            nodes_full: self.reuse.nodes_full - s.ranking_nodes_full,
            peak_bytes: self.reuse.peak_bytes,
            held_peak_bytes: self.reuse.held_peak_bytes,
            first_batch_reruns: self.reuse.first_batch_reruns,
            ..s
        }
    }

    /// Ties: fewer float layers, then fewer layers off int8.
    fn better(&self, a: &Measured, ca: &MixedConfig, b: &Measured, cb: &MixedConfig) -> bool {
        let (sa, sb) = (self.target.score(a), self.target.score(b));
        let key = |c: &MixedConfig| (c.with(Precision::Float).len(), c.layers.len());
        sa > sb || (sa == sb && key(ca) < key(cb))
    }

    /// The smallest `k` in `1..=names.len()` whose configuration `make(k)` (a change on
    /// the first `k` names) meets the target: doubling (1, 2, 4, …) until one does, then
    /// bisecting between the last miss and that hit, `O(log k)` configurations. Returns
    /// `k` with its configuration and figures, or `None` when even all of them miss.
    fn smallest_prefix(
        &mut self,
        what: Precision,
        names: &[String],
        make: &dyn Fn(usize) -> MixedConfig,
    ) -> Result<Option<(usize, MixedConfig, Measured, usize)>> {
        if !names.is_empty() {
            (self.progress)(SearchEvent::Begin(Phase::Prefix {
                precision: what,
                candidates: names.len(),
            }));
        }
        let what = what.name();
        let action = |k: usize| match &names[..k] {
            [one] => format!("{what} {one}"),
            [first, .., last] => format!("{what} the first {k} ranked ({first} … {last})"),
            [] => format!("{what} nothing"),
        };
        let mut lo = 0usize; // the largest k measured to miss (0: the start)
        let mut hit: Option<(usize, MixedConfig, Measured, usize)> = None;
        let mut k = 1usize;
        while k <= names.len() {
            let c = make(k);
            let m = self.run(&c, action(k), false)?;
            if self.target.met(&m) {
                hit = Some((k, c, m, self.steps.len() - 1));
                break;
            }
            lo = k;
            if k == names.len() {
                break;
            }
            k = (2 * k).min(names.len());
        }
        let Some(mut hit) = hit else {
            return Ok(None);
        };
        while hit.0 - lo > 1 {
            let mid = lo + (hit.0 - lo) / 2;
            let c = make(mid);
            let m = self.run(&c, action(mid), false)?;
            if self.target.met(&m) {
                hit = (mid, c, m, self.steps.len() - 1);
            } else {
                lo = mid;
            }
        }
        Ok(Some(hit))
    }
}

/// [`Evaluation::measure_until`] of `g` through `reuse` (only what `g` changes against a
/// run kept is run; the figures are the same bit for bit). A run of every batch is kept
/// among the recent ones ([`Keep::Recent`]), so a configuration close to the last ones
/// measured starts late.
fn measure_reusing(
    eval: &Evaluation,
    reuse: &mut Reuse,
    g: &Graph,
    stop_below: Option<f64>,
) -> Result<(Measured, Option<usize>)> {
    measure_keep(eval, reuse, g, stop_below, Keep::Recent)
}

fn measure_keep(
    eval: &Evaluation,
    reuse: &mut Reuse,
    g: &Graph,
    stop_below: Option<f64>,
    keep: Keep,
) -> Result<(Measured, Option<usize>)> {
    let mut s = reuse.session(g, keep);
    let r = eval.measure_until_with(
        &mut |bi, _| {
            reuse.batch(&mut s, bi).map_err(graph_err(format!(
                "running the quantized model on batch {bi}"
            )))
        },
        stop_below,
    )?;
    reuse.finish(s);
    Ok(r)
}

/// What [`Reuse`] saved in [`search`]: non-constant node evaluations done and those full
/// runs would have done, for the configurations and for the ranking's sensitivity passes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ReuseStats {
    /// Node evaluations running the configurations (all batches run).
    pub nodes_run: usize,
    /// What full runs of the same configurations and batches would have done.
    pub nodes_full: usize,
    /// Node evaluations of the ranking's sensitivity passes.
    pub ranking_nodes_run: usize,
    /// What full sensitivity passes would have done.
    pub ranking_nodes_full: usize,
    /// The memory budget of the values kept, bytes ([`crate::reuse`]).
    pub budget_bytes: usize,
    /// The most bytes kept at once.
    pub peak_bytes: usize,
    /// The most bytes of cut values one run held while running a batch
    /// ([`Reuse::held_peak_bytes`]).
    pub held_peak_bytes: usize,
    /// First batches run twice because their cuts' values were not predicted
    /// ([`Reuse::first_batch_reruns`]; counted in the nodes run).
    pub first_batch_reruns: usize,
}

/// Chooses a precision per layer so that `target` holds on `eval` (see the module docs).
/// When the target cannot be met the result has `met = false` and the best configuration
/// found (the highest metric among those measured, fewer float layers on ties).
pub fn search(
    setup: &Setup,
    eval: &Evaluation,
    target: Target,
    opts: &SearchOptions,
    progress: &mut dyn FnMut(SearchEvent<'_>),
) -> Result<SearchResult> {
    if target.metric == Metric::Accuracy && eval.labels.is_none() {
        return Err(PtqError::InvalidOption(
            "--target accuracy=... needs labels for the evaluation data".into(),
        ));
    }
    let budget = match opts.reuse_bytes {
        Some(b) => b,
        None => crate::reuse::budget_from_env()?,
    };
    // Kept: the int8 run (pinned), the float run while the ranking runs, two recent ones.
    let mut reuse = Reuse::new(eval.data, budget, 3);
    progress(SearchEvent::Begin(Phase::Int8));
    let t_int8 = std::time::Instant::now();
    let int8 = measure_keep(
        eval,
        &mut reuse,
        &setup.mixed(&MixedConfig::default())?,
        None,
        Keep::Pin,
    )?
    .0;
    let t_int8 = t_int8.elapsed().as_secs_f64();
    if target.metric == Metric::Agreement && int8.agreement.is_none() {
        return Err(PtqError::InvalidOption(
            "--target agreement=...: the model's first output has no class axis nor one score per \
             sample (use cosine or sqnr)"
                .into(),
        ));
    }
    let first = Step {
        action: "all int8".into(),
        value: target.value_of(&int8),
        judged: target.judged(&int8),
        met: target.met(&int8),
        kept: true,
        cosine: int8.cosine,
        sqnr_db: int8.sqnr_db,
        below_floor: false,
        stopped_after: None,
        full: None,
        seconds: t_int8,
        config: MixedConfig::default(),
    };
    progress(SearchEvent::Measured {
        index: 0,
        step: &first,
    });
    if let (Metric::Agreement, Some(c)) = (target.metric, eval.confidence) {
        // Every row agreeing gives the bound of the inputs (clustered_lower_bound): with
        // several rows per input, the inputs are what count.
        enough(
            int8.agreement_inputs,
            target,
            c,
            "evaluation samples",
            "give more evaluation data (--data, or more calibration samples / a larger \
             --held-out) or a lower --confidence (0: judge the share measured)",
        )?;
    }
    let layers = setup.layers();
    let with_weight: HashSet<&str> = all_nodes(&setup.float)
        .into_iter()
        .filter(|x| x.facts().weight.is_some())
        .map(|x| x.name.as_str())
        .collect();
    let weighted: HashSet<&str> = layers
        .iter()
        .filter(|l| l.nodes.iter().any(|n| with_weight.contains(n.as_str())))
        .map(|l| l.nodes[0].as_str())
        .collect();
    let mut times = SearchTimes {
        measure: t_int8,
        ..SearchTimes::default()
    };
    let mut stats = ReuseStats {
        budget_bytes: budget,
        ..ReuseStats::default()
    };
    // The ranking: needed for the fallback when int8 misses, and for the 4-bit order.
    let need_ranking = !target.met(&int8) || opts.allow_weight4;
    let mut ranking: Vec<(String, Option<f64>)> = Vec::new();
    if need_ranking {
        progress(SearchEvent::Begin(Phase::Ranking {
            batches: eval.data.len(),
            layers: layers.len(),
        }));
        let t0 = std::time::Instant::now();
        let (r0, f0) = (reuse.nodes_run, reuse.nodes_full);
        let report = analyze_with(
            setup,
            eval.data,
            &AnalyzeOptions {
                top_k: None,
                budget: opts.ranking_budget,
                sensitivity_samples: Some(RANKING_SAMPLES),
                left_float_only: true,
            },
            &mut |s, d, t| {
                progress(SearchEvent::Progress {
                    stage: SearchStage::Ranking(s),
                    done: d,
                    total: t,
                })
            },
            &mut reuse,
        )?;
        stats.ranking_nodes_run = reuse.nodes_run - r0;
        stats.ranking_nodes_full = reuse.nodes_full - f0;
        times.ranking = t0.elapsed().as_secs_f64();
        ranking = report
            .layers
            .iter()
            .map(|l| (l.name.clone(), l.sensitivity.map(|s| s.recovered)))
            .collect();
    }
    // The layers the search moves, in ranking order: those the data run (a layer of an
    // If branch the calibration data never take cannot change what is measured; it stays
    // int8).
    let order: Vec<String> = {
        let by_first: HashMap<&str, &crate::analyze::Layer> =
            layers.iter().map(|l| (l.nodes[0].as_str(), l)).collect();
        ranking
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                by_first
                    .get(n.as_str())
                    .is_some_and(|l| setup.reached(&l.nodes))
            })
            .cloned()
            .collect()
    };
    let mut r = Runner {
        setup,
        eval,
        reuse,
        target,
        steps: vec![first],
        best: (MixedConfig::default(), int8),
        times,
        measured: 0,
        stopped: 0,
        unfinished: Vec::new(),
        rerun: 0,
        total_hint: 4 * ilog2_ceil(order.len() + 1) + order.len(),
        progress,
        accepted: Vec::new(),
        floor: None,
    };
    if target.met(&int8) {
        r.accept(0, &MixedConfig::default(), &int8);
    }
    let mut config = MixedConfig::default();
    let mut current = int8;
    // 1. The smallest prefix of the ranking whose change meets the target: (a) int16
    //    activations on the first k layers; (b) only if int16 on all of them is not
    //    enough, float on the first k (the others int16). Errors of layers add up, so a
    //    longer prefix rarely does worse; where it does, the prefix returned was still
    //    measured to meet the target.
    let mut all16 = MixedConfig::default();
    if !target.met(&current) && !opts.no_int16 {
        fn prefix(base: &MixedConfig, order: &[String], k: usize, p: Precision) -> MixedConfig {
            let mut c = base.clone();
            for n in &order[..k] {
                c.set(n, p);
            }
            c
        }
        all16 = prefix(
            &MixedConfig::default(),
            &order,
            order.len(),
            Precision::Act16,
        );
        let make = |k: usize| prefix(&MixedConfig::default(), &order, k, Precision::Act16);
        if let Some((_, c, m, step)) = r.smallest_prefix(Precision::Act16, &order, &make)? {
            r.accept(step, &c, &m);
            config = c;
            current = m;
        }
        // (a') int16 activations everywhere not enough: what is left is the int8 weights
        //      (and the 8-bit bias scale); 16-bit weights on the first k weighted layers.
        let weighted_order: Vec<String> = order
            .iter()
            .filter(|n| weighted.contains(n.as_str()))
            .cloned()
            .collect();
        if !target.met(&current) && !weighted_order.is_empty() {
            let base = all16.clone();
            let make = |k: usize| prefix(&base, &weighted_order, k, Precision::Wide16);
            if let Some((_, c, m, step)) =
                r.smallest_prefix(Precision::Wide16, &weighted_order, &make)?
            {
                r.accept(step, &c, &m);
                config = c;
                current = m;
            }
            all16 = prefix(
                &base,
                &weighted_order,
                weighted_order.len(),
                Precision::Wide16,
            );
        }
    }
    if !target.met(&current) {
        // Float candidates: in ranking order, at most --max-float, and never every
        // weighted layer (one stays in integer).
        let mut floats: Vec<String> = order.clone();
        let weighted_in: Vec<usize> = floats
            .iter()
            .enumerate()
            .filter(|(_, n)| weighted.contains(n.as_str()))
            .map(|(i, _)| i)
            .collect();
        if !weighted.is_empty() && weighted_in.len() == weighted.len() {
            floats.remove(*weighted_in.last().expect("one weighted layer"));
        }
        floats.truncate(opts.max_float.unwrap_or(usize::MAX));
        let make = |k: usize| {
            let mut c = all16.clone();
            for n in &floats[..k] {
                c.set(n, Precision::Float);
            }
            c
        };
        if let Some((_, c, m, step)) = r.smallest_prefix(Precision::Float, &floats, &make)? {
            r.accept(step, &c, &m);
            config = c;
            current = m;
        }
    }
    if !target.met(&current) {
        r.finish_stopped()?;
        let (config, measured) = r.best.clone();
        let reuse = r.stats(stats);
        return Ok(SearchResult {
            target,
            met: false,
            search_met: false,
            config,
            measured,
            int8,
            ranking,
            steps: r.steps,
            accepted: r.accepted,
            samples: eval.samples(),
            confirmation: None,
            seconds: r.times,
            stopped_early: r.stopped,
            rerun_in_full: r.rerun,
            reuse,
        });
    }
    // 2. Prune: put changed layers back in int8, by groups. A group (at first every changed
    //    layer, least sensitive first) goes back at once when the target still holds;
    //    otherwise it is halved and each half tried, the less sensitive first, down to
    //    single layers; a float layer that cannot go back to int8 tries int16. Errors of
    //    different layers interact, so a layer the prefix needed can become unnecessary
    //    once others are changed; group tests find the few needed layers among many in
    //    O(needed · log changed) configurations, where one layer at a time took one each.
    let changed: Vec<String> = order
        .iter()
        .rev()
        .filter(|n| config.get(n) != Precision::Int8)
        .cloned()
        .collect();
    if !changed.is_empty() {
        (r.progress)(SearchEvent::Begin(Phase::Prune {
            changed: changed.len(),
        }));
    }
    let mut stack: Vec<Vec<String>> = vec![changed];
    // From here on a step gives quality back: with a floor, its output SQNR may not fall
    // more than `prune_floor_db` below the configuration that first met the target.
    r.floor = opts
        .prune_floor_db
        .filter(|_| current.sqnr_db.is_finite())
        .map(|d| current.sqnr_db - d);
    while let Some(group) = stack.pop() {
        if group.is_empty() {
            continue;
        }
        let mut c = config.clone();
        for n in &group {
            c.set(n, Precision::Int8);
        }
        let action = match group.as_slice() {
            [one] => format!("int8 {one} (prune)"),
            g => format!(
                "int8 {} layers ({} … {}) (prune)",
                g.len(),
                g[0],
                g[g.len() - 1]
            ),
        };
        let m = r.run(&c, action, true)?;
        if r.last_kept() {
            r.accept(r.steps.len() - 1, &c, &m);
            config = c;
            current = m;
            continue;
        }
        if let [one] = group.as_slice() {
            // Cheaper precisions than the layer's, cheapest first: int16 activations, then
            // (a weighted layer) 16-bit weights too.
            let now = config.get(one);
            let mut tries = Vec::new();
            if !opts.no_int16 && now > Precision::Act16 {
                tries.push(Precision::Act16);
                if now > Precision::Wide16 && weighted.contains(one.as_str()) {
                    tries.push(Precision::Wide16);
                }
            }
            for p in tries {
                let mut c = config.clone();
                c.set(one, p);
                let m = r.run(&c, format!("{} {one} (prune)", p.name()), true)?;
                if r.last_kept() {
                    r.accept(r.steps.len() - 1, &c, &m);
                    config = c;
                    current = m;
                    break;
                }
            }
            continue;
        }
        let (less, more) = group.split_at(group.len() / 2);
        stack.push(more.to_vec());
        stack.push(less.to_vec());
    }
    // 3. 4-bit weights, least sensitive first (the end of the ranking).
    if opts.allow_weight4 && setup.options.weight_bits > 4 {
        (r.progress)(SearchEvent::Begin(Phase::Weight4));
        for name in order.iter().rev() {
            if !weighted.contains(name.as_str()) || config.get(name) != Precision::Int8 {
                continue;
            }
            let mut c = config.clone();
            c.set(name, Precision::Weight4);
            let m = r.run(&c, format!("4-bit weights {name}"), true)?;
            if r.last_kept() {
                r.accept(r.steps.len() - 1, &c, &m);
                config = c;
                current = m;
            }
        }
    }
    let reuse = r.stats(stats);
    Ok(SearchResult {
        target,
        met: true,
        search_met: true,
        config,
        measured: current,
        int8,
        ranking,
        steps: r.steps,
        accepted: r.accepted,
        samples: eval.samples(),
        confirmation: None,
        seconds: r.times,
        stopped_early: r.stopped,
        rerun_in_full: r.rerun,
        reuse,
    })
}

/// The samples an agreement `target` takes at confidence `level` when every one agrees:
/// `n/(n+z²) ≥ t  ⇔  n ≥ t·z²/(1−t)`.
pub fn samples_needed(target: f64, level: f64) -> usize {
    let z = normal_quantile(level.clamp(1e-9, 1.0 - 1e-9));
    if target >= 1.0 {
        return usize::MAX;
    }
    (target * z * z / (1.0 - target)).ceil() as usize
}

/// [`Evaluation::check_enough`] for `n` inputs.
fn enough(n: usize, target: Target, level: f64, what: &str, hint: &str) -> Result<()> {
    if wilson_lower_bound(n, n, level) >= target.value {
        return Ok(());
    }
    let need = samples_needed(target.value, level);
    Err(PtqError::InvalidOption(format!(
        "--target agreement={}: {n} {what} cannot show it at {}% confidence even if every one \
         agrees (the lower bound of {n} of {n} is {:.4}; the rows of one sample, e.g. the \
         frames of a sequence, count as one); it takes at least {need} samples: {hint}",
        target.value,
        fmt_level(level),
        wilson_lower_bound(n, n, level)
    )))
}

/// A confidence level in percent, with the digits it needs (95, 97.5, 98.33).
pub fn fmt_level(level: f64) -> String {
    let p = 100.0 * level;
    for d in 0..4 {
        let s = format!("{p:.d$}");
        if (s.parse::<f64>().unwrap_or(f64::NAN) - p).abs() < 1e-9 {
            return s;
        }
    }
    format!("{p:.2}")
}

/// A configuration the search accepted (it met the target on the search's samples).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Accepted {
    /// Its index in [`SearchResult::steps`].
    pub step: usize,
    /// What the step did.
    pub action: String,
    /// The configuration.
    #[serde(skip)]
    pub config: MixedConfig,
    /// Its figures on the search's samples.
    #[serde(skip)]
    pub measured: Measured,
}

/// One configuration measured on the confirmation samples.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfirmTest {
    /// The step of the search that accepted it ([`SearchResult::steps`]).
    pub step: usize,
    /// What that step did.
    pub action: String,
    /// Layers off int8 in it.
    pub changed_layers: usize,
    /// Its figures on the confirmation samples (the agreement's bound at
    /// [`Confirmation::level`]).
    pub measured: Measured,
    /// The value judged (the bound, or the metric without a confidence level).
    pub judged: Option<f64>,
    /// Whether the target held on the confirmation samples.
    pub met: bool,
}

/// The confirmation of a search's choice on samples it never measured ([`confirm`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Confirmation {
    /// Confirmation samples (batch entries).
    pub samples: usize,
    /// The confidence level each test is judged at: `1 − (1 − c)/tests` for the search's
    /// level `c` (Bonferroni: the chance that any of the tests accepts a configuration that
    /// misses the target on fresh data stays below `1 − c`); `None` without a level.
    pub level: Option<f64>,
    /// The tests planned (at most [`ConfirmOptions::max_tests`], at most the
    /// configurations accepted), fixed before any confirmation sample is run.
    pub tests_planned: usize,
    /// The tests run, in order: the search's choice first, then more conservative
    /// configurations it accepted, until one meets the target.
    pub tests: Vec<ConfirmTest>,
    /// Index in `tests` of the confirmed configuration (`None`: none met the target).
    pub confirmed: Option<usize>,
}

/// Options of [`confirm`].
#[derive(Debug, Clone, Copy)]
pub struct ConfirmOptions {
    /// Most configurations tested on the confirmation samples (at least 1); each test is
    /// judged at the Bonferroni level `1 − (1 − c)/tests`.
    pub max_tests: usize,
}

impl Default for ConfirmOptions {
    fn default() -> Self {
        ConfirmOptions {
            max_tests: DEFAULT_CONFIRM_TESTS,
        }
    }
}

/// Default [`ConfirmOptions::max_tests`]: the search's choice and the most conservative
/// configuration it accepted. Each further test raises the samples the confirmation needs
/// (at 95 % for agreement=0.99: 268 for one test, 381 for two, 449 for three).
pub const DEFAULT_CONFIRM_TESTS: usize = 2;

/// The Bonferroni level of one of `tests` tests at family level `c`: `1 − (1 − c)/tests`.
pub fn bonferroni_level(c: f64, tests: usize) -> f64 {
    1.0 - (1.0 - c) / tests.max(1) as f64
}

/// The accepted configurations [`confirm`] tests, in order (indices into `accepted`): the
/// last (the search's choice) first, then evenly back along the list to the first (the most
/// conservative), `min(max_tests, accepted)` in all.
pub fn confirmation_candidates(accepted: usize, max_tests: usize) -> Vec<usize> {
    let k = max_tests.max(1).min(accepted);
    if k == 0 {
        return Vec::new();
    }
    if k == 1 {
        return vec![accepted - 1];
    }
    let last = accepted - 1;
    let mut v: Vec<usize> = (0..k)
        .map(|i| last - ((i * last) as f64 / (k - 1) as f64).round() as usize)
        .collect();
    v.dedup();
    v
}

/// Confirms `result` (from [`search`] on other samples) on `confirm_eval`, samples the
/// search never measured: the search's choice is measured once there; when it misses the
/// target, the more conservative configurations the search accepted are tried in turn
/// ([`confirmation_candidates`]), at most `opts.max_tests` in all, each judged at the
/// Bonferroni level [`bonferroni_level`] of `confirm_eval`'s confidence level. The first
/// that meets the target becomes the result's configuration (`met`); when none does, the
/// one tested with the best confirmation figure is kept and `met` is false. A search that
/// did not meet the target has its best configuration measured once, for the report.
/// `result.measured` stays the chosen configuration's figure on the search's samples.
pub fn confirm(
    setup: &Setup,
    result: SearchResult,
    confirm_eval: &mut Evaluation,
    opts: &ConfirmOptions,
) -> Result<SearchResult> {
    confirm_with(setup, result, confirm_eval, opts, &mut |_| {})
}

/// What [`confirm_with`] reports as it goes.
#[derive(Debug, Clone, Copy)]
pub enum ConfirmEvent<'a> {
    /// Test `index` (from 0) of at most `planned` begins: `action`'s configuration is
    /// measured on the confirmation samples.
    Begin {
        /// The test's index.
        index: usize,
        /// Tests planned.
        planned: usize,
        /// What the search's step did.
        action: &'a str,
    },
    /// Test `index` ended.
    Done {
        /// The test's index.
        index: usize,
        /// Tests planned.
        planned: usize,
        /// Its result.
        test: &'a ConfirmTest,
        /// Wall time of the test, seconds.
        seconds: f64,
    },
}

/// [`confirm`], reporting each test as it begins and ends.
pub fn confirm_with(
    setup: &Setup,
    mut result: SearchResult,
    confirm_eval: &mut Evaluation,
    opts: &ConfirmOptions,
    progress: &mut dyn FnMut(ConfirmEvent<'_>),
) -> Result<SearchResult> {
    let target = result.target;
    let family = confirm_eval.confidence;
    let picks: Vec<(usize, String, MixedConfig, Measured)> = if result.search_met {
        confirmation_candidates(result.accepted.len(), opts.max_tests)
            .into_iter()
            .map(|i| {
                let a = &result.accepted[i];
                (a.step, a.action.clone(), a.config.clone(), a.measured)
            })
            .collect()
    } else {
        vec![(
            usize::MAX,
            "best configuration found (the search did not meet the target)".into(),
            result.config.clone(),
            result.measured,
        )]
    };
    if picks.is_empty() {
        return Err(PtqError::InvalidOption(
            "confirmation: the search accepted no configuration".into(),
        ));
    }
    // Only an agreement has a confidence bound (the other metrics are judged as measured).
    let level = family
        .filter(|_| target.metric == Metric::Agreement)
        .map(|c| bonferroni_level(c, picks.len()));
    confirm_eval.confidence = level.or(family);
    let mut tests = Vec::new();
    let mut confirmed = None;
    let mut best: Option<(f64, usize)> = None;
    for (i, (step, action, c, _)) in picks.iter().enumerate() {
        progress(ConfirmEvent::Begin {
            index: i,
            planned: picks.len(),
            action,
        });
        let t0 = std::time::Instant::now();
        let m = confirm_eval.measure(&setup.mixed(c)?)?;
        let met = result.search_met && target.met(&m);
        let score = target.score(&m);
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
        tests.push(ConfirmTest {
            step: *step,
            action: action.clone(),
            changed_layers: c.layers.len(),
            measured: m,
            judged: target.judged(&m),
            met,
        });
        progress(ConfirmEvent::Done {
            index: i,
            planned: picks.len(),
            test: &tests[i],
            seconds: t0.elapsed().as_secs_f64(),
        });
        if met {
            confirmed = Some(i);
            break;
        }
    }
    confirm_eval.confidence = family;
    let keep = confirmed.or(best.map(|b| b.1)).unwrap_or(0);
    result.config = picks[keep].2.clone();
    result.measured = picks[keep].3;
    result.met = confirmed.is_some();
    result.confirmation = Some(Confirmation {
        samples: confirm_eval.samples(),
        level,
        tests_planned: picks.len(),
        tests,
        confirmed,
    });
    Ok(result)
}

/// `⌈log2 n⌉` (0 for n ≤ 1).
fn ilog2_ceil(n: usize) -> usize {
    (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantiles_match_the_tables() {
        // Φ⁻¹ from the standard normal table (and scipy.stats.norm.ppf), to 1e-6.
        for (p, z) in [
            (0.5, 0.0),
            (0.8, 0.841_621_2),
            (0.95, 1.644_853_6),
            (0.975, 1.959_964_0),
            (0.001, -3.090_232_3),
            (0.999_999, 4.753_424_3),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-6,
                "Φ⁻¹({p}) = {}",
                normal_quantile(p)
            );
        }
    }

    #[test]
    fn wilson_lower_bounds_match_a_direct_computation() {
        // Values from the Wilson formula computed independently (Python, statistics.NormalDist).
        for (k, n, c, want) in [
            (561, 561, 0.95, 0.995_200_431_4),
            (95, 100, 0.95, 0.900_838_914_7),
            (559, 561, 0.95, 0.989_284_991_0),
            (2200, 2244, 0.95, 0.974_967_629_3),
        ] {
            let got = wilson_lower_bound(k, n, c);
            assert!((got - want).abs() < 1e-8, "{k}/{n} at {c}: {got} vs {want}");
            assert!(got < k as f64 / n as f64);
        }
        assert_eq!(wilson_lower_bound(0, 0, 0.95), 0.0);
        // A higher level asks for more: the bound falls.
        assert!(wilson_lower_bound(990, 1000, 0.99) < wilson_lower_bound(990, 1000, 0.8));
    }

    #[test]
    fn clustered_bounds_count_inputs_not_rows() {
        // One row per input: exactly the Wilson bound of the rows.
        let single: Vec<(usize, usize)> = (0..100).map(|i| (usize::from(i % 20 != 0), 1)).collect();
        let (b, n) = clustered_lower_bound(&single, 0.95);
        assert_eq!(b, wilson_lower_bound(95, 100, 0.95));
        assert_eq!(n, 100.0);
        // 40 inputs of 10 rows, 20 rows disagreeing (share 0.95 in both cases below).
        // Concentrated in 4 inputs: the rows of an input move together, the effective
        // number is 0.95·0.05 / (90 / (40·39·10²)) = 82.33 (Python: Wilson 0.8942559871).
        let lumped: Vec<(usize, usize)> =
            (0..40).map(|i| (if i < 4 { 5 } else { 10 }, 10)).collect();
        let (b, n) = clustered_lower_bound(&lumped, 0.95);
        assert!((n - 82.333_333_333).abs() < 1e-6, "{n}");
        assert!((b - 0.894_255_987_1).abs() < 1e-8, "{b}");
        // Spread one per input over 20 inputs: as good as independent rows (clamped to 400).
        let spread: Vec<(usize, usize)> =
            (0..40).map(|i| (if i < 20 { 9 } else { 10 }, 10)).collect();
        let (b2, n2) = clustered_lower_bound(&spread, 0.95);
        assert_eq!(n2, 400.0);
        assert_eq!(b2, wilson_lower_bound(380, 400, 0.95));
        assert!(b < b2);
        // Every row agreeing says nothing about the clustering: the inputs count
        // (Python: 40/(40+z²) = 0.9366465514), not the 400 rows.
        let all: Vec<(usize, usize)> = (0..40).map(|_| (10, 10)).collect();
        let (b, n) = clustered_lower_bound(&all, 0.95);
        assert_eq!(n, 40.0);
        assert!((b - 0.936_646_551_4).abs() < 1e-8, "{b}");
        assert_eq!(clustered_lower_bound(&[], 0.95), (0.0, 0.0));
    }
}
