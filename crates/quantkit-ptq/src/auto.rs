//! `--method auto` (issue 18): per activation, the clip range among minmax,
//! percentile=99.99, mse and entropy (the candidates of
//! [`quantkit_core::HistogramObserver::candidates`], all from one histogram) that makes the
//! **model output** closest to the float model's.
//!
//! [`choose`] is a greedy search on the quantized model itself:
//!
//! 1. Every activation starts at its minmax range (what `--method minmax` gives).
//! 2. The selection samples (the first [`AUTO_SAMPLES`] calibration samples) are split by
//!    batch ([`split_feeds`]): the first two thirds *choose*, the rest *checks*.
//! 3. In topological order (the order values are produced), each activation screens its
//!    other candidates by the consumers' local error (each reader run alone on float
//!    inputs, [`choose_local`]'s score) and the [`AUTO_SCREEN`] best go to a model run,
//!    with everything else at its current choice; the QDQ model is written
//!    ([`crate::insert_qdq`]: biases follow the new input scale) and run on the choosing
//!    samples, and a candidate replaces the current range only if it lowers the
//!    objective beyond the samples' noise: the mean of the per-sample differences is
//!    below zero by more than [`AUTO_Z`] standard errors (a paired test). Minmax is thus
//!    the start and the tie-breaker.
//! 4. The final model is run on the checking samples: if its objective there is above the
//!    all-minmax model's, the accepted changes are undone, the last first, until it is not.
//!
//! **The objective** is what the model's outputs are for ([`OutputKind`], decided from the
//! graph by [`output_kinds`]): a classifier's top-1 depends on its scores only through
//! the softmax, so for a Softmax output the loss of a sample is `KL(p_float ‖ p_quant)`,
//! for the logits of a single-output classifier (`[N, C]`) `KL(softmax(y_float) ‖
//! softmax(y_quant))`; a regressor's is the squared error `Σ (y − y_float)²`. The KL
//! divergence weighs a sample by how much probability moves: an error that leaves one
//! class far ahead costs little, one on a sample near the decision boundary costs much,
//! where the squared error of the logits counts every logit alike (issue 18: on resnet8
//! it halved while top-1 on TEST lost 7 images). Each output's loss is divided by the
//! all-minmax model's on the same samples and averaged over outputs (so outputs in
//! different units count alike, and all-minmax scores 1).
//!
//! Cost: `2 + 2·A` model runs at most on the choosing samples with the screen (`A`
//! activations; `1 + 3·A` without) and `2 + reverts` on the checking samples; the screen's
//! local errors cost one reader run per candidate on [`LOCAL_SAMPLES`] samples.
//! [`AutoReport`] gives the counts and the times. A run on the choosing samples is
//! incremental ([`Incremental`]): only the nodes from the first one the candidate
//! changes, on the values cached at that cut (bit for bit a full run's outputs).
//!
//! A candidate must also not lose top-1 agreement with the float model on the choosing
//! samples (classifier outputs) beyond noise: among the samples whose agreement changes,
//! the lost ones may not outnumber the gained ones by more than [`AUTO_Z`] standard errors
//! (a sign test, as McNemar's); the check undoes changes until the checking samples pass
//! the same test against minmax. A strict "no image lost" rule acts on one image of 128,
//! which is the noise the paired test exists to ignore.
//!
//! A graph output keeps the minmax range: its reader is the user, and clipping a
//! classifier's largest scores turns them into ties that change the top-1.
//!
//! Why the local error only screens ([`choose_local`], the first rule, chose by it): a
//! range that is best for the nodes reading the tensor, run alone on float inputs, is not
//! the best for the model. On the zoo it lost to minmax on resnet8 (−0.02 vs +0.02 pt) and
//! mlp (+0.02 vs +0.09 pt): local error counts every element alike, while what matters is
//! what survives to the output (a clipped tail that a later Relu/Clip or pooling discards
//! costs nothing, a coarser grid everywhere does), and errors of successive layers add
//! up. As a screen it only decides which of the clipping candidates gets to face minmax
//! in the model.

use crate::analyze::Feed;
use crate::error::{core, graph as graph_err, Result};
use crate::qdq::{insert_qdq, Plan, QdqOptions};
use quantkit_core::{HistogramObserver, Observer, QParams, QuantScheme, RoundingMode};
use quantkit_graph::{execute, execute_with, Graph, Node, Tensor, ValueInfo};
use std::collections::{BTreeMap, HashMap, HashSet};

pub mod incremental;
pub use incremental::{Incremental, Outputs};

/// Calibration samples `auto` keeps to choose (the first two thirds of the batches: 512
/// samples in batches of 32) and check (the last third: 256) its ranges on.
pub const AUTO_SAMPLES: usize = 768;

/// How many of an activation's candidates other than minmax go to a model run: the best
/// by the consumers' local error ([`choose_local`]'s score, on the first
/// [`LOCAL_SAMPLES`] choosing samples). Every candidate still has to beat minmax in the
/// model; the screen only saves the runs of those that are locally worse than others.
/// Not 1: the locally best is often the range that keeps a rare outlier the consumer
/// needs alone but a later Clip discards (`tests/auto.rs`, the clipped model: with one
/// candidate the screen kept mse's `[0, 28.2]` and the model never saw the clipped
/// ranges); keeping two lets the model choose between two clipping levels.
pub const AUTO_SCREEN: usize = 2;

/// Samples [`choose_local`] scores on (the first of the selection samples).
pub const LOCAL_SAMPLES: usize = 64;

/// How many standard errors of the paired per-sample differences a candidate's output
/// error must be below the current one's to replace the current range: smaller gains are
/// within what another set of samples would change (on mlp a 3.5 % gain on 128 samples
/// was a loss on 1,000).
pub const AUTO_Z: f64 = 2.0;

/// Scale and zero point per activation.
pub type ActParams = BTreeMap<String, (f32, i32)>;

/// What `auto` chose for one activation.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AutoChoice {
    /// The activation.
    pub tensor: String,
    /// The winning candidate (`minmax`, `percentile`, `mse`, `entropy`).
    pub method: &'static str,
    /// Its range.
    pub range: (f32, f32),
    /// Score of every candidate tried, in candidate order (lower is better): for
    /// [`choose`] the model output error on the choosing half with this candidate and
    /// every other activation at its current choice (minmax's: the error before this
    /// activation was tried; a candidate equal to an earlier one is not listed), for
    /// [`choose_local`] the consumers' local error.
    pub scores: Vec<(&'static str, f64)>,
    /// [`choose`]'s screen: the consumers' local error of every candidate but minmax,
    /// in candidate order; only the [`AUTO_SCREEN`] best of them were run in the model
    /// (empty when the activation had one candidate, is a graph output, or for
    /// [`choose_local`]).
    pub local: Vec<(&'static str, f64)>,
}

fn info(name: &str) -> ValueInfo {
    ValueInfo {
        name: name.to_string(),
        dtype: None,
        onnx_elem_type: 0,
        shape: None,
    }
}

/// `n` alone as a graph: its initializers inside, its other inputs as graph inputs.
fn single(g: &Graph, n: &Node) -> Graph {
    let mut inputs = Vec::new();
    let mut inits = BTreeMap::new();
    for i in &n.inputs {
        if i.is_empty() {
            continue;
        }
        match g.initializers.get(i) {
            Some(t) => {
                inits.insert(i.clone(), t.clone());
            }
            None if !inputs.iter().any(|v: &ValueInfo| &v.name == i) => inputs.push(info(i)),
            None => {}
        }
    }
    Graph {
        name: format!("{} alone", n.name),
        nodes: vec![n.clone()],
        inputs,
        outputs: n.outputs.iter().take(1).map(|o| info(o)).collect(),
        initializers: inits,
        opset_imports: g.opset_imports.clone(),
        meta: g.meta.clone(),
        ..Default::default()
    }
}

fn fake_quant(name: &str, t: &Tensor, p: &QParams) -> Result<Tensor> {
    let x = t.as_f32().unwrap_or_default();
    let fq = p
        .fake_quantize(x, &t.shape, RoundingMode::HalfToEven)
        .map_err(core(format!("fake-quantizing `{name}`")))?;
    Ok(Tensor::from_f32(&t.shape, fq))
}

fn rel_err(reference: &[f32], approx: &[f32]) -> (f64, f64) {
    let (mut s, mut n) = (0f64, 0f64);
    for (&a, &b) in reference.iter().zip(approx) {
        let (a, b) = (f64::from(a), f64::from(b));
        s += a * a;
        n += (a - b) * (a - b);
    }
    (n, s)
}

/// The consumers' local error of candidate ranges (the first rule of `--method auto`, now
/// [`choose`]'s screen): per activation, each top-level reader run alone on the float
/// values of the samples with only this tensor fake-quantized, its relative squared error
/// against the float output summed over readers; a tensor no top-level node reads (or that
/// a subgraph reads) scores its own relative quantization error.
struct LocalScorer<'g> {
    g: &'g Graph,
    readers: HashMap<String, Vec<usize>>,
    singles: HashMap<usize, Graph>,
    subgraph_reads: HashSet<String>,
    /// Float values of the samples, per feed: the activations and their readers' inputs
    /// and first outputs.
    values: Vec<HashMap<String, Tensor>>,
}

impl<'g> LocalScorer<'g> {
    fn new(g: &'g Graph, activations: &[String], feeds: &[Feed]) -> Result<Self> {
        let subgraph_reads: HashSet<String> = g
            .nodes
            .iter()
            .flat_map(|n| n.outer_reads().into_iter().map(str::to_string))
            .collect();
        let wanted: HashSet<&str> = activations.iter().map(String::as_str).collect();
        let mut readers: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            for v in &n.inputs {
                if wanted.contains(v.as_str()) {
                    let r = readers.entry(v.clone()).or_default();
                    if !r.contains(&i) {
                        r.push(i);
                    }
                }
            }
        }
        let mut keep: HashSet<String> = activations.iter().cloned().collect();
        for idx in readers.values().flatten() {
            let n = &g.nodes[*idx];
            keep.extend(n.inputs.iter().filter(|i| !i.is_empty()).cloned());
            keep.extend(n.outputs.iter().take(1).cloned());
        }
        let mut values: Vec<HashMap<String, Tensor>> = Vec::with_capacity(feeds.len());
        for (bi, feed) in feeds.iter().enumerate() {
            let mut v = HashMap::new();
            execute_with(g, feed.clone(), |name, t| {
                if keep.contains(name) {
                    v.insert(name.to_string(), t.clone());
                }
            })
            .map_err(graph_err(format!(
                "running the float model on selection batch {bi} of --method auto"
            )))?;
            values.push(v);
        }
        let singles: HashMap<usize, Graph> = readers
            .values()
            .flatten()
            .map(|&i| (i, single(g, &g.nodes[i])))
            .collect();
        Ok(LocalScorer {
            g,
            readers,
            singles,
            subgraph_reads,
            values,
        })
    }

    /// The local error of activation `t` quantized with `p` (lower is better).
    fn score(&self, t: &str, p: &QParams) -> Result<f64> {
        let rs = self.readers.get(t).map(Vec::as_slice).unwrap_or_default();
        if rs.is_empty() || self.subgraph_reads.contains(t) {
            let (mut n, mut s) = (0f64, 0f64);
            for v in &self.values {
                let Some(x) = v.get(t) else { continue };
                let fq = fake_quant(t, x, p)?;
                let (a, b) = rel_err(
                    x.as_f32().unwrap_or_default(),
                    fq.as_f32().unwrap_or_default(),
                );
                n += a;
                s += b;
            }
            return Ok(if s > 0.0 { n / s } else { n });
        }
        let mut score = 0f64;
        for &ri in rs {
            let node = &self.g.nodes[ri];
            let (mut n, mut s) = (0f64, 0f64);
            for (bi, v) in self.values.iter().enumerate() {
                let Some(x) = v.get(t) else { continue };
                let fq = fake_quant(t, x, p)?;
                let mut inputs: Vec<(String, Tensor)> = Vec::new();
                for i in &self.singles[&ri].inputs {
                    if i.name == t {
                        inputs.push((i.name.clone(), fq.clone()));
                    } else if let Some(val) = v.get(&i.name) {
                        inputs.push((i.name.clone(), val.clone()));
                    }
                }
                let out = execute(&self.singles[&ri], inputs).map_err(graph_err(format!(
                    "running node `{}` alone on selection batch {bi} of --method auto",
                    node.name
                )))?;
                let (Some(r), Some(a)) = (
                    node.outputs
                        .first()
                        .and_then(|o| v.get(o))
                        .and_then(Tensor::as_f32),
                    out[0].1.as_f32(),
                ) else {
                    continue;
                };
                let (a, b) = rel_err(r, a);
                n += a;
                s += b;
            }
            score += if s > 0.0 { n / s } else { n };
        }
        Ok(score)
    }
}

/// The former rule of `--method auto`, kept for comparison (`analyze` and the tests): the
/// parameters of every activation of `activations` that has an observer, by the **local**
/// error of the tensor's consumers (each reader run alone on float inputs with only this
/// tensor fake-quantized; see [`choose`] for why that is not what decides), the
/// observer's own parameters for non-histogram observers. `feeds` are the selection
/// samples.
pub fn choose_local(
    g: &Graph,
    activations: &[String],
    observers: &HashMap<String, Box<dyn Observer>>,
    scheme: &QuantScheme,
    feeds: &[Feed],
) -> Result<(ActParams, Vec<AutoChoice>)> {
    let mut act = BTreeMap::new();
    let mut choices = Vec::new();
    let outputs: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let scorer = LocalScorer::new(g, activations, first_samples(feeds, LOCAL_SAMPLES))?;
    for t in activations {
        let Some(obs) = observers.get(t) else {
            continue;
        };
        let Some(h) = obs.as_any().downcast_ref::<HistogramObserver>() else {
            let p = obs
                .qparams(scheme)
                .map_err(core(format!("choosing parameters of activation `{t}`")))?;
            act.insert(t.clone(), (p.scales[0], p.zero_points[0]));
            continue;
        };
        let cands = h
            .candidates(scheme)
            .map_err(core(format!("range candidates of activation `{t}`")))?
            .swap_remove(0);
        let params: Vec<QParams> = cands
            .iter()
            .map(|(_, r)| {
                QParams::from_ranges(t, &[*r], scheme)
                    .map_err(core(format!("parameters of activation `{t}`")))
            })
            .collect::<Result<_>>()?;
        let mut scores = Vec::with_capacity(cands.len());
        let is_output = outputs.contains(t.as_str());
        for ((name, _), p) in cands.iter().zip(&params) {
            if is_output {
                scores.push((
                    *name,
                    if *name == "minmax" {
                        0.0
                    } else {
                        f64::INFINITY
                    },
                ));
                continue;
            }
            scores.push((*name, scorer.score(t, p)?));
        }
        let mut best = 0;
        for (i, (_, s)) in scores.iter().enumerate() {
            if *s < scores[best].1 {
                best = i;
            }
        }
        act.insert(
            t.clone(),
            (params[best].scales[0], params[best].zero_points[0]),
        );
        choices.push(AutoChoice {
            tensor: t.clone(),
            method: cands[best].0,
            range: cands[best].1,
            scores,
            local: Vec::new(),
        });
    }
    Ok((act, choices))
}

/// Samples of one feed (the first input's batch dimension).
fn batch_of(feed: &Feed) -> usize {
    feed.first()
        .map_or(1, |(_, t)| t.shape.first().copied().unwrap_or(1))
}

/// The leading feeds holding the first `n` samples (whole feeds: the last may go past).
fn first_samples(feeds: &[Feed], n: usize) -> &[Feed] {
    let mut seen = 0;
    let k = feeds
        .iter()
        .take_while(|f| {
            let take = seen < n;
            seen += batch_of(f);
            take
        })
        .count();
    &feeds[..k]
}

/// How [`choose`] scores one graph output against the float model's (see the module
/// docs; [`output_kinds`] decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputKind {
    /// A Softmax output `[N, C]` (through Identity/layout nodes): `KL(p_float ‖ p_quant)`
    /// per sample, both floored at [`PROB_FLOOR`] and renormalised.
    Probabilities,
    /// A classifier's scores: the only graph output, `[N, C]` with `C ≥ 2`, not a
    /// Softmax's: `KL(softmax(y_float) ‖ softmax(y_quant))` per sample.
    Logits,
    /// Anything else (a regressor, several outputs that are not probabilities): the
    /// squared error `Σ (y − y_float)²` per sample.
    Values,
}

impl OutputKind {
    /// Whether the output is a row of class scores per sample, whose top-1 the guard
    /// checks.
    pub fn is_classifier(self) -> bool {
        self != OutputKind::Values
    }

    /// The loss of one sample's row `quant` against the float model's `float` (f64;
    /// never negative, 0 when equal).
    pub fn loss(self, float: &[f32], quant: &[f32]) -> f64 {
        match self {
            OutputKind::Values => rel_err(float, quant).0,
            OutputKind::Logits => {
                let (lp, lq) = (log_softmax(float), log_softmax(quant));
                lp.iter()
                    .zip(&lq)
                    .map(|(a, b)| a.exp() * (a - b))
                    .sum::<f64>()
                    .max(0.0)
            }
            OutputKind::Probabilities => {
                let (p, q) = (floored(float), floored(quant));
                p.iter()
                    .zip(&q)
                    .map(|(a, b)| a * (a / b).ln())
                    .sum::<f64>()
                    .max(0.0)
            }
        }
    }
}

/// The least probability [`OutputKind::Probabilities`] counts: a quantized Softmax output
/// is a multiple of its scale (1/255 for `[0, 1]` in u8), so a class's 0 would make the KL
/// divergence infinite.
pub const PROB_FLOOR: f64 = 1e-6;

fn log_softmax(v: &[f32]) -> Vec<f64> {
    let m = v
        .iter()
        .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
    let lse = m + v
        .iter()
        .map(|&x| (f64::from(x) - m).exp())
        .sum::<f64>()
        .ln();
    v.iter().map(|&x| f64::from(x) - lse).collect()
}

fn floored(v: &[f32]) -> Vec<f64> {
    let f: Vec<f64> = v.iter().map(|&x| f64::from(x).max(PROB_FLOOR)).collect();
    let s: f64 = f.iter().sum();
    f.iter().map(|x| x / s).collect()
}

/// The kind of each graph output of `g` (see [`OutputKind`]): a 2-D output produced by a
/// Softmax over its last axis, possibly through Identity or layout-only nodes, is
/// probabilities; else the only output, 2-D with at least two columns (as far as the
/// graph's declared shape says), is logits; anything else is values.
pub fn output_kinds(g: &Graph) -> Vec<OutputKind> {
    let producer: HashMap<&str, &Node> = g
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().map(move |o| (o.as_str(), n)))
        .collect();
    let two_d = |vi: &ValueInfo| {
        vi.shape
            .as_ref()
            .is_none_or(|s| s.len() == 2 && s[1].known().is_none_or(|c| c >= 2))
    };
    g.outputs
        .iter()
        .map(|o| {
            let mut v = o.name.as_str();
            let mut softmax = false;
            for _ in 0..g.nodes.len() {
                let Some(n) = producer.get(v) else { break };
                if n.is(quantkit_graph::OpKind::Softmax) {
                    let last = if g.opset() >= 13 { -1 } else { 1 };
                    let axis = n.attr_int("axis", last).unwrap_or(0);
                    softmax = axis == -1 || axis == 1;
                    break;
                }
                if n.is(quantkit_graph::OpKind::Identity) || n.facts().layout {
                    match n.inputs.first() {
                        Some(i) if !i.is_empty() => v = i,
                        _ => break,
                    }
                } else {
                    break;
                }
            }
            if softmax && two_d(o) {
                OutputKind::Probabilities
            } else if g.outputs.len() == 1 && two_d(o) {
                OutputKind::Logits
            } else {
                OutputKind::Values
            }
        })
        .collect()
}

/// One graph output's objective, for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutputObjective {
    /// The graph output.
    pub name: String,
    /// How it is scored.
    pub kind: OutputKind,
    /// Its loss per choosing sample (KL divergence in nats, or squared error), all-minmax
    /// model.
    pub minmax_loss: f64,
    /// The same for the chosen model.
    pub auto_loss: f64,
}

/// What [`choose`] did, for the summary and `--json`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct AutoReport {
    /// One entry per activation that had candidates, in the order they were tried.
    pub choices: Vec<AutoChoice>,
    /// Each graph output's objective and loss.
    pub objectives: Vec<OutputObjective>,
    /// Samples of the choosing half.
    pub choose_samples: usize,
    /// Samples of the checking half (the choosing half again when there was only one
    /// batch).
    pub check_samples: usize,
    /// Objective of the all-minmax model on the choosing samples: each output's loss
    /// divided by the all-minmax model's, averaged over outputs, so 1 by construction.
    pub minmax_error: f64,
    /// Objective of the chosen model on the choosing samples (relative to all-minmax).
    pub auto_error: f64,
    /// Objective of the all-minmax model on the checking samples (1 by construction).
    pub minmax_check_error: f64,
    /// Objective of the chosen model on the checking samples (never above
    /// `minmax_check_error`).
    pub auto_check_error: f64,
    /// Top-1 agreements with float on the choosing half, all-minmax model (see `Errors`;
    /// 0 when no output is a classifier's).
    pub minmax_agree: usize,
    /// The same for the chosen model.
    pub auto_agree: usize,
    /// Top-1 agreements with float on the checking half, all-minmax model.
    pub minmax_check_agree: usize,
    /// The same for the chosen model (not below `minmax_check_agree` beyond noise: see
    /// the module docs).
    pub auto_check_agree: usize,
    /// Node evaluations the incremental search ran on the choosing half (each candidate
    /// from the first node it changes, plus moving the cached cut forward).
    pub nodes_run: usize,
    /// Node evaluations full re-runs of the same candidates would have cost.
    pub nodes_full: usize,
    /// Candidates the screen kept from a model run (locally worse than another).
    pub screened_out: usize,
    /// Of [`AutoReport::seconds`], the time spent on the screen's local errors.
    pub screen_seconds: f64,
    /// Activations whose change was undone by the check, in the order undone.
    pub reverted: Vec<String>,
    /// Runs of the quantized model (on either half).
    pub model_runs: usize,
    /// Of [`AutoReport::seconds`], the time spent computing the candidate ranges from the
    /// histograms (mostly entropy's KL search: quadratic in the bins, per activation).
    pub candidate_seconds: f64,
    /// Wall time of the search in seconds (candidates included).
    pub seconds: f64,
}

/// Each output's loss per sample of one model on one half, and its top-1 agreements.
#[derive(Debug, Clone)]
struct Losses {
    /// `[output][sample]`.
    per_output: Vec<Vec<f64>>,
    /// Per (sample, classifier output) pair, in a fixed order: whether its top-1 is the
    /// float model's.
    agrees: Vec<bool>,
}

impl Losses {
    /// Each output's total.
    fn totals(&self) -> Vec<f64> {
        self.per_output.iter().map(|v| v.iter().sum()).collect()
    }

    /// The objective, each output's loss divided by `norm` (the all-minmax model's
    /// total on the same samples) and averaged over outputs: outputs of different units
    /// (nats, squared box offsets) count alike, and the all-minmax model scores 1.
    fn errors(&self, norm: &[f64]) -> Errors {
        let n = self.per_output.iter().map(Vec::len).max().unwrap_or(0);
        let outs = self.per_output.len().max(1) as f64;
        let mut per_sample = vec![0f64; n];
        for (k, v) in self.per_output.iter().enumerate() {
            let d = norm.get(k).copied().filter(|&d| d > 0.0).unwrap_or(1.0) * outs;
            for (x, e) in per_sample.iter_mut().zip(v) {
                *x += e / d;
            }
        }
        Errors {
            total: per_sample.iter().sum(),
            per_sample,
            agree: self.agrees.iter().filter(|&&a| a).count(),
            agrees: self.agrees.clone(),
        }
    }
}

/// The objective of one model on one half: the total and each sample's share of it
/// (so two models can be compared sample by sample).
#[derive(Debug, Clone)]
struct Errors {
    total: f64,
    per_sample: Vec<f64>,
    /// Top-1 agreements with the float model: (sample, output) pairs of the classifier
    /// outputs whose largest score is the float model's.
    agree: usize,
    /// Per (sample, classifier output) pair, in a fixed order: whether its top-1 is the
    /// float model's.
    agrees: Vec<bool>,
}

impl Errors {
    /// Whether `self` loses top-1 agreement with the float model against `base` beyond
    /// the noise of the samples: of the pairs whose agreement differs, those `self` lost
    /// outnumber those it gained by more than [`AUTO_Z`] standard errors (a sign test
    /// on the discordant pairs, as McNemar's). One image of 128 is not evidence.
    fn loses_agreement(&self, base: &Errors) -> bool {
        if self.agrees.len() != base.agrees.len() {
            return false;
        }
        let (mut lost, mut gained) = (0f64, 0f64);
        for (a, b) in self.agrees.iter().zip(&base.agrees) {
            match (a, b) {
                (false, true) => lost += 1.0,
                (true, false) => gained += 1.0,
                _ => {}
            }
        }
        lost - gained > AUTO_Z * (lost + gained).sqrt()
    }

    /// Whether `self` is lower than `base` beyond the noise of the samples: the mean of the
    /// paired per-sample differences is below zero by more than [`AUTO_Z`] standard errors.
    fn significantly_below(&self, base: &Errors) -> bool {
        let n = self.per_sample.len();
        if n < 2 || n != base.per_sample.len() {
            return false;
        }
        let d: Vec<f64> = self
            .per_sample
            .iter()
            .zip(&base.per_sample)
            .map(|(a, b)| a - b)
            .collect();
        let mean = d.iter().sum::<f64>() / n as f64;
        let var = d.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
        mean < 0.0 && -mean > AUTO_Z * (var / n as f64).sqrt()
    }
}

/// Each output's loss per sample of `outs` (one model's outputs on `feeds`) against the
/// float outputs `reference`, scored by `kinds`. A sample is a row of the batch
/// dimension; an output whose first dimension is not the batch spreads its loss evenly
/// over the batch's samples (and is scored as values).
fn output_loss(
    feeds: &[Feed],
    outs: &[Outputs],
    reference: &[Outputs],
    kinds: &[OutputKind],
) -> Losses {
    let samples: usize = feeds.iter().map(batch_of).map(|b| b.max(1)).sum();
    let mut per_output = vec![vec![0f64; samples]; kinds.len()];
    let mut agrees = Vec::new();
    let mut base = 0;
    for ((feed, r), out) in feeds.iter().zip(reference).zip(outs) {
        let rows = batch_of(feed).max(1);
        for (k, ((_, rt), (_, qt))) in r.iter().zip(out).enumerate() {
            let (Some(rv), Some(qv)) = (rt.as_f32(), qt.as_f32()) else {
                continue;
            };
            let Some(kind) = kinds.get(k).copied() else {
                continue;
            };
            let by_row = rt.shape.first() == Some(&rows) && rv.len() == qv.len();
            let chunk = if by_row { rv.len() / rows } else { rv.len() };
            let classifier = kind.is_classifier() && by_row && rt.shape.len() == 2 && chunk >= 2;
            let kind = if classifier { kind } else { OutputKind::Values };
            for (i, (a, b)) in rv
                .chunks(chunk.max(1))
                .zip(qv.chunks(chunk.max(1)))
                .enumerate()
            {
                let e = kind.loss(a, b);
                if by_row {
                    per_output[k][base + i] += e;
                } else {
                    for x in &mut per_output[k][base..base + rows] {
                        *x += e / rows as f64;
                    }
                }
                if classifier {
                    agrees.push(argmax(a) == argmax(b));
                }
            }
        }
        base += rows;
    }
    Losses { per_output, agrees }
}

/// Index of the first largest value.
fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Outputs of `g` on `feeds`, full runs.
fn run_full(g: &Graph, feeds: &[Feed], what: &str) -> Result<Vec<Outputs>> {
    feeds
        .iter()
        .enumerate()
        .map(|(bi, f)| {
            execute(g, f.clone()).map_err(graph_err(format!(
                "running the {what} model on selection batch {bi} of --method auto"
            )))
        })
        .collect()
}

/// One activation's candidates: method, range and parameters, distinct parameters only
/// (the first of equal ones kept, minmax first).
type Cands = Vec<(&'static str, (f32, f32), (f32, i32))>;

/// The choosing and checking feeds: the first two thirds of the batches choose, the rest
/// check (at least one batch each; one batch does both).
pub fn split_feeds(feeds: &[Feed]) -> (&[Feed], &[Feed]) {
    if feeds.len() < 2 {
        return (feeds, feeds);
    }
    let k = (2 * feeds.len()).div_ceil(3).min(feeds.len() - 1);
    feeds.split_at(k)
}

/// Chooses the scale and zero point of every activation of `plan` that has an observer, by
/// the quantized model's output (see the module docs), screening candidates by local
/// error ([`AUTO_SCREEN`]). `g` is the prepared float graph ready for QDQ (opset raised),
/// `feeds` the selection samples (the first [`AUTO_SAMPLES`] calibration samples, whole
/// batches). Activations whose observer is not a histogram get the observer's own
/// parameters. `progress(done, total)` counts the activations searched.
pub fn choose(
    g: &Graph,
    plan: &Plan,
    options: &QdqOptions,
    observers: &HashMap<String, Box<dyn Observer>>,
    feeds: &[Feed],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(ActParams, AutoReport)> {
    choose_with(
        g,
        plan,
        options,
        observers,
        feeds,
        Some(AUTO_SCREEN),
        progress,
    )
}

/// [`choose`] with the screen set: `Some(k)` runs in the model only the `k` candidates
/// other than minmax with the least local error (in candidate order), `None` runs them
/// all (no local errors computed).
pub fn choose_with(
    g: &Graph,
    plan: &Plan,
    options: &QdqOptions,
    observers: &HashMap<String, Box<dyn Observer>>,
    feeds: &[Feed],
    screen: Option<usize>,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(ActParams, AutoReport)> {
    let t0 = std::time::Instant::now();
    let scheme = options.activation_scheme();
    let mut act = BTreeMap::new();
    let mut cands: BTreeMap<&str, Cands> = BTreeMap::new();
    for t in &plan.activations {
        let Some(obs) = observers.get(t) else {
            continue;
        };
        let Some(h) = obs.as_any().downcast_ref::<HistogramObserver>() else {
            let p = obs
                .qparams(&scheme)
                .map_err(core(format!("choosing parameters of activation `{t}`")))?;
            act.insert(t.clone(), (p.scales[0], p.zero_points[0]));
            continue;
        };
        let mut list: Cands = Vec::new();
        let all = h
            .candidates(&scheme)
            .map_err(core(format!("range candidates of activation `{t}`")))?
            .swap_remove(0);
        for (name, r) in all {
            let p = QParams::from_ranges(t, &[r], &scheme)
                .map_err(core(format!("parameters of activation `{t}`")))?;
            let sz = (p.scales[0], p.zero_points[0]);
            if !list.iter().any(|c| c.2 == sz) {
                list.push((name, r, sz));
            }
        }
        act.insert(t.clone(), list[0].2);
        cands.insert(t.as_str(), list);
    }
    let kinds = output_kinds(g);
    let mut report = AutoReport {
        candidate_seconds: t0.elapsed().as_secs_f64(),
        ..Default::default()
    };
    if feeds.is_empty() || cands.is_empty() {
        report.choices = cands
            .iter()
            .map(|(t, c)| AutoChoice {
                tensor: t.to_string(),
                method: c[0].0,
                range: c[0].1,
                scores: Vec::new(),
                local: Vec::new(),
            })
            .collect();
        report.seconds = t0.elapsed().as_secs_f64();
        return Ok((act, report));
    }
    let (pick, check) = split_feeds(feeds);
    report.choose_samples = pick.iter().map(batch_of).sum();
    report.check_samples = check.iter().map(batch_of).sum();
    let pick_ref = run_full(g, pick, "float")?;
    let check_ref = run_full(g, check, "float")?;
    let mut runs = 0usize;
    // The choosing half runs incrementally (only what lies downstream of the changed
    // tensor); the checking half, a few runs, in full.
    let mut inc = Incremental::new(insert_qdq(g.clone(), plan, &act, options)?, pick);
    let pick_loss = |inc: &mut Incremental, act: &ActParams| -> Result<Losses> {
        let mut q = insert_qdq(g.clone(), plan, act, options)?;
        let outs = inc.run(&mut q)?;
        Ok(output_loss(pick, &outs, &pick_ref, &kinds))
    };
    let check_loss = |act: &ActParams| -> Result<Losses> {
        let q = insert_qdq(g.clone(), plan, act, options)?;
        Ok(output_loss(
            check,
            &run_full(&q, check, "quantized")?,
            &check_ref,
            &kinds,
        ))
    };
    // Topological order: graph inputs first, then by producing node.
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for o in &n.outputs {
            producer.entry(o.as_str()).or_insert(i + 1);
        }
    }
    let outputs: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut order: Vec<&str> = cands.keys().copied().collect();
    order.sort_by_key(|t| producer.get(t).copied().unwrap_or(0));
    let total = order.len();
    // The screen's float values: only for activations with a choice to make.
    let scorer = match screen {
        Some(_) => {
            let ts = std::time::Instant::now();
            let screened: Vec<String> = order
                .iter()
                .filter(|t| cands[*t].len() > 2 && !outputs.contains(*t))
                .map(|t| t.to_string())
                .collect();
            let s = if screened.is_empty() {
                None
            } else {
                Some(LocalScorer::new(
                    g,
                    &screened,
                    first_samples(pick, LOCAL_SAMPLES),
                )?)
            };
            report.screen_seconds += ts.elapsed().as_secs_f64();
            s
        }
        None => None,
    };
    let mm_pick = pick_loss(&mut inc, &act)?;
    runs += 1;
    let norm_pick = mm_pick.totals();
    let mut best = mm_pick.errors(&norm_pick);
    report.minmax_error = best.total;
    report.minmax_agree = best.agree;
    let minmax_act = act.clone();
    let mut accepted: Vec<(&str, (f32, i32))> = Vec::new();
    for (done, t) in order.iter().enumerate() {
        let list = &cands[t];
        let mut scores: Vec<(&'static str, f64)> = vec![(list[0].0, best.total)];
        let mut local: Vec<(&'static str, f64)> = Vec::new();
        let mut cur = 0;
        if !outputs.contains(t) {
            // Which candidates run in the model: all, or the screen's best (kept in
            // candidate order, so a screen that keeps all is the unscreened search).
            let mut run: Vec<usize> = (1..list.len()).collect();
            if let (Some(k), Some(sc)) = (screen, scorer.as_ref()) {
                if run.len() > k {
                    let ts = std::time::Instant::now();
                    let scheme = options.activation_scheme();
                    for c in &list[1..] {
                        let p = QParams::from_ranges(t, &[c.1], &scheme)
                            .map_err(core(format!("parameters of activation `{t}`")))?;
                        local.push((c.0, sc.score(t, &p)?));
                    }
                    let mut by: Vec<usize> = (0..local.len()).collect();
                    // Stable: equal local errors keep candidate order.
                    by.sort_by(|&a, &b| local[a].1.total_cmp(&local[b].1));
                    let mut keep: Vec<usize> = by[..k].iter().map(|i| i + 1).collect();
                    keep.sort_unstable();
                    report.screened_out += run.len() - keep.len();
                    run = keep;
                    report.screen_seconds += ts.elapsed().as_secs_f64();
                }
            }
            let start = best.clone();
            for ci in run {
                let c = &list[ci];
                act.insert(t.to_string(), c.2);
                let e = pick_loss(&mut inc, &act)?.errors(&norm_pick);
                runs += 1;
                scores.push((c.0, e.total));
                // Lower objective beyond the noise, and no top-1 lost to the float model
                // on the choosing half.
                if e.total < best.total
                    && e.significantly_below(&start)
                    && !e.loses_agreement(&start)
                {
                    best = e;
                    cur = ci;
                }
            }
            act.insert(t.to_string(), list[cur].2);
            if cur != 0 {
                inc.accept(insert_qdq(g.clone(), plan, &act, options)?);
            }
        }
        if cur != 0 {
            accepted.push((t, list[0].2));
        }
        report.choices.push(AutoChoice {
            tensor: t.to_string(),
            method: list[cur].0,
            range: list[cur].1,
            scores,
            local,
        });
        progress(done + 1, total);
    }
    report.auto_error = best.total;
    report.auto_agree = best.agree;
    let mm_check_loss = check_loss(&minmax_act)?;
    runs += 1;
    let norm_check = mm_check_loss.totals();
    let mm_check = mm_check_loss.errors(&norm_check);
    report.minmax_check_error = mm_check.total;
    report.minmax_check_agree = mm_check.agree;
    let mut check_err = if accepted.is_empty() {
        mm_check.clone()
    } else {
        runs += 1;
        check_loss(&act)?.errors(&norm_check)
    };
    // Undo, the last first, until the checking half is no worse than minmax in the
    // objective and loses no top-1 agreement with the float model beyond noise.
    while check_err.total > mm_check.total || check_err.loses_agreement(&mm_check) {
        let Some((t, mm)) = accepted.pop() else {
            break;
        };
        act.insert(t.to_string(), mm);
        report.reverted.push(t.to_string());
        if let Some(c) = report.choices.iter_mut().find(|c| c.tensor == t) {
            let l = &cands[t][0];
            c.method = l.0;
            c.range = l.1;
        }
        check_err = if accepted.is_empty() {
            mm_check.clone()
        } else {
            runs += 1;
            check_loss(&act)?.errors(&norm_check)
        };
    }
    report.auto_check_error = check_err.total;
    report.auto_check_agree = check_err.agree;
    let final_pick = pick_loss(&mut inc, &act)?;
    runs += 1;
    let e = final_pick.errors(&norm_pick);
    report.auto_error = e.total;
    report.auto_agree = e.agree;
    let per = report.choose_samples.max(1) as f64;
    report.objectives = g
        .outputs
        .iter()
        .zip(&kinds)
        .zip(norm_pick.iter().zip(final_pick.totals()))
        .map(|((o, &kind), (&mm, au))| OutputObjective {
            name: o.name.clone(),
            kind,
            minmax_loss: mm / per,
            auto_loss: au / per,
        })
        .collect();
    report.nodes_run = inc.nodes_run;
    report.nodes_full = inc.nodes_full;
    report.model_runs = runs;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok((act, report))
}
