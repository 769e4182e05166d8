//! Steps on 8-bit codes, produced by `compile/codes.rs`: a 256-entry table (element-wise
//! ops) and/or a layout operator on the codes.

use super::{bad, check_dtype, first, GraphOp, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data, Tensor};

/// A 256-entry map of 8-bit codes: `table[code as u8]` is the output code's byte.
#[derive(Clone)]
pub(crate) struct Table {
    pub bytes: Vec<u8>,
    pub out: DType,
}

impl Table {
    /// Applies the table, keeping shape and layout.
    pub(super) fn apply(&self, v: Val) -> Val {
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

/// An operator on codes: a layout op (the graph crate's Flatten/Reshape/Transpose/...
/// applied to the 8-bit tensor in ONNX order) and/or an element-wise table.
pub(crate) struct CodeStep {
    /// Layout operator, run on the codes with the step's other inputs (constants).
    pub layout: Option<GraphOp>,
    pub table: Option<Table>,
    pub x_dtype: DType,
    /// Inputs of the layout operator replaced by these constants (Pad's constant value as
    /// a code).
    pub consts: Vec<(usize, Tensor)>,
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
                let mut args: Vec<Option<&Tensor>> = owned.iter().map(|c| c.as_deref()).collect();
                for (k, t) in &self.consts {
                    if args.len() <= *k {
                        args.resize(*k + 1, None);
                    }
                    args[*k] = Some(t);
                }
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
