//! A zoo model as a list of ONNX-like nodes over named parameters: the description the
//! zoo builds, exports ([`crate::export::to_graph`]) and trains on the graph IR
//! ([`crate::trainer::GraphModel`]). Inference runs the exported graph on
//! `quantkit-graph`'s float executor, the operators' own `eval`.

use crate::error::{Result, TrainError};
use crate::params::{ParamId, ParamStore};
use crate::tensor::Tensor;

/// Convolution attributes (ONNX `Conv`): strides, pads (top, left, bottom, right),
/// dilations, group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvAttrs {
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right).
    pub pads: [usize; 4],
    /// Dilations (h, w).
    pub dilation: [usize; 2],
    /// Number of groups (channels are split evenly).
    pub group: usize,
}

impl ConvAttrs {
    /// Stride `s`, symmetric padding `p`, no dilation, one group.
    pub fn new(stride: usize, pad: usize) -> Self {
        Self {
            stride: [stride, stride],
            pads: [pad; 4],
            dilation: [1, 1],
            group: 1,
        }
    }

    /// The same with `group` groups.
    pub fn with_group(mut self, group: usize) -> Self {
        self.group = group;
        self
    }
}

/// ConvTranspose attributes (ONNX `ConvTranspose`, one group): strides, pads (top, left,
/// bottom, right), dilations, output padding (h, w).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeAttrs {
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right).
    pub pads: [usize; 4],
    /// Dilations (h, w).
    pub dilation: [usize; 2],
    /// Extra rows/columns added at the bottom/right of the output.
    pub output_padding: [usize; 2],
}

impl ConvTransposeAttrs {
    /// Stride `s`, no padding (the usual 2×2 stride-2 upsampler is `new(2)`).
    pub fn new(stride: usize) -> Self {
        Self {
            stride: [stride, stride],
            pads: [0; 4],
            dilation: [1, 1],
            output_padding: [0, 0],
        }
    }
}

/// Max pooling attributes (ONNX `MaxPool`, floor output size, no dilation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolAttrs {
    /// Kernel (h, w).
    pub kernel: [usize; 2],
    /// Strides (h, w).
    pub stride: [usize; 2],
    /// Pads (top, left, bottom, right); padded cells never win the max.
    pub pads: [usize; 4],
}

impl PoolAttrs {
    /// Square kernel `k`, stride `s`, no padding.
    pub fn new(k: usize, s: usize) -> Self {
        Self {
            kernel: [k, k],
            stride: [s, s],
            pads: [0; 4],
        }
    }
}

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

impl Model {
    /// Inference on a batch `[N, C, H, W]` (BatchNorm with running statistics): the
    /// exported graph on `quantkit-graph`'s float executor.
    pub fn infer(&self, x: Tensor) -> Result<Tensor> {
        let graph = crate::export::to_graph(self);
        let shape = x.shape().to_vec();
        let out = quantkit_graph::execute(
            &graph,
            vec![(
                "input".into(),
                quantkit_graph::Tensor::from_f32(&shape, x.into_data()),
            )],
        )
        .map_err(|e| TrainError::Graph(format!("running `{}`: {e}", self.arch)))?;
        let y = out
            .into_iter()
            .next()
            .ok_or_else(|| TrainError::Graph(format!("`{}` has no output", self.arch)))?
            .1;
        Tensor::new(&y.shape, y.to_f32_vec())
    }

    /// Number of trainable scalars.
    pub fn num_params(&self) -> usize {
        self.params.num_trainable()
    }
}
