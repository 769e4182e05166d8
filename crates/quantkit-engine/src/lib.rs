//! The integer-only inference engine: compiles a QDQ or QOperator graph (what `quantkit-ptq`
//! and ONNX Runtime's quantizer emit) into a [`Plan`] of integer kernel steps from
//! `quantkit-kernels`, and runs it.
//!
//! `DequantizeLinear → Conv/Gemm/MatMul (int8 weights, int32 bias) [→ Relu | Clip] →
//! QuantizeLinear` becomes one integer step with a fused output stage; Add/Sub/Mul/Div of
//! two quantized tensors run on the codes with the reference's exact f32 arithmetic, and
//! when both operands come from the same codes (SiLU `x·σ(x)`) as one 256-entry table;
//! Concat requantizes each input by a table (or copies it); MaxPool, unary
//! element-wise ops, PRelu (a table per channel), layout ops (Flatten, Reshape, Transpose,
//! Squeeze, Unsqueeze) and value-moving ops (Slice, Gather, Resize nearest, Pad, ...) between
//! a DequantizeLinear and a QuantizeLinear run on the 8-bit codes (a 256-entry table
//! composes DQ → op → Q exactly); a Gemm/MatMul step reads the codes before such a Flatten
//! (axis 1, identity Q/DQ) itself, an NHWC tensor through weights with K permuted to
//! (h, w, c) order. A chain of Add/Sub/Mul/Div by constants ending in a QuantizeLinear (the
//! input normalisation) is one pass with the graph's exact f32 arithmetic. QOperator nodes (`QLinearConv`, `QLinearMatMul`,
//! com.microsoft `QGemm`), which read and write the codes themselves, become the same conv and
//! GEMM steps, and MaxPool/layout ops reading their codes run on the codes.
//! Everything else is a *float island*: the graph crate's
//! own operator on dequantized values, so the engine runs every model the float executor
//! runs. 4-D integer tensors are NHWC inside the plan; inputs and outputs are ONNX (NCHW)
//! tensors, as for [`quantkit_graph::execute`].
//!
//! ```
//! use quantkit_engine::{compile, EngineOptions};
//! use quantkit_graph::{AttrValue, DType, Graph, Node, Tensor, ValueInfo};
//!
//! // x → QuantizeLinear → DequantizeLinear → Relu → QuantizeLinear → DequantizeLinear → y
//! let mut g = Graph::default();
//! g.opset_imports = vec![(String::new(), 17)];
//! g.inputs = vec![ValueInfo::new("x", DType::F32, &[1, 4])];
//! g.outputs = vec![ValueInfo::new("y", DType::F32, &[1, 4])];
//! g.initializers.insert("s".into(), Tensor::scalar_f32(0.5));
//! g.initializers.insert(
//!     "z".into(),
//!     Tensor::new(vec![], quantkit_graph::Data::U8(vec![128])).unwrap(),
//! );
//! g.nodes = vec![
//!     Node::new("q0", "QuantizeLinear", &["x", "s", "z"], &["xq"]),
//!     Node::new("dq0", "DequantizeLinear", &["xq", "s", "z"], &["xf"]),
//!     Node::new("relu", "Relu", &["xf"], &["r"]),
//!     Node::new("q1", "QuantizeLinear", &["r", "s", "z"], &["rq"]),
//!     Node::new("dq1", "DequantizeLinear", &["rq", "s", "z"], &["y"]),
//! ];
//! let plan = compile(&g, &EngineOptions::default())?;
//! assert!(plan.report().iter().any(|n| n.node == "relu" && n.is_integer()));
//! let x = Tensor::from_f32(&[1, 4], vec![-1.0, 0.25, 1.0, 3.0]);
//! let out = plan.run(vec![("x".to_string(), x)])?;
//! assert_eq!(out[0].1.as_f32().unwrap(), &[0.0, 0.0, 1.0, 3.0]);
//! # Ok::<(), quantkit_engine::EngineError>(())
//! ```

#![deny(missing_docs)]
// Kernels index several arrays with one loop counter; iterator chains would hide the formulas.
#![allow(clippy::needless_range_loop)]

mod batch;
mod compile;
mod error;
mod steps;
mod value;

pub use batch::{batch_chunk, chunked_runs, set_batch_chunk, BatchChunk, CHUNK_INPUT_ELEMS};
pub use compile::{compile, Requantizer};
pub use error::{EngineError, Result};

use quantkit_graph::{Dim, Tensor, ValueInfo};
use std::collections::HashMap;
use value::Val;

/// How the int32 accumulators of conv/GEMM steps are requantized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequantMode {
    /// f32 multiplier `f32(s_in·s_w)/s_out`, round half to even: ONNX Runtime's (MLAS)
    /// semantics, equation (K3a) of `docs/kernels.md`.
    #[default]
    Float,
    /// Fixed-point multiplier `M0·2^-n` (gemmlowp/TFLite), equation (K3b), double rounding.
    FixedPoint,
}

/// Compilation options.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Requantization arithmetic of conv/GEMM output stages.
    pub requant: RequantMode,
    /// Nodes to keep as float islands even when a pattern matches (debugging, A/B tests).
    pub keep_float: Vec<String>,
}

/// How one graph node is executed by the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// The anchor of an integer step; `kernel` names it (e.g. `conv2d u8 (per-channel)`).
    Integer {
        /// Kernel description.
        kernel: String,
    },
    /// Part of the integer step anchored at `into` (its activation, its Q/DQ).
    Fused {
        /// The anchor node.
        into: String,
    },
    /// A QuantizeLinear/DequantizeLinear that converts between float and integer values at
    /// the plan's edges or around a float island.
    Convert,
    /// A float island: the graph crate's operator on dequantized values.
    Float {
        /// Why no integer step took it.
        reason: String,
    },
    /// Folded into a constant at compile time, or never needed (e.g. a weight's DQ).
    Constant,
}

/// The placement of one graph node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReport {
    /// Node name.
    pub node: String,
    /// Operator.
    pub op_type: String,
    /// How it runs.
    pub placement: Placement,
}

impl NodeReport {
    /// Whether the node runs inside an integer step (anchor or fused part).
    pub fn is_integer(&self) -> bool {
        matches!(
            self.placement,
            Placement::Integer { .. } | Placement::Fused { .. }
        )
    }
}

/// What kind of work a plan step does, for profiles and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepKind {
    /// An integer kernel on 8-bit codes (or int32 accumulators), or the fused float input
    /// prologue that ends in codes.
    Integer,
    /// A QuantizeLinear/DequantizeLinear conversion (or another Q/DQ-family operator) run as
    /// the graph operator: the plan's edges, or around a float island.
    Convert,
    /// A float island: the graph crate's operator on dequantized (ONNX-ordered) values.
    Float,
}

impl StepKind {
    /// Short name: `int`, `q/dq`, `FLOAT`.
    pub fn label(self) -> &'static str {
        match self {
            StepKind::Integer => "int",
            StepKind::Convert => "q/dq",
            StepKind::Float => "FLOAT",
        }
    }
}

/// The wall time of one step in one profiled run ([`Plan::run_timed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepTime {
    /// Anchor node name.
    pub node: String,
    /// Anchor operator type.
    pub op_type: String,
    /// Kernel description (as in [`Plan::steps`]).
    pub kernel: String,
    /// Integer step, conversion or float island.
    pub kind: StepKind,
    /// Seconds.
    pub seconds: f64,
}

/// One step of a plan: a kernel over value slots.
pub(crate) struct Step {
    /// Anchor node name and operator (for errors).
    pub node: String,
    pub op_type: String,
    /// Slot of each input (`None`: omitted optional input).
    pub inputs: Vec<Option<usize>>,
    /// Slot of each output (`None`: unused output).
    pub outputs: Vec<Option<usize>>,
    pub kernel: Box<dyn steps::Kernel>,
}

/// A compiled integer plan. Build it with [`compile`], run it with [`Plan::run`].
pub struct Plan {
    steps: Vec<Step>,
    /// Constant values by slot (initializers and compile-time folded values).
    consts: Vec<Option<Val>>,
    /// Graph inputs and their slots.
    inputs: Vec<(ValueInfo, usize)>,
    /// Graph outputs and their slots.
    outputs: Vec<(String, usize)>,
    /// For each slot, the index of the last step reading it (`usize::MAX`: a graph output).
    last_use: Vec<usize>,
    report: Vec<NodeReport>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("steps", &self.steps.len())
            .field("report", &self.report)
            .finish()
    }
}

impl Plan {
    /// Every graph node with its placement, in graph order.
    pub fn report(&self) -> &[NodeReport] {
        &self.report
    }

    /// Number of steps executed per run.
    pub fn step_count(&self) -> usize {
        self.steps.len()
    }

    /// Names of the steps in execution order, with their kernel descriptions.
    pub fn steps(&self) -> Vec<(String, String)> {
        self.steps
            .iter()
            .map(|s| (s.node.clone(), s.kernel.describe()))
            .collect()
    }

    /// Runs the plan on named float (or whatever the model declares) inputs and returns the
    /// graph outputs in declaration order, as ONNX (NCHW) tensors.
    ///
    /// A batch of large images runs in chunks of whole images spread over the threads when
    /// every step keeps images apart ([`Plan::image_separable`]; the rule and its override,
    /// `QUANTKIT_BATCH_CHUNK`, in [`BatchChunk`]'s module docs and docs/kernels.md): the
    /// outputs are the same bytes for any thread count.
    pub fn run<S: AsRef<str>>(&self, inputs: Vec<(S, Tensor)>) -> Result<Vec<(String, Tensor)>> {
        let inputs: Vec<(String, Tensor)> = inputs
            .into_iter()
            .map(|(n, t)| (n.as_ref().to_string(), t))
            .collect();
        if let Some(chunks) = batch::plan_chunks(self, &inputs) {
            if let Some(out) = batch::run_chunked(self, &inputs, &chunks)? {
                return Ok(out);
            }
        }
        self.run_inner(inputs, None)
    }

    /// Whether every step computes each image (index along axis 0) from that image of its
    /// inputs alone, so [`Plan::run`] may run a batch in chunks of whole images. Steps not
    /// known to (float Gemm/MatMul, Reshape, reductions, control flow...) make it `false`.
    pub fn image_separable(&self) -> bool {
        self.steps.iter().all(|s| {
            let consts: Vec<Option<&Tensor>> = s
                .inputs
                .iter()
                .map(|i| i.and_then(|i| self.consts[i].as_ref().map(|v| &v.tensor)))
                .collect();
            s.kernel.per_image(&consts)
        })
    }

    /// Like [`Plan::run`], also returning the wall time of every step (anchor node, kernel
    /// description, seconds), in execution order.
    #[allow(clippy::type_complexity)]
    pub fn run_profiled<S: AsRef<str>>(
        &self,
        inputs: Vec<(S, Tensor)>,
    ) -> Result<(Vec<(String, Tensor)>, Vec<(String, String, f64)>)> {
        let (out, times) = self.run_timed(inputs)?;
        let times = times
            .into_iter()
            .map(|t| (t.node, t.kernel, t.seconds))
            .collect();
        Ok((out, times))
    }

    /// Like [`Plan::run`], also returning every step's wall time with its operator and
    /// [`StepKind`] (float islands marked), in execution order: the engine's profile.
    #[allow(clippy::type_complexity)]
    pub fn run_timed<S: AsRef<str>>(
        &self,
        inputs: Vec<(S, Tensor)>,
    ) -> Result<(Vec<(String, Tensor)>, Vec<StepTime>)> {
        let mut times = Vec::with_capacity(self.steps.len());
        let out = self.run_inner(inputs, Some(&mut times))?;
        Ok((out, times))
    }

    /// The kind of every step (integer, conversion, float island), in execution order.
    pub fn step_kinds(&self) -> Vec<StepKind> {
        self.steps.iter().map(|s| s.kernel.kind()).collect()
    }

    pub(crate) fn run_inner<S: AsRef<str>>(
        &self,
        inputs: Vec<(S, Tensor)>,
        mut times: Option<&mut Vec<StepTime>>,
    ) -> Result<Vec<(String, Tensor)>> {
        let mut env: Vec<Option<Val>> = vec![None; self.consts.len()];
        let known = || {
            self.inputs
                .iter()
                .map(|(i, _)| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut given: HashMap<String, Tensor> = HashMap::new();
        for (name, t) in inputs {
            let name = name.as_ref();
            if !self.inputs.iter().any(|(i, _)| i.name == name) {
                return Err(EngineError::UnknownInput {
                    name: name.to_string(),
                    known: known(),
                });
            }
            given.insert(name.to_string(), t);
        }
        for (vi, slot) in &self.inputs {
            let t = given
                .remove(&vi.name)
                .ok_or_else(|| EngineError::MissingInput {
                    name: vi.name.clone(),
                })?;
            check_input(vi, &t)?;
            env[*slot] = Some(Val::nchw(t));
        }
        for (i, step) in self.steps.iter().enumerate() {
            let mut args: Vec<Option<&Val>> = Vec::with_capacity(step.inputs.len());
            for s in &step.inputs {
                args.push(match s {
                    None => None,
                    Some(s) => Some(env[*s].as_ref().or(self.consts[*s].as_ref()).ok_or_else(
                        || EngineError::MissingValue {
                            node: step.node.clone(),
                            value: format!("slot {s}"),
                        },
                    )?),
                });
            }
            let t0 = times.as_ref().map(|_| std::time::Instant::now());
            // Identity at the input's last use: move the value on, no copy.
            if let ([Some(s)], [Some(o)], true) = (
                step.inputs.as_slice(),
                step.outputs.as_slice(),
                step.kernel.forwards_input(),
            ) {
                if self.last_use[*s] == i && env[*s].is_some() {
                    drop(args);
                    env[*o] = env[*s].take();
                    if let (Some(t), Some(t0)) = (times.as_mut(), t0) {
                        t.push(StepTime {
                            node: step.node.clone(),
                            op_type: step.op_type.clone(),
                            kernel: "Identity (moved)".into(),
                            kind: StepKind::Convert,
                            seconds: t0.elapsed().as_secs_f64(),
                        });
                    }
                    continue;
                }
            }
            let outs = step.kernel.run(step, &args)?;
            if let (Some(t), Some(t0)) = (times.as_mut(), t0) {
                t.push(StepTime {
                    node: step.node.clone(),
                    op_type: step.op_type.clone(),
                    kernel: step.kernel.describe(),
                    kind: step.kernel.kind(),
                    seconds: t0.elapsed().as_secs_f64(),
                });
            }
            drop(args);
            for (slot, v) in step.outputs.iter().zip(outs) {
                if let Some(slot) = slot {
                    env[*slot] = Some(v);
                }
            }
            for s in step.inputs.iter().flatten() {
                if self.last_use[*s] == i {
                    env[*s] = None;
                }
            }
        }
        self.outputs
            .iter()
            .map(|(name, slot)| {
                let v = env[*slot]
                    .clone()
                    .or_else(|| self.consts[*slot].clone())
                    .ok_or_else(|| EngineError::MissingValue {
                        node: "(graph output)".into(),
                        value: name.clone(),
                    })?;
                Ok((name.clone(), v.into_nchw()))
            })
            .collect()
    }
}

fn check_input(vi: &ValueInfo, t: &Tensor) -> Result<()> {
    let bad = || EngineError::InputMismatch {
        name: vi.name.clone(),
        expected: vi.describe(),
        got: format!("{}{:?}", t.dtype, t.shape),
    };
    if vi.dtype.is_some_and(|dt| dt != t.dtype) {
        return Err(bad());
    }
    if let Some(shape) = &vi.shape {
        if shape.len() != t.rank() {
            return Err(bad());
        }
        for (d, &n) in shape.iter().zip(&t.shape) {
            if let Dim::Known(k) = d {
                if *k != n {
                    return Err(bad());
                }
            }
        }
    }
    Ok(())
}
