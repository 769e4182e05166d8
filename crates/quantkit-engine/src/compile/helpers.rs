//! The graph queries and matcher shapes the patterns share: who produces and who reads a
//! value, constant inputs, the DequantizeLinear in front of an operator, the
//! `DQ → op → QuantizeLinear` sandwich and the `[Relu | Clip] → QuantizeLinear` tail after an
//! anchor, and which values hold 8-bit codes. Each query is defined here once (they are to
//! become methods on `Graph`).

use super::codes::LAYOUT_OPS;
use super::quant::{quantize_bound, Qp};
use crate::EngineOptions;
use quantkit_graph::{DType, Graph, Node, Tensor};
use std::collections::{HashMap, HashSet};

/// Whether `n` is in the default ONNX domain (`""` or `ai.onnx`).
pub(crate) fn is_default_domain(n: &Node) -> bool {
    n.domain.is_empty() || n.domain == "ai.onnx"
}

/// Domain of ONNX Runtime's contrib operators (`QGemm`).
pub(super) const MS_DOMAIN: &str = "com.microsoft";

/// A match result: the value, or why the pattern does not apply (for the report).
pub(super) type Why<T> = std::result::Result<T, String>;

/// The pattern matcher over one graph: who reads and who produces each value.
pub(super) struct Matcher<'g> {
    pub(super) g: &'g Graph,
    pub(super) opts: &'g EngineOptions,
    pub(super) readers: HashMap<&'g str, usize>,
    pub(super) graph_outputs: HashSet<&'g str>,
    pub(super) producer: HashMap<&'g str, usize>,
    pub(super) opset: i64,
}

/// `value → [Relu | Clip] → QuantizeLinear` after an anchor.
pub(super) struct Tail {
    /// The activation (if any) and the QuantizeLinear.
    pub(super) absorbed: Vec<usize>,
    /// Clamp of the output codes.
    pub(super) clamp: (i32, i32),
    /// The QuantizeLinear node.
    pub(super) q: usize,
    pub(super) qp: Qp,
}

impl<'g> Matcher<'g> {
    /// Indexes `g`: how many nodes read each value and which node produces it.
    pub(super) fn new(g: &'g Graph, opts: &'g EngineOptions) -> Self {
        let mut readers: HashMap<&str, usize> = HashMap::new();
        let mut producer = HashMap::new();
        for (i, n) in g.nodes.iter().enumerate() {
            for v in n.inputs.iter().filter(|v| !v.is_empty()) {
                *readers.entry(v.as_str()).or_default() += 1;
            }
            for o in n.outputs.iter().filter(|o| !o.is_empty()) {
                producer.insert(o.as_str(), i);
            }
        }
        Matcher {
            g,
            opts,
            readers,
            graph_outputs: g.outputs.iter().map(|o| o.name.as_str()).collect(),
            producer,
            opset: g.opset(),
        }
    }

    /// The initializer `name`, if it is one.
    pub(super) fn init(&self, name: &str) -> Option<&'g Tensor> {
        self.g.initializers.get(name)
    }

    /// The node that reads `value` when it is the value's only use.
    pub(super) fn sole_reader(&self, value: &str) -> Why<usize> {
        if self.graph_outputs.contains(value) || self.readers.get(value) != Some(&1) {
            return Err(format!("`{value}` has other readers"));
        }
        self.g
            .nodes
            .iter()
            .position(|n| n.inputs.iter().any(|i| i == value))
            .ok_or_else(|| format!("`{value}` has no reader"))
    }

    /// The DequantizeLinear producing `value`.
    pub(super) fn dq_of(&self, value: &str) -> Why<usize> {
        let i = *self
            .producer
            .get(value)
            .ok_or_else(|| format!("`{value}` is not produced by a DequantizeLinear"))?;
        let n = &self.g.nodes[i];
        if n.op_type != "DequantizeLinear" || !is_default_domain(n) {
            return Err(format!(
                "`{value}` comes from {} `{}`, not a DequantizeLinear",
                n.op_type, n.name
            ));
        }
        Ok(i)
    }

    /// Input `i` of `n` (what it is: `what`) as a constant.
    pub(super) fn const_input(&self, n: &Node, i: usize, what: &str) -> Why<&'g Tensor> {
        let v = n
            .inputs
            .get(i)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("no {what} (input {i})"))?;
        self.init(v)
            .ok_or_else(|| format!("{what} `{v}` is not a constant"))
    }

    /// The single output of a QLinear node.
    pub(super) fn sole_output(n: &Node) -> Why<String> {
        match n.outputs.as_slice() {
            [o] if !o.is_empty() => Ok(o.clone()),
            _ => Err(format!("`{}` must have exactly one output", n.name)),
        }
    }

    /// The activation codes of a QLinear node (input 0).
    pub(super) fn codes_input(n: &Node) -> Why<String> {
        n.inputs
            .first()
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| "no input".to_string())
    }

    /// The activation input: DQ node index, the codes' value name and parameters.
    pub(super) fn act_input(&self, n: &Node) -> Why<(usize, String, Qp)> {
        let v = n.inputs.first().ok_or_else(|| "no input".to_string())?;
        let i = self.dq_of(v)?;
        let dq = &self.g.nodes[i];
        let qp = self.qparams(dq)?;
        Ok((i, dq.inputs[0].clone(), qp))
    }

    /// `DQ(x) → op → Q`, where `op` maps codes through `compose` (given the dequantized
    /// values of all 256 codes, returns the op's float results).
    pub(super) fn sandwich(&self, n: &Node) -> Why<(usize, String, Qp, usize, Qp)> {
        let (dqx, xq, qx) = self.act_input(n)?;
        let qi = self.sole_reader(&n.outputs[0])?;
        let q = &self.g.nodes[qi];
        if q.op_type != "QuantizeLinear" || !is_default_domain(q) {
            return Err(format!(
                "the result feeds {} `{}`, not a QuantizeLinear",
                q.op_type, q.name
            ));
        }
        let qy = self.qparams(q)?;
        Ok((dqx, xq, qx, qi, qy))
    }

    /// `value → [Relu | Clip] → QuantizeLinear`: the absorbed nodes, the clamp in the
    /// output's codes and the output's parameters.
    pub(super) fn tail(&self, value: &str) -> Why<Tail> {
        let mut r = self.sole_reader(value)?;
        let mut absorbed = Vec::new();
        let mut range = (f32::NEG_INFINITY, f32::INFINITY);
        let n = &self.g.nodes[r];
        if is_default_domain(n) && (n.op_type == "Relu" || n.op_type == "Clip") {
            range = if n.op_type == "Relu" {
                (0.0, f32::INFINITY)
            } else {
                self.clip_range(n)?
            };
            absorbed.push(r);
            r = self.sole_reader(&n.outputs[0])?;
        }
        let q = &self.g.nodes[r];
        let fed = absorbed
            .last()
            .map_or(value, |&a| self.g.nodes[a].outputs[0].as_str());
        if q.op_type != "QuantizeLinear" || !is_default_domain(q) || q.inputs[0] != fed {
            return Err(format!(
                "the result feeds {} `{}`, not a QuantizeLinear",
                q.op_type, q.name
            ));
        }
        let qp = self.qparams(q)?;
        absorbed.push(r);
        let lo = quantize_bound(range.0, qp);
        let hi = quantize_bound(range.1, qp);
        Ok(Tail {
            absorbed,
            clamp: (lo, hi),
            q: r,
            qp,
        })
    }

    pub(super) fn clip_range(&self, n: &Node) -> Why<(f32, f32)> {
        if self.opset < 11 {
            let lo = n.attr_float("min", f32::MIN).map_err(|e| e.to_string())?;
            let hi = n.attr_float("max", f32::MAX).map_err(|e| e.to_string())?;
            return Ok((lo, hi));
        }
        let get = |i: usize, default: f32| -> Why<f32> {
            match n.inputs.get(i).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => {
                    let t = self
                        .init(v)
                        .filter(|t| t.dtype == DType::F32 && t.len() == 1)
                        .ok_or_else(|| {
                            format!("Clip `{}`: bound `{v}` is not a constant f32", n.name)
                        })?;
                    Ok(t.to_f32_vec()[0])
                }
            }
        };
        Ok((get(1, f32::NEG_INFINITY)?, get(2, f32::INFINITY)?))
    }

    /// The code type of `value` when it is known to hold 8-bit codes: a u8/i8 graph input,
    /// the output of a QuantizeLinear or QLinear operator (the type of its output zero
    /// point), or of a MaxPool/layout operator reading such codes.
    pub(super) fn code_dtype(&self, value: &str) -> Option<DType> {
        let is_code = |d: DType| matches!(d, DType::U8 | DType::I8);
        let mut v = value;
        // Each step moves to an earlier node, so the walk ends; the bound is a safeguard.
        for _ in 0..=self.g.nodes.len() {
            let Some(&pi) = self.producer.get(v) else {
                let vi = self.g.inputs.iter().find(|i| i.name == v)?;
                return vi.dtype.filter(|&d| is_code(d));
            };
            let p = &self.g.nodes[pi];
            if p.outputs.first().map(String::as_str) != Some(v) {
                return None;
            }
            let zp_type = |i: usize| {
                p.inputs
                    .get(i)
                    .filter(|z| !z.is_empty())
                    .and_then(|z| self.init(z))
                    .map(|z| z.dtype)
                    .filter(|&d| is_code(d))
            };
            let op = p.op_type.as_str();
            if p.domain == MS_DOMAIN {
                let y_scale = p.inputs.get(7).is_some_and(|s| !s.is_empty());
                return (op == "QGemm" && y_scale).then(|| zp_type(8)).flatten();
            }
            if !is_default_domain(p) {
                return None;
            }
            match op {
                "QuantizeLinear" => return zp_type(2),
                "QLinearConv" | "QLinearMatMul" => return zp_type(7),
                "MaxPool" => v = p.inputs.first()?,
                _ if LAYOUT_OPS.contains(&op) => v = p.inputs.first()?,
                _ => return None,
            }
        }
        None
    }
}
