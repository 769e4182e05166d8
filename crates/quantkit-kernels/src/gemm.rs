//! Integer GEMM / GEMV: `C[M,N] = (A[M,K] − za) · (W[K,N] − zw)`, u8 or i8 activations, i8
//! (or u8) weights packed once ahead of time, i32 accumulation, and either a plain i32
//! output (MatMulInteger / ConvInteger) or a fused [`OutputStage`] to u8/i8.
//!
//! # Zero points (equation K1 of `docs/kernels.md`)
//! ```text
//! Σ_k (a−za)(w−zw) = Σ_k a·w − zw·Σ_k a − za·Σ_k w + K·za·zw
//! ```
//! The kernels compute only `Σ a·w`; the row sums `Σ a` are taken while packing A, the
//! column sums `Σ w` once when packing the weights. So any zero points (per-tensor
//! activations, per-tensor or per-column weights) cost O(M·N) extra work, not O(M·N·K).
//!
//! # i8 activations
//! i8 activations are stored as `a + 128` (a bit flip of the sign) and their zero point as
//! `za + 128`; `(a+128) − (za+128) = a − za`, so the same u8 kernels and the same
//! correction (K1) give the exact i8 result at the same speed. u8 weights are stored the
//! other way round, as `w − 128` with zero point `zw − 128`.
//!
//! # Exactness
//! Every path computes the exact integer result of (K1) as long as it fits in i32; with
//! zero points inside the 8-bit ranges `|a−za|, |w−zw| ≤ 255`, which holds for
//! `K ≤ 33 025` ([`MAX_K`]); larger K is rejected. Intermediate terms use wrapping i32
//! arithmetic, which is exact modulo 2^32 and hence exact for the final value.
//!
//! # Packed weight layout
//! Weights are given as `[K, N]` (ONNX MatMul's B) or `[N, K]` (conv weights `O×(I·kh·kw)`)
//! and stored in panels of `nr` output columns. Within a panel, for each group `g` of
//! `kgroup` consecutive k, `nr·kgroup` bytes: `w[kgroup·g + i][c]` at `c·kgroup + i`. K is
//! padded to a multiple of `kgroup` and N to a multiple of `nr` with zeros (which contribute
//! nothing). The geometry depends on the ISA the weights are packed for (see
//! [`PanelGeometry`]): scalar and AVX2 use pairs (`vpmaddwd`) in panels of 16 columns,
//! AVX-512 VNNI quads (`vpdpbusd`) in panels of 32. Weights are packed for the dispatched
//! ISA; a call on another ISA (tests, benchmarks) repacks them for that call.
//!
//! # Threads
//! Work is split over blocks of rows and column panels with rayon (the caller's pool; use
//! `ThreadPool::install` to bound it). Each output element is computed by one task with the
//! same instruction sequence whatever the split, so results are bit-identical for any
//! thread count.

use rayon::prelude::*;

use crate::dispatch::{self, table_for, Isa, Kernels, Mmm, StoreFloatFn, StoreI32Fn, Stores};
use crate::dispatch::{I16IndirectFn, TileFn};
use crate::error::{KernelError, Result};
use crate::output::{OutputStage, QuantType, Requant};

/// Rows of the register tile of the scalar and AVX2 kernels.
pub const MR: usize = 6;
/// Columns of the register tile and of a packed weight panel (scalar, AVX2).
pub const NR: usize = 16;
/// Consecutive k-values packed together (one i32 lane of `vpmaddwd`; scalar, AVX2).
pub const KGROUP: usize = 2;
/// Rows of the AVX-512 VNNI register tile.
pub const VNNI_MR: usize = 8;
/// Columns of the AVX-512 VNNI register tile and weight panel (two zmm registers).
pub const VNNI_NR: usize = 32;
/// Consecutive k-values of one `vpdpbusd` lane.
pub const VNNI_KGROUP: usize = 4;
/// Largest supported reduction length (see "Exactness").
pub const MAX_K: usize = 33_025;
/// Elements of the largest register tile, the size of the tile buffer.
pub(crate) const TILE: usize = VNNI_MR * VNNI_NR;

// One k-group of an AVX2 weight panel is exactly two 128-bit loads, of a VNNI panel two
// 512-bit loads.
const _: () = assert!(NR * KGROUP == 32 && VNNI_NR * VNNI_KGROUP == 128 && MR * NR <= TILE);

/// Shape of the packed panels and register tile of one kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PanelGeometry {
    /// Rows of the register tile (and of a packed activation panel).
    pub mr: usize,
    /// Columns of the register tile and of a packed weight panel.
    pub nr: usize,
    /// Consecutive k-values in one 32-bit lane.
    pub kgroup: usize,
}

impl PanelGeometry {
    /// Pairs of k in panels of 16 columns, 6-row tiles: scalar and AVX2.
    pub const PAIRS: PanelGeometry = PanelGeometry {
        mr: MR,
        nr: NR,
        kgroup: KGROUP,
    };
    /// Quads of k in panels of 32 columns, 8-row tiles: AVX-512 VNNI.
    pub const QUADS: PanelGeometry = PanelGeometry {
        mr: VNNI_MR,
        nr: VNNI_NR,
        kgroup: VNNI_KGROUP,
    };

    /// The geometry of `isa`'s kernels: the one its plug installs in the kernel table
    /// ([`crate::dispatch::Kernels::geometry`]), known without the CPU supporting `isa` (so
    /// that weights can be packed for any ISA).
    pub fn of(isa: Isa) -> PanelGeometry {
        match isa {
            Isa::Scalar | Isa::Avx2 => Self::PAIRS,
            Isa::Avx512Vnni => Self::QUADS,
        }
    }
}

/// 64 bytes aligned to 64, so that every 512-bit load of a weight panel is one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

/// A register tile's raw sums, row-major with the geometry's `nr` as row stride.
#[repr(C, align(64))]
pub(crate) struct Tile(pub(crate) [i32; TILE]);

/// Memory order of the unpacked weights handed to [`PackedWeights`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// Row-major `[K, N]`: element `(k, n)` at `k·N + n` (ONNX MatMul B).
    KxN,
    /// Row-major `[N, K]`: element `(k, n)` at `n·K + k` (conv weights, Gemm with transB).
    NxK,
}

/// Weights packed once for the GEMM kernels, with column sums precomputed.
#[derive(Debug, Clone)]
pub struct PackedWeights {
    k: usize,
    n: usize,
    geom: PanelGeometry,
    kgroups: usize,
    n_panels: usize,
    data: Vec<Line>,
    /// `Σ_k w[k][j]` of the stored (i8) values, padded to `n_panels·NR`.
    col_sums: Vec<i32>,
    /// Weight zero point per column in the stored domain, padded.
    zero_points: Vec<i32>,
    zw_all_zero: bool,
}

impl PackedWeights {
    /// Packs i8 weights `w` of shape `[K, N]` or `[N, K]` (see [`WeightLayout`]) with zero
    /// point(s) `zero_points` (1 entry, or N for per-column).
    pub fn from_i8(
        w: &[i8],
        k: usize,
        n: usize,
        layout: WeightLayout,
        zero_points: &[i32],
    ) -> Result<Self> {
        Self::from_i8_for(dispatch::isa(), w, k, n, layout, zero_points)
    }

    /// [`PackedWeights::from_i8`] in the layout of `isa`'s kernels instead of the
    /// dispatched ISA's.
    pub fn from_i8_for(
        isa: Isa,
        w: &[i8],
        k: usize,
        n: usize,
        layout: WeightLayout,
        zero_points: &[i32],
    ) -> Result<Self> {
        let geom = PanelGeometry::of(isa);
        Self::pack(geom, k, n, zero_points, 0, w.len(), |kk, nn| {
            let idx = match layout {
                WeightLayout::KxN => kk * n + nn,
                WeightLayout::NxK => nn * k + kk,
            };
            w[idx]
        })
    }

    /// Packs u8 weights (ONNX MatMulInteger with u8 B); stored as `w − 128`, zero points as
    /// `zw − 128`, which leaves every product `(a−za)(w−zw)` unchanged.
    pub fn from_u8(
        w: &[u8],
        k: usize,
        n: usize,
        layout: WeightLayout,
        zero_points: &[i32],
    ) -> Result<Self> {
        let geom = dispatch::kernels().geometry();
        Self::pack(geom, k, n, zero_points, -128, w.len(), |kk, nn| {
            let idx = match layout {
                WeightLayout::KxN => kk * n + nn,
                WeightLayout::NxK => nn * k + kk,
            };
            (w[idx] ^ 0x80) as i8
        })
    }

    /// Packs weights given by `get(k, n)` (already in the stored i8 domain) for the conv
    /// kernels; zero points in the stored domain.
    pub(crate) fn from_fn(
        k: usize,
        n: usize,
        zero_points: &[i32],
        get: impl Fn(usize, usize) -> i8,
    ) -> Result<Self> {
        let geom = dispatch::kernels().geometry();
        Self::pack(geom, k, n, zero_points, 0, k * n, get)
    }

    /// These weights in the layout of `isa`'s kernels: borrowed when they already are,
    /// otherwise repacked (same stored values, zero points and column sums).
    pub fn for_isa(&self, isa: Isa) -> std::borrow::Cow<'_, PackedWeights> {
        self.for_geometry(PanelGeometry::of(isa))
    }

    /// These weights in geometry `geom`: borrowed when they already are, otherwise
    /// repacked.
    pub(crate) fn for_geometry(&self, geom: PanelGeometry) -> std::borrow::Cow<'_, PackedWeights> {
        if geom == self.geom {
            return std::borrow::Cow::Borrowed(self);
        }
        let repacked = Self::pack(
            geom,
            self.k,
            self.n,
            &self.zero_points[..self.n],
            0,
            self.k * self.n,
            |kk, j| self.stored(kk, j),
        )
        .expect("repacking valid packed weights cannot fail");
        std::borrow::Cow::Owned(repacked)
    }

    /// The stored (i8 domain) weight `(k, j)`.
    fn stored(&self, kk: usize, j: usize) -> i8 {
        let g = self.geom;
        let (p, c) = (j / g.nr, j % g.nr);
        self.panel(p)[(kk / g.kgroup) * g.nr * g.kgroup + c * g.kgroup + kk % g.kgroup]
    }

    /// The panel geometry these weights are packed in.
    pub fn geometry(&self) -> PanelGeometry {
        self.geom
    }

    fn pack(
        geom: PanelGeometry,
        k: usize,
        n: usize,
        zero_points: &[i32],
        zp_shift: i32,
        len: usize,
        get: impl Fn(usize, usize) -> i8,
    ) -> Result<Self> {
        const OP: &str = "PackedWeights";
        if k == 0 || n == 0 {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "k/n",
                reason: format!("empty weight matrix {k}×{n}"),
            });
        }
        if k > MAX_K {
            return Err(KernelError::InvalidArgument {
                op: OP,
                arg: "k",
                reason: format!(
                    "K = {k} exceeds {MAX_K}, beyond which i32 accumulation is not exact"
                ),
            });
        }
        if len != k * n {
            return Err(KernelError::BufferLength {
                op: OP,
                arg: "weights",
                expected: k * n,
                got: len,
            });
        }
        if zero_points.len() != 1 && zero_points.len() != n {
            return Err(KernelError::ChannelCount {
                op: OP,
                arg: "zero_points",
                channels: n,
                got: zero_points.len(),
            });
        }
        let PanelGeometry { nr, kgroup, .. } = geom;
        let kgroups = k.div_ceil(kgroup);
        let n_panels = n.div_ceil(nr);
        let npad = n_panels * nr;
        let panel_len = kgroups * nr * kgroup;
        let mut data = vec![Line([0; 64]); (n_panels * panel_len).div_ceil(64)];
        let bytes = lines_as_bytes_mut(&mut data);
        let mut col_sums = vec![0i32; npad];
        for p in 0..n_panels {
            let panel = &mut bytes[p * panel_len..(p + 1) * panel_len];
            for c in 0..nr.min(n - p * nr) {
                let j = p * nr + c;
                let mut s = 0i32;
                for kk in 0..k {
                    let v = get(kk, j);
                    s += v as i32;
                    panel[(kk / kgroup) * nr * kgroup + c * kgroup + kk % kgroup] = v;
                }
                col_sums[j] = s;
            }
        }
        let mut zps = vec![0i32; npad];
        for (j, z) in zps.iter_mut().enumerate().take(n) {
            let zp = if zero_points.len() == 1 {
                zero_points[0]
            } else {
                zero_points[j]
            };
            *z = zp + zp_shift;
        }
        let zw_all_zero = zps.iter().all(|&z| z == 0);
        Ok(PackedWeights {
            k,
            n,
            geom,
            kgroups,
            n_panels,
            data,
            col_sums,
            zero_points: zps,
            zw_all_zero,
        })
    }

    /// Reduction length K.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Whether every weight zero point is 0, so that the epilogue ignores activation row
    /// sums.
    pub(crate) fn zero_points_all_zero(&self) -> bool {
        self.zw_all_zero
    }

    /// Number of output columns N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held by the packed data.
    pub fn packed_bytes(&self) -> usize {
        self.data.len() * 64
    }

    #[inline(always)]
    fn panel(&self, p: usize) -> &[i8] {
        let len = self.kgroups * self.geom.nr * self.geom.kgroup;
        &lines_as_bytes(&self.data)[p * len..(p + 1) * len]
    }
}

fn lines_as_bytes(lines: &[Line]) -> &[i8] {
    // SAFETY: `Line` is `repr(C)` around `[i8; 64]` with no padding (size 64, align 64), so
    // the slice is `64·len` initialised bytes.
    unsafe { std::slice::from_raw_parts(lines.as_ptr() as *const i8, lines.len() * 64) }
}

fn lines_as_bytes_mut(lines: &mut [Line]) -> &mut [i8] {
    // SAFETY: as in `lines_as_bytes`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut i8, lines.len() * 64) }
}

/// The activation matrix `A[M,K]`, row-major and contiguous, with its zero point.
#[derive(Debug, Clone, Copy)]
pub struct Activations<'a> {
    data: ActData<'a>,
    m: usize,
    k: usize,
    zero_point: i32,
}

#[derive(Clone, Copy)]
enum ActData<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
    /// Rows produced on demand (`f(first, out)` writes rows `first..first + out.len() / k`,
    /// `k` bytes each: u8 values, or the bit patterns of i8 values when `signed`): an
    /// implicit im2col, gathered panel by panel right before packing instead of
    /// materialising `[M, K]`.
    Gather {
        f: &'a (dyn Fn(usize, &mut [u8]) + Sync),
        signed: bool,
        /// Optional direct packer of whole panels in the pairs geometry (scalar, AVX2):
        /// `panel(p, dst, sums)` writes panel `p` (rows `6p..6p+6`, all inside M) and its
        /// row sums exactly as gathering and packing those rows would.
        panel: Option<&'a PanelFn<'a>>,
    },
}

/// A direct packer of one full activation panel: `(panel index, words, row sums)`.
pub(crate) type PanelFn<'a> = dyn Fn(usize, &mut [u32], &mut [i32]) + Sync + 'a;

impl std::fmt::Debug for ActData<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActData::U8(d) => write!(f, "U8({} values)", d.len()),
            ActData::I8(d) => write!(f, "I8({} values)", d.len()),
            ActData::Gather { signed, .. } => write!(f, "Gather {{ signed: {signed} }}"),
        }
    }
}

thread_local! {
    /// Rows of one gathered panel (see [`ActData::Gather`]), reused across calls.
    static GATHERED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<'a> Activations<'a> {
    /// u8 activations `[m, k]` with zero point `zero_point` (normally in `0..=255`).
    pub fn u8(data: &'a [u8], m: usize, k: usize, zero_point: i32) -> Self {
        Activations {
            data: ActData::U8(data),
            m,
            k,
            zero_point,
        }
    }

    /// i8 activations `[m, k]` with zero point `zero_point` (normally in `-128..=127`).
    pub fn i8(data: &'a [i8], m: usize, k: usize, zero_point: i32) -> Self {
        Activations {
            data: ActData::I8(data),
            m,
            k,
            zero_point,
        }
    }

    /// Activations `[m, k]` whose rows `f(first, out)` writes on demand (rows
    /// `first..first + out.len() / k`; u8 values, or the bit patterns of i8 values when
    /// `signed`), with zero point `zero_point` in the value domain. The GEMM gathers each
    /// panel of rows right before packing it, so `[m, k]` is never materialised (the
    /// convolution's implicit im2col). With `panel`, full panels in the pairs geometry are
    /// packed by it directly instead (see [`PanelFn`]).
    pub(crate) fn gather(
        f: &'a (dyn Fn(usize, &mut [u8]) + Sync),
        panel: Option<&'a PanelFn<'a>>,
        signed: bool,
        m: usize,
        k: usize,
        zero_point: i32,
    ) -> Self {
        Activations {
            data: ActData::Gather { f, signed, panel },
            m,
            k,
            zero_point,
        }
    }

    /// Number of rows M.
    pub fn m(&self) -> usize {
        self.m
    }

    fn len(&self) -> usize {
        match self.data {
            ActData::U8(d) => d.len(),
            ActData::I8(d) => d.len(),
            ActData::Gather { .. } => self.m * self.k,
        }
    }

    /// Zero point in the stored (u8) domain.
    fn stored_zero_point(&self) -> i32 {
        match self.data {
            ActData::U8(_) | ActData::Gather { signed: false, .. } => self.zero_point,
            ActData::I8(_) | ActData::Gather { signed: true, .. } => self.zero_point + 128,
        }
    }
}

/// Zero-point (and bias) corrections of a tile, shared by every ISA's epilogue.
pub struct Epilogue<'a> {
    /// Per padded column: `−za·Σw + K·za·zw` (+ bias when an output stage is fused).
    pub colterm: &'a [i32],
    /// Per padded column weight zero points, `None` when all are zero.
    pub zw: Option<&'a [i32]>,
}

impl Epilogue<'_> {
    /// `raw` corrected by (K1) for a row with sum `rowsum`, column `c`.
    #[inline(always)]
    pub(crate) fn corrected(&self, raw: i32, rowsum: i32, c: usize) -> i32 {
        let mut v = raw.wrapping_add(self.colterm[c]);
        if let Some(zw) = self.zw {
            v = v.wrapping_sub(zw[c].wrapping_mul(rowsum));
        }
        v
    }
}

/// A packed copy of A: row panels of `mr` rows, `[g][mr]` 32-bit words holding the `kgroup`
/// stored values `a[kgroup·g + i]` of one row (pairs: zero-extended to 16 bits each, low half
/// first; quads: one byte each, lowest byte first), and the row sums `Σ_k a` of the stored
/// values.
struct PackedA {
    data: Vec<u32>,
    rowsums: Vec<i32>,
}

impl PackedA {
    fn new(a: &Activations<'_>, mmm: &Mmm, parallel: bool) -> Self {
        let geom = mmm.geometry;
        let kgroups = a.k.div_ceil(geom.kgroup);
        let panels = a.m.div_ceil(geom.mr);
        let mut data = vec![0u32; panels * kgroups * geom.mr];
        let mut rowsums = vec![0i32; panels * geom.mr];
        let chunks = data
            .chunks_mut(kgroups * geom.mr)
            .zip(rowsums.chunks_mut(geom.mr))
            .enumerate();
        if parallel {
            chunks
                .par_bridge()
                .for_each(|(p, (dst, sums))| pack_a_panel(a, mmm, p, dst, sums));
        } else {
            chunks.for_each(|(p, (dst, sums))| pack_a_panel(a, mmm, p, dst, sums));
        }
        PackedA { data, rowsums }
    }
}

/// Packs row panel `p` of `a` (rows `p·mr..`, zero rows past the end) into `dst`
/// (`kgroups·mr` words, k-group major) and the rows' sums of stored values into `sums`.
/// The stored row is u8 as is, i8 with the sign bit flipped (a + 128). The packer is the
/// table's (`mmm.pack`, for `mmm`'s geometry; the AVX2 one writes the same words as the
/// scalar one, tested).
pub(crate) fn pack_a_panel(
    a: &Activations<'_>,
    mmm: &Mmm,
    p: usize,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    let geom = mmm.geometry;
    let rows = geom.mr.min(a.m - p * geom.mr);
    let k = a.k;
    let (bytes, flip): (&[u8], u8) = match a.data {
        ActData::U8(d) => (d, 0),
        // SAFETY: i8 and u8 have the same size and alignment; every bit pattern is valid.
        ActData::I8(d) => (
            unsafe { std::slice::from_raw_parts(d.as_ptr() as *const u8, d.len()) },
            0x80,
        ),
        ActData::Gather { f, signed, panel } => {
            if let Some(panel) = panel {
                if rows == geom.mr && geom == PanelGeometry::PAIRS {
                    panel(p, dst, sums);
                    return;
                }
            }
            GATHERED.with_borrow_mut(|buf| {
                buf.resize(rows * k, 0);
                f(p * geom.mr, &mut buf[..rows * k]);
                pack_rows(
                    &buf[..rows * k],
                    rows,
                    k,
                    if signed { 0x80 } else { 0 },
                    mmm,
                    dst,
                    sums,
                )
            });
            return;
        }
    };
    let panel = &bytes[p * geom.mr * k..(p * geom.mr + rows) * k];
    pack_rows(panel, rows, k, flip, mmm, dst, sums);
}

/// Packs `rows ≤ mr` rows of `k` stored bytes (`panel[r·k..]`, XORed with `flip`) into a
/// panel with the table's packer: the body of [`pack_a_panel`].
fn pack_rows(
    panel: &[u8],
    rows: usize,
    k: usize,
    flip: u8,
    mmm: &Mmm,
    dst: &mut [u32],
    sums: &mut [i32],
) {
    let mr = mmm.geometry.mr;
    // A reused buffer holds the previous block's values: clear the padding rows.
    if rows < mr {
        for g in 0..dst.len() / mr {
            dst[g * mr + rows..(g + 1) * mr].fill(0);
        }
        sums[rows..].fill(0);
    }
    (mmm.pack)(panel, rows, k, flip, dst, sums);
}

/// Raw pointer to the output that tasks write disjoint blocks of.
#[derive(Clone, Copy)]
struct OutPtr<T>(*mut T);
// SAFETY: tasks write disjoint (row, column) blocks of the output, and the pointer outlives
// the parallel region (it borrows the caller's `&mut [T]` for the whole call).
unsafe impl<T: Send> Send for OutPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for OutPtr<T> {}

/// What the epilogue writes.
enum Sink<'a, T> {
    I32 {
        out: OutPtr<i32>,
        store: StoreI32Fn,
    },
    Float {
        scales: Vec<f32>,
        stage: &'a OutputStage,
        out: OutPtr<T>,
        store: StoreFloatFn<T>,
    },
    Generic {
        stage: &'a OutputStage,
        out: OutPtr<T>,
    },
}

impl<'a, T: QuantType> Sink<'a, T> {
    /// The sink that writes raw i32 sums through `out` with `stores`.
    fn i32(out: *mut i32, stores: &Stores) -> Self {
        Sink::I32 {
            out: OutPtr(out),
            store: stores.i32,
        }
    }

    /// The sink that applies `stage` to `n` output columns (padded to `npad`) and writes
    /// quantized values through `out`: float requantization with its scales expanded per
    /// padded column (with `stores`), or the generic per-value stage.
    fn quantized(
        stage: &'a OutputStage,
        n: usize,
        npad: usize,
        out: *mut T,
        stores: &Stores,
    ) -> Self {
        match &stage.requant {
            Requant::Float(s) => Sink::Float {
                scales: (0..npad)
                    .map(|j| if s.len() == 1 { s[0] } else { s[j.min(n - 1)] })
                    .collect(),
                stage,
                out: OutPtr(out),
                store: stores.float::<T>(),
            },
            Requant::FixedPoint { .. } => Sink::Generic {
                stage,
                out: OutPtr(out),
            },
        }
    }
}

/// Where a tile goes: rows `r0..r0+rows` and columns `c0..c0+cols` of the output (row
/// stride `ldc`), with the row sums of its activation rows.
struct TilePos<'a> {
    rowsums: &'a [i32],
    r0: usize,
    rows: usize,
    c0: usize,
    cols: usize,
    ldc: usize,
}

/// Writes a tile of `nr` columns through `sink` (the table's stores, or the scalar
/// fixed-point stage).
// Tile rows and output columns are indexed together; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
fn write_tile<T: QuantType>(
    nr: usize,
    ep: &Epilogue<'_>,
    sink: &Sink<'_, T>,
    tile: &Tile,
    pos: &TilePos<'_>,
) {
    let TilePos {
        rowsums,
        r0,
        rows,
        c0,
        cols,
        ldc,
    } = *pos;
    let tile = &tile.0;
    match sink {
        // SAFETY (both store arms): the table holds only entries whose ISA its plug
        // checked; the block (r0.., c0..) of `rows × cols` lies inside the output and
        // belongs to this task only (the callers' contract), `c0` is a multiple of `nr`.
        Sink::I32 { out, store } => unsafe {
            store(ep, tile, rowsums, rows, c0, cols, out.0.add(r0 * ldc), ldc)
        },
        Sink::Float {
            scales,
            stage,
            out,
            store,
        } => {
            let (lo, hi) = stage.range::<T>();
            let z = stage.zero_point;
            // SAFETY: as above.
            unsafe {
                store(
                    ep,
                    scales,
                    (z, lo, hi),
                    tile,
                    rowsums,
                    rows,
                    c0,
                    cols,
                    out.0.add(r0 * ldc),
                    ldc,
                )
            }
        }
        Sink::Generic { stage, out } => {
            let (lo, hi) = stage.range::<T>();
            for r in 0..rows {
                for c in 0..cols {
                    let v = ep.corrected(tile[r * nr + c], rowsums[r], c0 + c);
                    let y = stage.requant_one(v, c0 + c, lo, hi);
                    // SAFETY: as above.
                    unsafe { *out.0.add((r0 + r) * ldc + c0 + c) = T::from_clamped(y) };
                }
            }
        }
    }
}

/// The GEMM's output stage for callers that compute exact sums `Σ (a − za)(w − zw)`
/// themselves (the Winograd conv): adds the bias, requantizes and stores raw tiles with
/// the same epilogue code as the GEMM (no zero-point corrections).
pub(crate) struct TileWriter<'a, T> {
    colterm: Vec<i32>,
    sink: Sink<'a, T>,
}

impl<'a, T: QuantType> TileWriter<'a, T> {
    /// A writer of `n` output columns into `out_i32` (raw sums; `stage` is `None`) or
    /// `out_q` (through `stage`, already validated for `n` channels), with the stores of
    /// 16-column tiles of `k`.
    pub(crate) fn new(
        k: &Kernels,
        n: usize,
        stage: Option<&'a OutputStage>,
        out_i32: Option<&'a mut [i32]>,
        out_q: Option<&'a mut [T]>,
    ) -> Self {
        let npad = n.div_ceil(NR) * NR;
        let mut colterm = vec![0i32; npad];
        if let Some(b) = stage.and_then(|s| s.bias.as_deref()) {
            colterm[..n].copy_from_slice(b);
        }
        let stores = k.store16();
        let sink = match (stage, out_i32, out_q) {
            (None, Some(o), _) => Sink::i32(o.as_mut_ptr(), stores),
            (Some(stage), _, Some(o)) => Sink::quantized(stage, n, npad, o.as_mut_ptr(), stores),
            _ => unreachable!("TileWriter needs an i32 output, or a stage and a quantized output"),
        };
        TileWriter { colterm, sink }
    }

    /// Writes rows `0..rows` and columns `0..cols` of `tile` (row stride [`NR`]) to output
    /// rows `r0..r0+rows` (row stride `ldc`), columns `c0..c0+cols`; `c0` is a multiple of
    /// [`NR`].
    ///
    /// # Safety
    /// The block must lie inside the output, and no other thread may write it concurrently.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn write(
        &self,
        tile: &Tile,
        rows: usize,
        r0: usize,
        c0: usize,
        cols: usize,
        ldc: usize,
    ) {
        // Up to TILE / NR rows (the whole tile buffer).
        const ZEROS: [i32; TILE / NR] = [0; TILE / NR];
        debug_assert!(rows <= TILE / NR);
        let ep = Epilogue {
            colterm: &self.colterm,
            zw: None,
        };
        let pos = TilePos {
            rowsums: &ZEROS,
            r0,
            rows,
            c0,
            cols,
            ldc,
        };
        write_tile(NR, &ep, &self.sink, tile, &pos);
    }
}

fn check_shapes(
    op: &'static str,
    a: &Activations<'_>,
    w: &PackedWeights,
    out_len: usize,
) -> Result<()> {
    if a.k != w.k {
        return Err(KernelError::InvalidArgument {
            op,
            arg: "a",
            reason: format!("activations have K = {}, weights K = {}", a.k, w.k),
        });
    }
    if a.len() != a.m * a.k {
        return Err(KernelError::BufferLength {
            op,
            arg: "a",
            expected: a.m * a.k,
            got: a.len(),
        });
    }
    if out_len != a.m * w.n {
        return Err(KernelError::BufferLength {
            op,
            arg: "out",
            expected: a.m * w.n,
            got: out_len,
        });
    }
    Ok(())
}

/// The blocking of one call: tasks of `mc` row panels × `nc` column panels.
fn blocking(
    geom: PanelGeometry,
    m_panels: usize,
    n_panels: usize,
    kgroups: usize,
    threads: usize,
) -> (usize, usize) {
    // The A block of a task (mc panels, ~128 KiB) and its B block (nc panels, ~256 KiB)
    // stay in L2; one B panel (kgroups·nr·kgroup bytes, 32 KiB at K = 2048 for AVX2 and
    // K = 1024 for VNNI) stays in L1 across the row panels.
    let mut mc = (128 * 1024 / (kgroups * geom.mr * 4)).clamp(1, m_panels);
    let mut nc = (256 * 1024 / (kgroups * geom.nr * geom.kgroup)).clamp(1, n_panels);
    if threads > 1 {
        let want = 4 * threads;
        while m_panels.div_ceil(mc) * n_panels.div_ceil(nc) < want && (nc > 1 || mc > 1) {
            if nc > 1 {
                nc = nc.div_ceil(2);
            } else {
                mc = mc.div_ceil(2);
            }
        }
    }
    (mc, nc)
}

fn run<T: QuantType>(
    mmm: &Mmm,
    a: &Activations<'_>,
    w: &PackedWeights,
    colterm: &[i32],
    sink: Sink<'_, T>,
    ldc: usize,
) {
    if a.m == 0 {
        return;
    }
    let geom = w.geom;
    debug_assert_eq!(geom, mmm.geometry, "weights not repacked for the kernel");
    let threads = rayon::current_num_threads();
    let work = a.m * w.n * w.k;
    let parallel = threads > 1 && work >= 1 << 18;
    let m_panels = a.m.div_ceil(geom.mr);
    let (mc, nc) = blocking(
        geom,
        m_panels,
        w.n_panels,
        w.kgroups,
        if parallel { threads } else { 1 },
    );
    let ep = Epilogue {
        colterm,
        zw: if w.zw_all_zero {
            None
        } else {
            Some(&w.zero_points)
        },
    };
    let tasks_m = m_panels.div_ceil(mc);
    let tasks_n = w.n_panels.div_ceil(nc);
    // When one task covers every column panel (convolutions: M = pixels is large, N =
    // channels small), each A block is used by exactly one task: pack it inside the task
    // into a per-worker buffer, where it stays in L2 for the GEMM, instead of packing the
    // whole of A up front (for AVX2 pairs that is twice A's size, written to memory and
    // read back). Otherwise several tasks share an A block: pack it once, up front.
    let lazy = tasks_n == 1;
    let pa = (!lazy).then(|| PackedA::new(a, mmm, parallel && a.m * a.k >= 1 << 16));
    let panel_len = w.kgroups * geom.mr;
    let new_buf = || {
        if lazy {
            (vec![0u32; mc * panel_len], vec![0i32; mc * geom.mr])
        } else {
            (Vec::new(), Vec::new())
        }
    };
    let task = |buf: &mut (Vec<u32>, Vec<i32>), t: usize| {
        let (tm, tn) = (t % tasks_m, t / tasks_m);
        let q0 = tm * mc;
        let q1 = ((tm + 1) * mc).min(m_panels);
        let (data, sums, base): (&[u32], &[i32], usize) = match &pa {
            Some(pa) => (&pa.data, &pa.rowsums, 0),
            None => {
                let (data, sums) = buf;
                for q in q0..q1 {
                    let i = q - q0;
                    pack_a_panel(
                        a,
                        mmm,
                        q,
                        &mut data[i * panel_len..(i + 1) * panel_len],
                        &mut sums[i * geom.mr..(i + 1) * geom.mr],
                    );
                }
                (data, sums, q0)
            }
        };
        let mut tile = Tile([0; TILE]);
        for p in tn * nc..((tn + 1) * nc).min(w.n_panels) {
            let b = w.panel(p);
            let c0 = p * geom.nr;
            let cols = geom.nr.min(w.n - c0);
            for q in q0..q1 {
                let i = q - base;
                let r0 = q * geom.mr;
                let rows = geom.mr.min(a.m - r0);
                let apanel = &data[i * panel_len..(i + 1) * panel_len];
                (mmm.tile)(rows, w.kgroups, apanel, b, &mut tile);
                let pos = TilePos {
                    rowsums: &sums[i * geom.mr..(i + 1) * geom.mr],
                    r0,
                    rows,
                    c0,
                    cols,
                    ldc,
                };
                write_tile(geom.nr, &ep, &sink, &tile, &pos);
            }
        }
    };
    let ntasks = tasks_m * tasks_n;
    if parallel && ntasks > 1 {
        (0..ntasks).into_par_iter().for_each_init(new_buf, task);
    } else {
        let mut buf = new_buf();
        (0..ntasks).for_each(|t| task(&mut buf, t));
    }
}

/// Column terms of (K1): `−za·Σw[j] + K·za·zw[j]` (+ `bias[j]`), padded.
fn column_terms(a: &Activations<'_>, w: &PackedWeights, bias: Option<&[i32]>) -> Vec<i32> {
    column_terms_za(a.stored_zero_point(), w, bias)
}

/// [`column_terms`] for activations with stored zero point `za`.
fn column_terms_za(za: i32, w: &PackedWeights, bias: Option<&[i32]>) -> Vec<i32> {
    let k = w.k as i32;
    (0..w.n_panels * w.geom.nr)
        .map(|j| {
            let mut t = za
                .wrapping_mul(w.col_sums[j])
                .wrapping_neg()
                .wrapping_add(k.wrapping_mul(za).wrapping_mul(w.zero_points[j]));
            if let (Some(b), true) = (bias, j < w.n) {
                t = t.wrapping_add(b[j]);
            }
            t
        })
        .collect()
}

/// `out[M,N] = Σ_k (a − za)(w − zw)` as i32 (ONNX MatMulInteger), on the process's
/// dispatched ISA ([`dispatch::isa`]).
pub fn gemm_i32(a: &Activations<'_>, w: &PackedWeights, out: &mut [i32]) -> Result<()> {
    gemm_i32_with(dispatch::isa(), a, w, out)
}

/// [`gemm_i32`] on an explicitly chosen ISA (tests and benchmarks).
pub fn gemm_i32_with(
    isa: Isa,
    a: &Activations<'_>,
    w: &PackedWeights,
    out: &mut [i32],
) -> Result<()> {
    let mmm = table_for(isa)?.mmm();
    check_shapes("gemm_i32", a, w, out.len())?;
    let w = &*w.for_geometry(mmm.geometry);
    let colterm = column_terms(a, w, None);
    run::<u8>(
        mmm,
        a,
        w,
        &colterm,
        Sink::i32(out.as_mut_ptr(), &mmm.store),
        w.n,
    );
    Ok(())
}

/// `out[M,N] = stage(Σ_k (a − za)(w − zw))` with the fused output stage (bias,
/// requantization, output zero point, activation clamp) written as u8 or i8, on the
/// dispatched ISA. For M = 1 this is the GEMV path.
pub fn gemm_quant<T: QuantType>(
    a: &Activations<'_>,
    w: &PackedWeights,
    stage: &OutputStage,
    out: &mut [T],
) -> Result<()> {
    gemm_quant_with(dispatch::isa(), a, w, stage, out)
}

/// [`gemm_quant`] on an explicitly chosen ISA.
pub fn gemm_quant_with<T: QuantType>(
    isa: Isa,
    a: &Activations<'_>,
    w: &PackedWeights,
    stage: &OutputStage,
    out: &mut [T],
) -> Result<()> {
    let mmm = table_for(isa)?.mmm();
    check_shapes("gemm_quant", a, w, out.len())?;
    let w = &*w.for_geometry(mmm.geometry);
    stage.validate("gemm_quant", w.n)?;
    let colterm = column_terms(a, w, stage.bias.as_deref());
    let npad = w.n_panels * w.geom.nr;
    let sink = Sink::quantized(stage, w.n, npad, out.as_mut_ptr(), &mmm.store);
    run::<T>(mmm, a, w, &colterm, sink, w.n);
    Ok(())
}

/// Strided variants for conv: write the `M × w.n` result into `out` with row stride `ldc`
/// (`out` must hold `(M−1)·ldc + w.n` elements; checked).
pub(crate) fn gemm_strided<T: QuantType>(
    isa: Isa,
    a: &Activations<'_>,
    w: &PackedWeights,
    stage: Option<&OutputStage>,
    out_i32: Option<&mut [i32]>,
    out_q: Option<&mut [T]>,
    ldc: usize,
) -> Result<()> {
    let mmm = table_for(isa)?.mmm();
    check_shapes("conv", a, w, a.m * w.n)?;
    let w = &*w.for_geometry(mmm.geometry);
    let need = if a.m == 0 { 0 } else { (a.m - 1) * ldc + w.n };
    match (stage, out_i32, out_q) {
        (None, Some(out), _) => {
            assert!(
                out.len() >= need && ldc >= w.n,
                "conv output buffer too small"
            );
            let colterm = column_terms(a, w, None);
            let sink = Sink::i32(out.as_mut_ptr(), &mmm.store);
            run::<u8>(mmm, a, w, &colterm, sink, ldc);
        }
        (Some(stage), _, Some(out)) => {
            assert!(
                out.len() >= need && ldc >= w.n,
                "conv output buffer too small"
            );
            stage.validate("conv", w.n)?;
            let colterm = column_terms(a, w, stage.bias.as_deref());
            let npad = w.n_panels * w.geom.nr;
            let sink = Sink::quantized(stage, w.n, npad, out.as_mut_ptr(), &mmm.store);
            run::<T>(mmm, a, w, &colterm, sink, ldc);
        }
        _ => unreachable!("conv passes either an i32 output or a stage with a quantized output"),
    }
    Ok(())
}

/// Exact sums of activation panels packed by the caller, one register tile at a time: the
/// building block of convolutions that reduce tiles themselves (a fused max pool).
pub(crate) struct PanelSums<'a> {
    /// The table's micro-kernel (pairs geometry).
    tile: TileFn,
    /// The table's indirect i16 micro-kernel.
    indirect: I16IndirectFn,
    w: std::borrow::Cow<'a, PackedWeights>,
    colterm: Vec<i32>,
    /// The weight panels widened to i16 (same `[g][16][2]` order) for the indirect
    /// micro-kernel, when every weight zero point is 0 (no row sums needed).
    b16: Option<Vec<i16>>,
}

impl<'a> PanelSums<'a> {
    /// For weights `w` and activations whose stored (u8-domain) zero point is `za`, with
    /// the kernels of `k`; `None` unless its GEMM uses the pairs geometry.
    pub(crate) fn new(k: &Kernels, w: &'a PackedWeights, za: i32) -> Option<Self> {
        if k.geometry() != PanelGeometry::PAIRS {
            return None;
        }
        let mmm = k.mmm();
        let w = w.for_geometry(mmm.geometry);
        let colterm = column_terms_za(za, &w, None);
        let b16 = w.zw_all_zero.then(|| {
            (0..w.n_panels)
                .flat_map(|p| w.panel(p).iter().map(|&v| v as i16))
                .collect()
        });
        Some(PanelSums {
            tile: mmm.tile,
            indirect: k.i16().indirect,
            w,
            colterm,
            b16,
        })
    }

    /// Whether [`Self::tile_indirect`] is available (every weight zero point is 0).
    pub(crate) fn has_indirect(&self) -> bool {
        self.b16.is_some()
    }

    /// [`Self::tile`] of 6 full rows whose k-group `g` words are `a[offsets[g]..+6]`
    /// (no packing: the i16 indirect micro-kernel reads them in place); only when
    /// [`Self::has_indirect`].
    #[inline(always)]
    pub(crate) fn tile_indirect(&self, a: &[u32], offsets: &[usize], p: usize, tile: &mut Tile) {
        let w = &*self.w;
        let b16 = self
            .b16
            .as_deref()
            .expect("indirect tiles need zero weight zero points");
        assert!(offsets.len() == w.kgroups && p < w.n_panels);
        let b = &b16[p * w.kgroups * NR * 2..(p + 1) * w.kgroups * NR * 2];
        (self.indirect)(a, offsets, b, &mut tile.0);
        let ct: [i32; NR] = self.colterm[p * NR..][..NR].try_into().expect("16 columns");
        for row in tile.0[..MR * NR].chunks_exact_mut(NR) {
            let row: &mut [i32; NR] = row.try_into().expect("16 columns");
            for c in 0..NR {
                row[c] = row[c].wrapping_add(ct[c]);
            }
        }
    }

    /// Column panels of the weights.
    pub(crate) fn n_panels(&self) -> usize {
        self.w.n_panels
    }

    /// `tile[r·16 + c] = Σ_k (a − za)(w − zw)` for rows `r < rows` of `panel` (pairs
    /// layout, `kgroups·6` words, stored row sums `rowsums`) and columns `16p + c`.
    #[inline(always)]
    pub(crate) fn tile(
        &self,
        panel: &[u32],
        rowsums: &[i32; MR],
        rows: usize,
        p: usize,
        tile: &mut Tile,
    ) {
        let w = &*self.w;
        assert!(panel.len() >= w.kgroups * MR && p < w.n_panels && rows <= MR);
        (self.tile)(rows, w.kgroups, panel, w.panel(p), tile);
        let ct: [i32; NR] = self.colterm[p * NR..][..NR].try_into().expect("16 columns");
        let zw: [i32; NR] = w.zero_points[p * NR..][..NR]
            .try_into()
            .expect("16 columns");
        let rows_of: &mut [i32; MR * NR] = (&mut tile.0[..MR * NR]).try_into().expect("6 rows");
        for r in 0..rows {
            let rs = rowsums[r];
            let row: &mut [i32; NR] = (&mut rows_of[r * NR..(r + 1) * NR])
                .try_into()
                .expect("16 columns");
            if w.zw_all_zero {
                for c in 0..NR {
                    row[c] = row[c].wrapping_add(ct[c]);
                }
            } else {
                for c in 0..NR {
                    row[c] = row[c]
                        .wrapping_add(ct[c])
                        .wrapping_sub(zw[c].wrapping_mul(rs));
                }
            }
        }
    }
}

/// Reused buffers of [`gemm_sums_serial`]: one packed A panel and its row sums.
#[derive(Default)]
pub(crate) struct SerialBuf {
    panel: Vec<u32>,
    sums: Vec<i32>,
}

/// The exact sums `out[r·ldc + j] = Σ_k (a − za)(w − zw)` (wrapping i32, no bias) of every
/// row of `a` and column `j < w.n`, on the calling thread (callers parallelise over blocks
/// of rows themselves), with the same packing, micro-kernels and corrections as
/// [`gemm_i32`], on `mmm` (read once by the caller for all its blocks).
pub(crate) fn gemm_sums_serial(
    mmm: &Mmm,
    a: &Activations<'_>,
    w: &PackedWeights,
    out: &mut [i32],
    ldc: usize,
    buf: &mut SerialBuf,
) {
    if a.m == 0 {
        return;
    }
    let w = &*w.for_geometry(mmm.geometry);
    assert!(
        a.k == w.k && ldc >= w.n && out.len() >= (a.m - 1) * ldc + w.n,
        "gemm_sums_serial: shapes"
    );
    let geom = w.geom;
    let colterm = column_terms(a, w, None);
    let ep = Epilogue {
        colterm: &colterm,
        zw: if w.zw_all_zero {
            None
        } else {
            Some(&w.zero_points)
        },
    };
    let sink: Sink<'_, u8> = Sink::i32(out.as_mut_ptr(), &mmm.store);
    let panel_len = w.kgroups * geom.mr;
    buf.panel.resize(panel_len, 0);
    buf.sums.resize(geom.mr, 0);
    let mut tile = Tile([0; TILE]);
    for q in 0..a.m.div_ceil(geom.mr) {
        pack_a_panel(a, mmm, q, &mut buf.panel, &mut buf.sums);
        let r0 = q * geom.mr;
        let rows = geom.mr.min(a.m - r0);
        for p in 0..w.n_panels {
            let c0 = p * geom.nr;
            (mmm.tile)(rows, w.kgroups, &buf.panel, w.panel(p), &mut tile);
            let pos = TilePos {
                rowsums: &buf.sums,
                r0,
                rows,
                c0,
                cols: geom.nr.min(w.n - c0),
                ldc,
            };
            // The block lies inside `out` (asserted above), written by this thread only.
            write_tile(geom.nr, &ep, &sink, &tile, &pos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 activation packer writes exactly the scalar packer's words and row sums:
    /// every k from 1 to 80 plus conv-sized ones, every panel height, u8 and i8, into buffers
    /// that start out holding garbage (as a reused per-worker buffer does).
    #[test]
    fn avx2_pack_equals_scalar_pack() {
        if !Isa::Avx2.is_supported() {
            eprintln!("skipped: the CPU has no AVX2");
            return;
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut byte = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        };
        let scalar = &table_for(Isa::Scalar).unwrap().mmm;
        let avx2 = &table_for(Isa::Avx2).unwrap().mmm;
        assert_eq!(avx2.geometry, PanelGeometry::PAIRS);
        let ks: Vec<usize> = (1..=80).chain([127, 128, 129, 288, 1152, 4099]).collect();
        for &k in &ks {
            for m in [1, 5, 6, 7, 12, 17] {
                let u: Vec<u8> = (0..m * k).map(|_| byte()).collect();
                let i: Vec<i8> = u.iter().map(|&v| v as i8).collect();
                for a in [Activations::u8(&u, m, k, 3), Activations::i8(&i, m, k, -5)] {
                    let kgroups = k.div_ceil(2);
                    for p in 0..m.div_ceil(MR) {
                        let garbage: Vec<u32> = (0..kgroups * MR)
                            .map(|g| (g as u32).wrapping_mul(2_654_435_761))
                            .collect();
                        let (mut d0, mut d1) = (garbage.clone(), garbage);
                        let (mut s0, mut s1) = ([-7i32; MR], [-7i32; MR]);
                        pack_a_panel(&a, scalar, p, &mut d0, &mut s0);
                        pack_a_panel(&a, avx2, p, &mut d1, &mut s1);
                        assert_eq!(d0, d1, "words: k {k}, m {m}, panel {p}");
                        assert_eq!(s0, s1, "row sums: k {k}, m {m}, panel {p}");
                    }
                }
            }
        }
    }
}
