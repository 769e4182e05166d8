//! Quantization-aware training at exactly the points post-training quantization
//! quantizes (`docs/qat.md`).
//!
//! [`Qat::from_ptq`] takes the prepared float graph and the QDQ graph `quantkit-ptq` made
//! from it (its placement, schemes and calibrated ranges) and builds a [`GraphNet`] where
//! every QuantizeLinear → DequantizeLinear pair of an activation, and every weight's
//! DequantizeLinear, is a [`FakeQuant`] step over the float value: forward is
//! quantkit-core's quantize then dequantize (ONNX rounding), backward the straight-through
//! estimator with the clipping mask, and, with LSQ, a learned scale. Biases train in float
//! and are rounded to int32 at `s_in·s_w` on export, as PTQ does. [`Qat::export`] writes the
//! trained numbers back into the same QDQ graph, so what the integer engine runs is the
//! PTQ structure with the QAT weights, scales and zero points.

use std::collections::HashMap;

use quantkit_core::QuantScheme;
use quantkit_graph::ir::Uses;
use quantkit_graph::{DType, Data, Graph, OpKind, Tensor as GTensor};

use crate::error::{Result, TrainError};
use crate::exact::ExactPlan;
use crate::graph::{FakeQuant, FqSpec, GraphNet, Role};
pub use crate::qat_init::QatInit;

/// What QAT quantizes and learns.
#[derive(Clone, Debug)]
pub struct QatOptions {
    /// Weight bits (2..=8, symmetric signed, as PTQ).
    pub weight_bits: u8,
    /// Activation bits (2..=8). Below 8, each activation starts from a range for the narrow
    /// code range (`[0, 2^b − 1]` for u8 codes, `[−2^(b−1), 2^(b−1) − 1]` for i8): PTQ's
    /// 8-bit range re-quantized, or one chosen at `b` bits ([`QatOptions::init`]); the
    /// export stores 8-bit codes with the range made explicit by a Clip in front of each
    /// QuantizeLinear (see [`Qat::export`]).
    pub activation_bits: u8,
    /// Learn the scales (LSQ) instead of keeping PTQ's.
    pub lsq: bool,
    /// Training steps during which activation ranges follow an EMA of the batch min/max
    /// (then frozen, or learned with LSQ).
    pub observer_steps: usize,
    /// EMA momentum (weight of the new batch).
    pub observer_momentum: f32,
    /// At 2–4 weight bits, export the weight codes as ONNX `int4` initializers (opset 21;
    /// `quantkit_ptq::store_weights_int4`) instead of int8 holding the narrow range.
    pub int4_weights: bool,
    /// Keep the first weighted layer (Conv/Gemm/MatMul, in graph order) and the last one
    /// before each graph output at 8 bits — their weights and the activation each reads —
    /// as LSQ (Esser et al. 2020) and most low-bit papers do for the first and last layer.
    /// Off by default: every layer at the chosen widths.
    pub first_last_8bit: bool,
    /// Names of the Conv nodes into which `quantkit_ptq::prepare` folded a
    /// BatchNormalization (`PrepareReport::batch_norms_folded`). For each, training runs
    /// a BatchNormalization on *batch* statistics after the Conv (whose weights are PTQ's
    /// folded ones) until [`Qat::freeze_bn`] folds its running statistics into the Conv's
    /// weights, bias and weight scales (`docs/qat.md`, "BatchNormalization folding").
    /// Empty (default): statistics frozen and folded from the start.
    pub bn_batch_stats: Vec<String>,
    /// LSQ+ (Bhalgat et al. 2020): learn the zero point of every affine activation
    /// (a real number in code units, rounded to the integer the forward and the export use
    /// after each step). Weights stay symmetric. Meant together with `lsq`.
    pub lsq_plus: bool,
    /// Where the narrow (below 8 bits) scales and zero points start: PTQ's min/max ranges
    /// re-quantized (default here; [`QatInit::MinMax`]) or ranges chosen at the trained
    /// width ([`QatInit::Mse`], the default of `quantkit qat`). 8-bit tensors keep PTQ's.
    pub init: QatInit,
}

impl Default for QatOptions {
    fn default() -> Self {
        QatOptions {
            weight_bits: 8,
            activation_bits: 8,
            lsq: false,
            observer_steps: 100,
            observer_momentum: 0.01,
            int4_weights: true,
            first_last_8bit: false,
            bn_batch_stats: Vec::new(),
            lsq_plus: false,
            init: QatInit::MinMax,
        }
    }
}

/// How one graph output enters a multi-output distillation loss
/// ([`Qat::train_step_outputs`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OutputLoss {
    /// Not trained on (weight 0).
    Ignore,
    /// `T² · KL(q_teacher ‖ q_student)`, `q = softmax(ln p / T)`, on an output that
    /// already holds a Softmax's probabilities `p` ([`Qat::softmax_probs_of`] names them).
    KlProbs {
        /// Temperature (1: the KL of the probabilities themselves).
        temperature: f32,
    },
    /// `T² · KL(softmax(teacher/T) ‖ softmax(student/T))` on raw logits.
    KlLogits {
        /// Temperature.
        temperature: f32,
    },
    /// Mean squared error to the teacher divided by `norm` (the variance of the
    /// teacher's output, so every term is dimensionless).
    Mse {
        /// Divisor of the mean squared error (> 0).
        norm: f32,
    },
}

/// One output's term of a distillation loss: `weight · loss`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutputTerm {
    /// The loss on this output.
    pub loss: OutputLoss,
    /// Its weight in the sum.
    pub weight: f32,
}

/// A cross-entropy term on labels added to a distillation loss
/// ([`Qat::train_step_outputs_labels`]).
#[derive(Clone, Copy, Debug)]
pub struct LabelTerm<'a> {
    /// The output the labels score (a classifier's logits or a Softmax's probabilities).
    pub output: usize,
    /// One label per sample of the batch.
    pub labels: &'a [usize],
    /// Weight of the cross-entropy in the sum.
    pub weight: f32,
}

#[derive(Clone, Debug)]
struct WeightMap {
    step: usize,
    float: String,
    codes: String,
    scale: String,
    zp: Option<String>,
}

#[derive(Clone, Debug)]
struct BiasMap {
    float: String,
    codes: String,
    scale: String,
    /// Scale initializer of the node's input activation and of its weight.
    in_scale: String,
    w_scale: String,
}

#[derive(Clone, Debug)]
struct ActMap {
    step: usize,
    scale: String,
    zp: String,
    ema: Option<(f32, f32)>,
    /// Below 8 bits: the activation (index in `acts`) whose scale and zero point this one
    /// copies — the output of a MaxPool or layout operator reading that activation's codes.
    /// Its fake-quant is then the identity on the values it receives, and the export needs
    /// no Clip for it (the codes are moved or max-pooled, already in the narrow range), so
    /// the engine keeps running the operator on the codes.
    tied: Option<usize>,
    /// The range was chosen for its width on the calibration data ([`QatInit::Mse`]): the
    /// EMA min/max observers leave it.
    calibrated: bool,
}

/// A BatchNormalization on batch statistics that QAT runs after a Conv until it is folded.
#[derive(Clone, Debug)]
struct BnMap {
    /// The BatchNormalization's step and the Conv's node name.
    step: usize,
    conv: String,
    /// The Conv's float weight and bias initializers.
    weight: String,
    bias: String,
    /// The BatchNormalization's initializers: scale, bias, running mean, running variance.
    gamma: String,
    beta: String,
    mean: String,
    var: String,
    /// The running statistics it returns after a training forward.
    mean_next: String,
    var_next: String,
    /// The Conv's output (the BatchNormalization's input).
    input: String,
    eps: f32,
}

/// Epsilon of QAT's batch-statistics BatchNormalization.
const BN_EPS: f32 = 1e-5;
/// Momentum of its running statistics (ONNX's default: `0.9·running + 0.1·batch`).
const BN_MOMENTUM: f32 = 0.9;

/// A model prepared for quantization-aware training.
#[derive(Clone, Debug)]
pub struct Qat {
    /// The training graph with fake-quant steps.
    pub net: GraphNet,
    /// PTQ's QDQ graph: the structure the export fills in.
    pub template: Graph,
    weights: Vec<WeightMap>,
    biases: Vec<BiasMap>,
    acts: Vec<ActMap>,
    opts: QatOptions,
    steps_done: usize,
    bns: Vec<BnMap>,
    /// The batch-statistics BatchNormalizations run (not yet folded).
    bn_active: bool,
    /// Their statistics were initialised from a first batch.
    bn_init: bool,
    /// Changes to the parameters other than training steps (a BatchNormalization fold):
    /// with `steps_done`, the generation an exact plan is valid for.
    edits: usize,
    /// The weight average ([`Qat::enable_ema`]), updated after every training step.
    ema: Option<crate::ema::Ema>,
    /// This is the averaged copy [`Qat::averaged`] made (its exact plans are its own).
    averaged: bool,
}

/// The code range of `bits`-bit activations stored in 8-bit codes of type `dt` (u8: the low
/// end of the range, i8: symmetric around 0, as ONNX's 4-bit types place them).
fn narrow_range(dt: DType, bits: u8) -> Result<(i32, i32)> {
    if !(2..=8).contains(&bits) {
        return Err(err(format!("activation bits {bits}: expected 2..=8")));
    }
    match dt {
        DType::U8 => Ok((0, (1 << bits) - 1)),
        DType::I8 => Ok((-(1 << (bits - 1)), (1 << (bits - 1)) - 1)),
        d => Err(err(format!(
            "{bits}-bit activations need u8 or i8 codes, the activation has {d}"
        ))),
    }
}

/// The batch-statistics BatchNormalization QAT runs after Conv `c` (a node of the training
/// graph `t` being built, named as in the float graph): its initializers are added to `t`
/// (scale 1, bias 0, running mean 0, variance 1 until [`Qat`] initialises them from the
/// first batch).
fn batch_stats_bn(
    c: &quantkit_graph::Node,
    float: &Graph,
    t: &mut Graph,
    qdq: &Graph,
) -> Result<(quantkit_graph::Node, BnMap)> {
    let fnode = float
        .nodes
        .iter()
        .find(|n| n.name == c.name)
        .ok_or_else(|| err(format!("Conv `{}` is not in the float graph", c.name)))?;
    let (Some(weight), Some(bias)) = (
        fnode.inputs.get(1).filter(|v| !v.is_empty()),
        fnode.inputs.get(2).filter(|v| !v.is_empty()),
    ) else {
        return Err(err(format!(
            "Conv `{}`: a batch-statistics BatchNormalization needs a weight and a bias \
             (PTQ's BatchNormalization fold gives one)",
            c.name
        )));
    };
    let ch = float
        .initializers
        .get(weight)
        .map(|w| w.shape.first().copied().unwrap_or(0))
        .filter(|&ch| ch > 0)
        .ok_or_else(|| {
            err(format!(
                "Conv `{}`: weight `{weight}` is not a constant",
                c.name
            ))
        })?;
    let input = c
        .outputs
        .first()
        .cloned()
        .ok_or_else(|| err(format!("Conv `{}` has no output", c.name)))?;
    if qdq.outputs.iter().any(|o| o.name == input) {
        return Err(err(format!(
            "Conv `{}`: its output is a graph output; no BatchNormalization can follow it",
            c.name
        )));
    }
    let base = format!("{}.bn_batch", c.name);
    let names = ["scale", "bias", "mean", "var"].map(|k| format!("{base}.{k}"));
    for (n, v) in names.iter().zip([1f32, 0.0, 0.0, 1.0]) {
        t.initializers
            .insert(n.clone(), GTensor::from_f32(&[ch], vec![v; ch]));
    }
    let [gamma, beta, mean, var] = names;
    let (out, mean_next, var_next) = (
        format!("{input}.bn_batch"),
        format!("{base}.mean.next"),
        format!("{base}.var.next"),
    );
    let node = quantkit_graph::Node::new(
        &base,
        "BatchNormalization",
        &[&input, &gamma, &beta, &mean, &var],
        &[&out, &mean_next, &var_next],
    )
    .with_attr("training_mode", quantkit_graph::AttrValue::Int(1))
    .with_attr("epsilon", quantkit_graph::AttrValue::Float(BN_EPS))
    .with_attr("momentum", quantkit_graph::AttrValue::Float(BN_MOMENTUM));
    Ok((
        node,
        BnMap {
            step: 0,
            conv: c.name.clone(),
            weight: weight.clone(),
            bias: bias.clone(),
            gamma,
            beta,
            mean,
            var,
            mean_next,
            var_next,
            input,
            eps: BN_EPS,
        },
    ))
}

/// Per-channel mean and (population) variance of an NC... tensor, in f64.
fn channel_stats(t: &GTensor) -> Vec<(f64, f64)> {
    let data = t.to_f32_vec();
    let v = &data;
    let (n, c) = (
        t.shape.first().copied().unwrap_or(1),
        t.shape.get(1).copied().unwrap_or(1),
    );
    let plane: usize = t.shape.iter().skip(2).product();
    let cnt = (n * plane).max(1) as f64;
    (0..c)
        .map(|ci| {
            let vals = || {
                (0..n).flat_map(move |ni| {
                    let o = (ni * c + ci) * plane;
                    v[o..o + plane].iter().map(|&x| f64::from(x))
                })
            };
            let m = vals().sum::<f64>() / cnt;
            let var = vals().map(|x| (x - m) * (x - m)).sum::<f64>() / cnt;
            (m, var)
        })
        .collect()
}

fn err(msg: String) -> TrainError {
    TrainError::Graph(msg)
}

/// The error of an exact plan used on parameters it was not built for.
fn stale_plan(plan: (usize, bool), model: (usize, bool)) -> TrainError {
    let what =
        |(g, avg): (usize, bool)| format!("generation {g}{}", if avg { " (averaged)" } else { "" });
    err(format!(
        "exact mode: the plan was built for {} of the parameters (training steps and folds, \
         or the weight average), the model is at {}; export and build it again",
        what(plan),
        what(model)
    ))
}

fn zps(t: &GTensor) -> Vec<i32> {
    t.to_i64_vec().into_iter().map(|v| v as i32).collect()
}

impl Qat {
    /// Builds the QAT model from the prepared float graph `float` and PTQ's QDQ graph `qdq`
    /// of it (`quantkit_ptq::quantize_static` on `float`: node names are kept).
    pub fn from_ptq(float: &Graph, qdq: &Graph, opts: &QatOptions) -> Result<Qat> {
        let wscheme = QuantScheme::new(opts.weight_bits, true)
            .map_err(|e| err(format!("weight bits: {e}")))?
            .with_symmetric(true);
        let uses = Uses::new(qdq);
        let w8 = QuantScheme::new(8, true)
            .map_err(|e| err(format!("weight bits: {e}")))?
            .with_symmetric(true);
        let (keep_w, keep_act) = if opts.first_last_8bit {
            first_last_layers(qdq, &uses)
        } else {
            Default::default()
        };
        let float_node = |name: &str| float.nodes.iter().find(|n| n.name == name);
        let mut t = qdq.clone();
        t.nodes.clear();
        let mut fqs: HashMap<usize, Vec<FqSpec>> = HashMap::new();
        let mut pending: Vec<FqSpec> = Vec::new();
        let mut rename: HashMap<String, String> = HashMap::new();
        let mut roles: HashMap<String, Role> = HashMap::new();
        let mut weights = Vec::new();
        let mut biases = Vec::new();
        let mut acts = Vec::new();
        let mut bns: Vec<BnMap> = Vec::new();
        for n in &qdq.nodes {
            if n.is(OpKind::DequantizeLinear) {
                let x = &n.inputs[0];
                let int_init = qdq.initializers.get(x).filter(|t| !t.dtype.is_float());
                if let Some(codes) = int_init {
                    let out = &n.outputs[0];
                    let reader = uses
                        .sole_reader(out)
                        .ok_or_else(|| err(format!("`{out}` has no single reader")))?;
                    let rn = &qdq.nodes[reader];
                    let idx = rn.inputs.iter().position(|v| v == out).unwrap_or(0);
                    let fnode = float_node(&rn.name).ok_or_else(|| {
                        err(format!(
                            "node `{}` of the QDQ graph is not in the float graph",
                            rn.name
                        ))
                    })?;
                    let fname = fnode.inputs.get(idx).cloned().unwrap_or_default();
                    let ft = float
                        .initializers
                        .get(&fname)
                        .filter(|t| t.dtype == DType::F32)
                        .ok_or_else(|| err(format!("float initializer `{fname}` not found")))?;
                    t.initializers.insert(fname.clone(), ft.clone());
                    if idx == 1 {
                        let scale = n.inputs[1].clone();
                        let nsc = qdq.initializers.get(&scale).map_or(1, GTensor::len);
                        let zp = n.inputs.get(2).filter(|v| !v.is_empty()).cloned();
                        let zero_points = match &zp {
                            Some(z) => zps(&qdq.initializers[z]),
                            None => vec![0; nsc],
                        };
                        let axis = if nsc > 1 {
                            let a = n.attr_int("axis", 1).unwrap_or(1);
                            Some(if a < 0 { a + codes.rank() as i64 } else { a } as usize)
                        } else {
                            None
                        };
                        roles.insert(fname.clone(), Role::Weight);
                        let ws = if keep_w.contains(x) {
                            // PTQ's scales are for its narrow codes: the same real range
                            // over the 8-bit codes.
                            let r = wscheme.qmax() as f32 / w8.qmax() as f32;
                            if let Some(st) = qdq.initializers.get(&scale) {
                                let v: Vec<f32> = st.to_f32_vec().iter().map(|s| s * r).collect();
                                t.initializers
                                    .insert(scale.clone(), GTensor::from_f32(&st.shape, v));
                            }
                            &w8
                        } else {
                            if opts.weight_bits < 8 && matches!(opts.init, QatInit::Mse { .. }) {
                                // Scales chosen at the trained width, not max/q_max.
                                let st = qdq.initializers.get(&scale).ok_or_else(|| {
                                    err(format!("weight scale `{scale}` is not a constant"))
                                })?;
                                let v = crate::qat_init::weight_scales(
                                    &fname,
                                    &ft.to_f32_vec(),
                                    &ft.shape,
                                    axis,
                                    &wscheme,
                                    &st.to_f32_vec(),
                                )?;
                                t.initializers
                                    .insert(scale.clone(), GTensor::from_f32(&st.shape, v));
                            }
                            &wscheme
                        };
                        pending.push(FqSpec {
                            fq: FakeQuant {
                                tensor: fname.clone(),
                                axis,
                                zero_points,
                                qmin: ws.qmin(),
                                qmax: ws.qmax(),
                                learn_scale: opts.lsq,
                                is_weight: true,
                            },
                            x: fname.clone(),
                            scale: scale.clone(),
                            out: out.clone(),
                            zero_point: None,
                        });
                        weights.push(WeightMap {
                            step: 0,
                            float: fname,
                            codes: x.clone(),
                            scale,
                            zp,
                        });
                    } else if idx == 2 {
                        roles.insert(fname.clone(), Role::Bias);
                        rename.insert(out.clone(), fname.clone());
                        let scale_of = |v: &str| -> Result<String> {
                            let p = uses
                                .producer(v)
                                .map(|i| &qdq.nodes[i])
                                .filter(|p| p.is(OpKind::DequantizeLinear))
                                .ok_or_else(|| err(format!("`{v}` is not dequantized")))?;
                            Ok(p.inputs[1].clone())
                        };
                        biases.push(BiasMap {
                            float: fname,
                            codes: x.clone(),
                            scale: n.inputs[1].clone(),
                            in_scale: scale_of(&rn.inputs[0])?,
                            w_scale: scale_of(&rn.inputs[1])?,
                        });
                    } else {
                        return Err(err(format!(
                            "node `{}` reads quantized constant `{x}` at input {idx}",
                            rn.name
                        )));
                    }
                    continue;
                }
                let from_q = uses
                    .producer(x)
                    .is_some_and(|p| qdq.nodes[p].is(OpKind::QuantizeLinear));
                if from_q {
                    continue;
                }
            }
            if n.is(OpKind::QuantizeLinear) {
                let q = &n.outputs[0];
                let dq = uses
                    .sole_reader(q)
                    .map(|i| &qdq.nodes[i])
                    .filter(|d| d.is(OpKind::DequantizeLinear))
                    .ok_or_else(|| {
                        err(format!(
                            "QuantizeLinear `{}`: its codes must feed one DequantizeLinear",
                            n.name
                        ))
                    })?;
                let zp = n.inputs[2].clone();
                let zt = &qdq.initializers[&zp];
                let (mut qmin, mut qmax) = zt
                    .dtype
                    .int_range()
                    .ok_or_else(|| err(format!("zero point `{zp}` is not an integer")))?;
                let mut zero_points = zps(zt);
                let mut calibrated = false;
                if opts.activation_bits < 8 && !keep_act.contains(&n.inputs[1]) {
                    // PTQ calibrated 8-bit codes: the same real range, re-quantized to the
                    // narrow codes (quantkit-core's choose_qparams, as PTQ chooses them).
                    let (nmin, nmax) = narrow_range(zt.dtype, opts.activation_bits)?;
                    let sname = &n.inputs[1];
                    let s = qdq
                        .initializers
                        .get(sname)
                        .filter(|t| t.dtype == DType::F32 && t.len() == 1)
                        .ok_or_else(|| {
                            err(format!(
                                "activation scale `{sname}` is not one f32 constant"
                            ))
                        })?
                        .to_f32_vec()[0];
                    let z = zero_points[0];
                    let (lo, hi) = match &opts.init {
                        QatInit::MinMax => {
                            (s * (qmin as i32 - z) as f32, s * (qmax as i32 - z) as f32)
                        }
                        // The float tensor: the QuantizeLinear's input, or the graph output
                        // its DequantizeLinear writes (PTQ renames the producer's output).
                        QatInit::Mse { activation_ranges } => {
                            calibrated = true;
                            *activation_ranges
                                .get(&n.inputs[0])
                                .or_else(|| activation_ranges.get(&dq.outputs[0]))
                                .ok_or_else(|| {
                                    err(format!(
                                        "activation `{}`: no calibrated {}-bit range \
                                         (QatInit::Mse needs one per narrow activation, \
                                         see qat_init::activation_ranges)",
                                        n.inputs[0], opts.activation_bits
                                    ))
                                })?
                        }
                    };
                    let scheme = QuantScheme::new(opts.activation_bits, nmin < 0)
                        .map_err(|e| err(format!("activation bits: {e}")))?;
                    let (ns, nz) = quantkit_core::choose_qparams(sname, lo, hi, &scheme)
                        .map_err(|e| err(e.to_string()))?;
                    t.initializers
                        .insert(sname.clone(), GTensor::from_f32(&[], vec![ns]));
                    zero_points = vec![nz];
                    (qmin, qmax) = (i64::from(nmin), i64::from(nmax));
                }
                let xin = rename
                    .get(&n.inputs[0])
                    .cloned()
                    .unwrap_or_else(|| n.inputs[0].clone());
                let tied = if opts.activation_bits < 8 {
                    source_activation(qdq, &uses, &n.inputs[0])
                        .and_then(|src| acts.iter().position(|a: &ActMap| a.scale == src))
                        .map(|i| acts[i].tied.unwrap_or(i))
                } else {
                    None
                };
                // LSQ+: a learned zero point for an activation whose codes are its own.
                let zero_point = (opts.lsq_plus && tied.is_none()).then(|| {
                    let name = format!("{}.zero_point_learned", n.inputs[1]);
                    let v: Vec<f32> = zero_points.iter().map(|&z| z as f32).collect();
                    t.initializers
                        .insert(name.clone(), GTensor::from_f32(&[v.len()], v));
                    name
                });
                pending.push(FqSpec {
                    zero_point,
                    fq: FakeQuant {
                        tensor: xin.clone(),
                        axis: None,
                        zero_points,
                        qmin: qmin as i32,
                        qmax: qmax as i32,
                        learn_scale: opts.lsq,
                        is_weight: false,
                    },
                    x: xin,
                    scale: n.inputs[1].clone(),
                    out: dq.outputs[0].clone(),
                });
                acts.push(ActMap {
                    step: 0,
                    scale: n.inputs[1].clone(),
                    zp,
                    ema: None,
                    tied,
                    calibrated,
                });
                continue;
            }
            let mut c = n.clone();
            for v in c.inputs.iter_mut() {
                if let Some(r) = rename.get(v) {
                    *v = r.clone();
                }
            }
            let at = t.nodes.len();
            if !pending.is_empty() {
                fqs.entry(at).or_default().append(&mut pending);
            }
            let bn = (c.is(OpKind::Conv) && opts.bn_batch_stats.contains(&c.name))
                .then(|| batch_stats_bn(&c, float, &mut t, qdq))
                .transpose()?;
            t.nodes.push(c);
            if let Some((node, map)) = bn {
                rename.insert(map.input.clone(), node.outputs[0].clone());
                t.nodes.push(node);
                bns.push(map);
            }
        }
        if !pending.is_empty() {
            fqs.entry(t.nodes.len()).or_default().append(&mut pending);
        }
        if let Some(missing) = opts
            .bn_batch_stats
            .iter()
            .find(|c| !bns.iter().any(|b| &b.conv == *c))
        {
            return Err(err(format!(
                "batch-statistics BatchNormalization: `{missing}` is not a Conv of the QDQ graph"
            )));
        }
        let mut net = GraphNet::build(&t, &fqs, &roles)?;
        for b in bns.iter_mut() {
            b.step = net
                .op_step(&format!("{}.bn_batch", b.conv))
                .ok_or_else(|| err(format!("no BatchNormalization step for `{}`", b.conv)))?;
        }
        // The running statistics are constants updated after each step, not parameters.
        for b in &bns {
            for name in [&b.mean, &b.var] {
                if let Some(p) = net.params.iter_mut().find(|p| &p.name == name) {
                    p.trainable = false;
                }
            }
        }
        // Weight steps: by the float weight they read (one per weight).
        for (step, f, _, _) in net.fake_quants() {
            if let Some(w) = weights
                .iter_mut()
                .find(|w| f.is_weight && w.float == f.tensor)
            {
                w.step = step;
            }
        }
        // Activation steps: match by the scale initializer they read (unique per tensor).
        for a in acts.iter_mut() {
            if let Some((step, ..)) = net
                .fake_quants()
                .find(|(_, _, _, s)| net.name_of(*s) == a.scale)
            {
                a.step = step;
            }
        }
        let mut qat = Qat {
            net,
            template: qdq.clone(),
            weights,
            biases,
            acts,
            opts: opts.clone(),
            steps_done: 0,
            bn_active: !bns.is_empty(),
            bns,
            bn_init: false,
            edits: 0,
            ema: None,
            averaged: false,
        };
        qat.sync_tied();
        Ok(qat)
    }

    /// LSQ+: each learned zero point kept in its code range, and the integer zero point the
    /// forward and the export use set to it rounded (half to even).
    fn round_zero_points(&mut self) {
        for i in 0..self.acts.len() {
            let step = self.acts[i].step;
            let Some(zs) = self.net.fake_quant_zero_point(step) else {
                continue;
            };
            let Some(f) = self.net.fake_quant_mut(step) else {
                continue;
            };
            let (lo, hi) = (f.qmin as f32, f.qmax as f32);
            let Some(v) = self.net.stored(zs).map(|t| t.to_f32_vec()) else {
                continue;
            };
            let v: Vec<f32> = v.iter().map(|z| z.clamp(lo, hi)).collect();
            let ints: Vec<i32> = v.iter().map(|z| z.round_ties_even() as i32).collect();
            self.net.set_stored(zs, &v);
            if let Some(f) = self.net.fake_quant_mut(step) {
                f.zero_points = ints;
            }
        }
    }

    /// Copies the scale and zero point of each tied activation from its source.
    fn sync_tied(&mut self) {
        for i in 0..self.acts.len() {
            let Some(src) = self.acts[i].tied else {
                continue;
            };
            let (from, to) = (self.acts[src].step, self.acts[i].step);
            let Some((_, f, _, ss)) = self.net.fake_quants().find(|(j, ..)| *j == from) else {
                continue;
            };
            let zp = f.zero_points.clone();
            let Some(scale) = self.net.stored(ss) else {
                continue;
            };
            let Some((_, _, _, ts)) = self.net.fake_quants().find(|(j, ..)| *j == to) else {
                continue;
            };
            self.net.set_stored(ts, &scale.to_f32_vec());
            if let Some(f) = self.net.fake_quant_mut(to) {
                f.zero_points = zp;
            }
        }
    }

    /// Whether the batch-statistics BatchNormalizations ([`QatOptions::bn_batch_stats`])
    /// still run, i.e. [`Qat::freeze_bn`] has not folded them yet.
    pub fn bn_batch_active(&self) -> bool {
        self.bn_active
    }

    /// The generation an exact plan is valid for: training steps plus other edits, and
    /// whether these are the averaged parameters.
    fn generation(&self) -> (usize, bool) {
        (self.steps_done + self.edits, self.averaged)
    }

    /// Whether the activation ranges still move: a training step within the first
    /// `observer_steps` with an activation the observers follow.
    fn observing(&self) -> bool {
        self.steps_done <= self.opts.observer_steps
            && self.acts.iter().any(|a| a.tied.is_none() && !a.calibrated)
    }

    /// Keeps an exponential moving average of the trainable parameters from now on
    /// (`crate::ema`; `docs/qat.md`, "Weight averaging"): after every training step
    /// `a ← d·a + (1 − d)·p` with `d = decay`, or `min(decay, (1 + t)/(10 + t))` at update
    /// `t` with `warmup`. The average restarts at the current parameters while the
    /// observers still move activation ranges and when [`Qat::freeze_bn`] folds the
    /// BatchNormalizations, so it never mixes parameters of different ranges or folds.
    /// [`Qat::averaged`] is the model it describes.
    pub fn enable_ema(&mut self, decay: f32, warmup: bool) -> Result<()> {
        self.ema = Some(crate::ema::Ema::new(decay, warmup, &self.net.params)?);
        Ok(())
    }

    /// The weight average, when [`Qat::enable_ema`] was called.
    pub fn ema(&self) -> Option<&crate::ema::Ema> {
        self.ema.as_ref()
    }

    /// The model with the averaged parameters ([`Qat::enable_ema`]): a copy whose
    /// trainable parameters (weights, biases, learned scales, LSQ+ zero points,
    /// batch-statistics BatchNormalization scale and bias) are their averages, with the
    /// scales kept positive, the LSQ+ zero points rounded and the tied activations copied
    /// as after a step; everything else (observed ranges, running statistics) is the
    /// current model's. Without an average, a copy of this model. Its exact plans are
    /// refused by the training model and the other way round.
    pub fn averaged(&self) -> Qat {
        let mut q = self.clone();
        if let Some(e) = q.ema.take() {
            e.apply(&mut q.net.params);
            q.clamp_scales();
            q.round_zero_points();
            q.sync_tied();
            q.averaged = true;
        }
        q
    }

    /// The model that deploys now: the averaged one ([`Qat::averaged`]) with weight
    /// averaging, with the batch-statistics BatchNormalizations folded while they run
    /// ([`Qat::with_bn_folded`]); this model itself otherwise. What `quantkit qat`
    /// evaluates, keeps and exports.
    pub fn deployed(&self) -> Result<std::borrow::Cow<'_, Qat>> {
        use std::borrow::Cow;
        let q = if self.ema.is_some() {
            Cow::Owned(self.averaged())
        } else {
            Cow::Borrowed(self)
        };
        if !q.bn_active {
            return Ok(q);
        }
        Ok(Cow::Owned(q.with_bn_folded()?))
    }

    /// Before the first training step: sets each batch-statistics BatchNormalization to
    /// the identity on batch `x` (scale `√(var_B + ε)`, bias `mean_B`, running statistics
    /// `mean_B`, `var_B` of its input, one BatchNormalization after the other, so each sees
    /// the inputs of the PTQ model), so training starts from PTQ's numbers.
    fn ensure_bn_init(&mut self, x: &GTensor) -> Result<()> {
        if !self.bn_active || self.bn_init {
            return Ok(());
        }
        for i in 0..self.bns.len() {
            let v = self.net.forward(vec![x.clone()])?;
            let b = &self.bns[i];
            let slot = self
                .net
                .slot_of(&b.input)
                .ok_or_else(|| err(format!("`{}` is not in the training graph", b.input)))?;
            let u = v
                .slot(slot)
                .ok_or_else(|| err(format!("`{}` was not computed", b.input)))?;
            let st = channel_stats(u);
            drop(v);
            let eps = f64::from(b.eps);
            let vals = [
                st.iter()
                    .map(|s| (s.1 + eps).sqrt() as f32)
                    .collect::<Vec<_>>(),
                st.iter().map(|s| s.0 as f32).collect(),
                st.iter().map(|s| s.0 as f32).collect(),
                st.iter().map(|s| s.1 as f32).collect(),
            ];
            let names = [&b.gamma, &b.beta, &b.mean, &b.var].map(|n| n.clone());
            for (n, v) in names.iter().zip(vals) {
                let s = self
                    .net
                    .slot_of(n)
                    .ok_or_else(|| err(format!("`{n}` is not in the training graph")))?;
                self.net.set_stored(s, &v);
            }
        }
        self.bn_init = true;
        Ok(())
    }

    /// The running statistics the batch-statistics BatchNormalizations returned in the
    /// forward `v`: `(slot of the running value, new value)`.
    fn bn_running(&self, v: &crate::graph::Values) -> Vec<(usize, Vec<f32>)> {
        if !self.bn_active {
            return Vec::new();
        }
        self.bns
            .iter()
            .flat_map(|b| [(&b.mean, &b.mean_next), (&b.var, &b.var_next)])
            .filter_map(|(dst, src)| {
                let d = self.net.slot_of(dst)?;
                let t = v.slot(self.net.slot_of(src)?)?;
                Some((d, t.to_f32_vec()))
            })
            .collect()
    }

    /// Freezes the batch-statistics BatchNormalizations: each one's running statistics are
    /// folded into the Conv before it, exactly as PTQ's preparation folds an inference
    /// BatchNormalization (`k = γ/√(var + ε)`, `W ← W·k`, `b ← (b − μ)·k + β`, per output
    /// channel), the Conv's per-channel weight scales are multiplied by `|k|` (so the
    /// weight codes do not change), and the BatchNormalization is removed from the
    /// training graph. From then on the trained weights are the deployed ones. A no-op
    /// when nothing is to fold.
    pub fn freeze_bn(&mut self) -> Result<()> {
        if !self.bn_active {
            return Ok(());
        }
        for b in self.bns.clone() {
            if self.bn_init {
                let get = |n: &str| -> Result<Vec<f32>> {
                    let s = self
                        .net
                        .slot_of(n)
                        .ok_or_else(|| err(format!("`{n}` is not in the training graph")))?;
                    Ok(self
                        .net
                        .stored(s)
                        .ok_or_else(|| err(format!("`{n}` has no stored value")))?
                        .to_f32_vec())
                };
                let (gamma, beta, mean, var) =
                    (get(&b.gamma)?, get(&b.beta)?, get(&b.mean)?, get(&b.var)?);
                let k: Vec<f64> = gamma
                    .iter()
                    .zip(&var)
                    .map(|(&g, &v)| f64::from(g) / (f64::from(v) + f64::from(b.eps)).sqrt())
                    .collect();
                let ch = k.len();
                let w = get(&b.weight)?;
                if w.len() % ch != 0 {
                    return Err(err(format!(
                        "`{}`: {} weights for {ch} channels",
                        b.weight,
                        w.len()
                    )));
                }
                let inner = w.len() / ch;
                let w: Vec<f32> = w
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| (f64::from(x) * k[i / inner]) as f32)
                    .collect();
                let bias: Vec<f32> = get(&b.bias)?
                    .iter()
                    .enumerate()
                    .map(|(c, &x)| {
                        ((f64::from(x) - f64::from(mean[c])) * k[c] + f64::from(beta[c])) as f32
                    })
                    .collect();
                for (n, v) in [(&b.weight, w), (&b.bias, bias)] {
                    let s = self.net.slot_of(n).expect("read above");
                    self.net.set_stored(s, &v);
                }
                // The weight's fake-quant scales follow the weights per channel.
                let ss = self
                    .net
                    .fake_quants()
                    .find(|(_, f, ..)| f.is_weight && f.tensor == b.weight)
                    .map(|(.., ss)| ss);
                if let Some(ss) = ss {
                    let sv = self
                        .net
                        .stored(ss)
                        .map(|t| t.to_f32_vec())
                        .unwrap_or_default();
                    if sv.len() == ch {
                        let nv: Vec<f32> = sv
                            .iter()
                            .zip(&k)
                            .map(|(&s, &k)| (f64::from(s) * k.abs()) as f32)
                            .collect();
                        self.net.set_stored(ss, &nv);
                    }
                }
            }
            self.net.bypass_step(b.step)?;
            for p in self.net.params.iter_mut() {
                if p.name == b.gamma || p.name == b.beta {
                    p.trainable = false;
                }
            }
        }
        self.bn_active = false;
        self.edits += 1;
        // The fold changes what each weight means: the average restarts from the folded
        // parameters.
        if let Some(e) = &mut self.ema {
            e.reset(&self.net.params);
        }
        Ok(())
    }

    /// A copy of this model with the batch-statistics BatchNormalizations frozen and folded
    /// ([`Qat::freeze_bn`]): the model that would deploy now, for evaluation and export.
    pub fn with_bn_folded(&self) -> Result<Qat> {
        let mut q = self.clone();
        q.freeze_bn()?;
        Ok(q)
    }

    /// Number of fake-quant steps for weights and activations.
    pub fn counts(&self) -> (usize, usize) {
        (self.weights.len(), self.acts.len())
    }

    /// Updates the activation ranges from the values of the last training forward while
    /// the observer phase lasts (EMA of the batch min/max, then new scale and zero point by
    /// quantkit-core's `choose_qparams`). Ranges chosen at their width by [`QatInit::Mse`]
    /// are left as they are.
    pub fn observe(&mut self, v: &crate::graph::Values) -> Result<()> {
        self.steps_done += 1;
        if self.steps_done > self.opts.observer_steps {
            return Ok(());
        }
        let m = self.opts.observer_momentum;
        for a in self
            .acts
            .iter_mut()
            .filter(|a| a.tied.is_none() && !a.calibrated)
        {
            let Some((_, f, xs, ss)) = self.net.fake_quants().find(|(i, ..)| *i == a.step) else {
                continue;
            };
            let (qmin, qmax, signed) = (f.qmin, f.qmax, f.qmin < 0);
            let Some(x) = v.slot(xs) else { continue };
            let (lo, hi) = crate::graph::min_max(x);
            if !lo.is_finite() || !hi.is_finite() {
                continue;
            }
            let (elo, ehi) = match a.ema {
                Some((l, h)) => ((1.0 - m) * l + m * lo, (1.0 - m) * h + m * hi),
                None => {
                    // Start from PTQ's calibrated range.
                    let s = self
                        .net
                        .stored(ss)
                        .map(|t| t.to_f32_vec()[0])
                        .unwrap_or(1.0);
                    let z = f.zero_points[0];
                    let (pl, ph) = (s * (qmin - z) as f32, s * (qmax - z) as f32);
                    ((1.0 - m) * pl + m * lo, (1.0 - m) * ph + m * hi)
                }
            };
            a.ema = Some((elo, ehi));
            let bits = ((qmax - qmin + 1) as f32).log2().round() as u8;
            let scheme = QuantScheme::new(bits, signed).map_err(|e| err(e.to_string()))?;
            let (s, z) = quantkit_core::choose_qparams(&a.scale, elo, ehi, &scheme)
                .map_err(|e| err(e.to_string()))?;
            self.net.set_stored(ss, &[s]);
            if let Some(f) = self.net.fake_quant_mut(a.step) {
                f.zero_points = vec![z];
            }
            if let Some(zs) = self.net.fake_quant_zero_point(a.step) {
                self.net.set_stored(zs, &[z as f32]);
            }
        }
        self.sync_tied();
        Ok(())
    }

    /// One training step on a batch `x` (the graph's single input): forward with fake
    /// quantization, observer update, loss on output 0, backward (STE, LSQ), optimizer
    /// step. A non-finite loss is returned before any parameter changes.
    #[allow(clippy::too_many_arguments)]
    pub fn train_step(
        &mut self,
        opt: &mut dyn crate::optim::Optimizer,
        x: GTensor,
        loss: crate::losses::LossKind,
        labels: Option<&[usize]>,
        target: Option<&[f32]>,
        lr: f32,
    ) -> Result<(f32, GTensor)> {
        self.ensure_bn_init(&x)?;
        let v = self.net.forward(vec![x])?;
        let out = self
            .net
            .outputs(&v)
            .first()
            .copied()
            .cloned()
            .ok_or_else(|| err("the graph has no output".into()))?;
        let k = out.shape.last().copied().unwrap_or(1).max(1);
        let (l, g) = crate::losses::compute(loss, &out.to_f32_vec(), k, labels, target)
            .ok_or_else(|| err(format!("loss {loss:?} needs labels or a target")))?;
        if !l.is_finite() {
            return Ok((l, out));
        }
        self.observe(&v)?;
        self.net.params.zero_grad();
        let mut seeds = vec![None; self.net.outputs(&v).len()];
        seeds[0] = Some(g);
        self.net.backward(&v, seeds)?;
        let running = self.bn_running(&v);
        drop(v);
        self.finish_step(opt, lr)?;
        for (s, val) in running {
            self.net.set_stored(s, &val);
        }
        Ok((l, out))
    }

    /// The optimizer step and what follows it: scales kept positive, tied activations
    /// copied, parameters checked finite.
    fn finish_step(&mut self, opt: &mut dyn crate::optim::Optimizer, lr: f32) -> Result<()> {
        opt.step(&mut self.net.params, lr);
        self.clamp_scales();
        self.round_zero_points();
        self.sync_tied();
        // Fake quantization maps NaN to the zero point, so a diverged parameter need not
        // show in the loss: check the parameters themselves.
        if let Some(p) = self
            .net
            .params
            .iter()
            .find(|p| p.value.data().iter().any(|v| !v.is_finite()))
        {
            return Err(err(format!(
                "parameter `{}` became non-finite after the optimizer step (learning rate {lr} is too high?)",
                p.name
            )));
        }
        let observing = self.observing();
        if let Some(e) = &mut self.ema {
            if observing {
                e.reset(&self.net.params);
            } else {
                e.update(&self.net.params);
            }
        }
        Ok(())
    }

    /// The value graph output `i` reads: the output itself, or the input of its fake-quant
    /// pair (`None` when the output has no producer, or a DequantizeLinear not fed by a
    /// QuantizeLinear).
    fn output_source(&self, i: usize) -> Option<String> {
        let g = &self.template;
        let v = &g.outputs.get(i)?.name;
        let p = &g.nodes[g.producer(v)?];
        if !p.is(OpKind::DequantizeLinear) {
            return Some(v.clone());
        }
        let q = &g.nodes[g.producer(&p.inputs[0])?];
        q.is(OpKind::QuantizeLinear).then(|| q.inputs[0].clone())
    }

    /// When graph output `i` is a Sigmoid's or HardSigmoid's output (directly or through
    /// its fake-quant pair) — per-element probabilities such as a text detector's
    /// probability map — the name of that node's output. A KL over the last axis would
    /// treat such a map as one distribution per row, so distillation uses the normalised
    /// MSE on it.
    pub fn sigmoid_probs_of(&self, i: usize) -> Option<String> {
        let g = &self.template;
        let v = self.output_source(i)?;
        let n = &g.nodes[g.producer(&v)?];
        (n.is(OpKind::Sigmoid) || n.is(OpKind::HardSigmoid)).then_some(v)
    }

    /// When graph output `i` is the probabilities of a Softmax over its last axis (read
    /// directly or through the output's fake-quant pair), the name of the Softmax's own
    /// output in the training graph: the probabilities before output quantization, which a
    /// [`OutputLoss::KlProbs`] term differentiates.
    pub fn softmax_probs_of(&self, i: usize) -> Option<String> {
        let g = &self.template;
        let v = self.output_source(i)?;
        let sm = &g.nodes[g.producer(&v)?];
        if !sm.is(OpKind::Softmax) {
            return None;
        }
        // Opset < 13 Softmax flattens from `axis` (default 1): over the last axis only
        // when that is the last axis; opset >= 13 (default -1) likewise.
        let default = if g.opset() < 13 { 1 } else { -1 };
        let axis = sm.attr_int("axis", default).ok()?;
        let rank = g.outputs.get(i)?.shape.as_ref()?.len() as i64;
        let last = axis == -1 || axis == rank - 1;
        (last && self.net.slot_of(&v).is_some()).then_some(v)
    }

    /// One distillation step on every graph output: `teachers[i]` is the float model's
    /// output `i` for the batch and `terms[i]` how it enters the loss `Σ wᵢ·Lᵢ`. Returns
    /// the weighted loss, each output's unweighted loss (0 for an ignored output) and the
    /// student's outputs. A non-finite loss returns before any parameter changes.
    pub fn train_step_outputs(
        &mut self,
        opt: &mut dyn crate::optim::Optimizer,
        x: GTensor,
        teachers: &[Vec<f32>],
        terms: &[OutputTerm],
        lr: f32,
    ) -> Result<(f32, Vec<f32>, Vec<GTensor>)> {
        self.train_step_outputs_labels(opt, x, teachers, terms, None, lr)
    }

    /// [`Qat::train_step_outputs`] plus, with `labels`, a cross-entropy term on the labels:
    /// `L = Σ wᵢ·Lᵢ + w_ce·CE`, distillation *together with* the labels (Hinton et al.
    /// 2015). On a raw output the cross-entropy is the softmax cross-entropy of the logits;
    /// on a Softmax's probabilities it is `−ln p_label` on the Softmax's own output, seeded
    /// like [`OutputLoss::KlProbs`] (a KL to the one-hot label). The CE term is added to
    /// the returned total, not to the per-output parts.
    pub fn train_step_outputs_labels(
        &mut self,
        opt: &mut dyn crate::optim::Optimizer,
        x: GTensor,
        teachers: &[Vec<f32>],
        terms: &[OutputTerm],
        labels: Option<LabelTerm<'_>>,
        lr: f32,
    ) -> Result<(f32, Vec<f32>, Vec<GTensor>)> {
        self.ensure_bn_init(&x)?;
        let v = self.net.forward(vec![x])?;
        let outs: Vec<GTensor> = self.net.outputs(&v).into_iter().cloned().collect();
        if teachers.len() != outs.len() || terms.len() != outs.len() {
            return Err(err(format!(
                "distillation: the model has {} outputs, got {} teacher outputs and {} loss terms",
                outs.len(),
                teachers.len(),
                terms.len()
            )));
        }
        let (mut total, mut parts, mut seeds) = (0f64, Vec::new(), Vec::new());
        for (i, ((o, t), term)) in outs.iter().zip(teachers).zip(terms).enumerate() {
            let y = o.to_f32_vec();
            if t.len() != y.len() {
                return Err(err(format!(
                    "distillation: output {i} has {} values, its teacher {}",
                    y.len(),
                    t.len()
                )));
            }
            let k = o.shape.last().copied().unwrap_or(1).max(1);
            let (l, g) = match term.loss {
                OutputLoss::Ignore => {
                    parts.push(0.0);
                    seeds.push(None);
                    continue;
                }
                OutputLoss::KlProbs { temperature } => {
                    let name = self.softmax_probs_of(i).ok_or_else(|| {
                        err(format!(
                            "distillation: output {i} is not a Softmax's probabilities; use KL on logits or MSE"
                        ))
                    })?;
                    let slot = self
                        .net
                        .slot_of(&name)
                        .expect("checked by softmax_probs_of");
                    let p = v
                        .slot(slot)
                        .ok_or_else(|| err(format!("`{name}` was not computed")))?
                        .to_f32_vec();
                    crate::losses::distill_kl_probs(&p, t, k, temperature)
                }
                OutputLoss::KlLogits { temperature } => {
                    crate::losses::distill_kl(&y, t, k, temperature)
                }
                OutputLoss::Mse { norm } => crate::losses::mse_normalised(&y, t, norm),
            };
            total += f64::from(term.weight) * f64::from(l);
            parts.push(l);
            seeds.push(Some(
                g.into_iter().map(|v| v * term.weight).collect::<Vec<f32>>(),
            ));
        }
        if let Some(lt) = labels {
            let o = outs.get(lt.output).ok_or_else(|| {
                err(format!(
                    "cross-entropy on output {}: the model has {} outputs",
                    lt.output,
                    outs.len()
                ))
            })?;
            let k = o.shape.last().copied().unwrap_or(1).max(1);
            let n = o.len() / k;
            if lt.labels.len() != n {
                return Err(err(format!(
                    "cross-entropy: {} labels for a batch of {n}",
                    lt.labels.len()
                )));
            }
            if let Some(&bad) = lt.labels.iter().find(|&&l| l >= k) {
                return Err(err(format!(
                    "cross-entropy: label {bad} for an output of {k} classes"
                )));
            }
            let (l, g) = match self.softmax_probs_of(lt.output) {
                Some(name) => {
                    let slot = self
                        .net
                        .slot_of(&name)
                        .expect("checked by softmax_probs_of");
                    let p = v
                        .slot(slot)
                        .ok_or_else(|| err(format!("`{name}` was not computed")))?
                        .to_f32_vec();
                    let mut onehot = vec![0f32; p.len()];
                    for (i, &l) in lt.labels.iter().enumerate() {
                        onehot[i * k + l] = 1.0;
                    }
                    crate::losses::distill_kl_probs(&p, &onehot, k, 1.0)
                }
                None => crate::losses::cross_entropy(&o.to_f32_vec(), k, lt.labels),
            };
            total += f64::from(lt.weight) * f64::from(l);
            let g: Vec<f32> = g.into_iter().map(|v| v * lt.weight).collect();
            match &mut seeds[lt.output] {
                Some(s) => s.iter_mut().zip(&g).for_each(|(a, b)| *a += b),
                s @ None => *s = Some(g),
            }
        }
        let total = total as f32;
        if !total.is_finite() {
            return Ok((total, parts, outs));
        }
        // A KlProbs gradient is with respect to the Softmax's probabilities: it enters the
        // backward at the graph output, and the output fake-quant's straight-through
        // estimator (probabilities lie inside its range) hands it to the Softmax unchanged.
        self.observe(&v)?;
        self.net.params.zero_grad();
        self.net.backward(&v, seeds)?;
        let running = self.bn_running(&v);
        drop(v);
        self.finish_step(opt, lr)?;
        for (s, val) in running {
            self.net.set_stored(s, &val);
        }
        Ok((total, parts, outs))
    }

    /// Every graph output of the fake-quant model for a batch `x`.
    pub fn predict_outputs(&self, x: GTensor) -> Result<Vec<GTensor>> {
        let v = self.net.forward(vec![x])?;
        Ok(self.net.outputs(&v).into_iter().cloned().collect())
    }

    /// Every graph output of the fake-quant model in exact mode ([`Qat::predict_exact`]).
    pub fn predict_exact_outputs(&self, x: GTensor, plan: &ExactPlan) -> Result<Vec<GTensor>> {
        if plan.generation != self.generation() {
            return Err(stale_plan(plan.generation, self.generation()));
        }
        let v = self.net.forward_exact(vec![x], plan)?;
        Ok(self.net.outputs(&v).into_iter().cloned().collect())
    }

    /// The fake-quant model's output 0 for a batch `x`.
    pub fn predict(&self, x: GTensor) -> Result<GTensor> {
        let v = self.net.forward(vec![x])?;
        self.net
            .outputs(&v)
            .first()
            .copied()
            .cloned()
            .ok_or_else(|| err("the graph has no output".into()))
    }

    /// The exact-mode plan of the current parameters: `exported` must be [`Qat::export`] of
    /// this state and `engine` its compiled plan (`quantkit_engine::compile(exported, opts)`
    /// with `opts.requant == mode`). Every Conv/Gemm/MatMul the engine runs on integers is
    /// then evaluated by [`Qat::predict_exact`] with the engine's integer accumulation, int32
    /// bias and requantization (see [`crate::exact`]); layers it cannot reproduce are listed
    /// in [`ExactPlan::not_reproduced`]. The plan is stale after another training step.
    pub fn exact_plan(
        &self,
        exported: &Graph,
        engine: &quantkit_engine::Plan,
        mode: quantkit_engine::RequantMode,
    ) -> Result<ExactPlan> {
        let biases: Vec<(String, String, String)> = self
            .biases
            .iter()
            .map(|b| (b.float.clone(), b.codes.clone(), b.scale.clone()))
            .collect();
        if self.bn_active {
            return Err(err(
                "exact mode: the batch-statistics BatchNormalizations are not folded yet; \
                 build the plan on `Qat::with_bn_folded`"
                    .into(),
            ));
        }
        crate::exact::build(
            &self.net,
            exported,
            engine,
            mode,
            &biases,
            self.generation(),
        )
    }

    /// The fake-quant model's output 0 for a batch `x` in exact mode: the same numbers as
    /// the integer engine on the exported model (`docs/qat.md`, "Exact mode").
    pub fn predict_exact(&self, x: GTensor, plan: &ExactPlan) -> Result<GTensor> {
        if plan.generation != self.generation() {
            return Err(stale_plan(plan.generation, self.generation()));
        }
        let v = self.net.forward_exact(vec![x], plan)?;
        self.net
            .outputs(&v)
            .first()
            .copied()
            .cloned()
            .ok_or_else(|| err("the graph has no output".into()))
    }

    /// Keeps learned scales positive after an optimizer step.
    pub fn clamp_scales(&mut self) {
        for p in self.net.params.iter_mut() {
            if p.name.ends_with("_scale") || p.name.ends_with(".w_scale") {
                p.value.data_mut().iter_mut().for_each(|s| *s = s.max(1e-8));
            }
        }
    }

    /// The QDQ graph with the trained weights quantized at the trained scales, the
    /// activations' scales and zero points, and the biases re-quantized to int32 at
    /// `s_in·s_w`.
    ///
    /// While batch-statistics BatchNormalizations run, the export is that of
    /// [`Qat::with_bn_folded`]: the model with their running statistics folded.
    pub fn export(&self) -> Result<Graph> {
        if self.bn_active {
            return self.with_bn_folded()?.export();
        }
        let mut g = self.template.clone();
        let stored = |name: &str| -> Result<Vec<f32>> {
            let s = self
                .net
                .slot_of(name)
                .ok_or_else(|| err(format!("`{name}` is not in the training graph")))?;
            Ok(self
                .net
                .stored(s)
                .ok_or_else(|| err(format!("`{name}` has no stored value")))?
                .to_f32_vec())
        };
        for w in &self.weights {
            let (_, f, _, _) = self
                .net
                .fake_quants()
                .find(|(i, ..)| *i == w.step)
                .ok_or_else(|| err(format!("no fake-quant for `{}`", w.float)))?;
            let wv = stored(&w.float)?;
            let sv = stored(&w.scale)?;
            let shape = g.initializers[&w.codes].shape.clone();
            let ch = {
                let (inner, c) = match f.axis {
                    Some(a) => (shape[a + 1..].iter().product::<usize>(), shape[a]),
                    None => (1, 1),
                };
                move |i: usize| (i / inner.max(1)) % c.max(1)
            };
            let codes: Vec<i8> = wv
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let c = if sv.len() == 1 { 0 } else { ch(i) };
                    let z = f.zero_points[if f.zero_points.len() == 1 { 0 } else { c }];
                    quantkit_core::linear::quantize_value(
                        x,
                        sv[c],
                        z,
                        f.qmin,
                        f.qmax,
                        quantkit_core::RoundingMode::HalfToEven,
                    ) as i8
                })
                .collect();
            g.initializers.insert(
                w.codes.clone(),
                GTensor::new(shape, Data::I8(codes)).map_err(|e| err(e.to_string()))?,
            );
            let ss = g.initializers[&w.scale].shape.clone();
            g.initializers
                .insert(w.scale.clone(), GTensor::from_f32(&ss, sv));
            let _ = &w.zp;
        }
        for a in &self.acts {
            let (_, f, _, _) = self
                .net
                .fake_quants()
                .find(|(i, ..)| *i == a.step)
                .ok_or_else(|| err(format!("no fake-quant for `{}`", a.scale)))?;
            let s = stored(&a.scale)?;
            g.initializers
                .insert(a.scale.clone(), GTensor::from_f32(&[], vec![s[0]]));
            let zt = &g.initializers[&a.zp];
            let z = f.zero_points[0];
            let nz = match zt.dtype {
                DType::U8 => GTensor::new(vec![], Data::U8(vec![z as u8])),
                _ => GTensor::new(vec![], Data::I8(vec![z as i8])),
            }
            .map_err(|e| err(e.to_string()))?;
            g.initializers.insert(a.zp.clone(), nz);
        }
        if self.opts.activation_bits < 8 {
            let ranges: Vec<(String, i32, i32)> = self
                .acts
                .iter()
                .filter_map(|a| {
                    let (_, f, _, _) = self.net.fake_quants().find(|(i, ..)| *i == a.step)?;
                    // An activation kept at 8 bits needs no Clip.
                    let full = matches!((f.qmin, f.qmax), (0, 255) | (-128, 127));
                    (!full).then(|| (a.scale.clone(), f.qmin, f.qmax))
                })
                .collect();
            express_narrow_ranges(&mut g, &ranges)?;
        }
        for b in &self.biases {
            let bv = stored(&b.float)?;
            let s_in = g.initializers[&b.in_scale].to_f32_vec()[0];
            let ws = g.initializers[&b.w_scale].to_f32_vec();
            let (q, bs) = quantkit_core::quantize_bias(&b.float, &bv, s_in, &ws)
                .map_err(|e| err(format!("bias `{}`: {e}", b.float)))?;
            let shape = g.initializers[&b.codes].shape.clone();
            g.initializers.insert(
                b.codes.clone(),
                GTensor::new(shape, Data::I32(q)).map_err(|e| err(e.to_string()))?,
            );
            let ss = g.initializers[&b.scale].shape.clone();
            g.initializers
                .insert(b.scale.clone(), GTensor::from_f32(&ss, bs));
        }
        if self.opts.weight_bits <= 4 && self.opts.int4_weights {
            quantkit_ptq::store_weights_int4(&mut g)
                .map_err(|e| err(format!("int4 weight storage: {e}")))?;
        }
        Ok(g)
    }
}

/// The first Conv/ConvTranspose/Gemm/MatMul whose weight is a quantized constant, in graph
/// order, and the last such layer before each graph output: their weight code
/// initializers, and the scale initializers of the activations they read (following MaxPool/layout operators back to the activation
/// whose codes they move, which must keep the same width).
fn first_last_layers(
    g: &Graph,
    uses: &Uses,
) -> (
    std::collections::HashSet<String>,
    std::collections::HashSet<String>,
) {
    let dq_of = |v: &str| {
        uses.producer(v)
            .map(|i| &g.nodes[i])
            .filter(|d| d.is(OpKind::DequantizeLinear))
    };
    let weighted: Vec<&quantkit_graph::Node> = g
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                n.kind(),
                Some(OpKind::Conv | OpKind::ConvTranspose | OpKind::Gemm | OpKind::MatMul)
            ) && n
                .inputs
                .get(1)
                .and_then(|w| dq_of(w))
                .is_some_and(|d| g.initializers.contains_key(&d.inputs[0]))
        })
        .collect();
    let (mut w, mut a) = (
        std::collections::HashSet::new(),
        std::collections::HashSet::new(),
    );
    // The first layer, and the last layer of every output: walking back from each graph
    // output through input 0 of non-weighted nodes (Q/DQ, bias Add, Softmax, layout) to
    // the first weighted node (a multi-head model such as MTCNN O-Net has one per head).
    let mut ends: Vec<&quantkit_graph::Node> = weighted.first().copied().into_iter().collect();
    for o in &g.outputs {
        let mut v = o.name.clone();
        for _ in 0..g.nodes.len() {
            let Some(p) = uses.producer(&v).map(|i| &g.nodes[i]) else {
                break;
            };
            if weighted.iter().any(|w| std::ptr::eq(*w, p)) {
                ends.push(p);
                break;
            }
            let Some(i0) = p.inputs.first() else { break };
            v = i0.clone();
        }
    }
    for n in ends {
        if let Some(d) = dq_of(&n.inputs[1]) {
            w.insert(d.inputs[0].clone());
        }
        // The activation: input 0's DequantizeLinear, its QuantizeLinear's scale.
        let mut v = n.inputs[0].clone();
        for _ in 0..g.nodes.len() {
            let Some(d) = dq_of(&v) else { break };
            let Some(q) = uses
                .producer(&d.inputs[0])
                .map(|i| &g.nodes[i])
                .filter(|q| q.is(OpKind::QuantizeLinear))
            else {
                break;
            };
            a.insert(q.inputs[1].clone());
            match source_activation(g, uses, &q.inputs[0]) {
                // Moved codes: keep their source at the same width, and walk on.
                Some(_) => {
                    let p = &g.nodes[uses.producer(&q.inputs[0]).expect("has a producer")];
                    v = p.inputs[0].clone();
                }
                None => break,
            }
        }
    }
    (w, a)
}

/// The scale initializer of the activation whose codes `value` holds after a MaxPool or
/// layout operator: `value = op(DQ(Q(a)))` gives `a`'s QuantizeLinear scale.
fn source_activation(g: &Graph, uses: &Uses, value: &str) -> Option<String> {
    let p = &g.nodes[uses.producer(value)?];
    if !(p.is(OpKind::MaxPool) || p.facts().layout) || p.outputs.len() != 1 {
        return None;
    }
    let d = &g.nodes[uses.producer(p.inputs.first()?)?];
    if !d.is(OpKind::DequantizeLinear) {
        return None;
    }
    let q = &g.nodes[uses.producer(&d.inputs[0])?];
    if !q.is(OpKind::QuantizeLinear) || d.inputs.get(1) != q.inputs.get(1) {
        return None;
    }
    q.inputs.get(1).cloned()
}

/// Makes the narrow code range `[qmin, qmax]` of each activation (named by its scale
/// initializer) explicit in the 8-bit QDQ graph `g`: ONNX QuantizeLinear saturates only to
/// its code type, so a Clip to the real range `[DQ(qmin), DQ(qmax)]` goes in front of the
/// QuantizeLinear. Since Q is monotone, `Q(clip(x, DQ(qmin), DQ(qmax))) = clamp(Q(x), qmin,
/// qmax)` — the fake-quant model's codes — when `Q(DQ(qmin)) = qmin` and `Q(DQ(qmax)) =
/// qmax`, which is checked. A Relu or Clip already in front (read only by the Q) becomes
/// that Clip with the intersected bounds, so the engine's `[Relu | Clip] → Q` tail still
/// fuses it into the producing Conv/Gemm/Add step as a clamp on the output codes. A
/// MaxPool or layout operator reading codes of the same scale and zero point (already in
/// range) gets no Clip.
fn express_narrow_ranges(g: &mut Graph, ranges: &[(String, i32, i32)]) -> Result<()> {
    use quantkit_graph::ops::clip::ClipBounds;
    let opset = g.opset();
    if opset < 11 {
        return Err(err(format!(
            "narrow activation ranges need Clip with bound inputs (opset 11+), the model has opset {opset}"
        )));
    }
    let scalar = |g: &Graph, v: &str| -> Option<f32> {
        g.initializers
            .get(v)
            .filter(|t| t.dtype == DType::F32 && t.len() == 1)
            .map(|t| t.to_f32_vec()[0])
    };
    for (scale, qmin, qmax) in ranges {
        let uses = Uses::new(g);
        let Some(qi) = g
            .nodes
            .iter()
            .position(|n| n.is(OpKind::QuantizeLinear) && n.inputs.get(1) == Some(scale))
        else {
            return Err(err(format!(
                "no QuantizeLinear reads the activation scale `{scale}`"
            )));
        };
        let q = g.nodes[qi].clone();
        let s = scalar(g, scale)
            .ok_or_else(|| err(format!("activation scale `{scale}` is not one f32")))?;
        let zt = g
            .initializers
            .get(&q.inputs[2])
            .ok_or_else(|| err(format!("`{}`: zero point is not a constant", q.name)))?;
        let z = zt.to_i64_vec()[0] as i32;
        let (tlo, thi) = zt
            .dtype
            .int_range()
            .ok_or_else(|| err(format!("`{}`: zero point is not an integer", q.name)))?;
        let lo = quantkit_core::linear::dequantize_value(*qmin, s, z);
        let hi = quantkit_core::linear::dequantize_value(*qmax, s, z);
        let requant = |v: f32| {
            quantkit_core::linear::quantize_value(
                v,
                s,
                z,
                tlo as i32,
                thi as i32,
                quantkit_core::RoundingMode::HalfToEven,
            )
        };
        if requant(lo) != *qmin || requant(hi) != *qmax {
            return Err(err(format!(
                "`{}`: the bounds {lo}, {hi} of codes [{qmin}, {qmax}] do not quantize back to them (scale {s}, zero point {z})",
                q.name
            )));
        }
        let x = q.inputs[0].clone();
        let producer_at = uses.producer(&x);
        let producer = producer_at.map(|i| g.nodes[i].clone());
        let only_q = uses.sole_reader(&x) == Some(qi) && !g.outputs.iter().any(|o| o.name == x);
        // Codes of the same scale and zero point moved or max-pooled: already in range.
        if let Some(p) = &producer {
            if p.is(OpKind::MaxPool) || p.facts().layout {
                let same = p
                    .inputs
                    .first()
                    .and_then(|v| uses.producer(v))
                    .map(|i| &g.nodes[i])
                    .filter(|d| d.is(OpKind::DequantizeLinear))
                    .filter(|d| {
                        uses.producer(&d.inputs[0])
                            .is_some_and(|i| g.nodes[i].is(OpKind::QuantizeLinear))
                    })
                    .is_some_and(|d| {
                        scalar(g, &d.inputs[1]) == Some(s)
                            && d.inputs
                                .get(2)
                                .and_then(|z| g.initializers.get(z))
                                .is_some_and(|t| {
                                    t.dtype == zt.dtype && t.to_i64_vec() == [i64::from(z)]
                                })
                    });
                if same {
                    continue;
                }
            }
        }
        let (mut lo, mut hi) = (lo, hi);
        let merge = producer
            .as_ref()
            .filter(|p| only_q && p.facts().clamp && p.outputs.len() == 1);
        if let Some(p) = merge {
            let b = ClipBounds::of(p, opset, |i| scalar(g, &p.inputs[i]).map(f64::from))
                .map_err(|e| err(format!("`{}`: {e}", p.name)))?;
            lo = lo.max(b.lo as f32);
            hi = hi.min(b.hi as f32);
        }
        drop(uses);
        let lo_name = format!("{}_range_lo", q.name);
        let hi_name = format!("{}_range_hi", q.name);
        g.initializers
            .insert(lo_name.clone(), GTensor::from_f32(&[], vec![lo]));
        g.initializers
            .insert(hi_name.clone(), GTensor::from_f32(&[], vec![hi]));
        match merge.zip(producer_at) {
            Some((p, pi)) => {
                let c = &mut g.nodes[pi];
                c.op_type = "Clip".into();
                c.domain = String::new();
                c.attributes.clear();
                c.inputs = vec![p.inputs[0].clone(), lo_name, hi_name];
            }
            None => {
                let y = format!("{x}_range");
                let mut c = quantkit_graph::Node::new(
                    &format!("{}_range", q.name),
                    "Clip",
                    &[&x, &lo_name, &hi_name],
                    &[&y],
                );
                c.doc_string = "narrow activation range (quantkit qat)".into();
                g.nodes[qi].inputs[0] = y;
                g.nodes.insert(qi, c);
            }
        }
    }
    Ok(())
}
