//! QOperator patterns. `QLinearConv`, `QLinearMatMul` and com.microsoft `QGemm` read and
//! write 8-bit codes themselves, so each such node alone becomes one integer step: the same
//! [`ConvStep`]/[`GemmStep`] (weights packed once, float output stage) as the QDQ sandwich
//! `DQ → Conv/Gemm/MatMul → Q` it stands for. MaxPool and layout ops whose input is known to
//! hold codes (a QuantizeLinear's or a QLinear op's output) run on the codes directly.

use super::{
    conv_kind, conv_params, is_default_domain, pool_params, Matched, Matcher, Qp, Why, FLAT_DESC,
    LAYOUT_OPS,
};
use crate::steps::{CodeStep, ConvStep, FlatInput, GemmStep, GraphOp, MaxPoolStep};
use quantkit_graph::ops;
use quantkit_graph::{DType, Data, Node, Tensor};
use quantkit_kernels::conv::ConvWeights;
use quantkit_kernels::gemm::{PackedWeights, WeightLayout};

/// Domain of ONNX Runtime's contrib operators (`QGemm`).
pub(super) const MS_DOMAIN: &str = "com.microsoft";

/// A constant 8-bit weight of a QLinear node in the kernels' i8 domain: u8 weights are
/// stored `w − 128` with zero points `z − 128`, which leaves every `w − z` unchanged.
struct QWeight {
    values: Vec<i8>,
    shape: Vec<usize>,
    /// One entry, or one per output channel.
    scales: Vec<f32>,
    /// One entry, or one per output channel (stored domain).
    zero_points: Vec<i32>,
    dtype: DType,
}

/// The whole range of the output's code type: QOperator nodes have no fused activation
/// (the quantizer folds a Relu/Clip into the output's range), so the clamp is saturation.
fn saturation(q: Qp) -> (i32, i32) {
    match q.dtype {
        DType::U8 => (0, 255),
        _ => (-128, 127),
    }
}

fn granularity(scales: &[f32]) -> &'static str {
    if scales.len() > 1 {
        "per-channel"
    } else {
        "per-tensor"
    }
}

impl<'g> Matcher<'g> {
    /// Input `i` of `n` (what it is: `what`) as a constant.
    fn const_input(&self, n: &Node, i: usize, what: &str) -> Why<&'g Tensor> {
        let v = n
            .inputs
            .get(i)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("no {what} (input {i})"))?;
        self.init(v)
            .ok_or_else(|| format!("{what} `{v}` is not a constant"))
    }

    /// The single output of a QLinear node.
    fn sole_output(n: &Node) -> Why<String> {
        match n.outputs.as_slice() {
            [o] if !o.is_empty() => Ok(o.clone()),
            _ => Err(format!("`{}` must have exactly one output", n.name)),
        }
    }

    /// The activation codes of a QLinear node (input 0).
    fn codes_input(n: &Node) -> Why<String> {
        n.inputs
            .first()
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| "no input".to_string())
    }

    /// The constant weight at input `wi` with its scale at `wi + 1` and zero point at
    /// `wi + 2`, of rank `rank`; per-channel parameters run along `channel_axis`.
    fn qweight(&self, n: &Node, wi: usize, rank: usize, channel_axis: usize) -> Why<QWeight> {
        let w = self.const_input(n, wi, "weight")?;
        if w.rank() != rank {
            return Err(format!("{}-D weight: the kernel takes {rank}-D", w.rank()));
        }
        let values: Vec<i8> = match (&w.data, w.dtype) {
            (Data::I8(v), DType::I8) => v.clone(),
            (Data::U8(v), DType::U8) => v.iter().map(|&b| (b ^ 0x80) as i8).collect(),
            _ => {
                return Err(format!(
                    "weight is {}, the kernels take 8-bit weights",
                    w.dtype
                ))
            }
        };
        let channels = w.shape[channel_axis];
        let per_channel_ok = |t: &Tensor| t.len() == 1 || (t.len() == channels && t.rank() == 1);
        let s = self.const_input(n, wi + 1, "weight scale")?;
        if s.dtype != DType::F32 || !per_channel_ok(s) {
            return Err(format!(
                "weight scale must be f32 with 1 or {channels} elements (got {}{:?})",
                s.dtype, s.shape
            ));
        }
        let scales = s.to_f32_vec();
        if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err("weight scales must be positive".into());
        }
        let z = self.const_input(n, wi + 2, "weight zero point")?;
        if z.dtype != w.dtype || !per_channel_ok(z) {
            return Err(format!(
                "weight zero point must be {} with 1 or {channels} elements (got {}{:?})",
                w.dtype, z.dtype, z.shape
            ));
        }
        let shift = if w.dtype == DType::U8 { 128 } else { 0 };
        Ok(QWeight {
            values,
            shape: w.shape.clone(),
            scales,
            zero_points: z.to_i64_vec().iter().map(|&v| v as i32 - shift).collect(),
            dtype: w.dtype,
        })
    }

    /// `QLinearConv(x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp [, B])`: 2-D, constant weight and
    /// parameters, optional constant int32 bias of `c_out` values.
    pub(super) fn qlinear_conv(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let x = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let qx = self.qparams_at(n, 1, 2)?;
        let w = self.qweight(n, 3, 4, 0)?;
        let qy = self.qparams_at(n, 6, 7)?;
        let params = conv_params(n, &w.shape)?;
        let c_out = w.shape[0];
        let c_in = w.shape[1]
            .checked_mul(params.groups)
            .ok_or_else(|| format!("group {} is too large", params.groups))?;
        let bias = match n.inputs.get(8).filter(|b| !b.is_empty()) {
            None => None,
            Some(_) => {
                let b = self.const_input(n, 8, "bias")?;
                match &b.data {
                    Data::I32(bv) if b.rank() == 1 && bv.len() == c_out => Some(bv.clone()),
                    _ => {
                        return Err(format!(
                            "bias must be int32 of shape [{c_out}] (got {}{:?})",
                            b.dtype, b.shape
                        ))
                    }
                }
            }
        };
        let has_bias = bias.is_some();
        let stage = self.stage(qx.scale, &w.scales, qy, saturation(qy), bias, 1.0)?;
        let weights = ConvWeights::new(&w.values, c_out, c_in, params, &w.zero_points)
            .map_err(|e| format!("packing weights: {e}"))?;
        let kind = conv_kind(&weights);
        // A MaxPool reading only these codes runs inside the conv call.
        let mut output = output;
        let mut absorbed = Vec::new();
        let pool = self.sole_reader(&output).ok().and_then(|pi| {
            let p = &self.g.nodes[pi];
            let ok = p.op_type == "MaxPool"
                && is_default_domain(p)
                && p.inputs.len() == 1
                && pi > ni
                && p.outputs.first().is_some_and(|o| !o.is_empty());
            let params = pool_params(p).ok().filter(|_| ok)?;
            absorbed.push(pi);
            output = p.outputs[0].clone();
            Some(params)
        });
        let desc = format!(
            "{kind} {}→{} {}x{} {}{}{}{}",
            qx.dtype,
            qy.dtype,
            w.shape[2],
            w.shape[3],
            granularity(&w.scales),
            if w.dtype == DType::U8 {
                " u8 weights"
            } else {
                ""
            },
            if has_bias { " + bias" } else { "" },
            match &pool {
                Some(p) => format!(" + max_pool {}x{}", p.kernel[0], p.kernel[1]),
                None => String::new(),
            }
        );
        Ok(Matched {
            kernel: Box::new(ConvStep {
                weights,
                stage,
                pool,
                x_dtype: qx.dtype,
                x_zp: qx.zp,
                y_dtype: qy.dtype,
                desc: desc.clone(),
            }),
            inputs: vec![x],
            output,
            absorbed,
            through: Vec::new(),
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

    /// The GEMM `ni`'s activation `a`, or, when `a` is a `Flatten(axis = 1)` of codes of
    /// type `dtype` read by nothing else, the Flatten's input, which the step then reads
    /// itself ([`FlatInput`]); with the absorbed Flatten node.
    fn flattened(
        &self,
        ni: usize,
        a: String,
        dtype: DType,
        w: &QWeight,
        layout: WeightLayout,
    ) -> (String, Option<FlatInput>, Vec<usize>) {
        let flatten = self.producer.get(a.as_str()).copied().filter(|&fi| {
            let f = &self.g.nodes[fi];
            f.op_type == "Flatten"
                && is_default_domain(f)
                && f.inputs.len() == 1
                && f.outputs.len() == 1
                && f.attr_int("axis", 1).ok() == Some(1)
                && !self.opts.keep_float.iter().any(|k| k == &f.name)
                && self.sole_reader(&a).ok() == Some(ni)
                && self.code_dtype(&f.inputs[0]) == Some(dtype)
        });
        match flatten {
            Some(fi) => (
                self.g.nodes[fi].inputs[0].clone(),
                Some(FlatInput::new(
                    w.values.clone(),
                    layout,
                    w.zero_points.clone(),
                )),
                vec![fi],
            ),
            None => (a, None, Vec::new()),
        }
    }

    /// The code type of `value` when it is known to hold 8-bit codes: a u8/i8 graph input,
    /// the output of a QuantizeLinear or QLinear operator (the type of its output zero
    /// point), or of a MaxPool/layout operator reading such codes.
    pub(super) fn code_dtype(&self, value: &str) -> Option<DType> {
        let is_code = |d: DType| matches!(d, DType::U8 | DType::I8);
        let mut v = value;
        // Each step moves to an earlier node, so the walk ends; the bound is a safeguard.
        for _ in 0..=self.g.nodes.len() {
            let Some(&pi) = self.producer.get(v) else {
                let vi = self.g.inputs.iter().find(|i| i.name == v)?;
                return vi.dtype.filter(|&d| is_code(d));
            };
            let p = &self.g.nodes[pi];
            if p.outputs.first().map(String::as_str) != Some(v) {
                return None;
            }
            let zp_type = |i: usize| {
                p.inputs
                    .get(i)
                    .filter(|z| !z.is_empty())
                    .and_then(|z| self.init(z))
                    .map(|z| z.dtype)
                    .filter(|&d| is_code(d))
            };
            let op = p.op_type.as_str();
            if p.domain == MS_DOMAIN {
                let y_scale = p.inputs.get(7).is_some_and(|s| !s.is_empty());
                return (op == "QGemm" && y_scale).then(|| zp_type(8)).flatten();
            }
            if !is_default_domain(p) {
                return None;
            }
            match op {
                "QuantizeLinear" => return zp_type(2),
                "QLinearConv" | "QLinearMatMul" => return zp_type(7),
                "MaxPool" => v = p.inputs.first()?,
                _ if LAYOUT_OPS.contains(&op) => v = p.inputs.first()?,
                _ => return None,
            }
        }
        None
    }

    /// MaxPool on codes another step produced (QOperator models keep MaxPool on the
    /// quantized tensor): the integer max pool, no requantization.
    pub(super) fn max_pool_codes(&self, ni: usize, dtype: DType) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let params = pool_params(n)?;
        let x = Self::codes_input(n)?;
        let output = n
            .outputs
            .first()
            .filter(|o| !o.is_empty())
            .cloned()
            .ok_or("no output")?;
        let desc = format!(
            "max_pool {dtype} {}x{} on codes",
            params.kernel[0], params.kernel[1]
        );
        Ok(Matched {
            kernel: Box::new(MaxPoolStep {
                params,
                x_dtype: dtype,
                table: None,
            }),
            inputs: vec![x],
            output,
            absorbed: Vec::new(),
            through: Vec::new(),
            kernel_desc: desc,
        })
    }

    /// A layout operator (Flatten, Reshape, ...) on codes another step produced: the graph
    /// operator on the 8-bit tensor, with constant other inputs.
    pub(super) fn layout_codes(&self, ni: usize, dtype: DType) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        for v in n.inputs.iter().skip(1).filter(|v| !v.is_empty()) {
            if self.init(v).is_none() {
                return Err(format!("input `{v}` is not a constant"));
            }
        }
        let x = Self::codes_input(n)?;
        let output = Self::sole_output(n)?;
        let f = ops::lookup(&n.domain, &n.op_type).ok_or("no implementation")?;
        let desc = format!("{} on {dtype} codes", n.op_type);
        let mut inputs = vec![x];
        inputs.extend(n.inputs.iter().skip(1).cloned());
        Ok(Matched {
            kernel: Box::new(CodeStep {
                layout: Some(GraphOp {
                    node: n.clone(),
                    opset: self.opset,
                    f,
                }),
                table: None,
                x_dtype: dtype,
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
