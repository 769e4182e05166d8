//! MatMul of two quantized activations → [`ActMatMulStep`] (`steps/act_matmul.rs`):
//! `DQ(a) → MatMul ← DQ(b) [→ Relu | Clip] → Q` with per-tensor parameters (attention's
//! `Q·Kᵀ` and `P·V`), and `QLinearMatMul` whose B is not a constant. The output stage is the
//! constant-weight GEMM's ([`Matcher::stage`] with the one weight scale `s_b`), so the step
//! computes what ONNX Runtime's QLinearMatMul does.

use super::helpers::{Matcher, Tail, Why};
use super::quant::saturation;
use super::Matched;
use crate::steps::{ActMatMulStep, Fallback, GraphOp};
use quantkit_graph::ops;
use quantkit_graph::OpKind;
use quantkit_kernels::gemm::MAX_K;

impl<'g> Matcher<'g> {
    /// Why the shapes known at compile time rule the kernel out, if they do: a rank below
    /// 2 (a graph input's declared rank, even with symbolic axes), or K too large.
    fn act_matmul_shapes(&self, a: &str, b: &str) -> Why<()> {
        for (what, v) in [("A", a), ("B", b)] {
            let known = match self.init(v) {
                Some(t) => Some(t.shape.clone()),
                None => match self.g.inputs.iter().find(|i| i.name == v) {
                    Some(i) => i.shape.as_ref().map(|s| vec![1; s.len()]),
                    None => self.batch1_shape(v),
                },
            };
            if let Some(s) = known {
                if s.len() < 2 {
                    return Err(format!(
                        "{what} `{v}` is {}-D: the batched kernel takes operands of rank ≥ 2",
                        s.len()
                    ));
                }
                let k = self.batch1_shape(v).and_then(|s| s.last().copied());
                if what == "A" && k.is_some_and(|k| k > MAX_K) {
                    return Err(format!(
                        "K = {} exceeds {MAX_K}, beyond which i32 accumulation is not exact",
                        k.unwrap_or(0)
                    ));
                }
            }
        }
        Ok(())
    }

    /// `DQ(a) → MatMul ← DQ(b) [→ Relu | Clip] → Q` anchored at the MatMul `ni`, both
    /// operands per-tensor 8-bit codes (B constant or not).
    pub(super) fn act_matmul(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        if !n.is(OpKind::MatMul) || n.inputs.len() != 2 {
            return Err("not a MatMul of two inputs".into());
        }
        let dqa = self.dq_of(&n.inputs[0])?;
        let dqb = self.dq_of(&n.inputs[1])?;
        let (na, nb) = (&self.g.nodes[dqa], &self.g.nodes[dqb]);
        let (qa, qb) = (self.qparams(na)?, self.qparams(nb)?);
        let (a, b) = (na.inputs[0].clone(), nb.inputs[0].clone());
        self.act_matmul_shapes(&a, &b)?;
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        let stage = self.stage(qa.scale, &[qb.scale], qy, clamp, None, 1.0)?;
        let desc = format!(
            "matmul of {} and {} codes → {} (B packed per run)",
            qa.dtype, qb.dtype, qy.dtype
        );
        Ok(Matched {
            kernel: Box::new(ActMatMulStep {
                a_dtype: qa.dtype,
                a_zp: qa.zp,
                b_dtype: qb.dtype,
                b_zp: qb.zp,
                b_input: 1,
                y_dtype: qy.dtype,
                stage,
                fallback: Fallback::Qdq {
                    da: self.dq_table(na, qa.dtype)?,
                    db: self.dq_table(nb, qb.dtype)?,
                    matmul: GraphOp {
                        node: n.clone(),
                        opset: self.opset,
                        f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
                    },
                    scale: qy.scale,
                    zp: qy.zp,
                    clamp,
                },
                desc: desc.clone(),
            }),
            inputs: vec![a, b],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through: vec![dqa, dqb],
            kernel_desc: desc,
        })
    }

    /// `QLinearMatMul(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp)` whose B is not a constant:
    /// per-tensor parameters, all constant.
    pub(super) fn qlinear_matmul_codes(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let inputs: Vec<String> = (0..8)
            .map(|i| {
                n.inputs
                    .get(i)
                    .filter(|v| !v.is_empty())
                    .cloned()
                    .ok_or_else(|| format!("no input {i}"))
            })
            .collect::<Why<_>>()?;
        let output = Self::sole_output(n)?;
        let qa = self.qparams_at(n, 1, 2)?;
        let qb = self.qparams_at(n, 4, 5)?;
        let qy = self.qparams_at(n, 6, 7)?;
        self.act_matmul_shapes(&inputs[0], &inputs[3])?;
        let stage = self.stage(qa.scale, &[qb.scale], qy, saturation(qy), None, 1.0)?;
        let desc = format!(
            "matmul of {} and {} codes → {} (B packed per run)",
            qa.dtype, qb.dtype, qy.dtype
        );
        Ok(Matched {
            kernel: Box::new(ActMatMulStep {
                a_dtype: qa.dtype,
                a_zp: qa.zp,
                b_dtype: qb.dtype,
                b_zp: qb.zp,
                b_input: 3,
                y_dtype: qy.dtype,
                stage,
                fallback: Fallback::Node(GraphOp {
                    node: n.clone(),
                    opset: self.opset,
                    f: ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?,
                }),
                desc: desc.clone(),
            }),
            inputs,
            output,
            absorbed: Vec::new(),
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}
