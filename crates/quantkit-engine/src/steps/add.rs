//! The integer Add step, produced by `compile/add.rs`.

use super::{bad, check_dtype, first, kernel_err, GraphOp, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data, Tensor};

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
