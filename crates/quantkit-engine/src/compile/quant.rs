//! Quantization facts read from constants, shared by the patterns: activation parameters,
//! int8 weights (QDQ and QOperator), int32 bias, the conv/GEMM output stage, the 256-entry
//! code table `Q(op(DQ(code)))` and the clamp bounds of a fused activation.

use super::helpers::{Matcher, Why};
use crate::steps::Table;
use crate::RequantMode;
use quantkit_core::fixed_point::{FixedPointRounding, QuantizedMultiplier};
use quantkit_graph::ops::{self, OpCtx};
use quantkit_graph::{DType, Data, Node, Tensor};
use quantkit_kernels::output::OutputStage;

/// Per-tensor quantization parameters of an 8-bit activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Qp {
    pub(super) scale: f32,
    pub(super) zp: i32,
    pub(super) dtype: DType,
}

/// An int8 weight read through a DequantizeLinear.
pub(super) struct Weight {
    pub(super) dq: usize,
    pub(super) values: Vec<i8>,
    pub(super) shape: Vec<usize>,
    pub(super) scales: Vec<f32>,
    pub(super) zero_points: Vec<i32>,
}

/// A constant 8-bit weight of a QLinear node in the kernels' i8 domain: u8 weights are
/// stored `w − 128` with zero points `z − 128`, which leaves every `w − z` unchanged.
pub(super) struct QWeight {
    pub(super) values: Vec<i8>,
    pub(super) shape: Vec<usize>,
    /// One entry, or one per output channel.
    pub(super) scales: Vec<f32>,
    /// One entry, or one per output channel (stored domain).
    pub(super) zero_points: Vec<i32>,
    pub(super) dtype: DType,
}

impl<'g> Matcher<'g> {
    /// Constant per-tensor scale and 8-bit zero point of a Q or DQ node.
    pub(super) fn qparams(&self, n: &Node) -> Why<Qp> {
        self.qparams_at(n, 1, 2)
    }

    /// Constant per-tensor scale (input `si`) and 8-bit zero point (input `zi`) of `n`.
    pub(super) fn qparams_at(&self, n: &Node, si: usize, zi: usize) -> Why<Qp> {
        let s = n
            .inputs
            .get(si)
            .filter(|s| !s.is_empty())
            .and_then(|s| self.init(s))
            .ok_or_else(|| format!("`{}`: scale is not a constant", n.name))?;
        if s.dtype != DType::F32 || s.len() != 1 {
            return Err(format!(
                "`{}`: scale must be one f32 (got {}{:?})",
                n.name, s.dtype, s.shape
            ));
        }
        let scale = s.to_f32_vec()[0];
        if !(scale.is_finite() && scale > 0.0) {
            return Err(format!("`{}`: scale {scale} is not positive", n.name));
        }
        let z = n
            .inputs
            .get(zi)
            .filter(|z| !z.is_empty())
            .and_then(|z| self.init(z))
            .ok_or_else(|| format!("`{}`: zero point is absent or not a constant", n.name))?;
        if matches!(z.dtype, DType::I16 | DType::U16) {
            return Err(format!(
                "`{}`: 16-bit activation codes (int16 activations, W8A16): the engine has no \
                 int16 kernels, the layer runs in float between its Q/DQ",
                n.name
            ));
        }
        if !matches!(z.dtype, DType::U8 | DType::I8) || z.len() != 1 {
            return Err(format!(
                "`{}`: zero point must be one u8 or i8 (got {}{:?})",
                n.name, z.dtype, z.shape
            ));
        }
        Ok(Qp {
            scale,
            zp: z.to_i64_vec()[0] as i32,
            dtype: z.dtype,
        })
    }

    /// An int8 weight read through a DequantizeLinear: (DQ index, values, shape, scales,
    /// zero points). Per-channel parameters must lie on `channel_axis`.
    pub(super) fn weight(&self, value: &str, channel_axis: usize) -> Why<Weight> {
        let i = self.dq_of(value)?;
        let dq = &self.g.nodes[i];
        let w = self
            .init(&dq.inputs[0])
            .ok_or_else(|| format!("weight `{}` is not a constant", dq.inputs[0]))?;
        let Data::I8(wv) = &w.data else {
            return Err(format!(
                "weight `{}` is {}, the kernels take i8",
                dq.inputs[0], w.dtype
            ));
        };
        // int4 weights (opset 21) are held unpacked as the same i8 codes.
        if !matches!(w.dtype, DType::I8 | DType::I4) {
            return Err(format!("weight `{}` is {}", dq.inputs[0], w.dtype));
        }
        let s = dq
            .inputs
            .get(1)
            .and_then(|s| self.init(s))
            .filter(|s| s.dtype == DType::F32)
            .ok_or_else(|| format!("weight scale of `{}` is not a constant f32", dq.name))?;
        let scales = s.to_f32_vec();
        if scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("weight scales of `{}` must be positive", dq.name));
        }
        let zps: Vec<i32> = match dq.inputs.get(2).filter(|z| !z.is_empty()) {
            None => vec![0; scales.len()],
            Some(z) => {
                let z = self
                    .init(z)
                    .filter(|z| matches!(z.dtype, DType::I8 | DType::I4))
                    .ok_or_else(|| {
                        format!("weight zero point of `{}` is not a constant i8", dq.name)
                    })?;
                z.to_i64_vec().iter().map(|&v| v as i32).collect()
            }
        };
        if zps.len() != scales.len() {
            return Err(format!(
                "`{}`: scale and zero point lengths differ",
                dq.name
            ));
        }
        if scales.len() > 1 {
            let axis = dq.attr_int("axis", 1).map_err(|e| e.to_string())?;
            let axis = if axis < 0 {
                axis + w.rank() as i64
            } else {
                axis
            };
            if axis != channel_axis as i64 || w.shape.get(channel_axis) != Some(&scales.len()) {
                return Err(format!(
                    "`{}`: per-axis parameters on axis {axis}, the kernel needs the output-channel axis {channel_axis}",
                    dq.name
                ));
            }
        }
        Ok(Weight {
            dq: i,
            values: wv.clone(),
            shape: w.shape.clone(),
            scales,
            zero_points: zps,
        })
    }

    /// An int32 bias read through a DequantizeLinear with scale `s_x·s_w[j]`, zero point 0.
    pub(super) fn bias(
        &self,
        value: &str,
        channels: usize,
        s_x: f32,
        s_w: &[f32],
    ) -> Why<(usize, Vec<i32>)> {
        let i = self.dq_of(value)?;
        let dq = &self.g.nodes[i];
        let b = self
            .init(&dq.inputs[0])
            .filter(|b| b.dtype == DType::I32 && b.len() == channels)
            .ok_or_else(|| {
                format!(
                    "bias `{}` is not a constant int32 of {channels} values",
                    dq.inputs[0]
                )
            })?;
        let s = dq
            .inputs
            .get(1)
            .and_then(|s| self.init(s))
            .filter(|s| s.dtype == DType::F32 && (s.len() == 1 || s.len() == channels))
            .ok_or_else(|| format!("bias scale of `{}` is not a constant f32", dq.name))?
            .to_f32_vec();
        if let Some(z) = dq.inputs.get(2).filter(|z| !z.is_empty()) {
            let z = self
                .init(z)
                .ok_or_else(|| format!("bias zero point of `{}` is not constant", dq.name))?;
            if z.to_i64_vec().iter().any(|&v| v != 0) {
                return Err(format!("bias zero point of `{}` is not 0", dq.name));
            }
        }
        for j in 0..channels {
            let want = s_x * s_w[if s_w.len() == 1 { 0 } else { j }];
            let got = s[if s.len() == 1 { 0 } else { j }];
            if (got - want).abs() > 1e-5 * want.abs() {
                return Err(format!(
                    "bias scale {got} of `{}` is not input scale × weight scale ({want})",
                    dq.name
                ));
            }
        }
        let Data::I32(bv) = &b.data else {
            return Err("bias is not int32".into());
        };
        Ok((i, bv.clone()))
    }

    /// The constant weight at input `wi` with its scale at `wi + 1` and zero point at
    /// `wi + 2`, of rank `rank`; per-channel parameters run along `channel_axis`.
    pub(super) fn qweight(
        &self,
        n: &Node,
        wi: usize,
        rank: usize,
        channel_axis: usize,
    ) -> Why<QWeight> {
        let w = self.const_input(n, wi, "weight")?;
        if w.rank() != rank {
            return Err(format!("{}-D weight: the kernel takes {rank}-D", w.rank()));
        }
        let values: Vec<i8> = match (&w.data, w.dtype) {
            (Data::I8(v), DType::I8 | DType::I4) => v.clone(),
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

    /// The output stage `(acc + bias[c]) · alpha·s_x·s_w[c]/s_y + z_y`, clamped. `alpha` is
    /// QGemm's attribute (1 everywhere else): in float mode the multiplier is the f32
    /// `alpha·(s_x·s_w)/s_y`, the same f32 value QGemm's reference forms (for `alpha = 1` it
    /// is exactly `(s_x·s_w)/s_y`); in fixed-point mode the real multiplier is taken in f64.
    pub(super) fn stage(
        &self,
        s_x: f32,
        s_w: &[f32],
        out: Qp,
        clamp: (i32, i32),
        bias: Option<Vec<i32>>,
        alpha: f32,
    ) -> Why<OutputStage> {
        stage_for(self.opts.requant, s_x, s_w, out, clamp, bias, alpha)
    }

    /// The f32 value of every code of `dtype` (indexed by the code's byte) under the
    /// DequantizeLinear `dq`, evaluated with the graph crate's operator, so a lookup equals
    /// the float executor's DQ bit for bit.
    pub(super) fn dq_table(&self, dq: &Node, dtype: DType) -> Why<Box<[f32; 256]>> {
        let f = ops::lookup(&dq.domain, &dq.op_type).ok_or("no DequantizeLinear")?;
        let x = super::binary::probe(dtype)?;
        let mut args: Vec<Option<&Tensor>> = vec![Some(&x)];
        for i in &dq.inputs[1..] {
            args.push(if i.is_empty() { None } else { self.init(i) });
        }
        let ctx = OpCtx {
            node: dq,
            opset: self.opset,
        };
        let y = f(&ctx, &args).map_err(|e| format!("`{}`: {e}", dq.name))?;
        let v = y.first().ok_or("no output")?.to_f32_vec();
        let arr: [f32; 256] = v
            .try_into()
            .map_err(|_| format!("`{}` is not element-wise", dq.name))?;
        Ok(Box::new(arr))
    }

    /// The table `code → Q(op(DQ(code)))`, evaluated with the graph crate's operators so it
    /// equals the QDQ graph on the float executor exactly; `None` when it is the identity.
    pub(super) fn table(&self, dq: &Node, op: Option<&Node>, q: &Node) -> Why<Option<Table>> {
        self.table_chain(dq, op.as_slice(), q)
    }

    /// The table `code → Q(op_k(…op_1(DQ(code))))` of element-wise operators applied in
    /// order (an operator and the Relu/Clip after it), evaluated as [`Matcher::table`] does.
    pub(super) fn table_chain(&self, dq: &Node, chain: &[&Node], q: &Node) -> Why<Option<Table>> {
        let codes = match self.qparams(dq)?.dtype {
            DType::U8 => Tensor::new(vec![256], Data::U8((0..=255).collect())),
            _ => Tensor::new(vec![256], Data::I8((0..=255u8).map(|b| b as i8).collect())),
        }
        .map_err(|e| e.to_string())?;
        let run = |node: &Node, x: &Tensor| -> Why<Tensor> {
            let f = ops::lookup(&node.domain, &node.op_type)
                .ok_or_else(|| format!("no implementation of {}", node.op_type))?;
            let mut args: Vec<Option<&Tensor>> = vec![Some(x)];
            for v in &node.inputs[1..] {
                if v.is_empty() {
                    args.push(None);
                } else {
                    args.push(Some(self.init(v).ok_or_else(|| {
                        format!("`{}`: input `{v}` is not a constant", node.name)
                    })?));
                }
            }
            let ctx = OpCtx {
                node,
                opset: self.opset,
            };
            f(&ctx, &args)
                .map_err(|e| format!("`{}`: {e}", node.name))?
                .into_iter()
                .next()
                .ok_or_else(|| format!("`{}` produced nothing", node.name))
        };
        let mut v = run(dq, &codes)?;
        for op in chain {
            v = run(op, &v)?;
            if v.shape != [256] {
                return Err(format!("`{}` is not element-wise", op.name));
            }
        }
        let y = run(q, &v)?;
        let bytes: Vec<u8> = match &y.data {
            Data::U8(d) => d.clone(),
            Data::I8(d) => d.iter().map(|&b| b as u8).collect(),
            _ => return Err(format!("`{}` does not produce 8-bit codes", q.name)),
        };
        let same_type = y.dtype == codes.dtype;
        if same_type && bytes.iter().enumerate().all(|(i, &b)| b as usize == i) {
            return Ok(None);
        }
        Ok(Some(Table {
            bytes,
            out: y.dtype,
        }))
    }
}

/// `Q(v)` of a clamp bound with QuantizeLinear's arithmetic: quantkit-core's equation (1)
/// (f32 division, half to even, saturation; with the positive finite scale `qparams`
/// checks, ±∞ go to the ends of the range). Since Q is monotone,
/// `Q(clip(y, a, b)) = clamp(Q(y), Q(a), Q(b))`, so a fused Relu/Clip is exactly this clamp
/// on the output codes.
pub(super) fn quantize_bound(v: f32, q: Qp) -> i32 {
    let (lo, hi) = match q.dtype {
        DType::U8 => (0, 255),
        _ => (-128, 127),
    };
    quantkit_core::quantize_value(
        v,
        q.scale,
        q.zp,
        lo,
        hi,
        quantkit_core::RoundingMode::HalfToEven,
    )
}

/// The whole range of the output's code type: QOperator nodes have no fused activation
/// (the quantizer folds a Relu/Clip into the output's range), so the clamp is saturation.
pub(super) fn saturation(q: Qp) -> (i32, i32) {
    match q.dtype {
        DType::U8 => (0, 255),
        _ => (-128, 127),
    }
}

pub(super) fn granularity(scales: &[f32]) -> &'static str {
    if scales.len() > 1 {
        "per-channel"
    } else {
        "per-tensor"
    }
}

/// The output stage of [`Matcher::stage`] for requantization mode `mode`: a free function so
/// that [`Requantizer`] builds exactly the stage a compiled step runs.
fn stage_for(
    mode: RequantMode,
    s_x: f32,
    s_w: &[f32],
    out: Qp,
    clamp: (i32, i32),
    bias: Option<Vec<i32>>,
    alpha: f32,
) -> Why<OutputStage> {
    let stage = match mode {
        RequantMode::Float => OutputStage::float(
            s_w.iter().map(|&w| alpha * (s_x * w) / out.scale).collect(),
            out.zp,
        ),
        RequantMode::FixedPoint => OutputStage::fixed_point(
            s_w.iter()
                .map(|&w| {
                    if alpha == 1.0 {
                        QuantizedMultiplier::from_scales(s_x, w, out.scale)
                    } else {
                        QuantizedMultiplier::from_f64(
                            f64::from(alpha) * f64::from(s_x) * f64::from(w) / f64::from(out.scale),
                        )
                    }
                })
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| format!("fixed-point multiplier: {e}"))?,
            FixedPointRounding::DoubleRounding,
            out.zp,
        ),
    };
    let stage = stage.with_clamp(clamp.0, clamp.1);
    Ok(match bias {
        Some(b) => stage.with_bias(b),
        None => stage,
    })
}

/// The output stage of a `DQ(x) → Conv | Gemm | MatMul (DQ(w) [, DQ(b)]) [→ Relu | Clip] → Q`
/// step exactly as [`crate::compile`] builds it — the same multiplier formula
/// (`Matcher::stage`), the same clamp of the fused activation (`quantize_bound`) and the
/// same scalar arithmetic (`quantkit_kernels::output::OutputStage::apply`, equations K2–K4
/// of `docs/kernels.md`, which every SIMD epilogue equals bit for bit). Public for code that
/// computes the layer's int32 accumulators another way and must reach the engine's codes:
/// quantization-aware training's exact mode (`quantkit-train`, `docs/qat.md`).
#[derive(Debug, Clone)]
pub struct Requantizer {
    stage: OutputStage,
    dtype: DType,
}

impl Requantizer {
    /// The stage for input scale `s_x`, weight scales `s_w` (one, or one per output
    /// channel), output scale, zero point and code type (u8 or i8), the fused activation's
    /// real range `clip` (`(-∞, ∞)` without one, `(0, ∞)` for Relu) and the int32 bias.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mode: RequantMode,
        s_x: f32,
        s_w: &[f32],
        y_scale: f32,
        y_zp: i32,
        y_dtype: DType,
        clip: (f32, f32),
        bias: Option<Vec<i32>>,
    ) -> std::result::Result<Requantizer, String> {
        if !matches!(y_dtype, DType::U8 | DType::I8) {
            return Err(format!(
                "output codes are {y_dtype}, the engine writes u8 or i8"
            ));
        }
        if !(y_scale.is_finite() && y_scale > 0.0) {
            return Err(format!("output scale {y_scale} is not positive"));
        }
        let qp = Qp {
            scale: y_scale,
            zp: y_zp,
            dtype: y_dtype,
        };
        let clamp = (quantize_bound(clip.0, qp), quantize_bound(clip.1, qp));
        let stage = stage_for(mode, s_x, s_w, qp, clamp, bias, 1.0)?;
        Ok(Requantizer {
            stage,
            dtype: y_dtype,
        })
    }

    /// The output code of accumulator `acc = Σ (x − z_x)(w − z_w)` (before the bias) of
    /// output channel `channel`.
    pub fn apply(&self, acc: i32, channel: usize) -> i32 {
        match self.dtype {
            DType::U8 => i32::from(self.stage.apply::<u8>(acc, channel)),
            _ => i32::from(self.stage.apply::<i8>(acc, channel)),
        }
    }
}
