//! `Erf`: the Gauss error function, computed in f64 (Abramowitz–Stegun would lose accuracy).

use super::unary::eval_unary;
use super::OpCtx;
use crate::error::OpError;
use crate::tensor::Tensor;

/// Evaluates `Erf`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    eval_unary(ctx, inputs, erf64, |x| erf64(x as f64) as f32)
}

/// erf(x) in f64 by the series for |x| < 3 and the continued fraction of erfc beyond
/// (Numerical Recipes §6.2); relative error below 1e-13 over the real line.
pub fn erf64(x: f64) -> f64 {
    let a = x.abs();
    let r = if a < 3.0 {
        // erf(x) = 2/√π Σ (−1)^n x^(2n+1) / (n! (2n+1))
        let mut sum = a;
        let mut term = a;
        let x2 = a * a;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        // erfc(x) = e^(−x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) (Lentz's method)
        let mut f = a;
        let tiny = 1e-300;
        let mut c = f;
        let mut d = 0.0;
        for k in 1..200 {
            let an = k as f64 / 2.0;
            d = a + an * d;
            d = if d.abs() < tiny { tiny } else { d };
            c = a + an / c;
            c = if c.abs() < tiny { tiny } else { c };
            d = 1.0 / d;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    };
    if x.is_nan() {
        x
    } else if x < 0.0 {
        -r
    } else {
        r
    }
}

/// `Erf` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Erf", 9, eval)
    .infer(super::registry::same_as_first)
    .facts(super::Facts {
        unary: true,
        monotone: true,
        ..super::Facts::ELEMENTWISE
    });
