//! The operator registry: one descriptor ([`OpDef`]) per operator, owned by the operator's
//! own file, and one line per operator in the `registry!` list of `ops/mod.rs`.
//!
//! Every layer asks the registry what an operator is: the executor and constant folding
//! take its evaluation, shape inference its shape rule, the quantizer its [`Facts`] (which
//! input is a weight, which inputs an integer kernel reads as codes, whether it only moves
//! values, its QOperator and dynamic forms) and the engine its kind. Other crates name an
//! operator by [`OpKind`], never by its op-type string.
//!
//! Adding an operator: write `ops/<name>.rs` with `eval` and a `pub const DEF: OpDef`, then
//! add one line `Name => module` to the `registry!` list in `ops/mod.rs`; that line also
//! declares the module, so nothing else changes.

use super::{EvalFn, OpCtx};
use crate::tensor::{DType, Tensor};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The default ONNX domain as the IR stores it (`ai.onnx` is accepted as a synonym).
pub const ONNX_DOMAIN: &str = "";
/// ONNX Runtime's contrib-operator domain.
pub const MS_DOMAIN: &str = "com.microsoft";
/// The classical machine-learning operators (Binarizer, TreeEnsemble...).
pub const ML_DOMAIN: &str = "ai.onnx.ml";
/// Operators ONNX is still shaping (FlexAttention).
pub const PREVIEW_DOMAIN: &str = "ai.onnx.preview";

/// Whether `domain` names the default ONNX operator set (`""` or `ai.onnx`).
pub fn is_onnx_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// Element type and static shape of one value, as shape inference sees it.
pub type Info = (DType, Vec<usize>);

/// What a shape rule sees besides the node: the inputs' infos (`None` when unknown or
/// omitted) and the constant inputs.
pub struct InferIn<'a> {
    /// Input infos, in input order.
    pub ins: &'a [Option<&'a Info>],
    /// Constant tensors by value name (initializers).
    pub consts: &'a std::collections::BTreeMap<String, Tensor>,
}

impl<'a> InferIn<'a> {
    /// Info of input `i`, if known.
    pub fn get(&self, i: usize) -> Option<&'a Info> {
        self.ins.get(i).copied().flatten()
    }
    /// Input `i` of `ctx.node` when it is a constant.
    pub fn konst(&self, ctx: &OpCtx, i: usize) -> Option<&'a Tensor> {
        ctx.node.inputs.get(i).and_then(|n| self.consts.get(n))
    }
}

/// A static shape rule: output infos from input infos, `None` when they cannot be known
/// without running the operator.
pub type InferFn = fn(&OpCtx, &InferIn) -> Option<Vec<Info>>;

/// The shape rule of operators whose single output has the type and shape of input 0.
pub fn same_as_first(_: &OpCtx, inp: &InferIn) -> Option<Vec<Info>> {
    Some(vec![inp.get(0)?.clone()])
}

/// Which activation inputs an integer kernel (quantkit's engine, ONNX Runtime's QDQ
/// fusions) reads as quantized codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantInputs {
    /// No integer form: the operator runs in float between DequantizeLinear/QuantizeLinear.
    None,
    /// Only input 0 (the weight, if any, is quantized per channel separately).
    First,
    /// Every input.
    All,
}

/// What other layers need to know about an operator without evaluating it.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// Index of the input holding a weight that is quantized per output channel when it
    /// is a constant (Conv, ConvTranspose, Gemm, MatMul: 1).
    pub weight: Option<usize>,
    /// Activation inputs an integer kernel reads quantized.
    pub quant_inputs: QuantInputs,
    /// The outputs are input values moved, selected or repeated, never computed (Reshape,
    /// Transpose, MaxPool...): the operator runs on 8-bit codes with the input's scale.
    pub moves_values: bool,
    /// Each output element depends only on the input elements at the same (broadcast)
    /// position.
    pub elementwise: bool,
    /// Non-decreasing in input 0 for any values of the attributes and other inputs.
    pub monotone: bool,
    /// Element-wise with one data input: each output element is a function of the input
    /// element at the same position (given the attributes and constant inputs), so on
    /// 8-bit codes a 256-entry table computes it.
    pub unary: bool,
    /// Only changes the shape or the axis order (Reshape, Flatten, Transpose, Squeeze,
    /// Unsqueeze): every input element appears once in the output.
    pub layout: bool,
    /// The operator only clamps its input (`y = clamp(x, lo, hi)`, see
    /// [`crate::ops::clip::ClipBounds`]), so it can become the output clamp of the node
    /// before it.
    pub clamp: bool,
    /// The QOperator form ONNX Runtime's quantizer writes for it (QLinearConv, QGemm...).
    pub qlinear: Option<OpKind>,
    /// The dynamic-quantization form with int32 output (ConvInteger, MatMulInteger).
    pub integer: Option<OpKind>,
    /// The operator marks a model as quantized, so the integer engine runs it: the
    /// quantization operators and the accumulating integer operators (QuantizeLinear,
    /// DequantizeLinear, DynamicQuantizeLinear, QLinearConv, QLinearMatMul, QGemm,
    /// ConvInteger, MatMulInteger; a QOperator model's other contrib ops sit between these).
    pub quantized: bool,
    /// The output is not a function of the inputs (RandomNormal, Bernoulli...): never
    /// constant-folded.
    pub random: bool,
}

impl Facts {
    /// No facts: a float operator with no integer form.
    pub const NONE: Facts = Facts {
        weight: None,
        quant_inputs: QuantInputs::None,
        moves_values: false,
        elementwise: false,
        monotone: false,
        unary: false,
        layout: false,
        clamp: false,
        qlinear: None,
        integer: None,
        quantized: false,
        random: false,
    };
    /// An element-wise operator with no integer form.
    pub const ELEMENTWISE: Facts = Facts {
        elementwise: true,
        ..Facts::NONE
    };
    /// An operator that only moves values of input 0 (runs on codes).
    pub const MOVES: Facts = Facts {
        quant_inputs: QuantInputs::First,
        moves_values: true,
        ..Facts::NONE
    };
    /// An operator of the quantized integer world.
    pub const QUANTIZED: Facts = Facts {
        quantized: true,
        ..Facts::NONE
    };
}

/// How an operator that does not handle every narrow type takes bfloat16 inputs. The ONNX
/// reference computes bfloat16 with `ml_dtypes`, whose numpy ufuncs compute each operation
/// in f32 and round its result to bfloat16 (to nearest even); the node tests compare the
/// codes exactly, so an operator matches only if it rounds where the reference does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bf16 {
    /// bfloat16 inputs are refused (`Unsupported`).
    No,
    /// `eval` handles bfloat16 itself: it moves codes (Transpose, Gather, Where...) or does
    /// its own bfloat16 arithmetic, rounding where the reference rounds (Softmax, Elu,
    /// Attention).
    Codes,
    /// The executor decodes bfloat16 inputs to f32, runs the f32 `eval`, and rounds its f32
    /// outputs to bfloat16 once ([`crate::exec::eval_narrow`]). Exact for an operator the
    /// reference computes as one f32 operation per element rounded once (Add, Div,
    /// comparisons, ReduceMax; an f32 double rounding to bfloat16 is harmless for +, −, ×,
    /// ÷ and √ since 24 ≥ 2·8 + 2), or explicitly in f32 (MatMul and Einsum promote to
    /// f32; Celu's f32 `alpha` promotes its arithmetic to f32).
    Widen,
}

/// The descriptor of one operator.
#[derive(Clone, Copy)]
pub struct OpDef {
    /// Domain ("" = ai.onnx).
    pub domain: &'static str,
    /// Operator type, as in the file.
    pub name: &'static str,
    /// Oldest opset version of the domain whose semantics `eval` implements (the opset
    /// differences from there on are handled by the operator's file).
    pub since: i64,
    /// Evaluation (float, or exact integer for the quantization operators).
    pub eval: EvalFn,
    /// Static shape rule, if the operator has one.
    pub infer: Option<InferFn>,
    /// Facts other layers ask about.
    pub facts: Facts,
    /// For a control-flow operator (If, Loop, Scan), its evaluation with the enclosing
    /// scope and the observer; the executor calls it instead of `eval`, which can only
    /// report that the node needs a scope.
    pub control: Option<crate::exec::ControlFn>,
    /// Whether `eval` handles inputs of the narrow types ([`DType::is_narrow`]: bfloat16,
    /// float8, float4, int2/uint2) itself. The executor and constant folding refuse such
    /// inputs to every other operator ([`OpDef::check_inputs`]), because the codes in
    /// their storage would be read as plain integers.
    pub narrow_types: bool,
    /// How the operator takes bfloat16 inputs when it does not handle every narrow type
    /// ([`Bf16`]).
    pub bf16: Bf16,
    /// The operator's gradient (reverse mode), written beside its `eval` in its own file,
    /// for training on the graph (`quantkit-train`); `None` when it has none yet.
    pub backward: Option<super::grad::BackwardFn>,
}

impl OpDef {
    /// An ai.onnx operator with no shape rule and no facts.
    pub const fn onnx(name: &'static str, since: i64, eval: EvalFn) -> OpDef {
        OpDef {
            domain: ONNX_DOMAIN,
            name,
            since,
            eval,
            infer: None,
            facts: Facts::NONE,
            control: None,
            narrow_types: false,
            bf16: Bf16::No,
            backward: None,
        }
    }
    /// A com.microsoft (ONNX Runtime contrib) operator with no shape rule and no facts.
    pub const fn microsoft(name: &'static str, eval: EvalFn) -> OpDef {
        OpDef {
            domain: MS_DOMAIN,
            name,
            since: 1,
            eval,
            infer: None,
            facts: Facts::NONE,
            control: None,
            narrow_types: false,
            bf16: Bf16::No,
            backward: None,
        }
    }
    /// The same operator in another domain (`ML_DOMAIN`, `PREVIEW_DOMAIN`).
    pub const fn domain(mut self, domain: &'static str) -> OpDef {
        self.domain = domain;
        self
    }
    /// With a shape rule.
    pub const fn infer(mut self, infer: InferFn) -> OpDef {
        self.infer = Some(infer);
        self
    }
    /// A control-flow operator, evaluated by `control` with the enclosing scope.
    pub const fn control(mut self, control: crate::exec::ControlFn) -> OpDef {
        self.control = Some(control);
        self
    }
    /// With a gradient (see [`super::grad`]).
    pub const fn backward(mut self, backward: super::grad::BackwardFn) -> OpDef {
        self.backward = Some(backward);
        self
    }
    /// With facts.
    pub const fn facts(mut self, facts: Facts) -> OpDef {
        self.facts = facts;
        self
    }
    /// Declares that `eval` handles the narrow types (see [`OpDef::narrow_types`]).
    pub const fn narrow_types(mut self) -> OpDef {
        self.narrow_types = true;
        self
    }
    /// Declares that `eval` reads and writes bfloat16 codes itself ([`Bf16::Codes`]).
    pub const fn bf16_codes(mut self) -> OpDef {
        self.bf16 = Bf16::Codes;
        self
    }
    /// Declares that the operator's bfloat16 result is its f32 result rounded once
    /// ([`Bf16::Widen`]).
    pub const fn bf16_widen(mut self) -> OpDef {
        self.bf16 = Bf16::Widen;
        self
    }
    /// `Unsupported` if an input has a narrow type this operator does not handle.
    pub fn check_inputs(&self, inputs: &[Option<&Tensor>]) -> Result<(), crate::error::OpError> {
        if self.narrow_types {
            return Ok(());
        }
        let handled = |d: crate::DType| d == crate::DType::BF16 && self.bf16 != Bf16::No;
        match inputs
            .iter()
            .flatten()
            .find(|t| t.dtype.is_narrow() && !handled(t.dtype))
        {
            Some(t) => Err(crate::error::OpError::Unsupported(format!(
                "{} on {} input",
                self.name, t.dtype
            ))),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for OpDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpDef")
            .field("domain", &self.domain)
            .field("name", &self.name)
            .field("since", &self.since)
            .field("facts", &self.facts)
            .finish()
    }
}

/// Declares the operator modules, [`OpKind`] and its descriptors from `Kind => module`
/// lines (invoked once, in `ops/mod.rs`, whose directory holds the operator files): each
/// line declares `pub mod module;` (the file `ops/module.rs`), the variant `Kind` (the op
/// type) and makes `module::DEF` its descriptor (a test checks the names agree).
macro_rules! registry {
    ($($kind:ident => $module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every operator quantkit knows, by kind. `kind.def()` is its descriptor.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(missing_docs)]
        pub enum OpKind {
            $($kind),*
        }

        impl OpKind {
            /// Every registered operator, in registry order.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind),*];

            /// The operator's descriptor.
            pub fn def(self) -> &'static $crate::ops::registry::OpDef {
                match self {
                    $(OpKind::$kind => &$module::DEF),*
                }
            }
        }
    };
}
pub(crate) use registry;

/// Declared by the `registry!` list in `ops/mod.rs`; re-exported here for paths that name
/// the registry.
pub use super::OpKind;

impl OpKind {
    /// The kind of `op_type` in `domain` ("" or "ai.onnx" = the default domain), if quantkit
    /// has it.
    pub fn of(domain: &str, op_type: &str) -> Option<OpKind> {
        static INDEX: OnceLock<HashMap<(&'static str, &'static str), OpKind>> = OnceLock::new();
        let index = INDEX.get_or_init(|| {
            OpKind::ALL
                .iter()
                .map(|&k| ((k.def().domain, k.def().name), k))
                .collect()
        });
        let domain = if is_onnx_domain(domain) {
            ONNX_DOMAIN
        } else {
            domain
        };
        index.get(&(domain, op_type)).copied()
    }

    /// The op type as written in a model.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The domain ("" = ai.onnx).
    pub fn domain(self) -> &'static str {
        self.def().domain
    }

    /// The operator's facts.
    pub fn facts(self) -> &'static Facts {
        &self.def().facts
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_names_its_own_descriptor() {
        for &k in OpKind::ALL {
            assert_eq!(format!("{k:?}"), k.def().name, "registry line of {k:?}");
            assert_eq!(OpKind::of(k.domain(), k.name()), Some(k));
        }
    }

    #[test]
    fn lookup_accepts_the_ai_onnx_synonym_and_rejects_other_domains() {
        assert_eq!(OpKind::of("ai.onnx", "Conv"), Some(OpKind::Conv));
        assert_eq!(OpKind::of("", "Conv"), Some(OpKind::Conv));
        assert_eq!(OpKind::of(MS_DOMAIN, "Conv"), None);
        assert_eq!(OpKind::of(MS_DOMAIN, "QGemm"), Some(OpKind::QGemm));
        assert_eq!(OpKind::of("", "QGemm"), None);
        assert_eq!(OpKind::of("", "NoSuchOp"), None);
    }
}
