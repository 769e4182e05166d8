//! Per-channel tables on 8-bit codes, produced by `compile/prelu.rs`: `DQ(x) → PRelu → Q`
//! with one slope per channel (MTCNN, ...) is one 256-entry table per channel.

use super::{bad, check_dtype, first, kernel_err, Kernel};
use crate::error::Result;
use crate::value::{tensor_i8, tensor_u8, Val};
use crate::Step;
use quantkit_graph::{DType, Data};
use quantkit_kernels::prelu::PreluCodes;

/// `out = tables[c·256 + byte(x)]`, `c` the element's channel (ONNX axis 1: the last axis
/// of an NHWC value).
pub(crate) struct ChannelTableStep {
    /// `channels × 256` output bytes.
    pub tables: Vec<u8>,
    pub channels: usize,
    /// The rank the tables were made for (the slope broadcasts on axis 1 of it).
    pub rank: usize,
    /// The same map computed per channel in f32 (`prelu::PreluCodes`, vectorised), which
    /// the matcher checked equal to `tables` on every code; used for NHWC values.
    pub arith: Option<PreluCodes>,
    pub x_dtype: DType,
    pub out: DType,
    pub desc: String,
}

impl Kernel for ChannelTableStep {
    fn per_image(&self, _consts: &[Option<&quantkit_graph::Tensor>]) -> bool {
        // One table per channel (axis 1, or the last axis of NHWC codes), element by
        // element.
        true
    }
    fn run(&self, step: &Step, inputs: &[Option<&Val>]) -> Result<Vec<Val>> {
        let x = first(step, inputs)?;
        check_dtype(step, x, self.x_dtype)?;
        let shape = &x.tensor.shape;
        let c = self.channels;
        let (ch_dim, inner) = if x.nhwc {
            (shape[3], 1)
        } else {
            (
                shape.get(1).copied().unwrap_or(0),
                shape.iter().skip(2).product::<usize>(),
            )
        };
        if shape.len() != self.rank || ch_dim != c {
            return Err(bad(
                step,
                "input 0",
                format!(
                    "expected rank {} with {c} channels on axis 1, got {shape:?}",
                    self.rank
                ),
            ));
        }
        let bytes: &[u8] = match &x.tensor.data {
            Data::U8(d) => d,
            // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
            Data::I8(d) => unsafe { std::slice::from_raw_parts(d.as_ptr().cast(), d.len()) },
            _ => return Err(bad(step, "input 0", "not 8-bit codes".into())),
        };
        let mut out = vec![0u8; bytes.len()];
        if let (Some(p), 1) = (&self.arith, inner) {
            out.copy_from_slice(bytes);
            p.apply(&mut out).map_err(kernel_err(step))?;
        } else if inner == 1 {
            for (o, x) in out.chunks_mut(c).zip(bytes.chunks(c)) {
                for (ch, (o, &x)) in o.iter_mut().zip(x).enumerate() {
                    *o = self.tables[ch * 256 + x as usize];
                }
            }
        } else {
            for (k, (o, x)) in out.chunks_mut(inner).zip(bytes.chunks(inner)).enumerate() {
                let t = &self.tables[(k % c) * 256..][..256];
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = t[x as usize];
                }
            }
        }
        let shape = shape.clone();
        let tensor = match self.out {
            DType::U8 => tensor_u8(shape, out),
            _ => tensor_i8(shape, out.into_iter().map(|b| b as i8).collect()),
        };
        Ok(vec![Val {
            tensor,
            nhwc: x.nhwc,
        }])
    }
    fn describe(&self) -> String {
        self.desc.clone()
    }
    fn as_channel_table(&self) -> Option<&ChannelTableStep> {
        self.arith.is_some().then_some(self)
    }
}
