//! `RotaryEmbedding` (opset 23): rotates pairs of each head's first `rotary_embedding_dim`
//! features (default: the whole head) by the angles whose cosines and sines are given,
//! `(x₁, x₂) → (cos·x₁ − sin·x₂, sin·x₁ + cos·x₂)`. The pairs are the two halves of the
//! rotated part, or with `interleaved` neighbouring features `(2j, 2j + 1)`.
//!
//! `X` is `[batch, heads, seq, head_size]`, or `[batch, seq, heads·head_size]` with the
//! `num_heads` attribute. With `position_ids` (`[batch, seq]`) the caches are
//! `[max_position + 1, rotary_dim / 2]` tables indexed by position; without, they are
//! `[batch, seq, rotary_dim / 2]`. A 3-D input without `num_heads` takes its head size
//! from the caches (full rotation), as ONNX Runtime does.

use super::{input, opt_input, OpCtx};
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

/// Evaluates `RotaryEmbedding`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = float_input(inputs, 0)?;
    let cos = float_input(inputs, 1)?;
    let sin = float_input(inputs, 2)?;
    let pos = opt_input(inputs, 3);
    let interleaved = ctx.node.attr_int("interleaved", 0)? != 0;
    let num_heads = ctx.node.attr_int("num_heads", 0)?;
    let rot_attr = ctx.node.attr_int("rotary_embedding_dim", 0)?;
    if num_heads < 0 || rot_attr < 0 {
        return Err(OpError::attr(
            "num_heads",
            format!("num_heads {num_heads} and rotary_embedding_dim {rot_attr} must be ≥ 0"),
        ));
    }
    // (batch, seq, heads, head size, whether heads come before seq in memory)
    let (batch, seq, heads, hsz, heads_first) = match *x.shape.as_slice() {
        [b, h, s, d] => (b, s, h, d, true),
        [b, s, hidden] => {
            let heads = if num_heads > 0 {
                num_heads as usize
            } else {
                match cos.shape.last() {
                    Some(&c) if c > 0 && hidden.is_multiple_of(2 * c) => hidden / (2 * c),
                    _ => {
                        return Err(OpError::attr(
                            "num_heads",
                            "required for a 3-D input whose hidden size is not a multiple of the caches' width",
                        ))
                    }
                }
            };
            if !hidden.is_multiple_of(heads) {
                return Err(OpError::shape(
                    format!("a hidden size divisible by num_heads {heads}"),
                    &x.shape,
                ));
            }
            (b, s, heads, hidden / heads, false)
        }
        _ => return Err(OpError::shape("X of rank 3 or 4", &x.shape)),
    };
    let rot = if rot_attr == 0 { hsz } else { rot_attr as usize };
    if !rot.is_multiple_of(2) || rot > hsz {
        return Err(OpError::attr(
            "rotary_embedding_dim",
            format!("{rot} must be even and at most the head size {hsz}"),
        ));
    }
    let half = rot / 2;
    // Row of the caches for (b, s): looked up in `position_ids`, or `b·seq + s` without.
    let rows: Option<Vec<usize>> = match pos {
        Some(p) => {
            if !matches!(p.dtype, DType::I64 | DType::I32) {
                return Err(OpError::DType {
                    index: 3,
                    expected: "int64".into(),
                    got: p.dtype.to_string(),
                });
            }
            if p.shape != [batch, seq] {
                return Err(OpError::shape(
                    format!("position_ids of shape [{batch}, {seq}]"),
                    &p.shape,
                ));
            }
            if cos.rank() != 2 || cos.shape[1] != half || sin.shape != cos.shape {
                return Err(OpError::shape(
                    format!("cos_cache and sin_cache of shape [max_position + 1, {half}]"),
                    (&cos.shape, &sin.shape),
                ));
            }
            let max = cos.shape[0];
            let rows = p
                .to_i64_vec()
                .into_iter()
                .map(|v| {
                    usize::try_from(v).ok().filter(|&v| v < max).ok_or_else(|| {
                        OpError::Invalid(format!("position id {v} outside [0, {max})"))
                    })
                })
                .collect::<Result<_, _>>()?;
            Some(rows)
        }
        None => {
            if cos.shape != [batch, seq, half] || sin.shape != cos.shape {
                return Err(OpError::shape(
                    format!("cos_cache and sin_cache of shape [{batch}, {seq}, {half}]"),
                    (&cos.shape, &sin.shape),
                ));
            }
            None
        }
    };
    // An empty X (which includes every empty head) passes through unchanged; skipping the
    // loops here also keeps them bounded by the data, since the (batch, seq, head) triples
    // of an empty tensor can be arbitrarily many.
    if x.is_empty() {
        return Ok(vec![x.clone()]);
    }
    let mut y = x.to_f32_vec();
    let (cv, sv) = (cos.to_f32_vec(), sin.to_f32_vec());
    for b in 0..batch {
        for s in 0..seq {
            let row = rows.as_ref().map_or(b * seq + s, |r| r[b * seq + s]) * half;
            let (c, sn) = (&cv[row..row + half], &sv[row..row + half]);
            for h in 0..heads {
                let at = if heads_first {
                    ((b * heads + h) * seq + s) * hsz
                } else {
                    ((b * seq + s) * heads + h) * hsz
                };
                let v = &mut y[at..at + rot];
                for j in 0..half {
                    let (i1, i2) = if interleaved { (2 * j, 2 * j + 1) } else { (j, half + j) };
                    let (x1, x2) = (v[i1], v[i2]);
                    v[i1] = c[j] * x1 - sn[j] * x2;
                    v[i2] = sn[j] * x1 + c[j] * x2;
                }
            }
        }
    }
    Ok(vec![super::make(DType::F32, x.shape.clone(), Data::F32(y))?.cast(x.dtype)])
}

/// `RotaryEmbedding` in the operator registry: same type and shape as `X`.
pub const DEF: super::OpDef =
    super::OpDef::onnx("RotaryEmbedding", 23, eval).infer(super::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn run(node: &Node, ins: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval(&OpCtx { node, opset: 23 }, ins)
    }

    #[test]
    fn rotates_pairs_and_rejects_bad_input() {
        // One head of 4 features, one position: angle 90° turns (x1, x2) into (−x2, x1).
        let x = Tensor::from_f32(&[1, 1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let cos = Tensor::from_f32(&[1, 1, 2], vec![0.0, 1.0]);
        let sin = Tensor::from_f32(&[1, 1, 2], vec![1.0, 0.0]);
        let n = Node::new("rope", "RotaryEmbedding", &["x", "c", "s"], &["y"]);
        let y = run(&n, &[Some(&x), Some(&cos), Some(&sin)]).unwrap();
        // halves: pairs (1, 3) rotated 90°, (2, 4) unrotated
        assert_eq!(y[0].to_f32_vec(), vec![-3.0, 2.0, 1.0, 4.0]);
        let ni = n.clone().with_attr("interleaved", AttrValue::Int(1));
        let y = run(&ni, &[Some(&x), Some(&cos), Some(&sin)]).unwrap();
        // neighbours: pairs (1, 2) rotated 90°, (3, 4) unrotated
        assert_eq!(y[0].to_f32_vec(), vec![-2.0, 1.0, 3.0, 4.0]);
        // odd or too large rotary_embedding_dim
        for d in [3, 6] {
            let nd = n.clone().with_attr("rotary_embedding_dim", AttrValue::Int(d));
            assert!(run(&nd, &[Some(&x), Some(&cos), Some(&sin)]).is_err());
        }
        // caches of the wrong width, position ids out of range, wrong rank
        let c3 = Tensor::from_f32(&[1, 1, 3], vec![0.0; 3]);
        assert!(run(&n, &[Some(&x), Some(&c3), Some(&c3)]).is_err());
        let table = Tensor::from_f32(&[2, 2], vec![1.0; 4]);
        let pos = Tensor::from_i64(&[1, 1], vec![2]);
        let e = run(&n, &[Some(&x), Some(&table), Some(&table), Some(&pos)]);
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        let x2 = Tensor::from_f32(&[4], vec![0.0; 4]);
        assert!(run(&n, &[Some(&x2), Some(&cos), Some(&sin)]).is_err());
        // a 3-D input whose hidden size does not split into the given heads
        let x3 = Tensor::from_f32(&[1, 1, 6], vec![0.0; 6]);
        let n4 = n.clone().with_attr("num_heads", AttrValue::Int(4));
        assert!(run(&n4, &[Some(&x3), Some(&cos), Some(&sin)]).is_err());
        // Empty inputs with huge head counts or sequence lengths pass through unchanged
        // without iterating over their (batch, seq, head) triples or allocating a row per
        // position.
        let e0 = Tensor::from_f32(&[1, 1, 0], vec![]);
        let c0 = Tensor::from_f32(&[1, 1, 0], vec![]);
        let nh = n.clone().with_attr("num_heads", AttrValue::Int(1 << 40));
        let y = run(&nh, &[Some(&e0), Some(&c0), Some(&c0)]).unwrap();
        assert_eq!(y[0].shape, [1, 1, 0]);
        // ... but a rotary_embedding_dim larger than the empty head is still an error
        let nhd = nh.clone().with_attr("rotary_embedding_dim", AttrValue::Int(2));
        assert!(run(&nhd, &[Some(&e0), Some(&c0), Some(&c0)]).is_err());
        let big = 1usize << 20;
        let e4 = Tensor::from_f32(&[1, big, big, 0], vec![]);
        let c4 = Tensor::from_f32(&[1, big, 0], vec![]);
        let y = run(&n, &[Some(&e4), Some(&c4), Some(&c4)]).unwrap();
        assert_eq!(y[0].shape, [1, big, big, 0]);
        let e4 = Tensor::from_f32(&[big, 1, big, 0], vec![]);
        let c4 = Tensor::from_f32(&[big, big, 0], vec![]);
        let y = run(&n, &[Some(&e4), Some(&c4), Some(&c4)]).unwrap();
        assert_eq!(y[0].shape, [big, 1, big, 0]);
    }
}
