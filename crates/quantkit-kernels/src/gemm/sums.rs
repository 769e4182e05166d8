//! Exact sums for convolutions that reduce tiles themselves (the fused conv + max pool):
//! tile by tile on caller-packed panels, or serially over a block of rows.

use super::activations::Activations;
use super::geometry::{PanelGeometry, Tile, MR, NR, TILE};
use super::pack::pack_a_panel;
use super::sink::{column_terms, column_terms_za, write_tile, Epilogue, Sink, TilePos};
use super::weights::PackedWeights;
use crate::dispatch::{I16RowsFn, I16WindowFn, Kernels, Mmm, TileFn};

/// Exact sums of activation panels packed by the caller, one register tile at a time: the
/// building block of convolutions that reduce tiles themselves (a fused max pool).
pub(crate) struct PanelSums<'a> {
    /// The table's micro-kernel (pairs geometry).
    tile: TileFn,
    /// The table's indirect i16 kernel of 2×2 pool windows.
    window: I16WindowFn,
    /// The table's i16 kernel of 6 rows read in place.
    rows: I16RowsFn,
    w: std::borrow::Cow<'a, PackedWeights>,
    colterm: Vec<i32>,
    /// The weight panels widened to i16 (same `[g][16][2]` order) for the window
    /// kernel, when every weight zero point is 0 (no row sums needed).
    b16: Option<Vec<i16>>,
}

impl<'a> PanelSums<'a> {
    /// For weights `w` and activations whose stored (u8-domain) zero point is `za`, with
    /// the pairs-geometry kernels of `k`; `None` unless the weights are packed in that
    /// geometry.
    pub(crate) fn new(k: &Kernels, w: &'a PackedWeights, za: i32) -> Option<Self> {
        if w.geometry() != PanelGeometry::PAIRS {
            return None;
        }
        let mmm = k.pairs();
        let w = w.for_geometry(mmm.geometry);
        let colterm = column_terms_za(za, &w, None);
        let b16 = w.zw_all_zero.then(|| {
            (0..w.n_panels)
                .flat_map(|p| w.panel(p).iter().map(|&v| v as i16))
                .collect()
        });
        Some(PanelSums {
            tile: mmm.tile,
            window: k.i16().window,
            rows: k.i16().rows,
            w,
            colterm,
            b16,
        })
    }

    /// Whether [`Self::window_tile`] is available (every weight zero point is 0).
    pub(crate) fn has_indirect(&self) -> bool {
        self.b16.is_some()
    }

    /// Column panel `p`'s i16 weight pairs for the in-place tiles, after checking that
    /// `koff` holds one offset per k-group.
    #[inline(always)]
    fn indirect_panel(&self, koff: &[usize], p: usize) -> &[i16] {
        let w = &*self.w;
        let b16 = self
            .b16
            .as_deref()
            .expect("indirect tiles need zero weight zero points");
        assert!(koff.len() == w.kgroups && p < w.n_panels);
        &b16[p * w.kgroups * NR * 2..(p + 1) * w.kgroups * NR * 2]
    }

    /// The exact sums of `windows ≤ 6` 2×2 pool windows reduced to their maxima, for
    /// column panel `p`: `tile[16w + c]` is the largest `Σ_k (a − za)(w − zw)` of the four
    /// rows `rows[r] + w·step` whose k-group `g` word is at `koff[g]` from the row (the
    /// words read in place from the few-channel planes); only when [`Self::has_indirect`].
    /// The column term (`−za·Σw`, constant per column) is added after the maximum: the
    /// raw sums `Σ a·w` of at most `MAX_K` products of `|a| ≤ 255`, `|w| ≤ 128` and their
    /// corrected values both fit i32, so this is the maximum of the corrected sums.
    #[inline(always)]
    pub(crate) fn window_tile(
        &self,
        a: &[u32],
        (rows, step, windows): (&[usize; 4], usize, usize),
        koff: &[usize],
        p: usize,
        tile: &mut Tile,
    ) {
        let b = self.indirect_panel(koff, p);
        (self.window)(a, rows, step, windows, koff, b, &mut tile.0);
        let ct: [i32; NR] = self.colterm[p * NR..][..NR].try_into().expect("16 columns");
        for row in tile.0[..windows * NR].chunks_exact_mut(NR) {
            let row: &mut [i32; NR] = row.try_into().expect("16 columns");
            for c in 0..NR {
                row[c] = row[c].wrapping_add(ct[c]);
            }
        }
    }

    /// The raw sums `Σ_k a·w` of 6 rows read in place (word `g` of row `r` at
    /// `rows[r] + koff[g]`) with column panel `p` (no column term: see
    /// [`Self::column_terms`]); only when [`Self::has_indirect`].
    #[inline(always)]
    pub(crate) fn rows_tile(
        &self,
        a: &[u32],
        rows: &[usize; MR],
        koff: &[usize],
        p: usize,
        tile: &mut Tile,
    ) {
        let b = self.indirect_panel(koff, p);
        (self.rows)(a, rows, koff, b, &mut tile.0);
    }

    /// The column terms of (K1) for the activations' zero point (`−za·Σw` with zero weight
    /// zero points), padded to whole panels.
    pub(crate) fn column_terms(&self) -> &[i32] {
        &self.colterm
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
