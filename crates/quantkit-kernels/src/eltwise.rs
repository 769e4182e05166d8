//! Element-wise quantized operators: Add and Concat that requantize to the output
//! parameters (scalar; the same code on every ISA).
//!
//! Float-scale semantics like the GEMM output stage (K3a), with the exact f32 operations
//! spelled out so that any vectorisation can reproduce them bit for bit.

use crate::error::{KernelError, Result};
use crate::output::{float_requant, QuantType};

/// Quantization parameters of one tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QParams {
    /// Scale (> 0).
    pub scale: f32,
    /// Zero point.
    pub zero_point: i32,
}

/// QLinearAdd: `y = clamp(round_half_even(f32(a−za)·ra + f32(b−zb)·rb) + zy)` with
/// `ra = f32(sa/sy)`, `rb = f32(sb/sy)` (two f32 products and one f32 sum, no FMA), clamped
/// to `[act_min, act_max] ∩` the output type's range.
#[allow(clippy::too_many_arguments)]
pub fn add<T: QuantType>(
    a: &[T],
    qa: QParams,
    b: &[T],
    qb: QParams,
    qy: QParams,
    act_min: i32,
    act_max: i32,
    out: &mut [T],
) -> Result<()> {
    if a.len() != b.len() || a.len() != out.len() {
        return Err(KernelError::BufferLength {
            op: "add",
            arg: "b/out",
            expected: a.len(),
            got: b.len().min(out.len()),
        });
    }
    let ra = qa.scale / qy.scale;
    let rb = qb.scale / qy.scale;
    let lo = act_min.max(T::MIN);
    let hi = act_max.min(T::MAX);
    let (lo_f, hi_f) = ((lo - qy.zero_point) as f32, (hi - qy.zero_point) as f32);
    for ((y, &x0), &x1) in out.iter_mut().zip(a).zip(b) {
        let v =
            (x0.to_i32() - qa.zero_point) as f32 * ra + (x1.to_i32() - qb.zero_point) as f32 * rb;
        let v = v.max(lo_f).min(hi_f);
        *y = T::from_clamped((crate::output::round_half_even(v) as i32) + qy.zero_point);
    }
    Ok(())
}

/// Concat along the innermost axis (channels in NHWC): `inputs[i]` is `[outer, c_i]`; each is
/// requantized to `qy` by `y = clamp(round_half_even(f32(x − z_i)·f32(s_i/s_y)) + z_y)`, or
/// copied when its parameters equal `qy`.
pub fn concat_last_axis<T: QuantType>(
    inputs: &[(&[T], usize, QParams)],
    outer: usize,
    qy: QParams,
    out: &mut [T],
) -> Result<()> {
    let c_total: usize = inputs.iter().map(|i| i.1).sum();
    if out.len() != outer * c_total {
        return Err(KernelError::BufferLength {
            op: "concat",
            arg: "output",
            expected: outer * c_total,
            got: out.len(),
        });
    }
    let mut off = 0;
    for &(x, c, q) in inputs {
        if x.len() != outer * c {
            return Err(KernelError::BufferLength {
                op: "concat",
                arg: "input",
                expected: outer * c,
                got: x.len(),
            });
        }
        let r = q.scale / qy.scale;
        for o in 0..outer {
            let src = &x[o * c..(o + 1) * c];
            let dst = &mut out[o * c_total + off..o * c_total + off + c];
            if q == qy {
                dst.copy_from_slice(src);
            } else {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = T::from_clamped(float_requant(
                        s.to_i32() - q.zero_point,
                        r,
                        qy.zero_point,
                        T::MIN,
                        T::MAX,
                    ));
                }
            }
        }
        off += c;
    }
    Ok(())
}
