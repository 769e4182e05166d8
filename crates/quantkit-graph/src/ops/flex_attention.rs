//! `FlexAttention` (ai.onnx.preview, version 1): scaled dot-product attention over rank-4
//! `Q [B, Hq, L, E]`, `K [B, Hkv, S, E]`, `V [B, Hkv, S, Ev]` with two optional modifier
//! subgraphs, as PyTorch's `flex_attention`:
//!
//! ```text
//! scores = (Q·√scale) @ (K·√scale)ᵀ      scale defaults to 1/√E
//! scores = score_mod(scores)               (subgraph, one rank-4 input, one output)
//! probs  = softmax(scores, axis = −1)
//! probs  = prob_mod(probs)
//! Y      = probs @ V                       [B, Hq, L, Ev]
//! ```
//!
//! Query head `h` reads K/V head `h / (Hq / Hkv)` (grouped-query attention). Scores,
//! softmax and the last product are held in `softmax_precision` (float32 for float16/
//! float32 inputs, float64 for double, unless the attribute says otherwise) — that is
//! the element type the modifier subgraphs see — and computed in f64; `√scale` is rounded
//! to the input type first, as the ONNX reference does. The subgraphs run in the
//! executor with the enclosing scope and the observer, like `If`'s branches.

use super::OpCtx;
use crate::error::{GraphError, OpError};
use crate::exec::ControlCtx;
use crate::tensor::{DType, Data, Tensor};

/// Largest score tensor accepted, in elements.
const MAX_SCORES: usize = 1 << 28;

/// `FlexAttention` needs the executor (its modifiers are subgraphs): see [`run`].
pub fn eval(_ctx: &OpCtx, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    Err(OpError::Unsupported(
        "FlexAttention runs its modifier subgraphs in the executor".into(),
    ))
}

/// The shapes, checked: `(b, hq, hkv, l, s, e, ev)`.
fn dims(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<[usize; 7], OpError> {
    let (qs, ks, vs) = (&q.shape[..], &k.shape[..], &v.shape[..]);
    let (&[b, hq, l, e], &[kb, hkv, s, ke], &[vb, vh, vsq, ev]) = (qs, ks, vs) else {
        return Err(OpError::shape(
            "rank-4 Q, K and V",
            format!("{qs:?}, {ks:?}, {vs:?}"),
        ));
    };
    if kb != b || vb != b || vh != hkv || vsq != s || ke != e || hkv == 0 || hq % hkv != 0 {
        return Err(OpError::shape(
            "Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev] with Hq a multiple of Hkv",
            format!("{qs:?}, {ks:?}, {vs:?}"),
        ));
    }
    if !q.dtype.is_float() || k.dtype != q.dtype || v.dtype != q.dtype {
        return Err(OpError::DType {
            index: 1,
            expected: format!("float Q, K and V of one type ({})", q.dtype),
            got: format!("{}, {}", k.dtype, v.dtype),
        });
    }
    Ok([b, hq, hkv, l, s, e, ev])
}

/// The element type scores and probabilities are held in.
fn precision(ctx: &ControlCtx, input: DType) -> Result<DType, OpError> {
    match ctx.node.attr("softmax_precision") {
        None if input == DType::F64 => Ok(DType::F64),
        None => Ok(DType::F32),
        Some(_) => match ctx.node.attr_int("softmax_precision", 1)? {
            1 => Ok(DType::F32),
            10 => Ok(DType::F16),
            11 => Ok(DType::F64),
            p => Err(OpError::Unsupported(format!(
                "softmax_precision {p} (float, float16 or double)"
            ))),
        },
    }
}

/// Runs the modifier subgraph `name`, if the node has it, on `t`; its output must keep
/// the shape, and is held in `dtype`.
fn modify(ctx: &mut ControlCtx, name: &str, t: Tensor, dtype: DType) -> Result<Tensor, GraphError> {
    if ctx.node.attr(name).is_none() {
        return Ok(t);
    }
    let g = ctx.node.attr_graph(name).map_err(|e| ctx.err(e))?;
    let shape = t.shape.clone();
    let mut out = ctx.run(g, vec![t])?;
    match out.pop() {
        Some(y) if out.is_empty() && y.shape == shape && y.dtype.is_float() => Ok(y.cast(dtype)),
        _ => Err(ctx.err(OpError::Invalid(format!(
            "{name} must return one float tensor of shape {shape:?}"
        )))),
    }
}

/// Evaluates `FlexAttention` with its modifier subgraphs.
pub fn run(ctx: &mut ControlCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, GraphError> {
    let q = super::input(inputs, 0).map_err(|e| ctx.err(e))?;
    let k = super::input(inputs, 1).map_err(|e| ctx.err(e))?;
    let v = super::input(inputs, 2).map_err(|e| ctx.err(e))?;
    let [b, hq, hkv, l, s, e, ev] = dims(q, k, v).map_err(|err| ctx.err(err))?;
    let dt = precision(ctx, q.dtype).map_err(|err| ctx.err(err))?;
    let n_scores = [b, hq, l, s]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_SCORES)
        .ok_or_else(|| ctx.err(OpError::Invalid(format!("{b}×{hq}×{l}×{s} scores is too large"))))?;
    let scale = match ctx.node.attr("scale") {
        Some(_) => ctx.node.attr_float("scale", 1.0).map_err(|err| ctx.err(err))? as f64,
        None => 1.0 / (e as f64).sqrt(),
    };
    // √scale in f32, then in the input type (the reference scales Q and K by it).
    let root = Tensor::new(vec![1], Data::F64(vec![(scale as f32).sqrt() as f64]))
        .map_err(|err| ctx.err(OpError::Invalid(err.to_string())))?
        .cast(q.dtype)
        .to_f64_vec()[0];
    let rounded = |t: &Tensor| -> Result<Vec<f64>, OpError> {
        let scaled: Vec<f64> = t.to_f64_vec().into_iter().map(|x| x * root).collect();
        Ok(Tensor::new(t.shape.clone(), Data::F64(scaled))
            .map_err(|err| OpError::Invalid(err.to_string()))?
            .cast(q.dtype)
            .to_f64_vec())
    };
    let (qv, kv) = (rounded(q).map_err(|err| ctx.err(err))?, rounded(k).map_err(|err| ctx.err(err))?);
    let group = hq / hkv;
    let mut scores = vec![0f64; n_scores];
    for bh in 0..b * hq {
        let kvh = (bh / hq) * hkv + (bh % hq) / group;
        for i in 0..l {
            let qrow = &qv[(bh * l + i) * e..][..e];
            for j in 0..s {
                let krow = &kv[(kvh * s + j) * e..][..e];
                scores[(bh * l + i) * s + j] = qrow.iter().zip(krow).map(|(a, c)| a * c).sum();
            }
        }
    }
    let held = |v: Vec<f64>| -> Result<Tensor, OpError> {
        Ok(Tensor::new(vec![b, hq, l, s], Data::F64(v))
            .map_err(|err| OpError::Invalid(err.to_string()))?
            .cast(dt))
    };
    let scores = held(scores).map_err(|err| ctx.err(err))?;
    let scores = modify(ctx, "score_mod", scores, dt)?.to_f64_vec();
    let mut probs = vec![0f64; n_scores];
    for (row, out) in scores.chunks(s.max(1)).zip(probs.chunks_mut(s.max(1))) {
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for (o, &x) in out.iter_mut().zip(row) {
            *o = (x - m).exp();
        }
        let sum: f64 = out.iter().sum();
        out.iter_mut().for_each(|o| *o /= sum);
    }
    let probs = held(probs).map_err(|err| ctx.err(err))?;
    let probs = modify(ctx, "prob_mod", probs, dt)?.to_f64_vec();
    let vv = Tensor::new(v.shape.clone(), Data::F64(v.to_f64_vec()))
        .map_err(|err| ctx.err(OpError::Invalid(err.to_string())))?
        .cast(dt)
        .to_f64_vec();
    let mut y = vec![0f64; b * hq * l * ev];
    for bh in 0..b * hq {
        let kvh = (bh / hq) * hkv + (bh % hq) / group;
        for i in 0..l {
            let p = &probs[(bh * l + i) * s..][..s];
            let out = &mut y[(bh * l + i) * ev..][..ev];
            for (j, &pj) in p.iter().enumerate() {
                let vrow = &vv[(kvh * s + j) * ev..][..ev];
                for (o, &x) in out.iter_mut().zip(vrow) {
                    *o += pj * x;
                }
            }
        }
    }
    let y = Tensor::new(vec![b, hq, l, ev], Data::F64(y))
        .map_err(|err| ctx.err(OpError::Invalid(err.to_string())))?
        .cast(dt)
        .cast(v.dtype);
    Ok(vec![y])
}

/// The shape rule: `[B, Hq, L, Ev]` in the type of `V`.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, q) = inp.get(0)?;
    let (_, v) = inp.get(2)?;
    (q.len() == 4 && v.len() == 4).then(|| vec![(*dt, vec![q[0], q[1], q[2], v[3]])])
}

/// `FlexAttention` in the operator registry (domain `ai.onnx.preview`).
pub const DEF: super::OpDef = super::OpDef::onnx("FlexAttention", 1, eval)
    .domain(super::PREVIEW_DOMAIN)
    .infer(infer)
    .control(run);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        let t = |s: &[usize]| Tensor::from_f32(s, vec![0.0; s.iter().product()]);
        let (q, k, v) = (t(&[1, 4, 3, 8]), t(&[1, 2, 5, 8]), t(&[1, 2, 5, 6]));
        assert_eq!(dims(&q, &k, &v).unwrap(), [1, 4, 2, 3, 5, 8, 6]);
        // Hq not a multiple of Hkv, K/V sequence lengths apart, head sizes apart, rank 3.
        assert!(dims(&t(&[1, 3, 3, 8]), &k, &v).is_err());
        assert!(dims(&q, &k, &t(&[1, 2, 4, 6])).is_err());
        assert!(dims(&q, &t(&[1, 2, 5, 7]), &v).is_err());
        assert!(dims(&t(&[4, 3, 8]), &k, &v).is_err());
        let ints = Tensor::from_i64(&[1, 4, 3, 8], vec![0; 96]);
        assert!(dims(&ints, &k, &v).is_err());
    }
}
