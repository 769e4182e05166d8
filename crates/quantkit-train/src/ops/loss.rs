//! Losses: softmax cross-entropy over class logits and mean squared error.

use std::any::Any;

use crate::error::{shape_err, Result};
use crate::tape::Op;
use crate::tensor::Tensor;

/// Mean over the batch of `-log softmax(logits)[label]`. Input: logits `[N, K]`; the labels
/// are held by the op. Output: a scalar.
#[derive(Debug)]
pub struct SoftmaxCrossEntropy {
    labels: Vec<usize>,
    probs: Vec<f32>,
}

impl SoftmaxCrossEntropy {
    /// A loss for these labels (one per row of the logits).
    pub fn new(labels: Vec<usize>) -> Self {
        Self {
            labels,
            probs: Vec::new(),
        }
    }
}

impl Op for SoftmaxCrossEntropy {
    fn name(&self) -> &'static str {
        "SoftmaxCrossEntropyLoss"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let [n, k] = inputs[0].dims2("SoftmaxCrossEntropyLoss")?;
        if self.labels.len() != n || self.labels.iter().any(|&l| l >= k) {
            return Err(shape_err(
                "SoftmaxCrossEntropyLoss",
                format!("{n} labels in 0..{k}"),
                &[self.labels.len()],
            ));
        }
        let mut probs = vec![0.0f32; n * k];
        let mut loss = 0.0f64;
        for ((row, p), &l) in inputs[0]
            .data()
            .chunks(k)
            .zip(probs.chunks_mut(k))
            .zip(&self.labels)
        {
            // log-sum-exp with the max subtracted, so large logits do not overflow.
            let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut s = 0.0f64;
            for (pv, &z) in p.iter_mut().zip(row) {
                let e = ((z - mx) as f64).exp();
                *pv = e as f32;
                s += e;
            }
            for pv in p.iter_mut() {
                *pv = (*pv as f64 / s) as f32;
            }
            loss += s.ln() + mx as f64 - row[l] as f64;
        }
        self.probs = probs;
        Ok(Tensor::scalar((loss / n as f64) as f32))
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let [n, k] = inputs[0].dims2("SoftmaxCrossEntropyLoss")?;
        let g = grad.data()[0] / n as f32;
        let mut d = self.probs.clone();
        for (row, &l) in d.chunks_mut(k).zip(&self.labels) {
            row[l] -= 1.0;
            for v in row.iter_mut() {
                *v *= g;
            }
        }
        Ok(vec![Some(Tensor::new(&[n, k], d)?)])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Mean over all elements of `(a - b)²`. Inputs: prediction and target of the same shape;
/// both receive gradients.
#[derive(Debug, Default)]
pub struct MseLoss;

impl Op for MseLoss {
    fn name(&self) -> &'static str {
        "MseLoss"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (a, b) = (inputs[0], inputs[1]);
        if a.shape() != b.shape() {
            return Err(shape_err(
                "MseLoss",
                format!("a target of shape {:?}", a.shape()),
                b.shape(),
            ));
        }
        let s: f64 = a
            .data()
            .iter()
            .zip(b.data())
            .map(|(x, y)| {
                let d = (*x - *y) as f64;
                d * d
            })
            .sum();
        Ok(Tensor::scalar((s / a.len().max(1) as f64) as f32))
    }

    fn backward(
        &self,
        inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let (a, b) = (inputs[0], inputs[1]);
        let k = 2.0 * grad.data()[0] / a.len().max(1) as f32;
        let da: Vec<f32> = a
            .data()
            .iter()
            .zip(b.data())
            .map(|(x, y)| k * (x - y))
            .collect();
        let db = needs[1]
            .then(|| Tensor::new(b.shape(), da.iter().map(|v| -v).collect()))
            .transpose()?;
        let da = needs[0].then(|| Tensor::new(a.shape(), da)).transpose()?;
        Ok(vec![da, db])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
