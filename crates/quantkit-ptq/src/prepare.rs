//! Graph preparation before calibration: constant folding, BatchNormalization folded into
//! the preceding convolution, and the opset upgrade that per-axis QDQ needs.

use crate::error::{graph, PtqError, Result};
use quantkit_graph::ops::is_onnx_domain;
use quantkit_graph::{passes, AttrValue, Graph, Node, OpKind, Tensor};
use std::collections::{HashMap, HashSet};

/// What [`prepare`] changed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PrepareReport {
    /// Nodes removed by constant folding (including `Constant` nodes turned into initializers).
    pub constants_folded: usize,
    /// `(add, conv)` pairs: an `Add` of a per-channel constant folded into the bias of the
    /// Conv/ConvTranspose before it ([`fold_bias_adds`]).
    pub bias_adds_folded: Vec<(String, String)>,
    /// `(batch_norm, conv)` pairs: the BatchNormalization node folded into the
    /// Conv/ConvTranspose/Gemm.
    pub batch_norms_folded: Vec<(String, String)>,
    /// Float initializers of an enclosing graph read only inside subgraphs, moved (copied
    /// into each subgraph that reads them) so the quantizer sees them as the subgraph's
    /// constants ([`localize_constants`]).
    pub constants_localized: Vec<String>,
}

/// Runs the preparation passes in place: topological sort, constant folding, bias-Add
/// folding ([`fold_bias_adds`]), then BatchNormalization folding ([`fold_batch_norms`]).
pub fn prepare(g: &mut Graph) -> Result<PrepareReport> {
    passes::topo_sort(g).map_err(graph("sorting the graph"))?;
    let before = g.nodes.len();
    passes::fold_constants(g).map_err(graph("folding constants"))?;
    let constants_folded = before - g.nodes.len();
    let bias_adds_folded = fold_bias_adds(g);
    let batch_norms_folded = fold_batch_norms(g)?;
    let mut constants_localized = Vec::new();
    localize_constants(g, &mut constants_localized);
    Ok(PrepareReport {
        constants_folded,
        bias_adds_folded,
        batch_norms_folded,
        constants_localized,
    })
}

/// Moves each float initializer that no node of `g` reads directly, only the subgraphs of
/// its nodes (the weights of a convolution inside an `If` branch, exported as top-level
/// initializers), into every subgraph that reads it, then recurses into the subgraphs. The
/// model computes the same function (a subgraph's initializer is the same constant) and
/// the quantizer, which quantizes the constant weights of each graph's own nodes, now sees
/// them. An initializer that a node of `g` also reads directly, or that is a graph output,
/// stays where it is (a copy in the subgraph would shadow it, which ONNX forbids); weights
/// it feeds inside a subgraph are then left float with the reason "weight is not a
/// constant". Names moved are appended to `moved`.
pub fn localize_constants(g: &mut Graph, moved: &mut Vec<String>) {
    let direct: HashSet<String> = g
        .nodes
        .iter()
        .flat_map(|n| n.inputs.iter().cloned())
        .chain(g.outputs.iter().map(|o| o.name.clone()))
        .collect();
    let movable: HashSet<String> = g
        .initializers
        .iter()
        .filter(|(k, t)| t.dtype.is_float() && !direct.contains(*k))
        .map(|(k, _)| k.clone())
        .collect();
    let mut any = false;
    for n in &mut g.nodes {
        for sub in n.subgraphs_mut() {
            let wanted: Vec<String> = sub
                .outer_reads()
                .into_iter()
                .filter(|v| movable.contains(*v) && quantizer_reads(sub, v))
                .map(str::to_string)
                .collect();
            for w in wanted {
                sub.initializers
                    .insert(w.clone(), g.initializers[&w].clone());
                if !moved.contains(&w) {
                    moved.push(w);
                }
                any = true;
            }
            localize_constants(sub, moved);
        }
    }
    if any {
        g.prune_initializers();
    }
}

/// Whether a node of `g` (at any depth) that reads `v` is one whose constant inputs the
/// quantizer uses: a weight of a Conv/Gemm/MatMul, an input of an operator with an integer
/// form, or the exponent of a `Pow` (the plan checks it is a constant ≥ 0). A constant read
/// only by operators that run in float (an LSTM's weights: no integer form) stays in the
/// enclosing graph: a copy in each subgraph that reads it only added bytes (silero-vad's
/// LSTM weights were stored once per branch of the nested `If`, 1 MB more than the float
/// file).
fn quantizer_reads(g: &Graph, v: &str) -> bool {
    g.nodes.iter().any(|n| {
        let reads = n.inputs.iter().any(|i| i == v);
        let uses = reads
            && (n.is(OpKind::Pow) || {
                let f = n.facts();
                f.weight.is_some() || !matches!(f.quant_inputs, quantkit_graph::QuantInputs::None)
            });
        uses || n.subgraphs().any(|s| quantizer_reads(s, v))
    })
}

/// The output channel of a weight element, by flat index.
type ChannelOf = Box<dyn Fn(usize) -> usize>;

/// The output channels of a Conv (`[O, I/g, k...]`) or ConvTranspose (`[I, O/g, k...]`,
/// `group` from the node) with constant float weight `w`, and the output channel of each
/// weight element; `None` for other nodes or inconsistent shapes.
fn conv_channels(p: &Node, w: &Tensor) -> Option<(usize, ChannelOf)> {
    if w.rank() < 3 || !w.dtype.is_float() {
        return None;
    }
    let inner: usize = w.shape[2..].iter().product();
    match p.kind()? {
        OpKind::Conv => {
            let per = w.shape[1] * inner;
            Some((w.shape[0], Box::new(move |i| i / per.max(1))))
        }
        OpKind::ConvTranspose => {
            let group = usize::try_from(p.attr_int("group", 1).ok()?).ok()?;
            let (c_in, cog) = (w.shape[0], w.shape[1]);
            if group == 0 || !c_in.is_multiple_of(group) {
                return None;
            }
            let cig = c_in / group;
            let c = cog.checked_mul(group)?;
            Some((
                c,
                Box::new(move |i| {
                    let (ci, co) = (i / (cog * inner).max(1), (i / inner.max(1)) % cog.max(1));
                    (ci / cig) * cog + co
                }),
            ))
        }
        _ => None,
    }
}

/// Folds `Add(conv(x), b)` (either operand order) into the bias of a Conv or ConvTranspose
/// whose output only that Add reads, when `b` is a float constant that adds one value per
/// output channel (shape `[C, 1, ..]` or `[1, C, 1, ..]` right-aligned to the output, or
/// one value): exporters that keep the bias apart (PaddlePaddle's `conv2d_transpose` →
/// `Add`) would otherwise leave a quantized Add, and a BatchNormalization after it
/// unfoldable. The new bias is `b_conv + b` in f64, rounded once to f32. Returns the
/// `(add, conv)` name pairs.
pub fn fold_bias_adds(g: &mut Graph) -> Vec<(String, String)> {
    let outputs: HashSet<String> = g.outputs.iter().map(|o| o.name.clone()).collect();
    let mut folded = Vec::new();
    let mut i = 0;
    while i < g.nodes.len() {
        let add = &g.nodes[i];
        let found = (|| {
            if !add.is(OpKind::Add) || add.inputs.len() != 2 || add.outputs.len() != 1 {
                return None;
            }
            (0..2).find_map(|k| {
                let (x, b) = (&add.inputs[k], &add.inputs[1 - k]);
                let bt = g.initializers.get(b).filter(|t| t.dtype.is_float())?;
                let pi = g.producer(x)?;
                let p = &g.nodes[pi];
                if outputs.contains(x) || g.readers(x).len() != 1 || p.outputs.len() != 1 {
                    return None;
                }
                let w = g.initializers.get(p.inputs.get(1)?)?;
                let (c, _) = conv_channels(p, w)?;
                // `b` broadcast against [N, C, spatial...] adds one value per channel.
                let rank = w.rank();
                if bt.rank() > rank {
                    return None;
                }
                let off = rank - bt.rank();
                let per_channel = bt
                    .shape
                    .iter()
                    .enumerate()
                    .all(|(d, &n)| n == 1 || (d + off == 1 && n == c));
                if !per_channel || bt.is_empty() {
                    return None;
                }
                let old = match p.inputs.get(2).filter(|s| !s.is_empty()) {
                    None => vec![0.0; c],
                    Some(name) => {
                        let t = g.initializers.get(name).filter(|t| t.dtype.is_float())?;
                        if t.len() != c {
                            return None;
                        }
                        t.to_f64_vec()
                    }
                };
                let bv = bt.to_f64_vec();
                let nb: Vec<f32> = (0..c)
                    .map(|j| (old[j] + bv[if bv.len() == 1 { 0 } else { j }]) as f32)
                    .collect();
                Some((pi, nb))
            })
        })();
        let Some((pi, nb)) = found else {
            i += 1;
            continue;
        };
        let (add_name, y) = (g.nodes[i].name.clone(), g.nodes[i].outputs[0].clone());
        let pname = g.nodes[pi].name.clone();
        let b_name = g.unique_name(&format!("{pname}_bias_folded"));
        g.initializers
            .insert(b_name.clone(), Tensor::from_f32(&[nb.len()], nb));
        let p = &mut g.nodes[pi];
        if p.inputs.len() < 3 {
            p.inputs.resize(2, String::new());
            p.inputs.push(b_name);
        } else {
            p.inputs[2] = b_name;
        }
        p.outputs[0] = y;
        g.nodes.remove(i);
        folded.push((add_name, pname));
    }
    if !folded.is_empty() {
        g.prune_initializers();
    }
    folded
}

/// Folds every inference-mode `BatchNormalization` whose input is produced by a `Conv`, a
/// `ConvTranspose` (any group: weight `[I, O/g, k...]`, output channel `(i / (I/g))·(O/g) + o`)
/// or a `Gemm` with `alpha = beta = 1`, used by nothing else, with all parameters constant.
///
/// With `k_c = γ_c / √(var_c + ε)` (ONNX BatchNormalization:
/// `y = (x − μ)·γ/√(var + ε) + β`), the folded layer computes the same function with
/// `w'_c = w_c · k_c` (every weight of output channel `c`) and `b'_c = (b_c − μ_c)·k_c + β_c`.
/// Computed in f64, rounded once to f32. Returns the `(batch_norm, producer)` name pairs.
pub fn fold_batch_norms(g: &mut Graph) -> Result<Vec<(String, String)>> {
    let outputs: Vec<String> = g.outputs.iter().map(|o| o.name.clone()).collect();
    let mut folded = Vec::new();
    let mut i = 0;
    while i < g.nodes.len() {
        let bn = &g.nodes[i];
        if !bn.is(OpKind::BatchNormalization) {
            i += 1;
            continue;
        }
        let used_outputs = bn.outputs.iter().skip(1).any(|o| !o.is_empty());
        let training = bn.attr_int("training_mode", 0).unwrap_or(0) != 0;
        let params: Option<Vec<&Tensor>> = bn.inputs[1..]
            .iter()
            .map(|n| g.initializers.get(n))
            .collect();
        let x = bn.inputs[0].clone();
        let prod = g.producer(&x);
        let ok = !used_outputs
            && !training
            && bn.inputs.len() == 5
            && params.is_some()
            && !outputs.contains(&x)
            && g.readers(&x).len() == 1
            && prod.is_some();
        if !ok {
            i += 1;
            continue;
        }
        let pi = prod.expect("checked");
        let p = &g.nodes[pi];
        let eps = f64::from(bn.attr_float("epsilon", 1e-5).unwrap_or(1e-5));
        let params = params.expect("checked");
        let [gamma, beta, mean, var] = [0, 1, 2, 3].map(|k| params[k].to_f64_vec());
        let c = gamma.len();
        if [&beta, &mean, &var].iter().any(|v| v.len() != c) {
            i += 1;
            continue;
        }
        let kk: Vec<f64> = (0..c).map(|j| gamma[j] / (var[j] + eps).sqrt()).collect();
        let Some(w) = p.inputs.get(1).and_then(|n| g.initializers.get(n)) else {
            i += 1;
            continue;
        };
        // The output channel of each weight element.
        let chan: ChannelOf = match p.kind() {
            Some(OpKind::Conv | OpKind::ConvTranspose) => match conv_channels(p, w) {
                Some((wc, f)) if wc == c => f,
                _ => {
                    i += 1;
                    continue;
                }
            },
            Some(OpKind::Gemm)
                if p.attr_float("alpha", 1.0).unwrap_or(0.0) == 1.0
                    && p.attr_float("beta", 1.0).unwrap_or(0.0) == 1.0
                    && p.attr_int("transA", 0).unwrap_or(1) == 0
                    && w.rank() == 2
                    && w.dtype.is_float() =>
            {
                let trans_b = p.attr_int("transB", 0).unwrap_or(0) != 0;
                let (w_axis, inner) = if trans_b { (0, w.shape[1]) } else { (1, 1) };
                if w.shape[w_axis] != c {
                    i += 1;
                    continue;
                }
                Box::new(move |idx| (idx / inner) % c)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        let bias_name = p.inputs.get(2).filter(|s| !s.is_empty()).cloned();
        let bias = match &bias_name {
            Some(b) => match g.initializers.get(b) {
                Some(t) if t.len() == c => t.to_f64_vec(),
                _ => {
                    i += 1;
                    continue;
                }
            },
            None => vec![0.0; c],
        };
        // New weight.
        let wv = w.to_f64_vec();
        let nw: Vec<f32> = wv
            .iter()
            .enumerate()
            .map(|(idx, &v)| (v * kk[chan(idx)]) as f32)
            .collect();
        let nb: Vec<f32> = (0..c)
            .map(|ch| ((bias[ch] - mean[ch]) * kk[ch] + beta[ch]) as f32)
            .collect();
        let (pname, bn_name, bn_out) = (p.name.clone(), bn.name.clone(), bn.outputs[0].clone());
        let w_name = g.unique_name(&format!("{}_bnfolded_weight", pname));
        let b_name = g.unique_name(&format!("{}_bnfolded_bias", pname));
        let w_shape = w.shape.clone();
        drop(chan);
        g.initializers
            .insert(w_name.clone(), Tensor::from_f32(&w_shape, nw));
        g.initializers
            .insert(b_name.clone(), Tensor::from_f32(&[c], nb));
        let p = &mut g.nodes[pi];
        p.inputs[1] = w_name;
        if p.inputs.len() < 3 {
            p.inputs.push(b_name);
        } else {
            p.inputs[2] = b_name;
        }
        p.outputs[0] = bn_out;
        g.nodes.remove(i);
        folded.push((bn_name, pname));
    }
    if !folded.is_empty() {
        g.prune_initializers();
    }
    Ok(folded)
}

/// Fresh names for the values and nodes a rewrite adds: a name is never one the graph
/// already uses (graph inputs and outputs, initializers, any node's inputs and outputs;
/// node names separately) nor one handed out before; a taken base gets `_1`, `_2`...
#[derive(Debug, Clone, Default)]
pub(crate) struct Namer {
    values: HashSet<String>,
    nodes: HashSet<String>,
}

impl Namer {
    /// Reserves every name `g` and its subgraphs (at any depth) use, so a name given to a
    /// value of any graph of the model is new everywhere (no shadowing).
    pub(crate) fn whole(g: &Graph) -> Namer {
        Namer {
            values: g.all_value_names(),
            nodes: g.all_node_names(),
        }
    }

    /// Reserves every name `g` uses.
    pub(crate) fn new(g: &Graph) -> Namer {
        let mut values: HashSet<String> = g
            .inputs
            .iter()
            .chain(&g.outputs)
            .map(|v| v.name.clone())
            .chain(g.initializers.keys().cloned())
            .collect();
        for n in &g.nodes {
            values.extend(n.inputs.iter().chain(&n.outputs).cloned());
        }
        let nodes = g.nodes.iter().map(|n| n.name.clone()).collect();
        Namer { values, nodes }
    }

    fn fresh_in(set: &mut HashSet<String>, base: &str) -> String {
        let name = if set.contains(base) {
            (1..)
                .map(|k| format!("{base}_{k}"))
                .find(|n| !set.contains(n))
                .expect("unbounded")
        } else {
            base.to_string()
        };
        set.insert(name.clone());
        name
    }

    /// A value (tensor) name no other value has.
    pub(crate) fn value(&mut self, base: &str) -> String {
        Namer::fresh_in(&mut self.values, base)
    }

    /// A node name no other node has.
    pub(crate) fn node(&mut self, base: &str) -> String {
        Namer::fresh_in(&mut self.nodes, base)
    }
}

/// Raises the default-domain opset to 13 (per-axis `QuantizeLinear`/`DequantizeLinear`),
/// rewriting the operators whose meaning changed between the old opset and 13 so the model
/// computes the same function: `Softmax`/`LogSoftmax`/`Hardmax` (coerced-2D semantics before
/// 13; `ranks` gives each value's rank as seen during calibration), and the `axes`/`split`
/// attributes that became inputs (`Squeeze`, `Unsqueeze`, `Split`, `ReduceSum`).
/// Returns the previous opset when it changed anything.
pub fn upgrade_opset_13(g: &mut Graph, ranks: &HashMap<String, usize>) -> Result<Option<i64>> {
    let old = g.opset();
    if old >= 13 {
        return Ok(None);
    }
    if g.has_subgraphs() {
        return Err(PtqError::InvalidOption(format!(
            "model opset {old} is older than 13 (per-axis QuantizeLinear) and has subgraphs, \
             whose operators the opset upgrade does not rewrite; upgrade the model first"
        )));
    }
    if old < 10 {
        return Err(PtqError::InvalidOption(format!(
            "model opset {old} is older than 10, the first with QuantizeLinear; upgrade it first"
        )));
    }
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for mut n in std::mem::take(&mut g.nodes) {
        if !n.is_onnx_domain() {
            nodes.push(n);
            continue;
        }
        match n.kind() {
            Some(OpKind::Softmax | OpKind::LogSoftmax | OpKind::Hardmax) => {
                let r = ranks
                    .get(&n.inputs[0])
                    .copied()
                    .ok_or_else(|| PtqError::Unsupported {
                        node: n.name.clone(),
                        op_type: n.op_type.clone(),
                        reason: "rank of the input unknown; cannot upgrade to opset 13".into(),
                    })? as i64;
                let mut a = n.attr_int("axis", 1).unwrap_or(1);
                if a < 0 {
                    a += r;
                }
                n.attributes.retain(|(k, _)| k != "axis");
                if a == r - 1 {
                    n.attributes.push(("axis".into(), AttrValue::Int(a)));
                    nodes.push(n);
                } else {
                    // Old semantics: flatten to 2-D at `axis`, normalise rows, reshape back.
                    let x = n.inputs[0].clone();
                    let y = n.outputs[0].clone();
                    let shape = format!("{}_shape", n.name);
                    let flat = format!("{}_flat", n.name);
                    let soft = format!("{}_flat_out", n.name);
                    nodes.push(Node::of(OpKind::Shape, &shape, &[&x], &[&shape]));
                    nodes.push(
                        Node::of(OpKind::Flatten, &flat, &[&x], &[&flat])
                            .with_attr("axis", AttrValue::Int(a)),
                    );
                    n.inputs[0] = flat.clone();
                    n.outputs[0] = soft.clone();
                    n.attributes.push(("axis".into(), AttrValue::Int(-1)));
                    let rs = format!("{}_reshape", n.name);
                    nodes.push(n);
                    nodes.push(Node::of(OpKind::Reshape, &rs, &[&soft, &shape], &[&y]));
                }
            }
            Some(OpKind::Squeeze | OpKind::Unsqueeze | OpKind::ReduceSum | OpKind::Split) => {
                let key = if n.is(OpKind::Split) { "split" } else { "axes" };
                if let Ok(Some(v)) = n.attr_ints(key) {
                    let name = g.unique_name(&format!("{}_{key}", n.name));
                    g.initializers
                        .insert(name.clone(), Tensor::from_i64(&[v.len()], v));
                    n.attributes.retain(|(k, _)| k != key);
                    if n.inputs.len() < 2 {
                        n.inputs.push(name);
                    } else {
                        n.inputs[1] = name;
                    }
                }
                nodes.push(n);
            }
            _ => nodes.push(n),
        }
    }
    g.nodes = nodes;
    for (d, v) in g.opset_imports.iter_mut() {
        if is_onnx_domain(d) {
            *v = 13;
        }
    }
    if g.opset() == 0 {
        g.opset_imports.push((String::new(), 13));
    }
    Ok(Some(old))
}

/// Raises the default-domain opset of a graph already at 13 or later to 21, the first
/// opset whose `QuantizeLinear`/`DequantizeLinear` take 16-bit codes (int16 activations,
/// [`crate::qdq::insert_qdq_wide`]). Rewrites, at every subgraph depth, the operators whose
/// meaning changed between 13 and 21 so the model computes the same function:
///
/// - `ReduceMax/Min/Mean/Prod/L1/L2/LogSum/LogSumExp/SumSquare` (18): the `axes`
///   attribute became an input;
/// - `Split` (18): without a `split` input, `num_outputs` must be given (the output count);
/// - `GridSample` (20): modes `bilinear`/`bicubic` were renamed `linear`/`cubic`;
/// - `RoiAlign` (16): the default `coordinate_transformation_mode` became `half_pixel`;
///   the old behaviour is `output_half_pixel`, written out.
///
/// `DFT` (its `axis` became an input at 20, with a different default) is refused. Returns
/// the previous opset when it changed.
pub fn upgrade_opset_21(g: &mut Graph) -> Result<Option<i64>> {
    let old = g.opset();
    if old >= 21 {
        return Ok(None);
    }
    if old < 13 {
        return Err(PtqError::InvalidOption(format!(
            "model opset {old}: the opset-13 upgrade must run before the opset-21 one"
        )));
    }
    let mut namer = Namer::whole(g);
    let mut axes: Vec<(String, Tensor)> = Vec::new();
    upgrade_nodes_21(g, old, &mut namer, &mut axes)?;
    for (name, t) in axes {
        g.initializers.insert(name, t);
    }
    for (d, v) in g.opset_imports.iter_mut() {
        if is_onnx_domain(d) {
            *v = 21;
        }
    }
    // Opset 21 needs IR version 10.
    g.meta.ir_version = g.meta.ir_version.max(10);
    Ok(Some(old))
}

/// [`upgrade_opset_21`] on one graph's nodes and its subgraphs; new constant inputs go to
/// `axes` (the top-level graph's initializers, which every subgraph sees).
fn upgrade_nodes_21(
    g: &mut Graph,
    old: i64,
    namer: &mut Namer,
    axes: &mut Vec<(String, Tensor)>,
) -> Result<()> {
    for n in g.nodes.iter_mut() {
        for sub in n.subgraphs_mut() {
            upgrade_nodes_21(sub, old, namer, axes)?;
        }
        if !n.is_onnx_domain() {
            continue;
        }
        match n.kind() {
            Some(
                OpKind::ReduceMax
                | OpKind::ReduceMin
                | OpKind::ReduceMean
                | OpKind::ReduceProd
                | OpKind::ReduceL1
                | OpKind::ReduceL2
                | OpKind::ReduceLogSum
                | OpKind::ReduceLogSumExp
                | OpKind::ReduceSumSquare,
            ) => {
                if let Ok(Some(v)) = n.attr_ints("axes") {
                    let name = namer.value(&format!("{}_axes", n.name));
                    axes.push((name.clone(), Tensor::from_i64(&[v.len()], v)));
                    n.attributes.retain(|(k, _)| k != "axes");
                    n.inputs.truncate(1);
                    n.inputs.push(name);
                }
            }
            Some(OpKind::Split) => {
                let has_split = n.inputs.get(1).is_some_and(|s| !s.is_empty());
                if !has_split && n.attr_int("num_outputs", 0).unwrap_or(0) == 0 {
                    let k = n.outputs.len() as i64;
                    n.attributes.push(("num_outputs".into(), AttrValue::Int(k)));
                }
            }
            Some(OpKind::GridSample) if old < 20 => {
                let mode = n.attr_string("mode", "bilinear").unwrap_or_default();
                let renamed = match mode.as_str() {
                    "bilinear" => "linear",
                    "bicubic" => "cubic",
                    other => other,
                }
                .to_string();
                n.attributes.retain(|(k, _)| k != "mode");
                n.attributes
                    .push(("mode".into(), AttrValue::String(renamed.into_bytes())));
            }
            Some(OpKind::RoiAlign)
                if old < 16
                    && n.attr_string("coordinate_transformation_mode", "")
                        .is_ok_and(|m| m.is_empty()) =>
            {
                n.attributes.push((
                    "coordinate_transformation_mode".into(),
                    AttrValue::String(b"output_half_pixel".to_vec()),
                ));
            }
            Some(OpKind::DFT) if old < 20 => {
                return Err(PtqError::Unsupported {
                    node: n.name.clone(),
                    op_type: n.op_type.clone(),
                    reason: "int16 activations need opset 21, and DFT's axis changed meaning at \
                             opset 20; upgrade the model first"
                        .into(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantkit_graph::ValueInfo;

    fn branch(name: &str, nodes: Vec<Node>, out: &str) -> Graph {
        Graph {
            name: name.into(),
            nodes,
            outputs: vec![ValueInfo {
                name: out.into(),
                dtype: None,
                onnx_elem_type: 0,
                shape: None,
            }],
            ..Graph::default()
        }
    }

    /// A weight a Conv inside a branch reads is copied into the branch (the quantizer needs
    /// it there); a constant read in both branches only by an operator that runs in float
    /// (here `Tanh`, as silero-vad's LSTM weights) stays once in the enclosing graph instead
    /// of a copy per branch.
    #[test]
    fn only_constants_the_quantizer_uses_are_copied_into_subgraphs() {
        let mut g = Graph::default();
        g.initializers
            .insert("w".into(), Tensor::from_f32(&[1, 1, 1, 1], vec![2.0]));
        g.initializers
            .insert("k".into(), Tensor::from_f32(&[1], vec![0.5]));
        let then = branch(
            "then",
            vec![
                Node::of(OpKind::Conv, "conv", &["x", "w"], &["c"]),
                Node::of(OpKind::Tanh, "t1", &["k"], &["yt"]),
            ],
            "yt",
        );
        let other = branch(
            "else",
            vec![Node::of(OpKind::Tanh, "t2", &["k"], &["ye"])],
            "ye",
        );
        g.nodes = vec![Node::of(OpKind::If, "if", &["cond"], &["y"])
            .with_attr("then_branch", AttrValue::Graph(Box::new(then)))
            .with_attr("else_branch", AttrValue::Graph(Box::new(other)))];
        let mut moved = Vec::new();
        localize_constants(&mut g, &mut moved);
        assert_eq!(moved, vec!["w".to_string()]);
        let subs: Vec<&Graph> = g.nodes[0].subgraphs().collect();
        let then = subs.iter().find(|s| s.name == "then").unwrap();
        assert!(then.initializers.contains_key("w"));
        assert!(subs.iter().all(|s| !s.initializers.contains_key("k")));
        assert!(g.initializers.contains_key("k"), "k stays once, outside");
        assert!(!g.initializers.contains_key("w"), "w moved");
    }
}
