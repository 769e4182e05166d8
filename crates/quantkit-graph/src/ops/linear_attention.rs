//! `LinearAttention` (opset 27): linear attention as a recurrence over the sequence, one
//! state `S` `[d_k, d_v]` per key/value head, run token by token (the spec's definition;
//! `chunk_size` is only a tuning hint):
//!
//! - `linear`: `S ← S + k⊗v`;
//! - `gated`: `S ← exp(g)·S + k⊗v`;
//! - `delta`: `S ← S + β·k⊗(v − Sᵀk)`;
//! - `gated_delta` (default): `S ← exp(g)·S + β·k⊗(v − exp(g)·Sᵀk)`;
//!
//! then `o = scale·qᵀS` (`scale` 0 means `1/√d_k`). Inputs are packed `[B, T, heads·d]`
//! with `q_num_heads` a multiple of `kv_num_heads` (each key/value head serves
//! `q_num_heads / kv_num_heads` query heads); the decay `g` is per key dimension
//! `[B, T, H_kv·d_k]` or per head `[B, T, H_kv]`, `β` per head `[B, T, H_kv]` or shared
//! `[B, T, 1]`; `past_state`/`present_state` are `[B, H_kv, d_k, d_v]`. Computed in f32,
//! as the reference does.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

fn float_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, OpError> {
    let t = input(inputs, i)?;
    if !t.dtype.is_float() {
        return Err(OpError::DType {
            index: i,
            expected: "float".into(),
            got: t.dtype.to_string(),
        });
    }
    Ok(t)
}

/// `[b, t, h·d]` → `[b, h, t, d]`.
fn heads(v: &[f32], b: usize, t: usize, h: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for bi in 0..b {
        for ti in 0..t {
            for hi in 0..h {
                let src = ((bi * t + ti) * h + hi) * d;
                let dst = ((bi * h + hi) * t + ti) * d;
                out[dst..dst + d].copy_from_slice(&v[src..src + d]);
            }
        }
    }
    out
}

/// Evaluates `LinearAttention`: `output`, `present_state`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let n = ctx.node;
    let rule = n.attr_string("update_rule", "gated_delta")?;
    let (gating, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(OpError::attr(
                "update_rule",
                format!("expected linear, gated, delta or gated_delta, got {other:?}"),
            ))
        }
    };
    let hq = n.attr_int("q_num_heads", 0)?;
    let hkv = n.attr_int("kv_num_heads", 0)?;
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(OpError::attr(
            "q_num_heads",
            format!("q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})"),
        ));
    }
    let (hq, hkv) = (hq as usize, hkv as usize);
    let q = float_input(inputs, 0)?;
    let k = float_input(inputs, 1)?;
    let v = float_input(inputs, 2)?;
    let past = opt_input(inputs, 3);
    let decay = opt_input(inputs, 4);
    let beta = opt_input(inputs, 5);
    if gating != decay.is_some() || delta != beta.is_some() {
        return Err(OpError::Invalid(format!(
            "update_rule {rule} {} decay and {} beta",
            if gating { "needs" } else { "takes no" },
            if delta { "needs" } else { "takes no" }
        )));
    }
    let [b, t, qw] = match *q.shape.as_slice() {
        [b, t, w] => [b, t, w],
        _ => return Err(OpError::shape("query of rank 3 [B, T, heads·d_k]", &q.shape)),
    };
    if !qw.is_multiple_of(hq) || !v.shape.get(2).is_some_and(|w| w.is_multiple_of(hkv)) {
        return Err(OpError::shape(
            format!("query and value widths divisible by {hq} and {hkv} heads"),
            (&q.shape, &v.shape),
        ));
    }
    let dk = qw / hq;
    let dv = v.shape[2] / hkv;
    // Bounds the output, the state and the loops over (batch, token, head) and (batch, head)
    // even when some sizes are zero (huge head counts on empty tensors): the `max(1)`s
    // count a zero-width head as one iteration.
    let bound = |dims: [usize; 4], what: &str| {
        dims.iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= super::max_elements())
            .map(|_| ())
            .ok_or_else(|| {
                OpError::Invalid(format!(
                    "{what} {dims:?} would have more than {} elements",
                    super::max_elements()
                ))
            })
    };
    bound([b, t, hq, dv.max(1)], "output [B, T, q_heads, d_v]")?;
    bound([b, hkv, dk.max(1), dv.max(1)], "state [B, kv_heads, d_k, d_v]")?;
    if k.shape != [b, t, hkv * dk] || v.shape != [b, t, hkv * dv] {
        return Err(OpError::shape(
            format!("key [{b}, {t}, {}] and value [{b}, {t}, kv_heads·d_v]", hkv * dk),
            (&k.shape, &v.shape),
        ));
    }
    // Decay per key dimension (stride 1 over d_k) or per head (one value).
    let decay = match decay {
        Some(g) => {
            if !g.dtype.is_float() || g.rank() != 3 || g.shape[..2] != [b, t] {
                return Err(OpError::shape(format!("float decay [{b}, {t}, ...]"), &g.shape));
            }
            let per_dim = if g.shape[2] == hkv {
                false
            } else if g.shape[2] == hkv * dk {
                true
            } else {
                return Err(OpError::shape(
                    format!("decay width {hkv} or {}", hkv * dk),
                    &g.shape,
                ));
            };
            let w = if per_dim { dk } else { 1 };
            Some((heads(&g.to_f32_vec(), b, t, hkv, w), w))
        }
        None => None,
    };
    let beta = match beta {
        Some(bt) => {
            if !bt.dtype.is_float()
                || bt.rank() != 3
                || bt.shape[..2] != [b, t]
                || !(bt.shape[2] == hkv || bt.shape[2] == 1)
            {
                return Err(OpError::shape(
                    format!("float beta [{b}, {t}, {hkv} or 1]"),
                    &bt.shape,
                ));
            }
            Some((bt.to_f32_vec(), bt.shape[2]))
        }
        None => None,
    };
    let mut state = match past {
        Some(p) => {
            if !p.dtype.is_float() || p.shape != [b, hkv, dk, dv] {
                return Err(OpError::shape(
                    format!("float past_state [{b}, {hkv}, {dk}, {dv}]"),
                    &p.shape,
                ));
            }
            p.to_f32_vec()
        }
        None => vec![0f32; b * hkv * dk * dv],
    };
    let scale = n.attr_float("scale", 0.0)?;
    let scale = if scale == 0.0 {
        1.0 / (dk as f32).sqrt()
    } else {
        scale
    };
    let q4 = heads(&q.to_f32_vec(), b, t, hq, dk);
    let k4 = heads(&k.to_f32_vec(), b, t, hkv, dk);
    let v4 = heads(&v.to_f32_vec(), b, t, hkv, dv);
    let group = hq / hkv;
    let mut out = vec![0f32; b * t * hq * dv];
    let mut vt = vec![0f32; dv];
    for bi in 0..b {
        for h in 0..hkv {
            let s = &mut state[(bi * hkv + h) * dk * dv..(bi * hkv + h + 1) * dk * dv];
            for ti in 0..t {
                let kt = &k4[((bi * hkv + h) * t + ti) * dk..][..dk];
                vt.copy_from_slice(&v4[((bi * hkv + h) * t + ti) * dv..][..dv]);
                if let Some((g, w)) = &decay {
                    let g = &g[((bi * hkv + h) * t + ti) * w..][..*w];
                    for d in 0..dk {
                        let f = g[if *w == 1 { 0 } else { d }].exp();
                        s[d * dv..(d + 1) * dv].iter_mut().for_each(|x| *x *= f);
                    }
                }
                if let Some((bv, w)) = &beta {
                    let beta = bv[(bi * t + ti) * w + if *w == 1 { 0 } else { h }];
                    for (m, x) in vt.iter_mut().enumerate() {
                        let retrieved: f32 = (0..dk).map(|d| s[d * dv + m] * kt[d]).sum();
                        *x = beta * (*x - retrieved);
                    }
                }
                for d in 0..dk {
                    for m in 0..dv {
                        s[d * dv + m] += kt[d] * vt[m];
                    }
                }
                for qh in h * group..(h + 1) * group {
                    let qt = &q4[((bi * hq + qh) * t + ti) * dk..][..dk];
                    let o = &mut out[((bi * t + ti) * hq + qh) * dv..][..dv];
                    for (m, om) in o.iter_mut().enumerate() {
                        *om = scale * (0..dk).map(|d| qt[d] * s[d * dv + m]).sum::<f32>();
                    }
                }
            }
        }
    }
    let state_dtype = past.map_or(q.dtype, |p| p.dtype);
    Ok(vec![
        make(DType::F32, vec![b, t, hq * dv], Data::F32(out))?.cast(q.dtype),
        make(DType::F32, vec![b, hkv, dk, dv], Data::F32(state))?.cast(state_dtype),
    ])
}

/// Static shape rule: `output` `[B, T, q_heads·d_v]`, `present_state` `[B, kv_heads, d_k,
/// d_v]`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (q, v) = (inp.get(0)?, inp.get(2)?);
    let hq = usize::try_from(ctx.node.attr_int("q_num_heads", 0).ok()?).ok()?;
    let hkv = usize::try_from(ctx.node.attr_int("kv_num_heads", 0).ok()?).ok()?;
    let (&[b, t, qw], &[_, _, vw]) = (q.1.as_slice(), v.1.as_slice()) else {
        return None;
    };
    if hq == 0 || hkv == 0 {
        return None;
    }
    let (dk, dv) = (qw / hq, vw / hkv);
    Some(vec![
        (q.0, vec![b, t, hq.checked_mul(dv)?]),
        (q.0, vec![b, hkv, dk, dv]),
    ])
}

/// `LinearAttention` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("LinearAttention", 27, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn run(node: &Node, ins: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval(&OpCtx { node, opset: 27 }, ins)
    }

    fn node(rule: &str) -> Node {
        Node::new("la", "LinearAttention", &["q", "k", "v", "p", "g", "b"], &["o", "s"])
            .with_attr("update_rule", AttrValue::String(rule.as_bytes().to_vec()))
            .with_attr("q_num_heads", AttrValue::Int(1))
            .with_attr("kv_num_heads", AttrValue::Int(1))
            .with_attr("scale", AttrValue::Float(1.0))
    }

    #[test]
    fn linear_and_delta_rules_and_bad_inputs() {
        // d_k = d_v = 1: S accumulates k·v, o = q·S.
        let q = Tensor::from_f32(&[1, 2, 1], vec![1.0, 2.0]);
        let k = Tensor::from_f32(&[1, 2, 1], vec![1.0, 1.0]);
        let v = Tensor::from_f32(&[1, 2, 1], vec![3.0, 5.0]);
        let out = run(&node("linear"), &[Some(&q), Some(&k), Some(&v)]).unwrap();
        assert_eq!(out[0].to_f32_vec(), vec![3.0, 16.0]);
        assert_eq!(out[1].to_f32_vec(), vec![8.0]);
        // delta with β = 1 and unit keys: S becomes the latest value.
        let beta = Tensor::from_f32(&[1, 2, 1], vec![1.0, 1.0]);
        let ins = [Some(&q), Some(&k), Some(&v), None, None, Some(&beta)];
        let out = run(&node("delta"), &ins).unwrap();
        assert_eq!(out[0].to_f32_vec(), vec![3.0, 10.0]);
        // the rule decides which of decay and beta are required
        assert!(run(&node("linear"), &ins).is_err());
        assert!(run(&node("gated_delta"), &ins).is_err());
        let bad = Node::new("la", "LinearAttention", &["q", "k", "v"], &["o", "s"])
            .with_attr("update_rule", AttrValue::String(b"x".to_vec()))
            .with_attr("q_num_heads", AttrValue::Int(1))
            .with_attr("kv_num_heads", AttrValue::Int(1));
        assert!(run(&bad, &[Some(&q), Some(&k), Some(&v)]).is_err());
        // heads that do not divide, a key of the wrong width
        let nh = Node::new("la", "LinearAttention", &["q", "k", "v"], &["o", "s"])
            .with_attr("update_rule", AttrValue::String(b"linear".to_vec()))
            .with_attr("q_num_heads", AttrValue::Int(3))
            .with_attr("kv_num_heads", AttrValue::Int(2));
        let e = run(&nh, &[Some(&q), Some(&k), Some(&v)]);
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        let e0 = Tensor::from_f32(&[1, 1, 0], vec![]);
        let huge = Node::new("la", "LinearAttention", &["q", "k", "v"], &["o", "s"])
            .with_attr("update_rule", AttrValue::String(b"linear".to_vec()))
            .with_attr("q_num_heads", AttrValue::Int(1 << 40))
            .with_attr("kv_num_heads", AttrValue::Int(1 << 40));
        let e = run(&huge, &[Some(&e0), Some(&e0), Some(&e0)]);
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        // with no tokens the output is empty, but the (batch, head) loop and the state are not
        let t0 = Tensor::from_f32(&[1, 0, 0], vec![]);
        let e = run(&huge, &[Some(&t0), Some(&t0), Some(&t0)]);
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        // nor huge head widths that only the state would hold
        let wide = Tensor::from_f32(&[1, 0, 1 << 20], vec![]);
        let e = run(&node("linear"), &[Some(&wide), Some(&wide), Some(&wide)]);
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        let k2 = Tensor::from_f32(&[1, 2, 2], vec![0.0; 4]);
        assert!(run(&node("linear"), &[Some(&q), Some(&k2), Some(&v)]).is_err());
    }

    #[test]
    fn shape_rule_refuses_overflowing_head_counts() {
        let consts = std::collections::BTreeMap::new();
        let (q, v): (super::super::Info, super::super::Info) =
            ((DType::F32, vec![1, 2, 4]), (DType::F32, vec![1, 2, 6]));
        let ins = [Some(&q), Some(&q), Some(&v)];
        let inp = super::super::InferIn { ins: &ins, consts: &consts };
        let n = Node::new("la", "LinearAttention", &["q", "k", "v"], &["o", "s"])
            .with_attr("q_num_heads", AttrValue::Int(2))
            .with_attr("kv_num_heads", AttrValue::Int(2));
        let out = infer(&OpCtx { node: &n, opset: 27 }, &inp).unwrap();
        assert_eq!(out[0].1, [1, 2, 6]);
        assert_eq!(out[1].1, [1, 2, 2, 3]);
        // q_num_heads · d_v overflows usize: no shape, and no panic
        let v = (DType::F32, vec![1, 2, 1 << 40]);
        let ins = [Some(&q), Some(&q), Some(&v)];
        let inp = super::super::InferIn { ins: &ins, consts: &consts };
        let n = Node::new("la", "LinearAttention", &["q", "k", "v"], &["o", "s"])
            .with_attr("q_num_heads", AttrValue::Int(1 << 40))
            .with_attr("kv_num_heads", AttrValue::Int(1));
        assert!(infer(&OpCtx { node: &n, opset: 27 }, &inp).is_none());
    }
}
