//! Scalar depthwise conv in 16-channel blocks (`conv/dw_blocks.rs`): the reference the
//! SIMD copies must equal bit for bit.

use crate::conv::dw_blocks::{lane_of, DwArgs, DW_BLOCK};
use crate::output::float_requant;

/// Equations (D1) and (D2) of `conv/dw_blocks.rs` for `a.n` output pixels, channel by
/// channel, reading the packed weights at the lanes the SIMD kernels use.
pub(crate) fn generic_dw_u8i16_16(a: &DwArgs<'_>, out: &mut [u8]) {
    assert!(a.in_bounds(out.len()));
    let pairs = a.taps.len() / 2;
    let code = |i: usize| -> i32 {
        if a.signed {
            a.x[i] as i8 as i32
        } else {
            a.x[i] as i32
        }
    };
    for px in 0..a.n {
        let at = a.base + px * a.step;
        for ch in 0..a.c_out {
            let (blk, cb) = (ch / DW_BLOCK, ch % DW_BLOCK);
            let l = lane_of(cb);
            let (half, lane) = (l / 8, l % 8);
            let mut acc = a.init[blk * DW_BLOCK + l];
            for pr in 0..pairs {
                let w = &a.w[(blk * pairs + pr) * 2 * DW_BLOCK + half * DW_BLOCK + 2 * lane..];
                let x0 = code(at + a.taps[2 * pr] + ch);
                let x1 = code(at + a.taps[2 * pr + 1] + ch);
                // One vpmaddwd lane: exact in i32 (|x| ≤ 255, |w| ≤ 2^15).
                acc = acc.wrapping_add(x0 * w[0] as i32 + x1 * w[1] as i32);
            }
            let s = a.scale[blk * DW_BLOCK + l];
            out[px * a.c_out + ch] = float_requant(acc, s, a.z, a.lo, a.hi) as u8;
        }
    }
}
