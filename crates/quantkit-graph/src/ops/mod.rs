//! Operators, one per file. Each file parses its attributes, checks shapes and evaluates the
//! operator in float (or, for the quantization operators, in exact integer arithmetic).
//!
//! An operator is a plain function `fn(&OpCtx, &[Option<&Tensor>]) -> Result<Vec<Tensor>>`:
//! inputs are borrowed (`None` for an omitted optional input) and outputs are fresh tensors.
//! The same functions serve the executor, constant folding and (as forward passes) training.

use crate::error::OpError;
use crate::ir::Node;
use crate::tensor::{DType, Data, Tensor};

pub use registry::{
    is_onnx_domain, same_as_first, Bf16, Facts, InferFn, InferIn, Info, OpDef, QuantInputs,
    ML_DOMAIN, MS_DOMAIN, ONNX_DOMAIN, PREVIEW_DOMAIN,
};

pub mod binary;
pub mod grad;
pub mod index;
pub mod int_kernels;
pub mod norm;
pub mod pool;
pub mod qlinear;
pub mod recurrent;
pub mod registry;
pub mod unary;

// The operators: one line each (the line declares the module `ops/<module>.rs`, the
// `OpKind` variant and its descriptor `<module>::DEF`; see `registry.rs`).
registry::registry! {
    // ai.onnx
    Abs => abs,
    Acos => acos,
    Acosh => acosh,
    Add => add,
    AffineGrid => affine_grid,
    And => and,
    ArgMax => arg_max,
    ArgMin => arg_min,
    Asin => asin,
    Asinh => asinh,
    Atan => atan,
    Atanh => atanh,
    Attention => attention,
    AveragePool => average_pool,
    BatchNormalization => batch_normalization,
    BitCast => bit_cast,
    BitShift => bit_shift,
    BitwiseAnd => bitwise_and,
    BitwiseNot => bitwise_not,
    BitwiseOr => bitwise_or,
    BitwiseXor => bitwise_xor,
    BlackmanWindow => blackman_window,
    Cast => cast,
    CastLike => cast_like,
    CausalConvWithState => causal_conv_with_state,
    Ceil => ceil,
    Celu => celu,
    CenterCropPad => center_crop_pad,
    Clip => clip,
    Col2Im => col2im,
    Compress => compress,
    Concat => concat,
    Constant => constant,
    ConstantOfShape => constant_of_shape,
    Conv => conv,
    ConvInteger => conv_integer,
    ConvTranspose => conv_transpose,
    Cos => cos,
    Cosh => cosh,
    CumProd => cum_prod,
    CumSum => cum_sum,
    DeformConv => deform_conv,
    DepthToSpace => depth_to_space,
    DequantizeLinear => dequantize_linear,
    Det => det,
    DFT => dft,
    Div => div,
    Dropout => dropout,
    DynamicQuantizeLinear => dynamic_quantize_linear,
    Einsum => einsum,
    Elu => elu,
    Equal => equal,
    Erf => erf,
    Exp => exp,
    Expand => expand,
    EyeLike => eye_like,
    Flatten => flatten,
    Floor => floor,
    Gather => gather,
    GatherElements => gather_elements,
    GatherND => gather_nd,
    Gelu => gelu,
    Gemm => gemm,
    GlobalAveragePool => global_average_pool,
    GlobalMaxPool => global_max_pool,
    Greater => greater,
    GreaterOrEqual => greater_or_equal,
    GridSample => grid_sample,
    GroupNormalization => group_normalization,
    GRU => gru,
    HammingWindow => hamming_window,
    HannWindow => hann_window,
    Hardmax => hardmax,
    HardSigmoid => hard_sigmoid,
    HardSwish => hard_swish,
    Identity => identity,
    If => r#if,
    InstanceNormalization => instance_normalization,
    IsInf => is_inf,
    IsNaN => is_nan,
    LayerNormalization => layer_normalization,
    LeakyRelu => leaky_relu,
    Less => less,
    LessOrEqual => less_or_equal,
    LinearAttention => linear_attention,
    Log => log,
    LogSoftmax => log_softmax,
    Loop => r#loop,
    LpNormalization => lp_normalization,
    LpPool => lp_pool,
    LRN => lrn,
    LSTM => lstm,
    MatMul => mat_mul,
    MatMulInteger => mat_mul_integer,
    Max => max,
    MaxPool => max_pool,
    MaxRoiPool => max_roi_pool,
    MaxUnpool => max_unpool,
    Mean => mean,
    MeanVarianceNormalization => mean_variance_normalization,
    MelWeightMatrix => mel_weight_matrix,
    Min => min,
    Mish => mish,
    Mod => modulo,
    Mul => mul,
    Neg => neg,
    NegativeLogLikelihoodLoss => negative_log_likelihood_loss,
    NonMaxSuppression => non_max_suppression,
    NonZero => non_zero,
    Not => not,
    OneHot => one_hot,
    Or => or,
    Pad => pad,
    Pow => pow,
    PRelu => prelu,
    QLinearConv => qlinear_conv,
    QLinearMatMul => qlinear_mat_mul,
    QuantizeLinear => quantize_linear,
    Range => range,
    Reciprocal => reciprocal,
    ReduceL1 => reduce_l1,
    ReduceL2 => reduce_l2,
    ReduceLogSum => reduce_log_sum,
    ReduceLogSumExp => reduce_log_sum_exp,
    ReduceMax => reduce_max,
    ReduceMean => reduce_mean,
    ReduceMin => reduce_min,
    ReduceProd => reduce_prod,
    ReduceSum => reduce_sum,
    ReduceSumSquare => reduce_sum_square,
    Relu => relu,
    Reshape => reshape,
    Resize => resize,
    ReverseSequence => reverse_sequence,
    RMSNormalization => rms_normalization,
    RNN => rnn,
    RoiAlign => roi_align,
    RotaryEmbedding => rotary_embedding,
    Round => round,
    Scan => scan,
    Scatter => scatter,
    ScatterElements => scatter_elements,
    ScatterND => scatter_nd,
    Selu => selu,
    Shape => shape,
    Shrink => shrink,
    Sigmoid => sigmoid,
    Sign => sign,
    Sin => sin,
    Sinh => sinh,
    Size => size,
    Slice => slice,
    Softmax => softmax,
    SoftmaxCrossEntropyLoss => softmax_cross_entropy_loss,
    Softplus => softplus,
    Softsign => softsign,
    SpaceToDepth => space_to_depth,
    Split => split,
    Sqrt => sqrt,
    Squeeze => squeeze,
    STFT => stft,
    Sub => sub,
    Sum => sum,
    SwiGLU => swi_glu,
    Swish => swish,
    Tan => tan,
    Tanh => tanh,
    TensorScatter => tensor_scatter,
    TfIdfVectorizer => tf_idf_vectorizer,
    ThresholdedRelu => thresholded_relu,
    Tile => tile,
    TopK => top_k,
    Transpose => transpose,
    Trilu => trilu,
    Unique => unique,
    Unsqueeze => unsqueeze,
    Upsample => upsample,
    Where => r#where,
    Xor => xor,
    // com.microsoft: the ONNX Runtime contrib operators its quantizer writes
    QGemm => qgemm,
    QLinearAdd => qlinear_add,
    QLinearAveragePool => qlinear_average_pool,
    QLinearConcat => qlinear_concat,
    QLinearGlobalAveragePool => qlinear_global_average_pool,
    QLinearLeakyRelu => qlinear_leaky_relu,
    QLinearMul => qlinear_mul,
    QLinearSigmoid => qlinear_sigmoid,
    // ai.onnx.ml
    ArrayFeatureExtractor => array_feature_extractor,
    Binarizer => binarizer,
    TreeEnsemble => tree_ensemble,
    // ai.onnx.preview
    FlexAttention => flex_attention,
}

/// What an operator sees besides its inputs.
pub struct OpCtx<'a> {
    /// The node (attributes, names).
    pub node: &'a Node,
    /// Version of the default ONNX operator set the model imports.
    pub opset: i64,
}

/// Signature of an operator's evaluation.
pub type EvalFn = fn(&OpCtx, &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError>;

/// The implementation of `op_type` in `domain` ("" = ai.onnx), if there is one.
pub fn lookup(domain: &str, op_type: &str) -> Option<EvalFn> {
    OpKind::of(domain, op_type).map(|k| k.def().eval)
}

/// Required input `i`.
pub fn input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, OpError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or(OpError::MissingInput { index: i })
}

/// Optional input `i`.
pub fn opt_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

/// Required f32 input `i`.
pub fn f32_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a [f32], OpError> {
    let t = input(inputs, i)?;
    t.as_f32().ok_or_else(|| OpError::DType {
        index: i,
        expected: "float".into(),
        got: t.dtype.to_string(),
    })
}

/// Normalizes a possibly negative axis against `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) {
        return Err(OpError::Invalid(format!(
            "axis {axis} out of range for rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// The first element of input `index` as an integer (a per-tensor zero point), or an error
/// if the tensor is empty.
pub fn first_i64(t: &Tensor, index: usize) -> Result<i64, OpError> {
    t.to_i64_vec()
        .first()
        .copied()
        .ok_or_else(|| OpError::shape(format!("a non-empty tensor at input {index}"), &t.shape))
}

/// Integer values of a 1-D (or scalar) "shape-like" input (axes, pads, shape...).
pub fn ints_of(t: &Tensor) -> Vec<i64> {
    t.to_i64_vec()
}

/// Builds a tensor, mapping a size mismatch (a bug in an op) to an op error.
pub fn make(dtype: DType, shape: Vec<usize>, data: Data) -> Result<Tensor, OpError> {
    Tensor::new(shape, data)
        .map(|t| t.with_dtype(dtype))
        .map_err(|e| OpError::Invalid(e.to_string()))
}

/// The largest tensor an operator builds, in elements: the `tensor_elements` resource limit
/// ([`quantkit_core::limits::Limits`], 2^28 by default, `QUANTKIT_LIMITS` to change), so
/// every operator's output bound is the one configurable limit.
pub fn max_elements() -> usize {
    usize::try_from(quantkit_core::limits::Limits::current().tensor_elements).unwrap_or(usize::MAX)
}

/// The element count of a buffer `what` of `shape` an operator is about to allocate,
/// checked for overflow and against [`quantkit_core::limits::Limits::tensor_elements`]
/// (a Pad, Conv or pool with absurd pads or strides must fail before allocating).
pub fn alloc_len(what: &str, shape: &[usize]) -> Result<usize, OpError> {
    Ok(quantkit_core::limits::Limits::current().check_shape(what, shape)?)
}

/// Output size of a sliding window along one axis (ONNX conv/pool formula):
/// `floor_or_ceil((in + pb + pe − (d·(k−1)+1)) / s) + 1`; in ceil mode a window that would
/// start beyond the input and left padding is dropped (as PyTorch and the ONNX reference do).
pub fn window_out(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    ceil: bool,
) -> Result<usize, OpError> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(OpError::Invalid(
            "kernel, stride and dilation must be positive".into(),
        ));
    }
    // Checked: attributes come from the file, and wrapped sizes give a plausible wrong
    // shape (or an index of 2^63 later). Sizes stay within isize so the signed index
    // arithmetic of im2col and the pools cannot wrap either.
    let overflow = || {
        OpError::Invalid(format!(
            "window of kernel {kernel}, dilation {dilation} over input {input} padded by \
             {pad_begin} + {pad_end} overflows"
        ))
    };
    let eff = dilation
        .checked_mul(kernel - 1)
        .and_then(|v| v.checked_add(1))
        .filter(|&v| v <= isize::MAX as usize)
        .ok_or_else(overflow)?;
    let padded = input
        .checked_add(pad_begin)
        .and_then(|v| v.checked_add(pad_end))
        .filter(|&v| v <= isize::MAX as usize)
        .ok_or_else(overflow)?;
    if padded < eff {
        return Err(OpError::shape(
            format!("padded input ≥ effective kernel {eff}"),
            padded,
        ));
    }
    let num = padded - eff;
    let mut out = if ceil {
        num.div_ceil(stride) + 1
    } else {
        num / stride + 1
    };
    if ceil && out > 1 && (out - 1).saturating_mul(stride) >= input + pad_begin {
        out -= 1;
    }
    Ok(out)
}

/// Padding of a sliding-window operator: `pads`/`auto_pad` as written, resolved against an
/// input size by [`PadSpec::resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PadSpec {
    /// `auto_pad = NOTSET` with explicit `pads` (begins of every axis, then ends), or none
    /// (all zero).
    Explicit(Option<Vec<usize>>),
    /// `auto_pad = VALID`: no padding (`pads` is ignored).
    Valid,
    /// `auto_pad = SAME_UPPER`: output size `ceil(in / stride)`, the odd pad at the end.
    SameUpper,
    /// `auto_pad = SAME_LOWER`: the odd pad at the beginning.
    SameLower,
}

impl PadSpec {
    /// Reads `auto_pad` and `pads` (non-negative).
    pub fn parse(node: &Node) -> Result<PadSpec, OpError> {
        let auto_pad = node.attr_string("auto_pad", "NOTSET")?;
        Ok(match auto_pad.as_str() {
            "NOTSET" | "" => PadSpec::Explicit(match node.attr_ints("pads")? {
                None => None,
                Some(p) if p.iter().all(|&v| v >= 0) => {
                    Some(p.iter().map(|&v| v as usize).collect())
                }
                Some(p) => {
                    return Err(OpError::attr(
                        "pads",
                        format!("expected non-negative values, got {p:?}"),
                    ))
                }
            }),
            "VALID" => PadSpec::Valid,
            "SAME_UPPER" => PadSpec::SameUpper,
            "SAME_LOWER" => PadSpec::SameLower,
            other => return Err(OpError::attr("auto_pad", format!("unknown value {other}"))),
        })
    }

    /// Explicit begin/end pads for each spatial axis of an input of size `spatial`.
    pub fn resolve(
        &self,
        spatial: &[usize],
        kernel: &[usize],
        strides: &[usize],
        dilations: &[usize],
    ) -> Result<(Vec<usize>, Vec<usize>), OpError> {
        let n = spatial.len();
        match self {
            PadSpec::Explicit(None) | PadSpec::Valid => Ok((vec![0; n], vec![0; n])),
            PadSpec::Explicit(Some(pads)) => {
                if pads.len() != 2 * n {
                    return Err(OpError::attr(
                        "pads",
                        format!("expected {} non-negative values, got {pads:?}", 2 * n),
                    ));
                }
                Ok((pads[..n].to_vec(), pads[n..].to_vec()))
            }
            PadSpec::SameUpper | PadSpec::SameLower => {
                let mut b = vec![0; n];
                let mut e = vec![0; n];
                for i in 0..n {
                    let out = spatial[i].div_ceil(strides[i]);
                    let eff = dilations[i] * (kernel[i] - 1) + 1;
                    let total = ((out - 1) * strides[i] + eff).saturating_sub(spatial[i]);
                    let small = total / 2;
                    if *self == PadSpec::SameUpper {
                        b[i] = small;
                        e[i] = total - small;
                    } else {
                        b[i] = total - small;
                        e[i] = small;
                    }
                }
                Ok((b, e))
            }
        }
    }

    /// The pads when they do not depend on the input size (`NOTSET` or `VALID`), as
    /// begins then ends; `None` for `SAME_*`.
    pub fn fixed(&self) -> Option<Vec<usize>> {
        match self {
            PadSpec::Explicit(Some(p)) => Some(p.clone()),
            PadSpec::Explicit(None) | PadSpec::Valid => Some(Vec::new()),
            PadSpec::SameUpper | PadSpec::SameLower => None,
        }
    }
}

/// A list attribute of positive integers (strides, dilations, kernel_shape), `None` when
/// absent.
pub fn positive_ints(node: &Node, name: &str) -> Result<Option<Vec<usize>>, OpError> {
    match node.attr_ints(name)? {
        None => Ok(None),
        Some(v) if v.iter().all(|&x| x > 0) => Ok(Some(v.iter().map(|&x| x as usize).collect())),
        Some(v) => Err(OpError::attr(
            name,
            format!("expected positive values, got {v:?}"),
        )),
    }
}

/// `values` (or `[1; nd]` when absent) checked to have one entry per spatial axis.
pub fn per_axis(name: &str, values: &Option<Vec<usize>>, nd: usize) -> Result<Vec<usize>, OpError> {
    match values {
        None => Ok(vec![1; nd]),
        Some(v) if v.len() == nd => Ok(v.clone()),
        Some(v) => Err(OpError::attr(
            name,
            format!("expected {nd} positive values, got {v:?}"),
        )),
    }
}
