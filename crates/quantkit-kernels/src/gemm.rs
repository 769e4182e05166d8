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
//! and stored in panels of [`NR`] = 16 output columns. Within a panel, for each group `g` of
//! [`KGROUP`] = 2 consecutive k, 32 bytes: `w[2g][c], w[2g+1][c]` for `c = 0..16`. K is
//! padded to even and N to a multiple of 16 with zeros (which contribute nothing).
//!
//! # Threads
//! Work is split over blocks of rows and column panels with rayon (the caller's pool; use
//! `ThreadPool::install` to bound it). Each output element is computed by one task with the
//! same instruction sequence whatever the split, so results are bit-identical for any
//! thread count.

use rayon::prelude::*;

use crate::dispatch::{self, Isa};
use crate::error::{KernelError, Result};
use crate::output::{OutputStage, QuantType, Requant};

/// Rows of the register tile.
pub const MR: usize = 6;
/// Columns of the register tile and of a packed weight panel.
pub const NR: usize = 16;
/// Consecutive k-values packed together (one i32 lane of `vpmaddwd`).
pub const KGROUP: usize = 2;
/// Largest supported reduction length (see "Exactness").
pub const MAX_K: usize = 33_025;

// One k-group of a packed weight panel is exactly two 128-bit loads.
const _: () = assert!(NR * KGROUP == 32);

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
    kgroups: usize,
    n_panels: usize,
    data: Vec<i8>,
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
        Self::pack(k, n, zero_points, 0, w.len(), |kk, nn| {
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
        Self::pack(k, n, zero_points, -128, w.len(), |kk, nn| {
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
        Self::pack(k, n, zero_points, 0, k * n, get)
    }

    fn pack(
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
        let kgroups = k.div_ceil(KGROUP);
        let n_panels = n.div_ceil(NR);
        let npad = n_panels * NR;
        let mut data = vec![0i8; n_panels * kgroups * NR * KGROUP];
        let mut col_sums = vec![0i32; npad];
        for p in 0..n_panels {
            let panel = &mut data[p * kgroups * NR * KGROUP..(p + 1) * kgroups * NR * KGROUP];
            for c in 0..NR.min(n - p * NR) {
                let j = p * NR + c;
                let mut s = 0i32;
                for kk in 0..k {
                    let v = get(kk, j);
                    s += v as i32;
                    panel[(kk / KGROUP) * NR * KGROUP + c * KGROUP + kk % KGROUP] = v;
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

    /// Number of output columns N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held by the packed data.
    pub fn packed_bytes(&self) -> usize {
        self.data.len()
    }

    fn panel(&self, p: usize) -> &[i8] {
        let len = self.kgroups * NR * KGROUP;
        &self.data[p * len..(p + 1) * len]
    }
}

/// The activation matrix `A[M,K]`, row-major and contiguous, with its zero point.
#[derive(Debug, Clone, Copy)]
pub struct Activations<'a> {
    data: ActData<'a>,
    m: usize,
    k: usize,
    zero_point: i32,
}

#[derive(Debug, Clone, Copy)]
enum ActData<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
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

    /// Number of rows M.
    pub fn m(&self) -> usize {
        self.m
    }

    fn len(&self) -> usize {
        match self.data {
            ActData::U8(d) => d.len(),
            ActData::I8(d) => d.len(),
        }
    }

    /// Zero point in the stored (u8) domain.
    fn stored_zero_point(&self) -> i32 {
        match self.data {
            ActData::U8(_) => self.zero_point,
            ActData::I8(_) => self.zero_point + 128,
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
    #[inline(always)]
    fn corrected(&self, raw: i32, rowsum: i32, c: usize) -> i32 {
        let mut v = raw.wrapping_add(self.colterm[c]);
        if let Some(zw) = self.zw {
            v = v.wrapping_sub(zw[c].wrapping_mul(rowsum));
        }
        v
    }
}

/// A packed copy of A: row panels of [`MR`] rows, `[g][MR]` words of two zero-extended u8
/// (low half = even k), and the row sums `Σ_k a` of the stored values.
struct PackedA {
    kgroups: usize,
    data: Vec<u32>,
    rowsums: Vec<i32>,
}

impl PackedA {
    fn new(a: &Activations<'_>, kgroups: usize, parallel: bool) -> Self {
        let panels = a.m.div_ceil(MR);
        let mut data = vec![0u32; panels * kgroups * MR];
        let mut rowsums = vec![0i32; panels * MR];
        let k = a.k;
        // Stored value of a row: u8 as is, i8 with the sign bit flipped (a + 128).
        fn pack_row(row: impl Iterator<Item = u32>, dst: &mut [u32], r: usize) -> i32 {
            let mut s = 0i32;
            let mut g = 0;
            let mut pending: Option<u32> = None;
            for v in row {
                s += v as i32;
                match pending.take() {
                    None => pending = Some(v),
                    Some(lo) => {
                        dst[g * MR + r] = lo | (v << 16);
                        g += 1;
                    }
                }
            }
            if let Some(lo) = pending {
                dst[g * MR + r] = lo;
            }
            s
        }
        let pack_panel = |(p, (dst, sums)): (usize, (&mut [u32], &mut [i32]))| {
            for (r, sum) in sums.iter_mut().enumerate().take(MR.min(a.m - p * MR)) {
                let row = p * MR + r;
                *sum = match a.data {
                    ActData::U8(d) => {
                        pack_row(d[row * k..(row + 1) * k].iter().map(|&v| v as u32), dst, r)
                    }
                    ActData::I8(d) => pack_row(
                        d[row * k..(row + 1) * k]
                            .iter()
                            .map(|&v| (v as u8 ^ 0x80) as u32),
                        dst,
                        r,
                    ),
                };
            }
        };
        let chunks = data
            .chunks_mut(kgroups * MR)
            .zip(rowsums.chunks_mut(MR))
            .enumerate();
        if parallel {
            chunks.par_bridge().for_each(pack_panel);
        } else {
            chunks.for_each(pack_panel);
        }
        PackedA {
            kgroups,
            data,
            rowsums,
        }
    }

    fn panel(&self, p: usize) -> &[u32] {
        let len = self.kgroups * MR;
        &self.data[p * len..(p + 1) * len]
    }
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
    I32(OutPtr<i32>),
    Float {
        scales: Vec<f32>,
        stage: &'a OutputStage,
        out: OutPtr<T>,
    },
    Generic {
        stage: &'a OutputStage,
        out: OutPtr<T>,
    },
}

fn compute_tile(
    isa: Isa,
    rows: usize,
    kgroups: usize,
    a: &[u32],
    b: &[i8],
    tile: &mut [[i32; NR]; MR],
) {
    use crate::generic::gemm::generic_gemm_u8i8_i32_6x16 as g;
    match isa {
        Isa::Scalar => match rows {
            1 => g::<1>(kgroups, a, b, tile),
            2 => g::<2>(kgroups, a, b, tile),
            3 => g::<3>(kgroups, a, b, tile),
            4 => g::<4>(kgroups, a, b, tile),
            5 => g::<5>(kgroups, a, b, tile),
            _ => g::<6>(kgroups, a, b, tile),
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            use crate::x86_64::avx2::gemm::avx2_gemm_u8i8_i32_6x16 as k;
            // SAFETY: `Isa::Avx2` is only chosen after `is_x86_feature_detected!("avx2")`
            // (checked again in `check_isa`); the panels have the sizes the kernel reads.
            unsafe {
                match rows {
                    1 => k::<1>(kgroups, a, b, tile),
                    2 => k::<2>(kgroups, a, b, tile),
                    3 => k::<3>(kgroups, a, b, tile),
                    4 => k::<4>(kgroups, a, b, tile),
                    5 => k::<5>(kgroups, a, b, tile),
                    _ => k::<6>(kgroups, a, b, tile),
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 => unreachable!("AVX2 is never reported as supported off x86-64"),
    }
}

// Tile rows and output columns are indexed together; iterators would obscure that.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn write_tile<T: QuantType>(
    isa: Isa,
    ep: &Epilogue<'_>,
    sink: &Sink<'_, T>,
    tile: &[[i32; NR]; MR],
    rowsums: &[i32],
    r0: usize,
    rows: usize,
    c0: usize,
    cols: usize,
    ldc: usize,
) {
    match sink {
        Sink::I32(out) => {
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx2 {
                // SAFETY: AVX2 checked at dispatch; the block (r0.., c0..) of `rows × cols`
                // lies inside the M×N output and belongs to this task only.
                unsafe {
                    crate::x86_64::avx2::gemm::avx2_epilogue_i32(
                        ep,
                        tile,
                        rowsums,
                        rows,
                        c0,
                        cols,
                        out.0.add(r0 * ldc),
                        ldc,
                    )
                };
                return;
            }
            for r in 0..rows {
                for c in 0..cols {
                    let v = ep.corrected(tile[r][c], rowsums[r], c0 + c);
                    // SAFETY: as above, (r0+r, c0+c) is inside this task's output block.
                    unsafe { *out.0.add((r0 + r) * ldc + c0 + c) = v };
                }
            }
        }
        Sink::Float { scales, stage, out } => {
            let (lo, hi) = stage.range::<T>();
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx2 {
                // SAFETY: as for the i32 sink.
                unsafe {
                    crate::x86_64::avx2::gemm::avx2_epilogue_float::<T>(
                        ep,
                        scales,
                        stage.zero_point,
                        lo,
                        hi,
                        tile,
                        rowsums,
                        rows,
                        c0,
                        cols,
                        out.0.add(r0 * ldc),
                        ldc,
                    )
                };
                return;
            }
            for r in 0..rows {
                for c in 0..cols {
                    let v = ep.corrected(tile[r][c], rowsums[r], c0 + c);
                    let y =
                        crate::output::float_requant(v, scales[c0 + c], stage.zero_point, lo, hi);
                    // SAFETY: as above.
                    unsafe { *out.0.add((r0 + r) * ldc + c0 + c) = T::from_clamped(y) };
                }
            }
        }
        Sink::Generic { stage, out } => {
            let (lo, hi) = stage.range::<T>();
            for r in 0..rows {
                for c in 0..cols {
                    let v = ep.corrected(tile[r][c], rowsums[r], c0 + c);
                    let y = stage.requant_one(v, c0 + c, lo, hi);
                    // SAFETY: as above.
                    unsafe { *out.0.add((r0 + r) * ldc + c0 + c) = T::from_clamped(y) };
                }
            }
        }
    }
}

fn check_isa(isa: Isa) -> Result<()> {
    if isa.is_supported() {
        Ok(())
    } else {
        Err(KernelError::UnsupportedIsa { isa: isa.name() })
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
fn blocking(m_panels: usize, n_panels: usize, kgroups: usize, threads: usize) -> (usize, usize) {
    // A block of the task (mc panels) ~128 KiB and B block (nc panels) ~256 KiB stay in L2;
    // one B panel (kgroups·32 bytes, 32 KiB at K = 2048) stays in L1 across the row panels.
    let mut mc = (128 * 1024 / (kgroups * MR * 4)).clamp(1, m_panels);
    let mut nc = (256 * 1024 / (kgroups * NR * KGROUP)).clamp(1, n_panels);
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
    isa: Isa,
    a: &Activations<'_>,
    w: &PackedWeights,
    colterm: &[i32],
    sink: Sink<'_, T>,
    ldc: usize,
) {
    if a.m == 0 {
        return;
    }
    let threads = rayon::current_num_threads();
    let work = a.m * w.n * w.k;
    let parallel = threads > 1 && work >= 1 << 18;
    let pa = PackedA::new(a, w.kgroups, parallel && a.m * a.k >= 1 << 16);
    let m_panels = a.m.div_ceil(MR);
    let (mc, nc) = blocking(
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
    let task = |t: usize| {
        let (tm, tn) = (t % tasks_m, t / tasks_m);
        let mut tile = [[0i32; NR]; MR];
        for p in tn * nc..((tn + 1) * nc).min(w.n_panels) {
            let b = w.panel(p);
            let c0 = p * NR;
            let cols = NR.min(w.n - c0);
            for q in tm * mc..((tm + 1) * mc).min(m_panels) {
                let r0 = q * MR;
                let rows = MR.min(a.m - r0);
                compute_tile(isa, rows, w.kgroups, pa.panel(q), b, &mut tile);
                let rowsums = &pa.rowsums[q * MR..q * MR + MR];
                write_tile(isa, &ep, &sink, &tile, rowsums, r0, rows, c0, cols, ldc);
            }
        }
    };
    let ntasks = tasks_m * tasks_n;
    if parallel && ntasks > 1 {
        (0..ntasks).into_par_iter().for_each(task);
    } else {
        (0..ntasks).for_each(task);
    }
}

/// Column terms of (K1): `−za·Σw[j] + K·za·zw[j]` (+ `bias[j]`), padded.
fn column_terms(a: &Activations<'_>, w: &PackedWeights, bias: Option<&[i32]>) -> Vec<i32> {
    let za = a.stored_zero_point();
    let k = w.k as i32;
    (0..w.n_panels * NR)
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
    check_isa(isa)?;
    check_shapes("gemm_i32", a, w, out.len())?;
    let colterm = column_terms(a, w, None);
    run::<u8>(
        isa,
        a,
        w,
        &colterm,
        Sink::I32(OutPtr(out.as_mut_ptr())),
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
    check_isa(isa)?;
    check_shapes("gemm_quant", a, w, out.len())?;
    stage.validate("gemm_quant", w.n)?;
    let colterm = column_terms(a, w, stage.bias.as_deref());
    let sink = match &stage.requant {
        Requant::Float(s) => {
            let npad = w.n_panels * NR;
            let scales = (0..npad)
                .map(|j| {
                    if s.len() == 1 {
                        s[0]
                    } else {
                        s[j.min(w.n - 1)]
                    }
                })
                .collect();
            Sink::Float {
                scales,
                stage,
                out: OutPtr(out.as_mut_ptr()),
            }
        }
        Requant::FixedPoint { .. } => Sink::Generic {
            stage,
            out: OutPtr(out.as_mut_ptr()),
        },
    };
    run::<T>(isa, a, w, &colterm, sink, w.n);
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
    check_isa(isa)?;
    check_shapes("conv", a, w, a.m * w.n)?;
    let need = if a.m == 0 { 0 } else { (a.m - 1) * ldc + w.n };
    match (stage, out_i32, out_q) {
        (None, Some(out), _) => {
            assert!(
                out.len() >= need && ldc >= w.n,
                "conv output buffer too small"
            );
            let colterm = column_terms(a, w, None);
            run::<u8>(
                isa,
                a,
                w,
                &colterm,
                Sink::I32(OutPtr(out.as_mut_ptr())),
                ldc,
            );
        }
        (Some(stage), _, Some(out)) => {
            assert!(
                out.len() >= need && ldc >= w.n,
                "conv output buffer too small"
            );
            stage.validate("conv", w.n)?;
            let colterm = column_terms(a, w, stage.bias.as_deref());
            let sink = match &stage.requant {
                Requant::Float(s) => Sink::Float {
                    scales: (0..w.n_panels * NR)
                        .map(|j| {
                            if s.len() == 1 {
                                s[0]
                            } else {
                                s[j.min(w.n - 1)]
                            }
                        })
                        .collect(),
                    stage,
                    out: OutPtr(out.as_mut_ptr()),
                },
                Requant::FixedPoint { .. } => Sink::Generic {
                    stage,
                    out: OutPtr(out.as_mut_ptr()),
                },
            };
            run::<T>(isa, a, w, &colterm, sink, ldc);
        }
        _ => unreachable!("conv passes either an i32 output or a stage with a quantized output"),
    }
    Ok(())
}
