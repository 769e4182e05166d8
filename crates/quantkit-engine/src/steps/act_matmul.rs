//! MatMul of two quantized activations (attention's `Q·Kᵀ`, `P·V`), produced by
//! `compile/act_matmul.rs` from `DQ(a) → MatMul ← DQ(b) [→ Relu | Clip] → Q` and from
//! `QLinearMatMul` with a non-constant B: ONNX Runtime's QLinearMatMul arithmetic, i32
//! accumulation of `(a − za)(b − zb)` and the constant-weight GEMM's output stage
//! (`quantkit_kernels::gemm::matmul_codes_quant`). Shapes the kernel does not take (an
//! operand of rank < 2, K beyond the exact i32 range) run as the float island they were:
//! the QDQ graph's DQ → MatMul → Q, or the graph's QLinearMatMul.

use super::{alloc_len, bad, kernel_err, GraphOp, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data, Tensor};
use quantkit_kernels::gemm::{matmul_codes_quant, matmul_codes_shape, CodeTensor, Codes, MAX_K};
use quantkit_kernels::output::OutputStage;

/// What runs when the kernel does not take the shapes.
pub(crate) enum Fallback {
    /// The QDQ graph: each operand through its DequantizeLinear (`da`, `db`: the f32 value
    /// of each code byte, the graph operator's own), the graph's MatMul, then the graph
    /// QuantizeLinear's rule (`quantize_code`) and the fused activation's clamp on codes.
    Qdq {
        da: Box<[f32; 256]>,
        db: Box<[f32; 256]>,
        matmul: GraphOp,
        scale: f32,
        zp: i32,
        clamp: (i32, i32),
    },
    /// The graph's QLinearMatMul on the step's inputs (the node's eight).
    Node(GraphOp),
}

/// Integer MatMul of two code tensors with broadcast batch axes.
pub(crate) struct ActMatMulStep {
    pub a_dtype: DType,
    pub a_zp: i32,
    pub b_dtype: DType,
    pub b_zp: i32,
    /// The step input holding B (1 for the QDQ pattern, 3 for QLinearMatMul).
    pub b_input: usize,
    pub y_dtype: DType,
    pub stage: OutputStage,
    pub fallback: Fallback,
    pub desc: String,
}

/// The codes of an 8-bit tensor.
fn codes(t: &Tensor) -> Option<Codes<'_>> {
    match &t.data {
        Data::U8(d) => Some(Codes::U8(d)),
        Data::I8(d) => Some(Codes::I8(d)),
        _ => None,
    }
}

/// `table[byte]` of every code of `t` as an f32 tensor of its shape.
fn dequantize(t: &Tensor, table: &[f32; 256]) -> Tensor {
    let v: Vec<f32> = match &t.data {
        Data::U8(d) => d.iter().map(|&c| table[usize::from(c)]).collect(),
        Data::I8(d) => d.iter().map(|&c| table[usize::from(c as u8)]).collect(),
        _ => unreachable!("checked to be codes"),
    };
    Tensor::from_f32(&t.shape, v)
}

impl ActMatMulStep {
    fn run_fallback(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Tensor> {
        let owned: Vec<Option<std::borrow::Cow<'_, Tensor>>> =
            inputs.iter().map(|v| v.map(Val::to_nchw)).collect();
        let args: Vec<Option<&Tensor>> = owned.iter().map(|c| c.as_deref()).collect();
        match &self.fallback {
            Fallback::Node(op) => op
                .eval(&args)?
                .into_iter()
                .next()
                .ok_or_else(|| bad(step, "output", "no output".into())),
            Fallback::Qdq {
                da,
                db,
                matmul,
                scale,
                zp,
                clamp,
            } => {
                let (a, b) = (args[0].expect("checked"), args[1].expect("checked"));
                let fa = dequantize(a, da);
                let fb = dequantize(b, db);
                let y = matmul.eval(&[Some(&fa), Some(&fb)])?.remove(0);
                let v = y.to_f32_vec();
                let code = |x: f32| -> i32 {
                    let c = match self.y_dtype {
                        DType::U8 => i32::from(quantkit_core::quantize_code::<u8>(x, *scale, *zp)),
                        _ => i32::from(quantkit_core::quantize_code::<i8>(x, *scale, *zp)),
                    };
                    c.clamp(clamp.0, clamp.1)
                };
                Ok(match self.y_dtype {
                    DType::U8 => tensor_u8(y.shape, v.iter().map(|&x| code(x) as u8).collect()),
                    _ => tensor_i8(y.shape, v.iter().map(|&x| code(x) as i8).collect()),
                })
            }
        }
    }
}

impl Kernel for ActMatMulStep {
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let get = |i: usize, dtype: DType| -> Result<std::borrow::Cow<'_, Tensor>> {
            let what = format!("input {i}");
            let v = inputs
                .get(i)
                .copied()
                .flatten()
                .ok_or_else(|| bad(step, &what, "missing".into()))?;
            if v.tensor.dtype != dtype {
                return Err(bad(
                    step,
                    &what,
                    format!("expected {dtype} codes, got {}", v.tensor.dtype),
                ));
            }
            Ok(v.to_nchw())
        };
        let a = get(0, self.a_dtype)?;
        let b = get(self.b_input, self.b_dtype)?;
        let shape = match matmul_codes_shape(&a.shape, &b.shape) {
            Ok(s)
                if (1..=MAX_K).contains(a.shape.last().expect("rank ≥ 2"))
                    && b.shape.last() != Some(&0) =>
            {
                s
            }
            // Rank < 2, K = 0 or beyond the exact range, N = 0, or batch axes that do not
            // broadcast (the graph operator reports those): the float island.
            _ => return Ok(vec![Val::nchw(self.run_fallback(step, inputs)?)]),
        };
        let len = alloc_len(step, "output", &shape)?;
        let (ta, tb) = (
            CodeTensor {
                codes: codes(&a).expect("dtype checked"),
                shape: &a.shape,
                zero_point: self.a_zp,
            },
            CodeTensor {
                codes: codes(&b).expect("dtype checked"),
                shape: &b.shape,
                zero_point: self.b_zp,
            },
        );
        let t = match self.y_dtype {
            DType::U8 => {
                let mut out = vec![0u8; len];
                matmul_codes_quant(&ta, &tb, &self.stage, &mut out).map_err(kernel_err(step))?;
                tensor_u8(shape, out)
            }
            _ => {
                let mut out = vec![0i8; len];
                matmul_codes_quant(&ta, &tb, &self.stage, &mut out).map_err(kernel_err(step))?;
                tensor_i8(shape, out)
            }
        };
        Ok(vec![Val::nchw(t)])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
}
