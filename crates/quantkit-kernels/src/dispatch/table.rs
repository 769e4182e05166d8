//! The kernel table: every SIMD routine of the crate is reached through one of these.
//!
//! [`crate::generic::generic`] fills a table with the portable scalar kernels; each
//! instruction set module (`x86_64/avx2`, `x86_64/avx512vnni`) has a `plug(&mut Kernels)`
//! that first checks the CPU has its instructions and then overrides the entries it
//! implements, together with its tile geometry (tract-linalg's `generic()` / `plug()`). The
//! table of an ISA is the generic one with the plugs of every ISA up to it applied in
//! [`Isa::ALL`] order, built once per process ([`table_for`]); [`kernels`] is the table of
//! the dispatched ISA ([`super::isa`], which honours `QUANTKIT_ISA`).
//!
//! Reading an entry family through its accessor ([`Kernels::mmm`], …) counts one call in
//! [`super::simd_calls`] when the family is not the scalar one. Callers read an entry once
//! per kernel call (a GEMM, a conv, a pool), never per tile, so the count costs nothing.

use std::any::Any;
use std::sync::OnceLock;

use crate::dispatch::{note_use, Isa};
use crate::error::{KernelError, Result};
use crate::gemm::{Epilogue, PanelGeometry, Tile, TILE};
use crate::output::QuantType;

/// Raw products of one register tile: `(rows, kgroups, packed A panel, packed weight
/// panel, tile)` with the geometry of the family (`tile[r·nr + c] = Σ_k a[r][k]·b[k][c]`,
/// wrapping i32). Checks the panel lengths.
pub(crate) type TileFn = fn(usize, usize, &[u32], &[i8], &mut Tile);

/// Packs `rows ≤ mr` rows of `k` stored bytes (row `r` at `panel[r·k..]`, each byte XORed
/// with `flip`) into one activation panel of the family's geometry (`⌈k/kgroup⌉·mr` words)
/// and their sums (`Σ_k a`); rows `rows..mr` are left to the caller (it clears them).
pub(crate) type PackFn = fn(&[u8], usize, usize, u8, &mut [u32], &mut [i32]);

/// Stores the corrected `rows × cols` block of a raw tile as i32:
/// `(epilogue, tile, row sums, rows, c0, cols, out at row r0, ldc)`.
///
/// # Safety
/// `out` must be valid for `rows` rows of stride `ldc` from column `c0` with `cols`
/// columns, written by no other thread; `c0` is a multiple of the tile width.
pub(crate) type StoreI32Fn =
    unsafe fn(&Epilogue<'_>, &[i32; TILE], &[i32], usize, usize, usize, *mut i32, usize);

/// Stores the corrected block through the float output stage (K2, K3a, K4):
/// `(epilogue, scales per padded column, (z, lo, hi), tile, row sums, rows, c0, cols, out,
/// ldc)`.
///
/// # Safety
/// As [`StoreI32Fn`], with `out` pointing at `T` elements.
pub(crate) type StoreFloatFn<T> = unsafe fn(
    &Epilogue<'_>,
    &[f32],
    (i32, i32, i32),
    &[i32; TILE],
    &[i32],
    usize,
    usize,
    usize,
    *mut T,
    usize,
);

/// i16 GEMM tile (Winograd): `(rows ≤ 6, kgroups, A rows of kgroups words at stride lda,
/// lda, B [g][16][2] i16, tile)`. Checks the lengths.
pub(crate) type I16TileFn = fn(usize, usize, &[u32], usize, &[i16], &mut [i32; TILE]);

/// Direct-convolution tile (quads geometry, 8 rows × 32 columns as two 16-column tiles):
/// `(image bytes, the 8 rows' byte offsets, the k-groups' byte offsets, weight panel,
/// tiles)`; word `g` of row `r` is `x[rows[r] + koff[g]..+4]`. Checks the bounds.
pub(crate) type DirectFn = fn(&[u8], &[usize; 8], &[usize], &[i8], &mut [Tile; 2]);

/// The depthwise conv in 16-channel blocks (`conv/dw_blocks.rs`): `n` output pixels of
/// one row through the float output stage into 8-bit codes. Checks its bounds
/// ([`crate::conv::dw_blocks::DwArgs::in_bounds`]).
pub(crate) type DwFn = fn(&crate::conv::dw_blocks::DwArgs<'_>, &mut [u8]);

/// A 256-entry byte table applied in place: `data[i] = table[data[i]]` (the code tables of
/// element-wise functions, [`crate::lut::apply_codes`]).
pub(crate) type LutFn = fn(&[u8; 256], &mut [u8]);

/// i16 tile of 6 rows read in place (the few-channel conv without a pool): `(a, rows, koff,
/// B [g][16][2] i16, out)`; word `g` of row `r` is `a[rows[r] + koff[g]]`, `out[16r + c]`
/// its sum. Checks the bounds.
pub(crate) type I16RowsFn = fn(&[u32], &[usize; 6], &[usize], &[i16], &mut [i32; TILE]);

/// i16 tiles of 2×2 max-pool windows with an indirect A (the pooled few-channel conv):
/// `(a, rows, step, windows, koff, B [g][16][2] i16, out)`; word `g` of row `r` of window
/// `w` is `a[rows[r] + w·step + koff[g]]`, and `out[16w + c]` is the maximum over the
/// window's 4 rows of their sums (`windows ≤ 6`). Checks the bounds.
pub(crate) type I16WindowFn =
    fn(&[u32], &[usize; 4], usize, usize, &[usize], &[i16], &mut [i32; TILE]);

/// Winograd input transform `V = Bᵀ d B` of 16 channels `c0..c0+16` of one tile: `(the 16
/// source pixels' bytes, signed, c0, za, v, plane, off)`, value `(ξ, c)` to
/// `v[ξ·plane + off + c0 + c]`.
///
/// # Safety
/// Every source slice must hold at least `c0 + 16` bytes and `v` at least
/// `15·plane + off + c0 + 16` values.
pub(crate) type WinogradInputFn =
    unsafe fn(&[&[u8]; 16], bool, usize, i32, &mut [i16], usize, usize);

/// The u8×i8 GEMM family: geometry, micro-kernel, activation packer and stores, which belong
/// together (the packer and the stores follow the kernel's tile).
#[derive(Clone, Copy)]
pub(crate) struct Mmm {
    /// Whose code this is (the counter counts non-scalar families).
    pub(crate) isa: Isa,
    /// Register tile and panel shape of the kernel, set by the plug that installs it.
    pub(crate) geometry: PanelGeometry,
    /// The micro-kernel.
    pub(crate) tile: TileFn,
    /// The activation packer of the geometry.
    pub(crate) pack: PackFn,
    /// The stores of tiles with the geometry's width.
    pub(crate) store: Stores,
}

/// The output stages of one tile width.
#[derive(Clone, Copy)]
pub(crate) struct Stores {
    /// Whose code this is.
    pub(crate) isa: Isa,
    /// Plain i32 output.
    pub(crate) i32: StoreI32Fn,
    /// Float requantization to u8.
    pub(crate) u8: StoreFloatFn<u8>,
    /// Float requantization to i8.
    pub(crate) i8: StoreFloatFn<i8>,
}

impl Stores {
    /// The float store for `T` (u8 or i8, the only [`QuantType`]s).
    pub(crate) fn float<T: QuantType>(&self) -> StoreFloatFn<T> {
        let entries: [&dyn Any; 2] = [&self.u8, &self.i8];
        entries
            .iter()
            .find_map(|e| e.downcast_ref::<StoreFloatFn<T>>())
            .copied()
            .expect("QuantType is implemented for u8 and i8 only")
    }
}

/// The i16 micro-kernels (Winograd's GEMMs, the few-channel conv's indirect tiles).
#[derive(Clone, Copy)]
pub(crate) struct I16 {
    /// Whose code this is.
    pub(crate) isa: Isa,
    /// Packed-A tile.
    pub(crate) tile: I16TileFn,
    /// Indirect-A tiles of 2×2 pool windows, reduced to their maxima.
    pub(crate) window: I16WindowFn,
    /// Indirect-A tile of 6 rows at any addresses.
    pub(crate) rows: I16RowsFn,
}

/// Winograd F(2×2, 3×3): the band loop's compiled copy and the input transform.
#[derive(Clone, Copy)]
pub(crate) struct Winograd {
    /// How the band loop (transforms, output stage hand-off) is compiled.
    pub(crate) body: VectorBody,
    /// Whose input transform this is.
    pub(crate) input_isa: Isa,
    /// The input transform of 16 channels.
    pub(crate) input: WinogradInputFn,
}

/// A loop body written once in portable Rust and compiled again for an instruction set:
/// `run` is `#[inline(always)]` into a `#[target_feature]` wrapper of the ISA module, so
/// the compiler vectorises it with that ISA's registers. Integer wrapping arithmetic and
/// IEEE f32 steps only, so every copy gives the same bits. The buffers the body writes are
/// the arguments `a` and `b` of the wrapper, not references inside the body value: as
/// function arguments they carry the fact that they alias nothing else, which keeps loads
/// out of the loops (the depthwise conv lost 8–12 % without it). A body that writes one
/// buffer leaves `b` empty; one that writes a struct gets it as a one-element slice.
pub(crate) trait Body<A, B> {
    /// The body; implementations are `#[inline(always)]`.
    fn run(&self, a: &mut [A], b: &mut [B]);
}

/// Which compiled copy of a [`Body`] a kernel family uses. The SIMD variants carry a token
/// that only exists when the CPU was checked for the instructions.
#[derive(Clone, Copy, Debug)]
pub(crate) enum VectorBody {
    /// Baseline code generation.
    Generic,
    /// Compiled with AVX2 enabled.
    #[cfg(target_arch = "x86_64")]
    Avx2(crate::x86_64::avx2::Avx2),
    /// Compiled with AVX-512 F and BW enabled.
    #[cfg(target_arch = "x86_64")]
    Avx512(crate::x86_64::avx512vnni::Avx512),
}

impl VectorBody {
    /// Runs `body` on `a` and `b` in this copy.
    #[inline(always)]
    pub(crate) fn run<A, B, F: Body<A, B>>(self, body: &F, a: &mut [A], b: &mut [B]) {
        match self {
            VectorBody::Generic => body.run(a, b),
            #[cfg(target_arch = "x86_64")]
            VectorBody::Avx2(t) => t.run(body, a, b),
            #[cfg(target_arch = "x86_64")]
            VectorBody::Avx512(t) => t.run(body, a, b),
        }
    }

    /// Whether this is a SIMD copy.
    pub(crate) fn is_simd(self) -> bool {
        !matches!(self, VectorBody::Generic)
    }
}

/// The kernel table of one instruction set. Entries are read through the accessors, which
/// count the use of SIMD families ([`super::simd_calls`]).
#[derive(Clone, Copy)]
pub struct Kernels {
    /// The ISA the table was built for.
    pub(crate) isa: Isa,
    /// u8×i8 GEMM: geometry, micro-kernel, packer, stores.
    pub(crate) mmm: Mmm,
    /// u8×i8 GEMM in the pairs geometry (k in pairs, 6×16 tiles), whatever `mmm`'s is:
    /// the few-channel conv packs its panels straight from planes of word pairs
    /// (`conv/small_cin.rs`), which only this layout can read. AVX-512 VNNI keeps AVX2's.
    pub(crate) pairs: Mmm,
    /// Stores of 16-column tiles (the pairs width) for callers that compute their own sums
    /// (Winograd, the fused conv + max pool): `TileWriter`.
    pub(crate) store16: Stores,
    /// i16 micro-kernels.
    pub(crate) i16: I16,
    /// Winograd transforms.
    pub(crate) winograd: Winograd,
    /// The direct convolution's tile (`conv/direct.rs`) and whose it is.
    pub(crate) direct: (Isa, DirectFn),
    /// Depthwise conv rows and their output stage.
    pub(crate) depthwise: VectorBody,
    /// The depthwise conv in 16-channel blocks (multiplier 1, float stage) and whose it is.
    pub(crate) dw_blocks: (Isa, DwFn),
    /// Max pooling, and the window maxima of the fused conv + max pool.
    pub(crate) pooling: VectorBody,
    /// Element-wise passes over whole tensors: per-tensor quantize/dequantize, the input
    /// prologue (`quantize.rs`) and the NCHW↔NHWC transposes of 8-bit codes
    /// (`transpose.rs`).
    pub(crate) elementwise: VectorBody,
    /// The in-place 256-entry byte table and whose it is.
    pub(crate) lut: (Isa, LutFn),
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("isa", &self.isa)
            .field("mmm", &(self.mmm.isa, self.mmm.geometry))
            .field("pairs", &self.pairs.isa)
            .field("store16", &self.store16.isa)
            .field("i16", &self.i16.isa)
            .field("direct", &self.direct.0)
            .field("winograd", &(self.winograd.body, self.winograd.input_isa))
            .field("depthwise", &self.depthwise)
            .field("dw_blocks", &self.dw_blocks.0)
            .field("pooling", &self.pooling)
            .field("elementwise", &self.elementwise)
            .field("lut", &self.lut.0)
            .finish()
    }
}

impl Kernels {
    /// The ISA this table was built for.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Panel geometry of the GEMM micro-kernel (what weights are packed in).
    pub fn geometry(&self) -> PanelGeometry {
        self.mmm.geometry
    }

    /// The u8×i8 GEMM family (counted).
    pub(crate) fn mmm(&self) -> &Mmm {
        note_use(self.mmm.isa != Isa::Scalar);
        &self.mmm
    }

    /// The u8×i8 GEMM family in the pairs geometry (counted).
    pub(crate) fn pairs(&self) -> &Mmm {
        note_use(self.pairs.isa != Isa::Scalar);
        &self.pairs
    }

    /// The stores of 16-column tiles (counted).
    pub(crate) fn store16(&self) -> &Stores {
        note_use(self.store16.isa != Isa::Scalar);
        &self.store16
    }

    /// The i16 micro-kernels (counted).
    pub(crate) fn i16(&self) -> &I16 {
        note_use(self.i16.isa != Isa::Scalar);
        &self.i16
    }

    /// The direct convolution's tile (counted).
    pub(crate) fn direct(&self) -> DirectFn {
        note_use(self.direct.0 != Isa::Scalar);
        self.direct.1
    }

    /// The Winograd transforms (counted).
    pub(crate) fn winograd(&self) -> &Winograd {
        note_use(self.winograd.body.is_simd() || self.winograd.input_isa != Isa::Scalar);
        &self.winograd
    }

    /// The depthwise loop's compiled copy (counted).
    pub(crate) fn depthwise(&self) -> VectorBody {
        note_use(self.depthwise.is_simd());
        self.depthwise
    }

    /// The blocked depthwise kernel (counted).
    pub(crate) fn dw_blocks(&self) -> DwFn {
        note_use(self.dw_blocks.0 != Isa::Scalar);
        self.dw_blocks.1
    }

    /// The pooling loops' compiled copy (counted).
    pub(crate) fn pooling(&self) -> VectorBody {
        note_use(self.pooling.is_simd());
        self.pooling
    }

    /// The in-place byte table (counted).
    pub(crate) fn lut(&self) -> LutFn {
        note_use(self.lut.0 != Isa::Scalar);
        self.lut.1
    }

    /// The element-wise passes' compiled copy (counted).
    pub(crate) fn elementwise(&self) -> VectorBody {
        note_use(self.elementwise.is_simd());
        self.elementwise
    }
}

/// Applies `isa`'s plug (a no-op when the CPU lacks its instructions).
fn plug(isa: Isa, k: &mut Kernels) {
    match isa {
        Isa::Scalar => {}
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => crate::x86_64::avx2::plug(k),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => crate::x86_64::avx512vnni::plug(k),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::Avx512Vnni => {}
    }
    debug_assert!(
        k.mmm.geometry.nr * k.mmm.geometry.mr <= TILE,
        "a plug installed a tile larger than the tile buffer"
    );
}

static TABLES: [OnceLock<Kernels>; Isa::ALL.len()] = [const { OnceLock::new() }; Isa::ALL.len()];

/// The table of `isa`: the generic kernels with the plugs of every ISA up to `isa` applied,
/// built on first use. [`KernelError::UnsupportedIsa`] when the CPU lacks `isa`.
pub fn table_for(isa: Isa) -> Result<&'static Kernels> {
    if !isa.is_supported() {
        return Err(KernelError::UnsupportedIsa { isa: isa.name() });
    }
    let slot = Isa::ALL
        .iter()
        .position(|&i| i == isa)
        .expect("every Isa is in Isa::ALL");
    Ok(TABLES[slot].get_or_init(|| {
        let mut k = crate::generic::generic();
        for &step in &Isa::ALL[..=slot] {
            plug(step, &mut k);
        }
        k.isa = isa;
        k
    }))
}

/// The table of the dispatched ISA ([`super::isa`]).
pub fn kernels() -> &'static Kernels {
    table_for(super::isa()).expect("the dispatched ISA is supported by construction")
}
