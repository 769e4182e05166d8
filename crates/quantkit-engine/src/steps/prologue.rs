//! The float prologue of a model's input: `x → (Add | Sub | Mul | Div with a constant)+ →
//! QuantizeLinear` (the input normalisation `(x − mean) / std` before the first quantized
//! layer) in one pass over `x`, where the graph ops take one pass and one allocation each.

use super::{bad, first, GraphOp, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_core::QuantType;
use quantkit_graph::ops::binary::Arith;
use quantkit_graph::tensor::broadcast_shapes;
use quantkit_graph::{DType, Data, Tensor};
use quantkit_kernels::quantize::{chain_quantize, ChainOp};
use rayon::prelude::*;

/// The longest chain of operations the step takes (the matcher stops there).
pub(crate) const MAX_OPS: usize = 16;

/// Elements per parallel task when the constants are all scalars.
const PAR_BLOCK: usize = 1 << 16;

/// One element-wise operation with a constant: `v op c`, or `c op v` when `const_first`.
#[derive(Debug, Clone)]
pub(crate) struct ConstOp {
    pub op: Arith,
    pub const_first: bool,
    /// One value, or one per channel.
    pub values: Vec<f32>,
    /// The constant's shape, which the output shape broadcasts with as in the graph op.
    pub shape: Vec<usize>,
}

/// One graph node of the chain for the fallback: the operator, the position of the running
/// value among its inputs and its constant inputs (`None` at that position).
pub(crate) struct ChainNode {
    pub op: GraphOp,
    pub pos: usize,
    pub args: Vec<Option<Tensor>>,
}

/// `x → ops → QuantizeLinear(scale, zp)` on f32 `x`, per element exactly the graph's
/// arithmetic in the graph's order: each operation one f32 `+ − · /` (`Arith` on f32, as
/// `ops::binary` applies it; a division stays a division), then
/// [`quantkit_core::quantize_code`], the graph QuantizeLinear's own per-element code
/// (`clamp(round_half_even(v / scale) + zp)`, NaN → `zp`). So the codes equal the float
/// executor's bit for bit, NaN, ±∞, ties and saturation included. The loop is
/// [`quantkit_kernels::quantize::chain_quantize`] (SIMD as the dispatched ISA allows).
///
/// Constants are scalars (any rank, one element) or per channel (`[C, 1, 1]` or
/// `[1, C, 1, 1]`, the axis third from the end of the output). Inputs the loop does not take
/// (not f32, or a per-channel constant that would broadcast `x` to a larger shape) run the
/// graph's nodes one by one instead: the same result, or the graph's error.
pub(crate) struct PrologueStep {
    pub ops: Vec<ConstOp>,
    pub scale: f32,
    pub zp: i32,
    pub dtype: DType,
    pub fallback: Vec<ChainNode>,
    pub desc: String,
}

impl PrologueStep {
    fn run_graph(&self, x: &Tensor) -> Result<Tensor> {
        let mut v = x.clone();
        for node in &self.fallback {
            let args: Vec<Option<&Tensor>> = node
                .args
                .iter()
                .enumerate()
                .map(|(i, a)| if i == node.pos { Some(&v) } else { a.as_ref() })
                .collect();
            v = node.op.eval(&args)?.remove(0);
        }
        Ok(v)
    }

    /// The output shape as the graph's broadcasting computes it, when the one-pass loop
    /// applies: every constant broadcasts into `x`'s shape without enlarging it.
    fn out_shape(&self, x: &[usize]) -> Option<Vec<usize>> {
        let mut shape = x.to_vec();
        for op in &self.ops {
            shape = broadcast_shapes(&shape, &op.shape)?;
        }
        (shape.iter().product::<usize>() == x.iter().product::<usize>()).then_some(shape)
    }

    /// The codes of `x` (output `shape`, channels on axis `rank − 3` when per channel).
    fn codes<T: QuantType>(&self, x: &[f32], shape: &[usize], out: &mut [T]) {
        let channels = self.ops.iter().map(|o| o.values.len()).max().unwrap_or(1);
        // Runs of elements that share one channel (and so one set of constants).
        let run = if channels > 1 {
            let r = shape.len();
            shape[r - 2] * shape[r - 1]
        } else {
            PAR_BLOCK
        };
        let work = |(i, (o, xs)): (usize, (&mut [T], &[f32]))| {
            let mut chain = [(ChainOp::Add, 0f32); MAX_OPS];
            for (c, op) in chain.iter_mut().zip(&self.ops) {
                let v = op.values[if op.values.len() > 1 { i % channels } else { 0 }];
                *c = (chain_op(op.op, op.const_first), v);
            }
            chain_quantize(xs, &chain[..self.ops.len()], self.scale, self.zp, o);
        };
        if run == 0 {
            return;
        }
        // Inside a chunk of whole images (`par::serial`) the other workers have their own.
        if x.len() <= run
            || (channels > 1 && x.len() <= PAR_BLOCK)
            || quantkit_kernels::par::in_serial()
        {
            out.chunks_mut(run)
                .zip(x.chunks(run))
                .enumerate()
                .for_each(work);
        } else {
            out.par_chunks_mut(run)
                .zip(x.par_chunks(run))
                .enumerate()
                .for_each(work);
        }
    }
}

impl Kernel for PrologueStep {
    fn per_image(&self, _consts: &[Option<&Tensor>]) -> bool {
        // Element-wise by constants (per tensor or per channel).
        true
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?.to_nchw();
        let shape = self.out_shape(&x.shape);
        let (Data::F32(xv), Some(shape)) = (&x.data, shape) else {
            return Ok(vec![Val::nchw(self.run_graph(&x)?)]);
        };
        // One channel: NCHW and NHWC are the same bytes, so hand the conv steps NHWC.
        let nhwc = shape.len() == 4 && shape[1] == 1;
        let stored = if nhwc {
            vec![shape[0], shape[2], shape[3], 1]
        } else {
            shape.clone()
        };
        let tensor = match self.dtype {
            DType::U8 => {
                let mut out = vec![0u8; xv.len()];
                self.codes(xv, &shape, &mut out);
                tensor_u8(stored, out)
            }
            DType::I8 => {
                let mut out = vec![0i8; xv.len()];
                self.codes(xv, &shape, &mut out);
                tensor_i8(stored, out)
            }
            dt => return Err(bad(step, "output", format!("{dt} codes"))),
        };
        Ok(vec![Val { tensor, nhwc }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}

/// The kernel operation of `v op c` (or `c op v` when `const_first`) in the graph's operand
/// order. IEEE addition and multiplication are commutative (the operand order can only pick
/// which NaN payload survives, and the quantization maps every NaN to the zero point), so
/// they ignore the order; subtraction and division keep it.
fn chain_op(op: Arith, const_first: bool) -> ChainOp {
    match (op, const_first) {
        (Arith::Add, _) => ChainOp::Add,
        (Arith::Mul, _) => ChainOp::Mul,
        (Arith::Sub, false) => ChainOp::Sub,
        (Arith::Sub, true) => ChainOp::SubFrom,
        (Arith::Div, false) => ChainOp::Div,
        (Arith::Div, true) => ChainOp::DivInto,
    }
}
