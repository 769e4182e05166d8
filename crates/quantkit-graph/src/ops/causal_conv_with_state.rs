//! `CausalConvWithState` (opset 27): a depthwise 1-D convolution that only looks back,
//! with a carried state. `input` `[batch, channels, length]` is prefixed with
//! `past_state` `[batch, channels, k − 1]` (zeros when absent) and convolved, stride 1 and
//! no padding, with `weight` `[channels, 1, k]` (+ `bias` `[channels]`), so the output
//! has the input's shape; `activation` `silu` (alias `swish`) applies `y·σ(y)`.
//! `present_state` is the last `k − 1` positions of the prefixed sequence.

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

/// Evaluates `CausalConvWithState`: `output`, `present_state`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let silu = match ctx.node.attr_string("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(OpError::attr(
                "activation",
                format!("expected none, silu or swish, got {other:?}"),
            ))
        }
    };
    let x = float_input(inputs, 0)?;
    let w = float_input(inputs, 1)?;
    let [batch, ch, len] = match *x.shape.as_slice() {
        [b, c, l] => [b, c, l],
        _ => return Err(OpError::shape("input of rank 3 [batch, channels, length]", &x.shape)),
    };
    let k = match *w.shape.as_slice() {
        [c, 1, k] if c == ch && k > 0 => k,
        _ => {
            return Err(OpError::shape(
                format!("weight of shape [{ch}, 1, k] with k ≥ 1"),
                &w.shape,
            ))
        }
    };
    let bias = match opt_input(inputs, 2) {
        Some(b) if b.shape == [ch] && b.dtype.is_float() => b.to_f32_vec(),
        Some(b) => return Err(OpError::shape(format!("float bias of shape [{ch}]"), &b.shape)),
        None => vec![0.0; ch],
    };
    let carry = k - 1;
    let past = match opt_input(inputs, 3) {
        Some(p) if p.shape == [batch, ch, carry] && p.dtype.is_float() => Some(p.to_f32_vec()),
        Some(p) => {
            return Err(OpError::shape(
                format!("float past_state of shape [{batch}, {ch}, {carry}]"),
                &p.shape,
            ))
        }
        None => None,
    };
    let (xv, wv) = (x.to_f32_vec(), w.to_f32_vec());
    let mut y = vec![0f32; xv.len()];
    let mut present = vec![0f32; batch * ch * carry];
    let mut padded = vec![0f32; carry + len];
    for bc in 0..batch * ch {
        let c = bc % ch;
        padded[..carry].fill(0.0);
        if let Some(p) = &past {
            padded[..carry].copy_from_slice(&p[bc * carry..(bc + 1) * carry]);
        }
        padded[carry..].copy_from_slice(&xv[bc * len..(bc + 1) * len]);
        let wc = &wv[c * k..(c + 1) * k];
        for t in 0..len {
            let mut s = bias[c];
            for (wi, xi) in wc.iter().zip(&padded[t..t + k]) {
                s += wi * xi;
            }
            y[bc * len + t] = if silu { s / (1.0 + (-s).exp()) } else { s };
        }
        present[bc * carry..(bc + 1) * carry].copy_from_slice(&padded[len..]);
    }
    let state_dtype = opt_input(inputs, 3).map_or(x.dtype, |p| p.dtype);
    Ok(vec![
        make(DType::F32, x.shape.clone(), Data::F32(y))?.cast(x.dtype),
        make(DType::F32, vec![batch, ch, carry], Data::F32(present))?.cast(state_dtype),
    ])
}

/// Static shape rule: `output` like `input`, `present_state` `[batch, channels, k − 1]`.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (x, w) = (inp.get(0)?, inp.get(1)?);
    let (&[b, c, _], &[_, _, k]) = (x.1.as_slice(), w.1.as_slice()) else {
        return None;
    };
    Some(vec![x.clone(), (x.0, vec![b, c, k.checked_sub(1)?])])
}

/// `CausalConvWithState` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("CausalConvWithState", 27, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn run(node: &Node, ins: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        eval(&OpCtx { node, opset: 27 }, ins)
    }

    #[test]
    fn convolves_causally_and_carries_state() {
        let x = Tensor::from_f32(&[1, 1, 3], vec![1.0, 2.0, 3.0]);
        let w = Tensor::from_f32(&[1, 1, 2], vec![10.0, 1.0]);
        let past = Tensor::from_f32(&[1, 1, 1], vec![5.0]);
        let n = Node::new("cc", "CausalConvWithState", &["x", "w", "", "p"], &["y", "s"]);
        let out = run(&n, &[Some(&x), Some(&w), None, Some(&past)]).unwrap();
        // y[t] = 10·x[t−1] + x[t], with x[−1] = 5
        assert_eq!(out[0].to_f32_vec(), vec![51.0, 12.0, 23.0]);
        assert_eq!(out[1].to_f32_vec(), vec![3.0]);
        // bad activation, weight not depthwise, past_state of the wrong length
        let bad = n.clone().with_attr("activation", AttrValue::String(b"gelu".to_vec()));
        assert!(run(&bad, &[Some(&x), Some(&w)]).is_err());
        let w2 = Tensor::from_f32(&[1, 2, 1], vec![1.0, 1.0]);
        assert!(run(&n, &[Some(&x), Some(&w2)]).is_err());
        let p2 = Tensor::from_f32(&[1, 1, 2], vec![0.0; 2]);
        assert!(run(&n, &[Some(&x), Some(&w), None, Some(&p2)]).is_err());
        let x2 = Tensor::from_f32(&[3], vec![0.0; 3]);
        assert!(run(&n, &[Some(&x2), Some(&w)]).is_err());
    }
}
