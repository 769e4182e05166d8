//! QDQ → QOperator: rewrites a QDQ graph (as [`crate::insert_qdq`] writes it) into the
//! QOperator form ONNX Runtime's static quantizer emits with `QuantFormat.QOperator`: each
//! quantized node reads and writes quantized tensors directly, and
//! `QuantizeLinear`/`DequantizeLinear` remain only where a value crosses into or out of float.
//!
//! | QDQ pattern (DQ inputs, Q output) | QOperator node |
//! |---|---|
//! | `Conv` (+ fused `Relu`/`Clip`) | `QLinearConv` (int32 bias input) |
//! | `MatMul` (+ fused `Relu`/`Clip`) | `QLinearMatMul` |
//! | `Gemm` (+ fused `Relu`/`Clip`) | `QGemm` (com.microsoft, int32 bias `C`) |
//! | `Add`, `Mul` | `QLinearAdd`, `QLinearMul` (com.microsoft) |
//! | `Concat` | `QLinearConcat` (com.microsoft) |
//! | `GlobalAveragePool`, `AveragePool` | `QLinearGlobalAveragePool`, `QLinearAveragePool` (com.microsoft) |
//! | `Sigmoid`, `LeakyRelu` | `QLinearSigmoid`, `QLinearLeakyRelu` (com.microsoft) |
//! | `MaxPool`, `Reshape`, `Flatten`, `Transpose`, `Squeeze`, `Unsqueeze` | the same op on the quantized tensor |
//!
//! A fused `Relu`/`Clip` disappears into the output range: `clamp(Q(y)) = Q(clip(y))` holds
//! exactly when the range the output's scale and zero point can represent,
//! `[(q_min − z)·s, (q_max − z)·s]`, lies inside `[lo, hi]` (up to half a step), which
//! calibration of the activation's output guarantees; the pass checks it and otherwise
//! leaves the pair in float. Ops that move values without arithmetic (MaxPool, Reshape...)
//! keep their input's scale and zero point, so their output is not requantized: the QOperator
//! model can differ from the QDQ model there by the one rounding the QDQ model does at that
//! output, which is why the tests compare the two by top-1 agreement, not bit for bit.
//!
//! Everything else stays float between `DequantizeLinear` and `QuantizeLinear`, and the
//! report says why.

use crate::error::{graph, PtqError, Result};
use crate::prepare::Namer;
use crate::qdq::FloatNode;
use quantkit_graph::ops::clip::ClipBounds;
use quantkit_graph::{
    passes, AttrValue, DType, Data, Graph, Node, OpKind, QuantInputs, Tensor, Uses,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Domain of ONNX Runtime's contrib operators.
pub use quantkit_graph::MS_DOMAIN;

/// What [`to_qoperator`] did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QopReport {
    /// `(node, op_type, qoperator_op)`: nodes rewritten to a QLinear op.
    pub converted: Vec<(String, String, String)>,
    /// `(node, op_type)`: nodes that now run directly on the quantized tensor.
    pub direct: Vec<(String, String)>,
    /// `(producer, activation)`: Relu/Clip absorbed into the producer's output range.
    pub fused_into_range: Vec<(String, String)>,
    /// Non-Q/DQ nodes still computed in float, and why.
    pub left_float: Vec<FloatNode>,
    /// `QuantizeLinear` nodes left (float → quantized boundaries).
    pub quantize_nodes: usize,
    /// `DequantizeLinear` nodes left (quantized → float boundaries).
    pub dequantize_nodes: usize,
}

/// A quantized value: the integer tensor and the names of its scale and zero point.
#[derive(Debug, Clone)]
struct QVal {
    q: String,
    scale: String,
    zp: String,
    /// Per-axis parameters (weights only).
    axis: Option<i64>,
    /// The integer tensor is an initializer (weight or bias).
    constant: bool,
}

/// Rewrites a QDQ graph into QOperator form. The graph must be topologically sorted (as
/// [`crate::insert_qdq`] leaves it).
///
/// Quantized nodes inside subgraphs (If/Loop/Scan bodies) are not rewritten: a model with
/// QuantizeLinear inside a subgraph is an error that points to the QDQ format.
pub fn to_qoperator(mut g: Graph) -> Result<(Graph, QopReport)> {
    fn quantized_inside(g: &Graph) -> bool {
        g.nodes
            .iter()
            .flat_map(|n| n.subgraphs())
            .any(|s| s.nodes.iter().any(|n| n.is(OpKind::QuantizeLinear)) || quantized_inside(s))
    }
    if quantized_inside(&g) {
        return Err(PtqError::InvalidOption(
            "--format qoperator: nodes quantized inside If/Loop/Scan subgraphs have no \
             QOperator rewrite yet; use --format qdq"
                .into(),
        ));
    }
    let zeros = RefCell::new(Zeros {
        namer: Namer::new(&g),
        made: BTreeMap::new(),
    });
    let nodes = std::mem::take(&mut g.nodes);
    let graph_outputs = g.outputs.clone();
    let uses = Uses::of(&nodes, &graph_outputs);
    let is_q = |i: usize| nodes[i].is(OpKind::QuantizeLinear);
    // Float value (a DequantizeLinear output) → the quantized value it decodes.
    let mut qv: HashMap<String, QVal> = HashMap::new();
    let mut dq_nodes: HashMap<String, usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if !n.is(OpKind::DequantizeLinear) || n.inputs.len() < 2 || n.outputs.is_empty() {
            continue;
        }
        let src = n.inputs[0].as_str();
        let constant = g.initializers.contains_key(src);
        let zp = n.inputs.get(2).filter(|z| !z.is_empty());
        // A constant may leave its zero point out (0 of its own type, as `insert_qdq` writes
        // symmetric weights and int32 biases); activations keep theirs.
        let from_q = uses.producer(src).is_some_and(is_q) && zp.is_some();
        if !(constant || from_q) {
            continue;
        }
        let axis = match n.attr("axis") {
            Some(AttrValue::Int(a)) => Some(*a),
            _ => None,
        };
        qv.insert(
            n.outputs[0].clone(),
            QVal {
                q: src.to_string(),
                scale: n.inputs[1].clone(),
                zp: zp.cloned().unwrap_or_default(),
                axis,
                constant,
            },
        );
        dq_nodes.insert(n.outputs[0].clone(), i);
    }
    let mut report = QopReport::default();
    let mut removed: HashSet<usize> = dq_nodes.values().copied().collect();
    let mut replaced: HashMap<usize, Node> = HashMap::new();
    let mut uses_ms = false;
    for (i, n) in nodes.iter().enumerate() {
        if removed.contains(&i) || n.is(OpKind::QuantizeLinear) || n.is(OpKind::DequantizeLinear) {
            continue;
        }
        let ctx = Ctx {
            g: &g,
            nodes: &nodes,
            uses: &uses,
            qv: &qv,
            zeros: &zeros,
        };
        match ctx.convert(n) {
            Ok(Rewrite::QLinear {
                node,
                absorbed,
                fused,
            }) => {
                if node.domain == MS_DOMAIN {
                    uses_ms = true;
                }
                report
                    .converted
                    .push((n.name.clone(), n.op_type.clone(), node.op_type.clone()));
                if let Some(a) = fused {
                    report
                        .fused_into_range
                        .push((n.name.clone(), nodes[a].name.clone()));
                    removed.insert(a);
                }
                removed.insert(absorbed);
                replaced.insert(i, node);
            }
            Ok(Rewrite::Direct {
                node,
                absorbed,
                scale,
                zp,
            }) => {
                report.direct.push((n.name.clone(), n.op_type.clone()));
                // Readers of the old output's DequantizeLinear now decode this tensor with
                // the input's parameters (nothing was requantized).
                let out = node.outputs[0].clone();
                for v in qv.values_mut().filter(|v| v.q == out) {
                    v.scale = scale.clone();
                    v.zp = zp.clone();
                }
                removed.insert(absorbed);
                replaced.insert(i, node);
            }
            Err(reason) => report.left_float.push(FloatNode {
                name: n.name.clone(),
                op_type: n.op_type.clone(),
                reason,
            }),
        }
    }
    let mut out: Vec<Node> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        if let Some(r) = replaced.remove(&i) {
            out.push(r);
        } else if !removed.contains(&i) {
            out.push(n.clone());
        }
    }
    // DequantizeLinear only where a float reader (or a graph output) still needs the value.
    let produced: HashSet<String> = out.iter().flat_map(|n| n.outputs.clone()).collect();
    let mut wanted: Vec<String> = out
        .iter()
        .flat_map(|n| n.inputs.iter().cloned())
        .chain(g.outputs.iter().map(|o| o.name.clone()))
        .collect();
    let mut seen = HashSet::new();
    wanted.retain(|v| seen.insert(v.clone()));
    for v in wanted {
        if produced.contains(&v) {
            continue;
        }
        let (Some(q), Some(&di)) = (qv.get(&v), dq_nodes.get(&v)) else {
            continue;
        };
        let mut dq = nodes[di].clone();
        dq.inputs = vec![q.q.clone(), q.scale.clone()];
        if !q.zp.is_empty() {
            dq.inputs.push(q.zp.clone());
        }
        out.push(dq);
    }
    g.initializers.extend(zeros.into_inner().made.into_values());
    g.nodes = out;
    drop_dead_nodes(&mut g);
    passes::topo_sort(&mut g).map_err(graph("sorting the QOperator graph"))?;
    g.prune_initializers();
    if uses_ms && !g.opset_imports.iter().any(|(d, _)| d == MS_DOMAIN) {
        g.opset_imports.push((MS_DOMAIN.to_string(), 1));
    }
    // Shapes recorded for the float values no longer describe what flows there.
    g.value_info.clear();
    report.quantize_nodes = g
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::QuantizeLinear))
        .count();
    report.dequantize_nodes = g
        .nodes
        .iter()
        .filter(|n| n.is(OpKind::DequantizeLinear))
        .count();
    Ok((g, report))
}

/// Removes nodes none of whose outputs is read or is a graph output.
fn drop_dead_nodes(g: &mut Graph) {
    loop {
        let used: HashSet<&str> = g
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().map(String::as_str))
            .chain(g.outputs.iter().map(|o| o.name.as_str()))
            .collect();
        let keep: Vec<bool> = g
            .nodes
            .iter()
            .map(|n| n.outputs.iter().any(|o| used.contains(o.as_str())))
            .collect();
        if keep.iter().all(|&k| k) {
            return;
        }
        let mut it = keep.into_iter();
        g.nodes.retain(|_| it.next().unwrap_or(true));
    }
}

enum Rewrite {
    /// A QLinear node writing the output of `absorbed` (the output's QuantizeLinear);
    /// `fused` is a Relu/Clip between them that the output range replaces.
    QLinear {
        node: Node,
        absorbed: usize,
        fused: Option<usize>,
    },
    /// The node itself, run on the quantized input, writing the output of `absorbed`
    /// (the output's QuantizeLinear, now gone) with the input's scale and zero point.
    Direct {
        node: Node,
        absorbed: usize,
        scale: String,
        zp: String,
    },
}

/// Zero points the QLinear operators require where the QDQ graph left a weight's out.
struct Zeros {
    namer: Namer,
    /// `(dtype, shape)` → (name, tensor): one shared initializer per kind.
    made: BTreeMap<(String, Vec<usize>), (String, Tensor)>,
}

struct Ctx<'a> {
    g: &'a Graph,
    zeros: &'a RefCell<Zeros>,
    nodes: &'a [Node],
    uses: &'a Uses<'a>,
    qv: &'a HashMap<String, QVal>,
}

type Why = std::result::Result<Rewrite, String>;

impl Ctx<'_> {
    /// The per-tensor quantized activation read as input `k` of `n`.
    fn act(&self, n: &Node, k: usize) -> std::result::Result<&QVal, String> {
        let v = n
            .inputs
            .get(k)
            .ok_or_else(|| format!("input {k} missing"))?;
        match self.qv.get(v) {
            Some(q) if !q.constant && q.axis.is_none() => Ok(q),
            _ => Err(format!("input `{v}` is not a quantized activation")),
        }
    }

    /// The quantized constant read as input `k` of `n`, with its element type.
    fn constant(&self, n: &Node, k: usize) -> std::result::Result<(&QVal, DType), String> {
        let v = n
            .inputs
            .get(k)
            .ok_or_else(|| format!("input {k} missing"))?;
        match self.qv.get(v) {
            Some(q) if q.constant => Ok((q, self.g.initializers[&q.q].dtype)),
            _ => Err(format!("input `{v}` is not a quantized constant")),
        }
    }

    fn single_reader(&self, v: &str) -> Option<usize> {
        self.uses.sole_reader(v)
    }

    /// The QuantizeLinear that is the only reader of `v` (per-tensor).
    fn out_q(&self, v: &str) -> Option<usize> {
        let r = self.single_reader(v)?;
        let q = &self.nodes[r];
        (q.is(OpKind::QuantizeLinear)
            && q.inputs.len() >= 3
            && q.attr("axis").is_none()
            && self.scalar(&q.inputs[1]).is_some())
        .then_some(r)
    }

    fn scalar(&self, name: &str) -> Option<f64> {
        let t = self.g.initializers.get(name)?;
        (t.len() == 1).then(|| t.to_f64_vec()[0])
    }

    /// Output of a weighted op: its QuantizeLinear, directly or through a Relu/Clip whose
    /// effect the quantized range reproduces exactly.
    fn weighted_output(&self, n: &Node) -> std::result::Result<(usize, Option<usize>), String> {
        let y = &n.outputs[0];
        if let Some(q) = self.out_q(y) {
            return Ok((q, None));
        }
        let r = self
            .single_reader(y)
            .ok_or("output is not quantized (read by several nodes or a graph output)")?;
        let act = &self.nodes[r];
        if !act.facts().clamp {
            return Err("output is not quantized".into());
        }
        let q = self
            .out_q(&act.outputs[0])
            .ok_or_else(|| format!("output of `{}` is not quantized", act.name))?;
        let (lo, hi) = self.clip_bounds(act)?;
        let qn = &self.nodes[q];
        let s = self
            .scalar(&qn.inputs[1])
            .ok_or("output scale not constant")?;
        let zt = self
            .g
            .initializers
            .get(&qn.inputs[2])
            .ok_or("output zero point not constant")?;
        if zt.len() != 1 {
            return Err("output zero point is not a scalar".into());
        }
        let z = zt.to_f64_vec()[0];
        let (qmin, qmax) = zt.dtype.int_range().ok_or("zero point type")?;
        let (rmin, rmax) = ((qmin as f64 - z) * s, (qmax as f64 - z) * s);
        if rmin + 0.49 * s < lo || rmax - 0.49 * s > hi {
            return Err(format!(
                "`{}` clips to [{lo}, {hi}] but the output range is [{rmin}, {rmax}]: kept in float",
                act.name
            ));
        }
        Ok((q, Some(r)))
    }

    fn clip_bounds(&self, act: &Node) -> std::result::Result<(f64, f64), String> {
        let b = ClipBounds::of(act, self.g.opset(), |k| self.scalar(&act.inputs[k]))
            .map_err(|e| format!("`{}`: {e}", act.name))?;
        Ok((b.lo, b.hi))
    }

    /// The zero point of constant `w` (of type `dtype`), or, where the QDQ graph left it out,
    /// the name of a zero initializer of that type, shared by every weight that needs one:
    /// a scalar when `scalar` (QLinearConv's `w_zero_point` may be a scalar with a
    /// per-channel `w_scale`), else shaped like `w`'s scale. QLinearConv, QLinearMatMul and
    /// QGemm have no optional weight zero point.
    fn zero_point(
        &self,
        w: &QVal,
        dtype: DType,
        scalar: bool,
    ) -> std::result::Result<String, String> {
        if !w.zp.is_empty() {
            return Ok(w.zp.clone());
        }
        let shape = if scalar {
            vec![]
        } else {
            self.g
                .initializers
                .get(&w.scale)
                .ok_or_else(|| format!("weight scale `{}` is not a constant", w.scale))?
                .shape
                .clone()
        };
        let len = shape.iter().product::<usize>();
        let data = match dtype {
            DType::I8 => Data::I8(vec![0; len]),
            DType::U8 => Data::U8(vec![0; len]),
            other => return Err(format!("weight of type {other}")),
        };
        let mut z = self.zeros.borrow_mut();
        let key = (dtype.to_string(), shape.clone());
        if let Some((name, _)) = z.made.get(&key) {
            return Ok(name.clone());
        }
        let t = Tensor::new(shape, data).map_err(|e| e.to_string())?;
        let base = if scalar {
            format!("zero_{dtype}")
        } else {
            format!("zero_{dtype}_{len}")
        };
        let name = z.namer.value(&base);
        z.made.insert(key, (name.clone(), t));
        Ok(name)
    }

    fn out_params(&self, q: usize) -> (String, String) {
        let n = &self.nodes[q];
        (n.inputs[1].clone(), n.inputs[2].clone())
    }

    /// Checks that a quantized bias has the scale `x_scale · w_scale` QLinearConv and QGemm
    /// assume (our bias quantization writes exactly that product).
    fn bias_ok(&self, b: &QVal, x: &QVal, w: &QVal) -> std::result::Result<(), String> {
        let get = |n: &str| self.g.initializers.get(n).map(Tensor::to_f32_vec);
        // An absent zero point is 0.
        let bz = if b.zp.is_empty() {
            Some(vec![0.0])
        } else {
            get(&b.zp)
        };
        let (Some(bs), Some(xs), Some(ws), Some(bz)) =
            (get(&b.scale), get(&x.scale), get(&w.scale), bz)
        else {
            return Err("bias parameters are not constants".into());
        };
        let ok = xs.len() == 1
            && bs.len() == ws.len()
            && bz.iter().all(|&z| z == 0.0)
            && bs
                .iter()
                .zip(&ws)
                .all(|(&b, &w)| ((b - xs[0] * w) / b).abs() <= 1e-6);
        if ok {
            Ok(())
        } else {
            Err("bias scale is not input scale × weight scale".into())
        }
    }

    fn convert(&self, n: &Node) -> Why {
        if n.outputs.first().is_none_or(String::is_empty) || n.inputs.is_empty() {
            return Err("no input or no output".into());
        }
        if !n.is_onnx_domain() {
            return Err(format!("operator of domain {}", n.domain));
        }
        let f = n.facts();
        match f.qlinear {
            Some(_) if f.weight.is_some() => self.weighted(n),
            Some(qop) => self.qlinear(n, qop),
            None if f.moves_values && f.quant_inputs == QuantInputs::First => {
                if n.outputs.iter().skip(1).any(|o| !o.is_empty()) {
                    return Err("second output (Indices) used".into());
                }
                let x = self.act(n, 0)?;
                let absorbed = self.out_q(&n.outputs[0]).ok_or("output is not quantized")?;
                let mut node = n.clone();
                node.inputs[0] = x.q.clone();
                node.outputs[0] = self.nodes[absorbed].outputs[0].clone();
                Ok(Rewrite::Direct {
                    node,
                    absorbed,
                    scale: x.scale.clone(),
                    zp: x.zp.clone(),
                })
            }
            None if f.clamp => Err(
                "no QOperator form on its own (Relu/Clip only disappear when fused into a Conv/Gemm/MatMul output range)"
                    .into(),
            ),
            None => Err("no QOperator form".into()),
        }
    }

    /// An operator with a QLinear contrib form (`qop`: QLinearAdd, QLinearConcat...), all
    /// of whose inputs are quantized.
    fn qlinear(&self, n: &Node, qop: OpKind) -> Why {
        let xs: Vec<&QVal> = (0..n.inputs.len())
            .map(|k| self.act(n, k))
            .collect::<std::result::Result<_, _>>()?;
        let absorbed = self.out_q(&n.outputs[0]).ok_or("output is not quantized")?;
        let (ys, yz) = self.out_params(absorbed);
        let y = self.nodes[absorbed].outputs[0].clone();
        let mut ins: Vec<String> = Vec::new();
        if n.is(OpKind::Concat) {
            ins.extend([ys, yz]);
            for x in xs {
                ins.extend([x.q.clone(), x.scale.clone(), x.zp.clone()]);
            }
        } else {
            for x in xs {
                ins.extend([x.q.clone(), x.scale.clone(), x.zp.clone()]);
            }
            ins.extend([ys, yz]);
        }
        let mut attributes = n.attributes.clone();
        if n.is(OpKind::GlobalAveragePool) || n.is(OpKind::AveragePool) {
            attributes.push(("channels_last".into(), AttrValue::Int(0)));
        }
        let node = Node {
            attributes,
            ..Node::of(qop, &n.name, &[], &[&y])
        };
        let node = Node {
            inputs: ins,
            ..node
        };
        Ok(Rewrite::QLinear {
            node,
            absorbed,
            fused: None,
        })
    }

    fn weighted(&self, n: &Node) -> Why {
        let conv = n.is(OpKind::Conv);
        let x = self.act(n, 0)?;
        let (absorbed, fused) = self.weighted_output(n)?;
        let (ys, yz) = self.out_params(absorbed);
        let y = self.nodes[absorbed].outputs[0].clone();
        if n.is(OpKind::MatMul) {
            let (w, wz) = match self.constant(n, 1) {
                Ok((w, wt)) => (w, self.zero_point(w, wt, false)?),
                Err(_) => {
                    let w = self.act(n, 1)?;
                    (w, w.zp.clone())
                }
            };
            let mut node = Node::of(
                OpKind::QLinearMatMul,
                &n.name,
                &[&x.q, &x.scale, &x.zp, &w.q, &w.scale, &wz, &ys, &yz],
                &[&y],
            );
            node.doc_string = n.doc_string.clone();
            return Ok(Rewrite::QLinear {
                node,
                absorbed,
                fused,
            });
        }
        let (w, wt) = self.constant(n, 1)?;
        if wt != DType::I8 && wt != DType::U8 {
            return Err(format!("weight of type {wt}"));
        }
        let bias = match n.inputs.get(2).filter(|b| !b.is_empty()) {
            None => None,
            Some(b) => {
                let (bq, bt) = self
                    .constant(n, 2)
                    .map_err(|_| format!("bias `{b}` is not quantized to int32"))?;
                if bt != DType::I32 {
                    return Err(format!("bias `{b}` of type {bt}"));
                }
                self.bias_ok(bq, x, w)?;
                Some(bq.q.clone())
            }
        };
        let b = bias.unwrap_or_default();
        let wz = self.zero_point(w, wt, conv)?;
        let (qop, ins, mut attributes) = if conv {
            let mut ins = vec![
                x.q.clone(),
                x.scale.clone(),
                x.zp.clone(),
                w.q.clone(),
                w.scale.clone(),
                wz.clone(),
                ys,
                yz,
            ];
            if !b.is_empty() {
                ins.push(b);
            }
            (OpKind::QLinearConv, ins, n.attributes.clone())
        } else {
            let attr = |k: &str, d: f32| n.attr_float(k, d).unwrap_or(f32::NAN);
            if n.attr_int("transA", 0).unwrap_or(1) != 0 || attr("alpha", 1.0) != 1.0 {
                return Err("Gemm with transA or alpha ≠ 1".into());
            }
            if !b.is_empty() && attr("beta", 1.0) != 1.0 {
                return Err("Gemm with beta ≠ 1".into());
            }
            let ins = vec![
                x.q.clone(),
                x.scale.clone(),
                x.zp.clone(),
                w.q.clone(),
                w.scale.clone(),
                wz.clone(),
                b,
                ys,
                yz,
            ];
            let attrs = n
                .attributes
                .iter()
                .filter(|(k, _)| k != "beta")
                .cloned()
                .collect();
            (OpKind::QGemm, ins, attrs)
        };
        attributes.retain(|(k, _)| !k.is_empty());
        let node = Node {
            inputs: ins,
            attributes,
            doc_string: n.doc_string.clone(),
            ..Node::of(qop, &n.name, &[], &[&y])
        };
        Ok(Rewrite::QLinear {
            node,
            absorbed,
            fused,
        })
    }
}
