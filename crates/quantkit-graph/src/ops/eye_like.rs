//! `EyeLike` (opset 9; 22 only adds bfloat16): a 2-D tensor of the input's shape with ones
//! on diagonal `k` (`y[i, i + k] = 1`) and zeros elsewhere. The element type is the `dtype`
//! attribute (an ONNX type code) or, when absent, the input's.

use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::map_data;
use crate::tensor::{DType, Data, Element, Tensor};

/// The output type: the `dtype` attribute or the input's type.
fn out_dtype(ctx: &OpCtx, input: DType) -> Result<DType, OpError> {
    match ctx.node.attr("dtype") {
        None => Ok(input),
        Some(_) => {
            let code = ctx.node.attr_int("dtype", 0)?;
            match DType::from_onnx(code as i32) {
                Some(DType::I4 | DType::U4) | None => Err(OpError::attr(
                    "dtype",
                    format!("{} is not an EyeLike output type", DType::onnx_name(code as i32)),
                )),
                Some(d) => Ok(d),
            }
        }
    }
}

/// Evaluates `EyeLike`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if x.rank() != 2 {
        return Err(OpError::shape("a 2-D input", &x.shape));
    }
    let dtype = out_dtype(ctx, x.dtype)?;
    let k = ctx.node.attr_int("k", 0)?;
    let (rows, cols) = (x.shape[0], x.shape[1]);
    // Row i holds its one at column i + k when that is inside the matrix.
    let ones: Vec<usize> = (0..rows)
        .filter_map(|i| {
            let j = (i as i64).checked_add(k)?;
            (0..cols as i64).contains(&j).then(|| i * cols + j as usize)
        })
        .collect();
    fn set<T: Element>(mut v: Vec<T>, at: &[usize]) -> Vec<T> {
        for &p in at {
            v[p] = T::from_f64(1.0);
        }
        v
    }
    let data: Data = map_data!(Data::zeros(dtype, x.len()), v => set(v, &ones));
    make(dtype, x.shape.clone(), data).map(|t| vec![t])
}

/// Static shape rule: the input's shape, the attribute's type.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dtype, shape) = inp.get(0)?;
    Some(vec![(out_dtype(ctx, *dtype).ok()?, shape.clone())])
}

/// `EyeLike` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("EyeLike", 9, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    #[test]
    fn diagonals_types_and_ranks() {
        let x = Tensor::zeros(DType::I32, &[2, 3]);
        let n = Node::new("e", "EyeLike", &["x"], &["y"]).with_attr("k", AttrValue::Int(1));
        let y = eval(&OpCtx { node: &n, opset: 9 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].data, Data::I32(vec![0, 1, 0, 0, 0, 1]));
        let n = Node::new("e", "EyeLike", &["x"], &["y"])
            .with_attr("dtype", AttrValue::Int(9))
            .with_attr("k", AttrValue::Int(-1));
        let y = eval(&OpCtx { node: &n, opset: 9 }, &[Some(&x)]).unwrap();
        assert_eq!(
            y[0].data,
            Data::Bool(vec![false, false, false, true, false, false])
        );
        let n = Node::new("e", "EyeLike", &["x"], &["y"])
            .with_attr("k", AttrValue::Int(i64::MAX));
        let y = eval(&OpCtx { node: &n, opset: 9 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].data, Data::I32(vec![0; 6]));
        let x3 = Tensor::zeros(DType::F32, &[1, 2, 2]);
        assert!(eval(&OpCtx { node: &n, opset: 9 }, &[Some(&x3)]).is_err());
        let n = Node::new("e", "EyeLike", &["x"], &["y"]).with_attr("dtype", AttrValue::Int(8));
        assert!(eval(&OpCtx { node: &n, opset: 9 }, &[Some(&x)]).is_err());
    }
}
