//! When a kernel call splits its work across rayon tasks, and into how many.
//!
//! Every kernel splits its output (pixels, rows, Winograd bands, column panels), never a
//! reduction: each output element is computed by one task with the same instruction
//! sequence whatever the split, so results are bit-identical for any thread count. What
//! this module decides is only whether a split pays. A fork/join costs a few microseconds
//! (the other workers must be woken, and the caller waits for the slowest task), so a call
//! runs on one thread unless its estimated work gives every task at least
//! [`min_task_ns`] nanoseconds. The estimate comes from the conv cost model (`conv::algo`,
//! nanoseconds per output pixel on one core) or from a per-element cost (max pooling, and
//! the element-wise loops of the engine's table, binary and pooling steps, which split
//! their output into contiguous chunks with [`for_chunks`]).
//!
//! [`MIN_TASK_NS`] was chosen from `examples/fork_join.rs` (docs/kernels.md, "Threads at
//! batch 1"); `QUANTKIT_MIN_TASK_NS` or [`set_min_task_ns`] overrides it (0 splits every
//! call that has more than one unit of work, which the thread tests use to run every split
//! path on small models).
//!
//! [`split_calls`] counts the calls that did split, per kind of kernel, so a test can
//! check that a split it relies on happened.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;

/// Least estimated work of one task, in nanoseconds. `examples/fork_join.rs` on the
/// 2-core AVX-512 VNNI VM (docs/kernels.md, "Threads at batch 1") measured a fork/join of
/// two tasks at 1–2 µs over the ideal when the other worker is spinning and 7–9 µs when
/// it has to be woken: at 10 µs per task a split at the threshold breaks even in the
/// worst case and saves ~40 % in the common one (the engine's steps run back to back).
pub const MIN_TASK_NS: f64 = 10_000.0;

/// Tasks per worker when the work is large: enough for rayon to balance uneven tasks (and
/// a busy core on a shared machine), few enough that each keeps its data in cache.
pub const TASKS_PER_THREAD: usize = 4;

/// The kinds of kernel calls [`split_calls`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitKind {
    /// The int8 GEMM (im2col convs, 1×1 convs, Gemm/MatMul): blocks of rows or columns.
    Gemm,
    /// Winograd: chunks of bands (two output rows), or of column panels when there are
    /// too few bands.
    Winograd,
    /// The direct `vpdpbusd` conv: runs of register tiles or pooled rows.
    Direct,
    /// The few-channel conv fused with its max pool: pooled output rows.
    PooledRows,
    /// Depthwise: output rows.
    Depthwise,
    /// Max pooling: output rows.
    Pool,
    /// The non-overlapping transposed conv (`deconv` blocks): input rows.
    Deconv,
    /// Element-wise loops ([`for_chunks`]): tables, binary operators, pools on codes.
    Eltwise,
}

const KINDS: usize = 8;

impl SplitKind {
    /// Every kind, in [`split_calls`] order.
    pub const ALL: [SplitKind; KINDS] = [
        SplitKind::Gemm,
        SplitKind::Winograd,
        SplitKind::Direct,
        SplitKind::PooledRows,
        SplitKind::Depthwise,
        SplitKind::Pool,
        SplitKind::Deconv,
        SplitKind::Eltwise,
    ];
}

static SPLITS: [AtomicUsize; KINDS] = [const { AtomicUsize::new(0) }; KINDS];

/// How many calls of `kind` ran on more than one task since the process started.
pub fn split_calls(kind: SplitKind) -> usize {
    SPLITS[kind as usize].load(Ordering::Relaxed)
}

/// `f64::to_bits` of the override, `u64::MAX` when unset.
static OVERRIDE: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets the least work per task (ns) for the whole process; `None` returns to
/// `QUANTKIT_MIN_TASK_NS` or [`MIN_TASK_NS`]. Results do not depend on it, only speed.
pub fn set_min_task_ns(ns: Option<f64>) {
    let bits = ns.map_or(u64::MAX, |v| v.max(0.0).to_bits());
    OVERRIDE.store(bits, Ordering::Relaxed);
}

/// The least work per task in force: [`set_min_task_ns`], else `QUANTKIT_MIN_TASK_NS`
/// (read once; an unparsable value is reported once on stderr and ignored), else
/// [`MIN_TASK_NS`].
pub fn min_task_ns() -> f64 {
    let bits = OVERRIDE.load(Ordering::Relaxed);
    if bits != u64::MAX {
        return f64::from_bits(bits);
    }
    static ENV: OnceLock<f64> = OnceLock::new();
    *ENV.get_or_init(|| match std::env::var("QUANTKIT_MIN_TASK_NS") {
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(ns) if ns >= 0.0 => ns,
            _ => {
                eprintln!("quantkit: QUANTKIT_MIN_TASK_NS={v:?} is not a number of ns ≥ 0; using {MIN_TASK_NS}");
                MIN_TASK_NS
            }
        },
        Err(_) => MIN_TASK_NS,
    })
}

thread_local! {
    /// Depth of [`serial`] calls on this thread.
    static SERIAL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f` with every kernel call it makes on this thread kept on one task ([`tasks`]
/// returns 1): for a caller that already gives each worker its own share of the work
/// (the engine's whole-image chunks of a batch, `quantkit-engine`'s `batch` module), where
/// a second level of splitting would only add fork/join waits. Results do not depend on
/// it, only speed.
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(s.get() - 1));
        }
    }
    SERIAL.with(|s| s.set(s.get() + 1));
    let _restore = Restore;
    f()
}

/// Whether this thread is inside [`serial`].
pub fn in_serial() -> bool {
    SERIAL.with(|s| s.get() > 0)
}

/// Into how many tasks to split `units` independent units of work (rows, tiles, panels)
/// that together cost about `work_ns` on one core: 1 on a one-thread pool, inside
/// [`serial`], or when a task would get less than [`min_task_ns`]; otherwise as many as
/// the work pays for, at most [`TASKS_PER_THREAD`] per worker and at most `units`.
pub fn tasks(work_ns: f64, units: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads <= 1 || units <= 1 || in_serial() {
        return 1;
    }
    let min = min_task_ns();
    let by_work = if min <= 0.0 {
        usize::MAX
    } else {
        (work_ns / min).floor().min(usize::MAX as f64) as usize
    };
    by_work.min(TASKS_PER_THREAD * threads).min(units).max(1)
}

/// Runs `f(task)` for `task in 0..n`: serially when `n ≤ 1`, else on the caller's rayon
/// pool, counting the call as a split of `kind`.
pub fn for_tasks(kind: SplitKind, n: usize, f: impl Fn(usize) + Sync + Send) {
    if n <= 1 {
        (0..n).for_each(f);
    } else {
        note(kind);
        (0..n).into_par_iter().for_each(f);
    }
}

/// Counts a split of `kind` made by a caller that runs its own parallel loop.
pub(crate) fn note(kind: SplitKind) {
    SPLITS[kind as usize].fetch_add(1, Ordering::Relaxed);
}

/// Elements per unit of [`for_chunks`]: chunks are whole multiples of it (a few pages of
/// codes, so tasks never share a cache line and vector loops run full).
pub const CHUNK_ELEMS: usize = 4096;

/// Runs `f(offset, chunk)` over `out` in contiguous chunks: the whole slice on one thread
/// unless `out.len() · ns_per_elem` gives each task at least [`min_task_ns`], else one
/// chunk per task on the caller's rayon pool, counted as a split of `kind`. Chunks are
/// whole multiples of a unit of about [`CHUNK_ELEMS`] elements rounded up to a multiple of
/// `align` (a pixel's channels, a plane), so `offset` is a multiple of `align`. `f` must
/// compute each element from its index alone, so the result does not depend on the split.
pub fn for_chunks<T: Send>(
    kind: SplitKind,
    out: &mut [T],
    ns_per_elem: f64,
    align: usize,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    let len = out.len();
    let unit = CHUNK_ELEMS.div_ceil(align.max(1)) * align.max(1);
    let n = tasks(len as f64 * ns_per_elem, len.div_ceil(unit));
    if n <= 1 {
        f(0, out);
        return;
    }
    note(kind);
    let size = len.div_ceil(unit).div_ceil(n) * unit;
    out.par_chunks_mut(size)
        .enumerate()
        .for_each(|(i, chunk)| f(i * size, chunk));
}

/// The range of units of task `t` of `n` over `units` units: contiguous, sizes differing
/// by at most one.
pub fn task_range(t: usize, n: usize, units: usize) -> std::ops::Range<usize> {
    let (q, r) = (units / n, units % n);
    let start = t * q + t.min(r);
    start..start + q + usize::from(t < r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ranges_cover_the_units_once() {
        for units in 0..40 {
            for n in 1..10 {
                let mut next = 0;
                for t in 0..n {
                    let r = task_range(t, n, units);
                    assert_eq!(r.start, next);
                    assert!(r.len() + 1 >= units / n && r.len() <= units / n + 1);
                    next = r.end;
                }
                assert_eq!(next, units);
            }
        }
    }

    #[test]
    fn chunks_cover_the_output_once_on_any_pool() {
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for len in [0, 1, CHUNK_ELEMS - 1, CHUNK_ELEMS, 5 * CHUNK_ELEMS + 7] {
                let mut v = vec![0usize; len];
                pool.install(|| {
                    for_chunks(SplitKind::Eltwise, &mut v, 1e6, 3, |off, c| {
                        assert_eq!(off % 3, 0);
                        for (i, x) in c.iter_mut().enumerate() {
                            *x += off + i + 1;
                        }
                    })
                });
                assert!(
                    v.iter().enumerate().all(|(i, &x)| x == i + 1),
                    "{threads} {len}"
                );
            }
        }
    }

    #[test]
    fn one_thread_never_splits_and_small_work_stays_whole() {
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        one.install(|| assert_eq!(tasks(1e12, 1000), 1));
        let two = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        two.install(|| {
            let min = min_task_ns();
            if min <= 0.0 {
                eprintln!("skipping the threshold checks: QUANTKIT_MIN_TASK_NS=0");
                return;
            }
            assert_eq!(tasks(min * 1.5, 1000), 1);
            assert_eq!(tasks(min * 2.0, 1000), 2);
            assert_eq!(tasks(min * 1000.0, 1000), 2 * TASKS_PER_THREAD);
            assert_eq!(tasks(min * 1000.0, 3), 3);
            assert_eq!(tasks(min * 1000.0, 1), 1);
        });
    }
}
