//! `GroupNormalization` (opsets 18 and 21): the `C` channels of an `N × C × D1 × ...`
//! input split into `num_groups` groups of `C / num_groups`; each image's group is
//! normalized, y = (x − mean) / √(var + epsilon), then scaled and shifted. Opset 18 has one
//! `scale` and `bias` value per group (shape `[num_groups]`); opset 21 one per channel
//! (shape `[C]`) and a `stash_type` (the precision of the first stage: quantkit always
//! accumulates in f64, at least as precise as any the attribute names).

use super::norm::{mean_var, per_channel, require_float};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Evaluates `GroupNormalization`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    if x.rank() < 2 {
        return Err(OpError::shape("an input of rank ≥ 2 (N × C × ...)", &x.shape));
    }
    let eps = ctx.node.attr_float("epsilon", 1e-5)? as f64;
    let g = match ctx.node.attr("num_groups") {
        None => return Err(OpError::attr("num_groups", "required")),
        Some(_) => ctx.node.attr_int("num_groups", 0)?,
    };
    let c = x.shape[1];
    if g <= 0 || c % g as usize != 0 {
        return Err(OpError::attr(
            "num_groups",
            format!("expected a positive divisor of the {c} channels, got {g}"),
        ));
    }
    let g = g as usize;
    // Opset 18: one value per group; from 21 on: one per channel.
    let per_group = ctx.opset < 21;
    let n_par = if per_group { g } else { c };
    let scale = per_channel(input(inputs, 1)?, 1, n_par, "scale")?;
    let bias = per_channel(input(inputs, 2)?, 2, n_par, "bias")?;
    let spatial: usize = x.shape[2..].iter().product();
    let cpg = c / g;
    let block = cpg * spatial;
    let xv = x.to_f64_vec();
    let mut y = vec![0f64; xv.len()];
    if block > 0 {
        for (i, (grp, out)) in xv.chunks(block).zip(y.chunks_mut(block)).enumerate() {
            let gi = i % g;
            let (m, var) = mean_var(grp.iter().copied());
            let inv = 1.0 / (var + eps).sqrt();
            for (j, (o, &v)) in out.iter_mut().zip(grp).enumerate() {
                let p = if per_group { gi } else { gi * cpg + j / spatial };
                *o = (v - m) * inv * scale[p] + bias[p];
            }
        }
    }
    Ok(vec![
        make(DType::F64, x.shape.clone(), Data::F64(y))?.cast(x.dtype)
    ])
}

/// `GroupNormalization` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("GroupNormalization", 18, eval)
    .infer(super::registry::same_as_first);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn node(groups: i64) -> Node {
        Node::new("g", "GroupNormalization", &["x", "s", "b"], &["y"])
            .with_attr("num_groups", AttrValue::Int(groups))
    }

    #[test]
    fn opset_18_scales_per_group_and_opset_21_per_channel() {
        // N = 1, C = 4, 2 groups of 2 channels × 2 values.
        let x = Tensor::from_f32(&[1, 4, 2], (0..8).map(|v| v as f32).collect());
        let n = node(2);
        let s18 = Tensor::from_f32(&[2], vec![2.0, 3.0]);
        let b18 = Tensor::from_f32(&[2], vec![1.0, -1.0]);
        let y18 = eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x), Some(&s18), Some(&b18)])
            .unwrap();
        // The same per-group values repeated per channel give the same result at 21.
        let s21 = Tensor::from_f32(&[4], vec![2.0, 2.0, 3.0, 3.0]);
        let b21 = Tensor::from_f32(&[4], vec![1.0, 1.0, -1.0, -1.0]);
        let y21 = eval(&OpCtx { node: &n, opset: 21 }, &[Some(&x), Some(&s21), Some(&b21)])
            .unwrap();
        assert_eq!(y18[0], y21[0]);
        // Group 0 is [0, 1, 2, 3]: mean 1.5, variance 1.25.
        let want0 = 2.0 * (0.0 - 1.5) / (1.25f64 + 1e-5).sqrt() + 1.0;
        assert!((y18[0].as_f32().unwrap()[0] as f64 - want0).abs() < 1e-5);
        // Per-group parameters are the wrong shape at opset 21, and the reverse.
        assert!(matches!(
            eval(&OpCtx { node: &n, opset: 21 }, &[Some(&x), Some(&s18), Some(&b18)]),
            Err(OpError::ShapeMismatch { .. })
        ));
        assert!(matches!(
            eval(&OpCtx { node: &n, opset: 18 }, &[Some(&x), Some(&s21), Some(&b21)]),
            Err(OpError::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn bad_group_counts_are_attribute_errors() {
        let x = Tensor::from_f32(&[1, 4, 1], vec![0.0; 4]);
        let s = Tensor::from_f32(&[4], vec![1.0; 4]);
        for g in [0, -2, 3] {
            let n = node(g);
            assert!(matches!(
                eval(&OpCtx { node: &n, opset: 21 }, &[Some(&x), Some(&s), Some(&s)]),
                Err(OpError::Attribute { .. })
            ));
        }
        let n = Node::new("g", "GroupNormalization", &["x", "s", "b"], &["y"]);
        assert!(eval(&OpCtx { node: &n, opset: 21 }, &[Some(&x), Some(&s), Some(&s)]).is_err());
    }
}
