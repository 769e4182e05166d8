//! QDQ planning and insertion, following the layout ONNX Runtime's static quantizer emits in
//! QDQ format: `QuantizeLinear → DequantizeLinear` on every quantized activation (inputs
//! and outputs of quantized nodes), `DequantizeLinear` on quantized weights stored as int8
//! initializers, int32 biases with scale `s_in · s_w` and zero point 0. Ops without an
//! integer kernel read the dequantized value and stay float.

use crate::error::{core, PtqError, Result};
use crate::prepare::Namer;
use quantkit_core::{Granularity, QParams, QuantScheme, RoundingMode};
use quantkit_graph::{AttrValue, Data, Graph, Node, OpKind, QuantInputs, Tensor, Uses};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Whether `n` has a weight input that is quantized per output channel when constant
/// (the registry's `Facts::weight`: Conv, ConvTranspose, Gemm, MatMul).
fn is_weighted(n: &Node) -> bool {
    n.facts().weight.is_some()
}

/// Why a node was left in float.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FloatNode {
    /// Node name.
    pub name: String,
    /// Operator.
    pub op_type: String,
    /// Reason.
    pub reason: String,
}

/// Which nodes get quantized and which tensors need activation observers.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Names of the nodes to quantize, in graph order.
    pub quantized: Vec<String>,
    /// Nodes left in float and why.
    pub left_float: Vec<FloatNode>,
    /// Activations to quantize (need observers).
    pub activations: Vec<String>,
    /// `(producer, activation)` pairs fused: the producer's output is not quantized, only
    /// the Relu/Clip output (its range is the output clamp).
    pub fused: Vec<(String, String)>,
}

fn is_float_init(g: &Graph, name: &str) -> bool {
    g.initializers.get(name).is_some_and(|t| t.dtype.is_float())
}

/// Decides which nodes to quantize. `exclude` nodes stay float. Nodes inside subgraphs
/// (If branches, Loop and Scan bodies, at any depth) are planned like top-level ones, each
/// graph with its own constants (see [`crate::prepare::localize_constants`]); their
/// activations are observed by name during calibration like any other value.
///
/// Values a node divides by and the statistics of a normalisation stay float (see
/// [`plan_with`]; this is `plan_with(g, exclude, false)`).
pub fn plan(g: &Graph, exclude: &HashSet<String>) -> Result<Plan> {
    plan_with(g, exclude, false)
}

/// [`plan`], where `quantize_statistics` quantizes the statistics of a normalisation (its
/// mean and variance written as primitive operators) like any other activation instead of
/// leaving them float ([`PtqConfig::quantize_statistics`](crate::PtqConfig), quantkit's
/// behaviour before it kept them float; for comparisons). Values a node divides by stay
/// float either way.
pub fn plan_with(g: &Graph, exclude: &HashSet<String>, quantize_statistics: bool) -> Result<Plan> {
    let all_nodes = g.all_node_names();
    for e in exclude {
        if !all_nodes.contains(e) {
            let known: Vec<&str> = g.nodes.iter().take(5).map(|n| n.name.as_str()).collect();
            return Err(PtqError::UnknownNode {
                name: e.clone(),
                known: known.join(", "),
            });
        }
    }
    let mut p = Plan::default();
    let mut seen = HashSet::new();
    let mut weighted = false;
    plan_graph(
        g,
        exclude,
        quantize_statistics,
        &mut p,
        &mut seen,
        &mut weighted,
    );
    if !weighted {
        return Err(PtqError::NothingToQuantize(if exclude.is_empty() {
            String::new()
        } else {
            " after --exclude".into()
        }));
    }
    Ok(p)
}

/// Why a value must stay float ([`float_values`]).
#[derive(Debug, Clone)]
struct KeepFloat {
    /// The node that divides by (a value computed from) it.
    divider: String,
    /// The reduction it is computed from, when it is a normalisation statistic.
    reduction: Option<String>,
}

impl KeepFloat {
    fn reason(&self, v: &str) -> String {
        match &self.reduction {
            None => format!(
                "`{v}` reaches the divisor of node `{}`: quantized, a small value would \
                 round to 0 and divide by zero",
                self.divider
            ),
            Some(r) => format!(
                "`{v}` is a normalisation statistic (computed from the reduction `{r}`, it \
                 reaches the divisor of node `{}`): quantized, a variance written as \
                 E[x²] − E[x]² cancels and a small one rounds to 0",
                self.divider
            ),
        }
    }
}

/// Values that must stay float, with why:
///
/// 1. **Divisors**: the input of `Reciprocal` and `Log`, `Div`'s divisor, `Pow`'s base when
///    the exponent is not a constant ≥ 0, and, walking back through operators that keep 0
///    at 0 (`Sqrt`, `Abs`, `Relu`, `Identity`, `Cast`, the layout ops), the values these
///    are computed from. Quantizing such a value rounds a small positive number to exactly
///    0 and the model divides by zero: a LayerNorm written as `Reciprocal(Sqrt(var + eps))`
///    (JAX and TF exports, e.g. Magika's) gave `inf` logits on a file whose variance was
///    small, because the quantized `var + eps` undid the epsilon. ONNX Runtime's quantizer
///    does the same.
/// 2. **Normalisation statistics**: every value on a path from such a divisor back, through
///    element-wise arithmetic and layout operators, to the output of a reduction
///    (`ReduceMean`, `ReduceSum`, `ReduceSumSquare`, `ReduceL1`, `ReduceL2`,
///    `GlobalAveragePool`), that output included; the walk stops there, the reduction's
///    input is not a statistic, except what exists only to be reduced (the squares of
///    `E[x²]`, see [`mark_reduced`]). These are the mean, the variance and what is
///    computed from them in a LayerNorm / RMSNorm / InstanceNorm / L2 normalisation
///    written as primitive operators. Quantized, a variance written as `E[x²] − E[x]²` (Magika's JAX export) is
///    the difference of two quantized numbers much larger than itself, and one rounded to
///    0 or wrong by 100 % scales the whole normalised row: plain int8 kept 4 % of Magika's
///    top-1 answers. They are per-row scalars, so keeping them float costs neither bytes
///    nor measurable time; the normalised tensor itself stays quantized.
fn float_values(g: &Graph, uses: &Uses, statistics: bool) -> HashMap<String, KeepFloat> {
    let mut out: HashMap<String, KeepFloat> = HashMap::new();
    let mut stack: Vec<(String, String)> = Vec::new();
    let mut roots: Vec<(String, String)> = Vec::new();
    for n in &g.nodes {
        let divisor = if n.is(OpKind::Reciprocal) || n.is(OpKind::Log) {
            n.inputs.first()
        } else if n.is(OpKind::Div) {
            n.inputs.get(1)
        } else if n.is(OpKind::Pow) {
            let non_negative = n
                .inputs
                .get(1)
                .and_then(|e| g.initializers.get(e))
                .is_some_and(|e| e.to_f32_vec().iter().all(|&v| v >= 0.0));
            if non_negative {
                None
            } else {
                n.inputs.first()
            }
        } else {
            None
        };
        if let Some(v) = divisor.filter(|v| !v.is_empty() && !g.initializers.contains_key(*v)) {
            stack.push((v.clone(), n.name.clone()));
            roots.push((v.clone(), n.name.clone()));
        }
    }
    let keeps_zero = [
        OpKind::Sqrt,
        OpKind::Abs,
        OpKind::Relu,
        OpKind::Identity,
        OpKind::Cast,
        OpKind::Reshape,
        OpKind::Flatten,
        OpKind::Squeeze,
        OpKind::Unsqueeze,
        OpKind::Transpose,
        OpKind::Expand,
    ];
    while let Some((v, divider)) = stack.pop() {
        if out.contains_key(&v) {
            continue;
        }
        if let Some(p) = uses.producer(&v) {
            let p = &g.nodes[p];
            if keeps_zero.iter().any(|&k| p.is(k)) {
                if let Some(x) = p
                    .inputs
                    .first()
                    .filter(|x| !g.initializers.contains_key(*x))
                {
                    stack.push((x.clone(), divider.clone()));
                }
            }
        }
        out.insert(
            v,
            KeepFloat {
                divider,
                reduction: None,
            },
        );
    }
    if !statistics {
        return out;
    }
    // 2. Statistics: the reduction each value is computed from (memoised; `None`: none
    //    reached through element-wise and layout operators).
    let mut memo: HashMap<String, Option<String>> = HashMap::new();
    for (v, divider) in roots {
        let mut seen: HashSet<String> = HashSet::new();
        mark_statistics(g, uses, &v, &divider, &mut memo, &mut seen, &mut out);
    }
    out
}

/// Reductions whose output is a statistic of the tensor they read.
const REDUCTIONS: [OpKind; 6] = [
    OpKind::ReduceMean,
    OpKind::ReduceSum,
    OpKind::ReduceSumSquare,
    OpKind::ReduceL1,
    OpKind::ReduceL2,
    OpKind::GlobalAveragePool,
];

/// Element-wise and layout operators a statistic flows through (every non-constant input
/// is followed, except `Pow`'s exponent and `Clip`'s bounds).
const STAT_OPS: [OpKind; 19] = [
    OpKind::Add,
    OpKind::Sub,
    OpKind::Mul,
    OpKind::Div,
    OpKind::Max,
    OpKind::Min,
    OpKind::Neg,
    OpKind::Abs,
    OpKind::Sqrt,
    OpKind::Pow,
    OpKind::Relu,
    OpKind::Clip,
    OpKind::Identity,
    OpKind::Cast,
    OpKind::Reshape,
    OpKind::Flatten,
    OpKind::Squeeze,
    OpKind::Unsqueeze,
    OpKind::Expand,
];

/// Marks in `out` what the reduction `r` (a statistic's source) reduces when that exists
/// only to be reduced: walking back from its input through element-wise operators whose
/// output nothing else reads (`Mul(x, x)` or `Pow(x − mean, 2)` read by `ReduceMean` alone),
/// up to a value with other readers (the row itself). Quantized, such a tensor biases the
/// statistic instead of averaging out: the many small squares of a row round to the same
/// code, and `E[x²]` comes out wrong by more than the variance it is compared with (Magika's
/// first LayerNorm: with `Square` quantized plain int8 kept 0.69 of its top-1 answers, with
/// it float 0.85).
fn mark_reduced(
    g: &Graph,
    uses: &Uses,
    r: usize,
    divider: &str,
    out: &mut HashMap<String, KeepFloat>,
) {
    let reduction = g.nodes[r].name.clone();
    let mut reader = r;
    let mut v = g.nodes[r].inputs.first().cloned();
    while let Some(x) = v.take() {
        if x.is_empty() || g.initializers.contains_key(&x) || out.contains_key(&x) {
            break;
        }
        let only_reader = {
            let readers = uses.readers(&x);
            !readers.is_empty() && readers.iter().all(|&i| i == reader) && !uses.is_output(&x)
        };
        let Some(p) = uses.producer(&x).filter(|_| only_reader) else {
            break;
        };
        let n = &g.nodes[p];
        if !STAT_OPS.iter().any(|&k| n.is(k)) {
            break;
        }
        out.insert(
            x,
            KeepFloat {
                divider: divider.to_string(),
                reduction: Some(reduction.clone()),
            },
        );
        // Go on through a single non-constant input (Mul(x, x) reads one value twice).
        let inputs: HashSet<&String> = n
            .inputs
            .iter()
            .filter(|i| !i.is_empty() && !g.initializers.contains_key(*i))
            .collect();
        if inputs.len() == 1 {
            v = inputs.into_iter().next().cloned();
            reader = p;
        }
    }
}

/// Walks back from `v` (reached from the divisor of `divider`) and marks in `out` every
/// value on a path to a reduction output; returns the reduction `v` is computed from.
fn mark_statistics(
    g: &Graph,
    uses: &Uses,
    v: &str,
    divider: &str,
    memo: &mut HashMap<String, Option<String>>,
    seen: &mut HashSet<String>,
    out: &mut HashMap<String, KeepFloat>,
) -> Option<String> {
    if let Some(r) = memo.get(v) {
        return r.clone();
    }
    if !seen.insert(v.to_string()) {
        return None; // a cycle cannot happen in a valid graph; be safe
    }
    let found = uses.producer(v).and_then(|p| {
        let n = &g.nodes[p];
        if REDUCTIONS.iter().any(|&k| n.is(k)) {
            mark_reduced(g, uses, p, divider, out);
            return Some(n.name.clone());
        }
        if !STAT_OPS.iter().any(|&k| n.is(k)) {
            return None;
        }
        let followed: &[String] = if n.is(OpKind::Pow) || n.is(OpKind::Clip) {
            &n.inputs[..n.inputs.len().min(1)]
        } else {
            &n.inputs
        };
        let mut found = None;
        for x in followed {
            if x.is_empty() || g.initializers.contains_key(x) {
                continue;
            }
            let r = mark_statistics(g, uses, x, divider, memo, seen, out);
            found = found.or(r);
        }
        found
    });
    if let Some(r) = &found {
        let e = out.entry(v.to_string()).or_insert_with(|| KeepFloat {
            divider: divider.to_string(),
            reduction: None,
        });
        e.reduction.get_or_insert_with(|| r.clone());
    }
    memo.insert(v.to_string(), found.clone());
    found
}

/// Whether `v` is a float constant holding one value.
fn is_scalar_const(g: &Graph, v: &str) -> bool {
    g.initializers
        .get(v)
        .is_some_and(|t| t.dtype.is_float() && t.len() == 1)
}

/// A step of an element-wise chain: a unary element-wise operator (`Facts::unary`) whose
/// other inputs are one-value constants, or `Add`/`Sub`/`Mul`/`Div` whose operands are each
/// a one-value constant or an activation (`Div` only by a one-value constant).
fn is_chain_step(g: &Graph, n: &Node) -> bool {
    if n.outputs.len() != 1 || n.inputs.first().is_none_or(|i| i.is_empty()) {
        return false;
    }
    let arith = [OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div]
        .iter()
        .any(|&k| n.is(k));
    if arith {
        n.inputs.len() == 2
            && (!n.is(OpKind::Div) || is_scalar_const(g, &n.inputs[1]))
            && n.inputs
                .iter()
                .all(|i| !g.initializers.contains_key(i) || is_scalar_const(g, i))
    } else {
        n.facts().unary
            && n.inputs
                .iter()
                .skip(1)
                .all(|i| i.is_empty() || is_scalar_const(g, i))
    }
}

/// Values inside an element-wise chain, which stay float: `v` is computed by chain steps
/// ([`is_chain_step`]) from one activation `x` alone (its *root*: a scalar affine map, a
/// HardSwish written `x·clip(x + 3, 0, 6)/6`, SiLU `x·σ(1.702x)`...), and every reader of
/// `v` is a chain step whose output is again a function of `x` alone. Only the root and
/// the chain's end (read by anything else, or a graph output) are quantized.
///
/// Why: each Q/DQ inside such a chain rounds once more for nothing. The whole chain is a
/// function of one 8-bit code, so quantkit's engine runs it as one 256-entry table from
/// the root's codes to the end's (`compile/binary.rs`, `code_function`), bit-exact with the
/// QDQ graph, and ONNX Runtime runs it in float between the root's DequantizeLinear and the
/// end's QuantizeLinear. PP-OCRv4's recognizer (PaddlePaddle's LCNetV3: every convolution
/// followed by a learnable scalar affine, a HardSwish written out, another scalar affine)
/// had eight requantizations per block; with them, int8 kept 64 % of its decoded text
/// lines, without them 77 % (issue 18, BENCHMARKS.md).
///
/// A root that is the unquantized input of a fused Relu/Clip (`fused_out`) starts no chain:
/// the clamp's output is the quantized value the integer convolution writes.
fn chain_interior(
    g: &Graph,
    uses: &Uses,
    quant: &[bool],
    exclude: &HashSet<String>,
    fused_out: &HashSet<&str>,
) -> HashSet<String> {
    // root[v]: the one activation `v` is a chain function of (absent: `v` is its own root).
    let mut root: HashMap<&str, &str> = HashMap::new();
    let mut step = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        // A Div by a constant has no integer form of its own (it stays float between
        // Q/DQ), but inside a chain it is one more step of the table.
        let planned = quant[i] || (n.is(OpKind::Div) && !exclude.contains(&n.name));
        if !planned || !is_chain_step(g, n) || fused_out.contains(n.inputs[0].as_str()) {
            continue;
        }
        step[i] = true;
        let srcs: HashSet<&str> = n
            .inputs
            .iter()
            .filter(|v| !v.is_empty() && !g.initializers.contains_key(*v))
            .map(|v| root.get(v.as_str()).copied().unwrap_or(v.as_str()))
            .collect();
        if srcs.len() == 1 {
            let r = srcs.into_iter().next().expect("one source");
            root.insert(n.outputs[0].as_str(), r);
        }
    }
    // A node with a subgraph that reads `v` counts as a reader (`Uses`) and is no step.
    root.iter()
        .filter(|(v, r)| {
            let readers = uses.readers(v);
            !uses.is_output(v)
                && !readers.is_empty()
                && readers
                    .iter()
                    .all(|&k| step[k] && root.get(g.nodes[k].outputs[0].as_str()) == Some(r))
        })
        .map(|(v, _)| v.to_string())
        .collect()
}

/// Plans the nodes of one graph, then of its subgraphs; `weighted` is set when a weighted
/// node is quantized.
fn plan_graph(
    g: &Graph,
    exclude: &HashSet<String>,
    quantize_statistics: bool,
    p: &mut Plan,
    seen: &mut HashSet<String>,
    weighted: &mut bool,
) {
    let uses = Uses::new(g);
    let divisors = float_values(g, &uses, !quantize_statistics);
    let mut quant = vec![false; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let quant_inputs: &[String] = match n.facts().quant_inputs {
            QuantInputs::First => &n.inputs[..n.inputs.len().min(1)],
            QuantInputs::All => &n.inputs,
            QuantInputs::None => &[],
        };
        let divisor = n
            .outputs
            .first()
            .into_iter()
            .chain(quant_inputs)
            .find_map(|v| divisors.get(v).map(|d| (v, d)));
        let reason = if exclude.contains(&n.name) {
            Some("excluded by --exclude".to_string())
        } else if let Some((v, d)) = divisor {
            Some(d.reason(v))
        } else if !n.is_onnx_domain() {
            Some(format!("operator of domain {}", n.domain))
        } else if n.facts().quant_inputs == QuantInputs::None {
            Some("no integer kernel: runs in float between DequantizeLinear/QuantizeLinear".into())
        } else if is_weighted(n)
            && !n.is(OpKind::MatMul)
            && !n.inputs.get(1).is_some_and(|w| is_float_init(g, w))
        {
            Some("weight is not a constant".into())
        } else if n.is(OpKind::Gemm) && n.attr_int("transA", 0).unwrap_or(0) != 0 {
            Some("Gemm with transA".into())
        } else {
            None
        };
        match reason {
            Some(reason) => p.left_float.push(FloatNode {
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                reason,
            }),
            None => quant[i] = true,
        }
    }
    let mut acts: Vec<String> = Vec::new();
    let mut fused_out: HashSet<&str> = HashSet::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if !quant[i] || !is_weighted(n) {
            continue;
        }
        let out = n.outputs[0].as_str();
        if let Some(c) = uses.sole_reader(out) {
            if quant[c] && g.nodes[c].facts().clamp {
                fused_out.insert(out);
                p.fused.push((n.name.clone(), g.nodes[c].name.clone()));
            }
        }
    }
    let interior = chain_interior(g, &uses, &quant, exclude, &fused_out);
    let mut add = |v: &str, acts: &mut Vec<String>| {
        if !v.is_empty()
            && !g.initializers.contains_key(v)
            && !divisors.contains_key(v)
            && !fused_out.contains(v)
            && !interior.contains(v)
            && seen.insert(v.to_string())
        {
            acts.push(v.to_string());
        }
    };
    for (i, n) in g.nodes.iter().enumerate() {
        if !quant[i] {
            continue;
        }
        p.quantized.push(n.name.clone());
        match n.facts().quant_inputs {
            QuantInputs::First => {
                if let Some(v) = n.inputs.first() {
                    add(v, &mut acts);
                }
            }
            QuantInputs::All => {
                for v in &n.inputs {
                    add(v, &mut acts);
                }
            }
            QuantInputs::None => unreachable!("planned nodes have an integer form"),
        }
        add(&n.outputs[0], &mut acts);
    }
    *weighted |= g
        .nodes
        .iter()
        .enumerate()
        .any(|(i, n)| quant[i] && is_weighted(n));
    p.activations.extend(acts);
    for n in &g.nodes {
        for sub in n.subgraphs() {
            plan_graph(sub, exclude, quantize_statistics, p, seen, weighted);
        }
    }
}

/// How weights and activations are quantized.
#[derive(Debug, Clone)]
pub struct QdqOptions {
    /// Per-channel weights (default) or per-tensor.
    pub per_channel: bool,
    /// Weight bit width (2..=8), symmetric signed, stored in int8.
    pub weight_bits: u8,
    /// Activations signed (i8) instead of u8; both affine.
    pub signed_activations: bool,
}

impl Default for QdqOptions {
    fn default() -> Self {
        QdqOptions {
            per_channel: true,
            weight_bits: 8,
            signed_activations: false,
        }
    }
}

impl QdqOptions {
    /// Activation scheme (per-tensor affine).
    pub fn activation_scheme(&self) -> QuantScheme {
        QuantScheme::new(8, self.signed_activations).expect("8 bits")
    }
}

/// The 16-bit activation scheme of mixed precision: signed, symmetric (zero point 0),
/// per tensor — ONNX Runtime's `QInt16` activations with int8 weights (W8A16).
pub fn activation_scheme_16() -> QuantScheme {
    QuantScheme::new(16, true)
        .expect("16 bits")
        .with_symmetric(true)
}

fn qtensor(q: &[i32], shape: &[usize], signed: bool) -> Tensor {
    let data = if signed {
        Data::I8(q.iter().map(|&v| v as i8).collect())
    } else {
        Data::U8(q.iter().map(|&v| v as u8).collect())
    };
    Tensor::new(shape.to_vec(), data).expect("sizes match")
}

fn zp_tensor(z: &[i32], shape: &[usize], signed: bool) -> Tensor {
    qtensor(z, shape, signed)
}

/// Weight codes (or zero points) of `bits` bits: int16 for 16 bits
/// ([`WEIGHT_BITS_16`]), else int8.
fn weight_tensor(q: &[i32], shape: &[usize], bits: u8) -> Tensor {
    if bits == WEIGHT_BITS_16 {
        let data = Data::I16(q.iter().map(|&v| v as i16).collect());
        Tensor::new(shape.to_vec(), data).expect("sizes match")
    } else {
        qtensor(q, shape, true)
    }
}

/// The weight width of mixed precision's 16-bit layers ([`crate::mixed::Precision::Wide16`]):
/// symmetric int16 weights, per output channel, read by an opset-21 DequantizeLinear.
pub const WEIGHT_BITS_16: u8 = 16;

/// Whether `bits` is a weight width a node of [`insert_qdq_wide`] may get: 2 to 8 (stored
/// as int8, or int4 for 2–4 by [`crate::int4`]) or 16 (int16).
fn weight_bits_ok(bits: u8) -> bool {
    (2..=8).contains(&bits) || bits == WEIGHT_BITS_16
}

/// Names of the values and nodes [`insert_qdq`] adds for one quantized activation `t`:
/// `t_scale`, `t_zp`, `t_q` (QuantizeLinear output), `t_dq` (DequantizeLinear output, or
/// `t` itself when `t` is a graph output; the producer then writes `t_float`), nodes `t_Q`
/// and `t_DQ`. Made unique against the graph by [`Namer`].
struct ActNames {
    scale: String,
    zp: String,
    q: String,
    dq: String,
    /// What the producer writes when `t` is a graph output.
    float: Option<String>,
    q_node: String,
    dq_node: String,
}

/// Inserts QDQ nodes into `g` following `plan`, with activation parameters from `act`
/// (tensor → (scale, zero point)). Returns the rewritten graph.
///
/// Names stay short and readable (ONNX Runtime's `_QuantizeLinear_Output`-style suffixes
/// were a large part of small models' files): activation `t` gets `t_scale`, `t_zp`, `t_q`,
/// `t_dq` and nodes `t_Q`, `t_DQ`; the weight and bias of node `n` become `n.w_q`,
/// `n.w_scale` (→ `n.w_dq` by node `n.w_DQ`) and `n.b_q`, `n.b_scale` (→ `n.b_dq`). Every
/// generated name is unique in the graph; names of the original tensors read by other nodes
/// and of graph inputs and outputs do not change.
pub fn insert_qdq(
    g: Graph,
    plan: &Plan,
    act: &BTreeMap<String, (f32, i32)>,
    opts: &QdqOptions,
) -> Result<Graph> {
    insert_qdq_mixed(g, plan, act, opts, &HashMap::new())
}

/// [`insert_qdq`] with a weight bit width per node: the weights of a node named in
/// `weight_bits` get that width (2..=8) instead of `opts.weight_bits` (mixed precision,
/// [`crate::mixed`]).
pub fn insert_qdq_mixed(
    g: Graph,
    plan: &Plan,
    act: &BTreeMap<String, (f32, i32)>,
    opts: &QdqOptions,
    weight_bits: &HashMap<String, u8>,
) -> Result<Graph> {
    insert_qdq_wide(g, plan, act, opts, weight_bits, &HashSet::new())
}

/// [`insert_qdq_mixed`] with 16-bit activations: the activations named in `wide` get int16
/// QuantizeLinear/DequantizeLinear (their zero point is an int16 tensor; `act` holds their
/// 16-bit scale and zero point; a weighted node reading such an input gets an int32 bias
/// at `s_in16 · s_w`, raised per channel where the bias would saturate: the layer runs as
/// DequantizeLinear → float op → QuantizeLinear in ONNX Runtime and quantkit's engine, so
/// the bias scale need not be the product; the int8 rule of coarsening such a channel's
/// weight scale instead made some weights 130 times coarser in PP-OCRv4's recognizer).
/// A node given 16 weight bits in `weight_bits` ([`WEIGHT_BITS_16`]) gets symmetric int16 weights. 16-bit Q/DQ
/// exist from opset 21: when `wide` names an activation of the plan or a node has 16-bit
/// weights, the default-domain opset is raised to 21
/// ([`crate::prepare::upgrade_opset_21`]).
pub fn insert_qdq_wide(
    mut g: Graph,
    plan: &Plan,
    act: &BTreeMap<String, (f32, i32)>,
    opts: &QdqOptions,
    weight_bits: &HashMap<String, u8>,
    wide: &HashSet<String>,
) -> Result<Graph> {
    if let Some((t, (_, z))) = act
        .iter()
        .find(|(t, (_, z))| wide.contains(*t) && i16::try_from(*z).is_err())
    {
        return Err(PtqError::InvalidOption(format!(
            "activation `{t}`: zero point {z} does not fit int16"
        )));
    }
    let any_wide = act.keys().any(|t| wide.contains(t))
        || weight_bits
            .iter()
            .any(|(n, &b)| b == WEIGHT_BITS_16 && plan.quantized.contains(n));
    if any_wide {
        crate::prepare::upgrade_opset_21(&mut g)?;
    }
    if let Some((n, b)) = weight_bits.iter().find(|(_, &b)| !weight_bits_ok(b)) {
        return Err(PtqError::InvalidOption(format!(
            "weight bits {b} for node `{n}`: supported are 2 to 8 (stored as int8) and 16"
        )));
    }
    if !(2..=8).contains(&opts.weight_bits) {
        return Err(PtqError::InvalidOption(format!(
            "--weight-bits {}: supported are 2 to 8 (stored as int8)",
            opts.weight_bits
        )));
    }
    let graph_outputs = all_outputs(&g);
    let quantized: HashSet<&str> = plan.quantized.iter().map(String::as_str).collect();
    let mut namer = Namer::whole(&g);
    let names: HashMap<&str, ActNames> = act
        .keys()
        .map(|t| {
            let is_out = graph_outputs.contains(t);
            let names = ActNames {
                scale: namer.value(&format!("{t}_scale")),
                zp: namer.value(&format!("{t}_zp")),
                q: namer.value(&format!("{t}_q")),
                dq: if is_out {
                    t.clone()
                } else {
                    namer.value(&format!("{t}_dq"))
                },
                float: is_out.then(|| namer.value(&format!("{t}_float"))),
                q_node: namer.node(&format!("{t}_Q")),
                dq_node: namer.node(&format!("{t}_DQ")),
            };
            (t.as_str(), names)
        })
        .collect();
    let ctx = Rewrite {
        names: &names,
        quantized: &quantized,
        act,
        opts,
        weight_bits,
        wide,
    };
    rewrite_graph(&mut g, &ctx, &mut namer)?;
    Ok(g)
}

/// What [`rewrite_graph`] needs at every depth.
#[derive(Clone, Copy)]
struct Rewrite<'a> {
    names: &'a HashMap<&'a str, ActNames>,
    quantized: &'a HashSet<&'a str>,
    act: &'a BTreeMap<String, (f32, i32)>,
    opts: &'a QdqOptions,
    weight_bits: &'a HashMap<String, u8>,
    wide: &'a HashSet<String>,
}

/// The outputs of `g` and of every subgraph in it.
fn all_outputs(g: &Graph) -> HashSet<String> {
    let mut s: HashSet<String> = g.outputs.iter().map(|o| o.name.clone()).collect();
    for n in &g.nodes {
        for sub in n.subgraphs() {
            s.extend(all_outputs(sub));
        }
    }
    s
}

/// Inserts the QDQ pairs of the activations `g` produces (inputs and node outputs), rewires
/// its readers (and, through the recursion, readers inside its subgraphs, which see the
/// pair's output in their enclosing scope) and quantizes the weights of its quantized nodes.
fn rewrite_graph(g: &mut Graph, ctx: &Rewrite, namer: &mut Namer) -> Result<()> {
    let Rewrite {
        names,
        quantized,
        act,
        opts,
        weight_bits,
        wide,
    } = *ctx;
    let act_signed = opts.signed_activations;
    let mut new_nodes: Vec<Node> = Vec::new();
    let qdq_pair = |g: &mut Graph, src: &str, t: &str, nodes: &mut Vec<Node>| {
        let (s, z) = act[t];
        let a = &names[t];
        g.initializers
            .insert(a.scale.clone(), Tensor::from_f32(&[], vec![s]));
        let zp = if wide.contains(t) {
            // Checked to fit by `insert_qdq_wide`.
            Tensor::new(vec![], Data::I16(vec![z as i16])).expect("one value")
        } else {
            zp_tensor(&[z], &[], act_signed)
        };
        g.initializers.insert(a.zp.clone(), zp);
        nodes.push(Node::of(
            OpKind::QuantizeLinear,
            &a.q_node,
            &[src, &a.scale, &a.zp],
            &[&a.q],
        ));
        nodes.push(Node::of(
            OpKind::DequantizeLinear,
            &a.dq_node,
            &[&a.q, &a.scale, &a.zp],
            &[&a.dq],
        ));
    };
    let inputs: Vec<String> = g.inputs.iter().map(|i| i.name.clone()).collect();
    for i in &inputs {
        if act.contains_key(i) {
            qdq_pair(g, i, i, &mut new_nodes);
        }
    }
    let nodes = std::mem::take(&mut g.nodes);
    for mut n in nodes {
        let in0 = n.inputs.first().cloned().unwrap_or_default();
        for v in n.inputs.iter_mut() {
            if let Some(a) = names.get(v.as_str()) {
                *v = a.dq.clone();
            }
        }
        if quantized.contains(n.name.as_str()) && is_weighted(&n) {
            match weight_bits.get(&n.name) {
                Some(&b) => {
                    let o = QdqOptions {
                        weight_bits: b,
                        ..opts.clone()
                    };
                    quantize_weights(g, namer, &mut n, &in0, act, &o, wide, &mut new_nodes)?;
                }
                None => quantize_weights(g, namer, &mut n, &in0, act, opts, wide, &mut new_nodes)?,
            }
        }
        for sub in n.subgraphs_mut() {
            rewrite_graph(sub, ctx, namer)?;
        }
        let mut pending = Vec::new();
        for o in n.outputs.iter_mut() {
            let Some(a) = names.get(o.as_str()) else {
                continue;
            };
            let t = o.clone();
            let src = match &a.float {
                Some(f) => {
                    *o = f.clone();
                    f.clone()
                }
                None => t.clone(),
            };
            pending.push((src, t));
        }
        new_nodes.push(n);
        for (src, t) in pending {
            qdq_pair(g, &src, &t, &mut new_nodes);
        }
    }
    g.nodes = new_nodes;
    g.prune_initializers();
    Ok(())
}

/// Replaces the weight (and bias) of a Conv/ConvTranspose/Gemm/MatMul with quantized
/// initializers read through DequantizeLinear. When the input `in0` is a 16-bit activation
/// (in `wide`) or the weights have 16 bits, a bias that would saturate int32 gets a coarser
/// scale of its own instead of coarser weights ([`insert_qdq_wide`]).
#[allow(clippy::too_many_arguments)]
fn quantize_weights(
    g: &mut Graph,
    namer: &mut Namer,
    n: &mut Node,
    in0: &str,
    act: &BTreeMap<String, (f32, i32)>,
    opts: &QdqOptions,
    wide: &HashSet<String>,
    out: &mut Vec<Node>,
) -> Result<()> {
    let Some(w_name) = n.inputs.get(1).cloned() else {
        return Ok(());
    };
    let Some(w) = g.initializers.get(&w_name).filter(|t| t.dtype.is_float()) else {
        return Ok(()); // MatMul of two activations: both already QDQ'd.
    };
    let w = w.clone();
    let ws = w.to_f32_vec();
    // Output-channel axis (ONNX layouts): Conv [O, I/g, kh, kw] → 0; ConvTranspose
    // [I, O/g, kh, kw] → 1; Gemm B [K, N] → 1 (transB: [N, K] → 0); MatMul B [.., K, N] → last.
    let group = n.attr_int("group", 1).unwrap_or(1);
    let axis = match n.kind() {
        Some(OpKind::Conv) => Some(0),
        Some(OpKind::ConvTranspose) if group == 1 => Some(1),
        Some(OpKind::Gemm) if w.rank() == 2 => Some(if n.attr_int("transB", 0).unwrap_or(0) != 0 {
            0
        } else {
            1
        }),
        Some(OpKind::MatMul) if w.rank() == 2 => Some(1),
        _ => None,
    }
    .filter(|_| opts.per_channel && w.rank() >= 1);
    let gran = axis.map_or(Granularity::PerTensor, |axis| Granularity::PerChannel {
        axis,
    });
    let scheme = QuantScheme::new(opts.weight_bits, true)
        .map_err(core(format!("weight `{w_name}`")))?
        .with_symmetric(true)
        .with_granularity(gran);
    let mut p = QParams::from_tensor(&w_name, &ws, &w.shape, &scheme)
        .map_err(core(format!("weight `{w_name}` of node `{}`", n.name)))?;
    // Bias handling: int32 with scale s_in·s_w (needs the input's scale). Behind a 16-bit
    // input or with 16-bit weights the layer runs in float (DQ → op → Q): where the bias
    // would saturate, its own scale is raised, not the weight's.
    let wide_layer = wide.contains(in0) || opts.weight_bits == WEIGHT_BITS_16;
    let s_in = act.get(in0).map(|a| a.0);
    let bias_name = n.inputs.get(2).filter(|b| !b.is_empty()).cloned();
    let out_ch = axis.map(|a| w.shape[a]);
    let bias = bias_name.as_ref().and_then(|b| {
        let t = g.initializers.get(b)?;
        let ok_shape = t.dtype.is_float()
            && match out_ch {
                Some(c) => t.len() == c,
                None => t.rank() <= 1 || t.shape.iter().filter(|&&d| d != 1).count() <= 1,
            };
        let gemm_plain = !n.is(OpKind::Gemm)
            || (n.attr_float("alpha", 1.0).unwrap_or(0.0) == 1.0
                && n.attr_float("beta", 1.0).unwrap_or(0.0) == 1.0);
        (ok_shape && gemm_plain && !n.is(OpKind::MatMul)).then(|| t.to_f32_vec())
    });
    let mut bias_scales = None;
    if let (Some(b), Some(s_in)) = (&bias, s_in) {
        // Never let the bias scale s_in·s_w underflow to a subnormal, nor a bias saturate
        // int32: raise the weight scale of such channels (it only coarsens weights that are
        // tiny compared with the bias; ONNX Runtime's quantizer does the same). A 16-bit
        // layer raises only the bias's scale: its `s_in16 · s_w` is 256 times finer, and
        // raising the weight scale made some of PP-OCRv4's recognizer weights 130 times
        // coarser. (Its bias is not left float: ONNX Runtime's WeightBiasQuantization
        // would quantize a float bias at `s_in · s_w` and saturate it: 0.38 of the
        // recognizer's frames with 16-bit weights.)
        let lim = f64::from(i32::MAX / 2);
        let mut own = p.scales.clone();
        let scales = if wide_layer { &mut own } else { &mut p.scales };
        for (j, s) in scales.iter_mut().enumerate() {
            let bmax = if p.zero_points.len() == 1 {
                b.iter().fold(0f32, |m, v| m.max(v.abs()))
            } else {
                b[j].abs()
            };
            let need_b = f64::from(bmax) / (f64::from(s_in) * lim);
            let need_n = f64::from(f32::MIN_POSITIVE) * 16.0 / f64::from(s_in);
            let floor = need_b.max(need_n) as f32;
            if *s < floor {
                *s = floor;
            }
        }
        if wide_layer {
            bias_scales = Some(own);
        }
    }
    let q = p
        .quantize(&ws, &w.shape, RoundingMode::HalfToEven)
        .map_err(core(format!("weight `{w_name}`")))?;
    // Generated names follow the node (`conv1.w_q`), or its output when it has no name.
    let base = if n.name.is_empty() {
        n.outputs.first().cloned().unwrap_or_default()
    } else {
        n.name.clone()
    };
    let qn = namer.value(&format!("{base}.w_q"));
    g.initializers
        .insert(qn.clone(), weight_tensor(&q, &w.shape, opts.weight_bits));
    let pshape: Vec<usize> = if p.scales.len() == 1 {
        vec![]
    } else {
        vec![p.scales.len()]
    };
    let sn = namer.value(&format!("{base}.w_scale"));
    g.initializers
        .insert(sn.clone(), Tensor::from_f32(&pshape, p.scales.clone()));
    let mut dq_inputs = vec![qn, sn];
    if !omit_weight_zero_point(n, &p.zero_points) {
        let zn = namer.value(&format!("{base}.w_zp"));
        g.initializers.insert(
            zn.clone(),
            weight_tensor(&p.zero_points, &pshape, opts.weight_bits),
        );
        dq_inputs.push(zn);
    }
    let dqn = namer.value(&format!("{base}.w_dq"));
    let dq_inputs: Vec<&str> = dq_inputs.iter().map(String::as_str).collect();
    let mut dq = Node::of(
        OpKind::DequantizeLinear,
        &namer.node(&format!("{base}.w_DQ")),
        &dq_inputs,
        &[&dqn],
    );
    if let Some(a) = axis {
        dq = dq.with_attr("axis", AttrValue::Int(a as i64));
    }
    out.push(dq);
    n.inputs[1] = dqn;
    if let (Some(b), Some(s_in), Some(bn)) = (bias, s_in, bias_name) {
        let (qb, bs) = quantize_bias(&bn, &b, s_in, bias_scales.as_deref().unwrap_or(&p.scales))
            .map_err(core(format!("bias `{bn}` of node `{}`", n.name)))?;
        let bt = g.initializers[&bn].clone();
        let bshape = if bs.len() == 1 {
            bt.shape.clone()
        } else {
            vec![bs.len()]
        };
        let qbn = namer.value(&format!("{base}.b_q"));
        g.initializers.insert(
            qbn.clone(),
            Tensor::new(bshape, Data::I32(qb)).expect("sizes"),
        );
        let bsshape: Vec<usize> = if bs.len() == 1 {
            vec![]
        } else {
            vec![bs.len()]
        };
        let bsn = namer.value(&format!("{base}.b_scale"));
        let nbs = bs.len();
        g.initializers
            .insert(bsn.clone(), Tensor::from_f32(&bsshape, bs));
        // No zero point: an int32 bias has zero point 0, which is DequantizeLinear's default
        // for an absent `x_zero_point` (whose type is then the int32 of `x`).
        let bdq = namer.value(&format!("{base}.b_dq"));
        let mut node = Node::of(
            OpKind::DequantizeLinear,
            &namer.node(&format!("{base}.b_DQ")),
            &[&qbn, &bsn],
            &[&bdq],
        );
        if nbs > 1 {
            node = node.with_attr("axis", AttrValue::Int(0));
        }
        out.push(node);
        n.inputs[2] = bdq;
    }
    Ok(())
}

/// Whether the weight `DequantizeLinear` of an `op` node can leave out its zero point.
/// The input is optional (default 0, its type taken from the int8 `x`), so all-zero zero
/// points — every symmetric weight — need not be stored. Except for `Gemm`: ONNX Runtime
/// (1.32) no longer fuses `DQ → Gemm → Q` into its int8 `QGemm` when the weight's
/// zero point is absent (it still fuses Conv and MatMul into `QLinearConv`/`QLinearMatMul`),
/// so Gemm weights keep an explicit zero vector.
pub(crate) fn omit_weight_zero_point(n: &Node, zero_points: &[i32]) -> bool {
    !n.is(OpKind::Gemm) && zero_points.iter().all(|&z| z == 0)
}

fn quantize_bias(
    name: &str,
    b: &[f32],
    s_in: f32,
    ws: &[f32],
) -> quantkit_core::Result<(Vec<i32>, Vec<f32>)> {
    quantkit_core::quantize_bias(name, b, s_in, ws)
}

/// Size in bytes of all initializers (the weight payload).
pub fn initializer_bytes(g: &Graph) -> usize {
    g.initializers.values().map(Tensor::nbytes).sum()
}
