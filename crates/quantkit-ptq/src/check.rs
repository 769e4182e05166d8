//! `quantkit check`: a static deployability check of a quantized graph, layer by layer, for
//! the integer targets quantkit knows: ONNX Runtime (MLAS), TFLite-style fixed-point
//! requantization, and quantkit's own engine. Nothing is run; every figure follows from the
//! graph's scales, zero points and weights.
//!
//! A *layer* is one integer matrix product: `DequantizeLinear → Conv / ConvTranspose / Gemm /
//! MatMul [→ Relu | Clip] → QuantizeLinear` in a QDQ graph, a `QLinearConv`,
//! `QLinearMatMul` or com.microsoft `QGemm` in a QOperator graph, or a `ConvInteger` /
//! `MatMulInteger` of dynamic quantization. For each it computes:
//!
//! - **the requantization multiplier** `M_c = s_x · s_w,c / s_y` of every output channel and
//!   its TFLite-style fixed-point form `M0 · 2^(shift − 31)`, `M0 ∈ [2^30, 2^31)`
//!   ([`QuantizedMultiplier::from_f64`]): a multiplier of `2^30` or more has no such form
//!   (**error**); one below `2^−32` flushes to zero, every output becomes the zero point
//!   (**warning**); `M ≥ 1` needs a left shift, which fixed-point targets that only shift
//!   right (gemmlowp's `QuantizeMultiplierSmallerThanOne`, many NPUs) cannot take
//!   (**note**);
//! - **the worst-case int32 accumulator** for the actual `K` and weights:
//!   `max|x − z_x| · Σ_k |w_k,c − z_w,c| + |bias_c|`, with `max|x − z_x|` over the input type's
//!   whole code range (a bound every input can reach, not a measured one). Above
//!   `2^31 − 1` the integer result can wrap (**error**);
//! - **`vpmaddubsw` pairs**: on x86 CPUs without AVX-512 VNNI / AVX-VNNI, ONNX Runtime's
//!   u8×s8 kernels add two u8·s8 products into a saturating int16. A pair of consecutive
//!   weights along K (`k = 2j, 2j+1`, the kernels' pairing) of the same sign with
//!   `|w_a| + |w_b| ≥ 129` saturates when both activations are near 255
//!   (`255 · 129 > 32 767`) (**warning**, one for the model; ONNX Runtime's remedy is
//!   `reduce_range`, 7-bit weights). Depthwise convolutions are not counted (MLAS runs them
//!   on a kernel that widens to int32). quantkit's own AVX2 kernel multiplies in 16 bits
//!   (`vpmaddwd`) and is exact.
//!
//! Where a layer is not of these forms, nothing is claimed about it. Ops that run as float
//! islands in quantkit's engine come from the engine's compile report, which this crate does
//! not depend on: the `quantkit check` command adds them.

use crate::error::{PtqError, Result};
use quantkit_core::QuantizedMultiplier;
use quantkit_graph::{DType, Graph, Node, OpKind, Tensor, Uses};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Informational: a property some targets care about.
    Note,
    /// The model deploys but may lose accuracy on this target.
    Warning,
    /// The integer result can be wrong, or the layer cannot be expressed for the target.
    Error,
}

/// Which deployment a finding concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// Every integer target.
    All,
    /// ONNX Runtime's CPU execution provider (MLAS kernels).
    OnnxRuntime,
    /// TFLite-style fixed-point requantization (gemmlowp, TFLite, CMSIS-NN, NPUs).
    FixedPoint,
    /// quantkit's integer engine.
    Quantkit,
}

/// One finding.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    /// How serious.
    pub severity: Severity,
    /// For which target.
    pub target: Target,
    /// The layer's anchor node, if the finding is about one.
    pub node: Option<String>,
    /// What was found, with the numbers.
    pub message: String,
}

/// What the check computed for one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerCheck {
    /// The anchor node (the Conv, Gemm, MatMul, QLinearConv...).
    pub node: String,
    /// Its operator, with `+Relu`/`+Clip` when a clamp sits between it and the output Q.
    pub op: String,
    /// Accumulation depth: products summed into one output (per group for a grouped Conv).
    pub k: usize,
    /// Input (activation) code type.
    pub input_type: String,
    /// Weight code type.
    pub weight_type: String,
    /// Output channels checked.
    pub channels: usize,
    /// Largest worst-case |accumulator| over the channels.
    pub worst_accumulator: f64,
    /// `log2(2^31 − 1) − log2(worst_accumulator)`: bits to spare (negative: can overflow).
    pub headroom_bits: f64,
    /// Smallest and largest requantization multiplier (`None` when the output is float or
    /// the scale of the output is set at run time, as in dynamic quantization).
    pub multiplier: Option<(f64, f64)>,
    /// Smallest and largest fixed-point shift (`M = M0 · 2^(shift − 31)`), where every
    /// multiplier has a fixed-point form.
    pub shift: Option<(i32, i32)>,
    /// Consecutive weight pairs along K that can saturate `vpmaddubsw`, and all pairs
    /// (`None` unless u8 inputs meet s8 weights, and for a depthwise convolution, which
    /// MLAS runs on a kernel that widens to int32).
    pub maddubs_pairs_at_risk: Option<(u64, u64)>,
}

/// The result of [`check`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckReport {
    /// Every layer found, in graph order.
    pub layers: Vec<LayerCheck>,
    /// Everything worth telling, errors first.
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// Whether a finding of severity [`Severity::Error`] exists.
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }
}

const I32_MAX: f64 = 2_147_483_647.0;

/// A quantized operand: codes (constant or not), scale(s), zero point(s), code type.
struct Operand {
    dtype: DType,
    /// Constant codes (weights), if known.
    codes: Option<Tensor>,
    scales: Vec<f64>,
    zero_points: Vec<i64>,
}

fn const_of<'a>(g: &'a Graph, uses: &Uses, v: &str) -> Option<&'a Tensor> {
    if let Some(t) = g.initializers.get(v) {
        return Some(t);
    }
    // An Identity of an initializer (some exporters write weights that way).
    let p = uses.producer(v)?;
    let n = &g.nodes[p];
    if n.is(OpKind::Identity) {
        return g.initializers.get(n.inputs.first()?);
    }
    None
}

fn values_f64(g: &Graph, uses: &Uses, v: Option<&String>) -> Option<Vec<f64>> {
    let v = v.filter(|s| !s.is_empty())?;
    Some(const_of(g, uses, v)?.to_f64_vec())
}

/// Code type, zero points and scales of the value `v` read through its DequantizeLinear, or
/// as the codes of a QOperator input given its scale and zero point inputs.
fn operand_from(
    g: &Graph,
    uses: &Uses,
    codes: &str,
    scale: Option<&String>,
    zp: Option<&String>,
) -> Option<Operand> {
    let scales = values_f64(g, uses, scale)?;
    let zp_tensor = zp
        .filter(|s| !s.is_empty())
        .and_then(|z| const_of(g, uses, z));
    let constant = const_of(g, uses, codes).cloned();
    let dtype = constant
        .as_ref()
        .map(|t| t.dtype)
        .or_else(|| zp_tensor.map(|t| t.dtype))
        .or_else(|| {
            // The codes come from a QuantizeLinear: its zero point (or output_dtype) says.
            let q = &g.nodes[uses.producer(codes)?];
            if !q.is(OpKind::QuantizeLinear) && !q.is(OpKind::DynamicQuantizeLinear) {
                return None;
            }
            if q.is(OpKind::DynamicQuantizeLinear) {
                return Some(DType::U8);
            }
            match q.inputs.get(2).filter(|s| !s.is_empty()) {
                Some(z) => const_of(g, uses, z).map(|t| t.dtype),
                None => Some(DType::U8),
            }
        })
        .unwrap_or(DType::U8);
    // Empty parameter tensors (a malformed model) say nothing: no operand.
    if scales.is_empty() || scales.iter().any(|s| !s.is_finite() || *s <= 0.0) {
        return None;
    }
    let zero_points = zp_tensor
        .map(Tensor::to_i64_vec)
        .filter(|z| !z.is_empty())
        .unwrap_or(vec![0]);
    Some(Operand {
        dtype,
        codes: constant,
        scales,
        zero_points,
    })
}

/// Through a DequantizeLinear: the operand it dequantizes.
fn through_dq(g: &Graph, uses: &Uses, v: &str) -> Option<Operand> {
    let dq = &g.nodes[uses.producer(v)?];
    if !dq.is(OpKind::DequantizeLinear) {
        return None;
    }
    operand_from(
        g,
        uses,
        dq.inputs.first()?,
        dq.inputs.get(1),
        dq.inputs.get(2),
    )
}

/// The scale of the QuantizeLinear the layer's output reaches, through one Relu/Clip whose
/// only reader it is; `(op suffix, scale)`.
fn output_scale(g: &Graph, uses: &Uses, out: &str) -> (String, Option<f64>) {
    let mut v = out.to_string();
    let mut suffix = String::new();
    for _ in 0..2 {
        let readers = uses.readers(&v);
        if readers.len() != 1 {
            break;
        }
        let r = &g.nodes[readers[0]];
        if r.is(OpKind::QuantizeLinear) {
            let s = values_f64(g, uses, r.inputs.get(1)).and_then(|s| s.first().copied());
            return (suffix, s);
        }
        if (r.is(OpKind::Relu) || r.is(OpKind::Clip)) && suffix.is_empty() {
            suffix = format!("+{}", r.op_type);
            v = r.outputs[0].clone();
            continue;
        }
        break;
    }
    (suffix, None)
}

/// The layer's weights as `[channels][k]` code rows, the channel count and K, from the
/// constant weight codes (`layout` says how the operator stores them).
enum Layout {
    /// `[O, I/g, k...]`: rows are output channels.
    ConvOut,
    /// `[I, O/g, k...]` (ConvTranspose): each output channel sums over `I/g · k...`.
    ConvTranspose { group: usize },
    /// `[K, N]`: columns are output channels.
    KN,
    /// `[N, K]`.
    NK,
}

fn weight_rows(w: &Tensor, layout: Layout) -> Option<(Vec<Vec<i64>>, usize)> {
    let v = w.to_i64_vec();
    let s = &w.shape;
    match layout {
        Layout::ConvOut => {
            let o = *s.first()?;
            let k = s[1..].iter().product::<usize>();
            Some((v.chunks(k.max(1)).take(o).map(<[i64]>::to_vec).collect(), k))
        }
        Layout::ConvTranspose { group } => {
            let (i, og) = (*s.first()?, *s.get(1)?);
            let spatial: usize = s[2..].iter().product();
            let group = group.max(1);
            let ig = i / group;
            let mut rows = Vec::with_capacity(og * group);
            for gi in 0..group {
                for oc in 0..og {
                    let mut r = Vec::with_capacity(ig * spatial);
                    for ic in 0..ig {
                        let base = ((gi * ig + ic) * og + oc) * spatial;
                        r.extend_from_slice(v.get(base..base + spatial)?);
                    }
                    rows.push(r);
                }
            }
            Some((rows, ig * spatial))
        }
        Layout::KN | Layout::NK => {
            if s.len() < 2 {
                return None;
            }
            let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
            let batches = v.len() / (r * c).max(1);
            let (k, n) = if matches!(layout, Layout::KN) {
                (r, c)
            } else {
                (c, r)
            };
            let mut rows = Vec::new();
            for b in 0..batches {
                let m = &v[b * r * c..(b + 1) * r * c];
                for j in 0..n {
                    rows.push(
                        (0..k)
                            .map(|i| {
                                if matches!(layout, Layout::KN) {
                                    m[i * c + j]
                                } else {
                                    m[j * c + i]
                                }
                            })
                            .collect(),
                    );
                }
            }
            Some((rows, k))
        }
    }
}

fn code_range(d: DType) -> (i64, i64) {
    d.int_range().unwrap_or((0, 255))
}

/// Largest `|x − z|` an input of type `d` with zero point `z` can reach.
fn max_dev(d: DType, z: i64) -> f64 {
    let (lo, hi) = code_range(d);
    ((z - lo).abs().max((hi - z).abs())) as f64
}

struct Found {
    anchor: usize,
    op: String,
    x: Operand,
    w: Operand,
    layout: Layout,
    bias: Option<Vec<f64>>,
    y_scale: Option<f64>,
}

fn find_layer(g: &Graph, uses: &Uses, i: usize) -> Option<Found> {
    let n = &g.nodes[i];
    let group = n.attr_int("group", 1).unwrap_or(1).max(1) as usize;
    let kind = n.kind()?;
    let inp = |k: usize| n.inputs.get(k).filter(|s| !s.is_empty());
    match kind {
        OpKind::Conv | OpKind::ConvTranspose | OpKind::Gemm | OpKind::MatMul => {
            let x = through_dq(g, uses, inp(0)?)?;
            let xv = x;
            let w = through_dq(g, uses, inp(1)?)?;
            let layout = match kind {
                OpKind::Conv => Layout::ConvOut,
                OpKind::ConvTranspose => Layout::ConvTranspose { group },
                OpKind::Gemm if n.attr_int("transB", 0).unwrap_or(0) != 0 => Layout::NK,
                _ => Layout::KN,
            };
            if kind == OpKind::Gemm && n.attr_int("transA", 0).unwrap_or(0) != 0 {
                return None;
            }
            // A MatMul of two activations has no constant codes to bound: not checked.
            w.codes.as_ref()?;
            let bias = inp(2).and_then(|b| {
                through_dq(g, uses, b)
                    .and_then(|o| o.codes.map(|t| t.to_f64_vec()))
                    .or_else(|| {
                        // A float bias: in codes of s_x · s_w.
                        let f = values_f64(g, uses, Some(b))?;
                        let sx = xv.scales.first().copied()?;
                        Some(
                            f.iter()
                                .enumerate()
                                .map(|(c, v)| {
                                    let sw = w.scales[c.min(w.scales.len() - 1)];
                                    v / (sx * sw)
                                })
                                .collect(),
                        )
                    })
            });
            let (suffix, y_scale) = output_scale(g, uses, n.outputs.first()?);
            Some(Found {
                anchor: i,
                op: format!("{}{suffix}", n.op_type),
                x: xv,
                w,
                layout,
                bias,
                y_scale,
            })
        }
        OpKind::QLinearConv | OpKind::QLinearMatMul | OpKind::QGemm => {
            let x = operand_from(g, uses, inp(0)?, inp(1), inp(2))?;
            let w = operand_from(g, uses, inp(3)?, inp(4), inp(5))?;
            let (layout, bias, ys) = match kind {
                OpKind::QLinearConv => (
                    Layout::ConvOut,
                    values_f64(g, uses, inp(8)),
                    values_f64(g, uses, inp(6)),
                ),
                OpKind::QLinearMatMul => (Layout::KN, None, values_f64(g, uses, inp(6))),
                _ => (
                    if n.attr_int("transB", 0).unwrap_or(0) != 0 {
                        Layout::NK
                    } else {
                        Layout::KN
                    },
                    values_f64(g, uses, inp(6)),
                    values_f64(g, uses, inp(7)),
                ),
            };
            Some(Found {
                anchor: i,
                op: n.op_type.clone(),
                x,
                w,
                layout,
                bias,
                y_scale: ys.and_then(|s| s.first().copied()),
            })
        }
        OpKind::ConvInteger | OpKind::MatMulInteger => {
            let zp = |k: usize| {
                inp(k)
                    .and_then(|z| const_of(g, uses, z))
                    .map(Tensor::to_i64_vec)
            };
            let xcodes = inp(0)?;
            let mut x = operand_from(g, uses, xcodes, None, None).unwrap_or(Operand {
                dtype: DType::U8,
                codes: None,
                scales: vec![],
                zero_points: vec![0],
            });
            // DynamicQuantizeLinear picks its zero point at run time: any code.
            x.zero_points = zp(2).filter(|z| !z.is_empty()).unwrap_or(vec![0]);
            let wt = const_of(g, uses, inp(1)?)?.clone();
            let w = Operand {
                dtype: wt.dtype,
                codes: Some(wt),
                scales: vec![],
                zero_points: zp(3).filter(|z| !z.is_empty()).unwrap_or(vec![0]),
            };
            Some(Found {
                anchor: i,
                op: n.op_type.clone(),
                x,
                w,
                layout: if kind == OpKind::ConvInteger {
                    Layout::ConvOut
                } else {
                    Layout::KN
                },
                bias: None,
                y_scale: None,
            })
        }
        _ => None,
    }
}

/// Checks every integer layer of `g` (see the module documentation).
pub fn check(g: &Graph) -> Result<CheckReport> {
    let uses = Uses::new(g);
    let mut layers = Vec::new();
    let mut findings = Vec::new();
    let dynamic_x = |n: &Node| {
        n.inputs
            .first()
            .and_then(|v| uses.producer(v))
            .is_some_and(|p| g.nodes[p].is(OpKind::DynamicQuantizeLinear))
    };
    for i in 0..g.nodes.len() {
        let Some(f) = find_layer(g, &uses, i) else {
            continue;
        };
        let node = g.nodes[f.anchor].name.clone();
        let Some(wt) = f.w.codes.as_ref() else {
            continue;
        };
        let depthwise = matches!(f.layout, Layout::ConvOut)
            && g.nodes[f.anchor].attr_int("group", 1).unwrap_or(1) > 1
            && wt.shape.get(1) == Some(&1);
        let Some((rows, k)) = weight_rows(wt, f.layout) else {
            return Err(PtqError::InvalidOption(format!(
                "node `{node}`: weight `{}` of shape {:?} does not fit its operator",
                g.nodes[f.anchor].inputs.get(1).cloned().unwrap_or_default(),
                wt.shape
            )));
        };
        let channels = rows.len();
        // The input's worst |x − z_x|: over the whole code range; a dynamic input's zero
        // point is chosen at run time, so any code is possible on both sides.
        let zx = f.x.zero_points.first().copied().unwrap_or(0);
        let xdev = if dynamic_x(&g.nodes[f.anchor]) {
            let (lo, hi) = code_range(f.x.dtype);
            (hi - lo) as f64
        } else {
            max_dev(f.x.dtype, zx)
        };
        let mut worst = 0f64;
        let mut worst_c = 0;
        let mut worst_sum = 0f64;
        let (mut risky, mut pairs) = (0u64, 0u64);
        // A depthwise convolution (one input channel per group) runs on MLAS's depthwise
        // kernel, which widens to int32: no pairs.
        let maddubs =
            matches!(f.x.dtype, DType::U8) && matches!(f.w.dtype, DType::I8) && !depthwise;
        for (c, r) in rows.iter().enumerate() {
            let zw = f.w.zero_points[c.min(f.w.zero_points.len() - 1)];
            let s: f64 = r.iter().map(|&w| (w - zw).abs() as f64).sum();
            let b = f
                .bias
                .as_ref()
                .and_then(|b| b.get(c.min(b.len().saturating_sub(1))))
                .map_or(0.0, |v| v.abs());
            let acc = xdev * s + b;
            if acc > worst {
                worst = acc;
                worst_c = c;
                worst_sum = s;
            }
            if maddubs {
                for p in r.chunks(2) {
                    pairs += 1;
                    if let [a, b] = *p {
                        if (a > 0 && b > 0 || a < 0 && b < 0) && a.abs() + b.abs() >= 129 {
                            risky += 1;
                        }
                    }
                }
            }
        }
        let headroom = I32_MAX.log2() - worst.max(1.0).log2();
        let wide_x = matches!(f.x.dtype, DType::I16 | DType::U16);
        if wide_x {
            // W8A16: ONNX Runtime (no 16-bit QLinear kernels) and quantkit's engine run the
            // layer as DQ → float op → Q; an integer kernel for it accumulates in 64 bits
            // (TFLite's 16×8 kernels), so the int32 bound is a note, not an error.
            findings.push(Finding {
                severity: Severity::Note,
                target: Target::All,
                node: Some(node.clone()),
                message: format!(
                    "16-bit activations: ONNX Runtime and quantkit's engine run this layer in \
                     float between its Q/DQ; an integer kernel needs {} accumulators \
                     (worst case |acc| = {worst:.3e}, K = {k})",
                    if worst > I32_MAX {
                        "64-bit"
                    } else {
                        "32-bit (enough here)"
                    }
                ),
            });
        } else if worst > I32_MAX {
            findings.push(Finding {
                severity: Severity::Error,
                target: Target::All,
                node: Some(node.clone()),
                message: format!(
                    "int32 accumulator can overflow: worst case |acc| = {worst:.3e} > 2^31 − 1 \
                     (channel {worst_c}, K = {k}, max |x − z_x| = {xdev}, Σ|w − z_w| = {worst_sum:.0})"
                ),
            });
        }
        // Requantization multipliers.
        let (mut multiplier, mut shift) = (None, None);
        if let (Some(sy), Some(&sx)) = (f.y_scale, f.x.scales.first()) {
            let (mut mlo, mut mhi) = (f64::INFINITY, 0f64);
            let (mut slo, mut shi) = (i32::MAX, i32::MIN);
            let mut bad = None;
            let mut flushed = 0;
            for c in 0..channels {
                let Some(&sw) = f.w.scales.get(c.min(f.w.scales.len().saturating_sub(1))) else {
                    continue;
                };
                let m = sx * sw / sy;
                mlo = mlo.min(m);
                mhi = mhi.max(m);
                match QuantizedMultiplier::from_f64(m) {
                    Ok(q) if q == QuantizedMultiplier::ZERO && m != 0.0 => flushed += 1,
                    Ok(q) => {
                        slo = slo.min(q.shift);
                        shi = shi.max(q.shift);
                    }
                    Err(_) => bad = bad.or(Some((c, m))),
                }
            }
            multiplier = Some((mlo, mhi));
            if bad.is_none() && slo <= shi {
                shift = Some((slo, shi));
            }
            if let Some((c, m)) = bad {
                findings.push(Finding {
                    severity: Severity::Error,
                    target: Target::FixedPoint,
                    node: Some(node.clone()),
                    message: format!(
                        "requantization multiplier s_x·s_w/s_y = {m:.6e} (channel {c}) has no \
                         fixed-point form M0·2^(shift−31) with M0 in [2^30, 2^31) and shift ≤ 30"
                    ),
                });
            }
            if flushed > 0 {
                findings.push(Finding {
                    severity: Severity::Warning,
                    target: Target::FixedPoint,
                    node: Some(node.clone()),
                    message: format!(
                        "{flushed} of {channels} channels have a multiplier below 2^−32 \
                         (smallest {mlo:.3e}): fixed point flushes it to 0 and the channel \
                         outputs its zero point"
                    ),
                });
            }
            if mhi >= 1.0 && bad.is_none() {
                findings.push(Finding {
                    severity: Severity::Note,
                    target: Target::FixedPoint,
                    node: Some(node.clone()),
                    message: format!(
                        "multiplier up to {mhi:.4} ≥ 1 needs a left shift (TFLite takes it; \
                         targets limited to M < 1, such as gemmlowp's \
                         QuantizeMultiplierSmallerThanOne and many NPUs, do not)"
                    ),
                });
            }
        }
        // TFLite requires symmetric per-channel weights.
        if f.w.zero_points.len() > 1 && f.w.zero_points.iter().any(|&z| z != 0) {
            findings.push(Finding {
                severity: Severity::Warning,
                target: Target::FixedPoint,
                node: Some(node.clone()),
                message: "per-channel weights with non-zero zero points: TFLite's per-channel \
                          kernels require symmetric weights (zero point 0)"
                    .into(),
            });
        }
        if k > 33_025 {
            findings.push(Finding {
                severity: Severity::Note,
                target: Target::Quantkit,
                node: Some(node.clone()),
                message: format!(
                    "K = {k} exceeds the int8 kernels' exact depth (33,025): the engine runs \
                     this layer on its i64 reference path or as a float island"
                ),
            });
        }
        layers.push(LayerCheck {
            node,
            op: f.op,
            k,
            input_type: format!("{:?}", f.x.dtype).to_lowercase(),
            weight_type: format!("{:?}", f.w.dtype).to_lowercase(),
            channels,
            worst_accumulator: worst,
            headroom_bits: headroom,
            multiplier,
            shift,
            maddubs_pairs_at_risk: maddubs.then_some((risky, pairs)),
        });
    }
    if layers.is_empty() {
        findings.push(Finding {
            severity: Severity::Note,
            target: Target::All,
            node: None,
            message: "no integer matrix product found (a float model, or layers of a form \
                      this check does not know): nothing was checked"
                .into(),
        });
    }
    // One finding for the vpmaddubsw risk (the per-layer counts are in the layers).
    let at_risk: Vec<(&str, u64, u64)> = layers
        .iter()
        .filter_map(|l| match l.maddubs_pairs_at_risk {
            Some((r, p)) if r > 0 => Some((l.node.as_str(), r, p)),
            _ => None,
        })
        .collect();
    if !at_risk.is_empty() {
        let (r, p) = at_risk
            .iter()
            .fold((0, 0), |(a, b), &(_, r, p)| (a + r, b + p));
        let mut names: Vec<&str> = at_risk.iter().map(|x| x.0).take(5).collect();
        if at_risk.len() > 5 {
            names.push("...");
        }
        findings.push(Finding {
            severity: Severity::Warning,
            target: Target::OnnxRuntime,
            node: None,
            message: format!(
                "{} layers ({}) have weight pairs along K of one sign with |w_a| + |w_b| ≥ 129 \
                 ({r} of their {p} pairs): on x86 without VNNI, vpmaddubsw saturates such a \
                 pair in int16 when both u8 activations are near 255; ONNX Runtime's \
                 reduce_range (7-bit weights) avoids it",
                at_risk.len(),
                names.join(", ")
            ),
        });
    }
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    Ok(CheckReport { layers, findings })
}
