//! The integer GEMM step, produced by `compile/gemm.rs` (QDQ `Gemm`/`MatMul`,
//! `QLinearMatMul`, com.microsoft `QGemm`).

use super::flatten_gemm::FlatInput;
use super::{alloc_len, bad, check_dtype, first, kernel_err, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data};
use quantkit_kernels::gemm::{gemm_quant, Activations, PackedWeights};
use quantkit_kernels::output::OutputStage;
use std::borrow::Cow;

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

impl Kernel for GemmStep {
    fn per_image(&self, _consts: &[Option<&quantkit_graph::Tensor>]) -> bool {
        // A 2-D A (Gemm, or the rows of an absorbed Flatten): one row per image times
        // constant weights. MatMul's A may be 1-D (its only axis is not a batch).
        self.exactly_2d || self.flat.is_some()
    }
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
        let len = alloc_len(step, "output", &[m, nn])?;
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
