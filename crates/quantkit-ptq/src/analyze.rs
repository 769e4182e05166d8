//! Per-layer quantization error, and which layer is to blame (issue 18, `quantkit analyze`).
//!
//! A *layer* is a quantized node of the [`Plan`], with a fused `Relu`/`Clip` counted as part
//! of its Conv/Gemm/MatMul (one layer `conv1+relu1`). Each layer owns its weights and its
//! output activation (the Q/DQ pair after it). For every layer [`analyze`] measures:
//!
//! - **weight error**: `DequantizeLinear(w_q)` against the float initializer, per tensor and
//!   per output channel (MSE, SQNR, max |error|);
//! - **local SQNR**: the layer alone in the QDQ graph (its nodes, the Q/DQ nodes that feed
//!   them and its output Q/DQ) run on the float model's values, against the float output —
//!   the error this layer adds;
//! - **propagated SQNR**: the same value in the fully quantized graph against the float
//!   graph — the error accumulated up to here;
//! - **sensitivity** (the expensive part, `top_k` layers): the model-output SQNR and top-1
//!   agreement with this layer left in float (its weights and output activation; everything
//!   else quantized with the same calibration ranges), the share of the output error that
//!   recovers, and the same figures with only this layer quantized.
//!
//! SQNR is `10·log10(Σ ref² / Σ (ref − q)²)` in dB, summed over every element of every
//! sample (as [`quantkit_core::ErrorMetrics`]); `+∞` (JSON `null`) when the error is zero.
//! One float pass and one QDQ pass per batch give the local and propagated figures; memory
//! is one batch's activations plus the float model outputs of the evaluation samples (kept
//! for the sensitivity passes), never all activations of all samples.
//!
//! [`Setup`] prepares, plans and calibrates a float graph once (the same stages as
//! [`crate::quantize_static`]); every variant graph reuses its activation parameters.
//! Data come as feeds (`(input name, tensor)` lists, one batch each), so this module does not
//! depend on how data are loaded.

use crate::error::{core, graph as graph_err, PtqError, Result};
use crate::qdq::{activation_scheme_16, insert_qdq_wide, plan_with, Plan, QdqOptions};
use crate::reuse::{Keep, Reuse};
use crate::{prepare, upgrade_opset_13, PrepareReport, PtqConfig};
use quantkit_core::{Granularity, Observer};
use quantkit_graph::{execute, execute_with, Graph, Node, OpKind, QuantInputs, Tensor, Uses};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

mod detail;
pub use detail::{
    details, weight_picture, ActivationRange, BitPoint, Details, WeightPicture, BITS,
};

/// One batch: the value of every model input.
pub type Feed = Vec<(String, Tensor)>;

/// A prepared float graph with its quantization plan and calibrated activation parameters:
/// everything needed to write the QDQ graph and its one-layer variants.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The prepared float graph (folded, raised to opset 13 where QDQ needs it): the graph
    /// the QDQ graph is made from, with the same value and node names.
    pub float: Graph,
    /// Which nodes and activations are quantized.
    pub plan: Plan,
    /// Scale and zero point of every activation of the plan.
    pub act: BTreeMap<String, (f32, i32)>,
    /// The 16-bit parameters of every activation of the plan: symmetric int16 (zero point
    /// 0), per tensor, from the same observers and method as `act`. Used where mixed
    /// precision gives a layer int16 activations ([`crate::mixed::Precision::Act16`]).
    pub wide: BTreeMap<String, (f32, i32)>,
    /// Weight and activation types.
    pub options: QdqOptions,
    /// What preparation changed.
    pub prepare: PrepareReport,
    /// Calibration samples (batch dimension summed over the feeds).
    pub calibration_samples: usize,
    /// What `--method auto` chose and measured (`None` for the other methods).
    pub auto: Option<crate::auto::AutoReport>,
    /// Nodes (at any subgraph depth) that produced no value on the calibration data: the
    /// branch of an `If` the data never takes (silero-vad's 8 kHz network on 16 kHz
    /// audio), a `Loop` body run zero times. Their layers cannot change what the data
    /// measure: the sensitivity ranking and `--target` skip them.
    pub unreached: BTreeSet<String>,
}

/// Streaming sums of one comparison: Σref², Σ(ref − q)², max |ref − q|, element count.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    signal: f64,
    noise: f64,
    max: f64,
    n: u64,
}

impl Acc {
    fn add(&mut self, reference: &[f32], approx: &[f32]) {
        for (&a, &b) in reference.iter().zip(approx) {
            let (a, b) = (f64::from(a), f64::from(b));
            let e = a - b;
            self.signal += a * a;
            self.noise += e * e;
            self.max = self.max.max(e.abs());
        }
        self.n += reference.len().min(approx.len()) as u64;
    }
    fn stats(&self) -> Stats {
        Stats {
            sqnr_db: sqnr(self.signal, self.noise),
            mse: if self.n == 0 {
                0.0
            } else {
                self.noise / self.n as f64
            },
            max_abs: self.max,
            elements: self.n,
        }
    }
}

/// Per-channel sums along axis 1 (`[N, C, ...]`), for the worst-channel figures.
#[derive(Debug, Clone, Default)]
struct ChannelAcc(Vec<Acc>);

impl ChannelAcc {
    fn add(&mut self, shape: &[usize], reference: &[f32], approx: &[f32]) {
        if shape.len() < 2 || reference.len() != approx.len() {
            return;
        }
        let c = shape[1].max(1);
        let inner: usize = shape[2..].iter().product::<usize>().max(1);
        if self.0.len() != c {
            self.0 = vec![Acc::default(); c];
        }
        for (k, (r, a)) in reference
            .chunks(inner)
            .zip(approx.chunks(inner))
            .enumerate()
        {
            self.0[k % c].add(r, a);
        }
    }
    /// The channel with the lowest SQNR among channels with signal (a channel that is all
    /// zero in float, e.g. dead after Relu, is no evidence).
    fn worst(&self) -> Option<WorstChannel> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, a)| a.signal > 0.0)
            .map(|(i, a)| (i, sqnr(a.signal, a.noise)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(channel, sqnr_db)| WorstChannel { channel, sqnr_db })
    }
}

/// The channel (axis 1) of an activation with the lowest SQNR.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct WorstChannel {
    /// Channel index.
    pub channel: usize,
    /// Its SQNR in dB.
    pub sqnr_db: f64,
}

/// `10·log10(signal / noise)` with [`quantkit_core::ErrorMetrics`]' conventions.
fn sqnr(signal: f64, noise: f64) -> f64 {
    match (signal == 0.0, noise == 0.0) {
        (true, true) => 0.0,
        (false, true) => f64::INFINITY,
        (true, false) => f64::NEG_INFINITY,
        (false, false) => 10.0 * (signal / noise).log10(),
    }
}

/// Error of an approximation against its float reference.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Stats {
    /// `10·log10(Σ ref² / Σ (ref − q)²)` in dB (`null` in JSON when infinite: no error).
    pub sqnr_db: f64,
    /// Mean squared error.
    pub mse: f64,
    /// Largest absolute error.
    pub max_abs: f64,
    /// Elements compared.
    pub elements: u64,
}

/// Quantization error of one weight tensor.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WeightError {
    /// The float initializer.
    pub tensor: String,
    /// Output-channel axis of the per-channel figures.
    pub axis: usize,
    /// Over the whole tensor.
    pub total: Stats,
    /// Per output channel, in channel order.
    pub channels: Vec<Stats>,
    /// Index of the channel with the lowest SQNR.
    pub worst_channel: usize,
}

/// Model-output figures of one graph against the float graph.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct OutputError {
    /// SQNR over every float graph output, in dB.
    pub sqnr_db: f64,
    /// Output MSE.
    pub mse: f64,
    /// Share of rows whose argmax (last axis of the first output) agrees with the float
    /// model's; `null` when the first output has no class axis.
    pub top1_agreement: Option<f64>,
}

/// Sensitivity of the model output to one layer.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sensitivity {
    /// Output error with this layer left in float, everything else quantized.
    pub left_float: OutputError,
    /// Share of the fully quantized model's output error (squared) that disappears when this
    /// layer is left in float: `1 − mse(left float) / mse(all quantized)`.
    pub recovered: f64,
    /// Output error with only this layer quantized (its weights, its input and output
    /// activations); `None` when that pass was not asked for
    /// ([`AnalyzeOptions::left_float_only`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only_quantized: Option<OutputError>,
}

/// Everything measured about one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerReport {
    /// The layer's first node (the Conv of a fused Conv+Relu).
    pub name: String,
    /// Operators, `+`-joined for a fused pair (`Conv+Relu`).
    pub op: String,
    /// Names of the layer's nodes.
    pub nodes: Vec<String>,
    /// The quantized output activation measured (float graph name), if the layer has one.
    pub output: Option<String>,
    /// Weights of the layer.
    pub weights: Vec<WeightError>,
    /// Output error with only this layer quantized, its inputs taken from the float run.
    pub local: Option<Stats>,
    /// The channel of the output with the lowest local SQNR: a layer that flattens a few
    /// channels (an outlier channel widening a per-tensor range) shows here even when the
    /// tensor's SQNR, dominated by its largest channel, looks healthy.
    pub local_worst_channel: Option<WorstChannel>,
    /// Output error in the fully quantized graph.
    pub propagated: Option<Stats>,
    /// The channel of the output with the lowest propagated SQNR.
    pub propagated_worst_channel: Option<WorstChannel>,
    /// Output sensitivity, for the layers it was run on.
    pub sensitivity: Option<Sensitivity>,
}

/// The result of [`analyze`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// Evaluation samples (batch dimension summed over the feeds).
    pub samples: usize,
    /// Calibration samples.
    pub calibration_samples: usize,
    /// The fully quantized model against the float model.
    pub output: OutputError,
    /// Evaluation samples the sensitivity passes ran on ([`AnalyzeOptions::sensitivity_samples`]):
    /// whole batches spread over the data; `samples` when every batch ran.
    pub sensitivity_samples: usize,
    /// Layers ranked, the most to blame first: layers with a sensitivity by `recovered`
    /// (descending), then the others by local SQNR, the lower of the tensor's and its worst
    /// channel's (ascending).
    pub layers: Vec<LayerReport>,
    /// Propagated error of every quantized activation, in graph order.
    pub activations: Vec<(String, Stats)>,
}

/// Options of [`analyze`].
#[derive(Debug, Clone, Default)]
pub struct AnalyzeOptions {
    /// Run sensitivity on the `k` layers with the lowest local SQNR (of the tensor or of its
    /// worst channel) only (`None`: all;
    /// `Some(0)`: none).
    pub top_k: Option<usize>,
    /// Time for the sensitivity passes: run them on the layers (of `top_k`, in order of
    /// local SQNR) whose estimated cost fits. A layer's passes run only from its first node
    /// on ([`crate::reuse`]), on the [`AnalyzeOptions::sensitivity_samples`] batches: its
    /// estimate is, per pass, the time of writing the QDQ graph plus the quantized pass's
    /// time scaled by the share of samples and by the share of the graph's nodes from the
    /// layer's first node to the end ([`sensitivity_cost`]). The estimate is deterministic
    /// given the two times measured; those (and so the number of layers covered) vary with
    /// the machine's load.
    pub budget: Option<std::time::Duration>,
    /// Run the sensitivity passes on about this many evaluation samples (whole batches,
    /// spread evenly over the data, at least one batch) instead of all (`None`). A ranking
    /// needs far fewer samples than a target's bound: the share of the output error a layer
    /// recovers is summed over every output element.
    pub sensitivity_samples: Option<usize>,
    /// Only the left-in-float pass per layer (what the ranking uses), not the
    /// only-this-layer-quantized one ([`Sensitivity::only_quantized`] is then `None`): half
    /// the cost (`quantkit quantize --target`).
    pub left_float_only: bool,
}

/// Estimated seconds of one layer's sensitivity passes ([`AnalyzeOptions::budget`]):
/// `passes · (build + pass · samples_share · nodes_share)`, where `build` is the time of
/// writing one QDQ graph, `pass` the fully quantized pass over every evaluation batch,
/// `samples_share` the share of the evaluation samples the passes run on and `nodes_share`
/// the share of the QDQ graph's nodes from the layer's first node on (a pass runs only from
/// its first change on).
pub fn sensitivity_cost(
    passes: usize,
    build: f64,
    pass: f64,
    samples_share: f64,
    nodes_share: f64,
) -> f64 {
    passes as f64 * (build + pass * samples_share * nodes_share)
}

/// The evaluation batches the sensitivity passes run on: all when `want` is `None` or
/// covers every sample, else the fewest batches (at least one) holding `want` samples by
/// the average batch size, spread evenly (batch `⌊i·n/m⌋` for `i < m`).
pub fn sensitivity_batches(batch_samples: &[usize], want: Option<usize>) -> Vec<usize> {
    let n = batch_samples.len();
    let total: usize = batch_samples.iter().sum();
    let Some(want) = want.filter(|&w| w < total && n > 1) else {
        return (0..n).collect();
    };
    let mean = total as f64 / n as f64;
    let m = ((want as f64 / mean).ceil() as usize).clamp(1, n);
    (0..m).map(|i| i * n / m).collect()
}

/// The inputs and outputs one quantized node reads and writes as activations, by the
/// registry's `quant_inputs` fact (as [`plan`] chooses them).
pub(crate) fn node_acts(n: &Node) -> Vec<&str> {
    let mut v: Vec<&str> = match n.facts().quant_inputs {
        QuantInputs::First => n.inputs.first().map(String::as_str).into_iter().collect(),
        QuantInputs::All => n.inputs.iter().map(String::as_str).collect(),
        QuantInputs::None => Vec::new(),
    };
    if let Some(o) = n.outputs.first() {
        v.push(o);
    }
    v
}

/// A layer of the plan: its nodes (a producer and its fused activation, or one node).
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(crate) nodes: Vec<String>,
    pub(crate) op: String,
    /// Output activation (float graph name) with Q/DQ.
    pub(crate) output: Option<String>,
}

impl Setup {
    /// Prepares `graph`, plans it with `config` (exclusions, types) and calibrates the
    /// activations on `calib` with `config.method` (per-tensor observers, as
    /// [`crate::calibrate()`]). `progress(done, total)` counts feeds.
    pub fn new(
        mut graph: Graph,
        config: &PtqConfig,
        calib: &[Feed],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Setup> {
        if !(2..=8).contains(&config.qdq.weight_bits) {
            return Err(PtqError::InvalidOption(format!(
                "--weight-bits {}: supported are 2 to 8 (stored as int8)",
                config.qdq.weight_bits
            )));
        }
        if calib.is_empty() {
            return Err(PtqError::EmptyCalibration);
        }
        let prep = prepare(&mut graph)?;
        let exclude: HashSet<String> = config.exclude.iter().cloned().collect();
        let mut plan = plan_with(&graph, &exclude, config.quantize_statistics)?;
        let wanted: HashSet<&str> = plan.activations.iter().map(String::as_str).collect();
        let mut observers: HashMap<String, Box<dyn Observer>> = HashMap::new();
        let mut ranks = HashMap::new();
        let mut samples = 0;
        for (bi, feed) in calib.iter().enumerate() {
            samples += batch_of(feed);
            let mut err = None;
            execute_with(&graph, feed.clone(), |name, t| {
                ranks.insert(name.to_string(), t.rank());
                if err.is_some() || !wanted.contains(name) {
                    return;
                }
                let Some(x) = t.as_f32() else { return };
                let obs = observers
                    .entry(name.to_string())
                    .or_insert_with(|| config.method.observer(name, Granularity::PerTensor));
                if let Err(e) = obs.observe(x, &t.shape) {
                    err = Some(PtqError::Core {
                        context: format!("calibrating tensor `{name}`"),
                        source: Box::new(e),
                    });
                }
            })
            .map_err(graph_err(format!(
                "running the float model on calibration batch {bi}"
            )))?;
            if let Some(e) = err {
                return Err(e);
            }
            progress(bi + 1, calib.len());
        }
        let scheme = config.qdq.activation_scheme();
        let mut act = BTreeMap::new();
        for t in &plan.activations {
            if act.contains_key(t) {
                continue;
            }
            if let Some(obs) = observers.get(t) {
                let p = obs
                    .qparams(&scheme)
                    .map_err(core(format!("choosing parameters of activation `{t}`")))?;
                act.insert(t.clone(), (p.scales[0], p.zero_points[0]));
            }
        }
        plan.activations.retain(|t| act.contains_key(t));
        let scheme16 = activation_scheme_16();
        let mut wide = BTreeMap::new();
        for t in &plan.activations {
            if let Some(obs) = observers.get(t) {
                let p = obs.qparams(&scheme16).map_err(core(format!(
                    "choosing 16-bit parameters of activation `{t}`"
                )))?;
                wide.insert(t.clone(), (p.scales[0], p.zero_points[0]));
            }
        }
        let unreached: BTreeSet<String> = all_nodes(&graph)
            .into_iter()
            .filter(|n| {
                !n.outputs
                    .iter()
                    .any(|o| !o.is_empty() && ranks.contains_key(o.as_str()))
            })
            .map(|n| n.name.clone())
            .collect();
        upgrade_opset_13(&mut graph, &ranks)?;
        graph.meta.ir_version = graph.meta.ir_version.max(7);
        let mut auto = None;
        if config.method == quantkit_core::CalibrationMethod::Auto {
            let mut n = 0;
            let kept: Vec<Feed> = calib
                .iter()
                .take_while(|f| {
                    let take = n < crate::auto::AUTO_SAMPLES;
                    n += batch_of(f);
                    take
                })
                .cloned()
                .collect();
            let (a, r) = crate::auto::choose(
                &graph,
                &plan,
                &config.qdq,
                &observers,
                &kept,
                &mut |_, _| {},
            )?;
            act = a;
            auto = Some(r);
        }
        Ok(Setup {
            float: graph,
            plan,
            act,
            wide,
            options: config.qdq.clone(),
            prepare: prep,
            calibration_samples: samples,
            auto,
            unreached,
        })
    }

    /// Whether the calibration data ran any node of the layer named by its first node
    /// `layer` ([`Setup::unreached`]).
    pub fn reached(&self, layer: &[String]) -> bool {
        layer.iter().any(|n| !self.unreached.contains(n))
    }

    /// The fully quantized QDQ graph (what `quantize_static` writes for the same data).
    pub fn quantized(&self) -> Result<Graph> {
        self.variant(&|_| true, &HashSet::new())
    }

    /// The QDQ graph with only the nodes `keep` accepts quantized (weights and the
    /// activations they read and write), except the activations in `drop`.
    pub(crate) fn variant(
        &self,
        keep: &dyn Fn(&str) -> bool,
        drop: &HashSet<&str>,
    ) -> Result<Graph> {
        self.variant_bits(keep, drop, &HashMap::new(), &HashSet::new())
    }

    /// [`Setup::variant`] with per-node weight bit widths and the activations in `wide`
    /// quantized to int16 ([`crate::mixed`]).
    pub(crate) fn variant_bits(
        &self,
        keep: &dyn Fn(&str) -> bool,
        drop: &HashSet<&str>,
        weight_bits: &HashMap<String, u8>,
        wide: &HashSet<&str>,
    ) -> Result<Graph> {
        let mut p = self.plan.clone();
        p.quantized.retain(|n| keep(n));
        let kept: HashSet<&str> = p.quantized.iter().map(String::as_str).collect();
        let mut want: HashSet<&str> = HashSet::new();
        for n in all_nodes(&self.float) {
            if kept.contains(n.name.as_str()) {
                want.extend(node_acts(n));
            }
        }
        p.activations
            .retain(|t| want.contains(t.as_str()) && !drop.contains(t.as_str()));
        let wide: HashSet<String> = p
            .activations
            .iter()
            .filter(|t| wide.contains(t.as_str()) && self.wide.contains_key(*t))
            .cloned()
            .collect();
        let act: BTreeMap<String, (f32, i32)> = p
            .activations
            .iter()
            .map(|t| {
                let params = if wide.contains(t) {
                    self.wide[t]
                } else {
                    self.act[t]
                };
                (t.clone(), params)
            })
            .collect();
        insert_qdq_wide(
            self.float.clone(),
            &p,
            &act,
            &self.options,
            weight_bits,
            &wide,
        )
    }

    /// The plan's layers in graph order.
    pub(crate) fn layers(&self) -> Vec<Layer> {
        let fused: HashMap<&str, &str> = self
            .plan
            .fused
            .iter()
            .map(|(p, a)| (p.as_str(), a.as_str()))
            .collect();
        let fused_act: HashSet<&str> = fused.values().copied().collect();
        let by_name: HashMap<&str, &Node> = all_nodes(&self.float)
            .into_iter()
            .map(|n| (n.name.as_str(), n))
            .collect();
        let acts: HashSet<&str> = self.plan.activations.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        for q in &self.plan.quantized {
            if fused_act.contains(q.as_str()) {
                continue;
            }
            let mut nodes = vec![q.clone()];
            if let Some(a) = fused.get(q.as_str()) {
                nodes.push(a.to_string());
            }
            let op = nodes
                .iter()
                .map(|n| by_name.get(n.as_str()).map_or("?", |n| n.op_type.as_str()))
                .collect::<Vec<_>>()
                .join("+");
            let last = by_name.get(nodes.last().expect("one node").as_str());
            let output = last
                .and_then(|n| n.outputs.first())
                .filter(|o| acts.contains(o.as_str()))
                .cloned();
            out.push(Layer { nodes, op, output });
        }
        out
    }
}

/// Every node of `g` at every subgraph depth (If branches, Loop and Scan bodies), in graph
/// order, each graph's nodes before its subgraphs'. The plan names quantized nodes at any
/// depth, so what acts on a layer looks its nodes up here.
pub(crate) fn all_nodes(g: &Graph) -> Vec<&Node> {
    fn walk<'a>(g: &'a Graph, out: &mut Vec<&'a Node>) {
        for n in &g.nodes {
            out.push(n);
            for sub in n.subgraphs() {
                walk(sub, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(g, &mut out);
    out
}

/// `g` and the branches of its `If` nodes, recursively through `If`s only (values there
/// are computed at most once per run; Loop and Scan bodies are left out).
fn once_scopes(g: &Graph) -> Vec<&Graph> {
    let mut out = vec![g];
    for n in &g.nodes {
        if n.is(OpKind::If) {
            for sub in n.subgraphs() {
                out.extend(once_scopes(sub));
            }
        }
    }
    out
}

/// Samples in a feed: the batch dimension of its first input.
fn batch_of(feed: &Feed) -> usize {
    feed.first()
        .map_or(0, |(_, t)| t.shape.first().copied().unwrap_or(1))
}

/// The value that holds quantized activation `t` in the QDQ graph `q`: the output of the
/// `DequantizeLinear` behind the `QuantizeLinear` that reads `t` (or `t_float` when `t` is a
/// graph output, whose producer was renamed).
fn dq_value(q: &Graph, uses: &Uses, producer_output: &str) -> Option<String> {
    let qn = uses
        .readers(producer_output)
        .iter()
        .find(|&&i| q.nodes[i].is(OpKind::QuantizeLinear))?;
    let dn = uses
        .readers(&q.nodes[*qn].outputs[0])
        .iter()
        .find(|&&i| q.nodes[i].is(OpKind::DequantizeLinear))?;
    q.nodes[*dn].outputs.first().cloned()
}

/// A layer of the QDQ graph cut out with its feeding Q/DQ nodes: fed float values, it
/// computes the layer's quantized output alone.
struct Cone {
    graph: Graph,
    feeds: Vec<String>,
    reference: String,
    layer: usize,
}

/// Cuts layer `nodes` out of scope `si` of the QDQ graph (`scopes[0]` the top level, the
/// others `If` branches, parents before children), with the Q/DQ (and Constant) nodes that
/// feed them, in that scope or an enclosing one, back to values the float graph has
/// (`float_values`) or initializers of any scope, and its output Q/DQ up to `measured`.
fn cone(
    scopes: &[&Graph],
    scope_uses: &[Uses],
    si: usize,
    float_values: &HashSet<&str>,
    all_inits: &HashMap<&str, &Tensor>,
    nodes: &[String],
    measured: &str,
) -> Option<(Graph, Vec<String>)> {
    let (q, uses) = (scopes[si], &scope_uses[si]);
    // (scope, node index) pairs.
    let mut set: HashSet<(usize, usize)> = HashSet::new();
    for n in nodes {
        set.insert((si, q.nodes.iter().position(|x| &x.name == n)?));
    }
    // The output Q and DQ between the layer's last node and `measured`.
    let last_name = nodes.last()?;
    let last = q.nodes.iter().position(|x| &x.name == last_name)?;
    let dn = uses.producer(measured)?;
    if dn != last {
        let qn = uses.producer(q.nodes[dn].inputs.first()?)?;
        set.insert((si, qn));
        set.insert((si, dn));
    }
    let node = |(s, i): (usize, usize)| &scopes[s].nodes[i];
    let mut stack: Vec<String> = set
        .iter()
        .flat_map(|&k| node(k).inputs.iter().cloned())
        .collect();
    let mut feeds = Vec::new();
    let mut inits = BTreeMap::new();
    let mut seen = HashSet::new();
    while let Some(v) = stack.pop() {
        if v.is_empty() || !seen.insert(v.clone()) {
            continue;
        }
        if let Some(t) = all_inits.get(v.as_str()) {
            inits.insert(v, (*t).clone());
            continue;
        }
        // The producer in the layer's scope, else in an enclosing one (outer values).
        let producer = uses.producer(&v).map(|p| (si, p)).or_else(|| {
            (0..si)
                .rev()
                .find_map(|s| scope_uses[s].producer(&v).map(|p| (s, p)))
        });
        match producer {
            Some(k) if set.contains(&k) => {}
            // A weight written as a Constant node (inside a branch, as exporters do).
            Some(k) if node(k).is(OpKind::Constant) => {
                set.insert(k);
            }
            Some(k)
                if node(k).is(OpKind::QuantizeLinear) || node(k).is(OpKind::DequantizeLinear) =>
            {
                set.insert(k);
                stack.extend(node(k).inputs.iter().cloned());
            }
            _ if float_values.contains(v.as_str()) => feeds.push(v),
            _ => return None,
        }
    }
    let mut idx: Vec<(usize, usize)> = set.into_iter().collect();
    idx.sort_unstable();
    let info = |name: &str| quantkit_graph::ValueInfo {
        name: name.to_string(),
        dtype: None,
        onnx_elem_type: 0,
        shape: None,
    };
    let top = scopes[0];
    let g = Graph {
        name: format!("cone of {}", nodes[0]),
        nodes: idx.iter().map(|&k| node(k).clone()).collect(),
        inputs: feeds.iter().map(|f| info(f)).collect(),
        outputs: vec![info(measured)],
        initializers: inits,
        opset_imports: top.opset_imports.clone(),
        meta: top.meta.clone(),
        ..Default::default()
    };
    Some((g, feeds))
}

/// Output-channel axis of a weight: the DequantizeLinear's `axis` when per-channel, else
/// the layout's (Conv 0, ConvTranspose 1, Gemm 1 or 0 with `transB`, MatMul last).
fn channel_axis(n: &Node, dq: &Node, rank: usize) -> usize {
    if let Ok(a) = dq.attr_int("axis", -1) {
        if a >= 0 && dq.inputs.get(1).is_some() {
            return a as usize;
        }
    }
    let a = match n.kind() {
        Some(OpKind::ConvTranspose) => 1,
        Some(OpKind::Gemm) if n.attr_int("transB", 0).unwrap_or(0) != 0 => 0,
        Some(OpKind::Gemm) => 1,
        Some(OpKind::MatMul) => rank.saturating_sub(1),
        _ => 0,
    };
    a.min(rank.saturating_sub(1))
}

/// Weight errors of the weighted nodes of `layer`.
fn weight_errors(float: &Graph, q: &Graph, uses: &Uses, layer: &Layer) -> Result<Vec<WeightError>> {
    let mut out = Vec::new();
    for name in &layer.nodes {
        let (Some(fnode), Some(qnode)) = (
            float.nodes.iter().find(|n| &n.name == name),
            q.nodes.iter().find(|n| &n.name == name),
        ) else {
            continue;
        };
        if fnode.facts().weight.is_none() {
            continue;
        }
        let (Some(wname), Some(wq)) = (fnode.inputs.get(1), qnode.inputs.get(1)) else {
            continue;
        };
        let Some(w) = float.initializers.get(wname).filter(|t| t.dtype.is_float()) else {
            continue;
        };
        let Some(p) = uses.producer(wq) else { continue };
        let dq = &q.nodes[p];
        if !dq.is(OpKind::DequantizeLinear) {
            continue;
        }
        let g = Graph {
            name: format!("{name} weight"),
            nodes: vec![dq.clone()],
            outputs: vec![quantkit_graph::ValueInfo {
                name: wq.clone(),
                dtype: None,
                onnx_elem_type: 0,
                shape: None,
            }],
            initializers: dq
                .inputs
                .iter()
                .filter_map(|i| q.initializers.get(i).map(|t| (i.clone(), t.clone())))
                .collect(),
            opset_imports: q.opset_imports.clone(),
            meta: q.meta.clone(),
            ..Default::default()
        };
        let deq = execute(&g, Vec::new()).map_err(graph_err(format!(
            "dequantizing the weight of node `{name}`"
        )))?;
        let wf = w.to_f32_vec();
        let wd = deq[0].1.to_f32_vec();
        let mut total = Acc::default();
        total.add(&wf, &wd);
        let axis = channel_axis(fnode, dq, w.rank());
        let c = w.shape.get(axis).copied().unwrap_or(1).max(1);
        let inner: usize = w.shape[axis + 1..].iter().product();
        let mut ch = vec![Acc::default(); c];
        for (i, (a, b)) in wf.iter().zip(&wd).enumerate() {
            ch[(i / inner.max(1)) % c].add(&[*a], &[*b]);
        }
        let channels: Vec<Stats> = ch.iter().map(Acc::stats).collect();
        let worst_channel = channels
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.sqnr_db.total_cmp(&b.1.sqnr_db))
            .map_or(0, |(i, _)| i);
        out.push(WeightError {
            tensor: wname.clone(),
            axis,
            total: total.stats(),
            channels,
            worst_channel,
        });
    }
    Ok(out)
}

/// Output error of graph outputs `approx` against `reference`, accumulated over batches.
#[derive(Default)]
struct OutAcc {
    acc: Acc,
    rows: usize,
    agree: usize,
    classes: bool,
}

impl OutAcc {
    fn add(&mut self, reference: &Feed, approx: &[(String, Tensor)]) {
        for (k, ((_, r), (_, a))) in reference.iter().zip(approx).enumerate() {
            let (Some(rv), Some(av)) = (r.as_f32(), a.as_f32()) else {
                continue;
            };
            self.acc.add(rv, av);
            let c = r.shape.last().copied().unwrap_or(0);
            if k == 0 && r.rank() >= 2 && c > 1 {
                self.classes = true;
                for (x, y) in rv.chunks(c).zip(av.chunks(c)) {
                    self.rows += 1;
                    self.agree += usize::from(argmax(x) == argmax(y));
                }
            }
        }
    }
    fn result(&self) -> OutputError {
        let s = self.acc.stats();
        OutputError {
            sqnr_db: s.sqnr_db,
            mse: s.mse,
            top1_agreement: (self.classes && self.rows > 0)
                .then(|| self.agree as f64 / self.rows as f64),
        }
    }
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

/// What [`analyze`] reports progress on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The float and QDQ passes (counts feeds).
    Passes,
    /// The sensitivity passes (counts layers).
    Sensitivity,
}

/// Measures every layer of `setup` on the evaluation feeds `data` (one batch each).
/// `progress(stage, done, total)` is called as each stage begins (`done` 0; the sensitivity
/// stage's `total` is the number of layers it will run) and after each feed of the first
/// passes and each layer's sensitivity.
pub fn analyze(
    setup: &Setup,
    data: &[Feed],
    opts: &AnalyzeOptions,
    progress: &mut dyn FnMut(Stage, usize, usize),
) -> Result<Report> {
    let budget = crate::reuse::budget_from_env()?;
    analyze_with(
        setup,
        data,
        opts,
        progress,
        &mut Reuse::new(data, budget, 3),
    )
}

/// [`analyze`] with the sensitivity passes run through `reuse` (whose feeds must be
/// `data`): the float and the fully quantized runs are kept (pinned; the float one is
/// dropped at the end), and each sensitivity graph runs only from its first change on
/// ([`crate::reuse`]), with the same figures bit for bit.
pub fn analyze_with(
    setup: &Setup,
    data: &[Feed],
    opts: &AnalyzeOptions,
    progress: &mut dyn FnMut(Stage, usize, usize),
    reuse: &mut Reuse,
) -> Result<Report> {
    if reuse.feeds().len() != data.len() {
        return Err(PtqError::InvalidOption(
            "analyze: the reuse cache holds other data".into(),
        ));
    }
    if data.is_empty() {
        return Err(PtqError::InvalidOption(
            "analyze needs at least one evaluation batch".into(),
        ));
    }
    let float = &setup.float;
    let t_build = std::time::Instant::now();
    let q = setup.quantized()?;
    let build_time = t_build.elapsed().as_secs_f64();
    let uses = Uses::new(&q);
    let layers = setup.layers();
    // Values of the float graph at every depth (graph and subgraph inputs, node outputs).
    let float_values: HashSet<&str> = {
        fn walk<'a>(g: &'a Graph, out: &mut HashSet<&'a str>) {
            out.extend(g.inputs.iter().map(|i| i.name.as_str()));
            for n in &g.nodes {
                out.extend(n.outputs.iter().map(String::as_str));
                for sub in n.subgraphs() {
                    walk(sub, out);
                }
            }
        }
        let mut out = HashSet::new();
        walk(float, &mut out);
        out
    };
    // The scopes of the QDQ graph whose values are computed at most once per run: the top
    // level and `If` branches, at any depth through `If`s. A layer there gets local and
    // propagated figures like one at the top level; a Loop or Scan body computes its
    // values once per iteration, which one float value per name cannot stand for.
    let scopes = once_scopes(&q);
    let scope_uses: Vec<Uses> = scopes.iter().map(|g| Uses::new(g)).collect();
    let all_inits: HashMap<&str, &Tensor> = {
        fn walk<'a>(g: &'a Graph, out: &mut HashMap<&'a str, &'a Tensor>) {
            out.extend(g.initializers.iter().map(|(k, v)| (k.as_str(), v)));
            for n in &g.nodes {
                for sub in n.subgraphs() {
                    walk(sub, out);
                }
            }
        }
        let mut out = HashMap::new();
        walk(&q, &mut out);
        out
    };
    // QDQ value → float value it approximates, for every quantized activation.
    let mut measured: HashMap<String, String> = HashMap::new();
    for t in &setup.plan.activations {
        let src = if float.is_output(t) {
            // insert_qdq renamed the producer's output; find it through the Q node's input.
            q.nodes
                .iter()
                .find(|n| n.is(OpKind::DequantizeLinear) && n.outputs.first() == Some(t))
                .and_then(|d| uses.producer(&d.inputs[0]))
                .and_then(|qi| q.nodes[qi].inputs.first().cloned())
        } else {
            Some(t.clone())
        };
        let Some(src) = src else { continue };
        if let Some(v) = scopes
            .iter()
            .zip(&scope_uses)
            .find_map(|(g, u)| dq_value(g, u, &src))
        {
            measured.insert(v, t.clone());
        }
    }
    let by_float: HashMap<&str, &str> = measured
        .iter()
        .map(|(k, v)| (v.as_str(), k.as_str()))
        .collect();
    let mut cones = Vec::new();
    let mut weights = Vec::new();
    for (li, l) in layers.iter().enumerate() {
        weights.push(weight_errors(float, &q, &uses, l)?);
        let Some(t) = &l.output else { continue };
        let Some(m) = by_float.get(t.as_str()) else {
            continue;
        };
        let Some(si) = scopes
            .iter()
            .position(|g| g.nodes.iter().any(|n| n.name == l.nodes[0]))
        else {
            continue;
        };
        if let Some((graph, feeds)) = cone(
            &scopes,
            &scope_uses,
            si,
            &float_values,
            &all_inits,
            &l.nodes,
            m,
        ) {
            cones.push(Cone {
                graph,
                feeds,
                reference: t.clone(),
                layer: li,
            });
        }
    }
    let keep: HashSet<&str> = cones
        .iter()
        .flat_map(|c| c.feeds.iter().map(String::as_str))
        .chain(measured.values().map(String::as_str))
        .collect();
    let mut local = vec![Acc::default(); layers.len()];
    let mut local_ch = vec![ChannelAcc::default(); layers.len()];
    let mut prop: HashMap<&str, Acc> = HashMap::new();
    let mut prop_ch: HashMap<&str, ChannelAcc> = HashMap::new();
    let mut full = OutAcc::default();
    let mut float_outputs: Vec<Feed> = Vec::with_capacity(data.len());
    // The fully quantized model's output noise (squared error) of each batch.
    let mut batch_noise: Vec<f64> = Vec::with_capacity(data.len());
    let mut samples = 0;
    let mut qdq_time = std::time::Duration::ZERO;
    // Both passes run in full (their observers see every value) and are kept for the
    // sensitivity passes; the quantized one only when `reuse` does not hold it already.
    let q_keep = if reuse.holds(&q) { Keep::No } else { Keep::Pin };
    let mut float_run = reuse.session_full(float, Keep::Pin);
    let mut q_run = reuse.session_full(&q, q_keep);
    progress(Stage::Passes, 0, data.len());
    for (bi, feed) in data.iter().enumerate() {
        samples += batch_of(feed);
        let mut values: HashMap<String, Tensor> = HashMap::new();
        let outs = reuse
            .batch_with(&mut float_run, bi, &mut |name, t| {
                if keep.contains(name) {
                    values.insert(name.to_string(), t.clone());
                }
            })
            .map_err(graph_err(format!("running the float model on batch {bi}")))?;
        for c in &cones {
            // A layer in an If branch this batch did not take has nothing to compare.
            if !values.contains_key(&c.reference) || c.feeds.iter().any(|f| !values.contains_key(f))
            {
                continue;
            }
            let inputs: Feed = c
                .feeds
                .iter()
                .filter_map(|f| values.get(f).map(|t| (f.clone(), t.clone())))
                .collect();
            let out = execute(&c.graph, inputs).map_err(graph_err(format!(
                "running layer `{}` alone on batch {bi}",
                layers[c.layer].nodes[0]
            )))?;
            let reference = values.get(&c.reference);
            if let (Some(r), Some(a)) = (reference.and_then(Tensor::as_f32), out[0].1.as_f32()) {
                local[c.layer].add(r, a);
                local_ch[c.layer].add(&out[0].1.shape, r, a);
            }
        }
        let mut err = None;
        let t0 = std::time::Instant::now();
        let qouts = reuse
            .batch_with(&mut q_run, bi, &mut |name, t| {
                let Some(fname) = measured.get(name) else {
                    return;
                };
                match (values.get(fname).and_then(Tensor::as_f32), t.as_f32()) {
                    (Some(r), Some(a)) if r.len() == a.len() => {
                        prop.entry(fname.as_str()).or_default().add(r, a);
                        prop_ch
                            .entry(fname.as_str())
                            .or_default()
                            .add(&t.shape, r, a);
                    }
                    // The float run took the other branch of an If (the quantized condition
                    // flipped): nothing to compare on this batch.
                    (None, _) => {}
                    _ => err = Some(fname.clone()),
                }
            })
            .map_err(graph_err(format!(
                "running the quantized model on batch {bi}"
            )))?;
        qdq_time += t0.elapsed();
        if let Some(t) = err {
            return Err(PtqError::InvalidOption(format!(
                "activation `{t}`: the quantized value does not match the float one"
            )));
        }
        let before = full.acc.noise;
        full.add(&outs, &qouts);
        batch_noise.push(full.acc.noise - before);
        float_outputs.push(outs);
        progress(Stage::Passes, bi + 1, data.len());
    }
    reuse.finish(float_run);
    reuse.finish(q_run);
    let mut reports: Vec<LayerReport> = layers
        .iter()
        .zip(weights)
        .enumerate()
        .map(|(li, (l, weights))| {
            let has_cone = cones.iter().any(|c| c.layer == li);
            LayerReport {
                name: l.nodes[0].clone(),
                op: l.op.clone(),
                nodes: l.nodes.clone(),
                output: l.output.clone(),
                weights,
                local: has_cone.then(|| local[li].stats()),
                local_worst_channel: has_cone.then(|| local_ch[li].worst()).flatten(),
                propagated: l
                    .output
                    .as_ref()
                    .and_then(|t| prop.get(t.as_str()))
                    .map(Acc::stats),
                propagated_worst_channel: l
                    .output
                    .as_ref()
                    .and_then(|t| prop_ch.get(t.as_str()))
                    .and_then(ChannelAcc::worst),
                sensitivity: None,
            }
        })
        .collect();
    // Candidates for sensitivity: the lowest local SQNR first, of the tensor or of its worst
    // channel (a layer without one last).
    let local_key = |r: &LayerReport| {
        let t = r.local.map_or(f64::INFINITY, |s| s.sqnr_db);
        r.local_worst_channel.map_or(t, |c| t.min(c.sqnr_db))
    };
    // Layers the calibration data never ran (an If branch it does not take) cannot
    // change the outputs on such data: no sensitivity passes for them.
    let mut order: Vec<usize> = (0..reports.len())
        .filter(|&li| setup.reached(&layers[li].nodes))
        .collect();
    order.sort_by(|&a, &b| local_key(&reports[a]).total_cmp(&local_key(&reports[b])));
    let mut k = opts.top_k.unwrap_or(order.len()).min(order.len());
    let batch_samples: Vec<usize> = data.iter().map(batch_of).collect();
    let subset = sensitivity_batches(&batch_samples, opts.sensitivity_samples);
    let subset_samples: usize = subset.iter().map(|&b| batch_samples[b]).sum();
    if let Some(budget) = opts.budget {
        // Position of each layer's first node in the QDQ graph (top level; a layer inside
        // a subgraph counts as the whole graph).
        let pos: HashMap<&str, usize> = q
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let n_nodes = q.nodes.len().max(1) as f64;
        let share = subset_samples as f64 / samples.max(1) as f64;
        let passes = if opts.left_float_only { 1 } else { 2 };
        let mut spent = 0.0;
        let mut fit = 0;
        for &li in &order[..k] {
            let at = pos.get(layers[li].nodes[0].as_str()).copied().unwrap_or(0);
            let nodes_share = (n_nodes - at as f64) / n_nodes;
            spent += sensitivity_cost(
                passes,
                build_time,
                qdq_time.as_secs_f64(),
                share,
                nodes_share,
            );
            if spent > budget.as_secs_f64() && fit > 0 {
                break;
            }
            fit += 1;
        }
        k = fit;
    }
    // The fully quantized output noise on the batches the passes run on.
    let full_noise: f64 = if subset.len() == data.len() {
        full.acc.noise
    } else {
        subset.iter().map(|&b| batch_noise[b]).sum()
    };
    progress(Stage::Sensitivity, 0, k);
    for (done, &li) in order[..k].iter().enumerate() {
        let l = &layers[li];
        let mine: HashSet<&str> = l.nodes.iter().map(String::as_str).collect();
        let drop: HashSet<&str> = l.output.iter().map(String::as_str).collect();
        let mut graphs = vec![setup.variant(&|n| !mine.contains(n), &drop)?];
        if !opts.left_float_only {
            graphs.push(setup.variant(&|n| mine.contains(n), &HashSet::new())?);
        }
        let mut accs = [OutAcc::default(), OutAcc::default()];
        for (g, acc) in graphs.iter().zip(accs.iter_mut()) {
            let mut run = reuse.session(g, Keep::No);
            for &bi in &subset {
                let outs = reuse.batch(&mut run, bi).map_err(graph_err(format!(
                    "sensitivity of layer `{}`, batch {bi}",
                    l.nodes[0]
                )))?;
                acc.add(&float_outputs[bi], &outs);
            }
        }
        let recovered = if full_noise > 0.0 {
            1.0 - accs[0].acc.noise / full_noise
        } else {
            0.0
        };
        reports[li].sensitivity = Some(Sensitivity {
            left_float: accs[0].result(),
            recovered,
            only_quantized: (!opts.left_float_only).then(|| accs[1].result()),
        });
        progress(Stage::Sensitivity, done + 1, k);
    }
    // Ranked: by recovered share where sensitivity ran, then by local SQNR.
    reports.sort_by(|a, b| match (&a.sensitivity, &b.sensitivity) {
        (Some(x), Some(y)) => y.recovered.total_cmp(&x.recovered),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => local_key(a).total_cmp(&local_key(b)),
    });
    let activations = setup
        .plan
        .activations
        .iter()
        .filter_map(|t| prop.get(t.as_str()).map(|a| (t.clone(), a.stats())))
        .collect();
    reuse.forget(float);
    Ok(Report {
        samples,
        sensitivity_samples: subset_samples,
        calibration_samples: setup.calibration_samples,
        output: full.result(),
        layers: reports,
        activations,
    })
}
