//! Running a Winograd conv (`crate::winograd`): the checks of its exactness bound and the
//! parallel chunks of bands, with the table's Winograd kernels.

use super::params::{ActElem, ConvParams, NhwcInput};
use crate::dispatch::Kernels;
use crate::error::{KernelError, Result};
use crate::gemm::TileWriter;
use crate::output::QuantType;
use crate::par::{self, SplitKind};
use crate::winograd::{self, WinogradConv, WinogradWeights};

/// Tiles per parallel chunk of the Winograd path: enough 6-row blocks to amortise the
/// 16 weight panels, few enough that the transformed input (`16·tiles·C_in` i16) stays in L2.
pub(super) const WINOGRAD_TILES: usize = 48;

/// The Winograd call of `x` (output `oh × ow`, or its 2×2 max pool when `pool`), after
/// checking what its exactness bound assumes.
pub(super) fn winograd_call<'a, T: ActElem>(
    x: &'a NhwcInput<'a, T>,
    ww: &'a WinogradWeights,
    p: &ConvParams,
    oh: usize,
    ow: usize,
    pool: bool,
) -> Result<WinogradConv<'a, T>> {
    // The exactness bound assumes |x − za| ≤ 255, i.e. a zero point of the activation type
    // (as ONNX requires).
    if !(T::MIN..=T::MAX).contains(&x.zero_point) {
        return Err(KernelError::InvalidArgument {
            op: "conv2d",
            arg: "input zero point",
            reason: format!(
                "{} is outside the activation type's range {}..={}",
                x.zero_point,
                T::MIN,
                T::MAX
            ),
        });
    }
    Ok(if pool {
        WinogradConv::pooled(x, ww, p.pads, oh, ow)
    } else {
        WinogradConv::new(x, ww, p.pads, oh, ow)
    })
}

/// Runs a Winograd call into `writer` with the kernels of `k`: chunks of whole bands,
/// about [`WINOGRAD_TILES`] tiles each; with several threads and `work_ns` (the call's
/// estimated time on one core) worth splitting, as many chunks as [`par::tasks`] allows,
/// and when there are fewer bands than tasks (a small image at batch 1), each band's
/// column panels split too (each such task redoes its band's input transform, which
/// costs `C_in/C_out` of its GEMMs' share at most).
pub(super) fn run_winograd<T: ActElem, O: QuantType>(
    k: &Kernels,
    wc: &WinogradConv<'_, T>,
    writer: &TileWriter<'_, O>,
    work_ns: f64,
) {
    thread_local! {
        /// Per-thread buffers, kept across calls: growing them zeroes memory, reusing does not.
        static SCRATCH: std::cell::RefCell<winograd::Scratch> = Default::default();
    }
    let (wino, i16) = (k.winograd(), k.i16());
    let bands = wc.band_count();
    let panels = wc.panel_count();
    let per_chunk = (WINOGRAD_TILES / wc.tiles_per_band().max(1)).max(1);
    let tasks = par::tasks(work_ns, bands * panels);
    // Band chunks × panel groups.
    let (chunks, groups) = if tasks <= 1 {
        (bands.div_ceil(per_chunk), 1)
    } else if bands >= tasks {
        (bands.div_ceil(per_chunk).max(tasks), 1)
    } else {
        (bands, tasks.div_ceil(bands).min(panels))
    };
    let run = |t: usize| {
        let (c, g) = (t / groups, t % groups);
        let range = par::task_range(c, chunks, bands);
        let cols = par::task_range(g, groups, panels);
        // `bands` starts no parallel work, so the borrow is never re-entered.
        SCRATCH.with_borrow_mut(|s| {
            // SAFETY: the caller sized the writer's output for the call (checked shapes),
            // and the tasks' (band range, panel range) pairs are disjoint.
            unsafe { wc.bands(wino, i16, range, cols, s, writer) }
        })
    };
    if tasks <= 1 {
        (0..chunks * groups).for_each(run);
    } else {
        par::for_tasks(SplitKind::Winograd, chunks * groups, run);
    }
}
