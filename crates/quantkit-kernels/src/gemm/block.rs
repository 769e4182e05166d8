//! Blocking and threading of one GEMM call: tasks of row-panel × column-panel blocks on
//! the caller's rayon pool, each packing (or reusing) its activations and running the
//! micro-kernel and the tile store.

use rayon::prelude::*;

use super::activations::Activations;
use super::geometry::{PanelGeometry, Tile, TILE};
use super::pack::{pack_a_panel, PackedA};
use super::sink::{write_tile, Epilogue, Sink, TilePos};
use super::weights::PackedWeights;
use crate::dispatch::Mmm;
use crate::output::QuantType;
use crate::par::{self, SplitKind};

/// The blocking of one call: tasks of `mc` row panels × `nc` column panels, at least
/// `want` tasks when the panels allow it.
fn blocking(
    geom: PanelGeometry,
    m_panels: usize,
    n_panels: usize,
    kgroups: usize,
    want: usize,
) -> (usize, usize) {
    // The A block of a task (mc panels, ~128 KiB) and its B block (nc panels, ~256 KiB)
    // stay in L2; one B panel (kgroups·nr·kgroup bytes, 32 KiB at K = 2048 for AVX2 and
    // K = 1024 for VNNI) stays in L1 across the row panels.
    let mut mc = (128 * 1024 / (kgroups * geom.mr * 4)).clamp(1, m_panels);
    let mut nc = (256 * 1024 / (kgroups * geom.nr * geom.kgroup)).clamp(1, n_panels);
    if want > 1 {
        if m_panels >= want {
            // Rows first (a conv at batch 1: M = pixels): each task packs its own rows
            // and the whole A is never packed up front.
            mc = mc.min(m_panels.div_ceil(want));
        }
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

/// MACs per nanosecond of one core the micro-kernels of `geom` sustain (the `R_u8` rates
/// of the conv cost model, `conv::algo`): the GEMM's work estimate for [`par::tasks`].
fn macs_per_ns(geom: PanelGeometry) -> f64 {
    if geom.kgroup == crate::gemm::VNNI_KGROUP {
        220.0
    } else {
        84.0
    }
}

pub(super) fn run<T: QuantType>(
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
    let m_panels = a.m.div_ceil(geom.mr);
    let work_ns = (a.m * w.n * w.k) as f64 / macs_per_ns(geom);
    let want = par::tasks(work_ns, m_panels * w.n_panels);
    let parallel = want > 1;
    let (mc, nc) = blocking(geom, m_panels, w.n_panels, w.kgroups, want);
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
        par::note(SplitKind::Gemm);
        (0..ntasks).into_par_iter().for_each_init(new_buf, task);
    } else {
        let mut buf = new_buf();
        (0..ntasks).for_each(|t| task(&mut buf, t));
    }
}
