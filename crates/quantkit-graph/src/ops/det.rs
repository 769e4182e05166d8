//! `Det` (opset 11; 22 only adds bfloat16): the determinant of each square matrix in the
//! last two axes of a `* × M × M` input, by LU decomposition with partial pivoting in f64
//! (the output has the leading `*` shape; a 0 × 0 matrix has determinant 1).

use super::norm::require_float;
use super::{input, make, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};

/// Determinant of the row-major `m × m` matrix `a`, destroyed in the process.
fn det_lu(a: &mut [f64], m: usize) -> f64 {
    let mut det = 1.0;
    for col in 0..m {
        let pivot = (col..m)
            .max_by(|&i, &j| a[i * m + col].abs().total_cmp(&a[j * m + col].abs()))
            .unwrap_or(col);
        if a[pivot * m + col] == 0.0 {
            return 0.0;
        }
        if pivot != col {
            for k in 0..m {
                a.swap(pivot * m + k, col * m + k);
            }
            det = -det;
        }
        let p = a[col * m + col];
        det *= p;
        for r in col + 1..m {
            let f = a[r * m + col] / p;
            if f != 0.0 {
                for k in col..m {
                    a[r * m + k] -= f * a[col * m + k];
                }
            }
        }
    }
    det
}

/// Evaluates `Det`.
pub fn eval(_ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    require_float(x, 0)?;
    let r = x.rank();
    if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
        return Err(OpError::shape("square matrices in the last two axes (* × M × M)", &x.shape));
    }
    let m = x.shape[r - 1];
    let batch: usize = x.shape[..r - 2].iter().product();
    let xv = x.to_f64_vec();
    let dets = (0..batch)
        .map(|b| {
            let mut a = xv[b * m * m..(b + 1) * m * m].to_vec();
            det_lu(&mut a, m)
        })
        .collect();
    Ok(vec![
        make(DType::F64, x.shape[..r - 2].to_vec(), Data::F64(dets))?.cast(x.dtype)
    ])
}

/// Static shape rule: the input's shape without its last two axes.
pub fn infer(_ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (dt, s) = inp.get(0)?;
    let r = s.len();
    (r >= 2 && s[r - 1] == s[r - 2]).then(|| vec![(*dt, s[..r - 2].to_vec())])
}

/// `Det` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Det", 11, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    #[test]
    fn batched_pivoting_singular_and_non_square() {
        let n = Node::new("d", "Det", &["x"], &["y"]);
        let ctx = OpCtx { node: &n, opset: 11 };
        // [[0, 1], [1, 0]] needs a row swap (det −1); the second is singular.
        let x = Tensor::from_f32(&[2, 2, 2], vec![0.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 4.0]);
        let y = eval(&ctx, &[Some(&x)]).unwrap();
        assert_eq!(y[0], Tensor::from_f32(&[2], vec![-1.0, 0.0]));
        let x3 = Tensor::from_f32(&[3, 3], vec![2.0, 0.0, 1.0, 1.0, 3.0, 2.0, 1.0, 1.0, 2.0]);
        let y = eval(&ctx, &[Some(&x3)]).unwrap();
        assert!((y[0].as_f32().unwrap()[0] - 6.0).abs() < 1e-5);
        let bad = Tensor::from_f32(&[2, 3], vec![0.0; 6]);
        assert!(matches!(eval(&ctx, &[Some(&bad)]), Err(OpError::ShapeMismatch { .. })));
        let v = Tensor::from_f32(&[2], vec![0.0; 2]);
        assert!(matches!(eval(&ctx, &[Some(&v)]), Err(OpError::ShapeMismatch { .. })));
    }
}
