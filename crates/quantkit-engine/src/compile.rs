//! Pattern matching of the QDQ layout (and of QOperator nodes, `qoperator`) into integer
//! steps; everything unmatched becomes a step running the graph crate's operator (a float
//! island or a Q/DQ conversion).

use crate::error::{EngineError, Result};
use crate::steps::{
    AddStep, CodeStep, ConvStep, DynOp, DynamicStep, FlatInput, GemmStep, GraphOp, Kernel,
    MaxPoolStep, Table,
};
use crate::value::Val;
use crate::{EngineOptions, NodeReport, Placement, Plan, RequantMode, Step};
use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
use quantkit_graph::ops::{self, OpCtx};
use quantkit_graph::{DType, Data, Graph, Node, Tensor};
use quantkit_kernels::conv::{ConvParams, ConvWeights};
use quantkit_kernels::gemm::{PackedWeights, WeightLayout};
use quantkit_kernels::output::OutputStage;
use std::collections::{HashMap, HashSet};

mod prologue;
mod qoperator;

/// Per-tensor quantization parameters of an 8-bit activation.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Qp {
    scale: f32,
    zp: i32,
    dtype: DType,
}

/// Element-wise operators whose QDQ sandwich becomes a 256-entry table.
const TABLE_OPS: &[&str] = &[
    "Relu",
    "Clip",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "HardSigmoid",
    "HardSwish",
    "Gelu",
    "Erf",
    "Sqrt",
    "Identity",
];

/// The kernel description's note on a GEMM step that reads a Flatten's input.
const FLAT_DESC: &str = " + flatten (NHWC read in place, weights permuted)";

/// Where a GEMM step that absorbs a Flatten reads: [`Matcher::flatten_before`].
struct FlatSource {
    /// The pre-Flatten codes.
    codes: String,
    /// The Flatten and the QuantizeLinear after it.
    absorbed: Vec<usize>,
    /// The DequantizeLinear before the Flatten.
    through: usize,
}

/// Operators that only move codes; their QDQ sandwich runs on the codes.
const LAYOUT_OPS: &[&str] = &["Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"];

/// A matched pattern: one integer step standing for several nodes.
struct Matched {
    kernel: Box<dyn Kernel>,
    /// Value names the step reads (input 0 is the 8-bit codes).
    inputs: Vec<String>,
    /// The value it writes (the final QuantizeLinear's output).
    output: String,
    /// Nodes it absorbs besides the anchor (activation, QuantizeLinear).
    absorbed: Vec<usize>,
    /// DequantizeLinear nodes it reads through (dropped when nothing else reads them).
    through: Vec<usize>,
    kernel_desc: String,
}

struct Matcher<'g> {
    g: &'g Graph,
    opts: &'g EngineOptions,
    readers: HashMap<&'g str, usize>,
    graph_outputs: HashSet<&'g str>,
    producer: HashMap<&'g str, usize>,
    opset: i64,
}

type Why<T> = std::result::Result<T, String>;

/// `value → [Relu | Clip] → QuantizeLinear` after an anchor.
struct Tail {
    /// The activation (if any) and the QuantizeLinear.
    absorbed: Vec<usize>,
    /// Clamp of the output codes.
    clamp: (i32, i32),
    /// The QuantizeLinear node.
    q: usize,
    qp: Qp,
}

/// An int8 weight read through a DequantizeLinear.
struct Weight {
    dq: usize,
    values: Vec<i8>,
    shape: Vec<usize>,
    scales: Vec<f32>,
    zero_points: Vec<i32>,
}

/// A step before slots are assigned: anchor node, kernel, input and output names.
struct Pending {
    node: usize,
    kernel: Box<dyn Kernel>,
    inputs: Vec<String>,
    outputs: Vec<String>,
}

pub(crate) fn is_default_domain(n: &Node) -> bool {
    n.domain.is_empty() || n.domain == "ai.onnx"
}

impl<'g> Matcher<'g> {
    fn new(g: &'g Graph, opts: &'g EngineOptions) -> Self {
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

    fn init(&self, name: &str) -> Option<&'g Tensor> {
        self.g.initializers.get(name)
    }

    /// The node that reads `value` when it is the value's only use.
    fn sole_reader(&self, value: &str) -> Why<usize> {
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
    fn dq_of(&self, value: &str) -> Why<usize> {
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

    /// Constant per-tensor scale and 8-bit zero point of a Q or DQ node.
    fn qparams(&self, n: &Node) -> Why<Qp> {
        self.qparams_at(n, 1, 2)
    }

    /// Constant per-tensor scale (input `si`) and 8-bit zero point (input `zi`) of `n`.
    fn qparams_at(&self, n: &Node, si: usize, zi: usize) -> Why<Qp> {
        let s = n
            .inputs
            .get(si)
            .filter(|s| !s.is_empty())
            .and_then(|s| self.init(s))
            .ok_or_else(|| format!("`{}`: scale is not a constant", n.name))?;
        if s.dtype != DType::F32 || s.len() != 1 {
            return Err(format!(
                "`{}`: scale must be one f32 (got {}{:?})",
                n.name, s.dtype, s.shape
            ));
        }
        let scale = s.to_f32_vec()[0];
        if !(scale.is_finite() && scale > 0.0) {
            return Err(format!("`{}`: scale {scale} is not positive", n.name));
        }
        let z = n
            .inputs
            .get(zi)
            .filter(|z| !z.is_empty())
            .and_then(|z| self.init(z))
            .ok_or_else(|| format!("`{}`: zero point is absent or not a constant", n.name))?;
        if !matches!(z.dtype, DType::U8 | DType::I8) || z.len() != 1 {
            return Err(format!(
                "`{}`: zero point must be one u8 or i8 (got {}{:?})",
                n.name, z.dtype, z.shape
            ));
        }
        Ok(Qp {
            scale,
            zp: z.to_i64_vec()[0] as i32,
            dtype: z.dtype,
        })
    }

    /// `value → [Relu | Clip] → QuantizeLinear`: the absorbed nodes, the clamp in the
    /// output's codes and the output's parameters.
    fn tail(&self, value: &str) -> Why<Tail> {
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

    fn clip_range(&self, n: &Node) -> Why<(f32, f32)> {
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

    /// The activation input: DQ node index, the codes' value name and parameters.
    fn act_input(&self, n: &Node) -> Why<(usize, String, Qp)> {
        let v = n.inputs.first().ok_or_else(|| "no input".to_string())?;
        let i = self.dq_of(v)?;
        let dq = &self.g.nodes[i];
        let qp = self.qparams(dq)?;
        Ok((i, dq.inputs[0].clone(), qp))
    }

    /// An int8 weight read through a DequantizeLinear: (DQ index, values, shape, scales,
    /// zero points). Per-channel parameters must lie on `channel_axis`.
    fn weight(&self, value: &str, channel_axis: usize) -> Why<Weight> {
        let i = self.dq_of(value)?;
        let dq = &self.g.nodes[i];
        let w = self
            .init(&dq.inputs[0])
            .ok_or_else(|| format!("weight `{}` is not a constant", dq.inputs[0]))?;
        let Data::I8(wv) = &w.data else {
            return Err(format!(
                "weight `{}` is {}, the kernels take i8",
                dq.inputs[0], w.dtype
            ));
        };
        if w.dtype != DType::I8 {
            return Err(format!("weight `{}` is {}", dq.inputs[0], w.dtype));
        }
        let s = dq
            .inputs
            .get(1)
            .and_then(|s| self.init(s))
            .filter(|s| s.dtype == DType::F32)
            .ok_or_else(|| format!("weight scale of `{}` is not a constant f32", dq.name))?;
        let scales = s.to_f32_vec();
        if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("weight scales of `{}` must be positive", dq.name));
        }
        let zps: Vec<i32> = match dq.inputs.get(2).filter(|z| !z.is_empty()) {
            None => vec![0; scales.len()],
            Some(z) => {
                let z = self
                    .init(z)
                    .filter(|z| z.dtype == DType::I8)
                    .ok_or_else(|| {
                        format!("weight zero point of `{}` is not a constant i8", dq.name)
                    })?;
                z.to_i64_vec().iter().map(|&v| v as i32).collect()
            }
        };
        if zps.len() != scales.len() {
            return Err(format!(
                "`{}`: scale and zero point lengths differ",
                dq.name
            ));
        }
        if scales.len() > 1 {
            let axis = dq.attr_int("axis", 1).map_err(|e| e.to_string())?;
            let axis = if axis < 0 {
                axis + w.rank() as i64
            } else {
                axis
            };
            if axis != channel_axis as i64 || w.shape.get(channel_axis) != Some(&scales.len()) {
                return Err(format!(
                    "`{}`: per-axis parameters on axis {axis}, the kernel needs the output-channel axis {channel_axis}",
                    dq.name
                ));
            }
        }
        Ok(Weight {
            dq: i,
            values: wv.clone(),
            shape: w.shape.clone(),
            scales,
            zero_points: zps,
        })
    }

    /// An int32 bias read through a DequantizeLinear with scale `s_x·s_w[j]`, zero point 0.
    fn bias(&self, value: &str, channels: usize, s_x: f32, s_w: &[f32]) -> Why<(usize, Vec<i32>)> {
        let i = self.dq_of(value)?;
        let dq = &self.g.nodes[i];
        let b = self
            .init(&dq.inputs[0])
            .filter(|b| b.dtype == DType::I32 && b.len() == channels)
            .ok_or_else(|| {
                format!(
                    "bias `{}` is not a constant int32 of {channels} values",
                    dq.inputs[0]
                )
            })?;
        let s = dq
            .inputs
            .get(1)
            .and_then(|s| self.init(s))
            .filter(|s| s.dtype == DType::F32 && (s.len() == 1 || s.len() == channels))
            .ok_or_else(|| format!("bias scale of `{}` is not a constant f32", dq.name))?
            .to_f32_vec();
        if let Some(z) = dq.inputs.get(2).filter(|z| !z.is_empty()) {
            let z = self
                .init(z)
                .ok_or_else(|| format!("bias zero point of `{}` is not constant", dq.name))?;
            if z.to_i64_vec().iter().any(|&v| v != 0) {
                return Err(format!("bias zero point of `{}` is not 0", dq.name));
            }
        }
        for j in 0..channels {
            let want = s_x * s_w[if s_w.len() == 1 { 0 } else { j }];
            let got = s[if s.len() == 1 { 0 } else { j }];
            if (got - want).abs() > 1e-5 * want.abs() {
                return Err(format!(
                    "bias scale {got} of `{}` is not input scale × weight scale ({want})",
                    dq.name
                ));
            }
        }
        let Data::I32(bv) = &b.data else {
            return Err("bias is not int32".into());
        };
        Ok((i, bv.clone()))
    }

    /// The output stage `(acc + bias[c]) · alpha·s_x·s_w[c]/s_y + z_y`, clamped. `alpha` is
    /// QGemm's attribute (1 everywhere else): in float mode the multiplier is the f32
    /// `alpha·(s_x·s_w)/s_y`, the same f32 value QGemm's reference forms (for `alpha = 1` it
    /// is exactly `(s_x·s_w)/s_y`); in fixed-point mode the real multiplier is taken in f64.
    fn stage(
        &self,
        s_x: f32,
        s_w: &[f32],
        out: Qp,
        clamp: (i32, i32),
        bias: Option<Vec<i32>>,
        alpha: f32,
    ) -> Why<OutputStage> {
        let stage = match self.opts.requant {
            RequantMode::Float => OutputStage::float(
                s_w.iter().map(|&w| alpha * (s_x * w) / out.scale).collect(),
                out.zp,
            ),
            RequantMode::FixedPoint => OutputStage::fixed_point(
                s_w.iter()
                    .map(|&w| {
                        if alpha == 1.0 {
                            QuantizedMultiplier::from_scales(s_x, w, out.scale)
                        } else {
                            QuantizedMultiplier::from_f64(
                                f64::from(alpha) * f64::from(s_x) * f64::from(w)
                                    / f64::from(out.scale),
                            )
                        }
                    })
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| format!("fixed-point multiplier: {e}"))?,
                FixedPointRounding::DoubleRounding,
                out.zp,
            ),
        };
        let stage = stage.with_clamp(clamp.0, clamp.1);
        Ok(match bias {
            Some(b) => stage.with_bias(b),
            None => stage,
        })
    }

    fn conv(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let (dqx, xq, qx) = self.act_input(n)?;
        let wname = n.inputs.get(1).ok_or("no weight")?;
        let Weight {
            dq: dqw,
            values: w,
            shape: wshape,
            scales: s_w,
            zero_points: z_w,
        } = self.weight(wname, 0)?;
        if wshape.len() != 4 {
            return Err(format!(
                "{}-D weight: the kernel is 2-D conv only",
                wshape.len()
            ));
        }
        let params = conv_params(n, &wshape)?;
        let group = params.groups;
        let c_out = wshape[0];
        let mut through = vec![dqx, dqw];
        let bias = match n.inputs.get(2).filter(|b| !b.is_empty()) {
            None => None,
            Some(b) => {
                let (dqb, bv) = self.bias(b, c_out, qx.scale, &s_w)?;
                through.push(dqb);
                Some(bv)
            }
        };
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        let stage = self.stage(qx.scale, &s_w, qy, clamp, bias, 1.0)?;
        let weights = ConvWeights::new(&w, c_out, wshape[1] * group, params, &z_w)
            .map_err(|e| format!("packing weights: {e}"))?;
        let kind = conv_kind(&weights);
        let mut output = self.g.nodes[qi].outputs[0].clone();
        let mut absorbed = absorbed;
        let pool = self.max_pool_after(&output, qi).map(|(pool, nodes, out)| {
            absorbed.extend(nodes);
            output = out;
            pool
        });
        let desc = format!(
            "{kind} {}→{} {}x{} {}{}",
            qx.dtype,
            qy.dtype,
            wshape[2],
            wshape[3],
            if s_w.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            match &pool {
                Some(p) => format!(" + max_pool {}x{}", p.kernel[0], p.kernel[1]),
                None => String::new(),
            }
        );
        Ok(Matched {
            kernel: Box::new(ConvStep {
                weights,
                stage,
                pool,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                desc: desc.clone(),
            }),
            inputs: vec![xq],
            output,
            absorbed,
            through,
            kernel_desc: desc,
        })
    }

    /// `value` (the codes a conv step writes, from QuantizeLinear node `qi`) → DQ → MaxPool
    /// → Q with the same parameters (the codes pass unchanged), each read only by the next:
    /// the pool's parameters, those three nodes, and the final Q's output. The conv step then
    /// pools its own output (`conv2d_quant_max_pool`, exact), saving the pool step's pass
    /// and, on the Winograd path, three quarters of the output stage.
    fn max_pool_after(&self, value: &str, qi: usize) -> Option<(ConvParams, Vec<usize>, String)> {
        let dq = &self.g.nodes[self.sole_reader(value).ok()?];
        let pi = self.sole_reader(&dq.outputs[0]).ok()?;
        let p = &self.g.nodes[pi];
        if p.op_type != "MaxPool" || !is_default_domain(p) || p.inputs.len() != 1 {
            return None;
        }
        let params = pool_params(p).ok()?;
        // The pool step's own pattern, DQ(value) → MaxPool → Q, whose DQ → Q pair must be
        // the identity (same parameters): the pool then runs on the codes.
        let (dqi, xq, _, q2, _) = self.sandwich(p).ok()?;
        let q = &self.g.nodes[q2];
        if xq != value || !matches!(self.table(&self.g.nodes[dqi], None, q), Ok(None)) {
            return None;
        }
        // The nodes come after the conv's Q in node order (the plan keeps that order).
        if [dqi, pi, q2].iter().any(|&i| i < qi) {
            return None;
        }
        Some((params, vec![dqi, pi, q2], q.outputs[0].clone()))
    }

    fn gemm(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let is_gemm = n.op_type == "Gemm";
        let attr = |e: quantkit_graph::OpError| e.to_string();
        let trans_b = is_gemm && n.attr_int("transB", 0).map_err(attr)? != 0;
        if is_gemm {
            if n.attr_int("transA", 0).map_err(attr)? != 0 {
                return Err("transA = 1".into());
            }
            if n.attr_float("alpha", 1.0).map_err(attr)? != 1.0 {
                return Err("alpha ≠ 1".into());
            }
            if n.inputs.get(2).is_some_and(|c| !c.is_empty())
                && n.attr_float("beta", 1.0).map_err(attr)? != 1.0
            {
                return Err("beta ≠ 1".into());
            }
        }
        let (dqx, xq, qx) = self.act_input(n)?;
        let wname = n.inputs.get(1).ok_or("no weight")?;
        let Weight {
            dq: dqw,
            values: w,
            shape: wshape,
            scales: s_w,
            zero_points: z_w,
        } = self.weight(wname, if trans_b { 0 } else { 1 })?;
        if wshape.len() != 2 {
            return Err(format!(
                "{}-D weight: the GEMM step takes 2-D B",
                wshape.len()
            ));
        }
        let (k, nn, layout) = if trans_b {
            (wshape[1], wshape[0], WeightLayout::NxK)
        } else {
            (wshape[0], wshape[1], WeightLayout::KxN)
        };
        let mut through = vec![dqx, dqw];
        let bias = match n.inputs.get(2).filter(|b| !b.is_empty() && is_gemm) {
            None => None,
            Some(b) => {
                let (dqb, bv) = self.bias(b, nn, qx.scale, &s_w)?;
                through.push(dqb);
                Some(bv)
            }
        };
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        let stage = self.stage(qx.scale, &s_w, qy, clamp, bias, 1.0)?;
        let weights = PackedWeights::from_i8(&w, k, nn, layout, &z_w)
            .map_err(|e| format!("packing weights: {e}"))?;
        let mut absorbed = absorbed;
        let (input, flat) = match self.flatten_before(ni, dqx) {
            Some(f) => {
                absorbed.extend(f.absorbed);
                through.push(f.through);
                (f.codes, Some(FlatInput::new(w, layout, z_w)))
            }
            None => (xq, None),
        };
        let desc = format!(
            "gemm {}→{} {k}x{nn} {}{}",
            qx.dtype,
            qy.dtype,
            if s_w.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            if flat.is_some() { FLAT_DESC } else { "" }
        );
        Ok(Matched {
            kernel: Box::new(GemmStep {
                weights,
                stage,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                exactly_2d: is_gemm,
                flat,
                desc: desc.clone(),
            }),
            inputs: vec![input],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through,
            kernel_desc: desc,
        })
    }

    /// `codes → DQ → Flatten(axis = 1) → Q → DQ → ` the GEMM `ni` (whose activation DQ is
    /// `dqx`), where Q∘DQ around the Flatten maps every code to itself ([`Matcher::table`]
    /// is `None`) and the Flatten, Q and `dqx` outputs have no other reader: the GEMM step
    /// can read the pre-Flatten codes itself ([`FlatInput`]), saving the Flatten step and,
    /// for an NHWC tensor, its transpose to ONNX order. `None` when the pattern is not there.
    fn flatten_before(&self, ni: usize, dqx: usize) -> Option<FlatSource> {
        let nodes = &self.g.nodes;
        let dq = &nodes[dqx];
        if self.sole_reader(dq.outputs.first()?).ok()? != ni
            || self.sole_reader(&dq.inputs[0]).ok()? != dqx
        {
            return None;
        }
        let qi = *self.producer.get(dq.inputs[0].as_str())?;
        let q = &nodes[qi];
        if q.op_type != "QuantizeLinear" || !is_default_domain(q) {
            return None;
        }
        let fi = *self.producer.get(q.inputs.first()?.as_str())?;
        let f = &nodes[fi];
        let flat_ok = f.op_type == "Flatten"
            && is_default_domain(f)
            && f.inputs.len() == 1
            && f.outputs.len() == 1
            && f.attr_int("axis", 1).ok()? == 1
            && !self.opts.keep_float.iter().any(|k| k == &f.name);
        if !flat_ok || self.sole_reader(&f.outputs[0]).ok()? != qi {
            return None;
        }
        let pdq = self.dq_of(&f.inputs[0]).ok()?;
        if self.table(&nodes[pdq], None, q).ok()?.is_some() {
            return None;
        }
        Some(FlatSource {
            codes: nodes[pdq].inputs[0].clone(),
            absorbed: vec![fi, qi],
            through: pdq,
        })
    }

    /// `DQ(x) → op → Q`, where `op` maps codes through `compose` (given the dequantized
    /// values of all 256 codes, returns the op's float results).
    fn sandwich(&self, n: &Node) -> Why<(usize, String, Qp, usize, Qp)> {
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

    /// The table `code → Q(op(DQ(code)))`, evaluated with the graph crate's operators so it
    /// equals the QDQ graph on the float executor exactly; `None` when it is the identity.
    fn table(&self, dq: &Node, op: Option<&Node>, q: &Node) -> Why<Option<Table>> {
        let codes = match self.qparams(dq)?.dtype {
            DType::U8 => Tensor::new(vec![256], Data::U8((0..=255).collect())),
            _ => Tensor::new(vec![256], Data::I8((0..=255u8).map(|b| b as i8).collect())),
        }
        .map_err(|e| e.to_string())?;
        let run = |node: &Node, x: &Tensor| -> Why<Tensor> {
            let f = ops::lookup(&node.domain, &node.op_type)
                .ok_or_else(|| format!("no implementation of {}", node.op_type))?;
            let mut args: Vec<Option<&Tensor>> = vec![Some(x)];
            for v in &node.inputs[1..] {
                if v.is_empty() {
                    args.push(None);
                } else {
                    args.push(Some(self.init(v).ok_or_else(|| {
                        format!("`{}`: input `{v}` is not a constant", node.name)
                    })?));
                }
            }
            let ctx = OpCtx {
                node,
                opset: self.opset,
            };
            f(&ctx, &args)
                .map_err(|e| format!("`{}`: {e}", node.name))?
                .into_iter()
                .next()
                .ok_or_else(|| format!("`{}` produced nothing", node.name))
        };
        let mut v = run(dq, &codes)?;
        if let Some(op) = op {
            v = run(op, &v)?;
            if v.shape != [256] {
                return Err(format!("`{}` is not element-wise", op.name));
            }
        }
        let y = run(q, &v)?;
        let bytes: Vec<u8> = match &y.data {
            Data::U8(d) => d.clone(),
            Data::I8(d) => d.iter().map(|&b| b as u8).collect(),
            _ => return Err(format!("`{}` does not produce 8-bit codes", q.name)),
        };
        let same_type = y.dtype == codes.dtype;
        if same_type && bytes.iter().enumerate().all(|(i, &b)| b as usize == i) {
            return Ok(None);
        }
        Ok(Some(Table {
            bytes,
            out: y.dtype,
        }))
    }

    fn max_pool(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let params = pool_params(n)?;
        let k = params.kernel;
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let table = self.table(&self.g.nodes[dqx], None, &self.g.nodes[qi])?;
        let desc = format!("max_pool {}→{} {}x{}", qx.dtype, qy.dtype, k[0], k[1]);
        Ok(Matched {
            kernel: Box::new(MaxPoolStep {
                params,
                x_dtype: qx.dtype,
                table,
            }),
            inputs: vec![xq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    fn codes(&self, ni: usize, layout: bool) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let table = self.table(
            &self.g.nodes[dqx],
            (!layout).then_some(n),
            &self.g.nodes[qi],
        )?;
        let layout_op = if layout {
            Some(GraphOp {
                node: n.clone(),
                opset: self.opset,
                f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
            })
        } else {
            None
        };
        let desc = format!(
            "{} on {} codes{}",
            n.op_type,
            qx.dtype,
            match (&table, layout) {
                (Some(_), true) => " + requant table",
                (Some(_), false) => " (table)",
                (None, _) => "",
            }
        );
        let mut inputs = vec![xq];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        debug_assert!(matches!(qy.dtype, DType::U8 | DType::I8));
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: layout_op,
                table,
                x_dtype: qx.dtype,
                desc: desc.clone(),
            }),
            inputs,
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    fn add(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        if n.inputs.len() != 2 {
            return Err("Add needs two inputs".into());
        }
        let (dqa, aq, qa) = self.act_input(n)?;
        let dqb = self.dq_of(&n.inputs[1])?;
        let qb = self.qparams(&self.g.nodes[dqb])?;
        let bq = self.g.nodes[dqb].inputs[0].clone();
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        if qa.dtype != qb.dtype || qa.dtype != qy.dtype {
            return Err(format!(
                "mixed code types {} + {} → {}: the kernel takes one",
                qa.dtype, qb.dtype, qy.dtype
            ));
        }
        let lookup = |node: &Node| -> Why<GraphOp> {
            Ok(GraphOp {
                node: node.clone(),
                opset: self.opset,
                f: ops::lookup(&node.domain, &node.op_type)
                    .ok_or_else(|| format!("no implementation of {}", node.op_type))?,
            })
        };
        // The fallback for broadcasting operands: exactly the QDQ graph's nodes.
        let mut chain = vec![dqa, dqb, ni];
        chain.extend(absorbed.iter().copied());
        let mut float_path = Vec::new();
        let mut float_args = Vec::new();
        for &k in &chain {
            let node = &self.g.nodes[k];
            float_path.push(lookup(node)?);
            let skip = if k == ni { 2 } else { 1 };
            let mut args = Vec::new();
            for v in node.inputs.iter().skip(skip) {
                args.push(if v.is_empty() {
                    None
                } else {
                    Some(
                        self.init(v).cloned().ok_or_else(|| {
                            format!("`{}`: input `{v}` is not a constant", node.name)
                        })?,
                    )
                });
            }
            float_args.push(args);
        }
        let p = |q: Qp| quantkit_kernels::eltwise::QParams {
            scale: q.scale,
            zero_point: q.zp,
        };
        let desc = format!("add {}", qa.dtype);
        Ok(Matched {
            kernel: Box::new(AddStep {
                qa: p(qa),
                qb: p(qb),
                qy: p(qy),
                dtype: qa.dtype,
                clamp,
                float_path,
                float_args,
            }),
            inputs: vec![aq, bq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through: vec![dqa, dqb],
            kernel_desc: desc,
        })
    }

    /// The constant f32 tensor `name` when its shape broadcasts per output channel against
    /// the integer op's output: a scalar or one element, or `channels` values on the channel
    /// axis (`[C,1,1]`/`[1,C,1,1]` for conv, `[C]`/`[1,C]` for MatMul). Returns the values
    /// and the tensor's rank (a rank-2 constant makes a 1-D MatMul result 2-D).
    fn channel_const(&self, name: &str, conv: bool, channels: usize) -> Why<(Vec<f32>, usize)> {
        let t = self
            .init(name)
            .filter(|t| t.dtype == DType::F32)
            .ok_or_else(|| format!("`{name}` is not a constant f32"))?;
        let s = t.shape.as_slice();
        let ok = match s {
            [] | [1] => true,
            _ if conv => matches!(s, [c, 1, 1] | [1, c, 1, 1] if *c == channels),
            _ => matches!(s, [c] | [1, c] if *c == channels),
        };
        if !ok {
            return Err(format!(
                "`{name}` of shape {s:?} is not per output channel ({channels} channels)"
            ));
        }
        Ok((t.to_f32_vec(), t.rank()))
    }

    /// ONNX Runtime's dynamic quantization anchored at a ConvInteger or MatMulInteger:
    /// `DynamicQuantizeLinear(x) → (xq, xs, xz)`, `op(xq, W int8 constant, xz, wz constant)
    /// → Cast(float) → Mul(·, Mul(xs, w_scale)) [→ Add(·, bias)]` (see
    /// `quantkit-ptq/src/dynamic.rs`). One step reading the float `x`.
    fn dynamic(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let conv = n.op_type == "ConvInteger";
        if n.inputs.len() < 3 || n.inputs[0].is_empty() || n.inputs[2].is_empty() {
            return Err("the input zero point is absent".into());
        }
        let di = *self
            .producer
            .get(n.inputs[0].as_str())
            .ok_or("the input does not come from a DynamicQuantizeLinear")?;
        let d = &self.g.nodes[di];
        if d.op_type != "DynamicQuantizeLinear"
            || !is_default_domain(d)
            || d.outputs.len() != 3
            || d.outputs[0] != n.inputs[0]
            || d.outputs[2] != n.inputs[2]
        {
            return Err(format!(
                "input and zero point do not come from one DynamicQuantizeLinear (`{}`)",
                d.name
            ));
        }
        let x = d
            .inputs
            .first()
            .filter(|x| !x.is_empty())
            .ok_or("no input")?;
        let w = self
            .init(&n.inputs[1])
            .ok_or_else(|| format!("weight `{}` is not a constant", n.inputs[1]))?;
        let (Data::I8(wv), DType::I8) = (&w.data, w.dtype) else {
            return Err(format!("weight `{}` is {}, not int8", n.inputs[1], w.dtype));
        };
        let channels = if conv {
            if w.rank() != 4 {
                return Err(format!(
                    "{}-D weight: the kernel is 2-D conv only",
                    w.rank()
                ));
            }
            w.shape[0]
        } else {
            if w.rank() != 2 {
                return Err(format!(
                    "{}-D weight: the GEMM kernel takes 2-D B",
                    w.rank()
                ));
            }
            w.shape[1]
        };
        let wz: Vec<i32> = match n.inputs.get(3).filter(|z| !z.is_empty()) {
            None => vec![0],
            Some(z) => self
                .init(z)
                .filter(|z| z.dtype == DType::I8 && (z.len() == 1 || z.len() == channels))
                .filter(|z| z.rank() <= 1)
                .ok_or_else(|| {
                    format!("weight zero point `{z}` is not a constant i8 (one or per channel)")
                })?
                .to_i64_vec()
                .iter()
                .map(|&v| v as i32)
                .collect(),
        };
        // i32 → Cast(float) → Mul(·, s) with s = Mul(x_scale, w_scale).
        let ci = self.sole_reader(&n.outputs[0])?;
        let cast = &self.g.nodes[ci];
        let to = cast.attr_int("to", 0).map_err(|e| e.to_string())?;
        if cast.op_type != "Cast"
            || !is_default_domain(cast)
            || to != i64::from(DType::F32.onnx_code())
        {
            return Err(format!(
                "the int32 result feeds {} `{}`, not a Cast to float",
                cast.op_type, cast.name
            ));
        }
        let mi = self.sole_reader(&cast.outputs[0])?;
        let mul = &self.g.nodes[mi];
        let other = |node: &Node, v: &str| -> Option<String> {
            match node.inputs.as_slice() {
                [a, b] if a == v => Some(b.clone()),
                [a, b] if b == v => Some(a.clone()),
                _ => None,
            }
        };
        let scale_v = (mul.op_type == "Mul" && is_default_domain(mul))
            .then(|| other(mul, &cast.outputs[0]))
            .flatten()
            .ok_or_else(|| format!("the Cast feeds {} `{}`, not a Mul", mul.op_type, mul.name))?;
        let si = *self
            .producer
            .get(scale_v.as_str())
            .ok_or_else(|| format!("scale `{scale_v}` is not computed by a Mul"))?;
        let smul = &self.g.nodes[si];
        if smul.op_type != "Mul" || !is_default_domain(smul) || self.sole_reader(&scale_v)? != mi {
            return Err(format!(
                "scale `{scale_v}` is not a Mul read only by `{}`",
                mul.name
            ));
        }
        let w_scale_name = other(smul, &d.outputs[1])
            .ok_or_else(|| format!("`{}` does not multiply the input scale", smul.name))?;
        let (w_scale, mut const_rank) = self.channel_const(&w_scale_name, conv, channels)?;
        if w_scale.iter().any(|s| !s.is_finite()) {
            return Err(format!("weight scale `{w_scale_name}` is not finite"));
        }
        let mut absorbed = vec![ci, si, mi];
        let mut output = mul.outputs[0].clone();
        let mut bias = None;
        if let Ok(ai) = self.sole_reader(&output) {
            let add = &self.g.nodes[ai];
            if add.op_type == "Add" && is_default_domain(add) {
                if let Some(b) = other(add, &output) {
                    if let Ok((bv, rank)) = self.channel_const(&b, conv, channels) {
                        bias = Some(bv);
                        const_rank = const_rank.max(rank);
                        absorbed.push(ai);
                        output = add.outputs[0].clone();
                    }
                }
            }
        }
        // A float Relu, then (conv only) a float MaxPool, read only by the previous node
        // run inside the step too: on the NHWC f32 result they cost one pass over channels,
        // where as graph islands each would transpose the whole tensor back to NCHW.
        let mut relu = false;
        if let Ok(ri) = self.sole_reader(&output) {
            let r = &self.g.nodes[ri];
            if r.op_type == "Relu" && is_default_domain(r) && r.outputs.len() == 1 {
                relu = true;
                absorbed.push(ri);
                output = r.outputs[0].clone();
            }
        }
        let mut pool = None;
        if conv {
            if let Ok(pi) = self.sole_reader(&output) {
                let p = &self.g.nodes[pi];
                if p.op_type == "MaxPool" && is_default_domain(p) && p.inputs.len() == 1 {
                    if let Ok(params) = pool_params(p) {
                        pool = Some(params);
                        absorbed.push(pi);
                        output = p.outputs[0].clone();
                    }
                }
            }
        }
        if absorbed.iter().any(|&a| a < ni) {
            return Err("the float tail comes before the integer op in node order".into());
        }
        let (op, kind) = if conv {
            let params = conv_params(n, &w.shape)?;
            let group = params.groups;
            let weights = ConvWeights::new(wv, channels, w.shape[1] * group, params, &wz)
                .map_err(|e| format!("packing weights: {e}"))?;
            let kind = conv_kind(&weights);
            (
                DynOp::Conv(weights),
                format!("{kind} {}x{}", w.shape[2], w.shape[3]),
            )
        } else {
            let (k, nn) = (w.shape[0], w.shape[1]);
            let weights = PackedWeights::from_i8(wv, k, nn, WeightLayout::KxN, &wz)
                .map_err(|e| format!("packing weights: {e}"))?;
            (DynOp::Gemm(weights), format!("gemm {k}x{nn}"))
        };
        let desc = format!(
            "dynamic {kind} u8 x i8 -> f32 {}{}{}{}",
            if w_scale.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            if bias.is_some() { " + bias" } else { "" },
            if relu { " + relu" } else { "" },
            match &pool {
                Some(p) => format!(" + max_pool {}x{}", p.kernel[0], p.kernel[1]),
                None => String::new(),
            }
        );
        Ok(Matched {
            kernel: Box::new(DynamicStep {
                op,
                w_scale,
                bias,
                relu,
                pool,
                min_rank: const_rank,
                desc: desc.clone(),
            }),
            inputs: vec![x.clone()],
            output,
            absorbed,
            through: vec![di],
            kernel_desc: desc,
        })
    }

    /// Tries the integer pattern anchored at node `ni`.
    fn try_match(&self, ni: usize) -> Option<Why<Matched>> {
        let n = &self.g.nodes[ni];
        let op = n.op_type.as_str();
        // Codes straight from another step (QOperator models): MaxPool and layout ops.
        let codes = || n.inputs.first().and_then(|x| self.code_dtype(x));
        let m = if n.domain == qoperator::MS_DOMAIN {
            match op {
                "QGemm" => self.qgemm(ni),
                _ => return None,
            }
        } else if !is_default_domain(n) {
            return None;
        } else {
            match op {
                "Conv" => self.conv(ni),
                "Gemm" | "MatMul" => self.gemm(ni),
                "QLinearConv" => self.qlinear_conv(ni),
                "QLinearMatMul" => self.qlinear_matmul(ni),
                "MaxPool" => match codes() {
                    Some(dt) => self.max_pool_codes(ni, dt),
                    None => self.max_pool(ni),
                },
                "ConvInteger" | "MatMulInteger" => self.dynamic(ni),
                // QLinearAdd of two quantized operands, else a float input prologue.
                "Add" => self.add(ni).or_else(|e| self.prologue(ni).map_err(|_| e)),
                "Sub" | "Mul" | "Div" => self.prologue(ni),
                _ if LAYOUT_OPS.contains(&op) => match codes() {
                    Some(dt) => self.layout_codes(ni, dt),
                    None => self.codes(ni, true),
                },
                _ if TABLE_OPS.contains(&op) => self.codes(ni, false),
                _ => return None,
            }
        };
        Some(if self.opts.keep_float.iter().any(|k| k == &n.name) {
            Err("kept in float by EngineOptions::keep_float".into())
        } else {
            m
        })
    }
}

/// The 2-D parameters of a MaxPool node the NHWC pooling steps run: floor output size, no
/// Indices output, explicit pads (or VALID).
fn pool_params(n: &Node) -> Why<ConvParams> {
    let attr = |e: quantkit_graph::OpError| e.to_string();
    if n.outputs.len() > 1 && !n.outputs[1].is_empty() {
        return Err("the Indices output is used".into());
    }
    if n.attr_int("ceil_mode", 0).map_err(attr)? != 0 {
        return Err("ceil_mode = 1".into());
    }
    let auto_pad = n.attr_string("auto_pad", "NOTSET").map_err(attr)?;
    if !matches!(auto_pad.as_str(), "NOTSET" | "VALID" | "") {
        return Err(format!("auto_pad {auto_pad} needs the input size"));
    }
    let k = n
        .attr_ints("kernel_shape")
        .map_err(attr)?
        .unwrap_or_default();
    if k.len() != 2 || k.iter().any(|&v| v < 1) {
        return Err(format!("kernel_shape {k:?}: the kernel is 2-D"));
    }
    let two = |name: &str| -> Why<[usize; 2]> {
        match n.attr_ints(name).map_err(attr)? {
            None => Ok([1; 2]),
            Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 1) => {
                Ok([v[0] as usize, v[1] as usize])
            }
            Some(v) => Err(format!("{name} {v:?} not supported")),
        }
    };
    let pads = match n.attr_ints("pads").map_err(attr)? {
        Some(p) if auto_pad != "VALID" => {
            if p.len() != 4 || p.iter().any(|&x| x < 0) {
                return Err(format!("pads {p:?} not supported"));
            }
            [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
        }
        _ => [0; 4],
    };
    let params = ConvParams {
        kernel: [k[0] as usize, k[1] as usize],
        stride: two("strides")?,
        dilation: two("dilations")?,
        pads,
        groups: 1,
    };
    Ok(params)
}

/// The 2-D convolution parameters of a Conv or ConvInteger node with weight shape `wshape`
/// (`[c_out, c_in/group, kh, kw]`).
fn conv_params(n: &Node, wshape: &[usize]) -> Why<ConvParams> {
    let attr = |e: quantkit_graph::OpError| e.to_string();
    let auto_pad = n.attr_string("auto_pad", "NOTSET").map_err(attr)?;
    if !matches!(auto_pad.as_str(), "NOTSET" | "VALID" | "") {
        return Err(format!("auto_pad {auto_pad} needs the input size"));
    }
    let two = |name: &str, default: usize| -> Why<[usize; 2]> {
        match n.attr_ints(name).map_err(attr)? {
            None => Ok([default; 2]),
            Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 1) => {
                Ok([v[0] as usize, v[1] as usize])
            }
            Some(v) => Err(format!("{name} {v:?} not supported")),
        }
    };
    let pads = match n.attr_ints("pads").map_err(attr)? {
        None => [0; 4],
        Some(_) if auto_pad == "VALID" => [0; 4],
        Some(p) if p.len() == 4 && p.iter().all(|&x| x >= 0) => {
            [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
        }
        Some(p) => return Err(format!("pads {p:?} not supported")),
    };
    if let Some(k) = n.attr_ints("kernel_shape").map_err(attr)? {
        if k.len() != 2 || k[0] as usize != wshape[2] || k[1] as usize != wshape[3] {
            return Err(format!("kernel_shape {k:?} differs from the weight"));
        }
    }
    let group = n.attr_int("group", 1).map_err(attr)?.max(1) as usize;
    let params = ConvParams {
        kernel: [wshape[2], wshape[3]],
        stride: two("strides", 1)?,
        dilation: two("dilations", 1)?,
        pads,
        groups: group,
    };
    Ok(params)
}

/// `Q(v)` of a clamp bound with QuantizeLinear's arithmetic: quantkit-core's equation (1)
/// (f32 division, half to even, saturation; with the positive finite scale `qparams`
/// checks, ±∞ go to the ends of the range). Since Q is monotone,
/// `Q(clip(y, a, b)) = clamp(Q(y), Q(a), Q(b))`, so a fused Relu/Clip is exactly this clamp
/// on the output codes.
fn quantize_bound(v: f32, q: Qp) -> i32 {
    let (lo, hi) = match q.dtype {
        DType::U8 => (0, 255),
        _ => (-128, 127),
    };
    quantkit_core::quantize_value(
        v,
        q.scale,
        q.zp,
        lo,
        hi,
        quantkit_core::RoundingMode::HalfToEven,
    )
}

/// Compiles a graph into an integer plan. Patterns whose preconditions fail (and operators
/// without an integer kernel) become float islands; only an operator that neither the
/// kernels nor the graph crate implement is an error.
pub fn compile(g: &Graph, opts: &EngineOptions) -> Result<Plan> {
    let m = Matcher::new(g, opts);
    let opset = g.opset();
    let mut placement: Vec<Option<Placement>> = vec![None; g.nodes.len()];
    let mut through_of: HashMap<usize, String> = HashMap::new();
    // Steps as (anchor node index, kernel, input names, output names).
    let mut pending: Vec<Pending> = Vec::new();
    let mut reasons: HashMap<usize, String> = HashMap::new();
    for i in 0..g.nodes.len() {
        if placement[i].is_some() {
            continue;
        }
        let n = &g.nodes[i];
        match m.try_match(i) {
            Some(Ok(mt)) => {
                placement[i] = Some(Placement::Integer {
                    kernel: mt.kernel_desc.clone(),
                });
                for &a in &mt.absorbed {
                    placement[a] = Some(Placement::Fused {
                        into: n.name.clone(),
                    });
                }
                for &t in &mt.through {
                    through_of.entry(t).or_insert_with(|| n.name.clone());
                }
                pending.push(Pending {
                    node: i,
                    kernel: mt.kernel,
                    inputs: mt.inputs,
                    outputs: vec![mt.output],
                });
                continue;
            }
            Some(Err(why)) => {
                reasons.insert(i, why);
            }
            None => {}
        }
        let f = ops::lookup(&n.domain, &n.op_type).ok_or_else(|| EngineError::UnknownOp {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            domain: if n.domain.is_empty() {
                "ai.onnx".into()
            } else {
                n.domain.clone()
            },
        })?;
        pending.push(Pending {
            node: i,
            kernel: Box::new(GraphOp {
                node: n.clone(),
                opset,
                f,
            }),
            inputs: n.inputs.clone(),
            outputs: n.outputs.clone(),
        });
    }

    // Drop steps whose outputs nobody needs (the DQs an integer step reads through).
    let mut needed: HashSet<&str> = g.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut keep = vec![false; pending.len()];
    for (k, p) in pending.iter().enumerate().rev() {
        if p.outputs.iter().any(|o| needed.contains(o.as_str())) {
            keep[k] = true;
            needed.extend(
                p.inputs
                    .iter()
                    .filter(|v| !v.is_empty())
                    .map(String::as_str),
            );
        }
    }

    let mut slots: HashMap<String, usize> = HashMap::new();
    let mut consts: Vec<Option<Val>> = Vec::new();
    let mut slot_of = |name: &str, consts: &mut Vec<Option<Val>>| -> usize {
        if let Some(&s) = slots.get(name) {
            return s;
        }
        let s = consts.len();
        consts.push(g.initializers.get(name).cloned().map(Val::nchw));
        slots.insert(name.to_string(), s);
        s
    };
    let inputs: Vec<_> = g
        .inputs
        .iter()
        .map(|vi| (vi.clone(), slot_of(&vi.name, &mut consts)))
        .collect();
    let mut steps: Vec<Step> = Vec::new();
    for (p, keep) in pending.into_iter().zip(keep) {
        let Pending {
            node: ni,
            kernel,
            inputs: ins,
            outputs: outs,
        } = p;
        let n = &g.nodes[ni];
        if !keep {
            if placement[ni].is_none() {
                placement[ni] = Some(match through_of.get(&ni) {
                    Some(a) => Placement::Fused { into: a.clone() },
                    None => Placement::Constant,
                });
            }
            continue;
        }
        let in_slots: Vec<Option<usize>> = ins
            .iter()
            .map(|v| (!v.is_empty()).then(|| slot_of(v, &mut consts)))
            .collect();
        let out_slots: Vec<Option<usize>> = outs
            .iter()
            .map(|v| (!v.is_empty()).then(|| slot_of(v, &mut consts)))
            .collect();
        let step = Step {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            inputs: in_slots,
            outputs: out_slots,
            kernel,
        };
        // Fold a float step whose inputs are all constants (a weight's DQ when its conv
        // stayed float): it would compute the same tensor on every run.
        let all_const = placement[ni].is_none()
            && step
                .inputs
                .iter()
                .all(|s| s.is_none_or(|s| consts[s].is_some()));
        if all_const {
            let args: Vec<Option<&Val>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| consts[s].as_ref()))
                .collect();
            let outs = step.kernel.run(&step, &args)?;
            for (s, v) in step.outputs.iter().zip(outs) {
                if let Some(s) = s {
                    consts[*s] = Some(v);
                }
            }
            placement[ni] = Some(Placement::Constant);
            continue;
        }
        if placement[ni].is_none() {
            placement[ni] = Some(match n.op_type.as_str() {
                "QuantizeLinear" | "DequantizeLinear" => Placement::Convert,
                op => Placement::Float {
                    reason: reasons
                        .remove(&ni)
                        .unwrap_or_else(|| format!("no integer kernel for {op}")),
                },
            });
        }
        steps.push(step);
    }
    let outputs: Vec<(String, usize)> = g
        .outputs
        .iter()
        .map(|o| (o.name.clone(), slot_of(&o.name, &mut consts)))
        .collect();
    let mut last_use = vec![0usize; consts.len()];
    for (i, s) in steps.iter().enumerate() {
        for &v in s.inputs.iter().flatten() {
            last_use[v] = i;
        }
    }
    for (_, s) in &outputs {
        last_use[*s] = usize::MAX;
    }
    let report = g
        .nodes
        .iter()
        .zip(placement)
        .map(|(n, p)| NodeReport {
            node: n.name.clone(),
            op_type: n.op_type.clone(),
            placement: p.unwrap_or(Placement::Constant),
        })
        .collect();
    Ok(Plan {
        steps,
        consts,
        inputs,
        outputs,
        last_use,
        report,
    })
}

/// The step name's kernel family: `depthwise conv2d`, `winograd conv2d` or `conv2d`
/// (im2col + GEMM).
pub(crate) fn conv_kind(weights: &ConvWeights) -> &'static str {
    match weights.method() {
        "depthwise" => "depthwise conv2d",
        "winograd" => "winograd conv2d",
        _ => "conv2d",
    }
}
