//! The depthwise direct kernel (`groups = C_in`, any channel multiplier) and its output
//! stage, run in the kernel table's depthwise copy.

use super::params::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::Body;
use crate::output::{float_requant, OutputStage, QuantType, Requant};

/// The depthwise direct kernel's operands: one output row `(b, oy)` at a time.
pub(super) struct Depthwise<'a, T> {
    pub(super) x: &'a NhwcInput<'a, T>,
    pub(super) p: &'a ConvParams,
    /// `[ky][kx][co]` of `w − zw`.
    pub(super) taps: &'a [i32],
    pub(super) multiplier: usize,
    pub(super) c_out: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
}

/// Raw sums `acc[ox·c_out + co] = Σ_{ky,kx} (x − za)(w − zw)` of output row `row`
/// (`= b·oh + oy`) into the first slice (the second is not used): a [`Body`], run in
/// the table's depthwise copy.
pub(super) struct DwRow<'a, T> {
    pub(super) dw: &'a Depthwise<'a, T>,
    pub(super) row: usize,
}

impl<T: ActElem> Body<i32, u8> for DwRow<'_, T> {
    #[inline(always)]
    fn run(&self, acc: &mut [i32], _: &mut [u8]) {
        self.dw.row_body(self.row, acc)
    }
}

impl<T: ActElem> Depthwise<'_, T> {
    /// The one implementation; `inline(always)` so that each compiled copy of [`DwRow`]
    /// gets its own vectorised loop.
    #[inline(always)]
    fn row_body(&self, row: usize, acc: &mut [i32]) {
        let [_, h, wd, c] = self.x.shape;
        let [kh, kw] = self.p.kernel;
        let (b, oy) = (row / self.oh, row % self.oh);
        let (c_out, m) = (self.c_out, self.multiplier);
        let za = self.x.zero_point;
        for (ox, a) in acc.chunks_exact_mut(c_out).enumerate().take(self.ow) {
            a.fill(0);
            for ky in 0..kh {
                let iy = (oy * self.p.stride[0] + ky * self.p.dilation[0]) as isize
                    - self.p.pads[0] as isize;
                if iy < 0 || iy >= h as isize {
                    continue;
                }
                let src_row = &self.x.data[(b * h + iy as usize) * wd * c..][..wd * c];
                for kx in 0..kw {
                    let ix = (ox * self.p.stride[1] + kx * self.p.dilation[1]) as isize
                        - self.p.pads[1] as isize;
                    if ix < 0 || ix >= wd as isize {
                        continue;
                    }
                    let src = &src_row[ix as usize * c..][..c];
                    let t = &self.taps[(ky * kw + kx) * c_out..][..c_out];
                    if m == 1 {
                        for ((a, &xv), &tv) in a.iter_mut().zip(src).zip(t) {
                            *a = a.wrapping_add((xv.to_i32() - za).wrapping_mul(tv));
                        }
                    } else {
                        for ((ac, &xv), tc) in a.chunks_exact_mut(m).zip(src).zip(t.chunks_exact(m))
                        {
                            let xv = xv.to_i32() - za;
                            for (a, &tv) in ac.iter_mut().zip(tc) {
                                *a = a.wrapping_add(xv.wrapping_mul(tv));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The output stage of the depthwise kernel with per-channel vectors expanded once, so the
/// float path is a straight loop the compiler vectorises.
pub(super) struct DwEpilogue<'a> {
    pub(super) stage: &'a OutputStage,
    pub(super) bias: Vec<i32>,
    /// Per-channel f32 multipliers for [`Requant::Float`]; empty for fixed point.
    pub(super) scales: Vec<f32>,
    pub(super) lo: i32,
    pub(super) hi: i32,
}

impl<'a> DwEpilogue<'a> {
    pub(super) fn new(stage: &'a OutputStage, c_out: usize, (lo, hi): (i32, i32)) -> Self {
        let bias = stage.bias.clone().unwrap_or_else(|| vec![0; c_out]);
        let scales = match &stage.requant {
            Requant::Float(s) if s.len() == 1 => vec![s[0]; c_out],
            Requant::Float(s) => s.clone(),
            Requant::FixedPoint { .. } => Vec::new(),
        };
        DwEpilogue {
            stage,
            bias,
            scales,
            lo,
            hi,
        }
    }

    /// Equations (K2)–(K4) for one output row.
    #[inline(always)]
    fn emit_body<O: QuantType>(&self, acc: &[i32], out: &mut [O]) {
        let c_out = self.bias.len();
        let (z, lo, hi) = (self.stage.zero_point, self.lo, self.hi);
        for (a, o) in acc.chunks_exact(c_out).zip(out.chunks_exact_mut(c_out)) {
            if self.scales.is_empty() {
                for (j, (&a, o)) in a.iter().zip(o.iter_mut()).enumerate() {
                    let t = a.wrapping_add(self.bias[j]);
                    *o = O::from_clamped(self.stage.requant_one(t, j, lo, hi));
                }
            } else {
                for (((&a, o), &b), &s) in
                    a.iter().zip(o.iter_mut()).zip(&self.bias).zip(&self.scales)
                {
                    *o = O::from_clamped(float_requant(a.wrapping_add(b), s, z, lo, hi));
                }
            }
        }
    }
}

/// The output stage of one row, `acc` (first slice) to `out`: a [`Body`], run in the
/// table's depthwise copy.
pub(super) struct DwEmit<'a, 'b> {
    pub(super) epi: &'a DwEpilogue<'b>,
}

impl<O: QuantType> Body<i32, O> for DwEmit<'_, '_> {
    #[inline(always)]
    fn run(&self, acc: &mut [i32], out: &mut [O]) {
        self.epi.emit_body(acc, out)
    }
}
