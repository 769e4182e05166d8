//! Fully connected layer (ONNX `Gemm` with transB = 1: `Y = X·Wᵀ + b`) and plain `MatMul`.

use std::any::Any;

use crate::error::{attr_err, shape_err, Result};
use crate::gemm::{sgemm, MatRef, Par};
use crate::tape::Op;
use crate::tensor::Tensor;

/// `Y[N, M] = X[N, K] · W[M, K]ᵀ + b[M]` (bias optional).
#[derive(Debug, Default)]
pub struct Linear;

impl Linear {
    fn dims(inputs: &[&Tensor]) -> Result<(usize, usize, usize)> {
        if inputs.len() < 2 || inputs.len() > 3 {
            return Err(attr_err(
                "Gemm",
                format!("needs 2 or 3 inputs, got {}", inputs.len()),
            ));
        }
        let [n, k] = inputs[0].dims2("Gemm")?;
        let [m, k2] = inputs[1].dims2("Gemm")?;
        if k != k2 {
            return Err(shape_err(
                "Gemm",
                format!("weight [M, {k}]"),
                inputs[1].shape(),
            ));
        }
        if let Some(b) = inputs.get(2) {
            if b.shape() != [m] {
                return Err(shape_err("Gemm", format!("bias [{m}]"), b.shape()));
            }
        }
        Ok((n, k, m))
    }
}

impl Op for Linear {
    fn name(&self) -> &'static str {
        "Gemm"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (n, k, m) = Self::dims(inputs)?;
        let mut y = vec![0.0f32; n * m];
        if let Some(b) = inputs.get(2) {
            for row in y.chunks_mut(m) {
                row.copy_from_slice(b.data());
            }
        }
        let x = MatRef::row_major(inputs[0].data(), n, k);
        let w = MatRef::row_major(inputs[1].data(), m, k).t();
        sgemm(&mut y, x, w, inputs.len() == 3, Par::Rayon);
        Tensor::new(&[n, m], y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let (n, k, m) = Self::dims(inputs)?;
        let dy = MatRef::row_major(grad.data(), n, m);
        let mut out = Vec::with_capacity(inputs.len());
        out.push(if needs[0] {
            let mut dx = vec![0.0f32; n * k];
            sgemm(
                &mut dx,
                dy,
                MatRef::row_major(inputs[1].data(), m, k),
                false,
                Par::Rayon,
            );
            Some(Tensor::new(&[n, k], dx)?)
        } else {
            None
        });
        out.push(if needs[1] {
            let mut dw = vec![0.0f32; m * k];
            sgemm(
                &mut dw,
                dy.t(),
                MatRef::row_major(inputs[0].data(), n, k),
                false,
                Par::Rayon,
            );
            Some(Tensor::new(&[m, k], dw)?)
        } else {
            None
        });
        if inputs.len() == 3 {
            out.push(if needs[2] {
                let mut db = vec![0.0f32; m];
                for row in grad.data().chunks(m) {
                    for (d, g) in db.iter_mut().zip(row) {
                        *d += *g;
                    }
                }
                Some(Tensor::new(&[m], db)?)
            } else {
                None
            });
        }
        Ok(out)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `C[N, M] = A[N, K] · B[K, M]`.
#[derive(Debug, Default)]
pub struct MatMul;

impl Op for MatMul {
    fn name(&self) -> &'static str {
        "MatMul"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let [n, k] = inputs[0].dims2("MatMul")?;
        let [k2, m] = inputs[1].dims2("MatMul")?;
        if k != k2 {
            return Err(shape_err(
                "MatMul",
                format!("B [{k}, M]"),
                inputs[1].shape(),
            ));
        }
        let mut y = vec![0.0f32; n * m];
        sgemm(
            &mut y,
            MatRef::row_major(inputs[0].data(), n, k),
            MatRef::row_major(inputs[1].data(), k, m),
            false,
            Par::Rayon,
        );
        Tensor::new(&[n, m], y)
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let [n, k] = inputs[0].dims2("MatMul")?;
        let [_, m] = inputs[1].dims2("MatMul")?;
        let dy = MatRef::row_major(grad.data(), n, m);
        let da = if needs[0] {
            let mut d = vec![0.0f32; n * k];
            sgemm(
                &mut d,
                dy,
                MatRef::row_major(inputs[1].data(), k, m).t(),
                false,
                Par::Rayon,
            );
            Some(Tensor::new(&[n, k], d)?)
        } else {
            None
        };
        let db = if needs[1] {
            let mut d = vec![0.0f32; k * m];
            sgemm(
                &mut d,
                MatRef::row_major(inputs[0].data(), n, k).t(),
                dy,
                false,
                Par::Rayon,
            );
            Some(Tensor::new(&[k, m], d)?)
        } else {
            None
        };
        Ok(vec![da, db])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
