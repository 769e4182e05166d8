//! `--method auto` (issue 18): per activation, the clip range among minmax,
//! percentile=99.99, mse and entropy (the candidates of
//! [`quantkit_core::HistogramObserver::candidates`], all from one histogram) that minimises
//! the error of the tensor's **consumers**: each node reading the tensor is run alone on the
//! float model's values with only this tensor fake-quantized, and its output is compared
//! with its float output. A range that is good for the tensor itself can be bad for what
//! reads it (a clipped outlier channel a Conv weights heavily); the consumer sees that.
//!
//! The score of a candidate is `Σ_readers Σ (y − y_float)² / Σ y_float²` (each reader's
//! relative error, so readers of different scales count alike) over the selection samples
//! (the first [`AUTO_SAMPLES`] calibration samples). Ties keep the earlier candidate
//! (minmax first). A graph output keeps the minmax range: its reader is the user, and
//! clipping a classifier's largest scores turns them into ties that change the top-1.
//! A tensor read inside a subgraph is scored by its own error.

use crate::analyze::Feed;
use crate::error::{core, graph as graph_err, Result};
use quantkit_core::{HistogramObserver, Observer, QParams, QuantScheme, RoundingMode};
use quantkit_graph::{execute, execute_with, Graph, Node, Tensor, ValueInfo};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Calibration samples `auto` scores its candidates on.
pub const AUTO_SAMPLES: usize = 64;

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
    /// Score of every candidate, in candidate order (lower is better).
    pub scores: Vec<(&'static str, f64)>,
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

/// Chooses the parameters of every activation of `activations` that has an observer:
/// consumer-scored candidates for histogram observers (see the module docs), the
/// observer's own parameters otherwise. `feeds` are the selection samples.
pub fn choose(
    g: &Graph,
    activations: &[String],
    observers: &HashMap<String, Box<dyn Observer>>,
    scheme: &QuantScheme,
    feeds: &[Feed],
) -> Result<(ActParams, Vec<AutoChoice>)> {
    let mut act = BTreeMap::new();
    let mut choices = Vec::new();
    let outputs: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let subgraph_reads: HashSet<String> = g
        .nodes
        .iter()
        .flat_map(|n| n.outer_reads().into_iter().map(str::to_string))
        .collect();
    // Readers of each activation (top-level nodes), and the values they need.
    let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
    let wanted: HashSet<&str> = activations.iter().map(String::as_str).collect();
    for (i, n) in g.nodes.iter().enumerate() {
        for v in &n.inputs {
            if wanted.contains(v.as_str()) {
                let r = readers.entry(v.as_str()).or_default();
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
    // Float values of the selection samples, per feed.
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
        let rs = readers.get(t.as_str()).cloned().unwrap_or_default();
        let own = rs.is_empty() || subgraph_reads.contains(t);
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
            let mut score = 0f64;
            if own {
                let (mut n, mut s) = (0f64, 0f64);
                for v in &values {
                    let Some(x) = v.get(t) else { continue };
                    let fq = fake_quant(t, x, p)?;
                    let (a, b) = rel_err(
                        x.as_f32().unwrap_or_default(),
                        fq.as_f32().unwrap_or_default(),
                    );
                    n += a;
                    s += b;
                }
                score = if s > 0.0 { n / s } else { n };
            } else {
                for &ri in &rs {
                    let node = &g.nodes[ri];
                    let (mut n, mut s) = (0f64, 0f64);
                    for (bi, v) in values.iter().enumerate() {
                        let Some(x) = v.get(t) else { continue };
                        let fq = fake_quant(t, x, p)?;
                        let mut inputs: Vec<(String, Tensor)> = Vec::new();
                        for i in &singles[&ri].inputs {
                            if &i.name == t {
                                inputs.push((i.name.clone(), fq.clone()));
                            } else if let Some(val) = v.get(&i.name) {
                                inputs.push((i.name.clone(), val.clone()));
                            }
                        }
                        let out = execute(&singles[&ri], inputs).map_err(graph_err(format!(
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
            }
            scores.push((*name, score));
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
        });
    }
    Ok((act, choices))
}
