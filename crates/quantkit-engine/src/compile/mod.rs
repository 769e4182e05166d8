//! Compilation of a graph into a [`Plan`]: the patterns that turn the QDQ layout (and
//! QOperator nodes) into integer steps, then the passes that make the steps a plan.
//!
//! # Patterns
//!
//! Nodes are visited in graph order. A node an earlier step absorbed is skipped; any other
//! node is tried as the anchor of the pattern its operator selects in
//! [`Matcher::try_match`], in this order (each matcher sits beside the step it produces):
//!
//! | anchor | matcher (`compile/`) | step (`steps/`) |
//! |---|---|---|
//! | com.microsoft `QGemm` | `gemm.rs` `qgemm` | `gemm.rs` `GemmStep` |
//! | `Conv` | `conv.rs` `conv` (+ a following MaxPool: `max_pool_after`) | `conv.rs` `ConvStep` |
//! | `ConvTranspose` | `conv_transpose.rs` `conv_transpose` | `conv_transpose.rs` `ConvTransposeStep` |
//! | `Gemm`, `MatMul` | `gemm.rs` `gemm` (+ a Flatten in front: `flatten_gemm.rs`), else (MatMul) `act_matmul.rs` `act_matmul` (two activations) | `gemm.rs` `GemmStep` (+ `flatten_gemm.rs` `FlatInput`), `act_matmul.rs` `ActMatMulStep` |
//! | `QLinearConv` | `conv.rs` `qlinear_conv` | `conv.rs` `ConvStep` |
//! | `QLinearMatMul` | `gemm.rs` `qlinear_matmul` (constant 2-D B), else `act_matmul.rs` `qlinear_matmul_codes` | `gemm.rs` `GemmStep`, `act_matmul.rs` `ActMatMulStep` |
//! | `MaxPool` | `pool.rs` `max_pool_codes` on codes, else `max_pool` | `pool.rs` `MaxPoolStep` |
//! | `ConvInteger`, `MatMulInteger` | `dynamic.rs` `dynamic` | `dynamic.rs` `DynamicStep` |
//! | `Add`, `Sub`, `Mul`, `Div` | `binary.rs` `code_function` (both operands from one tensor's codes: SiLU), else `binary_codes` (two code tensors), else `prologue.rs` `prologue` | `codes.rs` `CodeStep` (table), `binary.rs` `BinaryStep`, `prologue.rs` `PrologueStep` |
//! | `Concat` | `concat.rs` `concat` | `concat.rs` `ConcatStep` |
//! | `GlobalAveragePool` | `pool.rs` `global_avg_pool` | `pool.rs` `GlobalAvgPoolStep` |
//! | `PRelu` | `prelu.rs` `prelu` | `prelu.rs` `ChannelTableStep` (a table per channel) |
//! | layout ops (`Facts::layout`) | `codes.rs` `layout_codes` on codes, else `codes` | `codes.rs` `CodeStep` |
//! | element-wise ops (`Facts::unary`) | `codes.rs` `codes`, else `codes_clamped` (the op and a Relu/Clip before the Q, one table) | `codes.rs` `CodeStep` |
//! | value-moving ops (`is_move_op`: Slice, Gather, Tile, Resize nearest, Pad constant, ...) | `codes.rs` `codes` | `codes.rs` `CodeStep` |
//!
//! A node no pattern takes, or whose pattern's preconditions fail (the reason goes into the
//! report), becomes a step running the graph crate's operator (`steps/graph_op.rs`): a float
//! island or a Q/DQ conversion. The matchers share `helpers.rs` (graph queries, the
//! `DQ → op → Q` sandwich, the `[Relu | Clip] → Q` tail) and `quant.rs` (quantization
//! parameters, weights, bias, output stage, code tables).
//!
//! # Adding a pattern
//!
//! 1. `compile/NAME.rs`: a method `fn NAME(&self, ni: usize) -> Why<Matched>` in an
//!    `impl Matcher` block, returning why not when a precondition fails; `mod NAME;` below.
//! 2. `steps/NAME.rs`: the step, a struct implementing `Kernel`; `mod NAME;` and
//!    `pub(crate) use` in `steps/mod.rs`.
//! 3. One line in [`Matcher::try_match`]'s table sending the anchor's operator to `NAME`.
//!
//! # Passes
//!
//! [`compile`] runs the passes of `passes.rs`: match, remove dead steps, allocate slots, fold
//! constants, compose chains of table steps into one, report, liveness.

use crate::error::Result;
use crate::steps::Kernel;
use crate::{EngineOptions, Plan, Step};
use codes::{is_layout_op, is_move_op, is_table_op};
use helpers::{Matcher, Why};
use quantkit_graph::Graph;
use quantkit_graph::OpKind;

mod act_matmul;
mod binary;
mod codes;
mod concat;
mod conv;
mod conv_transpose;
mod dynamic;
mod flatten_gemm;
mod gemm;
pub(crate) mod helpers;
mod passes;
mod pool;
mod prelu;
mod prologue;
mod quant;

pub use quant::Requantizer;

/// A matched pattern: one integer step standing for several nodes.
struct Matched {
    kernel: Box<dyn Kernel>,
    /// Value names the step reads (input 0 is the 8-bit codes).
    inputs: Vec<String>,
    /// The value it writes (the final QuantizeLinear's output).
    output: String,
    /// Nodes it absorbs besides the anchor (activation, QuantizeLinear).
    absorbed: Vec<usize>,
    /// DequantizeLinear nodes it reads through (dropped when nothing else reads them).
    through: Vec<usize>,
    kernel_desc: String,
}

impl<'g> Matcher<'g> {
    /// Tries the integer pattern anchored at node `ni`.
    fn try_match(&self, ni: usize) -> Option<Why<Matched>> {
        let n = &self.g.nodes[ni];
        // Every pattern reads its anchor's first output; a node without one (a hostile
        // file's Concat with no outputs) is left to the float executor, which reports it.
        if n.outputs.first().is_none_or(|o| o.is_empty()) {
            return None;
        }
        // Codes straight from another step (QOperator models): MaxPool and layout ops.
        let codes = || n.inputs.first().and_then(|x| self.code_dtype(x));
        let m = match n.kind()? {
            OpKind::QGemm => self.qgemm(ni),
            OpKind::Conv => self.conv(ni),
            OpKind::ConvTranspose => self.conv_transpose(ni),
            // A constant B is a weight; otherwise (or a B the GEMM step does not take) a
            // product of two activations.
            OpKind::Gemm => self.gemm(ni),
            OpKind::MatMul => self.gemm(ni).or_else(|e| {
                self.act_matmul(ni)
                    .map_err(|e2| format!("{e}; as a product of two activations: {e2}"))
            }),
            OpKind::QLinearConv => self.qlinear_conv(ni),
            OpKind::QLinearMatMul => self.qlinear_matmul(ni).or_else(|e| {
                self.qlinear_matmul_codes(ni)
                    .map_err(|e2| format!("{e}; as a product of two activations: {e2}"))
            }),
            OpKind::MaxPool => match codes() {
                Some(dt) => self.max_pool_codes(ni, dt),
                None => self.max_pool(ni),
            },
            OpKind::ConvInteger | OpKind::MatMulInteger => self.dynamic(ni),
            // A function of one tensor's codes (SiLU: x·σ(x)) as a table, else two quantized
            // operands (exact f32), else a float input prologue.
            OpKind::Add | OpKind::Sub | OpKind::Mul | OpKind::Div => self
                .code_function(ni)
                .or_else(|_| self.binary_codes(ni))
                .or_else(|e| self.prologue(ni).map_err(|_| e)),
            OpKind::Concat => self.concat(ni),
            OpKind::PRelu => self.prelu(ni),
            OpKind::GlobalAveragePool => self.global_avg_pool(ni),
            _ if is_layout_op(n) => match codes() {
                Some(dt) => self.layout_codes(ni, dt),
                None => self.codes(ni, true),
            },
            _ if is_table_op(n) => self
                .codes(ni, false)
                .or_else(|e| self.codes_clamped(ni).map_err(|_| e)),
            _ if is_move_op(n) => self.codes(ni, true),
            _ => return None,
        };
        Some(if self.opts.keep_float.iter().any(|k| k == &n.name) {
            Err("kept in float by EngineOptions::keep_float".into())
        } else {
            m
        })
    }
}

/// Compiles a graph into an integer plan. Patterns whose preconditions fail (and operators
/// without an integer kernel) become float islands; only an operator that neither the
/// kernels nor the graph crate implement is an error.
pub fn compile(g: &Graph, opts: &EngineOptions) -> Result<Plan> {
    let (pending, mut placed) = passes::match_patterns(g, opts)?;
    let pending = passes::remove_dead_steps(g, pending, &mut placed);
    let mut slots = passes::allocate_slots(g, pending);
    let steps = passes::fold_constants(slots.steps, &mut slots.consts, &mut placed.placement)?;
    let steps = passes::fuse_tables(steps, &slots.outputs);
    let report = passes::report(g, placed, &steps);
    let steps: Vec<Step> = steps.into_iter().map(|(_, step)| step).collect();
    let last_use = passes::liveness(&steps, slots.consts.len(), &slots.outputs);
    Ok(Plan {
        steps,
        consts: slots.consts,
        inputs: slots.inputs,
        outputs: slots.outputs,
        last_use,
        report,
    })
}
