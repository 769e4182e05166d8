//! `quantkit quantize --target METRIC=VALUE` and `--config FILE`: automatic mixed precision
//! (issue 18). The search itself is `quantkit_ptq::mixed`; this module loads the data, picks
//! the evaluation samples, writes the model and the configuration, and measures the size and
//! speed cost of the choice on the integer engine.

use super::progress::{Mode, Progress};
use super::quantize::Args;
use anyhow::Context;
use quantkit_data::{BatchOptions, DataSource, OpenOptions};
use quantkit_graph::{Dim, Graph, Tensor};
use quantkit_ptq::analyze::Stage;
use quantkit_ptq::analyze::{Feed, Setup};
use quantkit_ptq::mixed::{
    bonferroni_level, confirm_with, fmt_level, search, Accepted, ConfirmEvent, ConfirmOptions,
    Evaluation, Measured, Metric, MixedConfig, Phase, Precision, SearchEvent, SearchOptions,
    SearchResult, SearchStage, Step, Target, RANKING_SAMPLES,
};
use quantkit_ptq::{Format, PtqConfig};
use std::path::Path;

/// Calibration samples held in memory by `--target`/`--config` when `--calib-samples` is
/// not given.
pub const DEFAULT_CALIB_SAMPLES: usize = 1000;

/// Samples read from one file: feeds (one per batch) with their labels when the source has
/// them.
struct Loaded {
    feeds: Vec<Feed>,
    labels: Option<Vec<i64>>,
}

impl Loaded {
    fn empty() -> Self {
        Loaded {
            feeds: Vec::new(),
            labels: None,
        }
    }
}

/// A calibration file split into the samples calibrated on and the samples held out.
struct Split {
    calib: Loaded,
    held: Loaded,
    /// Indices (in the file) of the held-out samples, in feed order.
    held_samples: Vec<usize>,
    /// How the split was made, for the report.
    how: String,
}

/// Feeds of `path` (up to `limit` samples) with their labels when the source has them; with
/// `hold = Some(fraction)`, split into calibration and held-out samples
/// ([`held_out_picks`] over the samples of the file, so held-out samples interleave with
/// calibration samples: every fourth for 0.25). `None` in the split when the file has too
/// few samples (or batches of the model's fixed size) for both parts.
fn load(
    graph: &Graph,
    path: &Path,
    opts: &OpenOptions,
    limit: usize,
    batch: usize,
    hold: Option<f64>,
) -> anyhow::Result<(Loaded, Option<Split>)> {
    let mut data: DataSource = quantkit_ptq::open_data_for_graph(graph, path, opts)
        .with_context(|| format!("opening data {}", path.display()))?;
    let batch = batch.max(1);
    if let DataSource::Named(named) = &mut data {
        let read = |runs: &mut dyn Iterator<Item = quantkit_data::Result<quantkit_data::Run>>| {
            let mut feeds = Vec::new();
            for run in runs {
                let run = run.with_context(|| format!("reading {}", path.display()))?;
                feeds.push(quantkit_ptq::run_tensors(run)?);
            }
            anyhow::Ok(feeds)
        };
        if let (Some(f), quantkit_data::feed::Layout::Stacked { samples, chunk }) =
            (hold, named.layout())
        {
            // Samples stacked on a batch axis: pick them one by one.
            let total = samples.min(limit);
            let pick = held_out_picks(total, f);
            let mut held: Vec<usize> = (0..total).filter(|&i| pick[i]).collect();
            let mut kept: Vec<usize> = (0..total).filter(|&i| !pick[i]).collect();
            let b = chunk.unwrap_or(batch);
            if chunk.is_some() {
                // A fixed batch size takes whole batches only.
                held.truncate(held.len() - held.len() % b);
                kept.truncate(kept.len() - kept.len() % b);
            }
            if !held.is_empty() && !kept.is_empty() {
                let groups = |v: &[usize]| v.chunks(b).map(<[usize]>::to_vec).collect();
                let calib = read(&mut named.runs_of(groups(&kept))?)?;
                let held_feeds = read(&mut named.runs_of(groups(&held))?)?;
                let how = format!(
                    "every {} of the file's samples, interleaved with the {} calibrated on",
                    every(f),
                    kept.len()
                );
                return Ok((
                    Loaded::empty(),
                    Some(Split {
                        calib: Loaded {
                            feeds: calib,
                            labels: None,
                        },
                        held: Loaded {
                            feeds: held_feeds,
                            labels: None,
                        },
                        held_samples: held,
                        how,
                    }),
                ));
            }
        }
        let feeds = read(&mut named.runs(batch, Some(limit))?)?;
        if feeds.is_empty() {
            anyhow::bail!("{}: no samples", path.display());
        }
        // Runs of separate arrays (`NAME__K`): the run is the unit that can be held out.
        if let Some(f) = hold.filter(|_| feeds.len() >= 2) {
            return Ok((Loaded::empty(), split_runs(feeds, f)));
        }
        return Ok((
            Loaded {
                feeds,
                labels: None,
            },
            None,
        ));
    }
    let (input, declared) = quantkit_ptq::calibrate::calibration_input(graph)?;
    let fixed = match declared.as_ref().and_then(|d| d.first()) {
        Some(Dim::Known(m)) if *m > 0 => Some(*m),
        _ => None,
    };
    let mut feeds = Vec::new();
    let mut labels: Option<Vec<i64>> = Some(Vec::new());
    let mut seen = 0usize;
    for b in data.batches(&BatchOptions {
        batch_size: fixed.unwrap_or(batch),
        limit: matches!(data, DataSource::Samples(_)).then_some(limit),
        ..BatchOptions::default()
    })? {
        let mut b = b.with_context(|| format!("reading {}", path.display()))?;
        if seen >= limit {
            break;
        }
        if b.data.iter().any(|v| !v.is_finite()) {
            anyhow::bail!("{}: non-finite input value", path.display());
        }
        if fixed.is_some_and(|m| b.shape.first() != Some(&m)) {
            continue; // a short last batch of a model with a fixed batch size
        }
        let n = b.shape.first().copied().unwrap_or(1);
        seen += n;
        match (&mut labels, b.labels.take()) {
            (Some(l), Some(mut got)) => {
                got.truncate(n);
                l.extend(got);
            }
            (l, _) => *l = None,
        }
        feeds.push(vec![(input.clone(), Tensor::from_f32(&b.shape, b.data))]);
    }
    if feeds.is_empty() {
        anyhow::bail!("{}: no samples", path.display());
    }
    let all = Loaded { feeds, labels };
    match hold.and_then(|f| split_rows(&all, &input, f, fixed.unwrap_or(batch), fixed)) {
        // The split holds copies of every sample: the file's batches are not kept.
        Some(split) => Ok((Loaded::empty(), Some(split))),
        None => Ok((all, None)),
    }
}

/// "4th" for a fraction 0.25: which sample of each run of `1/fraction` is held out.
fn every(fraction: f64) -> String {
    let k = 1.0 / fraction;
    if (k - k.round()).abs() < 1e-9 {
        let k = k.round() as u64;
        let suffix = match (k % 10, k % 100) {
            (1, x) if x != 11 => "st",
            (2, x) if x != 12 => "nd",
            (3, x) if x != 13 => "rd",
            _ => "th",
        };
        if k == 2 {
            "second".into()
        } else {
            format!("{k}{suffix}")
        }
    } else {
        format!("{k:.2}th (a share {fraction})")
    }
}

/// Splits single-input batches (batch axis first) into calibration and held-out samples
/// ([`held_out_picks`] over the samples), re-batched to `batch` (whole batches only when
/// the model fixes the batch size). `None` when either part would be empty.
fn split_rows(
    all: &Loaded,
    input: &str,
    fraction: f64,
    batch: usize,
    fixed: Option<usize>,
) -> Option<Split> {
    let mut rows: Vec<(Vec<usize>, &[f32])> = Vec::new();
    for feed in &all.feeds {
        let t = &feed.first()?.1;
        let v = t.as_f32()?;
        let n = t.shape.first().copied().unwrap_or(1).max(1);
        let inner: Vec<usize> = t.shape.get(1..).unwrap_or(&[]).to_vec();
        let len = v.len() / n;
        rows.extend(v.chunks(len.max(1)).map(|r| (inner.clone(), r)));
    }
    let total = rows.len();
    let pick = held_out_picks(total, fraction);
    let mut held: Vec<usize> = (0..total).filter(|&i| pick[i]).collect();
    let mut kept: Vec<usize> = (0..total).filter(|&i| !pick[i]).collect();
    if fixed.is_some() {
        held.truncate(held.len() - held.len() % batch);
        kept.truncate(kept.len() - kept.len() % batch);
    }
    if held.is_empty() || kept.is_empty() {
        return None;
    }
    let part = |idx: &[usize]| -> Loaded {
        let feeds = idx
            .chunks(batch)
            .map(|g| {
                let mut shape = vec![g.len()];
                shape.extend_from_slice(&rows[g[0]].0);
                let data: Vec<f32> = g.iter().flat_map(|&i| rows[i].1.iter().copied()).collect();
                vec![(input.to_string(), Tensor::from_f32(&shape, data))]
            })
            .collect();
        let labels = all
            .labels
            .as_ref()
            .map(|l| idx.iter().filter_map(|&i| l.get(i).copied()).collect());
        Loaded { feeds, labels }
    };
    Some(Split {
        calib: part(&kept),
        held: part(&held),
        how: format!(
            "every {} of the file's samples, interleaved with the {} calibrated on",
            every(fraction),
            kept.len()
        ),
        held_samples: held,
    })
}

/// Splits whole runs (feeds of separate arrays per run, whose samples cannot be picked one
/// by one) into calibration and held-out runs ([`held_out_picks`] over the runs).
fn split_runs(feeds: Vec<Feed>, fraction: f64) -> Option<Split> {
    if feeds.len() < 2 {
        return None;
    }
    let pick = held_out_picks(feeds.len(), fraction);
    let (mut kept, mut held, mut held_samples) = (Vec::new(), Vec::new(), Vec::new());
    let mut at = 0usize;
    for (feed, h) in feeds.into_iter().zip(&pick) {
        let n = samples(std::slice::from_ref(&feed));
        if *h {
            held_samples.extend(at..at + n);
            held.push(feed);
        } else {
            kept.push(feed);
        }
        at += n;
    }
    let how = format!(
        "{} of {} runs (separate arrays per run: the run is the unit; they are clusters of \
         samples if the runs are, which the confidence bound does not know), calibrated on the \
         other {}",
        held.len(),
        pick.len(),
        samples(&kept)
    );
    Some(Split {
        calib: Loaded {
            feeds: kept,
            labels: None,
        },
        held: Loaded {
            feeds: held,
            labels: None,
        },
        held_samples,
        how,
    })
}

/// Which of `n` items (samples of the calibration file) are held out for evaluation: a
/// share `fraction` of them, spread evenly (item `i` when `⌊(i+1)·f⌋ > ⌊i·f⌋`: every fourth
/// for 0.25), at least one, never all. Samples, not batches: data in a file is often
/// ordered (by class, source, directory, recording), so consecutive samples are alike; a
/// held-out batch is a cluster of similar samples, and the independent-sample confidence
/// bound overstates what a few clusters show. Every k-th sample interleaves the held-out
/// samples with the calibration samples through the whole file.
pub fn held_out_picks(n: usize, fraction: f64) -> Vec<bool> {
    let mut pick: Vec<bool> = (0..n)
        .map(|i| ((i + 1) as f64 * fraction).floor() > (i as f64 * fraction).floor())
        .collect();
    if n >= 2 && !pick.iter().any(|h| *h) {
        pick[n - 1] = true;
    }
    if n >= 2 && pick.iter().all(|h| *h) {
        pick[0] = false;
    }
    pick
}

/// The evaluation samples split into those the search measures and those kept to confirm
/// its choice (never run by the search).
struct ConfirmSplit {
    search: Loaded,
    confirm: Loaded,
    /// Indices (in the evaluation data, in order) of the confirmation samples.
    confirm_samples: Vec<usize>,
    how: String,
}

/// Splits evaluation data into search and confirmation samples: [`held_out_picks`] over
/// the samples (every second for 0.5), so both parts spread over the whole evaluation data.
/// Samples are rows of the batch axis, which every input of a feed must share (several rows
/// of an output per sample, the frames of a text line, stay together); batches are rebuilt
/// up to the size of the largest batch given, and with `fixed` (a model with a fixed batch
/// size) only whole batches are kept. Feeds whose inputs do not share a batch axis are split
/// whole. Labels, one per output row, follow their samples. `None` when a part is empty.
fn split_confirmation(all: Loaded, fraction: f64, fixed: bool) -> Option<ConfirmSplit> {
    let per_feed: Vec<Option<usize>> = all
        .feeds
        .iter()
        .map(|f| {
            let b = f.first()?.1.shape.first().copied()?;
            f.iter()
                .all(|(_, t)| t.shape.first() == Some(&b))
                .then_some(b)
        })
        .collect();
    let total = samples(&all.feeds);
    // Labels per sample (rows of the first output per sample).
    let per_label = match &all.labels {
        Some(l) if total > 0 && l.len() % total == 0 => Some(l.len() / total),
        Some(_) => return None,
        None => None,
    };
    let label_part = |idx: &[usize]| -> Option<Vec<i64>> {
        let (l, per) = (all.labels.as_ref()?, per_label?);
        Some(
            idx.iter()
                .flat_map(|&i| l[i * per..(i + 1) * per].iter().copied())
                .collect(),
        )
    };
    if per_feed.iter().any(Option::is_none) {
        // Whole feeds (per-run arrays).
        let pick = held_out_picks(all.feeds.len(), fraction);
        let (mut search, mut confirm) = (Vec::new(), Vec::new());
        let (mut s_idx, mut c_idx) = (Vec::new(), Vec::new());
        let mut at = 0;
        for (f, h) in all.feeds.iter().zip(&pick) {
            let n = samples(std::slice::from_ref(f));
            if *h {
                c_idx.extend(at..at + n);
                confirm.push(f.clone());
            } else {
                s_idx.extend(at..at + n);
                search.push(f.clone());
            }
            at += n;
        }
        if search.is_empty() || confirm.is_empty() {
            return None;
        }
        let how = format!(
            "{} of the {} evaluation runs (separate arrays per run: the run is the unit)",
            confirm.len(),
            pick.len()
        );
        return Some(ConfirmSplit {
            search: Loaded {
                feeds: search,
                labels: label_part(&s_idx),
            },
            confirm: Loaded {
                feeds: confirm,
                labels: label_part(&c_idx),
            },
            confirm_samples: c_idx,
            how,
        });
    }
    let batch = per_feed.iter().flatten().copied().max().unwrap_or(1).max(1);
    // (feed, row) of every sample, in order.
    let rows: Vec<(usize, usize)> = per_feed
        .iter()
        .enumerate()
        .flat_map(|(fi, b)| (0..b.unwrap_or(0)).map(move |r| (fi, r)))
        .collect();
    let pick = held_out_picks(rows.len(), fraction);
    let part = |want: bool| -> Option<(Loaded, Vec<usize>)> {
        let idx: Vec<usize> = (0..rows.len()).filter(|&i| pick[i] == want).collect();
        // Batches of consecutive picked samples whose inputs have the same inner shapes.
        let inner = |i: usize| -> Vec<Vec<usize>> {
            let (fi, _) = rows[i];
            all.feeds[fi]
                .iter()
                .map(|(_, t)| t.shape[1..].to_vec())
                .collect()
        };
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for &i in &idx {
            match groups.last_mut() {
                Some(g) if g.len() < batch && inner(g[0]) == inner(i) => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        if fixed {
            groups.retain(|g| g.len() == batch);
        }
        let kept: Vec<usize> = groups.iter().flatten().copied().collect();
        let feeds = groups
            .iter()
            .map(|g| {
                let (f0, _) = rows[g[0]];
                all.feeds[f0]
                    .iter()
                    .enumerate()
                    .map(|(k, (name, t0))| {
                        let len: usize = t0.shape[1..].iter().product();
                        let parts: Vec<quantkit_graph::tensor::Data> = g
                            .iter()
                            .map(|&i| {
                                let (fi, r) = rows[i];
                                let t = &all.feeds[fi][k].1;
                                t.data.gather(&(r * len..(r + 1) * len).collect::<Vec<_>>())
                            })
                            .collect();
                        // None: batches of one input with different storage types.
                        let data = quantkit_graph::tensor::Data::concat(
                            &parts.iter().collect::<Vec<_>>(),
                        )?;
                        let mut shape = vec![g.len()];
                        shape.extend_from_slice(&t0.shape[1..]);
                        Some((
                            name.clone(),
                            Tensor {
                                dtype: t0.dtype,
                                shape,
                                data,
                            },
                        ))
                    })
                    .collect::<Option<Feed>>()
            })
            .collect::<Option<Vec<Feed>>>()?;
        Some((
            Loaded {
                feeds,
                labels: label_part(&kept),
            },
            kept,
        ))
    };
    let (search, _) = part(false)?;
    let (confirm, confirm_samples) = part(true)?;
    if search.feeds.is_empty() || confirm.feeds.is_empty() {
        return None;
    }
    let how = format!(
        "every {} of the {total} evaluation samples",
        every(fraction)
    );
    Some(ConfirmSplit {
        search,
        confirm,
        confirm_samples,
        how,
    })
}

fn samples(feeds: &[Feed]) -> usize {
    feeds
        .iter()
        .map(|f| {
            f.first()
                .map_or(0, |(_, t)| t.shape.first().copied().unwrap_or(1))
        })
        .sum()
}

/// Median seconds per run of `g` on the integer engine over `feed` (5 runs after one
/// warm-up), and the number of float-island nodes in its plan.
fn engine_cost(g: &Graph, feed: &Feed) -> anyhow::Result<(f64, usize)> {
    let plan = quantkit_engine::compile(g, &quantkit_engine::EngineOptions::default())
        .context("compiling for the integer engine")?;
    let islands = plan
        .report()
        .iter()
        .filter(|r| matches!(r.placement, quantkit_engine::Placement::Float { .. }))
        .count();
    plan.run(feed.clone())?;
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let t0 = std::time::Instant::now();
            plan.run(feed.clone()).map(|_| t0.elapsed().as_secs_f64())
        })
        .collect::<Result<_, _>>()?;
    t.sort_by(f64::total_cmp);
    Ok((t[2], islands))
}

fn fmt_metric(m: &Measured, confidence: Option<f64>) -> String {
    let mut s = Vec::new();
    if let Some(a) = m.agreement {
        s.push(match (m.agreement_lower_bound, confidence) {
            (Some(b), Some(c)) if m.agreement_effective_samples < m.agreement_samples as f64 => {
                format!(
                    "top-1 agreement {:.2}% ({:.2}% at {:.0}% confidence, {} rows counted as {:.0} independent samples)",
                    100.0 * a,
                    100.0 * b,
                    100.0 * c,
                    m.agreement_samples,
                    m.agreement_effective_samples
                )
            }
            (Some(b), Some(c)) => format!(
                "top-1 agreement {:.2}% ({:.2}% at {:.0}% confidence, {} samples)",
                100.0 * a,
                100.0 * b,
                100.0 * c,
                m.agreement_samples
            ),
            _ => format!("top-1 agreement {:.2}%", 100.0 * a),
        });
    }
    s.push(format!("cosine {:.5}", m.cosine));
    s.push(if m.sqnr_db.is_infinite() {
        "SQNR exact".to_string()
    } else {
        format!("SQNR {:.1} dB", m.sqnr_db)
    });
    if let (Some(q), Some(f)) = (m.accuracy, m.float_accuracy) {
        s.push(format!(
            "accuracy {:.2}% (float {:.2}%, {:+.2} pt)",
            100.0 * q,
            100.0 * f,
            100.0 * (q - f)
        ));
    }
    s.join(", ")
}

/// Whether the output format cannot carry int16 activations (QOperator).
fn format_blocks_int16(config: &PtqConfig) -> bool {
    config.format == Format::QOperator
}

/// Runs `quantize --target`, `quantize --config` or `quantize --activation-bits 16`.
pub fn run(args: &Args, graph: Graph, config: PtqConfig, size_before: u64) -> anyhow::Result<()> {
    let Some(calib_path) = &args.calib else {
        anyhow::bail!("--target and --config need calibration data (--calib DATA)");
    };
    if args.dynamic {
        anyhow::bail!(
            "--target/--config choose precisions of static quantization; --dynamic does not apply"
        );
    }
    let target: Option<Target> = args
        .target
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("--target")?;
    if args.activation_bits == 16 && (target.is_some() || args.config.is_some()) {
        anyhow::bail!(
            "--activation-bits 16 makes every layer int16; --target and --config choose per \
             layer (int16 is one of their choices), give one or the other"
        );
    }
    if format_blocks_int16(&config) && args.activation_bits == 16 {
        anyhow::bail!(
            "--activation-bits 16 writes QDQ only: QOperator's QLinear operators take 8-bit codes"
        );
    }
    // Whether a search runs (and writes its configuration).
    let searched = args.config.is_none() && target.is_some();
    let log = Progress::new(
        if searched { "search" } else { "quantize" },
        Mode::of(args.json, args.quiet),
    );
    let calib_limit = args.calib_samples.unwrap_or(DEFAULT_CALIB_SAMPLES);
    let open = |split| OpenOptions {
        scale: args.scale,
        split,
        ..Default::default()
    };
    if !(args.held_out > 0.0 && args.held_out < 1.0) {
        anyhow::bail!(
            "--held-out {}: expected a fraction of the calibration samples in (0, 1), e.g. 0.25",
            args.held_out
        );
    }
    log.line(format_args!(
        "loading {} (up to {calib_limit} samples)",
        calib_path.display()
    ));
    let (all, split) = load(
        &graph,
        calib_path,
        &open(args.calib_split),
        calib_limit,
        args.batch_size,
        args.data.is_none().then_some(args.held_out),
    )?;
    // Evaluation data: --data, else held-out calibration samples interleaved through the
    // file.
    let held_out = split.is_some();
    // Sample indices (in the calibration file) of the held-out samples.
    let mut held_samples: Vec<usize> = Vec::new();
    let calib: Vec<Feed>;
    let (eval, mut labels, eval_source) = if let Some(d) = &args.data {
        let (f, _) = load(
            &graph,
            d,
            &open(quantkit_data::Split::Test),
            args.eval_samples,
            args.batch_size,
            None,
        )?;
        calib = all.feeds;
        let what = format!("{} ({} samples)", d.display(), samples(&f.feeds));
        (f.feeds, f.labels, what)
    } else if let Some(sp) = split {
        calib = sp.calib.feeds;
        held_samples = sp.held_samples;
        let n = samples(&sp.held.feeds);
        (
            sp.held.feeds,
            sp.held.labels,
            format!(
                "{n} samples of {} held out from calibration ({})",
                calib_path.display(),
                sp.how
            ),
        )
    } else {
        eprintln!(
            "warning: {} gives too few samples to hold some out: the target is measured on the \
             samples it was calibrated on, which flatters it; give --data EVAL or more \
             calibration samples",
            calib_path.display()
        );
        calib = all.feeds.clone();
        (
            all.feeds,
            all.labels,
            format!(
                "the calibration samples themselves ({})",
                calib_path.display()
            ),
        )
    };
    if let Some(lp) = &args.labels {
        // --labels follow the evaluation data (--data), or the calibration file when the
        // evaluation samples are held out of it: one label per sample of that file, in
        // order, at least as many as were read.
        let a = quantkit_data::npy::read_npy(lp)
            .with_context(|| format!("reading labels {}", lp.display()))?;
        let all = a
            .data
            .to_i64()
            .with_context(|| format!("{}: labels must be integers of shape [N]", lp.display()))?;
        let n = samples(&eval);
        if held_out {
            let last = held_samples.last().copied().unwrap_or(0);
            if all.len() <= last {
                anyhow::bail!(
                    "{}: {} labels, but the held-out evaluation samples reach sample {} of the \
                     calibration data",
                    lp.display(),
                    all.len(),
                    last
                );
            }
            labels = Some(held_samples.iter().map(|&i| all[i]).collect());
        } else {
            if all.len() < n {
                anyhow::bail!(
                    "{}: {} labels for {} evaluation samples",
                    lp.display(),
                    all.len(),
                    n
                );
            }
            labels = Some(all[..n].to_vec());
        }
    }
    // Confirmation samples: out of the search's reach from here on.
    if !(0.0..1.0).contains(&args.confirm) {
        anyhow::bail!(
            "--confirm {}: expected 0 (no confirmation) or a fraction of the evaluation samples \
             in (0, 1), e.g. 0.5",
            args.confirm
        );
    }
    if args.confirm_tests == 0 {
        anyhow::bail!("--confirm-tests 0: at least one configuration is confirmed (1 or more)");
    }
    if let Some(d) = args.prune_floor {
        anyhow::ensure!(
            d.is_finite() && d >= 0.0,
            "--prune-floor {d}: expected a number of dB, 0 or more"
        );
    }
    let eval_total = samples(&eval);
    let fixed_batch = graph.inputs.iter().any(|v| {
        !graph.initializers.contains_key(&v.name)
            && matches!(
                v.shape.as_ref().and_then(|s| s.first()),
                Some(Dim::Known(m)) if *m > 0
            )
    });
    let (eval, labels, confirm_part) = if args.confirm > 0.0 {
        let Some(sp) = split_confirmation(
            Loaded {
                feeds: eval,
                labels,
            },
            args.confirm,
            fixed_batch,
        ) else {
            anyhow::bail!(
                "--confirm {}: the {eval_total} evaluation samples ({eval_source}) cannot be split \
                 into a part for the search and a part to confirm its choice; give more \
                 evaluation data, or --confirm 0 (no confirmation: the figure is then optimistic)",
                args.confirm
            );
        };
        (
            sp.search.feeds,
            sp.search.labels,
            Some((sp.confirm, sp.confirm_samples, sp.how)),
        )
    } else {
        (eval, labels, None)
    };
    let cal_bar = log.bar("calibrating {bar:30} {pos}/{len} batches [{elapsed_precise}]");
    let calibration_samples = samples(&calib);
    log.line(format_args!(
        "calibrating ({}) on {calibration_samples} samples, {} batches",
        args.method,
        calib.len()
    ));
    let setup = Setup::new(graph, &config, &calib, &mut |d, t| {
        cal_bar.set_length(t as u64);
        cal_bar.set_position(d as u64);
        log.tick("calibrating", d, t, "batches");
    })
    .with_context(|| format!("calibrating {}", args.model.display()))?;
    cal_bar.finish_and_clear();
    drop(calib);
    let confidence = (args.confidence > 0.0).then_some(args.confidence);
    log.line(format_args!(
        "evaluation: {} samples {}{}; running the float model on them",
        samples(&eval),
        if searched {
            "for the search"
        } else {
            "to measure"
        },
        match &confirm_part {
            Some((c, _, _)) => format!(", {} kept to confirm", samples(&c.feeds)),
            None => String::new(),
        }
    ));
    let evaluation = Evaluation::new(&setup, &eval, labels.as_deref())?
        .with_confidence(confidence)
        .context("--confidence")?;
    let mut confirm_eval = match &confirm_part {
        Some((c, _, _)) => Some(
            Evaluation::new(&setup, &c.feeds, c.labels.as_deref())?
                .with_confidence(confidence)
                .context("--confidence")?,
        ),
        None => None,
    };
    if let (Some(ce), Some(t), Some(c)) = (&confirm_eval, target, confidence) {
        let tests = if searched { args.confirm_tests } else { 1 };
        let level = bonferroni_level(c, tests);
        ce.check_enough(
            t,
            level,
            "confirmation samples",
            &format!(
                "the confirmation part is --confirm {} of the {eval_total} evaluation samples, \
                 each of its {tests} test(s) (--confirm-tests) judged at {}% (Bonferroni, \
                 --confidence {c}); give more evaluation data, a larger --confirm, fewer \
                 --confirm-tests, a lower --confidence, or --confirm 0 (no confirmation: the \
                 figure is then optimistic)",
                args.confirm,
                fmt_level(level)
            ),
        )?;
    }
    let eval_source = match evaluation.decision_threshold() {
        Some(t) => format!(
            "{eval_source}; one score per sample: agreement is of the decisions score > {t}"
        ),
        None => eval_source,
    };
    let mut result: SearchResult;
    let chosen: MixedConfig;
    let measured: Measured;
    let int8: Measured;
    if !searched {
        chosen = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let v: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("{}: not JSON", path.display()))?;
                // Either a bare configuration or the JSON `quantize --target --json` prints.
                let c = v.get("config").cloned().unwrap_or(v);
                serde_json::from_value(c).with_context(|| {
                    format!(
                        "{}: expected {{\"layers\": {{\"LAYER\": \"float\" | \"int8\" | \"int8-w4\" | \"int16\" | \"int16-w16\"}}}}",
                        path.display()
                    )
                })?
            }
            // --activation-bits 16 alone: every layer int16.
            None => {
                let mut c = MixedConfig::default();
                for (l, _) in setup.layer_names() {
                    c.set(&l, Precision::Act16);
                }
                c
            }
        };
        if format_blocks_int16(&config)
            && !(chosen.with(Precision::Act16).is_empty()
                && chosen.with(Precision::Wide16).is_empty())
        {
            anyhow::bail!(
                "the configuration has int16 layers: QOperator's QLinear operators take 8-bit \
                 codes; write --format qdq"
            );
        }
        if let Some(t) = target {
            eprintln!("note: --config given, --target {t:?} is only checked, not searched");
        }
        log.line(format_args!(
            "measuring the configuration ({} layers off int8) and all int8",
            chosen.layers.len()
        ));
        measured = evaluation.measure(&setup.mixed(&chosen)?)?;
        int8 = evaluation.measure(&setup.quantized()?)?;
        let met_here = target.is_none_or(|t| t.met(&measured));
        let applied = SearchResult {
            target: target.unwrap_or(Target {
                metric: quantkit_ptq::mixed::Metric::Sqnr,
                value: f64::NEG_INFINITY,
            }),
            met: met_here,
            search_met: met_here,
            config: chosen.clone(),
            measured,
            int8,
            ranking: Vec::new(),
            steps: Vec::new(),
            accepted: vec![Accepted {
                step: 0,
                action: match &args.config {
                    Some(p) => format!("configuration from {}", p.display()),
                    None => "every layer int16 (--activation-bits 16)".into(),
                },
                config: chosen.clone(),
                measured,
            }],
            samples: evaluation.samples(),
            confirmation: None,
            seconds: Default::default(),
            stopped_early: 0,
            rerun_in_full: 0,
            reuse: Default::default(),
        };
        result = match &mut confirm_eval {
            // One test of the configuration given, judged at --confidence: it was not
            // chosen on these samples (when it was chosen by --target with the same data
            // and --confirm, it was chosen on the other part).
            Some(ce) => {
                let r = confirm_with(
                    &setup,
                    SearchResult {
                        search_met: true,
                        ..applied
                    },
                    ce,
                    &ConfirmOptions { max_tests: 1 },
                    &mut |e| confirm_line(&log, target, e),
                )?;
                SearchResult {
                    search_met: met_here,
                    ..r
                }
            }
            None => applied,
        };
    } else {
        let Some(target) = target else {
            anyhow::bail!("--target or --config");
        };
        let rank_bar = log.bar("ranking layers {bar:30} {pos}/{len} [{elapsed_precise}]");
        let search_bar = log.bar("search {bar:30} {pos} configurations [{elapsed_precise}]");
        log.line(format_args!(
            "searching for {}{}{}{}{}",
            args.target.as_deref().unwrap_or(""),
            match (target.metric, confidence) {
                (Metric::Agreement, Some(c)) => format!(", judged on its {c} lower bound"),
                _ => String::new(),
            },
            args.max_float
                .map_or(String::new(), |k| format!(", at most {k} float layers")),
            if args.no_int16 { ", no int16" } else { "" },
            if args.weight_bits <= 4 {
                ", 4-bit weights allowed"
            } else {
                ""
            },
        ));
        result = search(
            &setup,
            &evaluation,
            target,
            &SearchOptions {
                allow_weight4: args.weight_bits <= 4,
                max_float: args.max_float,
                // QOperator has no 16-bit QLinear operators.
                no_int16: args.no_int16 || format_blocks_int16(&config),
                ranking_budget: Some(std::time::Duration::from_secs_f64(
                    args.budget.clamp(0.0, 1e9),
                )),
                reuse_bytes: None,
                prune_floor_db: args.prune_floor,
            },
            &mut |e| match e {
                SearchEvent::Progress { stage, done, total } => {
                    let b = if stage == SearchStage::Search {
                        &search_bar
                    } else {
                        &rank_bar
                    };
                    b.set_length(total as u64);
                    b.set_position(done as u64);
                    match stage {
                        SearchStage::Ranking(Stage::Passes) => {
                            log.tick("ranking: float and int8 passes", done, total, "batches")
                        }
                        SearchStage::Ranking(Stage::Sensitivity) if done == 0 => {
                            log.line(format_args!(
                                "ranking: sensitivity passes on {total} layers (each left \
                                 float, on {RANKING_SAMPLES} samples; --budget {} s)",
                                args.budget
                            ))
                        }
                        SearchStage::Ranking(Stage::Sensitivity) => {
                            log.tick("ranking: sensitivity", done, total, "layers")
                        }
                        SearchStage::Search => {}
                    }
                }
                SearchEvent::Begin(p) => log.line(phase_line(p, evaluation.samples())),
                SearchEvent::Measured { index, step } => log.line(step_line(target, index, step)),
                SearchEvent::Rerun { index, step } => log.line(rerun_line(target, index, step)),
            },
        )?;
        rank_bar.finish_and_clear();
        search_bar.finish_and_clear();
        log.line(summary_line(&result));
        if let Some(ce) = &mut confirm_eval {
            result = confirm_with(
                &setup,
                result,
                ce,
                &ConfirmOptions {
                    max_tests: args.confirm_tests,
                },
                &mut |e| confirm_line(&log, Some(target), e),
            )?;
        }
        chosen = result.config.clone();
    }
    log.line("writing the model");
    let mut q = setup.mixed(&chosen)?;
    // 4-bit weights chosen by the search (or the configuration) go in int4 initializers,
    // as in the uniform `--weight-bits 4` path; int8 layers keep int8.
    if config.format == Format::Qdq && args.weight_bits <= 4 && !args.int8_weights {
        quantkit_ptq::store_weights_int4(&mut q).context("storing the 4-bit weights as int4")?;
    }
    let all_int8 = setup.quantized()?;
    let (q, all_int8) = match config.format {
        Format::Qdq => (q, all_int8),
        Format::QOperator => (
            quantkit_ptq::to_qoperator(q)?.0,
            quantkit_ptq::to_qoperator(all_int8)?.0,
        ),
    };
    quantkit_graph::save_model(&q, &args.output)?;
    let size_after = std::fs::metadata(&args.output)?.len();
    let config_path = args.save_config.clone().unwrap_or_else(|| {
        let stem = args
            .output
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned());
        args.output.with_file_name(format!("{stem}.mixed.json"))
    });
    let conf = result.confirmation.as_ref();
    let confirmed_test = conf.and_then(|c| c.confirmed.map(|i| &c.tests[i]));
    // What the figure of the saved choice rests on, so the file does not claim more.
    let saved = serde_json::json!({
        "model": args.model.display().to_string(),
        "target": args.target,
        "method": args.method,
        "met": result.met,
        "optimistic": conf.is_none(),
        "search": {
            "samples": result.samples,
            "value": result.target.value_of(&result.measured),
            "judged": result.target.judged(&result.measured),
        },
        "confirmation": conf.map(|c| serde_json::json!({
            "samples": c.samples,
            "level": c.level,
            "tests_planned": c.tests_planned,
            "tests_run": c.tests.len(),
            "confirmed": confirmed_test.map(|t| &t.action),
            "value": confirmed_test.and_then(|t| result.target.value_of(&t.measured)),
            "judged": confirmed_test.and_then(|t| t.judged),
        })),
        "evaluation": {
            "held_out": args.data.is_none().then_some(args.held_out),
            "calib_samples": calib_limit,
            "confirm": args.confirm,
            "confirm_tests": args.confirm_tests,
        },
        "config": chosen,
    });
    if searched {
        quantkit_core::atomic::write_bytes(
            &config_path,
            serde_json::to_string_pretty(&saved)?.as_bytes(),
        )
        .with_context(|| format!("writing {}", config_path.display()))?;
    }
    // Cost: weight bytes and engine time against the fully quantized model.
    log.line("timing the chosen and the all-int8 models on the integer engine");
    let w_float = quantkit_ptq::initializer_bytes(&setup.float);
    let w_int8 = quantkit_ptq::initializer_bytes(&all_int8);
    let w_mixed = quantkit_ptq::initializer_bytes(&q);
    let (t_int8, isl_int8) = engine_cost(&all_int8, &eval[0])?;
    let (t_mixed, isl_mixed) = engine_cost(&q, &eval[0])?;
    let batch_n = eval[0]
        .first()
        .map_or(1, |(_, t)| t.shape.first().copied().unwrap_or(1))
        .max(1);
    let layers = setup.layer_names();
    let n_float = chosen.with(Precision::Float).len();
    let n_w4 = chosen.with(Precision::Weight4).len();
    let n_a16 = chosen.with(Precision::Act16).len();
    let n_w16 = chosen.with(Precision::Wide16).len();
    log.line(format_args!(
        "done: {} written{}",
        args.output.display(),
        match (target, result.met) {
            (None, _) => "",
            (Some(_), true) => ", target met",
            (Some(_), false) => ", target NOT met",
        }
    ));
    if args.json {
        let mut v = serde_json::to_value(&result)?;
        v["model"] = args.model.display().to_string().into();
        v["output"] = args.output.display().to_string().into();
        v["config_file"] = if searched {
            config_path.display().to_string().into()
        } else {
            serde_json::Value::Null
        };
        v["evaluation"] = eval_source.clone().into();
        v["calibration_samples"] = calibration_samples.into();
        v["confidence"] = confidence.into();
        // No confirmation: `met` and `measured` are of the samples the search chose on.
        v["optimistic"] = result.confirmation.is_none().into();
        v["confirm_fraction"] = args.confirm.into();
        v["prune_floor_db"] = args.prune_floor.into();
        v["evaluation_confirmation"] = confirm_part
            .as_ref()
            .map(|(_, _, how)| format!("{how}; never run by the search"))
            .into();
        v["layers"] = layers
            .iter()
            .map(|(l, op)| serde_json::json!({"layer": l, "op": op, "precision": chosen.get(l).name()}))
            .collect::<Vec<_>>()
            .into();
        v["cost"] = serde_json::json!({
            "weight_bytes_float": w_float,
            "weight_bytes_int8": w_int8,
            "weight_bytes": w_mixed,
            "file_bytes_float": size_before,
            "file_bytes": size_after,
            "engine_ms_per_sample_int8": 1e3 * t_int8 / batch_n as f64,
            "engine_ms_per_sample": 1e3 * t_mixed / batch_n as f64,
            "engine_float_islands_int8": isl_int8,
            "engine_float_islands": isl_mixed,
            "engine_batch": batch_n,
            "layers_int8": layers.len() - n_float - n_w4 - n_a16 - n_w16,
            "layers_int8_w4": n_w4,
            "layers_int16": n_a16,
            "layers_int16_w16": n_w16,
            "layers_float": n_float,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "quantized {} -> {} (mixed precision)",
            args.model.display(),
            args.output.display()
        );
        println!("  evaluated on {eval_source}");
        if let Some(c) = &args.config {
            println!("  configuration from {}", c.display());
        } else if !searched {
            println!("  every layer int16 activations, int8 weights (--activation-bits 16)");
        } else {
            println!(
                "  target {} {} {}",
                args.target.as_deref().unwrap_or(""),
                if result.met { "met" } else { "NOT met" },
                if result.met {
                    String::new()
                } else {
                    "(best configuration found written)".into()
                }
            );
        }
        println!("  all int8: {}", fmt_metric(&result.int8, confidence));
        println!(
            "  chosen:   {}{}",
            fmt_metric(&result.measured, confidence),
            if conf.is_some() {
                " (search samples)"
            } else {
                ""
            }
        );
        match (conf, &confirm_part) {
            (Some(c), Some((_, _, how))) => {
                println!(
                    "  confirmation on {} samples the search never ran ({how}){}:",
                    c.samples,
                    match c.level {
                        Some(l) => format!(
                            ", {} test(s) planned, each at {}% confidence (Bonferroni)",
                            c.tests_planned,
                            fmt_level(l)
                        ),
                        None => String::new(),
                    }
                );
                for t in &c.tests {
                    println!(
                        "    {} {} ({} layers off int8): {}",
                        if t.met { "confirmed" } else { "missed   " },
                        t.action,
                        t.changed_layers,
                        fmt_metric(&t.measured, c.level)
                    );
                }
            }
            _ => println!(
                "  not confirmed (--confirm 0): the figure is of the samples the search chose on, \
                 among many configurations measured there; it is optimistic"
            ),
        }
        println!(
            "  {} of {} layers int8, {} with 4-bit weights, {} with int16 activations, {} with int16 activations and weights, {} float",
            layers.len() - n_float - n_w4 - n_a16 - n_w16,
            layers.len(),
            n_w4,
            n_a16,
            n_w16,
            n_float
        );
        if n_a16 + n_w16 > 0 {
            println!(
                "  int16 layers are opset-21 Q/DQ: ONNX Runtime and quantkit's engine run them \
                 as DQ → float op → Q (float islands; no int16 kernels)"
            );
        }
        for (l, op) in &layers {
            let p = chosen.get(l);
            if p != Precision::Int8 {
                println!("    {l} ({op}): {}", p.name());
            }
        }
        println!(
            "  cost: weights {} B (all int8 {} B, float {} B); file {} B (float {} B); engine {:.3} ms/sample (all int8 {:.3}; batch {batch_n}), {} float-island nodes (all int8 {})",
            w_mixed,
            w_int8,
            w_float,
            size_after,
            size_before,
            1e3 * t_mixed / batch_n as f64,
            1e3 * t_int8 / batch_n as f64,
            isl_mixed,
            isl_int8
        );
        if searched {
            println!(
                "  configuration written to {} (re-apply with --config)",
                config_path.display()
            );
        }
    }
    if let (false, true, Some(c)) = (result.met, result.search_met, conf) {
        anyhow::bail!(
            "target {} met on the search's samples but not confirmed on the {} samples it never \
             ran ({} configuration(s) it accepted tested: {}); the one with the best \
             confirmation figure was written to {}. Give more evaluation data (the search then \
             keeps a larger margin), relax the target, or raise --confidence for the search",
            args.target.as_deref().unwrap_or("?"),
            c.samples,
            c.tests.len(),
            c.tests
                .iter()
                .map(|t| format!(
                    "{} {}",
                    t.action,
                    t.judged.map_or("-".into(), |j| format!("{j:.4}"))
                ))
                .collect::<Vec<_>>()
                .join("; "),
            args.output.display()
        );
    }
    if !result.met {
        let t = result.target;
        anyhow::bail!(
            "target {} not reached: the best configuration found ({} float layer(s): {}) gives {}; \
             it was written to {} so you can inspect it. Relax the target, allow more float layers \
             (--max-float), give more calibration data, or try another --method",
            args.target.as_deref().unwrap_or("?"),
            n_float,
            chosen.with(Precision::Float).join(", "),
            match (t.value_of(&result.measured), t.judged(&result.measured)) {
                (Some(v), Some(j)) if j != v => format!(
                    "{v:.4} (lower confidence bound {j:.4}; --confidence 0 judges the share \
                     measured)"
                ),
                (Some(v), _) => format!("{v:.4}"),
                _ => "nothing measurable".into(),
            },
            args.output.display()
        );
    }
    Ok(())
}

/// The target's metric of a step for a progress line: `agreement 0.9766 (bound 0.9612;
/// target ≥ 0.99)`.
fn fmt_step_value(t: Target, value: Option<f64>, judged: Option<f64>) -> String {
    let (name, cmp) = match t.metric {
        Metric::Agreement => ("agreement", "≥"),
        Metric::Cosine => ("cosine", "≥"),
        Metric::Sqnr => ("SQNR", "≥"),
        Metric::Accuracy => ("accuracy drop", "≤"),
    };
    let f = |v: f64| match t.metric {
        Metric::Agreement => format!("{v:.4}"),
        Metric::Cosine => format!("{v:.6}"),
        Metric::Sqnr => format!("{v:.2} dB"),
        Metric::Accuracy => format!("{v:.2} pt"),
    };
    match (value, judged) {
        (None, _) => format!("{name} not measurable (target {cmp} {})", f(t.value)),
        (Some(v), Some(j)) if j != v => {
            format!(
                "{name} {} (bound {}; target {cmp} {})",
                f(v),
                f(j),
                f(t.value)
            )
        }
        (Some(v), _) => format!("{name} {} (target {cmp} {})", f(v), f(t.value)),
    }
}

/// The line of a configuration measured: `config 7 int16 conv2: agreement … , not met,
/// stopped early after 48 samples (2.1 s)`.
fn step_line(t: Target, index: usize, s: &Step) -> String {
    let verdict = match s.stopped_after {
        Some(n) => format!("not met, stopped early after {n} samples"),
        None if s.below_floor => "met, below the --prune-floor SQNR: not kept".into(),
        None if s.met => "met".into(),
        None => "not met".into(),
    };
    format!(
        "config {index} {}: {}, {verdict} ({:.1} s)",
        s.action,
        fmt_step_value(t, s.value, s.judged),
        s.seconds
    )
}

/// The line of a stopped configuration run again on every sample.
fn rerun_line(t: Target, index: usize, s: &Step) -> String {
    match &s.full {
        Some(f) => format!(
            "rerun config {index} {} on every sample: {} ({:.1} s)",
            s.action,
            fmt_step_value(t, f.value, f.judged),
            f.seconds
        ),
        None => format!("rerun config {index} {}", s.action),
    }
}

/// The line of a part of the search that begins.
fn phase_line(p: Phase, samples: usize) -> String {
    match p {
        Phase::Int8 => format!("measuring all int8 on {samples} samples"),
        Phase::Ranking { batches, layers } => format!(
            "ranking {layers} layers: float and int8 passes over {batches} batches, then \
             sensitivity passes"
        ),
        Phase::Prefix {
            precision,
            candidates,
        } => format!(
            "{}: the smallest prefix of {candidates} ranked layers that meets the target \
             (doubling, then bisection)",
            precision.name()
        ),
        Phase::Prune { changed } => {
            format!("prune: {changed} changed layers tried back in int8, by groups")
        }
        Phase::Weight4 => "4-bit weights on the int8 layers, least sensitive first".into(),
        Phase::RerunStopped { stopped } => format!(
            "target not met: running again on every sample the configurations stopped early \
             that could be the best found (of {stopped} stopped)"
        ),
    }
}

/// The search's last line: configurations measured, mean time each, where the time went.
fn summary_line(r: &SearchResult) -> String {
    let n = r.steps.len();
    let secs = r.steps.iter().fold(0.0, |a, s| a + s.seconds);
    let rerun = r
        .steps
        .iter()
        .filter_map(|s| s.full.map(|f| f.seconds))
        .fold(0.0, |a, t| a + t);
    let stopped = match (r.stopped_early, r.rerun_in_full) {
        (0, _) => String::new(),
        (s, 0) => format!("; {s} stopped early"),
        (s, k) => format!("; {s} stopped early, {k} run again in full ({rerun:.1} s)"),
    };
    format!(
        "search done, target {}: {n} configuration(s) measured in {secs:.1} s, {:.2} s per \
         configuration{stopped}; ranking {:.1} s, writing graphs {:.1} s, measuring {:.1} s",
        if r.search_met { "met" } else { "NOT met" },
        secs / n.max(1) as f64,
        r.seconds.ranking,
        r.seconds.build,
        r.seconds.measure
    )
}

/// Lines of the confirmation's tests.
fn confirm_line(log: &Progress, target: Option<Target>, e: ConfirmEvent) {
    match e {
        ConfirmEvent::Begin {
            index,
            planned,
            action,
        } => log.line(format_args!(
            "confirm {}/{planned} {action}: measuring on the confirmation samples",
            index + 1
        )),
        ConfirmEvent::Done {
            index,
            planned,
            test,
            seconds,
        } => log.line(format_args!(
            "confirm {}/{planned} {}: {}, {} ({seconds:.1} s)",
            index + 1,
            test.action,
            match target {
                Some(t) => fmt_step_value(t, t.value_of(&test.measured), test.judged),
                None => fmt_metric(&test.measured, None),
            },
            if test.met { "confirmed" } else { "missed" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::held_out_picks;

    #[test]
    fn held_out_samples_are_spread_over_the_file() {
        let pick = |n, f| -> Vec<usize> {
            held_out_picks(n, f)
                .iter()
                .enumerate()
                .filter(|(_, h)| **h)
                .map(|(i, _)| i)
                .collect()
        };
        assert_eq!(pick(8, 0.25), vec![3, 7]);
        assert_eq!(pick(10, 0.5), vec![1, 3, 5, 7, 9]);
        assert_eq!(pick(71, 0.25).len(), 17);
        // At least one, never all.
        assert_eq!(pick(2, 0.1), vec![1]);
        assert_eq!(pick(2, 0.99), vec![1]);
        assert!(pick(3, 0.99).len() < 3);
    }
}

#[cfg(test)]
mod split_tests {
    use super::{split_rows, Loaded};
    use quantkit_graph::Tensor;

    /// A file ordered by class (8 classes of 32 samples, read in batches of 32: each batch
    /// one class, as a calibration set listed directory by directory): the held-out quarter
    /// holds 8 samples of every class, each between calibration samples. The whole-batch
    /// hold-out this replaces held out batches 3 and 7: two classes, 64 samples of 2
    /// clusters, which the independent-sample confidence bound counted as 64 independent
    /// samples.
    #[test]
    fn held_out_samples_of_an_ordered_file_cover_every_class() {
        let feeds = (0..8)
            .map(|c| {
                let data: Vec<f32> = (0..32 * 3).map(|i| (c * 1000 + i / 3) as f32).collect();
                vec![("x".to_string(), Tensor::from_f32(&[32, 3], data))]
            })
            .collect();
        let labels = Some((0..256).map(|i| i / 32).collect());
        let all = Loaded { feeds, labels };
        let s = split_rows(&all, "x", 0.25, 32, None).expect("a split");
        let held = s.held.labels.expect("labels follow the split");
        assert_eq!(held.len(), 64);
        for c in 0..8 {
            assert_eq!(held.iter().filter(|&&l| l == c).count(), 8, "class {c}");
        }
        let kept = s.calib.labels.expect("labels follow the split");
        assert_eq!(kept.len(), 192);
        // Every 4th sample, and no two held-out samples next to each other in the file.
        assert_eq!(s.held_samples[..3], [3, 7, 11]);
        assert!(s.held_samples.windows(2).all(|w| w[1] - w[0] == 4));
        // Rows travel with their labels, re-batched to 32.
        assert_eq!(s.held.feeds.len(), 2);
        let first = s.held.feeds[0][0].1.as_f32().unwrap();
        assert_eq!(first[..3], [3.0, 3.0, 3.0]); // class 0, sample 3
        let second = s.held.feeds[1][0].1.as_f32().unwrap();
        assert_eq!(second[..3], [4003.0, 4003.0, 4003.0]); // class 4, sample 3 of its block
        assert_eq!(
            s.calib.feeds.iter().map(|f| f[0].1.shape[0]).sum::<usize>(),
            192
        );
        // A model with a fixed batch of 24: whole batches only (64 → 48, 192 → 192).
        let s = split_rows(&all, "x", 0.25, 24, Some(24)).expect("a split");
        assert!(s.held.feeds.iter().all(|f| f[0].1.shape[0] == 24));
        assert_eq!(s.held_samples.len(), 48);
    }
}

#[cfg(test)]
mod confirm_split_tests {
    use super::{split_confirmation, Loaded};
    use quantkit_graph::Tensor;

    /// 50 samples in batches of 16 (the last short), each sample's values its index: the
    /// confirmation part is every second sample, the search part the others, no sample in
    /// both, none lost; labels (two per sample: two output rows each) follow their samples.
    #[test]
    fn search_and_confirmation_samples_are_disjoint_and_cover_the_data() {
        let feeds: Vec<_> = (0..50usize)
            .collect::<Vec<_>>()
            .chunks(16)
            .map(|c| {
                let data: Vec<f32> = c.iter().flat_map(|&i| [i as f32; 3]).collect();
                vec![("x".to_string(), Tensor::from_f32(&[c.len(), 3], data))]
            })
            .collect();
        let labels = Some((0..100).collect());
        let s = split_confirmation(Loaded { feeds, labels }, 0.5, false).expect("a split");
        let ids = |l: &Loaded| -> Vec<usize> {
            l.feeds
                .iter()
                .flat_map(|f| {
                    let t = &f[0].1;
                    assert!(t.shape[0] <= 16);
                    t.as_f32()
                        .unwrap()
                        .chunks(3)
                        .map(|r| r[0] as usize)
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let (search, confirm) = (ids(&s.search), ids(&s.confirm));
        assert_eq!(confirm, (0..25).map(|i| 2 * i + 1).collect::<Vec<_>>());
        assert_eq!(search, (0..25).map(|i| 2 * i).collect::<Vec<_>>());
        assert_eq!(s.confirm_samples, confirm);
        let cl = s.confirm.labels.unwrap();
        assert_eq!(cl[..4], [2, 3, 6, 7]);
        assert_eq!(cl.len(), 50);
        // A fixed batch of 16: whole batches only (25 → 16 each).
        let feeds: Vec<_> = (0..4)
            .map(|b| {
                let data: Vec<f32> = (0..16 * 3).map(|i| (b * 16 + i / 3) as f32).collect();
                vec![("x".to_string(), Tensor::from_f32(&[16, 3], data))]
            })
            .collect();
        let s = split_confirmation(
            Loaded {
                feeds,
                labels: None,
            },
            0.5,
            true,
        )
        .expect("a split");
        assert_eq!(s.confirm.feeds.len(), 2);
        assert!(s.confirm.feeds.iter().all(|f| f[0].1.shape[0] == 16));
        // One sample cannot be split.
        let one = vec![vec![(
            "x".to_string(),
            Tensor::from_f32(&[1, 3], vec![0.0; 3]),
        )]];
        assert!(split_confirmation(
            Loaded {
                feeds: one,
                labels: None
            },
            0.5,
            false
        )
        .is_none());
    }
}
