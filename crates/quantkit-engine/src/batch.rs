//! Whole-image chunks of a batch: how [`Plan::run`] spreads a large batch over the threads.
//!
//! Splitting inside each kernel (rows, tiles, panels: `quantkit_kernels::par`) is what
//! makes batch 1 use two cores, but at a large batch of large images every step then
//! streams the whole batch's activations through memory (64 PP-OCR pages: 59 MB of codes
//! for one 240×240×16 tensor), every step ends in a fork/join, and the steps that do not
//! split (or split badly: small layers, layout steps) leave a core idle. When every step of
//! the plan computes each image from that image alone ([`image_separable`]), the batch is
//! instead cut into *chunks* of whole images, each chunk runs the whole plan (its
//! activations stay in cache), and the chunks are spread over the pool's threads, each
//! thread running its kernels unsplit (`par::serial`).
//!
//! The rule, documented in docs/kernels.md ("Threads at batch > 1"):
//!
//! ```text
//! b      = clamp(⌊CHUNK_INPUT_ELEMS / input elements per image⌋, 1, N)   images per chunk
//! chunks = ⌈N / b⌉ (sizes differing by at most one image)
//! ```
//!
//! `chunks = 1` (small images: lenet, the conv net, whose kernels are tuned for the whole
//! batch) runs the plan as before. Otherwise the chunks run in parallel, one per worker at
//! a time, when `threads ≥ 2` and `chunks ≥ threads` and the chunks divide evenly among
//! the threads or are many (`chunks % threads == 0 || chunks ≥ 4·threads`); else one after
//! another, each splitting its kernels as at batch 1. The chunk count never depends on the
//! thread count, and every step computes each image alone, so the outputs are the same
//! bytes for any thread count (`tests/batch_chunks.rs`).
//!
//! `QUANTKIT_BATCH_CHUNK` overrides `b`: `off` runs the whole batch as one chunk (the
//! kernels split it, as before), a number sets the images per chunk; [`set_batch_chunk`]
//! does the same for a process (tests, benchmarks).

use crate::error::Result;
use crate::Plan;
use quantkit_graph::OpKind;
use quantkit_graph::{Node, Tensor};
use quantkit_kernels::par;
use rayon::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Input elements per chunk the rule aims at: 1 MiB of f32 input. Measured on the PP-OCRv4
/// detector (docs/kernels.md, "Threads at batch > 1"): one 480×480 page (691,200 input
/// elements) per chunk; small images (lenet 784, the conv net 3,072 elements) stay one
/// chunk at batch 64.
pub const CHUNK_INPUT_ELEMS: usize = 1 << 18;

/// How a batch is cut into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchChunk {
    /// The rule of the module docs.
    Auto,
    /// The whole batch as one chunk: the kernels split it.
    Off,
    /// This many images per chunk (at least 1).
    Images(usize),
}

/// Runs [`run_chunked`] made in parallel or in sequence, since the process started.
static CHUNKED: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// How many [`Plan::run`] calls ran their batch in chunks since the process started:
/// `(in parallel, one after another)`. Tests check that a chunked run they rely on
/// happened.
pub fn chunked_runs() -> (usize, usize) {
    (
        CHUNKED[0].load(Ordering::Relaxed),
        CHUNKED[1].load(Ordering::Relaxed),
    )
}

/// `0`: unset; `1`: auto; `2`: off; `n + 3`: `Images(n)`.
static OVERRIDE: AtomicUsize = AtomicUsize::new(0);

fn encode(c: BatchChunk) -> usize {
    match c {
        BatchChunk::Auto => 1,
        BatchChunk::Off => 2,
        BatchChunk::Images(n) => n.max(1).saturating_add(3),
    }
}

/// Sets the chunking for the whole process; `None` returns to `QUANTKIT_BATCH_CHUNK` or
/// [`BatchChunk::Auto`]. Outputs do not depend on it, only speed and memory.
pub fn set_batch_chunk(c: Option<BatchChunk>) {
    OVERRIDE.store(c.map_or(0, encode), Ordering::Relaxed);
}

/// The chunking in force: [`set_batch_chunk`], else `QUANTKIT_BATCH_CHUNK` (`auto`, `off`
/// or images per chunk; read once, an unparsable value is reported once on stderr and
/// ignored), else [`BatchChunk::Auto`].
pub fn batch_chunk() -> BatchChunk {
    let v = OVERRIDE.load(Ordering::Relaxed);
    let decode = |v: usize| match v {
        2 => BatchChunk::Off,
        n if n >= 3 => BatchChunk::Images(n - 3),
        _ => BatchChunk::Auto,
    };
    if v != 0 {
        return decode(v);
    }
    static ENV: OnceLock<BatchChunk> = OnceLock::new();
    *ENV.get_or_init(|| match std::env::var("QUANTKIT_BATCH_CHUNK") {
        Ok(s) => match s.trim() {
            "auto" | "" => BatchChunk::Auto,
            "off" => BatchChunk::Off,
            n => match n.parse::<usize>() {
                Ok(n) if n >= 1 => BatchChunk::Images(n),
                _ => {
                    eprintln!(
                        "quantkit: QUANTKIT_BATCH_CHUNK={s:?} is not auto, off or a number of \
                         images ≥ 1; using auto"
                    );
                    BatchChunk::Auto
                }
            },
        },
        Err(_) => BatchChunk::Auto,
    })
}

/// Whether a graph operator computes each image (index along axis 0) from that image of
/// its inputs alone, given its constant inputs (`None`: computed at run time or omitted).
/// Conservative: an operator or attribute not known to keep images apart is `false`.
pub(crate) fn graph_op_per_image(node: &Node, consts: &[Option<&Tensor>]) -> bool {
    let Some(kind) = node.kind() else {
        return false;
    };
    let int = |name: &str, default: i64| node.attr_int(name, default).ok();
    let ints = |i: usize| -> Option<Vec<i64>> {
        let t = consts.get(i).copied().flatten()?;
        (t.data.len() == t.len()).then(|| t.to_i64_vec())
    };
    let absent = |i: usize| {
        node.inputs.get(i).is_none_or(|s| s.is_empty())
            || consts
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|t| t.is_empty())
    };
    match kind {
        // Per-tensor parameters, or per-channel along an axis other than the batch.
        OpKind::QuantizeLinear | OpKind::DequantizeLinear => {
            let per_tensor = consts
                .get(1)
                .copied()
                .flatten()
                .is_some_and(|s| s.len() == 1);
            per_tensor || int("axis", 1).is_some_and(|a| a >= 1)
        }
        OpKind::Conv
        | OpKind::ConvTranspose
        | OpKind::MaxPool
        | OpKind::AveragePool
        | OpKind::GlobalAveragePool
        | OpKind::GlobalMaxPool
        | OpKind::BatchNormalization
        | OpKind::Identity => true,
        OpKind::Concat | OpKind::Flatten => int("axis", 1).is_some_and(|a| a >= 1),
        OpKind::Transpose => node
            .attr_ints("perm")
            .ok()
            .flatten()
            .is_some_and(|p| p.first() == Some(&0)),
        // Scales that keep the batch, and no sizes.
        OpKind::Resize => {
            let scales = consts.get(2).copied().flatten();
            scales.is_some_and(|s| s.to_f32_vec().first() == Some(&1.0)) && absent(3)
        }
        // Slices on named axes other than the batch.
        OpKind::Slice => {
            ints(3).is_some_and(|axes| !axes.is_empty() && axes.iter().all(|&a| a >= 1))
        }
        // No padding before or after the batch, on all axes.
        OpKind::Pad => {
            absent(3) && ints(1).is_some_and(|p| p.len() >= 2 && p[0] == 0 && p[p.len() / 2] == 0)
        }
        _ => {
            let f = node.facts();
            f.elementwise && !f.random
        }
    }
}

/// The chunks (ranges of images) [`Plan::run`] cuts this batch into, or `None` to run it
/// whole: one chunk, inputs of different batch sizes, an input whose declared batch is
/// fixed (or that the batch does not fit), a step not known to keep images apart, or
/// inputs not stored one element per value.
pub(crate) fn plan_chunks(
    plan: &Plan,
    inputs: &[(String, Tensor)],
) -> Option<Vec<std::ops::Range<usize>>> {
    let mode = batch_chunk();
    if mode == BatchChunk::Off {
        return None;
    }
    let first = inputs.first()?;
    let n = *first.1.shape.first()?;
    if n < 2 {
        return None;
    }
    let mut per_image = 0usize;
    for (name, t) in inputs {
        if t.shape.first() != Some(&n) || t.data.len() != t.len() {
            return None;
        }
        // The whole batch must fit the declared input (a model declaring batch 1 refuses
        // 64 images, even though each chunk of one would pass): the whole run reports it.
        let declared = plan.inputs.iter().find(|(vi, _)| &vi.name == name);
        if declared.is_none_or(|(vi, _)| crate::check_input(vi, t).is_err()) {
            return None;
        }
        // A batch the model fixes (a known first dimension) is not cut: chunks would not
        // fit the declaration, and a fixed batch may be one the graph mixes.
        let fixed = declared
            .and_then(|(vi, _)| vi.shape.as_ref())
            .and_then(|s| s.first())
            .is_some_and(|d| matches!(d, quantkit_graph::Dim::Known(_)));
        if fixed {
            return None;
        }
        per_image += t.len() / n;
    }
    let b = match mode {
        BatchChunk::Images(b) => b,
        _ => (CHUNK_INPUT_ELEMS / per_image.max(1)).max(1),
    }
    .min(n);
    let chunks = n.div_ceil(b);
    if chunks < 2 || !plan.image_separable() {
        return None;
    }
    Some((0..chunks).map(|c| par::task_range(c, chunks, n)).collect())
}

/// Whether chunks run in parallel on `threads` workers (module docs).
pub(crate) fn parallel(chunks: usize, threads: usize) -> bool {
    threads >= 2 && chunks >= threads && (chunks.is_multiple_of(threads) || chunks >= 4 * threads)
}

/// Runs `plan` on `inputs` chunk by chunk and stacks the outputs along axis 0; `None` when
/// an output of a chunk does not have the chunk's images along axis 0 (the plan did not
/// keep images apart after all: the caller runs the whole batch).
pub(crate) fn run_chunked(
    plan: &Plan,
    inputs: &[(String, Tensor)],
    chunks: &[std::ops::Range<usize>],
) -> Result<Option<Vec<(String, Tensor)>>> {
    let one = |r: &std::ops::Range<usize>| -> Result<Vec<(String, Tensor)>> {
        let x: Vec<(String, Tensor)> = inputs
            .iter()
            .map(|(name, t)| (name.clone(), t.slice_rows(r.clone())))
            .collect();
        plan.run_inner(x, None)
    };
    let par = parallel(chunks.len(), rayon::current_num_threads());
    CHUNKED[usize::from(!par)].fetch_add(1, Ordering::Relaxed);
    let outs: Vec<Result<Vec<(String, Tensor)>>> = if par {
        chunks
            .par_iter()
            .with_max_len(1)
            .map(|r| par::serial(|| one(r)))
            .collect()
    } else {
        chunks.iter().map(one).collect()
    };
    let outs = outs.into_iter().collect::<Result<Vec<_>>>()?;
    let Some(first) = outs.first() else {
        return Ok(None);
    };
    let mut stacked = Vec::with_capacity(first.len());
    for k in 0..first.len() {
        let parts: Vec<&Tensor> = outs.iter().map(|o| &o[k].1).collect();
        let rows_fit = parts
            .iter()
            .zip(chunks)
            .all(|(t, r)| t.shape.first() == Some(&r.len()));
        let Some(t) = Tensor::stack_rows(&parts).filter(|_| rows_fit) else {
            return Ok(None);
        };
        stacked.push((first[k].0.clone(), t));
    }
    Ok(Some(stacked))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_only_when_chunks_balance() {
        assert!(!parallel(8, 1));
        assert!(parallel(2, 2));
        assert!(parallel(4, 2));
        assert!(!parallel(3, 2));
        assert!(parallel(9, 2));
        assert!(!parallel(1, 2));
    }

    #[test]
    fn slices_are_whole_images() {
        let t = Tensor::from_f32(&[3, 2], vec![0., 1., 2., 3., 4., 5.]);
        let s = t.slice_rows(1..3);
        assert_eq!(s.shape, vec![2, 2]);
        assert_eq!(s.as_f32().unwrap(), &[2., 3., 4., 5.]);
    }
}
