//! The max pool step on 8-bit codes, produced by `compile/pool.rs`.

use super::codes::Table;
use super::{alloc_len, bad, check_dtype, first, kernel_err, nhwc_input, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::ops::PadSpec;
use quantkit_graph::{DType, Data};
use quantkit_kernels::conv::ConvParams;
use quantkit_kernels::pool::max_pool;

/// Max pool on codes (max commutes with the monotone DQ → Q map), then the table when the
/// output's parameters differ from the input's.
pub(crate) struct MaxPoolStep {
    /// The window; its pads are replaced per run when `same` is set.
    pub params: ConvParams,
    /// `auto_pad = SAME_UPPER | SAME_LOWER`: the pads follow from the input's size.
    pub same: Option<PadSpec>,
    pub x_dtype: DType,
    pub table: Option<Table>,
}

impl Kernel for MaxPoolStep {
    fn per_image(&self, _consts: &[Option<&quantkit_graph::Tensor>]) -> bool {
        // NHWC images, one kernel call over whole images: no value crosses images.
        true
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let x = nhwc_input(step, x)?;
        let s = &x.shape;
        let shape = [s[0], s[1], s[2], s[3]];
        let params = match &self.same {
            None => self.params,
            Some(rule) => {
                let p = &self.params;
                let (b, e) = rule
                    .resolve(&[s[1], s[2]], &p.kernel, &p.stride, &p.dilation)
                    .map_err(|e| bad(step, "input 0", e.to_string()))?;
                ConvParams {
                    pads: [b[0], b[1], e[0], e[1]],
                    ..*p
                }
            }
        };
        let [oh, ow] = params.output_size(s[1], s[2]).map_err(kernel_err(step))?;
        let out_shape = vec![s[0], oh, ow, s[3]];
        let len = alloc_len(step, "output", &out_shape)?;
        let t = match &x.data {
            Data::U8(d) => {
                let mut out = vec![0u8; len];
                max_pool(d, shape, &params, &mut out).map_err(kernel_err(step))?;
                tensor_u8(out_shape, out)
            }
            Data::I8(d) => {
                let mut out = vec![0i8; len];
                max_pool(d, shape, &params, &mut out).map_err(kernel_err(step))?;
                tensor_i8(out_shape, out)
            }
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        let v = Val {
            tensor: t,
            nhwc: true,
        };
        Ok(vec![match &self.table {
            Some(tb) => tb.apply(v),
            None => v,
        }])
    }
    fn describe(&self) -> String {
        format!(
            "max_pool {} {}x{}{}{}",
            self.x_dtype,
            self.params.kernel[0],
            self.params.kernel[1],
            match self.same {
                Some(PadSpec::SameLower) => " SAME_LOWER",
                Some(_) => " SAME_UPPER",
                None => "",
            },
            if self.table.is_some() {
                " + requant table"
            } else {
                ""
            }
        )
    }
}

/// GlobalAveragePool on 8-bit codes (`DQ(x) → GlobalAveragePool → Q`, QLinearGlobalAveragePool),
/// equal to the float executor bit for bit. The reference dequantizes (f32), sums each
/// channel's plane in f64 in (h, w) order, divides by the plane size in f64, rounds to f32
/// and quantizes. The step does exactly that: `dq[code]` is the graph DequantizeLinear's f32
/// of each code, each channel is summed in f64 in the same (h, w) order (an NHWC pixel loop
/// visits every channel's values in that order too), then `f32(sum / len)` and
/// quantkit-core's `quantize_code`, the graph QuantizeLinear's rule.
pub(crate) struct GlobalAvgPoolStep {
    pub dq: Box<[f32; 256]>,
    pub x_dtype: DType,
    pub scale: f32,
    pub zp: i32,
    pub out: DType,
}

impl GlobalAvgPoolStep {
    /// The reference's sums: per image and channel, `Σ f64(dq[x])` over the plane.
    fn f64_sums(&self, bytes: &[u8], n: usize, c: usize, plane: usize, nhwc: bool) -> Vec<f64> {
        let mut sums = vec![0f64; n * c];
        if nhwc {
            for (img, acc) in bytes.chunks(plane * c).zip(sums.chunks_mut(c)) {
                for px in img.chunks(c) {
                    for (a, &b) in acc.iter_mut().zip(px) {
                        *a += f64::from(self.dq[b as usize]);
                    }
                }
            }
        } else {
            for (p, acc) in bytes.chunks(plane.max(1)).zip(sums.iter_mut()) {
                *acc = p
                    .iter()
                    .map(|&b| f64::from(self.dq[b as usize]))
                    .sum::<f64>();
            }
        }
        sums
    }
}

/// `dq[b] = k[b]·2^e` exactly for every code, with integers `k[b]` (`|k| < 2^62`) and one
/// exponent `e` (that of the smallest unit in the last place among the non-zero entries);
/// `None` when an entry is not finite or the entries span more than 38 binades.
///
/// Why the integer sums are the reference's: every entry is a multiple of `2^e`, so every
/// partial sum of the reference's f64 sum is too, and while `|Σ k| ≤ max|k|·plane ≤ 2^53`
/// each is an f64 (53-bit significand): every f64 addition is exact, whatever the order,
/// and the f64 sum is `(Σ k)·2^e`, which `integer_sums` computes with integer additions and
/// one exact scaling by a power of two.
fn integer_units(dq: &[f32; 256]) -> Option<([i64; 256], i32)> {
    if dq.iter().any(|v| !v.is_finite()) {
        return None;
    }
    // `v = m·2^u` with an integer `m`, `|m| < 2^24`.
    let parts = |v: f32| -> (i64, i32) {
        let b = v.to_bits();
        let ef = ((b >> 23) & 0xff) as i32;
        let frac = i64::from(b & 0x7f_ffff);
        let (m, u) = if ef == 0 {
            (frac, -149)
        } else {
            (frac | 0x80_0000, ef - 150)
        };
        (if b >> 31 == 1 { -m } else { m }, u)
    };
    let e = dq
        .iter()
        .filter(|v| **v != 0.0)
        .map(|&v| parts(v).1)
        .min()
        .unwrap_or(0);
    let mut k = [0i64; 256];
    for (k, &v) in k.iter_mut().zip(dq.iter()) {
        if v != 0.0 {
            let (m, u) = parts(v);
            if u - e > 38 {
                return None;
            }
            *k = m << (u - e);
        }
    }
    Some((k, e))
}

/// `Σ dq[x]` per image and channel as `(Σ k[x])·2^e` (see `integer_units`): integer
/// additions, eight channels at a time in registers over the pixels in NHWC.
fn integer_sums(
    bytes: &[u8],
    k: &[i64; 256],
    e: i32,
    n: usize,
    c: usize,
    plane: usize,
    nhwc: bool,
) -> Vec<f64> {
    // 2^e as an f64 (−149 ≤ e ≤ 104: a normal f64), so the product is exact.
    let unit = f64::from_bits(((1023 + e) as u64) << 52);
    let mut sums = vec![0i64; n * c];
    if nhwc {
        for (img, acc) in bytes.chunks(plane * c).zip(sums.chunks_mut(c)) {
            let mut c0 = 0;
            while c0 + 8 <= c {
                let mut s = [0i64; 8];
                for px in img.chunks_exact(c) {
                    let p: &[u8; 8] = px[c0..c0 + 8].try_into().expect("8 channels");
                    for (s, &b) in s.iter_mut().zip(p) {
                        *s += k[b as usize];
                    }
                }
                acc[c0..c0 + 8].copy_from_slice(&s);
                c0 += 8;
            }
            for (ch, a) in acc.iter_mut().enumerate().skip(c0) {
                *a = img.iter().skip(ch).step_by(c).map(|&b| k[b as usize]).sum();
            }
        }
    } else {
        for (p, acc) in bytes.chunks(plane.max(1)).zip(sums.iter_mut()) {
            *acc = p.iter().map(|&b| k[b as usize]).sum();
        }
    }
    sums.into_iter().map(|s| s as f64 * unit).collect()
}

impl Kernel for GlobalAvgPoolStep {
    fn per_image(&self, _consts: &[Option<&quantkit_graph::Tensor>]) -> bool {
        // NHWC images, one kernel call over whole images: no value crosses images.
        true
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let s = &x.tensor.shape;
        if s.len() < 3 || (x.nhwc && s.len() != 4) {
            return Err(bad(
                step,
                "input 0",
                format!("expected [N, C, D...], got {s:?}"),
            ));
        }
        let (n, c, plane) = if x.nhwc {
            (s[0], s[3], s[1] * s[2])
        } else {
            (s[0], s[1], s[2..].iter().product())
        };
        let bytes: &[u8] = match &x.tensor.data {
            Data::U8(d) => d,
            // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
            Data::I8(d) => unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), d.len()) },
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        let sums = match integer_units(&self.dq) {
            Some((k, e))
                if k.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0) as u128
                    * plane as u128
                    <= 1 << 53 =>
            {
                integer_sums(bytes, &k, e, n, c, plane, x.nhwc)
            }
            _ => self.f64_sums(bytes, n, c, plane, x.nhwc),
        };
        let codes: Vec<i32> = sums
            .iter()
            .map(|&t| {
                let v = (t / plane as f64) as f32;
                match self.out {
                    DType::U8 => {
                        i32::from(quantkit_core::quantize_code::<u8>(v, self.scale, self.zp))
                    }
                    _ => i32::from(quantkit_core::quantize_code::<i8>(v, self.scale, self.zp)),
                }
            })
            .collect();
        let mut shape = vec![n, c];
        shape.extend(std::iter::repeat_n(1, if x.nhwc { 2 } else { s.len() - 2 }));
        let tensor = match self.out {
            DType::U8 => tensor_u8(shape, codes.into_iter().map(|v| v as u8).collect()),
            _ => tensor_i8(shape, codes.into_iter().map(|v| v as i8).collect()),
        };
        Ok(vec![Val::nchw(tensor)])
    }
    fn describe(&self) -> String {
        format!("global_avg_pool {}→{} (exact sums)", self.x_dtype, self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's f64 sums, written plainly (NCHW: plane by plane; NHWC: by channel).
    fn f64_reference(
        bytes: &[u8],
        dq: &[f32; 256],
        n: usize,
        c: usize,
        plane: usize,
        nhwc: bool,
    ) -> Vec<f64> {
        let mut out = vec![0f64; n * c];
        for img in 0..n {
            for ch in 0..c {
                let mut t = 0f64;
                for p in 0..plane {
                    let i = if nhwc {
                        (img * plane + p) * c + ch
                    } else {
                        (img * c + ch) * plane + p
                    };
                    t += f64::from(dq[bytes[i] as usize]);
                }
                out[img * c + ch] = t;
            }
        }
        out
    }

    #[test]
    fn integer_sums_equal_the_f64_sums_bit_for_bit() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        // Scales with random significands, a subnormal one, huge and tiny ones; zero points
        // at both ends of the u8 and i8 ranges.
        let scales = [
            0.0123f32,
            0.7331,
            1.0,
            3.0e-41,
            1.1e-30,
            2.5e30,
            0.000_517_3,
        ];
        for &sc in &scales {
            for z in [0i32, 255, 128, -128, 127, 3] {
                let dq: [f32; 256] = std::array::from_fn(|b| {
                    quantkit_core::dequantize_value(
                        b as i64 - if z < 0 { 128 } else { 0 },
                        sc,
                        i64::from(z),
                    )
                });
                let (k, e) = integer_units(&dq).expect("a dequantization table has integer units");
                for (c, plane, nhwc) in [
                    (1, 1, true),
                    (3, 7, true),
                    (8, 288, true),
                    (13, 50, true),
                    (17, 9, false),
                    (200, 5, true),
                ] {
                    let n = 2;
                    let bytes: Vec<u8> = (0..n * c * plane).map(|_| next() as u8).collect();
                    let got = integer_sums(&bytes, &k, e, n, c, plane, nhwc);
                    let want = f64_reference(&bytes, &dq, n, c, plane, nhwc);
                    let (g, w): (Vec<u64>, Vec<u64>) = (
                        got.iter().map(|v| v.to_bits()).collect(),
                        want.iter().map(|v| v.to_bits()).collect(),
                    );
                    assert_eq!(g, w, "scale {sc}, z {z}, c {c}, plane {plane}, nhwc {nhwc}");
                }
            }
        }
    }

    #[test]
    fn tables_without_integer_units_are_refused() {
        let mut dq = [1.0f32; 256];
        dq[0] = f32::NAN;
        assert!(integer_units(&dq).is_none(), "NaN entry");
        let mut dq = [1.0f32; 256];
        dq[1] = 1e-30; // 100 binades below 1.0: more than 38
        assert!(integer_units(&dq).is_none(), "span of 100 binades");
        assert_eq!(integer_units(&[0.0; 256]).map(|(k, _)| k), Some([0; 256]));
    }
}
