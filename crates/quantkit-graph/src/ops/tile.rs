//! `Tile`: repeats the input `repeats[d]` times along every axis `d` (numpy `tile`).
//! Opset 6 takes `repeats` as a 1-D int64 input with one entry per input axis; opset 1 took
//! two scalar inputs, `tiles` and `axis`, repeating along that one axis; 13 only adds
//! bfloat16. Repeats must be non-negative and the output is capped at
//! [`max_elements()`](super::max_elements()): an absurd repeat count is an
//! error, never an allocation.

use super::index::{numel, separable};
use super::{input, make, norm_axis, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, Tensor};

/// The repeat count of every axis of an input of rank `rank`, from the inputs after the
/// data (`repeats`, or opset 1's `tiles` and `axis`).
fn repeats(ctx: &OpCtx, rank: usize, rest: &[Option<&Tensor>]) -> Result<Vec<usize>, OpError> {
    let reps = if ctx.opset < 6 {
        let tiles = input(rest, 0).map_err(|_| OpError::MissingInput { index: 1 })?;
        let axis = input(rest, 1).map_err(|_| OpError::MissingInput { index: 2 })?;
        let (&[t], &[a]) = (tiles.to_i64_vec().as_slice(), axis.to_i64_vec().as_slice()) else {
            return Err(OpError::shape(
                "one-element `tiles` and `axis`",
                (&tiles.shape, &axis.shape),
            ));
        };
        let mut r = vec![1; rank];
        r[norm_axis(a, rank)?] = t;
        r
    } else {
        let r = input(rest, 0).map_err(|_| OpError::MissingInput { index: 1 })?;
        if r.rank() != 1 || r.len() != rank {
            return Err(OpError::shape(
                format!("1-D repeats with {rank} values (the input's rank)"),
                &r.shape,
            ));
        }
        r.to_i64_vec()
    };
    reps.iter()
        .map(|&r| usize::try_from(r))
        .collect::<Result<_, _>>()
        .map_err(|_| OpError::Invalid(format!("Tile: negative repeat count in {reps:?}")))
}

/// The output shape (checked against overflow and the element cap).
fn out_shape(x: &[usize], reps: &[usize]) -> Result<Vec<usize>, OpError> {
    let out = x
        .iter()
        .zip(reps)
        .map(|(&d, &r)| d.checked_mul(r))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| OpError::Invalid(format!("Tile: {x:?} × {reps:?} overflows")))?;
    numel(&out, "Tile")?;
    Ok(out)
}

/// Evaluates `Tile`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let reps = repeats(ctx, x.rank(), inputs.get(1..).unwrap_or(&[]))?;
    let out = out_shape(&x.shape, &reps)?;
    let st = strides(&x.shape);
    // Output coordinate o of axis d reads input coordinate o mod x.shape[d].
    let tables: Vec<Vec<Option<usize>>> = out
        .iter()
        .zip(&x.shape)
        .zip(&st)
        .map(|((&n, &d), &s)| (0..n).map(|o| Some((o % d) * s)).collect())
        .collect();
    let idx: Vec<usize> = separable(&tables).into_iter().flatten().collect();
    make(x.dtype, out, x.data.gather(&idx)).map(|t| vec![t])
}

/// Static shape rule: known when the repeats are constants.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let rest: Vec<Option<&Tensor>> = (1..ctx.node.inputs.len())
        .map(|i| inp.konst(ctx, i))
        .collect();
    let reps = repeats(ctx, shape.len(), &rest).ok()?;
    Some(vec![(*dtype, out_shape(shape, &reps).ok()?)])
}

/// `Tile` in the operator registry: it only repeats input values.
pub const DEF: super::OpDef = super::OpDef::onnx("Tile", 1, eval)
    .infer(infer)
    .facts(super::Facts {
        moves_values: true,
        ..super::Facts::NONE
    })
    .bf16_codes();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    fn ctx(n: &Node, opset: i64) -> OpCtx<'_> {
        OpCtx { node: n, opset }
    }

    #[test]
    fn tiles_every_axis_and_the_opset_1_form() {
        let n = Node::new("t", "Tile", &["x", "r"], &["y"]);
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let r = Tensor::from_i64(&[2], vec![2, 1]);
        let y = eval(&ctx(&n, 13), &[Some(&x), Some(&r)]).unwrap();
        assert_eq!(
            y[0],
            Tensor::from_f32(&[4, 2], vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])
        );
        let r = Tensor::from_i64(&[2], vec![1, 0]);
        assert_eq!(eval(&ctx(&n, 13), &[Some(&x), Some(&r)]).unwrap()[0].shape, [2, 0]);
        let n1 = Node::new("t", "Tile", &["x", "t", "a"], &["y"]);
        let t = Tensor::from_i64(&[], vec![3]);
        let a = Tensor::from_i64(&[], vec![-1]);
        let y = eval(&ctx(&n1, 1), &[Some(&x), Some(&t), Some(&a)]).unwrap();
        assert_eq!(y[0].shape, [2, 6]);
        assert_eq!(y[0].as_f32().unwrap()[..6], [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    }

    #[test]
    fn absurd_negative_or_misshapen_repeats_are_errors() {
        let n = Node::new("t", "Tile", &["x", "r"], &["y"]);
        let x = Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        for reps in [vec![1 << 40, 1 << 40], vec![i64::MAX, 2], vec![1 << 30, 1], vec![-1, 1]] {
            let r = Tensor::from_i64(&[2], reps.clone());
            assert!(eval(&ctx(&n, 13), &[Some(&x), Some(&r)]).is_err(), "{reps:?}");
        }
        let r = Tensor::from_i64(&[3], vec![1, 1, 1]);
        assert!(eval(&ctx(&n, 13), &[Some(&x), Some(&r)]).is_err());
        assert!(eval(&ctx(&n, 13), &[Some(&x)]).is_err());
    }
}
