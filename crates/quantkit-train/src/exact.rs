//! Exact mode: the fake-quant forward computed with the integer engine's numbers
//! (`docs/qat.md`, "Exact mode").
//!
//! The fake-quant forward and the engine differ in one place only: a quantized
//! Conv/ConvTranspose/Gemm/MatMul. The fake-quant graph sums dequantized f32 products in the order of an
//! f32 GEMM, adds the float bias, and quantizes `(conv + bias)/s_y`; the engine sums
//! `(x − z_x)(w − z_w)` exactly in int32, adds the bias the exporter rounded to int32 at
//! `s_x·s_w`, and requantizes with its f32 (or fixed-point) multiplier. Every other step the
//! engine runs on codes (tables, Add/Mul, MaxPool, GlobalAveragePool, Concat, layout ops,
//! the input prologue) is built to equal the QDQ graph's float arithmetic bit for bit, and a
//! float island *is* the graph's operator.
//!
//! An [`ExactPlan`] is made from the exported QDQ graph and the engine's compiled plan: for
//! every node the engine's report places as an integer Conv/ConvTranspose/Gemm/MatMul step, the
//! fake-quant forward computes the integer accumulator exactly (the registry's own f32
//! operator on integer-valued operands, which is exact while every partial sum stays below
//! 2²⁴, checked per batch; larger layers are split into base-16 digits) and turns it into
//! the output code with the engine's own [`quantkit_engine::Requantizer`]; biases read their
//! exported int32 values. The result is the engine's codes on every sample, not on most.

use std::collections::{HashMap, HashSet};

use quantkit_core::linear::{dequantize_value, quantize_value};
use quantkit_core::RoundingMode;
use quantkit_engine::{Placement, Plan, RequantMode, Requantizer};
use quantkit_graph::ir::Uses;
use quantkit_graph::ops::clip::ClipBounds;
use quantkit_graph::ops::{OpCtx, OpKind};
use quantkit_graph::{DType, Graph, Node, Tensor as GTensor};

use crate::error::{Result, TrainError};
use crate::graph::GraphNet;

/// Partial sums below this are exact in f32 (integers up to 2²⁴ are representable).
const F32_EXACT: u64 = 1 << 24;

fn err(msg: String) -> TrainError {
    TrainError::Graph(format!("exact mode: {msg}"))
}

/// One integer Conv/ConvTranspose/Gemm/MatMul of the engine, evaluated in the fake-quant forward as the
/// engine evaluates it.
#[derive(Clone, Debug)]
pub(crate) struct ExactLayer {
    /// Node name (messages).
    pub(crate) name: String,
    /// The node with inputs `[x, w]` (no bias: the stage adds the int32 bias).
    node: Node,
    x_scale: f32,
    x_zp: i32,
    x_range: (i32, i32),
    /// Weight codes minus their zero points, ONNX layout.
    w: Vec<i32>,
    w_shape: Vec<usize>,
    /// Largest per-output-channel Σ|w digit|, for one digit (the codes) and for two
    /// base-16 digits (high, low).
    w_l1: [u64; 3],
    /// Axis of the output channel in the layer's output (`None`: the last).
    out_axis: Option<usize>,
    requant: Requantizer,
    y_scale: f32,
    y_zp: i32,
    /// Slot receiving `DQ(code)` (the output fake-quant's output).
    pub(crate) target: usize,
}

/// Digit `which` of `v` written with `digits` base-16 digits (`digits = 1`: `v` itself;
/// `2`: high `v div 16`, low `v mod 16`, so `v = 16·high + low`).
fn digit(v: i32, digits: usize, which: usize) -> i32 {
    match (digits, which) {
        (1, _) => v,
        (_, 0) => v.div_euclid(16),
        _ => v.rem_euclid(16),
    }
}

/// `(digits, which)` pairs and the weight of each digit.
fn parts(digits: usize) -> &'static [(usize, i64)] {
    if digits == 1 {
        &[(0, 1)]
    } else {
        &[(0, 16), (1, 1)]
    }
}

impl ExactLayer {
    fn channel_l1(w: &[i32], shape: &[usize], axis: usize, f: impl Fn(i32) -> i32) -> u64 {
        let inner: usize = shape[axis + 1..].iter().product();
        let c = shape[axis].max(1);
        let mut l1 = vec![0u64; c];
        for (i, &v) in w.iter().enumerate() {
            l1[(i / inner.max(1)) % c] += u64::from(f(v).unsigned_abs());
        }
        l1.into_iter().max().unwrap_or(0)
    }

    /// The layer's output for the fake-quant input `x` (values `DQ(q_x)`): the engine's
    /// codes, dequantized.
    pub(crate) fn run(&self, x: &GTensor, opset: i64) -> Result<GTensor> {
        let (lo, hi) = self.x_range;
        let xc: Vec<i32> = x
            .to_f32_vec()
            .iter()
            .map(|&v| {
                quantize_value(v, self.x_scale, self.x_zp, lo, hi, RoundingMode::HalfToEven)
                    - self.x_zp
            })
            .collect();
        let x_max = |digits: usize, which: usize| {
            xc.iter()
                .map(|&v| u64::from(digit(v, digits, which).unsigned_abs()))
                .max()
                .unwrap_or(0)
        };
        // The fewest passes whose every partial sum stays exact in f32.
        let (dx, dw) = [(1, 1), (1, 2), (2, 1), (2, 2)]
            .into_iter()
            .find(|&(dx, dw)| {
                parts(dx).iter().all(|&(i, _)| {
                    parts(dw).iter().all(|&(j, _)| {
                        let l1 = self.w_l1[if dw == 1 { 0 } else { 1 + j }];
                        x_max(dx, i).saturating_mul(l1) < F32_EXACT
                    })
                })
            })
            .ok_or_else(|| {
                err(format!(
                    "node `{}`: accumulators too large to evaluate exactly",
                    self.name
                ))
            })?;
        let ctx = OpCtx {
            node: &self.node,
            opset,
        };
        let eval = self
            .node
            .kind()
            .expect("Conv, ConvTranspose, Gemm or MatMul")
            .def()
            .eval;
        let mut acc: Vec<i64> = Vec::new();
        let mut shape = Vec::new();
        for &(i, ri) in parts(dx) {
            let xt = GTensor::from_f32(
                &x.shape,
                xc.iter().map(|&v| digit(v, dx, i) as f32).collect(),
            );
            for &(j, rj) in parts(dw) {
                let wt = GTensor::from_f32(
                    &self.w_shape,
                    self.w.iter().map(|&v| digit(v, dw, j) as f32).collect(),
                );
                let y = eval(&ctx, &[Some(&xt), Some(&wt)])
                    .map_err(|e| err(format!("node `{}`: {e}", self.name)))?
                    .remove(0);
                if acc.is_empty() {
                    acc = vec![0; y.len()];
                    shape = y.shape.clone();
                }
                for (a, &v) in acc.iter_mut().zip(y.to_f32_vec().iter()) {
                    // Every partial sum is an integer below 2²⁴ (checked above), so `v` is
                    // the exact integer sum; a fraction here is a bug, not rounding.
                    if v.fract() != 0.0 {
                        return Err(err(format!(
                            "node `{}`: non-integer accumulator {v}",
                            self.name
                        )));
                    }
                    *a += v as i64 * ri * rj;
                }
            }
        }
        let axis = self
            .out_axis
            .unwrap_or(shape.len().saturating_sub(1))
            .min(shape.len().saturating_sub(1));
        let inner: usize = shape[axis + 1..].iter().product();
        let c = shape.get(axis).copied().unwrap_or(1).max(1);
        let y: Vec<f32> = acc
            .iter()
            .enumerate()
            .map(|(k, &a)| {
                // The engine accumulates in int32 (wrapping); `quantkit check` reports
                // layers whose worst case could overflow.
                let code = self.requant.apply(a as i32, (k / inner.max(1)) % c);
                dequantize_value(code, self.y_scale, self.y_zp)
            })
            .collect();
        Ok(GTensor::from_f32(&shape, y))
    }
}

/// What exact mode computes differently from the training forward: built by
/// [`crate::qat::Qat::exact_plan`] from the exported graph and the engine's plan of it, used
/// by [`crate::qat::Qat::predict_exact`].
#[derive(Clone, Debug)]
pub struct ExactPlan {
    layers: Vec<ExactLayer>,
    by_step: HashMap<usize, usize>,
    pub(crate) skip: HashSet<usize>,
    /// Bias slots and their exported values `DQ(int32 codes)`.
    pub(crate) consts: Vec<(usize, GTensor)>,
    /// The training state the plan was built from (it is stale after another step): the
    /// generation of the parameters and whether they were the weight average.
    pub(crate) generation: (usize, bool),
    /// Nodes the engine runs on integers that exact mode cannot reproduce (they run as the
    /// float fake-quant forward, so their codes may differ): `(node, reason)`.
    pub not_reproduced: Vec<(String, String)>,
}

impl ExactPlan {
    pub(crate) fn layer_at(&self, step: usize) -> Option<&ExactLayer> {
        self.by_step.get(&step).map(|&i| &self.layers[i])
    }

    /// Number of Conv/ConvTranspose/Gemm/MatMul layers computed with the engine's integer arithmetic.
    pub fn integer_layers(&self) -> usize {
        self.layers.len()
    }
}

fn init<'a>(g: &'a Graph, name: &str) -> Option<&'a GTensor> {
    g.initializers.get(name)
}

/// Scale, zero point and code type of the DequantizeLinear producing `value`.
fn dq_params(
    g: &Graph,
    uses: &Uses,
    value: &str,
) -> std::result::Result<(usize, f32, i32, DType), String> {
    let di = uses
        .producer(value)
        .filter(|&i| g.nodes[i].is(OpKind::DequantizeLinear))
        .ok_or_else(|| format!("`{value}` is not dequantized"))?;
    let dq = &g.nodes[di];
    let s = dq
        .inputs
        .get(1)
        .and_then(|s| init(g, s))
        .filter(|s| s.dtype == DType::F32 && s.len() == 1)
        .ok_or_else(|| format!("`{}`: scale is not one f32 constant", dq.name))?
        .to_f32_vec()[0];
    let (z, dt) = match dq.inputs.get(2).filter(|z| !z.is_empty()) {
        Some(z) => {
            let t = init(g, z).ok_or_else(|| format!("`{}`: zero point not constant", dq.name))?;
            (t.to_i64_vec()[0] as i32, t.dtype)
        }
        None => (0, DType::U8),
    };
    Ok((di, s, z, dt))
}

fn code_range(dt: DType) -> std::result::Result<(i32, i32), String> {
    match dt {
        DType::U8 => Ok((0, 255)),
        DType::I8 => Ok((-128, 127)),
        d => Err(format!("{d} codes (the engine's integer steps take u8/i8)")),
    }
}

/// Builds the layer for node `n` of the exported graph `g`, mapped to the training graph.
fn layer(
    net: &GraphNet,
    g: &Graph,
    uses: &Uses,
    n: &Node,
    mode: RequantMode,
) -> std::result::Result<(usize, Vec<usize>, ExactLayer), String> {
    let kind = n.kind().ok_or("unknown operator")?;
    // Activation input.
    let (_, x_scale, x_zp, x_dt) = dq_params(g, uses, &n.inputs[0])?;
    let x_range = code_range(x_dt)?;
    // Weight codes, scales and zero points.
    let wv = n.inputs.get(1).ok_or("no weight")?;
    let wdi = uses
        .producer(wv)
        .filter(|&i| g.nodes[i].is(OpKind::DequantizeLinear))
        .ok_or("the weight is not dequantized")?;
    let wdq = &g.nodes[wdi];
    let codes = init(g, &wdq.inputs[0]).ok_or("the weight is not a constant")?;
    let s_w = wdq
        .inputs
        .get(1)
        .and_then(|s| init(g, s))
        .ok_or("the weight scale is not a constant")?
        .to_f32_vec();
    let z_w: Vec<i32> = match wdq.inputs.get(2).filter(|z| !z.is_empty()) {
        Some(z) => init(g, z)
            .ok_or("the weight zero point is not a constant")?
            .to_i64_vec()
            .iter()
            .map(|&v| v as i32)
            .collect(),
        None => vec![0; s_w.len()],
    };
    let w_axis = if s_w.len() > 1 {
        let a = wdq.attr_int("axis", 1).map_err(|e| e.to_string())?;
        (if a < 0 { a + codes.rank() as i64 } else { a }) as usize
    } else {
        0
    };
    let w_shape = codes.shape.clone();
    if kind == OpKind::ConvTranspose
        && s_w.len() > 1
        && n.attr_int("group", 1).map_err(|e| e.to_string())? != 1
    {
        return Err("a grouped ConvTranspose with per-channel weights".into());
    }
    let w_inner: usize = w_shape.get(w_axis + 1..).map_or(1, |s| s.iter().product());
    let w_c = w_shape.get(w_axis).copied().unwrap_or(1).max(1);
    let w: Vec<i32> = codes
        .to_i64_vec()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let z = if z_w.len() == 1 {
                z_w[0]
            } else {
                z_w[(i / w_inner.max(1)) % w_c]
            };
            v as i32 - z
        })
        .collect();
    // The output channel axis of the weight (the one per-channel parameters run along).
    let (wc_axis, out_axis) = match kind {
        OpKind::Conv => (0, Some(1)),
        // Weight [C, M/group, k...]: an output element sums each (input channel, tap) of its
        // channel at most once, so the per-channel Σ|w| along axis 1 bounds it as for Conv
        // (over every group's input channels when group > 1: larger, still a bound).
        OpKind::ConvTranspose => (1, Some(1)),
        OpKind::Gemm => {
            let tb = n.attr_int("transB", 0).map_err(|e| e.to_string())? != 0;
            (usize::from(!tb), Some(1))
        }
        _ => (w_shape.len().saturating_sub(1), None),
    };
    let w_l1 = [
        ExactLayer::channel_l1(&w, &w_shape, wc_axis, |v| v),
        ExactLayer::channel_l1(&w, &w_shape, wc_axis, |v| digit(v, 2, 0)),
        ExactLayer::channel_l1(&w, &w_shape, wc_axis, |v| digit(v, 2, 1)),
    ];
    // Bias (int32, the exporter's rounding).
    let bias = match n.inputs.get(2).filter(|b| !b.is_empty()) {
        Some(b) if kind != OpKind::MatMul => {
            let bdi = uses.producer(b).ok_or("the bias is not dequantized")?;
            let bt = init(g, &g.nodes[bdi].inputs[0])
                .filter(|t| t.dtype == DType::I32)
                .ok_or("the bias is not int32")?;
            Some(bt.to_i64_vec().iter().map(|&v| v as i32).collect())
        }
        _ => None,
    };
    // Tail: [Relu | Clip] → QuantizeLinear.
    let opset = g.opset();
    let mut r = uses
        .sole_reader(&n.outputs[0])
        .ok_or("the output has several readers")?;
    let mut clip = (f32::NEG_INFINITY, f32::INFINITY);
    if g.nodes[r].facts().clamp {
        let c = &g.nodes[r];
        let b = ClipBounds::of(c, opset, |i| {
            init(g, &c.inputs[i])
                .filter(|t| t.dtype == DType::F32 && t.len() == 1)
                .map(|t| f64::from(t.to_f32_vec()[0]))
        })
        .map_err(|e| e.to_string())?;
        clip = (b.lo as f32, b.hi as f32);
        r = uses
            .sole_reader(&c.outputs[0])
            .ok_or("the activation has several readers")?;
    }
    let q = &g.nodes[r];
    if !q.is(OpKind::QuantizeLinear) {
        return Err(format!(
            "the output feeds `{}`, not a QuantizeLinear",
            q.name
        ));
    }
    let y_scale = init(g, &q.inputs[1])
        .filter(|s| s.len() == 1)
        .ok_or("output scale not constant")?
        .to_f32_vec()[0];
    let zt = q
        .inputs
        .get(2)
        .and_then(|z| init(g, z))
        .ok_or("output zero point not constant")?;
    let (y_zp, y_dt) = (zt.to_i64_vec()[0] as i32, zt.dtype);
    let requant = Requantizer::new(mode, x_scale, &s_w, y_scale, y_zp, y_dt, clip, bias)?;

    // The same layer in the training graph: op step → [Relu | Clip step] → fake-quant step.
    let step = net.op_step(&n.name).ok_or("not in the training graph")?;
    let (ins, outs) = net.step_slots(step);
    let x_slot = ins.first().copied().flatten().ok_or("no input")?;
    if net
        .producer_of(x_slot)
        .is_some_and(|p| net.step_node(p).is_some())
    {
        return Err("its input is not fake-quantized in the training graph".into());
    }
    let mut skip = Vec::new();
    let mut cur = outs[0];
    let target = loop {
        let (rd, is_out) = net.readers_of(cur);
        let [ri] = rd[..] else {
            return Err("in the training graph its output has several readers".into());
        };
        if is_out {
            return Err("in the training graph its output is a graph output".into());
        }
        skip.push(ri);
        match net.step_node(ri) {
            Some(c) if c.facts().clamp && skip.len() == 1 => cur = net.step_slots(ri).1[0],
            Some(c) => {
                return Err(format!(
                    "its output feeds `{}` in the training graph",
                    c.name
                ))
            }
            None => break net.step_slots(ri).1[0],
        }
    };
    let mut node = n.clone();
    node.inputs = vec!["x".into(), "w".into()];
    Ok((
        step,
        skip,
        ExactLayer {
            name: n.name.clone(),
            node,
            x_scale,
            x_zp,
            x_range,
            w,
            w_shape,
            w_l1,
            out_axis,
            requant,
            y_scale,
            y_zp,
            target,
        },
    ))
}

/// Builds the plan (see [`crate::qat::Qat::exact_plan`]).
pub(crate) fn build(
    net: &GraphNet,
    exported: &Graph,
    engine: &Plan,
    mode: RequantMode,
    biases: &[(String, String, String)],
    generation: (usize, bool),
) -> Result<ExactPlan> {
    let uses = Uses::new(exported);
    let mut plan = ExactPlan {
        layers: Vec::new(),
        by_step: HashMap::new(),
        skip: HashSet::new(),
        consts: Vec::new(),
        generation,
        not_reproduced: Vec::new(),
    };
    for r in engine.report() {
        if !matches!(r.placement, Placement::Integer { .. }) {
            continue;
        }
        let Some(n) = exported.nodes.iter().find(|n| n.name == r.node) else {
            continue;
        };
        let exact_kind = matches!(
            n.kind(),
            Some(OpKind::Conv | OpKind::ConvTranspose | OpKind::Gemm | OpKind::MatMul)
        );
        if !exact_kind {
            // Tables, pools, binary ops, Concat and layout steps equal the QDQ graph's float
            // arithmetic by construction; an integer step with a weight of another kind has
            // an accumulator exact mode does not compute yet.
            if n.facts().weight.is_some() {
                plan.not_reproduced
                    .push((n.name.clone(), format!("integer {} step", n.op_type)));
            }
            continue;
        }
        match layer(net, exported, &uses, n, mode) {
            Ok((step, skip, l)) => {
                plan.by_step.insert(step, plan.layers.len());
                plan.skip.extend(skip);
                plan.layers.push(l);
            }
            Err(e) => plan.not_reproduced.push((n.name.clone(), e)),
        }
    }
    // Quantized biases read their exported int32 values (float islands use them too).
    for (float, codes, scale) in biases {
        let Some(slot) = net.slot_of(float) else {
            continue;
        };
        let q = init(exported, codes)
            .ok_or_else(|| err(format!("bias codes `{codes}` missing from the export")))?;
        let s = init(exported, scale)
            .ok_or_else(|| err(format!("bias scale `{scale}` missing from the export")))?
            .to_f32_vec();
        let v: Vec<f32> = q
            .to_i64_vec()
            .iter()
            .enumerate()
            .map(|(j, &c)| dequantize_value(c, s[if s.len() == 1 { 0 } else { j }], 0))
            .collect();
        plan.consts.push((slot, GTensor::from_f32(&q.shape, v)));
    }
    Ok(plan)
}
