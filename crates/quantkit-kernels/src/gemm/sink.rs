//! What a register tile becomes: the zero-point corrections (K1), the column terms, and the
//! output stage through the table's stores (or the scalar fixed-point stage).

use super::activations::Activations;
use super::geometry::{Tile, NR, TILE};
use super::weights::PackedWeights;
use crate::dispatch::{Kernels, StoreFloatFn, StoreI32Fn, Stores};
use crate::output::{OutputStage, QuantType, Requant};

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

/// Raw pointer to the output that tasks write disjoint blocks of.
#[derive(Clone, Copy)]
pub(super) struct OutPtr<T>(pub(super) *mut T);
// SAFETY: tasks write disjoint (row, column) blocks of the output, and the pointer outlives
// the parallel region (it borrows the caller's `&mut [T]` for the whole call).
unsafe impl<T: Send> Send for OutPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for OutPtr<T> {}

/// What the epilogue writes.
pub(super) enum Sink<'a, T> {
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
    pub(super) fn i32(out: *mut i32, stores: &Stores) -> Self {
        Sink::I32 {
            out: OutPtr(out),
            store: stores.i32,
        }
    }

    /// The sink that applies `stage` to `n` output columns (padded to `npad`) and writes
    /// quantized values through `out`: float requantization with its scales expanded per
    /// padded column (with `stores`), or the generic per-value stage.
    pub(super) fn quantized(
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
pub(super) struct TilePos<'a> {
    pub(super) rowsums: &'a [i32],
    pub(super) r0: usize,
    pub(super) rows: usize,
    pub(super) c0: usize,
    pub(super) cols: usize,
    pub(super) ldc: usize,
}

/// Writes a tile of `nr` columns through `sink` (the table's stores, or the scalar
/// fixed-point stage).
// Tile rows and output columns are indexed together; iterators would obscure that.
#[allow(clippy::needless_range_loop)]
pub(super) fn write_tile<T: QuantType>(
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

    /// Adds `terms[j]` to column `j`'s sums before the stage (a caller's zero-point term).
    pub(crate) fn add_column_terms(&mut self, terms: &[i32]) {
        for (c, &t) in self.colterm.iter_mut().zip(terms) {
            *c = c.wrapping_add(t);
        }
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

/// Column terms of (K1): `−za·Σw[j] + K·za·zw[j]` (+ `bias[j]`), padded.
pub(super) fn column_terms(
    a: &Activations<'_>,
    w: &PackedWeights,
    bias: Option<&[i32]>,
) -> Vec<i32> {
    column_terms_za(a.stored_zero_point(), w, bias)
}

/// [`column_terms`] for activations with stored zero point `za`.
pub(super) fn column_terms_za(za: i32, w: &PackedWeights, bias: Option<&[i32]>) -> Vec<i32> {
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
