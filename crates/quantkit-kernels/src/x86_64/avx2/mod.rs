//! AVX2 kernels.
//!
//! Exactness: AVX2's `vpmaddubsw` (u8×i8 pairs summed to i16) saturates when both products
//! of a pair are large (255·127·2 > 32767), which would make results wrong. These kernels
//! instead sign-extend the i8 weights to i16 (`vpmovsxbw`), keep activations as
//! zero-extended i16 (packed once per call), and multiply with `vpmaddwd`: each i32 lane gets
//! `a0·b0 + a1·b1` with `|a0·b0 + a1·b1| ≤ 2·255·128`, computed exactly. Per 16 MACs this
//! is one multiply uop, the same multiply-port cost per MAC as the saturating
//! `vpmaddubsw`+`vpmaddwd` pair.

pub mod depthwise;
pub mod gemm;
pub mod lut;
pub mod pack;
pub mod peak;
pub(crate) mod prelu;
pub mod winograd;

use crate::dispatch::{Body, Kernels, Stores, VectorBody};
use crate::gemm::{Tile, KGROUP, MR, NR, TILE};
use crate::Isa;

/// Proof that the CPU has AVX2: only [`Avx2::detect`] makes one, so code holding it may
/// run AVX2 instructions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(());

impl Avx2 {
    /// `Some` when the CPU has AVX2.
    pub(crate) fn detect() -> Option<Self> {
        Isa::Avx2.is_supported().then_some(Avx2(()))
    }

    /// Runs `body` on `a` and `b` compiled with AVX2 enabled.
    #[inline(always)]
    pub(crate) fn run<A, B, F: Body<A, B>>(self, body: &F, a: &mut [A], b: &mut [B]) {
        // SAFETY: `self` exists only when AVX2 was detected.
        unsafe { run_body(body, a, b) }
    }
}

/// The copy of a [`Body`]: its `#[inline(always)]` `run` is compiled here.
///
/// # Safety
/// The CPU must support the enabled features.
#[target_feature(enable = "avx2")]
unsafe fn run_body<A, B, F: Body<A, B>>(body: &F, a: &mut [A], b: &mut [B]) {
    body.run(a, b)
}

/// Installs the AVX2 kernels in `k` when the CPU has AVX2 (otherwise leaves it as is): the
/// 6×16 u8×i8 and i16 micro-kernels (pairs geometry, the generic one), the pair packer,
/// the stores of 16-column tiles, the Winograd input transform, the byte table, and AVX2
/// copies of the Winograd, depthwise and pooling loops.
pub(crate) fn plug(k: &mut Kernels) {
    let Some(avx2) = Avx2::detect() else {
        return;
    };
    // SAFETY (relied on by every caller of these entries): each is an AVX2
    // `#[target_feature]` function or a private adapter of one, and this is the only place
    // that installs them, after the check above.
    let stores = Stores {
        isa: Isa::Avx2,
        i32: gemm::avx2_epilogue_i32,
        u8: gemm::avx2_epilogue_float::<u8>,
        i8: gemm::avx2_epilogue_float::<i8>,
    };
    k.mmm.isa = Isa::Avx2;
    k.mmm.geometry = crate::gemm::PanelGeometry::PAIRS;
    k.mmm.tile = tile_u8i8;
    k.mmm.pack = pack_pairs;
    k.mmm.store = stores;
    k.pairs = k.mmm;
    k.store16 = stores;
    k.i16.isa = Isa::Avx2;
    k.i16.tile = tile_i16;
    k.i16.window = tile_i16_window;
    k.i16.rows = tile_i16_rows;
    k.winograd.body = VectorBody::Avx2(avx2);
    k.winograd.input_isa = Isa::Avx2;
    k.winograd.input = winograd::avx2_winograd_input_16;
    k.depthwise = VectorBody::Avx2(avx2);
    k.dw_blocks = (Isa::Avx2, dw_blocks);
    k.pooling = VectorBody::Avx2(avx2);
    k.elementwise = VectorBody::Avx2(avx2);
    k.lut = (Isa::Avx2, lut_u8);
}

/// Entry of [`lut::avx2_lut_u8_32`].
fn lut_u8(table: &[u8; 256], data: &mut [u8]) {
    // SAFETY: installed only by `plug`, after detecting AVX2; the kernel stays inside `data`.
    unsafe { lut::avx2_lut_u8_32(table, data) }
}

/// Entry of [`gemm::avx2_gemm_u8i8_i32_6x16`].
fn tile_u8i8(rows: usize, kgroups: usize, a: &[u32], b: &[i8], tile: &mut Tile) {
    assert!(a.len() >= kgroups * MR && b.len() >= kgroups * NR * KGROUP && rows <= MR);
    use gemm::avx2_gemm_u8i8_i32_6x16 as k;
    let t = &mut tile.0;
    // SAFETY: installed only by `plug`, after detecting AVX2; lengths asserted above.
    unsafe {
        match rows {
            1 => k::<1>(kgroups, a, b, t),
            2 => k::<2>(kgroups, a, b, t),
            3 => k::<3>(kgroups, a, b, t),
            4 => k::<4>(kgroups, a, b, t),
            5 => k::<5>(kgroups, a, b, t),
            _ => k::<6>(kgroups, a, b, t),
        }
    }
}

/// Entry of [`pack::avx2_pack_a_pairs`].
fn pack_pairs(panel: &[u8], rows: usize, k: usize, flip: u8, dst: &mut [u32], sums: &mut [i32]) {
    assert!(
        rows <= MR
            && panel.len() >= rows * k
            && dst.len() >= k.div_ceil(2) * MR
            && sums.len() >= rows
    );
    // SAFETY: installed only by `plug`, after detecting AVX2; lengths asserted above.
    unsafe { pack::avx2_pack_a_pairs(panel, k, rows, flip, dst, sums) }
}

/// Entry of [`gemm::avx2_gemm_i16_6x16`].
fn tile_i16(rows: usize, kgroups: usize, a: &[u32], lda: usize, b: &[i16], out: &mut [i32; TILE]) {
    assert!(
        (1..=MR).contains(&rows)
            && a.len() >= (rows - 1) * lda + kgroups
            && b.len() >= kgroups * NR * 2
    );
    use gemm::avx2_gemm_i16_6x16 as k;
    // SAFETY: installed only by `plug`, after detecting AVX2; lengths asserted above.
    unsafe {
        match rows {
            1 => k::<1>(kgroups, a, lda, b, out),
            2 => k::<2>(kgroups, a, lda, b, out),
            3 => k::<3>(kgroups, a, lda, b, out),
            4 => k::<4>(kgroups, a, lda, b, out),
            5 => k::<5>(kgroups, a, lda, b, out),
            _ => k::<6>(kgroups, a, lda, b, out),
        }
    }
}

/// Entry of [`gemm::avx2_gemm_i16_rows_6x16`] (which checks its bounds itself).
fn tile_i16_rows(a: &[u32], rows: &[usize; 6], koff: &[usize], b: &[i16], out: &mut [i32; TILE]) {
    // SAFETY: installed only by `plug`, after detecting AVX2.
    unsafe { gemm::avx2_gemm_i16_rows_6x16(a, rows, koff, b, out) }
}

/// Entry of [`gemm::avx2_gemm_i16_window_4x16`] (which checks its bounds itself).
fn tile_i16_window(
    a: &[u32],
    rows: &[usize; 4],
    step: usize,
    windows: usize,
    koff: &[usize],
    b: &[i16],
    out: &mut [i32; TILE],
) {
    // SAFETY: installed only by `plug`, after detecting AVX2.
    unsafe { gemm::avx2_gemm_i16_window_4x16(a, rows, step, windows, koff, b, out) }
}

/// Entry of [`depthwise::avx2_dw_u8i16_16`].
fn dw_blocks(a: &crate::conv::dw_blocks::DwArgs<'_>, out: &mut [u8]) {
    assert!(a.in_bounds(out.len()));
    // SAFETY: installed only by `plug`, after detecting AVX2; every read and write is in
    // bounds, asserted above.
    unsafe {
        if a.signed {
            depthwise::avx2_dw_u8i16_16::<true>(a, out)
        } else {
            depthwise::avx2_dw_u8i16_16::<false>(a, out)
        }
    }
}
