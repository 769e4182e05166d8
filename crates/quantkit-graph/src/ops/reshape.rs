//! `Reshape` (opsets 5, 13, 14 with `allowzero`, 19, 21): 0 copies the input dimension
//! (unless `allowzero`), −1 is inferred.

use super::{input, ints_of, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Reshape`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let spec = ints_of(input(inputs, 1)?);
    let allowzero = ctx.node.attr_int("allowzero", 0)? != 0;
    let shape = resolve(&x.shape, &spec, allowzero)?;
    Ok(vec![x
        .clone()
        .reshaped(shape)
        .map_err(|e| OpError::Invalid(e.to_string()))?])
}

/// The output shape for input shape `input` and a Reshape `spec`.
pub fn resolve(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, OpError> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or_else(|| {
                OpError::shape(format!("an input dimension at index {i} to copy"), input)
            })?),
            d if d >= 0 => out.push(d as usize),
            _ => return Err(OpError::Invalid(format!("invalid reshape target {spec:?}"))),
        }
    }
    // The target's dims are the model's (or a fuzzer's) numbers: their product can overflow.
    let overflow = || OpError::Invalid(format!("reshape target {spec:?} overflows usize"));
    let product = |v: &[usize]| v.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if let Some(i) = infer {
        let known = product(&out).ok_or_else(overflow)?;
        if known == 0 || !total.is_multiple_of(known) {
            return Err(OpError::shape(
                format!("a shape compatible with {input:?}"),
                spec,
            ));
        }
        out[i] = total / known;
    }
    if product(&out).ok_or_else(overflow)? != total {
        return Err(OpError::shape(
            format!("{total} elements (input {input:?})"),
            spec,
        ));
    }
    Ok(out)
}

/// Static shape rule (see [`super::registry::InferFn`]).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    let spec = inp.konst(ctx, 1)?.to_i64_vec();
    let allowzero = ctx.node.attr_int("allowzero", 0).ok()? != 0;
    Some(vec![(x.0, resolve(&x.1, &spec, allowzero).ok()?)])
}

/// Gradient: the output gradient under the input's shape.
pub fn backward(ctx: &OpCtx, gi: &super::grad::GradIn) -> Result<Vec<Option<Tensor>>, OpError> {
    let _ = ctx;
    super::grad::reshape_back(gi)
}

/// `Reshape` in the operator registry.
pub const DEF: super::OpDef =
    super::OpDef::onnx("Reshape", 1, eval)
        .backward(backward)
        .infer(infer)
        .facts(super::Facts {
            layout: true,
            monotone: true,
            ..super::Facts::MOVES
        })
    .narrow_types();

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn a_target_whose_product_overflows_is_an_error() {
        // Found by the `engine` fuzz target (constant folding of a mutated Reshape): the
        // product of the target's dims overflowed before the element count was compared.
        let big = i64::MAX / 2;
        assert!(resolve(&[2, 3], &[big, big], false).is_err());
        assert!(resolve(&[2, 3], &[big, big, -1], false).is_err());
        assert_eq!(resolve(&[2, 3], &[3, -1], false).unwrap(), vec![3, 2]);
    }
}
