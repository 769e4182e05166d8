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
        let mut sums = vec![0f64; n * c];
        if x.nhwc {
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
        format!(
            "global_avg_pool {}→{} (exact f64 sums)",
            self.x_dtype, self.out
        )
    }
}
