//! Element-wise activations and the fixed input normalisation.

use std::any::Any;

use rayon::prelude::*;

use crate::error::Result;
use crate::tape::Op;
use crate::tensor::Tensor;

/// Elements per rayon task: large enough that scheduling costs nothing next to the work.
const PAR_CHUNK: usize = 1 << 14;

// Both collect straight into the output vector: a zero-filled buffer overwritten in place
// would cost an extra memset pass over every activation and gradient.
fn map(x: &Tensor, f: impl Fn(f32) -> f32 + Sync + Send) -> Result<Tensor> {
    let y: Vec<f32> = x
        .data()
        .par_iter()
        .with_min_len(PAR_CHUNK)
        .map(|&v| f(v))
        .collect();
    Tensor::new(x.shape(), y)
}

fn map2(a: &Tensor, b: &Tensor, f: impl Fn(f32, f32) -> f32 + Sync + Send) -> Result<Tensor> {
    let y: Vec<f32> = a
        .data()
        .par_iter()
        .zip(b.data().par_iter())
        .with_min_len(PAR_CHUNK)
        .map(|(&x, &g)| f(x, g))
        .collect();
    Tensor::new(a.shape(), y)
}

macro_rules! unary_op {
    ($(#[$doc:meta])* $name:ident, $onnx:literal, |$x:ident| $fwd:expr, |$bx:ident, $g:ident| $bwd:expr) => {
        $(#[$doc])*
        #[derive(Debug, Default, Clone, Copy)]
        pub struct $name;

        impl Op for $name {
            fn name(&self) -> &'static str {
                $onnx
            }

            fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
                map(inputs[0], |$x: f32| $fwd)
            }

            fn backward(
                &self,
                inputs: &[&Tensor],
                _output: &Tensor,
                grad: &Tensor,
                _needs: &[bool],
            ) -> Result<Vec<Option<Tensor>>> {
                let gx = map2(inputs[0], grad, |$bx: f32, $g: f32| $bwd)?;
                Ok(vec![Some(gx)])
            }

            fn as_any(&self) -> &dyn Any {
                self
            }
        }
    };
}

unary_op!(
    /// `max(x, 0)`; the gradient at exactly 0 is taken as 0 (PyTorch's convention).
    Relu, "Relu",
    |x| x.max(0.0),
    |x, g| if x > 0.0 { g } else { 0.0 }
);

unary_op!(
    /// ONNX `HardSwish`: `x · clamp(x/6 + 1/2, 0, 1)` (Howard et al., "Searching for
    /// MobileNetV3", 2019). Derivative `(2x + 3)/6` on (-3, 3), 0 below, 1 above.
    HardSwish, "HardSwish",
    |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
    |x, g| if x <= -3.0 { 0.0 } else if x >= 3.0 { g } else { g * (2.0 * x + 3.0) / 6.0 }
);

unary_op!(
    /// Logistic sigmoid `1 / (1 + e^-x)`; derivative `s(1 - s)`.
    Sigmoid, "Sigmoid",
    |x| 1.0 / (1.0 + (-x).exp()),
    |x, g| { let s = 1.0 / (1.0 + (-x).exp()); g * s * (1.0 - s) }
);

/// `(x - mean) / std` with fixed scalars: the input normalisation that lives inside each zoo
/// model (exported as ONNX `Sub` then `Div`).
#[derive(Debug, Clone, Copy)]
pub struct Normalize {
    /// Subtracted first.
    pub mean: f32,
    /// Then divided by.
    pub std: f32,
}

impl Op for Normalize {
    fn name(&self) -> &'static str {
        "Normalize"
    }

    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (m, s) = (self.mean, self.std);
        map(inputs[0], |x| (x - m) / s)
    }

    fn backward(
        &self,
        _inputs: &[&Tensor],
        _output: &Tensor,
        grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let s = self.std;
        Ok(vec![Some(map(grad, |g| g / s)?)])
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
