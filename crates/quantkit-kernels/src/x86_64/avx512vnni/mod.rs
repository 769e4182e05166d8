//! AVX-512 VNNI kernels.
//!
//! Exactness: `vpdpbusd` multiplies four unsigned bytes by four signed bytes, adds the four
//! products (each at most 255·128 in magnitude) and the accumulator lane in 32-bit
//! arithmetic **without saturation** (that is `vpdpbusds`), so every lane is the exact sum
//! modulo 2^32, and exact for the K the GEMM accepts. Activations are stored as u8 (i8
//! activations flipped by +128) and weights as i8, which is exactly the operand order of
//! the instruction. One instruction retires 64 MACs.

pub mod depthwise;
pub mod gemm;
pub mod lut;
pub mod pack;
pub mod peak;
pub(crate) mod prelu;

use crate::dispatch::{Body, Kernels, Stores, VectorBody};
use crate::gemm::{PanelGeometry, Tile, MR, NR, TILE, VNNI_KGROUP, VNNI_MR, VNNI_NR};
use crate::Isa;

/// Proof that the CPU has AVX-512 F, BW, VL and VNNI ([`Isa::Avx512Vnni`]): only
/// [`Avx512::detect`] makes one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(());

impl Avx512 {
    /// `Some` when the CPU has AVX-512 F, BW, VL and VNNI.
    pub(crate) fn detect() -> Option<Self> {
        Isa::Avx512Vnni.is_supported().then_some(Avx512(()))
    }

    /// Runs `body` on `a` and `b` compiled with AVX-512 F and BW enabled.
    #[inline(always)]
    pub(crate) fn run<A, B, F: Body<A, B>>(self, body: &F, a: &mut [A], b: &mut [B]) {
        // SAFETY: `self` exists only when AVX-512 F/BW/VL/VNNI were detected.
        unsafe { run_body(body, a, b) }
    }
}

/// The copy of a [`Body`]: its `#[inline(always)]` `run` is compiled here.
///
/// # Safety
/// The CPU must support the enabled features.
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn run_body<A, B, F: Body<A, B>>(body: &F, a: &mut [A], b: &mut [B]) {
    body.run(a, b)
}

/// Installs the AVX-512 VNNI kernels in `k` when the CPU has them (otherwise leaves it as
/// is): its own GEMM geometry ([`PanelGeometry::QUADS`], 8×32 tiles, k in quads) with the
/// `vpdpbusd` micro-kernel, the vector quad packer and 512-bit stores, and AVX-512 copies of the
/// depthwise loops, and the `vpdpwssd` i16 micro-kernels (Winograd's GEMMs: one zmm per
/// k-group of a 16-column panel, so the pairs layout is shared with AVX2). Everything else
/// (Winograd's F(2×2) input transform, pooling, 16-column stores) stays as the plugs before
/// it (AVX2) left it.
pub(crate) fn plug(k: &mut Kernels) {
    let Some(avx512) = Avx512::detect() else {
        return;
    };
    // SAFETY (relied on by every caller of these entries): each is an AVX-512
    // `#[target_feature]` function or a private adapter of one, and this is the only place
    // that installs them, after the check above.
    k.mmm.isa = Isa::Avx512Vnni;
    k.mmm.geometry = PanelGeometry::QUADS;
    k.mmm.tile = tile_u8i8;
    k.mmm.pack = pack_quads;
    k.mmm.store = Stores {
        isa: Isa::Avx512Vnni,
        i32: gemm::avx512_epilogue_i32,
        u8: gemm::avx512_epilogue_float::<u8, VNNI_NR>,
        i8: gemm::avx512_epilogue_float::<i8, VNNI_NR>,
    };
    // The 16-column stores of `TileWriter`: AVX2's i32 store, the float stages one zmm
    // per tile row.
    k.store16 = Stores {
        isa: Isa::Avx512Vnni,
        i32: k.store16.i32,
        u8: gemm::avx512_epilogue_float::<u8, NR>,
        i8: gemm::avx512_epilogue_float::<i8, NR>,
    };
    k.direct = (Isa::Avx512Vnni, direct_tile);
    k.i16.isa = Isa::Avx512Vnni;
    k.i16.tile = tile_i16;
    k.depthwise = VectorBody::Avx512(avx512);
    k.dw_blocks = (Isa::Avx512Vnni, dw_blocks);
    // The Winograd band loop (F(4×4)'s portable transforms: 16 i32 lanes per zmm) in its
    // AVX-512 copy: 4–5 % faster on F(4×4) layers, F(2×2) unchanged (its input transform
    // stays the AVX2 entry).
    k.winograd.body = VectorBody::Avx512(avx512);
    // VBMI (`vpermi2b`) is not part of the ISA's definition (Cascade Lake has VNNI without
    // it): the byte table is installed only where the CPU has it, else stays AVX2's
    // (`vpshufb`, 16 rows).
    if std::arch::is_x86_feature_detected!("avx512vbmi") {
        k.lut = (Isa::Avx512Vnni, lut_u8);
    }
}

/// Entry of [`lut::avx512vbmi_lut_u8_64`].
fn lut_u8(table: &[u8; 256], data: &mut [u8]) {
    // SAFETY: installed only by `plug`, after detecting AVX-512 F/BW/VL/VNNI and VBMI; the
    // kernel stays inside `data`.
    unsafe { lut::avx512vbmi_lut_u8_64(table, data) }
}

/// Entry of [`gemm::avx512vnni_conv_u8i8_i32_8x32_indirect`].
fn direct_tile(x: &[u8], rows: &[usize; 8], koff: &[usize], b: &[i8], out: &mut [Tile; 2]) {
    let reach = rows.iter().max().copied().unwrap_or(0) + koff.iter().max().copied().unwrap_or(0);
    assert!(
        koff.is_empty() || (reach + 4 <= x.len() && b.len() >= koff.len() * VNNI_NR * VNNI_KGROUP)
    );
    // SAFETY: installed only by `plug`, after detecting AVX-512 F/BW/VL/VNNI; every word
    // (at most `reach + 4`) and the panel are in bounds, asserted above.
    unsafe { gemm::avx512vnni_conv_u8i8_i32_8x32_indirect(x.as_ptr(), rows, koff, b.as_ptr(), out) }
}

/// Entry of [`pack::avx512vnni_pack_a_quads`].
fn pack_quads(panel: &[u8], rows: usize, k: usize, flip: u8, dst: &mut [u32], sums: &mut [i32]) {
    assert!(
        rows <= VNNI_MR
            && panel.len() >= rows * k
            && dst.len() >= k.div_ceil(VNNI_KGROUP) * VNNI_MR
            && sums.len() >= rows
    );
    // SAFETY: installed only by `plug`, after detecting AVX-512 VNNI (which implies AVX2);
    // lengths asserted above.
    unsafe { pack::avx512vnni_pack_a_quads(panel, k, rows, flip, dst, sums) }
}

/// Entry of [`gemm::avx512vnni_gemm_i16_6x16`].
fn tile_i16(rows: usize, kgroups: usize, a: &[u32], lda: usize, b: &[i16], out: &mut [i32; TILE]) {
    assert!(
        (1..=MR).contains(&rows)
            && a.len() >= (rows - 1) * lda + kgroups
            && b.len() >= kgroups * NR * 2
    );
    use gemm::avx512vnni_gemm_i16_6x16 as k;
    // SAFETY: installed only by `plug`, after detecting AVX-512 F/BW/VL/VNNI; lengths
    // asserted above.
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

/// Entry of [`gemm::avx512vnni_gemm_u8i8_i32_8x32`].
fn tile_u8i8(rows: usize, kgroups: usize, a: &[u32], b: &[i8], tile: &mut Tile) {
    assert!(
        a.len() >= kgroups * VNNI_MR
            && b.len() >= kgroups * VNNI_NR * VNNI_KGROUP
            && rows <= VNNI_MR
    );
    use gemm::avx512vnni_gemm_u8i8_i32_8x32 as k;
    let t = &mut tile.0;
    // SAFETY: installed only by `plug`, after detecting AVX-512 F/BW/VL/VNNI; lengths
    // asserted above.
    unsafe {
        match rows {
            1 => k::<1>(kgroups, a, b, t),
            2 => k::<2>(kgroups, a, b, t),
            3 => k::<3>(kgroups, a, b, t),
            4 => k::<4>(kgroups, a, b, t),
            5 => k::<5>(kgroups, a, b, t),
            6 => k::<6>(kgroups, a, b, t),
            7 => k::<7>(kgroups, a, b, t),
            _ => k::<8>(kgroups, a, b, t),
        }
    }
}

/// Entry of [`depthwise::avx512vnni_dw_u8i16_16`].
fn dw_blocks(a: &crate::conv::dw_blocks::DwArgs<'_>, out: &mut [u8]) {
    assert!(a.in_bounds(out.len()));
    // SAFETY: installed only by `plug`, after detecting AVX-512 F/BW/VL/VNNI; every read
    // and write is in bounds, asserted above.
    unsafe {
        if a.signed {
            depthwise::avx512vnni_dw_u8i16_16::<true>(a, out)
        } else {
            depthwise::avx512vnni_dw_u8i16_16::<false>(a, out)
        }
    }
}
