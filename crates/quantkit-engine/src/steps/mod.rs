//! The kernels a plan step can run: the graph crate's operator (float islands, Q/DQ at the
//! edges), integer conv, GEMM, max pool, and table/layout steps on 8-bit codes.
//! Each integer step sits in its own file beside the matcher that produces it
//! (`steps/conv.rs` ↔ `compile/conv.rs`, ...).

use crate::error::{EngineError, Result};
use crate::value::Val;
use crate::Step;
use quantkit_graph::{DType, Tensor};

mod act_matmul;
mod binary;
mod codes;
mod concat;
mod conv;
mod conv_transpose;
mod dynamic;
mod flatten_gemm;
mod gemm;
mod graph_op;
mod pool;
mod prelu;
mod prologue;

pub(crate) use act_matmul::{ActMatMulStep, Fallback};
pub(crate) use binary::BinaryStep;
pub(crate) use codes::{CodeStep, Table};
pub(crate) use concat::ConcatStep;
pub(crate) use conv::ConvStep;
pub(crate) use conv_transpose::ConvTransposeStep;
pub(crate) use dynamic::{DynOp, DynamicStep};
pub(crate) use flatten_gemm::FlatInput;
pub(crate) use gemm::GemmStep;
pub(crate) use graph_op::{ControlOp, GraphOp};
pub(crate) use pool::{GlobalAvgPoolStep, MaxPoolStep};
pub(crate) use prelu::ChannelTableStep;
pub(crate) use prologue::{ChainNode, ConstOp, PrologueStep, MAX_OPS};

/// What a step runs. Inputs are the step's input slots in order.
pub(crate) trait Kernel: Send + Sync {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>>;
    fn describe(&self) -> String;
    /// Integer step, conversion or float island (profiles).
    fn kind(&self) -> crate::StepKind {
        crate::StepKind::Integer
    }
    /// Whether the step's one output is its one input unchanged (Identity), so the plan
    /// may hand the input's buffer on instead of running the step when it is the input's
    /// last use.
    fn forwards_input(&self) -> bool {
        false
    }
    /// The step as a table-only [`CodeStep`] (one 256-entry map of codes, no layout
    /// operator), which the plan may compose with the table step reading its output.
    fn as_table_step(&self) -> Option<&CodeStep> {
        None
    }
    /// The step as a per-channel PRelu computed on u8 codes ([`ChannelTableStep`] with
    /// its `arith` form), which a conv may take into its output ([`Kernel::absorb`]).
    fn as_channel_table(&self) -> Option<&ChannelTableStep> {
        None
    }
    /// Takes `next` (a table-only step, [`Kernel::as_table_step`], or a computed per-channel
    /// PRelu, [`Kernel::as_channel_table`]), which reads this step's one output and nothing
    /// else reads, into this step: `true` when the step now writes `next`'s output (it
    /// maps its own codes), `false` when it cannot.
    fn absorb(&mut self, next: &dyn Kernel) -> bool {
        let _ = next;
        false
    }
    /// Whether the step computes each image (index along axis 0 of its inputs and outputs)
    /// from that image of its inputs alone, given its constant inputs (`consts[i]`: input
    /// `i` when it is a constant). A plan whose steps all do may run a batch in chunks of
    /// whole images (`batch.rs`). `false` unless the step says otherwise.
    fn per_image(&self, consts: &[Option<&Tensor>]) -> bool {
        let _ = consts;
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

/// The element count of a buffer `what` of `shape` a step is about to allocate, checked
/// for overflow and against `Limits::tensor_elements` (shapes computed from a mutated
/// model's pads, strides or weights must fail naming the node, not abort the process).
fn alloc_len(step: &Step, what: &str, shape: &[usize]) -> Result<usize> {
    quantkit_core::limits::Limits::current()
        .check_shape(what, shape)
        .map_err(|e| bad(step, what, e.to_string()))
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
