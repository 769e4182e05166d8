//! `Attention` (opsets 23, 24, 25): scaled dot-product attention,
//! `Y = softmax(softcap(Q·Kᵀ·scale) + bias) · V`, per head, with
//!
//! - 4-D inputs `[batch, heads, seq, head_size]` or 3-D `[batch, seq, heads·head_size]`
//!   (then `q_num_heads` and `kv_num_heads` say how to split them);
//! - grouped-query attention: `q_num_heads` a multiple of `kv_num_heads`, query head `h`
//!   reading key/value head `h / (q_num_heads / kv_num_heads)`;
//! - `scale` (default `1/√head_size`, applied as `√scale` to both Q and K as the spec
//!   says), `softcap` (`c·tanh(x/c)` when positive, before the bias);
//! - the bias: a float `attn_mask` added to the scores, or a boolean one (false → −∞),
//!   numpy-broadcast to `[batch, q_heads, q_seq, total_seq]` and padded with −∞ when its
//!   last axis is shorter than `total_seq`; `is_causal` (bottom-right aligned: query `i`
//!   sees key `j ≤ i + offset`), the opset-25 sliding window
//!   (`left_window_size`/`right_window_size`) and the opset-24 `nonpad_kv_seqlen` padding
//!   mask, each adding −∞ where it forbids a key. `offset` is the past length with
//!   `past_key`, `nonpad_kv_seqlen[b] − q_seq` with an external cache, else 0;
//! - `past_key`/`past_value` concatenated in front of K/V (`present_key`/`present_value`);
//! - a query row whose bias is −∞ everywhere gives a zero row (not NaN), as the spec says;
//! - `qk_matmul_output_mode` for the 4th output: 0 the scaled `Q·Kᵀ`, 1 after softcap,
//!   2 after the bias, 3 the probabilities;
//! - `softmax_precision` 11 (double) runs the softmax in f64; every other precision runs
//!   it in f32;
//! - float16 and bfloat16 inputs are computed in their own precision, rounding where the
//!   ONNX reference (numpy on f16 or `ml_dtypes` arrays) rounds, since the node tests
//!   compare bfloat16 codes exactly: `√scale` (formed in f64 when not given), `Q·√scale`
//!   and `K·√scale`, each product (f32 accumulation rounded once, as numpy's MatMul), the
//!   scores plus bias, and the softmax ([`super::softmax::softmax_rounded`]) unless
//!   `softmax_precision` names another type (then it runs as above and the probabilities
//!   are rounded) or a softcap (an f32 attribute) has promoted the scores to f32.
//!
//! The two products of every head run on [`crate::linalg::sgemm`].

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::linalg::{hgemm_f32_acc, sgemm, MatRef};
use quantkit_core::formats::{bf16_decode, bf16_encode};
use crate::tensor::{DType, Data, Tensor};

fn float_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, OpError> {
    let t = input(inputs, i)?;
    if !t.dtype.is_float() && t.dtype != DType::BF16 {
        return Err(OpError::DType {
            index: i,
            expected: "float".into(),
            got: t.dtype.to_string(),
        });
    }
    Ok(t)
}

/// The attributes of `Attention`, parsed once.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionAttrs {
    /// `is_causal`.
    pub causal: bool,
    /// `q_num_heads` (0 when absent).
    pub q_heads: usize,
    /// `kv_num_heads` (0 when absent).
    pub kv_heads: usize,
    /// `scale`, when given.
    pub scale: Option<f32>,
    /// `softcap` (0: none).
    pub softcap: f32,
    /// `qk_matmul_output_mode`, 0 to 3.
    pub qk_mode: i64,
    /// Whether `softmax_precision` asks for double.
    pub softmax_f64: bool,
    /// `left_window_size` (−1: unbounded).
    pub left: i64,
    /// `right_window_size` (−1: unbounded).
    pub right: i64,
}

impl AttentionAttrs {
    /// Parses and checks the attributes.
    pub fn parse(ctx: &OpCtx) -> Result<AttentionAttrs, OpError> {
        let n = ctx.node;
        let flag = |name: &str| -> Result<bool, OpError> {
            match n.attr_int(name, 0)? {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(OpError::attr(name, format!("expected 0 or 1, got {v}"))),
            }
        };
        let count = |name: &str| -> Result<usize, OpError> {
            usize::try_from(n.attr_int(name, 0)?)
                .map_err(|_| OpError::attr(name, "must be non-negative"))
        };
        let scale = match n.attr("scale") {
            None => None,
            Some(_) => Some(n.attr_float("scale", 1.0)?),
        };
        let qk_mode = n.attr_int("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&qk_mode) {
            return Err(OpError::attr(
                "qk_matmul_output_mode",
                format!("expected 0 to 3, got {qk_mode}"),
            ));
        }
        let softmax_f64 = match n.attr("softmax_precision") {
            None => false,
            Some(_) => match n.attr_int("softmax_precision", 0)? {
                11 => true,
                1 | 10 | 16 => false,
                p => {
                    return Err(OpError::attr(
                        "softmax_precision",
                        format!("expected 1, 10, 11 or 16 (a float type), got {p}"),
                    ))
                }
            },
        };
        let window = |name: &str| -> Result<i64, OpError> {
            match n.attr_int(name, -1)? {
                v if v >= -1 => Ok(v),
                v => Err(OpError::attr(name, format!("expected −1 or ≥ 0, got {v}"))),
            }
        };
        Ok(AttentionAttrs {
            causal: flag("is_causal")?,
            q_heads: count("q_num_heads")?,
            kv_heads: count("kv_num_heads")?,
            scale,
            softcap: n.attr_float("softcap", 0.0)?,
            qk_mode,
            softmax_f64,
            left: window("left_window_size")?,
            right: window("right_window_size")?,
        })
    }
}

/// `[b, s, h·d]` (as `[b, s, h, d]`) → `[b, h, s, d]`.
fn split_heads(v: &[f32], b: usize, s: usize, h: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let src = ((bi * s + si) * h + hi) * d;
                let dst = ((bi * h + hi) * s + si) * d;
                out[dst..dst + d].copy_from_slice(&v[src..src + d]);
            }
        }
    }
    out
}

/// `[b, h, s, d]` → `[b, s, h·d]`.
fn merge_heads(v: &[f32], b: usize, h: usize, s: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let src = ((bi * h + hi) * s + si) * d;
                let dst = ((bi * s + si) * h + hi) * d;
                out[dst..dst + d].copy_from_slice(&v[src..src + d]);
            }
        }
    }
    out
}

/// Concatenates `past` `[b, h, p, d]` and `cur` `[b, h, s, d]` along the sequence axis.
fn concat_seq(past: &[f32], cur: &[f32], bh: usize, p: usize, s: usize, d: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(bh * (p + s) * d);
    for i in 0..bh {
        out.extend_from_slice(&past[i * p * d..(i + 1) * p * d]);
        out.extend_from_slice(&cur[i * s * d..(i + 1) * s * d]);
    }
    out
}

/// The attention mask, read as additive values broadcast to `[batch, q_heads, q_seq, total]`.
struct Mask {
    /// Values (bool masks already as 0 / −∞).
    v: Vec<f32>,
    /// Element strides for batch, head, query row (0 where broadcast).
    st: [usize; 3],
    /// Length of the mask's last axis: keys from there on are −∞ (padding).
    last: usize,
}

impl Mask {
    fn new(m: &Tensor, target: [usize; 4]) -> Result<Mask, OpError> {
        let bad = || {
            OpError::shape(
                format!(
                    "attn_mask broadcastable to {target:?} (its last axis may be shorter)"
                ),
                &m.shape,
            )
        };
        if m.rank() > 4 {
            return Err(bad());
        }
        let mut shape = [1usize; 4];
        shape[4 - m.rank()..].copy_from_slice(&m.shape);
        let last = shape[3];
        if last > target[3] {
            return Err(bad());
        }
        for a in 0..3 {
            if shape[a] != 1 && shape[a] != target[a] {
                return Err(bad());
            }
        }
        let row = last;
        let full = [shape[1] * shape[2] * row, shape[2] * row, row];
        let st = [0, 1, 2].map(|a| if shape[a] == 1 { 0 } else { full[a] });
        let v = match &m.data {
            Data::Bool(b) => b
                .iter()
                .map(|&t| if t { 0.0 } else { f32::NEG_INFINITY })
                .collect(),
            _ if m.dtype.is_float() || m.dtype == DType::BF16 => m.to_f32_vec(),
            _ => {
                return Err(OpError::DType {
                    index: 3,
                    expected: "bool or float".into(),
                    got: m.dtype.to_string(),
                })
            }
        };
        Ok(Mask { v, st, last })
    }
}

/// Softmax of `row` in place, in f32 or f64, with a NaN anywhere propagating as NumPy's
/// `max` does, and an all-(−∞) row giving zeros.
fn softmax(row: &mut [f32], f64_precision: bool) {
    let nan_max = |a: f32, b: f32| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) };
    let m = row.iter().copied().fold(f32::NEG_INFINITY, nan_max);
    let m = if m == f32::NEG_INFINITY { 0.0 } else { m };
    if f64_precision {
        let e: Vec<f64> = row.iter().map(|&x| (x as f64 - m as f64).exp()).collect();
        let s: f64 = e.iter().sum();
        let s = if s == 0.0 { 1.0 } else { s };
        for (r, e) in row.iter_mut().zip(e) {
            *r = (e / s) as f32;
        }
    } else {
        let mut s = 0f32;
        for r in row.iter_mut() {
            *r = (*r - m).exp();
            s += *r;
        }
        let s = if s == 0.0 { 1.0 } else { s };
        for r in row.iter_mut() {
            *r /= s;
        }
    }
}

fn too_large(what: &str) -> OpError {
    OpError::Invalid(format!(
        "{what} would have more than {} elements",
        super::max_elements()
    ))
}

fn checked(dims: &[usize], what: &str) -> Result<usize, OpError> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= super::max_elements())
        .ok_or_else(|| too_large(what))
}

/// Evaluates `Attention`: `Y`, `present_key`, `present_value` and, when the node asks for
/// it, `qk_matmul_output`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let a = AttentionAttrs::parse(ctx)?;
    let q = float_input(inputs, 0)?;
    let k = float_input(inputs, 1)?;
    let v = float_input(inputs, 2)?;
    let mask = opt_input(inputs, 3);
    let (past_k, past_v) = match (opt_input(inputs, 4), opt_input(inputs, 5)) {
        (Some(pk), Some(pv)) => (Some(pk), Some(pv)),
        (None, None) => (None, None),
        _ => {
            return Err(OpError::Invalid(
                "past_key and past_value must be given together".into(),
            ))
        }
    };
    let nonpad = opt_input(inputs, 6);
    if nonpad.is_some() && past_k.is_some() {
        return Err(OpError::Invalid(
            "nonpad_kv_seqlen cannot be combined with past_key/past_value".into(),
        ));
    }
    let rank = q.rank();
    if k.rank() != rank || v.rank() != rank || !(rank == 3 || rank == 4) {
        return Err(OpError::shape(
            "Q, K and V all of rank 3 or all of rank 4",
            (&q.shape, &k.shape, &v.shape),
        ));
    }
    // Shapes as [batch, heads, seq, head_size].
    let (qs, ks, vs) = if rank == 4 {
        let s = |t: &Tensor| [t.shape[0], t.shape[1], t.shape[2], t.shape[3]];
        let (qs, ks) = (s(q), s(k));
        for (attr, given, have) in [
            ("q_num_heads", a.q_heads, qs[1]),
            ("kv_num_heads", a.kv_heads, ks[1]),
        ] {
            if given != 0 && given != have {
                return Err(OpError::attr(
                    attr,
                    format!("{given} disagrees with the 4-D input's {have} heads"),
                ));
            }
        }
        (qs, ks, s(v))
    } else {
        if a.q_heads == 0 || a.kv_heads == 0 {
            return Err(OpError::attr(
                "q_num_heads",
                "q_num_heads and kv_num_heads are required with 3-D inputs",
            ));
        }
        let split = |t: &Tensor, h: usize, name: &str| -> Result<[usize; 4], OpError> {
            if !t.shape[2].is_multiple_of(h) {
                return Err(OpError::shape(
                    format!("{name} hidden size divisible by {h} heads"),
                    &t.shape,
                ));
            }
            Ok([t.shape[0], h, t.shape[1], t.shape[2] / h])
        };
        (
            split(q, a.q_heads, "Q")?,
            split(k, a.kv_heads, "K")?,
            split(v, a.kv_heads, "V")?,
        )
    };
    let [batch, hq, sq, dq] = qs;
    let [_, hkv, skv, dk] = ks;
    let dv = vs[3];
    if ks[0] != batch || vs[0] != batch || vs[1] != hkv || vs[2] != skv || dk != dq {
        return Err(OpError::shape(
            format!("K [{batch}, kv_heads, kv_seq, {dq}] and V [{batch}, kv_heads, kv_seq, v_head_size]"),
            (&q.shape, &k.shape, &v.shape),
        ));
    }
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        return Err(OpError::shape(
            format!("a number of query heads ({hq}) that is a multiple of the key/value heads"),
            hkv,
        ));
    }
    // Bounds the per-head loops even when some sizes are zero (huge head counts on empty
    // tensors).
    checked(&[batch, hq], "the (batch, head) pairs")?;
    checked(&[batch, hq, sq, dv], "Y")?;
    let to4 = |t: &Tensor, s: [usize; 4]| {
        let f = t.to_f32_vec();
        if rank == 4 {
            f
        } else {
            split_heads(&f, s[0], s[2], s[1], s[3])
        }
    };
    let (qv, kv, vv) = (to4(q, qs), to4(k, ks), to4(v, vs));
    // Caches.
    let past = match (past_k, past_v) {
        (Some(pk), Some(pv)) => {
            let p = pk.shape.get(2).copied().unwrap_or(0);
            if pk.shape != [batch, hkv, p, dk] || pv.shape != [batch, hkv, p, dv] {
                return Err(OpError::shape(
                    format!("past_key [{batch}, {hkv}, past, {dk}] and past_value [{batch}, {hkv}, past, {dv}]"),
                    (&pk.shape, &pv.shape),
                ));
            }
            let float = |d: DType| d.is_float() || d == DType::BF16;
            if !float(pk.dtype) || !float(pv.dtype) {
                return Err(OpError::DType {
                    index: 4,
                    expected: "float".into(),
                    got: format!("{} and {}", pk.dtype, pv.dtype),
                });
            }
            Some((p, pk.to_f32_vec(), pv.to_f32_vec()))
        }
        _ => None,
    };
    let p = past.as_ref().map_or(0, |x| x.0);
    let total = p
        .checked_add(skv)
        .ok_or_else(|| too_large("present_key/present_value"))?;
    checked(&[batch, hkv, total, dk.max(dv)], "present_key/present_value")?;
    checked(&[sq, total], "one head's score matrix")?;
    let (kp, vp) = match &past {
        Some((_, pk, pv)) => (
            concat_seq(pk, &kv, batch * hkv, p, skv, dk),
            concat_seq(pv, &vv, batch * hkv, p, skv, dv),
        ),
        None => (kv, vv),
    };
    let lens: Option<Vec<i64>> = match nonpad {
        Some(t) => {
            if !matches!(t.dtype, DType::I64 | DType::I32) || t.shape != [batch] {
                return Err(OpError::shape(
                    format!("nonpad_kv_seqlen: int64 of shape [{batch}]"),
                    (&t.shape, t.dtype.to_string()),
                ));
            }
            Some(t.to_i64_vec())
        }
        None => None,
    };
    let mask = mask.map(|m| Mask::new(m, [batch, hq, sq, total])).transpose()?;
    let want_qk = ctx.node.outputs.get(3).is_some_and(|n| !n.is_empty());
    if want_qk {
        checked(&[batch, hq, sq, total], "qk_matmul_output")?;
    }

    // f16 and bfloat16 inputs round where the reference rounds (see the module doc).
    let narrow: Option<fn(f32) -> f32> = match q.dtype {
        DType::F16 => Some(|v| half::f16::from_f32(v).to_f32()),
        DType::BF16 => Some(|v| bf16_decode(bf16_encode(v))),
        _ => None,
    };
    let rnd = |v: f32| narrow.map_or(v, |r| r(v));
    let root = match (narrow, a.scale) {
        // The reference forms the default scale in f64 and rounds its root to the type.
        (Some(r), None) => r((1.0 / (dq as f64).sqrt()).sqrt() as f32),
        (Some(r), Some(s)) => r(s.sqrt()),
        (None, s) => s.unwrap_or(1.0 / (dq as f32).sqrt()).sqrt(),
    };
    let qv: Vec<f32> = qv.iter().map(|x| rnd(x * root)).collect();
    let ks_scaled: Vec<f32> = kp.iter().map(|x| rnd(x * root)).collect();
    // Scores stay in the narrow type unless softcap (an f32 attribute) promotes them to f32;
    // the softmax runs in it unless `softmax_precision` names another type.
    let sp = ctx.node.attr_int("softmax_precision", 0)?;
    let same_type = sp == 0 || sp == i64::from(q.dtype.onnx_code());
    let narrow_scores = narrow.filter(|_| a.softcap <= 0.0);
    let narrow_softmax = narrow_scores.filter(|_| same_type);
    let product = |m: usize, n: usize, k: usize, x: MatRef, y: MatRef, out: &mut [f32]| {
        if let Some(r) = narrow {
            hgemm_f32_acc(m, n, k, x, y, out);
            out.iter_mut().for_each(|v| *v = r(*v));
        } else {
            sgemm(m, n, k, x, y, out, false, false);
        }
    };
    let group = hq / hkv;
    let mut y = vec![0f32; batch * hq * sq * dv];
    let mut qk_out = if want_qk {
        vec![0f32; batch * hq * sq * total]
    } else {
        Vec::new()
    };
    let mut scores = vec![0f32; sq * total];
    let mut bias = vec![0f32; sq * total];
    for b in 0..batch {
        // Offset of the first query among the keys (causal and window masks).
        let offset: i64 = match (&lens, p) {
            (Some(l), _) => l[b] - sq as i64,
            (None, p) => p as i64,
        };
        for h in 0..hq {
            let kvh = h / group;
            // The additive bias of this (batch, head).
            for i in 0..sq {
                for j in 0..total {
                    let mut x = match &mask {
                        Some(m) if j < m.last => m.v[b * m.st[0] + h * m.st[1] + i * m.st[2] + j],
                        Some(_) => f32::NEG_INFINITY,
                        None => 0.0,
                    };
                    let ahead = i as i64 + offset - j as i64;
                    if a.causal && ahead < 0 {
                        x += f32::NEG_INFINITY;
                    }
                    if (a.left >= 0 && ahead > a.left) || (a.right >= 0 && -ahead > a.right) {
                        x += f32::NEG_INFINITY;
                    }
                    if let Some(l) = &lens {
                        if j as i64 >= l[b] {
                            x += f32::NEG_INFINITY;
                        }
                    }
                    bias[i * total + j] = x;
                }
            }
            let qh = &qv[(b * hq + h) * sq * dq..(b * hq + h + 1) * sq * dq];
            let kh = &ks_scaled[(b * hkv + kvh) * total * dk..(b * hkv + kvh + 1) * total * dk];
            product(
                sq,
                total,
                dq,
                MatRef::row_major(qh, dq, false),
                MatRef::row_major(kh, dk, true),
                &mut scores,
            );
            let out_at = (b * hq + h) * sq * total;
            if want_qk && a.qk_mode == 0 {
                qk_out[out_at..out_at + sq * total].copy_from_slice(&scores);
            }
            if a.softcap > 0.0 {
                for s in scores.iter_mut() {
                    *s = a.softcap * (*s / a.softcap).tanh();
                }
            }
            if want_qk && a.qk_mode == 1 {
                qk_out[out_at..out_at + sq * total].copy_from_slice(&scores);
            }
            for (s, bv) in scores.iter_mut().zip(&bias) {
                *s = narrow_scores.map_or(*s + bv, |r| r(*s + bv));
            }
            if want_qk && a.qk_mode == 2 {
                qk_out[out_at..out_at + sq * total].copy_from_slice(&scores);
            }
            for i in 0..sq {
                let row = &mut scores[i * total..(i + 1) * total];
                let brow = &bias[i * total..(i + 1) * total];
                // The fully-masked-row guard is decided on the bias, not on the scores.
                let nan_max = |m: f32, x: f32| if m.is_nan() || x.is_nan() { f32::NAN } else { m.max(x) };
                if total == 0 || brow.iter().copied().fold(f32::NEG_INFINITY, nan_max) == f32::NEG_INFINITY {
                    row.fill(0.0);
                } else if let Some(r) = narrow_softmax {
                    let f32_sum = q.dtype == DType::F16;
                    let p = super::softmax::softmax_rounded(row, (1, total, 1), r, f32_sum);
                    row.copy_from_slice(&p);
                } else {
                    softmax(row, a.softmax_f64);
                    row.iter_mut().for_each(|v| *v = rnd(*v));
                }
            }
            if want_qk && a.qk_mode == 3 {
                qk_out[out_at..out_at + sq * total].copy_from_slice(&scores);
            }
            let vh = &vp[(b * hkv + kvh) * total * dv..(b * hkv + kvh + 1) * total * dv];
            let yh = &mut y[(b * hq + h) * sq * dv..(b * hq + h + 1) * sq * dv];
            product(
                sq,
                dv,
                total,
                MatRef::row_major(&scores, total, false),
                MatRef::row_major(vh, dv, false),
                yh,
            );
        }
    }
    let dtype = q.dtype;
    let f = |shape: Vec<usize>, v: Vec<f32>, dt: DType| -> Result<Tensor, OpError> {
        Ok(make(DType::F32, shape, Data::F32(v))?.cast(dt))
    };
    let y = if rank == 4 {
        f(vec![batch, hq, sq, dv], y, dtype)?
    } else {
        f(vec![batch, sq, hq * dv], merge_heads(&y, batch, hq, sq, dv), dtype)?
    };
    let mut outs = vec![
        y,
        f(vec![batch, hkv, total, dk], kp, k.dtype)?,
        f(vec![batch, hkv, total, dv], vp, v.dtype)?,
    ];
    if want_qk {
        outs.push(f(vec![batch, hq, sq, total], qk_out, dtype)?);
    }
    Ok(outs)
}

/// Static shape rule: `Y`, `present_key`, `present_value` and `qk_matmul_output` from the
/// shapes of Q, K, V and the caches.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (q, k, v) = (inp.get(0)?, inp.get(1)?, inp.get(2)?);
    let past = if ctx.node.inputs.get(4).is_some_and(|n| !n.is_empty()) {
        *inp.get(4)?.1.get(2)?
    } else {
        0
    };
    let (batch, hq, sq, hkv, skv, dk, dv, y) = match (q.1.as_slice(), k.1.as_slice(), v.1.as_slice()) {
        (&[b, hq, sq, _], &[_, hkv, skv, dk], &[_, _, _, dv]) => {
            (b, hq, sq, hkv, skv, dk, dv, vec![b, hq, sq, dv])
        }
        (&[b, sq, _], &[_, skv, kh], &[_, _, vh]) => {
            let hq = usize::try_from(ctx.node.attr_int("q_num_heads", 0).ok()?).ok()?;
            let hkv = usize::try_from(ctx.node.attr_int("kv_num_heads", 0).ok()?).ok()?;
            if hq == 0 || hkv == 0 || !kh.is_multiple_of(hkv) || !vh.is_multiple_of(hkv) {
                return None;
            }
            let dv = vh / hkv;
            (b, hq, sq, hkv, skv, kh / hkv, dv, vec![b, sq, hq.checked_mul(dv)?])
        }
        _ => return None,
    };
    let total = past.checked_add(skv)?;
    Some(vec![
        (q.0, y),
        (k.0, vec![batch, hkv, total, dk]),
        (v.0, vec![batch, hkv, total, dv]),
        (q.0, vec![batch, hq, sq, total]),
    ])
}

/// `Attention` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Attention", 23, eval)
    .infer(infer)
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn t(shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32(shape, (0..n).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect())
    }

    fn run(node: &Node, ins: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval(&OpCtx { node, opset: 23 }, ins)
    }

    #[test]
    fn one_key_gives_its_value_and_masked_rows_are_zero() {
        // With a single key every query attends it fully: Y = V.
        let (q, k) = (t(&[1, 2, 3, 4]), t(&[1, 1, 1, 4]));
        let v = Tensor::from_f32(&[1, 1, 1, 2], vec![5.0, -6.0]);
        let n = Node::new("att", "Attention", &["q", "k", "v", "m"], &["y"]);
        let y = run(&n, &[Some(&q), Some(&k), Some(&v)]).unwrap();
        assert_eq!(y[0].shape, vec![1, 2, 3, 2]);
        assert!(y[0].to_f32_vec().chunks(2).all(|c| c == [5.0, -6.0]));
        // A boolean mask that hides the key from query row 1 zeroes that row only.
        let m = Tensor::new(vec![3, 1], Data::Bool(vec![true, false, true])).unwrap();
        let y = run(&n, &[Some(&q), Some(&k), Some(&v), Some(&m)]).unwrap();
        let y = y[0].to_f32_vec();
        assert_eq!(&y[0..6], &[5.0, -6.0, 0.0, 0.0, 5.0, -6.0]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let (q, k, v) = (t(&[1, 4, 2, 3]), t(&[1, 2, 5, 3]), t(&[1, 2, 5, 2]));
        let n = Node::new("att", "Attention", &["q", "k", "v"], &["y"]);
        assert!(run(&n, &[Some(&q), Some(&k), Some(&v)]).is_ok());
        // query heads not a multiple of the key/value heads
        let k3 = t(&[1, 3, 5, 3]);
        let v3 = t(&[1, 3, 5, 2]);
        assert!(run(&n, &[Some(&q), Some(&k3), Some(&v3)]).is_err());
        // head sizes of Q and K differ, ranks differ
        let k4 = t(&[1, 2, 5, 4]);
        assert!(run(&n, &[Some(&q), Some(&k4), Some(&v)]).is_err());
        let q3 = t(&[1, 2, 12]);
        assert!(run(&n, &[Some(&q3), Some(&k), Some(&v)]).is_err());
        // 3-D inputs need the head counts
        let (k3d, v3d) = (t(&[1, 5, 6]), t(&[1, 5, 4]));
        let e = run(&n, &[Some(&q3), Some(&k3d), Some(&v3d)]);
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        let n3 = n
            .clone()
            .with_attr("q_num_heads", AttrValue::Int(4))
            .with_attr("kv_num_heads", AttrValue::Int(2));
        assert_eq!(
            run(&n3, &[Some(&q3), Some(&k3d), Some(&v3d)]).unwrap()[0].shape,
            vec![1, 2, 8]
        );
        // a mask that does not broadcast, or is longer than the keys
        let m = t(&[3, 5]);
        assert!(run(&n, &[Some(&q), Some(&k), Some(&v), Some(&m)]).is_err());
        let m = t(&[2, 6]);
        assert!(run(&n, &[Some(&q), Some(&k), Some(&v), Some(&m)]).is_err());
        // past_key without past_value
        let pk = t(&[1, 2, 1, 3]);
        let e = run(&n, &[Some(&q), Some(&k), Some(&v), None, Some(&pk)]);
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        // huge head counts on empty tensors are refused before any loop runs
        let e0 = Tensor::from_f32(&[1, 1, 0], vec![]);
        let huge = n
            .clone()
            .with_attr("q_num_heads", AttrValue::Int(1 << 40))
            .with_attr("kv_num_heads", AttrValue::Int(1 << 40));
        let e = run(&huge, &[Some(&e0), Some(&e0), Some(&e0)]);
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        // attribute values
        for (name, val) in [
            ("qk_matmul_output_mode", 4),
            ("softmax_precision", 7),
            ("is_causal", 2),
            ("left_window_size", -2),
        ] {
            let nb = n.clone().with_attr(name, AttrValue::Int(val));
            let e = run(&nb, &[Some(&q), Some(&k), Some(&v)]);
            assert!(matches!(e, Err(OpError::Attribute { .. })), "{name}: {e:?}");
        }
    }
}
