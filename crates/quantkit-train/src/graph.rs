//! Training on the graph IR: any imported ONNX float graph runs forward through the
//! operator registry's `eval` (the same function the float executor calls, so there is one
//! f32 forward per operator) and backward through each operator's `OpDef::backward`,
//! written beside its `eval` in `quantkit-graph`. Fake-quant nodes ([`FakeQuant`]) are the
//! one kind of step this crate adds: a QuantizeLinear → DequantizeLinear pair of a QDQ
//! graph, differentiated with the straight-through estimator (see `docs/qat.md`).
//!
//! Trainable: the float initializers a node reads as a weight or bias (Conv, ConvTranspose,
//! Gemm, MatMul inputs 1–2), BatchNormalization's scale and bias, PRelu's slope, and the
//! learnable fake-quant scales; every other constant (input normalisation, shapes, running
//! statistics) is frozen.

use std::collections::HashMap;

use quantkit_graph::ops::grad::GradIn;
use quantkit_graph::ops::{OpCtx, OpKind};
use quantkit_graph::{DType, Graph, Node, Tensor as GTensor};

use crate::error::{Result, TrainError};
use crate::params::ParamStore;
use crate::tensor::Tensor;

/// A fake-quant node: forward `x̂ = (clamp(round_half_even(x/s) + z, qmin, qmax) − z)·s`
/// exactly as ONNX QuantizeLinear then DequantizeLinear compute it (quantkit-core's
/// equations (1) and (2)); backward the straight-through estimator with the clipping mask
/// for `x`, and the LSQ gradient for `s` when the scale is learned.
#[derive(Clone, Debug)]
pub struct FakeQuant {
    /// Name of the value it quantizes (for messages and export).
    pub tensor: String,
    /// Per-channel axis (weights), `None` per tensor.
    pub axis: Option<usize>,
    /// Zero points (one, or one per channel).
    pub zero_points: Vec<i32>,
    /// Lowest code.
    pub qmin: i32,
    /// Highest code.
    pub qmax: i32,
    /// Whether the scale receives a gradient (LSQ).
    pub learn_scale: bool,
    /// True for a weight (its scale's LSQ gradient scale counts the elements of one
    /// channel), false for an activation (the elements of one sample).
    pub is_weight: bool,
}

impl FakeQuant {
    fn channel_of(&self, shape: &[usize]) -> impl Fn(usize) -> usize {
        let (inner, c) = match self.axis {
            Some(a) if a < shape.len() => (shape[a + 1..].iter().product::<usize>(), shape[a]),
            _ => (1, 1),
        };
        move |i| (i / inner.max(1)) % c.max(1)
    }

    /// The runs of `x` sharing one scale and zero point: `(start, len, channel)`, in order.
    fn blocks(&self, shape: &[usize], n: usize, per_channel: bool) -> Vec<(usize, usize, usize)> {
        match self.axis {
            Some(a) if per_channel && a < shape.len() => {
                let inner = shape[a + 1..].iter().product::<usize>().max(1);
                let c = shape[a].max(1);
                (0..n.div_ceil(inner))
                    .map(|b| (b * inner, inner.min(n - b * inner), b % c))
                    .collect()
            }
            _ => vec![(0, n, 0)],
        }
    }

    /// The forward pass on `x` with scales `s` (one, or one per channel): equations (1) then
    /// (2) per element, `(clamp(round_half_even(x/s) + z, qmin, qmax) − z)·s`. Written per
    /// run of one scale with f32 operations only (a true division, quantkit-core's
    /// `round_half_even_saturating`, `max`/`min`; NaN → the zero point) so the loop
    /// vectorises; bit for bit [`FakeQuant::forward_reference`] (test
    /// `fake_quant_block_form_equals_the_reference`): below 2²² every step is exact and above
    /// it both saturate.
    pub fn forward(&self, x: &[f32], shape: &[usize], s: &[f32]) -> Vec<f32> {
        use rayon::prelude::*;
        let per_channel = s.len() > 1 || self.zero_points.len() > 1;
        let mut out = vec![0f32; x.len()];
        let (lo, hi) = (self.qmin as f32, self.qmax as f32);
        for (start, len, c) in self.blocks(shape, x.len(), per_channel) {
            let sc = s[if s.len() == 1 { 0 } else { c }];
            let z = self.zero_points[if self.zero_points.len() == 1 { 0 } else { c }] as f32;
            // Element-wise, so splitting a long run over threads changes no bit.
            out[start..start + len]
                .par_chunks_mut(FQ_CHUNK)
                .zip(x[start..start + len].par_chunks(FQ_CHUNK))
                .for_each(|(o, xv)| {
                    for (o, &v) in o.iter_mut().zip(xv) {
                        let d = v / sc;
                        let r = if d.is_nan() {
                            0.0
                        } else {
                            quantkit_core::linear::round_half_even_saturating(d)
                        };
                        *o = ((r + z).max(lo).min(hi) - z) * sc;
                    }
                });
        }
        out
    }

    /// The STE gradient of `x` alone ([`FakeQuant::backward`]'s first result, bit for bit),
    /// for a scale that is not learned: no LSQ sum, runs split over threads.
    pub fn backward_x(&self, x: &[f32], shape: &[usize], s: &[f32], g: &[f32]) -> Vec<f32> {
        use rayon::prelude::*;
        let per_channel = s.len() > 1 || self.zero_points.len() > 1;
        let mut dx = vec![0f32; x.len()];
        let (lo, hi) = (self.qmin as f32, self.qmax as f32);
        for (start, len, c) in self.blocks(shape, x.len(), per_channel) {
            let sc = s[if s.len() == 1 { 0 } else { c }];
            let z = self.zero_points[if self.zero_points.len() == 1 { 0 } else { c }] as f32;
            let r = start..start + len;
            dx[r.clone()]
                .par_chunks_mut(FQ_CHUNK)
                .zip(x[r.clone()].par_chunks(FQ_CHUNK))
                .zip(g[r].par_chunks(FQ_CHUNK))
                .for_each(|((o, xv), gv)| {
                    for ((o, &v), &gi) in o.iter_mut().zip(xv).zip(gv) {
                        let code = quantkit_core::linear::round_half_even_saturating(v / sc) + z;
                        // NaN codes pass, as in `backward`.
                        if !(code < lo || code > hi) {
                            *o = gi;
                        }
                    }
                });
        }
        dx
    }

    /// Gradients of `x` (STE: `g` where the code was not clipped, 0 where it was) and of the
    /// scales (LSQ, Esser et al. 2020, eq. 3: `round(x/s) − x/s` inside the range,
    /// `qmin − z` / `qmax − z` where clipped, times the gradient scale
    /// `1/√(numel · qmax)`). Per run of one scale, the scale's sum in f64 in element order;
    /// bit for bit [`FakeQuant::backward_reference`].
    pub fn backward(
        &self,
        x: &[f32],
        shape: &[usize],
        s: &[f32],
        g: &[f32],
    ) -> (Vec<f32>, Vec<f32>) {
        let per_channel = s.len() > 1 || self.zero_points.len() > 1;
        let mut dx = vec![0f32; x.len()];
        let mut ds = vec![0f64; s.len()];
        let (lo, hi) = (self.qmin as f32, self.qmax as f32);
        for (start, len, c) in self.blocks(shape, x.len(), per_channel) {
            let ci = if s.len() == 1 { 0 } else { c };
            let sc = s[ci];
            let zi = self.zero_points[if self.zero_points.len() == 1 { 0 } else { c }];
            let z = zi as f32;
            let (below, above) = ((self.qmin - zi) as f64, (self.qmax - zi) as f64);
            let mut acc = ds[ci];
            for ((o, &v), &gi) in dx[start..start + len]
                .iter_mut()
                .zip(&x[start..start + len])
                .zip(&g[start..start + len])
            {
                let d = v / sc;
                let r = quantkit_core::linear::round_half_even_saturating(d);
                // Exact below 2²²; above, far outside any code range either way (NaN: in).
                let code = r + z;
                let dsc = if code < lo {
                    below
                } else if code > hi {
                    above
                } else {
                    *o = gi;
                    r as f64 - d as f64
                };
                acc += gi as f64 * dsc;
            }
            ds[ci] = acc;
        }
        let numel = if self.is_weight {
            x.len() / s.len().max(1)
        } else {
            x.len() / shape.first().copied().unwrap_or(1).max(1)
        };
        let gs = 1.0 / ((numel.max(1) as f64) * self.qmax.max(1) as f64).sqrt();
        (dx, ds.into_iter().map(|v| (v * gs) as f32).collect())
    }

    /// LSQ+ gradient of the zero points (in code units): with `x̂ = (clamp(round(x/s) + z,
    /// qmin, qmax) − z)·s`, `∂x̂/∂z = 0` where the code lies in the range (the `z` cancels)
    /// and `−s` where it clipped (`x̂ = (qmin − z)·s` or `(qmax − z)·s`): the sum of `−s·g`
    /// over the clipped elements of each zero point's run, the rounding of `z` passed
    /// straight through, times LSQ's gradient scale `1/√(numel · qmax)`. Sums in f64 in
    /// element order.
    pub fn backward_zero_point(
        &self,
        x: &[f32],
        shape: &[usize],
        s: &[f32],
        g: &[f32],
    ) -> Vec<f32> {
        let per_channel = s.len() > 1 || self.zero_points.len() > 1;
        let nz = self.zero_points.len();
        let mut dz = vec![0f64; nz];
        let (lo, hi) = (self.qmin as f32, self.qmax as f32);
        for (start, len, c) in self.blocks(shape, x.len(), per_channel) {
            let sc = s[if s.len() == 1 { 0 } else { c }];
            let zi = if nz == 1 { 0 } else { c };
            let z = self.zero_points[zi] as f32;
            let mut acc = 0f64;
            for (&v, &gi) in x[start..start + len].iter().zip(&g[start..start + len]) {
                let code = quantkit_core::linear::round_half_even_saturating(v / sc) + z;
                if code < lo || code > hi {
                    acc -= f64::from(sc) * f64::from(gi);
                }
            }
            dz[zi] += acc;
        }
        let numel = if self.is_weight {
            x.len() / nz.max(1)
        } else {
            x.len() / shape.first().copied().unwrap_or(1).max(1)
        };
        let gs = 1.0 / ((numel.max(1) as f64) * self.qmax.max(1) as f64).sqrt();
        dz.into_iter().map(|v| (v * gs) as f32).collect()
    }

    /// [`FakeQuant::forward`] element by element with quantkit-core's `quantize_value` and
    /// `dequantize_value`: the reference the block form is tested against, bit for bit.
    pub fn forward_reference(&self, x: &[f32], shape: &[usize], s: &[f32]) -> Vec<f32> {
        let ch = self.channel_of(shape);
        let pick = |v: &[f32], i: usize| if v.len() == 1 { v[0] } else { v[ch(i)] };
        let pz = |i: usize| {
            if self.zero_points.len() == 1 {
                self.zero_points[0]
            } else {
                self.zero_points[ch(i)]
            }
        };
        x.iter()
            .enumerate()
            .map(|(i, &v)| {
                let (sc, z) = (pick(s, i), pz(i));
                let q = quantkit_core::linear::quantize_value(
                    v,
                    sc,
                    z,
                    self.qmin,
                    self.qmax,
                    quantkit_core::RoundingMode::HalfToEven,
                );
                quantkit_core::linear::dequantize_value(q, sc, z)
            })
            .collect()
    }

    /// [`FakeQuant::backward`] element by element: the reference the block form is tested
    /// against, bit for bit.
    pub fn backward_reference(
        &self,
        x: &[f32],
        shape: &[usize],
        s: &[f32],
        g: &[f32],
    ) -> (Vec<f32>, Vec<f32>) {
        let ch = self.channel_of(shape);
        let mut dx = vec![0f32; x.len()];
        let mut ds = vec![0f64; s.len()];
        for (i, (&v, &gi)) in x.iter().zip(g).enumerate() {
            let c = if s.len() == 1 { 0 } else { ch(i) };
            let z = if self.zero_points.len() == 1 {
                self.zero_points[0]
            } else {
                self.zero_points[ch(i)]
            };
            let d = v / s[c];
            let r = quantkit_core::linear::round_half_even(d);
            let code = r as f64 + z as f64;
            let (pass, dsc) = if code < self.qmin as f64 {
                (false, (self.qmin - z) as f64)
            } else if code > self.qmax as f64 {
                (false, (self.qmax - z) as f64)
            } else {
                (true, r as f64 - d as f64)
            };
            if pass {
                dx[i] = gi;
            }
            ds[c] += gi as f64 * dsc;
        }
        let numel = if self.is_weight {
            x.len() / s.len().max(1)
        } else {
            x.len() / shape.first().copied().unwrap_or(1).max(1)
        };
        let gs = 1.0 / ((numel.max(1) as f64) * self.qmax.max(1) as f64).sqrt();
        (dx, ds.into_iter().map(|v| (v * gs) as f32).collect())
    }
}

/// Elements per rayon task of the fake-quant loops.
const FQ_CHUNK: usize = 1 << 14;

#[derive(Clone, Debug)]
enum StepKind {
    Op(Node),
    FakeQuant(FakeQuant),
}

#[derive(Clone, Debug)]
struct Step {
    kind: StepKind,
    /// Input slots (`None`: omitted optional input). A fake-quant step reads `[x, scale]`.
    inputs: Vec<Option<usize>>,
    outputs: Vec<usize>,
}

/// Where a slot's value comes from before the steps run.
#[derive(Clone, Debug)]
enum Source {
    Input,
    Const(GTensor),
    Param(usize),
    Computed,
}

/// A graph prepared for training: steps over value slots, frozen constants and the
/// trainable parameters (in a [`ParamStore`], so the zoo's optimizers update them).
#[derive(Clone, Debug)]
pub struct GraphNet {
    opset: i64,
    names: Vec<String>,
    sources: Vec<Source>,
    needs_grad: Vec<bool>,
    steps: Vec<Step>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    /// Trainable tensors, by initializer name.
    pub params: ParamStore,
    fq_scale_params: Vec<(usize, usize)>,
    /// `relu_of[i] = Some(j)`: Conv step `i` is read only by Relu step `j`, so the training
    /// forward computes both at once (the ReLU applied while the output is in cache) and
    /// leaves the Conv's own output unstored.
    relu_of: Vec<Option<usize>>,
    /// `fused_into[j] = Some(i)`: Relu step `j` is computed by Conv step `i`.
    fused_into: Vec<Option<usize>>,
}

/// The values of one forward pass (every slot, kept for [`GraphNet::backward`]).
pub struct Values {
    vals: Vec<Option<GTensor>>,
}

impl Values {
    /// The value of slot `s`.
    pub fn slot(&self, s: usize) -> Option<&GTensor> {
        self.vals.get(s).and_then(Option::as_ref)
    }
}

/// Builder input: how to treat one initializer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Frozen.
    Const,
    /// Trained, with weight decay.
    Weight,
    /// Trained, without weight decay (biases, BatchNorm affine, PRelu, scales).
    Bias,
}

/// The role the training crate gives an initializer read by `node` at input `i`.
pub fn role_of(node: &Node, i: usize) -> Role {
    match node.kind() {
        Some(OpKind::Conv | OpKind::ConvTranspose | OpKind::Gemm | OpKind::MatMul) => match i {
            1 => Role::Weight,
            2 => Role::Bias,
            _ => Role::Const,
        },
        Some(OpKind::BatchNormalization) if i == 1 || i == 2 => Role::Bias,
        Some(OpKind::PRelu) if i == 1 => Role::Bias,
        _ => Role::Const,
    }
}

/// An extra step the caller splices in: a fake-quant reading `x` and a scale initializer,
/// producing `out`.
#[derive(Clone, Debug)]
pub struct FqSpec {
    /// The quantizer.
    pub fq: FakeQuant,
    /// Value read.
    pub x: String,
    /// Scale initializer name (becomes a parameter when `fq.learn_scale`).
    pub scale: String,
    /// Value produced.
    pub out: String,
    /// LSQ+ (Bhalgat et al. 2020): the name of an f32 initializer holding the zero points
    /// as a learned real number in code units (the step's third input, a parameter). The
    /// forward uses the integer `fq.zero_points`, which the caller sets to the rounded
    /// parameter after each optimizer step; the gradient is
    /// [`FakeQuant::backward_zero_point`].
    pub zero_point: Option<String>,
}

impl GraphNet {
    /// Prepares a float graph for training. `fake_quants[i]` (if any) is inserted right
    /// before node `i` (`i = nodes.len()`: after the last node); `roles` overrides
    /// [`role_of`] per initializer name.
    pub fn build(
        graph: &Graph,
        fake_quants: &HashMap<usize, Vec<FqSpec>>,
        roles: &HashMap<String, Role>,
    ) -> Result<GraphNet> {
        let mut net = GraphNet {
            opset: graph.opset(),
            names: Vec::new(),
            sources: Vec::new(),
            needs_grad: Vec::new(),
            steps: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            params: ParamStore::new(),
            fq_scale_params: Vec::new(),
            relu_of: Vec::new(),
            fused_into: Vec::new(),
        };
        let mut slot: HashMap<String, usize> = HashMap::new();
        let mut role: HashMap<String, Role> = HashMap::new();
        for n in &graph.nodes {
            if n.has_subgraphs() {
                return Err(TrainError::Graph(format!(
                    "node `{}` ({}): control flow is not trainable",
                    n.name, n.op_type
                )));
            }
            for (i, v) in n.inputs.iter().enumerate() {
                if graph.initializers.contains_key(v) {
                    let r = role_of(n, i);
                    let e = role.entry(v.clone()).or_insert(r);
                    if r == Role::Const {
                        *e = Role::Const;
                    }
                }
            }
        }
        for (k, r) in roles {
            role.insert(k.clone(), *r);
        }
        for fqs in fake_quants.values() {
            for f in fqs {
                role.insert(
                    f.scale.clone(),
                    if f.fq.learn_scale {
                        Role::Bias
                    } else {
                        Role::Const
                    },
                );
                if let Some(z) = &f.zero_point {
                    role.insert(z.clone(), Role::Bias);
                }
            }
        }
        let define = |net: &mut GraphNet, slot: &mut HashMap<String, usize>, name: &str| {
            let s = net.names.len();
            net.names.push(name.to_string());
            net.sources.push(Source::Computed);
            net.needs_grad.push(false);
            slot.insert(name.to_string(), s);
            s
        };
        for vi in &graph.inputs {
            let s = define(&mut net, &mut slot, &vi.name);
            net.sources[s] = Source::Input;
            net.inputs.push(s);
        }
        for ni in 0..=graph.nodes.len() {
            if let Some(fqs) = fake_quants.get(&ni) {
                for f in fqs {
                    let x = resolve(&mut net, &mut slot, graph, &role, &f.x)?;
                    let sc = resolve(&mut net, &mut slot, graph, &role, &f.scale)?;
                    if let Source::Param(id) = net.sources[sc] {
                        net.fq_scale_params.push((net.steps.len(), id));
                    }
                    let zp = f
                        .zero_point
                        .as_ref()
                        .map(|z| resolve(&mut net, &mut slot, graph, &role, z))
                        .transpose()?;
                    let out = define(&mut net, &mut slot, &f.out);
                    net.needs_grad[out] = net.needs_grad[x]
                        || net.needs_grad[sc]
                        || zp.is_some_and(|z| net.needs_grad[z]);
                    let mut inputs = vec![Some(x), Some(sc)];
                    if zp.is_some() {
                        inputs.push(zp);
                    }
                    net.steps.push(Step {
                        kind: StepKind::FakeQuant(f.fq.clone()),
                        inputs,
                        outputs: vec![out],
                    });
                }
            }
            let Some(n) = graph.nodes.get(ni) else {
                break;
            };
            if n.kind().is_none() {
                return Err(TrainError::Graph(format!(
                    "node `{}`: unknown operator {}",
                    n.name, n.op_type
                )));
            }
            let mut ins = Vec::with_capacity(n.inputs.len());
            for v in &n.inputs {
                ins.push(if v.is_empty() {
                    None
                } else {
                    Some(resolve(&mut net, &mut slot, graph, &role, v)?)
                });
            }
            let ng = ins.iter().flatten().any(|&s| net.needs_grad[s]) && differentiable(n);
            let outs: Vec<usize> = n
                .outputs
                .iter()
                .map(|o| define(&mut net, &mut slot, o))
                .collect();
            if let Some(&o) = outs.first() {
                net.needs_grad[o] = ng;
            }
            net.steps.push(Step {
                kind: StepKind::Op(n.clone()),
                inputs: ins,
                outputs: outs,
            });
        }
        for o in &graph.outputs {
            let s = *slot.get(&o.name).ok_or_else(|| {
                TrainError::Graph(format!("graph output `{}` is never produced", o.name))
            })?;
            net.outputs.push(s);
        }
        net.plan_fusions();
        Ok(net)
    }

    /// Finds the Conv → Relu pairs the training forward computes as one step: a 2-D f32
    /// Conv whose only reader is a Relu and whose output is not a graph output.
    fn plan_fusions(&mut self) {
        let n = self.steps.len();
        self.relu_of = vec![None; n];
        self.fused_into = vec![None; n];
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); self.names.len()];
        for (i, st) in self.steps.iter().enumerate() {
            for &v in st.inputs.iter().flatten() {
                readers[v].push(i);
            }
        }
        for (i, st) in self.steps.iter().enumerate() {
            let StepKind::Op(node) = &st.kind else {
                continue;
            };
            if !node.is(OpKind::Conv) || st.outputs.len() != 1 {
                continue;
            }
            let o = st.outputs[0];
            if self.outputs.contains(&o) {
                continue;
            }
            let [j] = readers[o][..] else { continue };
            if matches!(&self.steps[j].kind, StepKind::Op(r) if r.is(OpKind::Relu))
                && self.steps[j].inputs.first() == Some(&Some(o))
            {
                self.relu_of[i] = Some(j);
                self.fused_into[j] = Some(i);
            }
        }
    }

    /// The first node on the path from a trained parameter to the outputs whose operator
    /// has no gradient yet, as `(node name, op type)`: training through it would fail at
    /// the first backward pass.
    pub fn missing_backward(&self) -> Option<(&str, &str)> {
        self.steps.iter().find_map(|st| match &st.kind {
            StepKind::Op(n)
                if st.outputs.first().is_some_and(|&o| self.needs_grad[o])
                    && n.kind().is_none_or(|k| k.def().backward.is_none()) =>
            {
                Some((n.name.as_str(), n.op_type.as_str()))
            }
            _ => None,
        })
    }

    /// Names of the graph inputs.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs
            .iter()
            .map(|&s| self.names[s].as_str())
            .collect()
    }

    /// Name of slot `s`.
    pub fn name_of(&self, s: usize) -> &str {
        &self.names[s]
    }

    /// Slot of a value by name.
    pub fn slot_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The learned zero-point slot (LSQ+) of fake-quant step `i`, if it has one.
    pub fn fake_quant_zero_point(&self, i: usize) -> Option<usize> {
        match &self.steps.get(i)?.kind {
            StepKind::FakeQuant(_) => self.steps[i].inputs.get(2).copied().flatten(),
            StepKind::Op(_) => None,
        }
    }

    /// The fake-quant steps: `(step index, quantizer, input slot, scale slot)`.
    pub fn fake_quants(&self) -> impl Iterator<Item = (usize, &FakeQuant, usize, usize)> {
        self.steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match &s.kind {
                StepKind::FakeQuant(f) => Some((i, f, s.inputs[0]?, s.inputs[1]?)),
                StepKind::Op(_) => None,
            })
    }

    /// Mutable access to the fake-quant of step `i` (observers move zero points).
    pub fn fake_quant_mut(&mut self, i: usize) -> Option<&mut FakeQuant> {
        match &mut self.steps.get_mut(i)?.kind {
            StepKind::FakeQuant(f) => Some(f),
            StepKind::Op(_) => None,
        }
    }

    /// The current value of a constant or parameter slot.
    pub fn stored(&self, s: usize) -> Option<GTensor> {
        match &self.sources[s] {
            Source::Const(t) => Some(t.clone()),
            Source::Param(id) => {
                let p = self.params.get(*id);
                Some(GTensor::from_f32(p.value.shape(), p.value.data().to_vec()))
            }
            _ => None,
        }
    }

    /// Overwrites a constant or parameter slot (an observer's new scale).
    pub fn set_stored(&mut self, s: usize, v: &[f32]) {
        match &mut self.sources[s] {
            Source::Const(t) => *t = GTensor::from_f32(&t.shape.clone(), v.to_vec()),
            Source::Param(id) => self.params.get_mut(*id).value.data_mut().copy_from_slice(v),
            _ => {}
        }
    }

    /// Runs the steps on `inputs` (in graph-input order) and keeps every value.
    pub fn forward(&self, inputs: Vec<GTensor>) -> Result<Values> {
        if inputs.len() != self.inputs.len() {
            return Err(TrainError::Graph(format!(
                "{} inputs given, the graph has {}",
                inputs.len(),
                self.inputs.len()
            )));
        }
        let t0 = std::time::Instant::now();
        let mut vals: Vec<Option<GTensor>> = self
            .sources
            .iter()
            .map(|s| match s {
                Source::Const(t) => Some(t.clone()),
                Source::Param(id) => {
                    let p = self.params.get(*id);
                    Some(GTensor::from_f32(p.value.shape(), p.value.data().to_vec()))
                }
                _ => None,
            })
            .collect();
        for (&s, t) in self.inputs.iter().zip(inputs) {
            vals[s] = Some(t);
        }
        if crate::profile::on() {
            crate::profile::record("(values)", 0, t0);
        }
        for (i, step) in self.steps.iter().enumerate() {
            if self.fused_into[i].is_some() || step.outputs.is_empty() {
                continue;
            }
            let t0 = std::time::Instant::now();
            let relu = self.relu_of[i];
            let outs = {
                let ins: Vec<Option<&GTensor>> = step
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| vals[s].as_ref()))
                    .collect();
                match (&step.kind, relu) {
                    (StepKind::Op(node), Some(_)) => quantkit_graph::ops::conv::eval_fused(
                        &OpCtx {
                            node,
                            opset: self.opset,
                        },
                        &ins,
                        true,
                    )
                    .map_err(|e| {
                        TrainError::Graph(format!("node `{}` ({}): {e}", node.name, node.op_type))
                    })?,
                    _ => self.run_step(step, &ins)?,
                }
            };
            if crate::profile::on() {
                crate::profile::record(step_name(step), 0, t0);
            }
            let targets = match relu {
                Some(j) => &self.steps[j].outputs,
                None => &step.outputs,
            };
            for (&o, t) in targets.iter().zip(outs) {
                vals[o] = Some(t);
            }
        }
        Ok(Values { vals })
    }

    fn run_step(&self, step: &Step, ins: &[Option<&GTensor>]) -> Result<Vec<GTensor>> {
        match &step.kind {
            StepKind::Op(node) => {
                let def = node.kind().expect("checked at build").def();
                (def.eval)(
                    &OpCtx {
                        node,
                        opset: self.opset,
                    },
                    ins,
                )
                .map_err(|e| {
                    TrainError::Graph(format!("node `{}` ({}): {e}", node.name, node.op_type))
                })
            }
            StepKind::FakeQuant(f) => {
                let (x, s) = fq_inputs(f, ins)?;
                let y = f.forward(&f32_view(x), &x.shape, &s.to_f32_vec());
                Ok(vec![GTensor::from_f32(&x.shape, y)])
            }
        }
    }

    /// The step running node `name` (an operator step, not a fake-quant).
    pub(crate) fn op_step(&self, name: &str) -> Option<usize> {
        self.steps
            .iter()
            .position(|s| matches!(&s.kind, StepKind::Op(n) if n.name == name))
    }

    /// The node of operator step `i`, or `None` for a fake-quant step.
    pub(crate) fn step_node(&self, i: usize) -> Option<&Node> {
        match &self.steps.get(i)?.kind {
            StepKind::Op(n) => Some(n),
            StepKind::FakeQuant(_) => None,
        }
    }

    /// Input and output slots of step `i`.
    pub(crate) fn step_slots(&self, i: usize) -> (&[Option<usize>], &[usize]) {
        (&self.steps[i].inputs, &self.steps[i].outputs)
    }

    /// The steps reading slot `s` (once per reading input), and whether it is a graph output.
    pub(crate) fn readers_of(&self, s: usize) -> (Vec<usize>, bool) {
        let mut r = Vec::new();
        for (i, st) in self.steps.iter().enumerate() {
            for v in st.inputs.iter().flatten() {
                if *v == s {
                    r.push(i);
                }
            }
        }
        (r, self.outputs.contains(&s))
    }

    /// The step producing slot `s`, if a step does.
    pub(crate) fn producer_of(&self, s: usize) -> Option<usize> {
        self.steps.iter().position(|st| st.outputs.contains(&s))
    }

    /// The forward pass in exact mode ([`crate::exact`]): the engine's integer layers
    /// computed as the engine computes them, quantized biases at their int32 values, every
    /// other step as in [`GraphNet::forward`].
    pub(crate) fn forward_exact(
        &self,
        inputs: Vec<GTensor>,
        plan: &crate::exact::ExactPlan,
    ) -> Result<Values> {
        if inputs.len() != self.inputs.len() {
            return Err(TrainError::Graph(format!(
                "{} inputs given, the graph has {}",
                inputs.len(),
                self.inputs.len()
            )));
        }
        let mut vals: Vec<Option<GTensor>> = self
            .sources
            .iter()
            .map(|s| match s {
                Source::Const(t) => Some(t.clone()),
                Source::Param(id) => {
                    let p = self.params.get(*id);
                    Some(GTensor::from_f32(p.value.shape(), p.value.data().to_vec()))
                }
                _ => None,
            })
            .collect();
        for (s, t) in &plan.consts {
            vals[*s] = Some(t.clone());
        }
        for (&s, t) in self.inputs.iter().zip(inputs) {
            vals[s] = Some(t);
        }
        for (i, step) in self.steps.iter().enumerate() {
            if plan.skip.contains(&i) || step.outputs.is_empty() {
                continue;
            }
            if let Some(layer) = plan.layer_at(i) {
                let x = step.inputs[0]
                    .and_then(|s| vals[s].as_ref())
                    .ok_or_else(|| {
                        TrainError::Graph(format!("exact mode: `{}` has no input", layer.name))
                    })?;
                let y = layer.run(x, self.opset)?;
                vals[layer.target] = Some(y);
                continue;
            }
            let outs = {
                let ins: Vec<Option<&GTensor>> = step
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| vals[s].as_ref()))
                    .collect();
                self.run_step(step, &ins)?
            };
            for (&o, t) in step.outputs.iter().zip(outs) {
                vals[o] = Some(t);
            }
        }
        Ok(Values { vals })
    }

    /// The graph outputs of a forward pass.
    pub fn outputs<'a>(&self, v: &'a Values) -> Vec<&'a GTensor> {
        self.outputs.iter().filter_map(|&s| v.slot(s)).collect()
    }

    /// Back-propagates `seeds` (`∂L/∂output` for each graph output, in order; `None` for
    /// an output the loss ignores) and adds the gradients to `self.params`' `grad`s.
    /// A node on the path to a parameter whose operator has no gradient is an error naming
    /// the node and the operator.
    pub fn backward(&mut self, v: &Values, seeds: Vec<Option<Vec<f32>>>) -> Result<()> {
        let mut grads: Vec<Option<Vec<f32>>> = vec![None; self.names.len()];
        for (&s, g) in self.outputs.iter().zip(seeds) {
            if let Some(g) = g {
                accumulate(&mut grads[s], g);
            }
        }
        for (i, step) in self.steps.iter().enumerate().rev() {
            let Some(&o) = step.outputs.first() else {
                continue;
            };
            if !self.needs_grad[o] {
                continue;
            }
            let Some(g) = grads[o].take() else { continue };
            let t0 = std::time::Instant::now();
            if let (Some(c), Some(y)) = (self.fused_into[i], v.vals[o].as_ref()) {
                // The Relu of a fused pair: `g·[x > 0]`, read from its output (`y > 0`
                // exactly where `x > 0`), onto the Conv's output.
                let co = self.steps[c].outputs[0];
                let d = relu_grad(&f32_view(y), g);
                accumulate(&mut grads[co], d);
                if crate::profile::on() {
                    crate::profile::record(step_name(step), 1, t0);
                }
                continue;
            }
            // A fused Conv's own output was never stored; its gradient does not read it.
            let out_slot = self.relu_of[i].map_or(o, |j| self.steps[j].outputs[0]);
            let ins: Vec<Option<&GTensor>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| v.vals[s].as_ref()))
                .collect();
            let needs: Vec<bool> = step
                .inputs
                .iter()
                .map(|s| s.is_some_and(|s| self.needs_grad[s]))
                .collect();
            let gin: Vec<Option<Vec<f32>>> = match &step.kind {
                StepKind::Op(node) => {
                    let def = node.kind().expect("checked at build").def();
                    let bw = def.backward.ok_or_else(|| TrainError::NoBackward {
                        node: node.name.clone(),
                        op_type: node.op_type.clone(),
                    })?;
                    let out = v.vals[out_slot].as_ref().ok_or_else(|| {
                        TrainError::Graph(format!(
                            "node `{}` ({}): output not computed in the forward pass",
                            node.name, node.op_type
                        ))
                    })?;
                    bw(
                        &OpCtx {
                            node,
                            opset: self.opset,
                        },
                        &GradIn {
                            inputs: &ins,
                            output: out,
                            grad: &g,
                            needs: &needs,
                        },
                    )
                    .map_err(|e| {
                        TrainError::Graph(format!(
                            "gradient of node `{}` ({}): {e}",
                            node.name, node.op_type
                        ))
                    })?
                    .into_iter()
                    .map(|t| t.map(into_f32))
                    .collect()
                }
                StepKind::FakeQuant(f) => {
                    let (x, s) = fq_inputs(f, &ins)?;
                    let sv = s.to_f32_vec();
                    let mut gin = if f.learn_scale {
                        let (dx, ds) = f.backward(&f32_view(x), &x.shape, &sv, &g);
                        vec![Some(dx), Some(ds)]
                    } else {
                        let dx = f.backward_x(&f32_view(x), &x.shape, &sv, &g);
                        vec![Some(dx), None]
                    };
                    if needs.get(2) == Some(&true) {
                        gin.push(Some(f.backward_zero_point(&f32_view(x), &x.shape, &sv, &g)));
                    }
                    gin
                }
            };
            for ((s, gi), need) in step.inputs.iter().zip(gin).zip(needs) {
                if let (Some(s), Some(gi), true) = (s, gi, need) {
                    accumulate(&mut grads[*s], gi);
                }
            }
            if crate::profile::on() {
                crate::profile::record(step_name(step), 1, t0);
            }
        }
        let t0 = std::time::Instant::now();
        for (s, src) in self.sources.iter().enumerate() {
            if let (Source::Param(id), Some(g)) = (src, grads[s].take()) {
                let p = self.params.get_mut(*id);
                if g.len() == p.grad.len() {
                    p.grad
                        .data_mut()
                        .iter_mut()
                        .zip(&g)
                        .for_each(|(a, b)| *a += b);
                }
            }
        }
        if crate::profile::on() {
            crate::profile::record("(values)", 1, t0);
        }
        Ok(())
    }

    /// Removes operator step `i` from the computation: every step (and graph output)
    /// reading its output 0 reads its input 0 instead, and the step computes nothing
    /// (QAT's batch-statistics BatchNormalization once it is folded into the Conv before
    /// it). Step indices are kept, so fake-quant steps and exact plans keep their numbers.
    pub(crate) fn bypass_step(&mut self, i: usize) -> Result<()> {
        let st = self
            .steps
            .get(i)
            .ok_or_else(|| TrainError::Graph(format!("no step {i}")))?;
        let (Some(Some(x)), Some(&y)) = (st.inputs.first().copied(), st.outputs.first()) else {
            return Err(TrainError::Graph(format!(
                "step {i} has no input or output to bypass"
            )));
        };
        for st in self.steps.iter_mut() {
            for v in st.inputs.iter_mut().flatten() {
                if *v == y {
                    *v = x;
                }
            }
        }
        for o in self.outputs.iter_mut() {
            if *o == y {
                *o = x;
            }
        }
        let st = &mut self.steps[i];
        st.inputs.clear();
        st.outputs.clear();
        self.plan_fusions();
        Ok(())
    }

    /// The graph with the current parameter values written back into `graph`'s
    /// initializers of the same names.
    pub fn write_params(&self, graph: &mut Graph) {
        for p in self.params.iter() {
            if let Some(t) = graph.initializers.get_mut(&p.name) {
                *t = GTensor::from_f32(p.value.shape(), p.value.data().to_vec());
            }
        }
    }
}

fn resolve(
    net: &mut GraphNet,
    slot: &mut HashMap<String, usize>,
    graph: &Graph,
    role: &HashMap<String, Role>,
    name: &str,
) -> Result<usize> {
    if let Some(&s) = slot.get(name) {
        return Ok(s);
    }
    let t = graph.initializers.get(name).ok_or_else(|| {
        TrainError::Graph(format!(
            "value `{name}` is read before any node produces it"
        ))
    })?;
    let s = net.names.len();
    let source = match role.get(name).copied().unwrap_or(Role::Const) {
        r @ (Role::Weight | Role::Bias) if t.dtype == DType::F32 => {
            let id = net.params.add(
                name,
                Tensor::new(&t.shape, t.to_f32_vec())?,
                true,
                r == Role::Weight,
            );
            Source::Param(id)
        }
        _ => Source::Const(t.clone()),
    };
    net.needs_grad.push(matches!(source, Source::Param(_)));
    net.sources.push(source);
    net.names.push(name.to_string());
    slot.insert(name.to_string(), s);
    Ok(s)
}

fn fq_inputs<'a>(f: &FakeQuant, ins: &[Option<&'a GTensor>]) -> Result<(&'a GTensor, &'a GTensor)> {
    match (
        ins.first().copied().flatten(),
        ins.get(1).copied().flatten(),
    ) {
        (Some(x), Some(s)) => Ok((x, s)),
        _ => Err(TrainError::Graph(format!(
            "fake-quant of `{}`: missing input",
            f.tensor
        ))),
    }
}

/// The profile key of a step: the operator's registry name, or `FakeQuant`.
fn step_name(step: &Step) -> &'static str {
    match &step.kind {
        StepKind::Op(n) => n.kind().map_or("?", |k| k.def().name),
        StepKind::FakeQuant(_) => "FakeQuant",
    }
}

/// The smallest and largest value of `t` (NaN ignored; `(∞, −∞)` when there is none),
/// in parallel blocks (min and max are exact, so the split changes nothing).
pub fn min_max(t: &GTensor) -> (f32, f32) {
    use rayon::prelude::*;
    f32_view(t)
        .par_chunks(FQ_CHUNK)
        .map(|c| {
            c.iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
                    (l.min(x), h.max(x))
                })
        })
        .reduce(
            || (f32::INFINITY, f32::NEG_INFINITY),
            |a, b| (a.0.min(b.0), a.1.max(b.1)),
        )
}

/// `g·[y > 0]`, in parallel blocks.
fn relu_grad(y: &[f32], mut g: Vec<f32>) -> Vec<f32> {
    use rayon::prelude::*;
    g.par_iter_mut()
        .with_min_len(1 << 14)
        .zip(y.par_iter())
        // A select, not a branch: half the values are 0 in no predictable pattern.
        .for_each(|(g, &y)| *g = if y > 0.0 { *g } else { 0.0 });
    g
}

/// A tensor's values as f32, borrowed when it is f32.
fn f32_view(t: &GTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_f32() {
        Some(v) => std::borrow::Cow::Borrowed(v),
        None => std::borrow::Cow::Owned(t.to_f32_vec()),
    }
}

/// A tensor's values as f32, taking the buffer when it is f32 (a gradient can be
/// megabytes).
fn into_f32(t: GTensor) -> Vec<f32> {
    match t.data {
        quantkit_graph::Data::F32(v) if t.dtype == DType::F32 => v,
        _ => t.to_f32_vec(),
    }
}

fn accumulate(slot: &mut Option<Vec<f32>>, g: Vec<f32>) {
    match slot {
        Some(a) if a.len() == g.len() => a.iter_mut().zip(&g).for_each(|(a, b)| *a += b),
        Some(_) => {}
        None => *slot = Some(g),
    }
}

/// One optimisation step of `net` on a batch: forward, loss on output 0, backward,
/// optimizer update. Returns the loss and output 0 (for accuracy). A non-finite loss is
/// returned before any parameter changes.
pub fn train_step(
    net: &mut GraphNet,
    opt: &mut dyn crate::optim::Optimizer,
    inputs: Vec<GTensor>,
    loss: crate::losses::LossKind,
    labels: Option<&[usize]>,
    target: Option<&[f32]>,
    lr: f32,
) -> Result<(f32, GTensor)> {
    let v = net.forward(inputs)?;
    let out = net
        .outputs(&v)
        .first()
        .copied()
        .cloned()
        .ok_or_else(|| TrainError::Graph("the graph has no output".into()))?;
    let k = out.shape.last().copied().unwrap_or(1).max(1);
    let y = out.to_f32_vec();
    let (l, g) = crate::losses::compute(loss, &y, k, labels, target)
        .ok_or_else(|| TrainError::Graph(format!("loss {loss:?} needs labels or a target")))?;
    if !l.is_finite() {
        return Ok((l, out));
    }
    net.params.zero_grad();
    let mut seeds = vec![None; net.outputs.len()];
    seeds[0] = Some(g);
    net.backward(&v, seeds)?;
    drop(v);
    opt.step(&mut net.params, lr);
    Ok((l, out))
}

/// Whether a node's output 0 can carry a gradient at all: not when it is an integer or
/// boolean value computed from the data (a `Shape`, a comparison, an `ArgMax`, a `Cast` to
/// an integer type...). Such outputs feed shape arithmetic (`Shape → Cast → Slice →
/// Concat → Reshape`, as exporters write a dynamic reshape), not the loss, so the path
/// from a parameter stops there instead of asking those operators for a gradient.
fn differentiable(n: &Node) -> bool {
    use quantkit_graph::ops::OpKind as K;
    match n.kind() {
        Some(
            K::Shape
            | K::Size
            | K::ArgMax
            | K::ArgMin
            | K::Equal
            | K::Less
            | K::LessOrEqual
            | K::Greater
            | K::GreaterOrEqual
            | K::Not
            | K::And
            | K::Or
            | K::Xor
            | K::IsNaN
            | K::IsInf
            | K::NonZero
            | K::ConstantOfShape
            | K::Range
            | K::EyeLike,
        ) => false,
        Some(K::Cast) => n
            .attr_int("to", 1)
            .ok()
            .and_then(|t| i32::try_from(t).ok())
            .and_then(quantkit_graph::DType::from_onnx)
            .is_some_and(|d| d.is_float()),
        _ => true,
    }
}
