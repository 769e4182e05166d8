//! A model as a list of ONNX-like nodes over named parameters: the same description drives
//! training (on a [`Tape`]), inference and ONNX export.

use crate::error::{attr_err, Result};
use crate::ops::{
    Add, BatchNorm2d, Conv2d, ConvAttrs, ConvTranspose2d, ConvTransposeAttrs, Flatten,
    GlobalAvgPool, HardSwish, Linear, MaxPool2d, Normalize, PoolAttrs, Relu, Sigmoid,
};
use crate::params::{ParamId, ParamStore};
use crate::tape::{Tape, Var};
use crate::tensor::Tensor;

/// What one node computes. Parameter fields are ids in the model's [`ParamStore`].
#[derive(Clone, Debug, PartialEq)]
pub enum Layer {
    /// `(x − mean)/std` (ONNX `Sub` + `Div` with scalar constants).
    Normalize {
        /// Subtracted.
        mean: f32,
        /// Divided by.
        std: f32,
    },
    /// ONNX `Conv`.
    Conv {
        /// Attributes.
        attrs: ConvAttrs,
        /// `[M, C/group, kh, kw]`.
        weight: ParamId,
        /// `[M]`.
        bias: Option<ParamId>,
    },
    /// ONNX `ConvTranspose`.
    ConvTranspose {
        /// Attributes.
        attrs: ConvTransposeAttrs,
        /// `[C, M, kh, kw]`.
        weight: ParamId,
        /// `[M]`.
        bias: Option<ParamId>,
    },
    /// ONNX `Gemm` with transB = 1.
    Linear {
        /// `[out, in]`.
        weight: ParamId,
        /// `[out]`.
        bias: Option<ParamId>,
    },
    /// ONNX `BatchNormalization`.
    BatchNorm {
        /// γ.
        scale: ParamId,
        /// β.
        bias: ParamId,
        /// Running mean (not trainable).
        mean: ParamId,
        /// Running variance (not trainable).
        var: ParamId,
        /// ε.
        eps: f32,
        /// Running-statistics momentum (PyTorch convention: weight of the new batch).
        momentum: f32,
    },
    /// ONNX `Relu`.
    Relu,
    /// ONNX `HardSwish`.
    HardSwish,
    /// ONNX `Sigmoid`.
    Sigmoid,
    /// ONNX `MaxPool`.
    MaxPool(PoolAttrs),
    /// ONNX `GlobalAveragePool`.
    GlobalAvgPool,
    /// ONNX `Flatten` (axis 1).
    Flatten,
    /// ONNX `Add` of two node outputs.
    Add,
}

/// One node: a layer applied to earlier values. Value 0 is the model input; node `i`
/// produces value `i + 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique node name (also its output's name).
    pub name: String,
    /// The computation.
    pub layer: Layer,
    /// Input value ids.
    pub inputs: Vec<usize>,
}

/// What the model's output means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Logits `[N, classes]`, trained with softmax cross-entropy.
    Classify {
        /// Number of classes.
        classes: usize,
    },
    /// A reconstruction of the input, trained with mean squared error.
    Reconstruct,
}

/// A zoo model: architecture name, task, input shape, parameters and nodes.
#[derive(Clone, Debug)]
pub struct Model {
    /// Architecture name (`lenet`, ...).
    pub arch: String,
    /// Output meaning.
    pub task: Task,
    /// Shape of one input sample, `[C, H, W]`.
    pub input_shape: [usize; 3],
    /// Parameters and buffers.
    pub params: ParamStore,
    /// Nodes in execution order; the last one is the output.
    pub nodes: Vec<Node>,
}

/// The result of [`Model::forward`].
pub struct Forward {
    /// The model output.
    pub output: Var,
    /// Outputs of BatchNorm nodes in training mode, to fold their batch statistics into the
    /// running statistics with [`Model::update_running_stats`].
    pub batch_norms: Vec<(usize, Var)>,
}

impl Model {
    /// Records the forward pass of `x` on `tape`. In `training` mode BatchNorm uses batch
    /// statistics; parameters are recorded as trainable leaves when the tape records.
    pub fn forward(&self, tape: &mut Tape, x: Var, training: bool) -> Result<Forward> {
        let mut values: Vec<Var> = Vec::with_capacity(self.nodes.len() + 1);
        values.push(x);
        let mut batch_norms = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let ins: Vec<Var> = node
                .inputs
                .iter()
                .map(|&v| {
                    values.get(v).copied().ok_or_else(|| {
                        attr_err(
                            &node.name,
                            format!("input value {v} is not computed before this node"),
                        )
                    })
                })
                .collect::<Result<_>>()?;
            let mut p = |id: ParamId| {
                let param = self.params.get(id);
                if param.trainable {
                    tape.param(param.value.clone(), id)
                } else {
                    tape.constant(param.value.clone())
                }
            };
            let out = match &node.layer {
                Layer::Normalize { mean, std } => tape.apply(
                    Normalize {
                        mean: *mean,
                        std: *std,
                    },
                    &ins,
                )?,
                Layer::Conv {
                    attrs,
                    weight,
                    bias,
                } => {
                    let mut args = vec![ins[0], p(*weight)];
                    if let Some(b) = bias {
                        args.push(p(*b));
                    }
                    tape.apply(Conv2d::new(*attrs), &args)?
                }
                Layer::ConvTranspose {
                    attrs,
                    weight,
                    bias,
                } => {
                    let mut args = vec![ins[0], p(*weight)];
                    if let Some(b) = bias {
                        args.push(p(*b));
                    }
                    tape.apply(ConvTranspose2d::new(*attrs), &args)?
                }
                Layer::Linear { weight, bias } => {
                    let mut args = vec![ins[0], p(*weight)];
                    if let Some(b) = bias {
                        args.push(p(*b));
                    }
                    tape.apply(Linear, &args)?
                }
                Layer::BatchNorm {
                    scale,
                    bias,
                    mean,
                    var,
                    eps,
                    ..
                } => {
                    let args = [ins[0], p(*scale), p(*bias), p(*mean), p(*var)];
                    let v = tape.apply(BatchNorm2d::new(*eps, training), &args)?;
                    if training {
                        batch_norms.push((i, v));
                    }
                    v
                }
                Layer::Relu => tape.apply(Relu, &ins)?,
                Layer::HardSwish => tape.apply(HardSwish, &ins)?,
                Layer::Sigmoid => tape.apply(Sigmoid, &ins)?,
                Layer::MaxPool(a) => tape.apply(MaxPool2d::new(*a), &ins)?,
                Layer::GlobalAvgPool => tape.apply(GlobalAvgPool, &ins)?,
                Layer::Flatten => tape.apply(Flatten, &ins)?,
                Layer::Add => tape.apply(Add, &ins)?,
            };
            values.push(out);
        }
        Ok(Forward {
            output: *values.last().expect("value 0 is always present"),
            batch_norms,
        })
    }

    /// Moves every BatchNorm's running statistics towards the batch statistics of the last
    /// training forward: `running ← (1 − m)·running + m·batch` (unbiased batch variance).
    /// Statistics are only read back when the tape recorded the ops.
    pub fn update_running_stats(&mut self, tape: &Tape, fwd: &Forward) {
        for &(i, v) in &fwd.batch_norms {
            let Layer::BatchNorm {
                mean,
                var,
                momentum,
                ..
            } = self.nodes[i].layer
            else {
                continue;
            };
            let Some(bn) = tape.op::<BatchNorm2d>(v) else {
                continue;
            };
            let (bm, bv) = (bn.batch_mean().to_vec(), bn.batch_var_unbiased().to_vec());
            for (r, b) in self
                .params
                .get_mut(mean)
                .value
                .data_mut()
                .iter_mut()
                .zip(&bm)
            {
                *r = (1.0 - momentum) * *r + momentum * b;
            }
            for (r, b) in self
                .params
                .get_mut(var)
                .value
                .data_mut()
                .iter_mut()
                .zip(&bv)
            {
                *r = (1.0 - momentum) * *r + momentum * b;
            }
        }
    }

    /// Inference on a batch `[N, C, H, W]` (BatchNorm with running statistics).
    pub fn infer(&self, x: Tensor) -> Result<Tensor> {
        let mut tape = Tape::inference();
        let xv = tape.constant(x);
        let f = self.forward(&mut tape, xv, false)?;
        Ok(tape.take_value(f.output))
    }

    /// Number of trainable scalars.
    pub fn num_params(&self) -> usize {
        self.params.num_trainable()
    }
}
