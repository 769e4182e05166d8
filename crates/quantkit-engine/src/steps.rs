//! The kernels a plan step can run: the graph crate's operator (float islands, Q/DQ at the
//! edges), integer conv, GEMM, max pool, and table/layout steps on 8-bit codes.

use crate::error::{EngineError, Result};
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::ops::{EvalFn, OpCtx};
use quantkit_graph::{DType, Data, Node, Tensor};
use quantkit_kernels::conv::{
    conv2d_i32, conv2d_output_shape, conv2d_quant, conv2d_quant_max_pool, ConvParams, ConvWeights,
    NhwcInput,
};
use quantkit_kernels::gemm::{gemm_i32, gemm_quant, Activations, PackedWeights, WeightLayout};
use quantkit_kernels::output::OutputStage;
use quantkit_kernels::pool::max_pool;
use std::borrow::Cow;
use std::sync::OnceLock;

mod prologue;

pub(crate) use prologue::{ChainNode, ConstOp, PrologueStep, MAX_OPS};

/// What a step runs. Inputs are the step's input slots in order.
pub(crate) trait Kernel: Send + Sync {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>>;
    fn describe(&self) -> String;
    /// Whether the step's one output is its one input unchanged (Identity), so the plan
    /// may hand the input's buffer on instead of running the step when it is the input's
    /// last use.
    fn forwards_input(&self) -> bool {
        false
    }
}

fn bad(step: &Step, value: &str, reason: String) -> EngineError {
    EngineError::BadOperand {
        node: step.node.clone(),
        op_type: step.op_type.clone(),
        value: value.to_string(),
        reason,
    }
}

fn kernel_err(step: &Step) -> impl FnOnce(quantkit_kernels::KernelError) -> EngineError + '_ {
    move |source| EngineError::Kernel {
        node: step.node.clone(),
        op_type: step.op_type.clone(),
        source,
    }
}

/// The 4-D input `x` in NHWC order (transposed if it is NCHW), or an error naming the step.
fn nhwc_input<'a>(step: &Step, x: &'a Val) -> Result<std::borrow::Cow<'a, Tensor>> {
    x.to_nhwc().ok_or_else(|| {
        bad(
            step,
            "input 0",
            format!("expected 4-D, got {:?}", x.tensor.shape),
        )
    })
}

fn first<'a>(step: &Step, inputs: &[Option<&'a Val>]) -> Result<&'a Val> {
    inputs
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| bad(step, "input 0", "missing".into()))
}

/// The graph crate's implementation of a node, on ONNX-ordered tensors.
pub(crate) struct GraphOp {
    pub node: Node,
    pub opset: i64,
    pub f: EvalFn,
}

impl GraphOp {
    pub fn eval(&self, args: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let ctx = OpCtx {
            node: &self.node,
            opset: self.opset,
        };
        (self.f)(&ctx, args).map_err(|source| EngineError::Op {
            node: self.node.name.clone(),
            op_type: self.node.op_type.clone(),
            source,
        })
    }
}

impl Kernel for GraphOp {
    fn run(&self, _step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let owned: Vec<Option<std::borrow::Cow<'_, Tensor>>> =
            inputs.iter().map(|v| v.map(Val::to_nchw)).collect();
        let args: Vec<Option<&Tensor>> = owned.iter().map(|c| c.as_deref()).collect();
        Ok(self.eval(&args)?.into_iter().map(Val::nchw).collect())
    }
    fn describe(&self) -> String {
        format!("{} (graph op)", self.node.op_type)
    }
    fn forwards_input(&self) -> bool {
        self.node.op_type == "Identity" && crate::compile::is_default_domain(&self.node)
    }
}

/// Checks that `v` holds 8-bit codes of `want` (u8 or i8).
fn check_dtype(step: &Step, v: &Val, want: DType) -> Result<()> {
    if v.tensor.dtype != want {
        return Err(bad(
            step,
            "input 0",
            format!("expected {want} codes, got {}", v.tensor.dtype),
        ));
    }
    Ok(())
}

/// Integer conv: `DQ → Conv → [Relu|Clip] → Q` as one NHWC kernel call.
pub(crate) struct ConvStep {
    pub weights: ConvWeights,
    pub stage: OutputStage,
    /// A following MaxPool on the codes (`→ Q → DQ → MaxPool → Q` with one set of
    /// parameters), run by the conv call itself.
    pub pool: Option<ConvParams>,
    pub x_dtype: DType,
    pub x_zp: i32,
    pub y_dtype: DType,
    pub desc: String,
}

impl Kernel for ConvStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let x = nhwc_input(step, x)?;
        let s = &x.shape;
        let shape = [s[0], s[1], s[2], s[3]];
        let mut out_shape = conv2d_output_shape(shape, &self.weights).map_err(kernel_err(step))?;
        if let Some(p) = &self.pool {
            let [ph, pw] = p
                .output_size(out_shape[1], out_shape[2])
                .map_err(kernel_err(step))?;
            out_shape = [out_shape[0], ph, pw, out_shape[3]];
        }
        let len: usize = out_shape.iter().product();
        let zp = self.x_zp;
        macro_rules! go {
            ($data:expr, $O:ty, $mk:ident) => {{
                let input = NhwcInput {
                    data: $data,
                    shape,
                    zero_point: zp,
                };
                let mut out = vec![<$O>::default(); len];
                match &self.pool {
                    Some(p) => {
                        conv2d_quant_max_pool(&input, &self.weights, &self.stage, p, &mut out)
                            .map(|_| ())
                    }
                    None => conv2d_quant(&input, &self.weights, &self.stage, &mut out),
                }
                .map_err(kernel_err(step))?;
                $mk(out_shape.to_vec(), out)
            }};
        }
        let t = match (&x.data, self.y_dtype) {
            (Data::U8(d), DType::U8) => go!(d, u8, tensor_u8),
            (Data::U8(d), _) => go!(d, i8, tensor_i8),
            (Data::I8(d), DType::U8) => go!(d, u8, tensor_u8),
            (Data::I8(d), _) => go!(d, i8, tensor_i8),
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        Ok(vec![Val {
            tensor: t,
            nhwc: true,
        }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}

/// Integer GEMM: `DQ → Gemm|MatMul (constant int8 B) → [Relu|Clip] → Q`.
pub(crate) struct GemmStep {
    pub weights: PackedWeights,
    pub stage: OutputStage,
    pub x_dtype: DType,
    pub x_zp: i32,
    pub y_dtype: DType,
    /// Gemm takes exactly 2-D A; MatMul any rank ≥ 1 (leading axes are rows).
    pub exactly_2d: bool,
    /// Set when the step reads the input of a `Flatten(axis = 1)` it absorbed.
    pub flat: Option<FlatInput>,
    pub desc: String,
}

/// A GEMM whose A is `Flatten(axis = 1)` of the step's input, read in place: the ONNX
/// order `[d0, d1·d2·…]` is the input's own bytes when it is stored NCHW, and an NHWC
/// `[n, h, w, c]` input is the `[n, h·w·c]` matrix of the same products in (h, w, c) order,
/// so it is multiplied by a copy of the weights whose K rows are permuted from (c, h, w) to
/// (h, w, c) order. Column sums, weight zero points and the output stage are per output
/// column and do not move.
pub(crate) struct FlatInput {
    /// The unpacked weights as handed to [`PackedWeights::from_i8`].
    w: Vec<i8>,
    layout: WeightLayout,
    zero_points: Vec<i32>,
    /// The permuted weights, packed for the first NHWC `[h, w, c]` the step sees; an input
    /// of another shape takes the transposing path.
    nhwc: OnceLock<([usize; 3], PackedWeights)>,
}

impl FlatInput {
    pub fn new(w: Vec<i8>, layout: WeightLayout, zero_points: Vec<i32>) -> Self {
        FlatInput {
            w,
            layout,
            zero_points,
            nhwc: OnceLock::new(),
        }
    }

    /// The weights for an NHWC input of spatial shape `hwc` (`h·w·c = K`), packed on first
    /// use; `None` when they were packed for another shape.
    fn nhwc_weights(
        &self,
        hwc: [usize; 3],
        k: usize,
        n: usize,
    ) -> quantkit_kernels::Result<Option<&PackedWeights>> {
        if self.nhwc.get().is_none() {
            let w = permute_k_chw_to_hwc(&self.w, hwc, k, n, self.layout);
            let packed = PackedWeights::from_i8(&w, k, n, self.layout, &self.zero_points)?;
            // Another thread may have won the race with another shape; `get` decides below.
            let _ = self.nhwc.set((hwc, packed));
        }
        let (shape, packed) = self.nhwc.get().expect("set above");
        Ok((*shape == hwc).then_some(packed))
    }
}

/// `w` (`[K, N]` or `[N, K]`, K in (c, h, w) order with `[h, w, c] = hwc`) with its K
/// index in (h, w, c) order: new row `(y·W + x)·C + ch` is old row `ch·H·W + y·W + x`.
pub(crate) fn permute_k_chw_to_hwc(
    w: &[i8],
    [h, wd, c]: [usize; 3],
    k: usize,
    n: usize,
    layout: WeightLayout,
) -> Vec<i8> {
    debug_assert_eq!(h * wd * c, k);
    debug_assert_eq!(w.len(), k * n);
    let old = |kn: usize| (kn % c) * h * wd + kn / c;
    let mut out = vec![0i8; w.len()];
    match layout {
        WeightLayout::KxN => {
            for (kn, row) in out.chunks_exact_mut(n.max(1)).enumerate().take(k) {
                let ko = old(kn);
                row.copy_from_slice(&w[ko * n..(ko + 1) * n]);
            }
        }
        WeightLayout::NxK => {
            for (dst, src) in out.chunks_exact_mut(k.max(1)).zip(w.chunks_exact(k.max(1))) {
                for (kn, d) in dst.iter_mut().enumerate() {
                    *d = src[old(kn)];
                }
            }
        }
    }
    out
}

impl Kernel for GemmStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let (k, nn) = (self.weights.k(), self.weights.n());
        // The A matrix (its bytes), its row count, the weights and the output shape.
        let (a, m, weights, out_shape) = match &self.flat {
            None => {
                let x = x.to_nchw();
                // MatMul of a 1-D A is a row vector times B with that axis dropped again.
                let rank_ok = if self.exactly_2d {
                    x.rank() == 2
                } else {
                    x.rank() >= 1
                };
                if !rank_ok || x.shape.last() != Some(&k) {
                    return Err(bad(
                        step,
                        "input 0",
                        format!("expected [.., {k}] (2-D for Gemm), got {:?}", x.shape),
                    ));
                }
                let m: usize = x.shape[..x.rank() - 1].iter().product();
                let mut out_shape = x.shape.clone();
                *out_shape.last_mut().expect("rank ≥ 1") = nn;
                (x, m, &self.weights, out_shape)
            }
            Some(flat) => {
                let s = &x.tensor.shape;
                let Some(&rows) = s.first() else {
                    return Err(bad(step, "input 0", "Flatten of a scalar".into()));
                };
                let cols: usize = s[1..].iter().product();
                if cols != k {
                    let onnx = if x.nhwc {
                        vec![s[0], s[3], s[1], s[2]]
                    } else {
                        s.clone()
                    };
                    return Err(bad(
                        step,
                        "input 0",
                        format!("Flatten(axis = 1) of {onnx:?} does not give {k} columns"),
                    ));
                }
                // NHWC with one channel has the NCHW bytes.
                let nhwc = x.nhwc && s[3] > 1;
                let permuted = if nhwc {
                    flat.nhwc_weights([s[1], s[2], s[3]], k, nn)
                        .map_err(kernel_err(step))?
                } else {
                    None
                };
                match permuted {
                    Some(w) => (Cow::Borrowed(&x.tensor), rows, w, vec![rows, nn]),
                    // NCHW bytes are already the flattened matrix.
                    None if !nhwc => (
                        Cow::Borrowed(&x.tensor),
                        rows,
                        &self.weights,
                        vec![rows, nn],
                    ),
                    None => (x.to_nchw(), rows, &self.weights, vec![rows, nn]),
                }
            }
        };
        let len = m * nn;
        let zp = self.x_zp;
        macro_rules! go {
            ($a:expr, $O:ty, $mk:ident) => {{
                let mut out = vec![<$O>::default(); len];
                gemm_quant(&$a, weights, &self.stage, &mut out).map_err(kernel_err(step))?;
                $mk(out_shape, out)
            }};
        }
        let t = match (&a.data, self.y_dtype) {
            (Data::U8(d), DType::U8) => go!(Activations::u8(d, m, k, zp), u8, tensor_u8),
            (Data::U8(d), _) => go!(Activations::u8(d, m, k, zp), i8, tensor_i8),
            (Data::I8(d), DType::U8) => go!(Activations::i8(d, m, k, zp), u8, tensor_u8),
            (Data::I8(d), _) => go!(Activations::i8(d, m, k, zp), i8, tensor_i8),
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        Ok(vec![Val::nchw(t)])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}

/// A 256-entry map of 8-bit codes: `table[code as u8]` is the output code's byte.
#[derive(Clone)]
pub(crate) struct Table {
    pub bytes: Vec<u8>,
    pub out: DType,
}

impl Table {
    /// Applies the table, keeping shape and layout.
    fn apply(&self, v: Val) -> Val {
        let bytes: Vec<u8> = match &v.tensor.data {
            Data::U8(d) => d.iter().map(|&c| self.bytes[c as usize]).collect(),
            Data::I8(d) => d.iter().map(|&c| self.bytes[c as u8 as usize]).collect(),
            _ => unreachable!("callers check for 8-bit codes"),
        };
        let shape = v.tensor.shape;
        let tensor = match self.out {
            DType::U8 => tensor_u8(shape, bytes),
            _ => tensor_i8(shape, bytes.into_iter().map(|b| b as i8).collect()),
        };
        Val {
            tensor,
            nhwc: v.nhwc,
        }
    }
}

/// Max pool on codes (max commutes with the monotone DQ → Q map), then the table when the
/// output's parameters differ from the input's.
pub(crate) struct MaxPoolStep {
    pub params: ConvParams,
    pub x_dtype: DType,
    pub table: Option<Table>,
}

impl Kernel for MaxPoolStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let x = nhwc_input(step, x)?;
        let s = &x.shape;
        let shape = [s[0], s[1], s[2], s[3]];
        let [oh, ow] = self
            .params
            .output_size(s[1], s[2])
            .map_err(kernel_err(step))?;
        let out_shape = vec![s[0], oh, ow, s[3]];
        let len = out_shape.iter().product();
        let t = match &x.data {
            Data::U8(d) => {
                let mut out = vec![0u8; len];
                max_pool(d, shape, &self.params, &mut out).map_err(kernel_err(step))?;
                tensor_u8(out_shape, out)
            }
            Data::I8(d) => {
                let mut out = vec![0i8; len];
                max_pool(d, shape, &self.params, &mut out).map_err(kernel_err(step))?;
                tensor_i8(out_shape, out)
            }
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        let v = Val {
            tensor: t,
            nhwc: true,
        };
        Ok(vec![match &self.table {
            Some(tb) => tb.apply(v),
            None => v,
        }])
    }
    fn describe(&self) -> String {
        format!(
            "max_pool {} {}x{}{}",
            self.x_dtype,
            self.params.kernel[0],
            self.params.kernel[1],
            if self.table.is_some() {
                " + requant table"
            } else {
                ""
            }
        )
    }
}

/// An operator on codes: a layout op (the graph crate's Flatten/Reshape/Transpose/...
/// applied to the 8-bit tensor in ONNX order) and/or an element-wise table.
pub(crate) struct CodeStep {
    /// Layout operator, run on the codes with the step's other inputs (constants).
    pub layout: Option<GraphOp>,
    pub table: Option<Table>,
    pub x_dtype: DType,
    pub desc: String,
}

impl Kernel for CodeStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let v = match &self.layout {
            Some(op) => {
                let owned: Vec<Option<std::borrow::Cow<'_, Tensor>>> =
                    inputs.iter().map(|v| v.map(Val::to_nchw)).collect();
                let args: Vec<Option<&Tensor>> = owned.iter().map(|c| c.as_deref()).collect();
                let t = op.eval(&args)?.into_iter().next().ok_or_else(|| {
                    bad(
                        step,
                        "output 0",
                        "the layout operator produced nothing".into(),
                    )
                })?;
                Val::nchw(t)
            }
            None => x.clone(),
        };
        Ok(vec![match &self.table {
            Some(tb) => tb.apply(v),
            None => v,
        }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}

/// Integer Add: `DQ(a) + DQ(b) [→ Relu|Clip] → Q` as QLinearAdd (`eltwise::add`, equation
/// in its doc: two f32 products and a sum, round half to even). Operands of different shapes
/// (broadcasting) take the float path: the graph crate's DQ → Add → Q, as in the QDQ graph.
pub(crate) struct AddStep {
    pub qa: quantkit_kernels::eltwise::QParams,
    pub qb: quantkit_kernels::eltwise::QParams,
    pub qy: quantkit_kernels::eltwise::QParams,
    pub dtype: DType,
    pub clamp: (i32, i32),
    /// DQ(a), DQ(b), the Add (and its activation), Q: the broadcasting fallback.
    pub float_path: Vec<GraphOp>,
    /// Constant inputs (scales, zero points) of each fallback op after input 0.
    pub float_args: Vec<Vec<Option<Tensor>>>,
}

impl AddStep {
    fn float(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let run = |k: usize, x: &[&Tensor]| -> Result<Tensor> {
            let mut args: Vec<Option<&Tensor>> = x.iter().map(|t| Some(*t)).collect();
            args.extend(self.float_args[k].iter().map(Option::as_ref));
            Ok(self.float_path[k].eval(&args)?.remove(0))
        };
        let fa = run(0, &[a])?;
        let fb = run(1, &[b])?;
        let mut v = run(2, &[&fa, &fb])?;
        for k in 3..self.float_path.len() {
            v = run(k, &[&v])?;
        }
        Ok(v)
    }
}

impl Kernel for AddStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let a = first(step, inputs)?;
        let b = inputs
            .get(1)
            .copied()
            .flatten()
            .ok_or_else(|| bad(step, "input 1", "missing".into()))?;
        check_dtype(step, a, self.dtype)?;
        check_dtype(step, b, self.dtype)?;
        let (a, b) = if a.nhwc == b.nhwc {
            (std::borrow::Cow::Borrowed(a), std::borrow::Cow::Borrowed(b))
        } else {
            let to = |v: &Val| -> Option<Val> {
                Some(Val {
                    tensor: v.to_nhwc()?.into_owned(),
                    nhwc: true,
                })
            };
            match (to(a), to(b)) {
                (Some(x), Some(y)) => (std::borrow::Cow::Owned(x), std::borrow::Cow::Owned(y)),
                _ => return Ok(vec![Val::nchw(self.float(&a.to_nchw(), &b.to_nchw())?)]),
            }
        };
        if a.tensor.shape != b.tensor.shape {
            return Ok(vec![Val::nchw(self.float(&a.to_nchw(), &b.to_nchw())?)]);
        }
        let shape = a.tensor.shape.clone();
        let (lo, hi) = self.clamp;
        let t = match (&a.tensor.data, &b.tensor.data) {
            (Data::U8(x), Data::U8(y)) => {
                let mut out = vec![0u8; x.len()];
                quantkit_kernels::eltwise::add(x, self.qa, y, self.qb, self.qy, lo, hi, &mut out)
                    .map_err(kernel_err(step))?;
                tensor_u8(shape, out)
            }
            (Data::I8(x), Data::I8(y)) => {
                let mut out = vec![0i8; x.len()];
                quantkit_kernels::eltwise::add(x, self.qa, y, self.qb, self.qy, lo, hi, &mut out)
                    .map_err(kernel_err(step))?;
                tensor_i8(shape, out)
            }
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        Ok(vec![Val {
            tensor: t,
            nhwc: a.nhwc,
        }])
    }
    fn describe(&self) -> String {
        format!("add {}", self.dtype)
    }
}

/// The integer operator of a [`DynamicStep`], with its weights packed once at compile time.
pub(crate) enum DynOp {
    /// ConvInteger: 2-D conv, NHWC inside the step.
    Conv(ConvWeights),
    /// MatMulInteger with a constant `[K, N]` B.
    Gemm(PackedWeights),
}

/// ONNX Runtime's dynamic-quantization chain as one step: `DynamicQuantizeLinear(x)`,
/// `ConvInteger`/`MatMulInteger` with constant int8 weights, `Cast` to f32, `Mul` by
/// `x_scale · w_scale[c]`, optional `Add` of `bias[c]`. Every float operation is the one the
/// graph crate's operators perform, in the same order, so the output is bit-identical to the
/// float executor's on the same graph.
pub(crate) struct DynamicStep {
    pub op: DynOp,
    /// Weight scale, one entry or one per output channel.
    pub w_scale: Vec<f32>,
    /// Bias, one entry or one per output channel.
    pub bias: Option<Vec<f32>>,
    /// A following float `Relu` (`max(y, 0)`, as the graph's operator computes it).
    pub relu: bool,
    /// A following float `MaxPool` (conv only), on the NHWC result.
    pub pool: Option<ConvParams>,
    /// Largest rank of the scale and bias constants: the broadcast output has at least this
    /// rank (leading 1s), as in the graph's `Mul`/`Add`.
    pub min_rank: usize,
    pub desc: String,
}

/// `DynamicQuantizeLinear` with the graph operator's own arithmetic: the codes (same order
/// as `v`), the scale and the zero point.
fn dynamic_quantize(v: &[f32]) -> (Vec<u8>, f32, i32) {
    let (q, scale, zp) = quantkit_graph::ops::dynamic_quantize_linear::quantize(v);
    (q, scale, zp as i32)
}

/// Accumulators per chunk of images of a dynamic conv (4 MiB of i32): the conv, its float
/// epilogue and the pool run chunk by chunk, so the data stays in cache between them and no
/// batch-sized i32 buffer is allocated (at 32 MiB and more glibc maps fresh pages for it on
/// every run, and page faults then cost as much as the conv).
const DYN_CHUNK_ACC: usize = 1 << 20;

impl DynamicStep {
    /// The graph's `Cast`, `Mul(x_scale · w_scale)`, `Add(bias)` and `Relu` on `acc`
    /// (channels fastest), written to `out`: one f32 rounding per operation, in the graph's
    /// order (Rust does not contract `a * b + c` into a fused multiply-add).
    fn epilogue(&self, acc: &[i32], x_scale: f32, channels: usize, out: &mut [f32]) {
        if channels == 0 {
            return;
        }
        let pick = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
        let sc: Vec<f32> = (0..channels)
            .map(|c| x_scale * pick(&self.w_scale, c))
            .collect();
        let bias: Vec<f32> = match &self.bias {
            Some(b) => (0..channels).map(|c| pick(b, c)).collect(),
            None => Vec::new(),
        };
        let relu = self.relu;
        for (a, y) in acc
            .chunks_exact(channels)
            .zip(out.chunks_exact_mut(channels))
        {
            if bias.is_empty() {
                for ((y, &a), &s) in y.iter_mut().zip(a).zip(&sc) {
                    let t = a as f32 * s;
                    *y = if relu { t.max(0.0) } else { t };
                }
            } else {
                for (((y, &a), &s), &b) in y.iter_mut().zip(a).zip(&sc).zip(&bias) {
                    let t = a as f32 * s + b;
                    *y = if relu { t.max(0.0) } else { t };
                }
            }
        }
    }
}

impl Kernel for DynamicStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        if x.tensor.dtype != DType::F32 {
            return Err(bad(
                step,
                "input 0",
                format!("expected f32, got {}", x.tensor.dtype),
            ));
        }
        let (y, out_shape, nhwc) = match &self.op {
            DynOp::Conv(w) => {
                let x = nhwc_input(step, x)?;
                let Data::F32(v) = &x.data else {
                    return Err(bad(step, "input 0", "not f32 data".into()));
                };
                // One scale and zero point for the whole tensor, as the graph computes them.
                let (q, x_scale, zp) = dynamic_quantize(v);
                let s = &x.shape;
                let shape = [s[0], s[1], s[2], s[3]];
                let [n, oh, ow, co] = conv2d_output_shape(shape, w).map_err(kernel_err(step))?;
                let [fh, fw] = match &self.pool {
                    Some(p) => p.output_size(oh, ow).map_err(kernel_err(step))?,
                    None => [oh, ow],
                };
                let (per_in, per_acc) = (shape[1] * shape[2] * shape[3], oh * ow * co);
                let chunk = (DYN_CHUNK_ACC / per_acc.max(1)).clamp(1, n.max(1));
                let per_y = fh * fw * co;
                let mut acc = vec![0i32; chunk * per_acc];
                // The float result before pooling, per chunk (only needed with a pool).
                let mut yc = vec![
                    0f32;
                    if self.pool.is_some() {
                        chunk * per_acc
                    } else {
                        0
                    }
                ];
                let mut y = vec![0f32; n * per_y];
                for b0 in (0..n).step_by(chunk) {
                    let nb = chunk.min(n - b0);
                    let input = NhwcInput {
                        data: &q[b0 * per_in..(b0 + nb) * per_in],
                        shape: [nb, shape[1], shape[2], shape[3]],
                        zero_point: zp,
                    };
                    let a = &mut acc[..nb * per_acc];
                    conv2d_i32(&input, w, a).map_err(kernel_err(step))?;
                    let yb = &mut y[b0 * per_y..(b0 + nb) * per_y];
                    match &self.pool {
                        Some(p) => {
                            let yc = &mut yc[..nb * per_acc];
                            self.epilogue(a, x_scale, co, yc);
                            max_pool(yc, [nb, oh, ow, co], p, yb).map_err(kernel_err(step))?;
                        }
                        None => self.epilogue(a, x_scale, co, yb),
                    }
                }
                (y, vec![n, fh, fw, co], true)
            }
            DynOp::Gemm(w) => {
                let x = x.to_nchw();
                let (k, n) = (w.k(), w.n());
                if x.rank() == 0 || x.shape.last() != Some(&k) {
                    return Err(bad(
                        step,
                        "input 0",
                        format!("expected [.., {k}], got {:?}", x.shape),
                    ));
                }
                let Data::F32(v) = &x.data else {
                    return Err(bad(step, "input 0", "not f32 data".into()));
                };
                let (q, x_scale, zp) = dynamic_quantize(v);
                let m = v.len() / k.max(1);
                let mut out_shape = x.shape.clone();
                *out_shape.last_mut().expect("rank ≥ 1") = n;
                while out_shape.len() < self.min_rank {
                    out_shape.insert(0, 1);
                }
                let mut acc = vec![0i32; m * n];
                gemm_i32(&Activations::u8(&q, m, k, zp), w, &mut acc).map_err(kernel_err(step))?;
                let mut y = vec![0f32; m * n];
                self.epilogue(&acc, x_scale, n, &mut y);
                (y, out_shape, false)
            }
        };
        let t =
            Tensor::new(out_shape, Data::F32(y)).map_err(|e| bad(step, "output", e.to_string()))?;
        Ok(vec![Val { tensor: t, nhwc }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}
