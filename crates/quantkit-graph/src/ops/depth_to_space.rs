//! `DepthToSpace`: moves channel blocks of an `[N, C, H, W]` input into `blocksize ×
//! blocksize` spatial blocks, giving `[N, C/b², H·b, W·b]`. Opset 11 added `mode`: `DCR`
//! (default, and the only order before 11) reads channel `(i·b + j)·C/b² + c` for output
//! channel `c` at block offset `(i, j)`; `CRD` reads `c·b² + i·b + j`. 13 and 28 only add
//! element types. `Mode` and `geometry` are shared with SpaceToDepth, its inverse.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::Tensor;

/// Order of the channel blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Depth, column, row: the block offset is the outer part of the channel.
    Dcr,
    /// Column, row, depth: the block offset is the inner part of the channel.
    Crd,
}

/// `blocksize` (required, positive) and `mode` (default DCR).
pub(super) fn geometry(ctx: &OpCtx) -> Result<(usize, Mode), OpError> {
    let b = match ctx.node.attr("blocksize") {
        None => return Err(OpError::attr("blocksize", "missing")),
        Some(_) => ctx.node.attr_int("blocksize", 0)?,
    };
    let b = usize::try_from(b)
        .ok()
        .filter(|&b| b > 0 && b <= 1 << 16)
        .ok_or_else(|| OpError::attr("blocksize", format!("{b} is not a positive block size")))?;
    let mode = match ctx.node.attr_string("mode", "DCR")?.as_str() {
        "DCR" => Mode::Dcr,
        "CRD" => Mode::Crd,
        m => return Err(OpError::attr("mode", format!("unknown value {m:?}"))),
    };
    Ok((b, mode))
}

/// The output shape, checked: a 4-D input whose channels divide by b².
fn out_shape(x: &[usize], b: usize) -> Result<[usize; 4], OpError> {
    let &[n, c, h, w] = x else {
        return Err(OpError::shape("a 4-D [N, C, H, W] input", x));
    };
    if c % (b * b) != 0 {
        return Err(OpError::shape(
            format!("channels divisible by blocksize² = {}", b * b),
            x,
        ));
    }
    let out = [n, c / (b * b), h * b, w * b];
    super::index::numel(&out, "DepthToSpace")?;
    Ok(out)
}

/// Evaluates `DepthToSpace`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    let (b, mode) = geometry(ctx)?;
    let out = out_shape(&x.shape, b)?;
    let [n, oc, oh, ow] = out;
    let (c, h, w) = (x.shape[1], x.shape[2], x.shape[3]);
    let mut idx = Vec::with_capacity(x.len());
    for bn in 0..n {
        for co in 0..oc {
            for y in 0..oh {
                let (hi, i) = (y / b, y % b);
                for xo in 0..ow {
                    let (wi, j) = (xo / b, xo % b);
                    let ci = match mode {
                        Mode::Dcr => (i * b + j) * oc + co,
                        Mode::Crd => co * b * b + i * b + j,
                    };
                    idx.push(((bn * c + ci) * h + hi) * w + wi);
                }
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

/// `DepthToSpace` in the operator registry: it only moves input values.
pub const DEF: super::OpDef = super::OpDef::onnx("DepthToSpace", 1, eval)
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
        Node::new("d", "DepthToSpace", &["x"], &["y"])
            .with_attr("blocksize", AttrValue::Int(b))
            .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()))
    }

    #[test]
    fn dcr_and_crd_orders() {
        // Eight one-pixel channels, block 2, two output channels: DCR interleaves the
        // output channels across the input channels, CRD keeps each one's four together.
        let x = Tensor::from_f32(&[1, 8, 1, 1], (0..8).map(|v| v as f32).collect());
        let d = eval(&OpCtx { node: &node(2, "DCR"), opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(d[0].shape, [1, 2, 2, 2]);
        assert_eq!(d[0].as_f32().unwrap(), [0., 2., 4., 6., 1., 3., 5., 7.]);
        let c = eval(&OpCtx { node: &node(2, "CRD"), opset: 13 }, &[Some(&x)]).unwrap();
        assert_eq!(c[0].as_f32().unwrap(), [0., 1., 2., 3., 4., 5., 6., 7.]);
    }

    #[test]
    fn bad_block_mode_and_shape() {
        let x = Tensor::from_f32(&[1, 8, 1, 1], vec![0.0; 8]);
        for n in [node(0, "DCR"), node(-2, "DCR"), node(3, "DCR"), node(2, "XYZ")] {
            assert!(eval(&OpCtx { node: &n, opset: 13 }, &[Some(&x)]).is_err());
        }
        let x3 = Tensor::from_f32(&[8, 1, 1], vec![0.0; 8]);
        assert!(eval(&OpCtx { node: &node(2, "DCR"), opset: 13 }, &[Some(&x3)]).is_err());
        let none = Node::new("d", "DepthToSpace", &["x"], &["y"]);
        assert!(eval(&OpCtx { node: &none, opset: 13 }, &[Some(&x)]).is_err());
    }
}
