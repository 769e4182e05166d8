//! The graph queries and matcher shapes the patterns share: who produces and who reads a
//! value, constant inputs, the DequantizeLinear in front of an operator, the
//! `DQ → op → QuantizeLinear` sandwich and the `[Relu | Clip] → QuantizeLinear` tail after an
//! anchor, and which values hold 8-bit codes. Each query is defined here once (they are to
//! become methods on `Graph`).

use super::codes::is_layout_op;
use super::quant::{quantize_bound, Qp};
use crate::EngineOptions;
use quantkit_graph::ops::clip::ClipBounds;
use quantkit_graph::OpKind;
use quantkit_graph::{DType, Graph, Node, Tensor, Uses};

/// A match result: the value, or why the pattern does not apply (for the report).
pub(super) type Why<T> = std::result::Result<T, String>;

/// The pattern matcher over one graph: who reads and who produces each value.
pub(super) struct Matcher<'g> {
    pub(super) g: &'g Graph,
    pub(super) opts: &'g EngineOptions,
    /// Producer and readers of every value.
    pub(super) uses: Uses<'g>,
    pub(super) opset: i64,
    /// Static shapes of values at batch 1 (`Matcher::batch1_shape`), inferred on first use.
    pub(super) batch1: std::cell::OnceCell<std::collections::HashMap<String, Vec<usize>>>,
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
    /// Indexes `g`: which nodes read each value and which node produces it.
    pub(super) fn new(g: &'g Graph, opts: &'g EngineOptions) -> Self {
        Matcher {
            g,
            opts,
            uses: Uses::new(g),
            opset: g.opset(),
            batch1: std::cell::OnceCell::new(),
        }
    }

    /// The static shape of `value`: the graph's own when known, else the one shape
    /// inference gives with a symbolic or unknown batch (axis 0 of the graph inputs) set to
    /// 1 (planes and channels do not depend on it). For cost models, never for checks.
    pub(super) fn batch1_shape(&self, value: &str) -> Option<Vec<usize>> {
        if let Some(s) = self.g.value_info.get(value).and_then(|v| v.static_shape()) {
            return Some(s);
        }
        self.batch1
            .get_or_init(|| {
                let mut g = self.g.clone();
                for v in &mut g.inputs {
                    if let Some(d) = v.shape.as_mut().and_then(|s| s.first_mut()) {
                        if d.known().is_none() {
                            *d = quantkit_graph::Dim::Known(1);
                        }
                    }
                }
                quantkit_graph::passes::infer_value_infos(&g)
                    .map(|vs| {
                        vs.into_iter()
                            .filter_map(|v| Some((v.name.clone(), v.static_shape()?)))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .get(value)
            .cloned()
    }

    /// The initializer `name`, if it is one.
    pub(super) fn init(&self, name: &str) -> Option<&'g Tensor> {
        self.g.initializers.get(name)
    }

    /// The node that reads `value` when it is the value's only use.
    pub(super) fn sole_reader(&self, value: &str) -> Why<usize> {
        self.uses
            .sole_reader(value)
            .ok_or_else(|| format!("`{value}` has other readers"))
    }

    /// The DequantizeLinear producing `value`.
    pub(super) fn dq_of(&self, value: &str) -> Why<usize> {
        let i = self
            .uses
            .producer(value)
            .ok_or_else(|| format!("`{value}` is not produced by a DequantizeLinear"))?;
        let n = &self.g.nodes[i];
        if !n.is(OpKind::DequantizeLinear) {
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
        if !q.is(OpKind::QuantizeLinear) {
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
        if n.facts().clamp {
            range = self.clip_range(n)?;
            absorbed.push(r);
            r = self.sole_reader(&n.outputs[0])?;
        }
        let q = &self.g.nodes[r];
        let fed = absorbed
            .last()
            .map_or(value, |&a| self.g.nodes[a].outputs[0].as_str());
        if !q.is(OpKind::QuantizeLinear) || q.inputs[0] != fed {
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

    /// The clamp of a Relu or Clip node ([`ClipBounds`], the opset rules of the executor),
    /// whose bound inputs must be one-element f32 constants.
    pub(super) fn clip_range(&self, n: &Node) -> Why<(f32, f32)> {
        let b = ClipBounds::of(n, self.opset, |i| {
            self.init(&n.inputs[i])
                .filter(|t| t.dtype == DType::F32 && t.len() == 1)
                .map(|t| f64::from(t.to_f32_vec()[0]))
        })
        .map_err(|e| format!("Clip `{}`: {e}", n.name))?;
        // The bounds came from f32 values (attributes or tensors), so this is exact.
        Ok((b.lo as f32, b.hi as f32))
    }

    /// The code type of `value` when it is known to hold 8-bit codes: a u8/i8 graph input,
    /// the output of a QuantizeLinear or QLinear operator (the type of its output zero
    /// point), or of a MaxPool/layout operator reading such codes.
    pub(super) fn code_dtype(&self, value: &str) -> Option<DType> {
        let is_code = |d: DType| matches!(d, DType::U8 | DType::I8);
        let mut v = value;
        // Each step moves to an earlier node, so the walk ends; the bound is a safeguard.
        for _ in 0..=self.g.nodes.len() {
            let Some(pi) = self.uses.producer(v) else {
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
            match p.kind() {
                Some(OpKind::QGemm) => {
                    let y_scale = p.inputs.get(7).is_some_and(|s| !s.is_empty());
                    return y_scale.then(|| zp_type(8)).flatten();
                }
                Some(OpKind::QuantizeLinear) => return zp_type(2),
                Some(OpKind::QLinearConv | OpKind::QLinearMatMul) => return zp_type(7),
                Some(OpKind::MaxPool) => v = p.inputs.first()?,
                _ if is_layout_op(p) => v = p.inputs.first()?,
                _ => return None,
            }
        }
        None
    }
}
