//! Winograd F(2×2, 3×3) and F(4×4, 3×3) for quantized 3×3 stride-1 convolutions, exact in
//! integers.
//!
//! # The algorithm (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016)
//! A 2×2 block of outputs of a 3×3 cross-correlation of a 4×4 input tile `d` with a kernel
//! `g` is `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`, summed over input channels:
//! ```text
//!      ⎡1  0 −1  0⎤        ⎡ 1    0    0 ⎤
//! Bᵀ = ⎢0  1  1  0⎥    G = ⎢1/2  1/2  1/2⎥    Aᵀ = ⎡1  1  1  0⎤
//!      ⎢0 −1  1  0⎥        ⎢1/2 −1/2  1/2⎥         ⎣0  1 −1 −1⎦
//!      ⎣0  1  0 −1⎦        ⎣ 0    0    1 ⎦
//! ```
//! Four outputs take 16 products instead of 36, so the convolution's multiplies drop by
//! 2.25×, and they become 16 independent GEMMs `M_ξ = V_ξ · U_ξ` (tiles × C_in by
//! C_in × C_out), one per position ξ of the 4×4 transform domain. The transforms are
//! additions only.
//!
//! # Exactness
//! With `d = x − za` (`|d| ≤ 255`; padding is the zero point, so `d = 0` there) and
//! `g = w − zw` (`|g| ≤ max_g ≤ 255`):
//! - `V = Bᵀ d B` sums four `±d` per row and per column: `|V| ≤ 4·255 = 1020`, an i16;
//! - `G' = 2G` is integral with row sums of magnitudes 2, 3, 3, 2, so `U' = G' g G'ᵀ = 4·G g Gᵀ`
//!   is integral with `|U'| ≤ 9·max_g ≤ 2295`, an i16;
//! - the GEMMs multiply i16 pairs with `vpmaddwd` (pair sums `≤ 2·1020·2295`, exact) and add
//!   in wrapping i32, and `Aᵀ M A` (entries ±1) adds in wrapping i32: this is `4·Y` modulo
//!   2^32. Wrapping arithmetic is exact modulo 2^32, so the i32 result *is* `4·Y` whenever
//!   `|4·Y| < 2^31`, and then `Y = (4·Y) >> 2` exactly (an arithmetic shift of a multiple of 4).
//!   `|Y| ≤ 9·C_in·255·max_g`; packing for Winograd declines (the caller falls back to
//!   im2col) unless `4·9·255·max_g·C_in < 2^31`, i.e. `C_in ≤ 1,828` for i8 weights with zero
//!   point 0.
//!
//! So the result is the direct convolution's `Σ (x − za)(w − zw)`, bit for bit, on every ISA.
//!
//! # F(4×4, 3×3)
//! The same construction with 6×6 input tiles and 4×4 outputs (Lavin & Gray's F(4×4, 3×3),
//! points 0, ±1, ±2, ∞): 36 products for 16 outputs, 2.25 per output instead of F(2×2)'s
//! 4 and the direct conv's 9. That matters on AVX-512 VNNI, where `vpdpbusd` multiplies
//! 64 u8×i8 pairs per instruction and `vpdpwssd` only 32 i16 pairs: F(2×2) needs
//! `4/32` instructions per output and channel pair against the direct conv's `9/64`,
//! F(4×4) `2.25/32`. Its `G` has fractions, so the integer form scales and divides back:
//! ```text
//!      ⎡4  0 −5  0  1  0⎤         ⎡ 1  0  0⎤                      ⎡6  4  4  1  1  0⎤
//!      ⎢0 −4 −4  1  1  0⎥         ⎢−1 −1 −1⎥                      ⎢0  4 −4  2 −2  0⎥
//! Bᵀ = ⎢0  4 −4 −1  1  0⎥   G' =  ⎢−1  1 −1⎥ = diag(s)·G    A''ᵀ = ⎢0  4  4  4  4  0⎥
//!      ⎢0 −2 −1  2  1  0⎥         ⎢ 1  2  4⎥   s = (4, 6, 6,       ⎣0  4 −4  8 −8 24⎦
//!      ⎢0  2 −1 −2  1  0⎥         ⎢ 1 −2  4⎥       24, 24, 1)     = Aᵀ·diag(24/s)
//!      ⎣0  4  0 −5  0  1⎦         ⎣ 0  0  1⎦
//! ```
//! - `V = Bᵀ d B`: row sums of `|Bᵀ|` are at most 10, so `|V| ≤ 100·255 = 25,500`, an i16
//!   (and so is every partial sum of the two passes);
//! - `U' = G' g G'ᵀ`: row sums of `|G'|` are at most 7, so `|U'| ≤ 49·max_g ≤ 12,495`;
//!   a pair sum of the GEMM is at most `2·25,500·12,495 < 2^31`, exact in `vpmaddwd` /
//!   `vpdpwssd`, and the GEMMs add in wrapping i32 (`M'`, exact modulo 2^32);
//! - since `M = M' / (s sᵀ)` elementwise, `Y = Aᵀ M A = A''ᵀ M' A'' / 576`: the output
//!   transform computes `Z = A''ᵀ M' A''` in wrapping i32, i.e. `576·Y` modulo 2^32.
//!   `576 = 2^6·9` and 9 is odd, so `Z·9⁻¹` (the inverse modulo 2^32, `0x38E38E39`) is
//!   `64·Y` modulo 2^32, and its arithmetic shift right by 6 is `Y` exactly whenever
//!   `−2^25 ≤ Y < 2^25`.
//!
//! `|Y| ≤ 255·Σ|w − zw|` over the output channel's `9·C_in` weights, so the weights are
//! packed for F(4×4) only when that is below 2^25 for every output channel (a per-channel
//! L1 bound, not `9·C_in·max_g`: real weights are far from all-extreme; all-extreme i8
//! weights pass up to 114 channels). Tiles are 4×4 outputs, bands four output rows; a fused 2×2 max pool takes
//! four windows per tile.
//!
//! # Layout
//! Work is split into bands: one image's pair of output rows `(b, ty)`, `⌈OW/2⌉` tiles wide.
//! A chunk of consecutive bands is transformed into `V` (`[ξ][tile][C_in]` i16, rows padded
//! to whole pairs), multiplied panel by panel (16 output channels, 6 tiles per register
//! tile, all 16 ξ), and each 6×16 block is transformed back right away and handed, two
//! adjacent pixels × 16 channels at a time, to the GEMM's output stage (bias,
//! requantization, clamp, store). Tiles that run past the output (odd OH/OW) are computed
//! whole and their outside outputs dropped. A following 2×2 stride-2 max pool can be fused:
//! a tile is exactly one pooling window, so its four sums are reduced to their maximum and
//! only that goes through the output stage (exact when the stage is non-decreasing).

use std::ops::Range;

use crate::conv::{ActElem, NhwcInput};
use crate::dispatch::{Body, Winograd, I16};
use crate::gemm::{Tile, TileWriter, NR, TILE};
use crate::generic::winograd as generic_winograd;
use crate::output::QuantType;

/// Positions of the 4×4 transform domain.
const XI: usize = 16;
/// Tile rows per register tile of the i16 kernels.
const MR: usize = 6;
// A run of MR tiles is 2·MR output pixels, written from one tile buffer.
const _: () = assert!(2 * MR * NR <= TILE);
/// Input channels processed per vector block of the input transform.
const CB: usize = 16;

/// Smallest input channel count packed for Winograd: below it the transforms cost more than
/// the saved products (and a single pair of k per GEMM leaves the kernel idle).
pub(crate) const MIN_C_IN: usize = 8;

/// Whether `Y` stays exact for `c_in` channels and weights with `|w − zw| ≤ max_g` (module
/// docs: `4·9·255·max_g·C_in < 2^31`).
pub(crate) fn is_exact(c_in: usize, max_g: u32) -> bool {
    (4 * 9 * 255u64)
        .saturating_mul(max_g as u64)
        .saturating_mul(c_in as u64)
        < (1u64 << 31)
}

/// 3×3 weights transformed once (`U' = G' g G'ᵀ`) and packed per ξ in panels of 16 output
/// channels: value `(panel p, ξ, k-pair g, column c, half h)` at
/// `((p·ξs + ξ)·kgroups + g)·32 + 2c + h`, i.e. the pair layout of the GEMM's weight
/// panels, in i16. Channels past `c_in` / `c_out` are zero. A column panel's ξ panels are
/// one contiguous run, read in order by the band loop (ξ inner): at batch 1 each weight
/// is read once per call (the conv net's 128→256 F(4×4) layer: 2.4 MB of them, from L3),
/// and one run streams better than 36 runs 64 KB apart.
#[derive(Debug, Clone)]
pub(crate) struct WinogradWeights {
    /// Output tile size: 2 for F(2×2, 3×3), 4 for F(4×4, 3×3).
    m: usize,
    c_in: usize,
    c_out: usize,
    kgroups: usize,
    n_panels: usize,
    data: Vec<i16>,
}

impl WinogradWeights {
    /// Transforms ONNX-ordered `[c_out, c_in, 3, 3]` weights with per-output-channel zero
    /// point `zp(co)` for F(2×2, 3×3), or `None` when the exactness bound does not hold.
    pub(crate) fn new(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        zp: impl Fn(usize) -> i32,
    ) -> Option<Self> {
        Self::build(2, weights, c_out, c_in, zp)
    }

    /// As [`Self::new`] for F(4×4, 3×3) (module docs, "F(4×4, 3×3)"): `None` unless every
    /// output channel's `255·Σ|w − zw|` is below 2^25.
    pub(crate) fn new_f4(
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        zp: impl Fn(usize) -> i32,
    ) -> Option<Self> {
        Self::build(4, weights, c_out, c_in, zp)
    }

    fn build(
        m: usize,
        weights: &[i8],
        c_out: usize,
        c_in: usize,
        zp: impl Fn(usize) -> i32,
    ) -> Option<Self> {
        debug_assert_eq!(weights.len(), c_out * c_in * 9);
        let g_of = |co: usize| {
            let z = zp(co);
            weights[co * c_in * 9..(co + 1) * c_in * 9]
                .iter()
                .map(move |&w| (w as i32 - z).unsigned_abs())
        };
        let max_g = (0..c_out).flat_map(g_of).max().unwrap_or(0);
        if max_g > 255 {
            return None;
        }
        if m == 2 && !is_exact(c_in, max_g) {
            return None;
        }
        if m == 4 {
            let l1 = (0..c_out)
                .map(|co| g_of(co).map(u64::from).sum::<u64>())
                .max()
                .unwrap_or(0);
            if !is_exact_f4(l1) {
                return None;
            }
        }
        let xis = (m + 2) * (m + 2);
        let kgroups = c_in.div_ceil(2);
        let n_panels = c_out.div_ceil(NR);
        let mut data = vec![0i16; xis * n_panels * kgroups * NR * 2];
        for co in 0..c_out {
            let z = zp(co);
            let (p, c) = (co / NR, co % NR);
            for ci in 0..c_in {
                let base = (co * c_in + ci) * 9;
                let g: [[i32; 3]; 3] = std::array::from_fn(|i| {
                    std::array::from_fn(|j| weights[base + i * 3 + j] as i32 - z)
                });
                let (kg, h) = (ci / 2, ci % 2);
                let mut put = |xi: usize, v: i32| {
                    data[((p * xis + xi) * kgroups + kg) * NR * 2 + c * 2 + h] = v as i16;
                };
                if m == 2 {
                    for (xi, &v) in transform_weights(&g).iter().flatten().enumerate() {
                        put(xi, v);
                    }
                } else {
                    for (xi, &v) in transform_weights_f4(&g).iter().flatten().enumerate() {
                        put(xi, v);
                    }
                }
            }
        }
        Some(WinogradWeights {
            m,
            c_in,
            c_out,
            kgroups,
            n_panels,
            data,
        })
    }

    /// Whether these are F(4×4, 3×3) weights.
    pub(crate) fn is_f4(&self) -> bool {
        self.m == 4
    }

    /// The packed panel `(ξ, p)`.
    #[inline(always)]
    fn panel(&self, xi: usize, p: usize) -> &[i16] {
        let len = self.kgroups * NR * 2;
        let xis = (self.m + 2) * (self.m + 2);
        &self.data[(p * xis + xi) * len..][..len]
    }
}

/// `U' = G' g G'ᵀ` with `G' = 2G = [[2,0,0],[1,1,1],[1,−1,1],[0,0,2]]`.
fn transform_weights(g: &[[i32; 3]; 3]) -> [[i32; 4]; 4] {
    let gp = |v: [i32; 3]| [2 * v[0], v[0] + v[1] + v[2], v[0] - v[1] + v[2], 2 * v[2]];
    // Rows first (G' g), then columns ((G' g) G'ᵀ).
    let cols: [[i32; 4]; 3] = std::array::from_fn(|j| gp([g[0][j], g[1][j], g[2][j]]));
    std::array::from_fn(|i| gp([cols[0][i], cols[1][i], cols[2][i]]))
}

/// `U' = G' g G'ᵀ` of F(4×4, 3×3) with `G' = diag(4, 6, 6, 24, 24, 1)·G =
/// [[1,0,0],[−1,−1,−1],[−1,1,−1],[1,2,4],[1,−2,4],[0,0,1]]` (module docs).
fn transform_weights_f4(g: &[[i32; 3]; 3]) -> [[i32; 6]; 6] {
    let gp = |v: [i32; 3]| {
        [
            v[0],
            -v[0] - v[1] - v[2],
            -v[0] + v[1] - v[2],
            v[0] + 2 * v[1] + 4 * v[2],
            v[0] - 2 * v[1] + 4 * v[2],
            v[2],
        ]
    };
    let cols: [[i32; 6]; 3] = std::array::from_fn(|j| gp([g[0][j], g[1][j], g[2][j]]));
    std::array::from_fn(|i| gp([cols[0][i], cols[1][i], cols[2][i]]))
}

/// Whether F(4×4, 3×3) stays exact when the largest per-output-channel `Σ|w − zw|` is
/// `l1` (module docs: `255·l1 < 2^25`).
pub(crate) fn is_exact_f4(l1: u64) -> bool {
    255u64.saturating_mul(l1) < (1u64 << 25)
}

/// One Winograd convolution call: the input, the weights and the output geometry.
pub(crate) struct WinogradConv<'a, T> {
    x: &'a NhwcInput<'a, T>,
    w: &'a WinogradWeights,
    pad_t: usize,
    pad_l: usize,
    oh: usize,
    ow: usize,
    /// Tile rows and columns: `⌈oh/m⌉`, `⌈ow/m⌉` (`m` = 2 or 4).
    th: usize,
    tw: usize,
    /// `c_in` copies of the zero point: the source of taps in the padding (`d = 0`).
    zero: Vec<T>,
    /// A fused 2×2 stride-2 max pool: each tile's four sums are reduced to their maximum
    /// before the output stage, and the output is `th × tw` pixels (see [`Self::pooled`]).
    pool: bool,
}

/// Per-thread buffers of [`WinogradConv::bands`].
#[derive(Default)]
pub(crate) struct Scratch {
    /// `V`: `[ξ][tile][kgroups]` words of two i16.
    v: Vec<u32>,
    /// One 6×16 tile of `M_ξ` per ξ.
    m: Vec<[i32; TILE]>,
}

impl<'a, T: ActElem> WinogradConv<'a, T> {
    /// A call on `x` (already checked against the weights) with output `oh × ow`.
    pub(crate) fn new(
        x: &'a NhwcInput<'a, T>,
        w: &'a WinogradWeights,
        pads: [usize; 4],
        oh: usize,
        ow: usize,
    ) -> Self {
        let zp = T::from_clamped(x.zero_point.clamp(T::MIN, T::MAX));
        WinogradConv {
            x,
            w,
            pad_t: pads[0],
            pad_l: pads[1],
            oh,
            ow,
            th: oh.div_ceil(w.m),
            tw: ow.div_ceil(w.m),
            zero: vec![zp; w.c_in],
            pool: false,
        }
    }

    /// The conv followed by a 2×2 stride-2 max pool without padding, on a conv output of
    /// `oh × ow` (its last row/column dropped when odd, as the pool's floor output size
    /// does): the output is `⌊oh/2⌋ × ⌊ow/2⌋` pixels, each the output stage applied to the
    /// maximum of its tile's four exact sums. That equals pooling the staged outputs when
    /// the stage is non-decreasing in the sum (`OutputStage::is_monotone_within`, checked
    /// by the caller), since then `stage(max) = max(stage)`; it saves three quarters of the
    /// output stage and the pool's pass over the conv output.
    pub(crate) fn pooled(
        x: &'a NhwcInput<'a, T>,
        w: &'a WinogradWeights,
        pads: [usize; 4],
        oh: usize,
        ow: usize,
    ) -> Self {
        WinogradConv {
            pool: true,
            ..Self::new(x, w, pads, oh / 2 * 2, ow / 2 * 2)
        }
    }

    /// Number of bands (`n · ⌈oh/m⌉`).
    pub(crate) fn band_count(&self) -> usize {
        self.x.shape[0] * self.th
    }

    /// 16-channel column panels of the output.
    pub(crate) fn panel_count(&self) -> usize {
        self.w.n_panels
    }

    /// Tiles per band.
    pub(crate) fn tiles_per_band(&self) -> usize {
        self.tw
    }

    /// Computes the output pixels of `bands`, channels of the 16-channel column `panels`,
    /// and hands each 2-pixel row of a tile, 16 channels at a time, to `out` (the GEMM's
    /// output stage), with the table's Winograd loop copy and input transform (`wino`) and
    /// i16 micro-kernel (`i16`).
    ///
    /// # Safety
    /// `out` must write an output of `n·oh·ow` pixels (pooled: `n·(oh/2)·(ow/2)`) of
    /// `c_out` channels, and no other thread may be writing the channels of `panels` of
    /// the pixels of `bands`.
    pub(crate) unsafe fn bands<O: QuantType>(
        &self,
        wino: &Winograd,
        i16: &I16,
        bands: Range<usize>,
        panels: Range<usize>,
        s: &mut Scratch,
        out: &TileWriter<'_, O>,
    ) {
        let job = Bands {
            wc: self,
            wino,
            i16,
            bands,
            panels,
            out,
        };
        wino.body.run(&job, std::slice::from_mut(s), &mut [])
    }

    /// The band loop, run in the table's compiled copy ([`Bands`]).
    ///
    /// # Safety
    /// As [`Self::bands`].
    #[inline(always)]
    unsafe fn bands_body<O: QuantType>(
        &self,
        wino: &Winograd,
        i16: &I16,
        bands: Range<usize>,
        panels: Range<usize>,
        s: &mut Scratch,
        out: &TileWriter<'_, O>,
    ) {
        let w = self.w;
        let (kgroups, c_out) = (w.kgroups, w.c_out);
        let tiles = bands.len() * self.tw;
        let plane = tiles * kgroups;
        if w.m == 4 {
            // SAFETY: the caller's contract.
            unsafe { self.bands_f4(i16, bands, panels, s, out) };
            return;
        }
        s.v.resize(XI * plane, 0);
        s.m.resize(XI, [0; TILE]);

        // Input transform, tile by tile.
        {
            // SAFETY: u32 has the size of two i16 and a stricter alignment; every bit
            // pattern is valid for both.
            let v16: &mut [i16] = unsafe {
                std::slice::from_raw_parts_mut(s.v.as_mut_ptr() as *mut i16, s.v.len() * 2)
            };
            for t in 0..tiles {
                let bi = bands.start + t / self.tw;
                let (b, ty, tx) = (bi / self.th, bi % self.th, t % self.tw);
                self.input_tile(wino, b, ty, tx, v16, plane * 2, t * kgroups * 2);
            }
        }

        // 16 GEMMs per 6×16 block, then the output transform and stage of that block. The
        // tiles of a block that lie in one band give a run of adjacent pixels in each of
        // their two output rows: those runs (up to 12 pixels) go to the stage in one call.
        let mut run = [Tile([0; TILE]), Tile([0; TILE])];
        for p in panels {
            let cols = (c_out - p * NR).min(NR);
            for rb in (0..tiles).step_by(MR) {
                let rows = (tiles - rb).min(MR);
                for xi in 0..XI {
                    let a = &s.v[xi * plane + rb * kgroups..(xi + 1) * plane];
                    (i16.tile)(rows, kgroups, a, kgroups, w.panel(xi, p), &mut s.m[xi]);
                }
                let m: &[[i32; TILE]; XI] = s.m[..XI].try_into().expect("16 tiles");
                let mut r = 0;
                while r < rows {
                    // The run: tiles rb+r.. of band `bi`, up to the block's or band's end.
                    let t = rb + r;
                    let (bi, tx0) = (bands.start + t / self.tw, t % self.tw);
                    let len = (rows - r).min(self.tw - tx0);
                    let (b, ty) = (bi / self.th, bi % self.th);
                    if self.pool {
                        // Every tile is whole (even oh, ow): one pooled pixel per tile.
                        let tile = &mut run[0].0;
                        for k in 0..len {
                            let y = output_tile(m, r + k);
                            let o = &mut tile[k * NR..(k + 1) * NR];
                            for (l, o) in o.iter_mut().enumerate() {
                                *o = y[0][0][l].max(y[0][1][l]).max(y[1][0][l].max(y[1][1][l]));
                            }
                        }
                        let pixel = (b * self.th + ty) * self.tw + tx0;
                        // SAFETY: pooled pixels `pixel..pixel+len` of band `bi` belong to
                        // this call; the rest is the caller's contract.
                        unsafe { out.write(&run[0], len, pixel, p * NR, cols, c_out) };
                        r += len;
                        continue;
                    }
                    for k in 0..len {
                        let y = output_tile(m, r + k);
                        for (tile, ydy) in run.iter_mut().zip(&y) {
                            tile.0[2 * k * NR..(2 * k + 1) * NR].copy_from_slice(&ydy[0]);
                            tile.0[(2 * k + 1) * NR..(2 * k + 2) * NR].copy_from_slice(&ydy[1]);
                        }
                    }
                    let px = (2 * len).min(self.ow - 2 * tx0);
                    for (dy, tile) in run.iter().enumerate() {
                        let oy = 2 * ty + dy;
                        if oy < self.oh {
                            let pixel = (b * self.oh + oy) * self.ow + 2 * tx0;
                            // SAFETY: pixels `pixel..pixel+px` of row `oy` belong to band
                            // `bi` of this call, channels `p·16..p·16+cols` exist; the rest
                            // is the caller's contract.
                            unsafe { out.write(tile, px, pixel, p * NR, cols, c_out) };
                        }
                    }
                    r += len;
                }
            }
        }
    }

    /// [`Self::bands_body`] for F(4×4, 3×3): bands of four output rows, 36 GEMMs per
    /// block of 6 tiles, the 4×4 outputs of up to four adjacent tiles of a band handed to
    /// the stage as one run per output row (or, pooled, each tile's four 2×2 windows
    /// reduced: two pooled rows of up to 8 pixels).
    ///
    /// # Safety
    /// As [`Self::bands`].
    #[inline(always)]
    unsafe fn bands_f4<O: QuantType>(
        &self,
        i16: &I16,
        bands: Range<usize>,
        panels: Range<usize>,
        s: &mut Scratch,
        out: &TileWriter<'_, O>,
    ) {
        let w = self.w;
        let (kgroups, c_out) = (w.kgroups, w.c_out);
        let tiles = bands.len() * self.tw;
        let plane = tiles * kgroups;
        s.v.resize(XI4 * plane, 0);
        s.m.resize(XI4, [0; TILE]);
        {
            // SAFETY: as in `bands_body`.
            let v16: &mut [i16] = unsafe {
                std::slice::from_raw_parts_mut(s.v.as_mut_ptr() as *mut i16, s.v.len() * 2)
            };
            let mut bufs: InputBufs4 = ([[0; CB]; XI4], [[0; CB]; XI4]);
            for t in 0..tiles {
                let bi = bands.start + t / self.tw;
                let (b, ty, tx) = (bi / self.th, bi % self.th, t % self.tw);
                self.input_tile_f4(b, ty, tx, v16, plane * 2, t * kgroups * 2, &mut bufs);
            }
        }
        let mut run = [
            Tile([0; TILE]),
            Tile([0; TILE]),
            Tile([0; TILE]),
            Tile([0; TILE]),
        ];
        // One tile's 4×4 outputs, written in place by `output_tile_f4` (no copy per tile).
        let mut y = [[[0i32; NR]; 4]; 4];
        let (ph, pw) = (self.oh / 2, self.ow / 2);
        for p in panels {
            let cols = (c_out - p * NR).min(NR);
            for rb in (0..tiles).step_by(MR) {
                let rows = (tiles - rb).min(MR);
                for xi in 0..XI4 {
                    let a = &s.v[xi * plane + rb * kgroups..(xi + 1) * plane];
                    (i16.tile)(rows, kgroups, a, kgroups, w.panel(xi, p), &mut s.m[xi]);
                }
                let m: &[[i32; TILE]; XI4] = s.m[..XI4].try_into().expect("36 tiles");
                let mut r = 0;
                while r < rows {
                    // A run of up to 4 tiles of one band: 16 pixels per output row.
                    let t = rb + r;
                    let (bi, tx0) = (bands.start + t / self.tw, t % self.tw);
                    let len = (rows - r).min(self.tw - tx0).min(4);
                    let (b, ty) = (bi / self.th, bi % self.th);
                    if self.pool {
                        // oh, ow are even: pooled rows 2ty, 2ty+1 (the second may be past
                        // the output when oh is not a multiple of 4), columns 2tx...
                        for k in 0..len {
                            output_tile_f4(m, r + k, &mut y);
                            for (py, tile) in run.iter_mut().take(2).enumerate() {
                                for px in 0..2 {
                                    let o = &mut tile.0[(2 * k + px) * NR..][..NR];
                                    let (y0, y1) = (&y[2 * py], &y[2 * py + 1]);
                                    for (l, o) in o.iter_mut().enumerate() {
                                        *o = y0[2 * px][l]
                                            .max(y0[2 * px + 1][l])
                                            .max(y1[2 * px][l].max(y1[2 * px + 1][l]));
                                    }
                                }
                            }
                        }
                        let npx = (2 * len).min(pw - 2 * tx0);
                        for (py, tile) in run.iter().take(2).enumerate() {
                            let prow = 2 * ty + py;
                            if prow < ph {
                                let pixel = (b * ph + prow) * pw + 2 * tx0;
                                // SAFETY: pooled pixels of rows 2ty, 2ty+1, columns from
                                // 2·tx0, belong to band `bi` of this call; channels
                                // `p·16..p·16+cols` exist; the rest is the caller's contract.
                                unsafe { out.write(tile, npx, pixel, p * NR, cols, c_out) };
                            }
                        }
                        r += len;
                        continue;
                    }
                    for k in 0..len {
                        output_tile_f4(m, r + k, &mut y);
                        for (tile, ydy) in run.iter_mut().zip(&y) {
                            for (dx, v) in ydy.iter().enumerate() {
                                tile.0[(4 * k + dx) * NR..][..NR].copy_from_slice(v);
                            }
                        }
                    }
                    let px = (4 * len).min(self.ow - 4 * tx0);
                    for (dy, tile) in run.iter().enumerate() {
                        let oy = 4 * ty + dy;
                        if oy < self.oh {
                            let pixel = (b * self.oh + oy) * self.ow + 4 * tx0;
                            // SAFETY: pixels `pixel..pixel+px` of row `oy` belong to band
                            // `bi` of this call, channels `p·16..p·16+cols` exist; the rest
                            // is the caller's contract.
                            unsafe { out.write(tile, px, pixel, p * NR, cols, c_out) };
                        }
                    }
                    r += len;
                }
            }
        }
    }

    /// `V = Bᵀ d B` of F(4×4, 3×3) for tile `(b, ty, tx)` (a 6×6 input window at
    /// `(4ty − pad_t, 4tx − pad_l)`): value `(ξ, c)` to `v[ξ·plane + off + c]` (i16 units),
    /// the pair padding channel (odd `c_in`) set to 0. Portable, 16 channels at a time in
    /// i16 lanes (exact: every partial sum is at most `100·255` in magnitude).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn input_tile_f4(
        &self,
        b: usize,
        ty: usize,
        tx: usize,
        v: &mut [i16],
        plane: usize,
        off: usize,
        (d, vt): &mut InputBufs4,
    ) {
        let [_, h, wd, c] = self.x.shape;
        let za = self.x.zero_point;
        let mut src: [&[u8]; XI4] = [T::as_bytes(&self.zero); XI4];
        for i in 0..6 {
            let iy = (4 * ty + i) as isize - self.pad_t as isize;
            if iy < 0 || iy >= h as isize {
                continue;
            }
            for j in 0..6 {
                let ix = (4 * tx + j) as isize - self.pad_l as isize;
                if ix >= 0 && ix < wd as isize {
                    src[i * 6 + j] = T::as_bytes(
                        &self.x.data[((b * h + iy as usize) * wd + ix as usize) * c..][..c],
                    );
                }
            }
        }
        // The buffers of the channel blocks (the caller's, reused across tiles) are
        // written in place; a partial block's lanes past `c` keep earlier values, which
        // are never stored.
        let mut c0 = 0;
        while c0 < c {
            let n = (c - c0).min(CB);
            if n == CB {
                // A whole block: fixed-size rows, so the widening is one vector step.
                // (x − za) mod 2^16, as the i32 difference cast below.
                let za = za as i16;
                for (dk, sk) in d.iter_mut().zip(&src) {
                    let sk: &[u8; CB] = sk[c0..c0 + CB].try_into().expect("16 channels");
                    for (o, &x) in dk.iter_mut().zip(sk) {
                        let x = if T::SIGNED { x as i8 as i16 } else { x as i16 };
                        *o = x.wrapping_sub(za);
                    }
                }
            } else {
                for (dk, sk) in d.iter_mut().zip(&src) {
                    for (o, &x) in dk.iter_mut().zip(&sk[c0..c0 + n]) {
                        let x = if T::SIGNED { x as i8 as i32 } else { x as i32 };
                        *o = (x - za) as i16;
                    }
                }
            }
            transform_input_f4(d, vt);
            if n == CB {
                // Fixed-size copies (a copy of `n` values is a `memcpy` call each).
                for (xi, vx) in vt.iter().enumerate() {
                    v[xi * plane + off + c0..][..CB].copy_from_slice(vx);
                }
            } else {
                for (xi, vx) in vt.iter().enumerate() {
                    v[xi * plane + off + c0..][..n].copy_from_slice(&vx[..n]);
                }
            }
            c0 += CB;
        }
        if c % 2 == 1 {
            for xi in 0..XI4 {
                v[xi * plane + off + c] = 0;
            }
        }
    }

    /// `V = Bᵀ d B` of tile `(b, ty, tx)`: value `(ξ, c)` to `v[ξ·plane + off + c]` (i16
    /// units), with the pair padding channel (odd `c_in`) set to 0.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn input_tile(
        &self,
        wino: &Winograd,
        b: usize,
        ty: usize,
        tx: usize,
        v: &mut [i16],
        plane: usize,
        off: usize,
    ) {
        let [_, h, wd, c] = self.x.shape;
        let za = self.x.zero_point;
        // The 16 source pixels' bytes, row-major; taps in the padding read `zero` (d = 0).
        let mut src: [&[u8]; XI] = [T::as_bytes(&self.zero); XI];
        for i in 0..4 {
            let iy = (2 * ty + i) as isize - self.pad_t as isize;
            if iy < 0 || iy >= h as isize {
                continue;
            }
            for j in 0..4 {
                let ix = (2 * tx + j) as isize - self.pad_l as isize;
                if ix >= 0 && ix < wd as isize {
                    src[i * 4 + j] = T::as_bytes(
                        &self.x.data[((b * h + iy as usize) * wd + ix as usize) * c..][..c],
                    );
                }
            }
        }
        let mut c0 = 0;
        while c0 + CB <= c {
            // SAFETY: every source slice holds `c ≥ c0 + 16` bytes and every destination
            // row `c0 + 16` values (`plane` covers the call's tiles and channels); the
            // entry's ISA was checked by the plug that installed it.
            unsafe { (wino.input)(&src, T::SIGNED, c0, za, v, plane, off) };
            c0 += CB;
        }
        if c0 < c {
            generic_winograd::winograd_input(&src, T::SIGNED, c0, c - c0, za, v, plane, off);
        }
        if c % 2 == 1 {
            for xi in 0..XI {
                v[xi * plane + off + c] = 0;
            }
        }
    }
}

/// Positions of the 6×6 transform domain of F(4×4, 3×3).
const XI4: usize = 36;

/// The input values `d` and transformed values `V` of one tile's block of 16 channels.
type InputBufs4 = ([[i16; CB]; XI4], [[i16; CB]; XI4]);

/// `Bᵀ d B` of F(4×4, 3×3) on 16 channels (row-major 6×6, index `6i + j`), with
/// `Bᵀ = [[4,0,−5,0,1,0],[0,−4,−4,1,1,0],[0,4,−4,−1,1,0],[0,−2,−1,2,1,0],[0,2,−1,−2,1,0],
/// [0,4,0,−5,0,1]]`: down each column, then along each row. Every partial sum is at most
/// `10·255` (first pass) and `100·255` (second) in magnitude, so i16 is exact. Written on
/// whole 16-lane rows (the lane loop innermost), so each step is one vector operation in
/// a SIMD copy (a lane-outer loop over the 36 values did not vectorise: BENCHMARKS.md,
/// branch `speed3`).
#[inline(always)]
fn transform_input_f4(d: &[[i16; CB]; XI4], v: &mut [[i16; CB]; XI4]) {
    type L = [i16; CB];
    #[inline(always)]
    fn bt(x: [&L; 6]) -> [L; 6] {
        let mut o = [[0i16; CB]; 6];
        for l in 0..CB {
            let [d0, d1, d2, d3, d4, d5] = [x[0][l], x[1][l], x[2][l], x[3][l], x[4][l], x[5][l]];
            o[0][l] = 4 * d0 - 5 * d2 + d4;
            o[1][l] = d3 + d4 - 4 * (d1 + d2);
            o[2][l] = 4 * (d1 - d2) + d4 - d3;
            o[3][l] = 2 * (d3 - d1) + d4 - d2;
            o[4][l] = 2 * (d1 - d3) + d4 - d2;
            o[5][l] = 4 * d1 - 5 * d3 + d5;
        }
        o
    }
    let mut t = [[0i16; CB]; XI4];
    for j in 0..6 {
        let col = bt(std::array::from_fn(|i| &d[6 * i + j]));
        for (i, c) in col.into_iter().enumerate() {
            t[6 * i + j] = c;
        }
    }
    for i in 0..6 {
        let row = bt(std::array::from_fn(|j| &t[6 * i + j]));
        v[6 * i..6 * i + 6].copy_from_slice(&row);
    }
}

/// `2^32`-inverse of 9: `576·Y·INV9 = 64·Y` modulo 2^32.
const INV9: i32 = 0x38e3_8e39;
const _: () = assert!(INV9.wrapping_mul(9) == 1);

/// The F(4×4, 3×3) output transform of tile row `r` of the 36 `M'_ξ` tiles: `Z = A''ᵀ M' A''`
/// with `A''ᵀ = [[6,4,4,1,1,0],[0,4,−4,2,−2,0],[0,4,4,4,4,0],[0,4,−4,8,−8,24]]` is `576·Y`
/// modulo 2^32 (module docs), so `Y = (Z·9⁻¹) >> 6` whenever `|Y| < 2^25`. Writes the
/// 4×4 outputs to `y` (`[dy][dx]`), 16 channels each.
#[inline(always)]
fn output_tile_f4(m: &[[i32; TILE]; XI4], r: usize, y: &mut [[[i32; NR]; 4]; 4]) {
    type L = [i32; NR];
    // On whole 16-lane rows, the lane loop innermost (as `transform_input_f4`).
    #[inline(always)]
    fn at(x: [&L; 6]) -> [L; 4] {
        let mut o = [[0i32; NR]; 4];
        for l in 0..NR {
            let [m0, m1, m2, m3, m4, m5] = [x[0][l], x[1][l], x[2][l], x[3][l], x[4][l], x[5][l]];
            let (p, q) = (m1.wrapping_add(m2), m1.wrapping_sub(m2));
            let (u, s) = (m3.wrapping_add(m4), m3.wrapping_sub(m4));
            o[0][l] = m0
                .wrapping_mul(6)
                .wrapping_add(p.wrapping_mul(4))
                .wrapping_add(u);
            o[1][l] = q.wrapping_mul(4).wrapping_add(s.wrapping_mul(2));
            o[2][l] = p.wrapping_add(u).wrapping_mul(4);
            o[3][l] = q
                .wrapping_mul(4)
                .wrapping_add(s.wrapping_mul(8))
                .wrapping_add(m5.wrapping_mul(24));
        }
        o
    }
    let rows: [&L; XI4] =
        std::array::from_fn(|xi| m[xi][r * NR..][..NR].try_into().expect("16 columns"));
    let mut s = [[[0i32; NR]; 6]; 4];
    for j in 0..6 {
        let col = at(std::array::from_fn(|i| rows[6 * i + j]));
        for (a, c) in col.into_iter().enumerate() {
            s[a][j] = c;
        }
    }
    for (a, sa) in s.iter().enumerate() {
        let z = at(std::array::from_fn(|j| &sa[j]));
        for (ya, za) in y[a].iter_mut().zip(&z) {
            for (o, &v) in ya.iter_mut().zip(za) {
                *o = v.wrapping_mul(INV9) >> 6;
            }
        }
    }
}

/// `Aᵀ M A >> 2` of tile row `r` of the 16 `M_ξ` tiles: the 2×2 outputs (`[dy][dx]`), 16
/// channels each. Aᵀ applied to four values is `[m0 + m1 + m2, m1 − m2 − m3]` (wrapping:
/// see the module docs), down each column, then along each row.
#[inline(always)]
fn output_tile(m: &[[i32; TILE]; XI], r: usize) -> [[[i32; NR]; 2]; 2] {
    type L = [i32; NR];
    // On whole 16-lane rows, the lane loop innermost (as `transform_input_f4`).
    #[inline(always)]
    fn at(x: [&L; 4]) -> [L; 2] {
        let mut o = [[0i32; NR]; 2];
        for l in 0..NR {
            let [m0, m1, m2, m3] = [x[0][l], x[1][l], x[2][l], x[3][l]];
            o[0][l] = m0.wrapping_add(m1).wrapping_add(m2);
            o[1][l] = m1.wrapping_sub(m2).wrapping_sub(m3);
        }
        o
    }
    let rows: [&L; XI] =
        std::array::from_fn(|xi| m[xi][r * NR..][..NR].try_into().expect("16 columns"));
    let mut s = [[[0i32; NR]; 4]; 2];
    for j in 0..4 {
        let col = at(std::array::from_fn(|i| rows[4 * i + j]));
        for (a, c) in col.into_iter().enumerate() {
            s[a][j] = c;
        }
    }
    let mut y = [[[0i32; NR]; 2]; 2];
    for (ya, sa) in y.iter_mut().zip(&s) {
        let z = at(std::array::from_fn(|j| &sa[j]));
        for (yab, zb) in ya.iter_mut().zip(&z) {
            for (o, &v) in yab.iter_mut().zip(zb) {
                *o = v >> 2;
            }
        }
    }
    y
}

/// [`WinogradConv::bands_body`] with the scratch buffers of the body's first (one-element)
/// slice, as a [`Body`] run in the table's Winograd copy.
struct Bands<'a, T, O> {
    wc: &'a WinogradConv<'a, T>,
    wino: &'a Winograd,
    i16: &'a I16,
    bands: Range<usize>,
    panels: Range<usize>,
    out: &'a TileWriter<'a, O>,
}

impl<T: ActElem, O: QuantType> Body<Scratch, u8> for Bands<'_, T, O> {
    #[inline(always)]
    fn run(&self, s: &mut [Scratch], _: &mut [u8]) {
        // SAFETY: only `WinogradConv::bands` builds a `Bands`, under its own contract.
        unsafe {
            self.wc.bands_body(
                self.wino,
                self.i16,
                self.bands.clone(),
                self.panels.clone(),
                &mut s[0],
                self.out,
            )
        }
    }
}
