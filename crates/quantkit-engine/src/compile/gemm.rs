//! GEMM patterns → [`GemmStep`] (`steps/gemm.rs`): the QDQ sandwich
//! `DQ(x) → Gemm | MatMul(DQ(w) 2-D [, DQ(b)]) [→ Relu | Clip] → Q`, and `QLinearMatMul` and
//! com.microsoft `QGemm`, which read and write the codes themselves. Each may read the codes
//! in front of a Flatten itself (`flatten_gemm.rs`).

use super::flatten_gemm::FLAT_DESC;
use super::helpers::{Matcher, Tail, Why};
use super::quant::{granularity, saturation, Weight};
use super::Matched;
use crate::steps::{FlatInput, GemmStep};
use quantkit_graph::OpKind;
use quantkit_graph::{DType, Data};
use quantkit_kernels::gemm::{PackedWeights, WeightLayout};

impl<'g> Matcher<'g> {
    /// `DQ(x) → Gemm | MatMul(DQ(w) 2-D [, DQ(b)]) [→ Relu | Clip] → Q` anchored at `ni`,
    /// reading the codes before a Flatten itself when there is one
    /// ([`Matcher::flatten_before`]).
    pub(super) fn gemm(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let is_gemm = n.is(OpKind::Gemm);
        let attr = |e: quantkit_graph::OpError| e.to_string();
        let trans_b = is_gemm && n.attr_int("transB", 0).map_err(attr)? != 0;
        if is_gemm {
            if n.attr_int("transA", 0).map_err(attr)? != 0 {
                return Err("transA = 1".into());
            }
            if n.attr_float("alpha", 1.0).map_err(attr)? != 1.0 {
                return Err("alpha ≠ 1".into());
            }
            if n.inputs.get(2).is_some_and(|c| !c.is_empty())
                && n.attr_float("beta", 1.0).map_err(attr)? != 1.0
            {
                return Err("beta ≠ 1".into());
            }
        }
        let (dqx, xq, qx) = self.act_input(n)?;
        let wname = n.inputs.get(1).ok_or("no weight")?;
        let Weight {
            dq: dqw,
            values: w,
            shape: wshape,
            scales: s_w,
            zero_points: z_w,
        } = self.weight(wname, if trans_b { 0 } else { 1 })?;
        if wshape.len() != 2 {
            return Err(format!(
                "{}-D weight: the GEMM step takes 2-D B",
                wshape.len()
            ));
        }
        let (k, nn, layout) = if trans_b {
            (wshape[1], wshape[0], WeightLayout::NxK)
        } else {
            (wshape[0], wshape[1], WeightLayout::KxN)
        };
        let mut through = vec![dqx, dqw];
        let bias = match n.inputs.get(2).filter(|b| !b.is_empty() && is_gemm) {
            None => None,
            Some(b) => {
                let (dqb, bv) = self.bias(b, nn, qx.scale, &s_w)?;
                through.push(dqb);
                Some(bv)
            }
        };
        let Tail {
            absorbed,
            clamp,
            q: qi,
            qp: qy,
        } = self.tail(&n.outputs[0])?;
        let stage = self.stage(qx.scale, &s_w, qy, clamp, bias, 1.0)?;
        let weights = PackedWeights::from_i8(&w, k, nn, layout, &z_w)
            .map_err(|e| format!("packing weights: {e}"))?;
        let mut absorbed = absorbed;
        let (input, flat) = match self.flatten_before(ni, dqx) {
            Some(f) => {
                absorbed.extend(f.absorbed);
                through.push(f.through);
                (f.codes, Some(FlatInput::new(w, layout, z_w)))
            }
            None => (xq, None),
        };
        let desc = format!(
            "gemm {}→{} {k}x{nn} {}{}",
            qx.dtype,
            qy.dtype,
            if s_w.len() > 1 {
                "per-channel"
            } else {
                "per-tensor"
            },
            if flat.is_some() { FLAT_DESC } else { "" }
        );
        Ok(Matched {
            kernel: Box::new(GemmStep {
                weights,
                stage,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                exactly_2d: is_gemm,
                flat,
                desc: desc.clone(),
            }),
            inputs: vec![input],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed,
            through,
            kernel_desc: desc,
        })
    }

    /// `QLinearMatMul(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp)` with a constant 2-D `b`
    /// (per-tensor or per-column parameters).
    pub(super) fn qlinear_matmul(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let a = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let qa = self.qparams_at(n, 1, 2)?;
        let w = self.qweight(n, 3, 2, 1)?;
        let qy = self.qparams_at(n, 6, 7)?;
        let (k, nn) = (w.shape[0], w.shape[1]);
        let stage = self.stage(qa.scale, &w.scales, qy, saturation(qy), None, 1.0)?;
        let weights = PackedWeights::from_i8(&w.values, k, nn, WeightLayout::KxN, &w.zero_points)
            .map_err(|e| format!("packing weights: {e}"))?;
        let (a, flat, absorbed) = self.flattened(ni, a, qa.dtype, &w, WeightLayout::KxN);
        let desc = format!(
            "gemm {}→{} {k}x{nn} {}{}{}",
            qa.dtype,
            qy.dtype,
            granularity(&w.scales),
            if w.dtype == DType::U8 {
                " u8 weights"
            } else {
                ""
            },
            if flat.is_some() { FLAT_DESC } else { "" },
        );
        Ok(Matched {
            kernel: Box::new(GemmStep {
                weights,
                stage,
                x_dtype: qa.dtype,
                x_zp: qa.zp,
                y_dtype: qy.dtype,
                exactly_2d: false,
                flat,
                desc: desc.clone(),
            }),
            inputs: vec![a],
            output,
            absorbed,
            through: Vec::new(),
            kernel_desc: desc,
        })
    }

    /// com.microsoft `QGemm(A, a_s, a_zp, B, b_s, b_zp [, C] , y_s, y_zp)` with quantized
    /// output (`y_scale` present), `transA = 0`, constant `B` (either `transB`), a constant
    /// int32 `C` that is per column (`[]`, `[1]`, `[N]`, `[1, N]`: the row count is not known
    /// at compile time) and `alpha > 0`, folded into the multiplier as the f32
    /// `alpha·(a_s·b_s[j])/y_s` exactly as the reference forms it.
    pub(super) fn qgemm(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let attr = |e: quantkit_graph::OpError| e.to_string();
        if n.attr_int("transA", 0).map_err(attr)? != 0 {
            return Err("transA = 1: the kernels take A as rows".into());
        }
        let trans_b = n.attr_int("transB", 0).map_err(attr)? != 0;
        let alpha = n.attr_float("alpha", 1.0).map_err(attr)?;
        if !(alpha.is_finite() && alpha > 0.0) {
            return Err(format!(
                "alpha {alpha}: the output stage takes a positive multiplier"
            ));
        }
        if n.inputs.get(7).is_none_or(|v| v.is_empty()) {
            return Err("no y_scale: float output, which has no integer output stage".into());
        }
        let a = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let qa = self.qparams_at(n, 1, 2)?;
        let w = self.qweight(n, 3, 2, if trans_b { 0 } else { 1 })?;
        let qy = self.qparams_at(n, 7, 8)?;
        let (k, nn, layout) = if trans_b {
            (w.shape[1], w.shape[0], WeightLayout::NxK)
        } else {
            (w.shape[0], w.shape[1], WeightLayout::KxN)
        };
        let bias = match n.inputs.get(6).filter(|c| !c.is_empty()) {
            None => None,
            Some(_) => {
                let c = self.const_input(n, 6, "C")?;
                let Data::I32(cv) = &c.data else {
                    return Err(format!("C is {}, not int32", c.dtype));
                };
                let per_column = matches!(c.shape.as_slice(), [j] | [1, j] if *j == nn);
                if cv.len() == 1 && c.rank() <= 2 {
                    Some(vec![cv[0]; nn])
                } else if per_column {
                    Some(cv.clone())
                } else {
                    return Err(format!(
                        "C of shape {:?} is not one value per column of [M, {nn}]",
                        c.shape
                    ));
                }
            }
        };
        let has_bias = bias.is_some();
        let stage = self.stage(qa.scale, &w.scales, qy, saturation(qy), bias, alpha)?;
        let weights = PackedWeights::from_i8(&w.values, k, nn, layout, &w.zero_points)
            .map_err(|e| format!("packing weights: {e}"))?;
        let (a, flat, absorbed) = self.flattened(ni, a, qa.dtype, &w, layout);
        let desc = format!(
            "gemm {}→{} {k}x{nn} {}{}{}{}{}",
            qa.dtype,
            qy.dtype,
            granularity(&w.scales),
            if w.dtype == DType::U8 {
                " u8 weights"
            } else {
                ""
            },
            if has_bias { " + bias" } else { "" },
            if alpha != 1.0 {
                format!(" alpha {alpha}")
            } else {
                String::new()
            },
            if flat.is_some() { FLAT_DESC } else { "" },
        );
        Ok(Matched {
            kernel: Box::new(GemmStep {
                weights,
                stage,
                x_dtype: qa.dtype,
                x_zp: qa.zp,
                y_dtype: qy.dtype,
                exactly_2d: true,
                flat,
                desc: desc.clone(),
            }),
            inputs: vec![a],
            output,
            absorbed,
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}
