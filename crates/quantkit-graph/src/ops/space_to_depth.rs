//! `SpaceToDepth`: moves `blocksize × blocksize` spatial blocks of an `[N, C, H, W]`
//! input (H and W divisible by b) into channels, giving `[N, C·b², H/b, W/b]`; the inverse
//! of DepthToSpace. Opset 28 added `mode` (before it, only `DCR`): `DCR` (default) writes
//! block offset `(i, j)` of channel `c` to channel `(i·b + j)·C + c`, `CRD` to
//! `c·b² + i·b + j`. 13 only adds element types.

use super::depth_to_space::{geometry, Mode};
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// The output shape, checked: a 4-D input whose height and width divide by b.
fn out_shape(x: &[usize], b: usize) -> Result<[usize; 4], OpError> {
    match *x {
        [n, c, h, w] if h % b == 0 && w % b == 0 => {
            let oc = c
                .checked_mul(b * b)
                .ok_or_else(|| OpError::Invalid(format!("SpaceToDepth: {c} channels × {b}² overflows")))?;
            Ok([n, oc, h / b, w / b])
        }
        _ => Err(OpError::shape(
            format!("a 4-D [N, C, H, W] input with H and W divisible by blocksize {b}"),
            x,
        )),
    }
}

/// Evaluates `SpaceToDepth`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (b, mode) = geometry(ctx)?;
    let out = out_shape(&x.shape, b)?;
    let [n, oc, oh, ow] = out;
    let (c, h, w) = (x.shape[1], x.shape[2], x.shape[3]);
    let mut idx = Vec::with_capacity(x.len());
    for bn in 0..n {
        for co in 0..oc {
            let (ci, i, j) = match mode {
                Mode::Dcr => (co % c, co / c / b, co / c % b),
                Mode::Crd => (co / (b * b), co % (b * b) / b, co % b),
            };
            for y in 0..oh {
                let base = ((bn * c + ci) * h + y * b + i) * w + j;
                idx.extend((0..ow).map(|xo| base + xo * b));
            }
        }
    }
    make(x.dtype, out.to_vec(), x.data.gather(&idx)).map(|t| vec![t])
}

/// Static shape rule.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    let (b, _) = geometry(ctx).ok()?;
    Some(vec![(*dtype, out_shape(shape, b).ok()?.to_vec())])
}

/// `SpaceToDepth` in the operator registry: it only moves input values.
pub const DEF: super::OpDef = super::OpDef::onnx("SpaceToDepth", 1, eval)
    .infer(infer)
    .facts(super::Facts {
        moves_values: true,
        ..super::Facts::NONE
    });

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn node(b: i64, mode: &str) -> Node {
        Node::new("s", "SpaceToDepth", &["x"], &["y"])
            .with_attr("blocksize", AttrValue::Int(b))
            .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()))
    }

    #[test]
    fn inverts_depth_to_space_in_both_modes() {
        let x = Tensor::from_f32(&[2, 8, 3, 2], (0..96).map(|v| v as f32).collect());
        for mode in ["DCR", "CRD"] {
            let n = node(2, mode);
            let d2s = Node::new("d", "DepthToSpace", &["x"], &["y"])
                .with_attr("blocksize", AttrValue::Int(2))
                .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()));
            let y = super::super::depth_to_space::eval(&OpCtx { node: &d2s, opset: 13 }, &[Some(&x)]).unwrap();
            assert_eq!(y[0].shape, [2, 2, 6, 4]);
            let back = eval(&OpCtx { node: &n, opset: 28 }, &[Some(&y[0])]).unwrap();
            assert_eq!(back[0], x, "{mode}");
        }
    }

    #[test]
    fn bad_shapes() {
        let x = Tensor::from_f32(&[1, 1, 3, 2], vec![0.0; 6]);
        assert!(eval(&OpCtx { node: &node(2, "DCR"), opset: 13 }, &[Some(&x)]).is_err());
        let x = Tensor::from_f32(&[4, 4], vec![0.0; 16]);
        assert!(eval(&OpCtx { node: &node(2, "DCR"), opset: 13 }, &[Some(&x)]).is_err());
        assert!(eval(&OpCtx { node: &node(0, "DCR"), opset: 13 }, &[Some(&x)]).is_err());
    }
}
