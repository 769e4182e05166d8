//! Scalar Winograd F(2×2, 3×3) input transform (`crate::winograd`): `V = Bᵀ d B` with
//! `d = x − za`, 16 channels at a time.

/// Positions of the 4×4 transform domain.
const XI: usize = 16;
/// Channels per block.
const CB: usize = 16;

/// `Bᵀ d B` on 16 channels at once; `d` and the result are row-major 4×4 (index `4i + j`).
/// Bᵀ applied to four values is `[d0 − d2, d1 + d2, d2 − d1, d1 − d3]`: first down each
/// column, then along each row. Written out lane by lane so it vectorises to one register
/// per value.
#[inline(always)]
fn transform_input(d: &[[i16; CB]; XI]) -> [[i16; CB]; XI] {
    let mut v = [[0i16; CB]; XI];
    for l in 0..CB {
        let mut t = [0i16; XI];
        for j in 0..4 {
            let (d0, d1, d2, d3) = (d[j][l], d[4 + j][l], d[8 + j][l], d[12 + j][l]);
            t[j] = d0 - d2;
            t[4 + j] = d1 + d2;
            t[8 + j] = d2 - d1;
            t[12 + j] = d1 - d3;
        }
        for i in 0..4 {
            let (t0, t1, t2, t3) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
            v[4 * i][l] = t0 - t2;
            v[4 * i + 1][l] = t1 + t2;
            v[4 * i + 2][l] = t2 - t1;
            v[4 * i + 3][l] = t1 - t3;
        }
    }
    v
}

/// The input transform of channels `c0..c0 + n` (`n ≤ 16`) of the 16 source pixels `src`
/// (bytes of u8 values, or of i8 values when `signed`): value `(ξ, c)` to
/// `v[ξ·plane + off + c0 + c]`. Portable; the Winograd loop calls it for the channels past
/// the last whole block of 16, in whatever compiled copy the loop runs.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn winograd_input(
    src: &[&[u8]; XI],
    signed: bool,
    c0: usize,
    n: usize,
    za: i32,
    v: &mut [i16],
    plane: usize,
    off: usize,
) {
    let mut d = [[0i16; CB]; XI];
    for (dk, sk) in d.iter_mut().zip(src) {
        for (o, &x) in dk.iter_mut().zip(&sk[c0..c0 + n]) {
            let x = if signed { x as i8 as i32 } else { x as i32 };
            *o = (x - za) as i16;
        }
    }
    let vt = transform_input(&d);
    for (xi, vx) in vt.iter().enumerate() {
        v[xi * plane + off + c0..][..n].copy_from_slice(&vx[..n]);
    }
}

/// The table entry: [`winograd_input`] of a whole block of 16 channels (bounds-checked).
pub(crate) fn generic_winograd_input_16(
    src: &[&[u8]; XI],
    signed: bool,
    c0: usize,
    za: i32,
    v: &mut [i16],
    plane: usize,
    off: usize,
) {
    winograd_input(src, signed, c0, CB, za, v, plane, off)
}
