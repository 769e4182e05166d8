//! `quantkit quantize --target METRIC=VALUE` and `--config FILE`: automatic mixed precision
//! (issue 18). The search itself is `quantkit_ptq::mixed`; this module loads the data, picks
//! the evaluation samples, writes the model and the configuration, and measures the size and
//! speed cost of the choice on the integer engine.

use super::quantize::Args;
use anyhow::Context;
use quantkit_data::{BatchOptions, DataSource, OpenOptions};
use quantkit_graph::{Dim, Graph, Tensor};
use quantkit_ptq::analyze::{Feed, Setup};
use quantkit_ptq::mixed::{
    search, Evaluation, Measured, MixedConfig, Precision, SearchOptions, SearchResult, SearchStage,
    Target,
};
use quantkit_ptq::{Format, PtqConfig};
use std::io::IsTerminal;
use std::path::Path;

/// Calibration samples held in memory by `--target`/`--config` when `--calib-samples` is
/// not given.
pub const DEFAULT_CALIB_SAMPLES: usize = 1000;

/// Feeds of `path` (up to `limit` samples) with their labels when the source has them.
fn load(
    graph: &Graph,
    path: &Path,
    opts: &OpenOptions,
    limit: usize,
    batch: usize,
) -> anyhow::Result<(Vec<Feed>, Option<Vec<i64>>)> {
    let mut data: DataSource = quantkit_ptq::open_data_for_graph(graph, path, opts)
        .with_context(|| format!("opening data {}", path.display()))?;
    if let DataSource::Named(named) = &mut data {
        let mut feeds = Vec::new();
        for run in named.runs(batch.max(1), Some(limit))? {
            let run = run.with_context(|| format!("reading {}", path.display()))?;
            feeds.push(quantkit_ptq::run_tensors(run)?);
        }
        return Ok((feeds, None));
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
        batch_size: fixed.unwrap_or(batch).max(1),
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
    Ok((feeds, labels))
}

/// Which of `batches` calibration batches are held out for evaluation: a share `fraction`
/// of them, spread evenly over the file (batch `i` when `⌊(i+1)·f⌋ > ⌊i·f⌋`: every fourth
/// for 0.25), at least one, never all. Spread rather than the last ones: data in a file is
/// often ordered (recordings, classes), and the tail alone is a narrow sample of it.
pub fn held_out_batches(batches: usize, fraction: f64) -> Vec<bool> {
    let mut pick: Vec<bool> = (0..batches)
        .map(|i| ((i + 1) as f64 * fraction).floor() > (i as f64 * fraction).floor())
        .collect();
    if batches >= 2 && !pick.iter().any(|h| *h) {
        pick[batches - 1] = true;
    }
    if batches >= 2 && pick.iter().all(|h| *h) {
        pick[0] = false;
    }
    pick
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
    let hidden = args.json || !std::io::stderr().is_terminal();
    let calib_limit = args.calib_samples.unwrap_or(DEFAULT_CALIB_SAMPLES);
    let open = |split| OpenOptions {
        scale: args.scale,
        split,
        ..Default::default()
    };
    let (mut calib, mut calib_labels) = load(
        &graph,
        calib_path,
        &open(args.calib_split),
        calib_limit,
        args.batch_size,
    )?;
    // Evaluation data: --data, else held-out calibration batches spread over the file.
    let held_out = args.data.is_none() && calib.len() >= 2;
    if !(args.held_out > 0.0 && args.held_out < 1.0) {
        anyhow::bail!(
            "--held-out {}: expected a fraction of the calibration batches in (0, 1), e.g. 0.25",
            args.held_out
        );
    }
    // Sample indices (in the calibration file) of the held-out samples.
    let mut held_samples: Vec<usize> = Vec::new();
    let (eval, mut labels, eval_source) = if let Some(d) = &args.data {
        let (f, l) = load(
            &graph,
            d,
            &open(quantkit_data::Split::Test),
            args.eval_samples,
            args.batch_size,
        )?;
        let what = format!("{} ({} samples)", d.display(), samples(&f));
        (f, l, what)
    } else if held_out {
        let pick = held_out_batches(calib.len(), args.held_out);
        let (mut kept, mut held) = (Vec::new(), Vec::new());
        let (mut kept_labels, mut held_labels) = (Vec::new(), Vec::new());
        let mut at = 0usize;
        for (feed, h) in std::mem::take(&mut calib).into_iter().zip(&pick) {
            let n = samples(std::slice::from_ref(&feed));
            if let Some(l) = &calib_labels {
                let part = l.get(at..(at + n).min(l.len())).unwrap_or(&[]);
                if *h {
                    held_labels.extend_from_slice(part);
                } else {
                    kept_labels.extend_from_slice(part);
                }
            }
            if *h {
                held_samples.extend(at..at + n);
                held.push(feed);
            } else {
                kept.push(feed);
            }
            at += n;
        }
        calib = kept;
        if calib_labels.is_some() {
            calib_labels = Some(kept_labels);
        }
        let n_cal = samples(&calib);
        let n = samples(&held);
        (
            held,
            calib_labels.is_some().then_some(held_labels),
            format!(
                "{n} samples of {} held out from calibration ({} of {} batches, spread over the \
                 file; calibrated on the other {n_cal})",
                calib_path.display(),
                pick.iter().filter(|h| **h).count(),
                pick.len()
            ),
        )
    } else {
        eprintln!(
            "warning: {} gives one batch only: the target is measured on the samples it was \
             calibrated on, which flatters it; give --data EVAL or more calibration samples",
            calib_path.display()
        );
        let l = calib_labels.clone();
        (
            calib.clone(),
            l,
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
    let bar = |t: &str| {
        if hidden {
            return indicatif::ProgressBar::hidden();
        }
        let b = indicatif::ProgressBar::new(0);
        b.set_style(indicatif::ProgressStyle::with_template(t).expect("valid template"));
        b
    };
    let cal_bar = bar("calibrating {bar:30} {pos}/{len} batches [{elapsed_precise}]");
    let setup = Setup::new(graph, &config, &calib, &mut |d, t| {
        cal_bar.set_length(t as u64);
        cal_bar.set_position(d as u64);
    })
    .with_context(|| format!("calibrating {}", args.model.display()))?;
    cal_bar.finish_and_clear();
    let calibration_samples = samples(&calib);
    drop(calib);
    let confidence = (args.confidence > 0.0).then_some(args.confidence);
    let evaluation = Evaluation::new(&setup, &eval, labels.as_deref())?
        .with_confidence(confidence)
        .context("--confidence")?;
    let eval_source = match evaluation.decision_threshold() {
        Some(t) => format!(
            "{eval_source}; one score per sample: agreement is of the decisions score > {t}"
        ),
        None => eval_source,
    };
    let result: SearchResult;
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
                        "{}: expected {{\"layers\": {{\"LAYER\": \"float\" | \"int8\" | \"int8-w4\" | \"int16\"}}}}",
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
        if format_blocks_int16(&config) && !chosen.with(Precision::Act16).is_empty() {
            anyhow::bail!(
                "the configuration has int16 layers: QOperator's QLinear operators take 8-bit \
                 codes; write --format qdq"
            );
        }
        if let Some(t) = target {
            eprintln!("note: --config given, --target {t:?} is only checked, not searched");
        }
        measured = evaluation.measure(&setup.mixed(&chosen)?)?;
        int8 = evaluation.measure(&setup.quantized()?)?;
        result = SearchResult {
            target: target.unwrap_or(Target {
                metric: quantkit_ptq::mixed::Metric::Sqnr,
                value: f64::NEG_INFINITY,
            }),
            met: target.is_none_or(|t| t.met(&measured)),
            config: chosen.clone(),
            measured,
            int8,
            ranking: Vec::new(),
            steps: Vec::new(),
            samples: evaluation.samples(),
            seconds: Default::default(),
        };
    } else {
        let Some(target) = target else {
            anyhow::bail!("--target or --config");
        };
        let rank_bar = bar("ranking layers {bar:30} {pos}/{len} [{elapsed_precise}]");
        let search_bar = bar("search {bar:30} {pos} configurations [{elapsed_precise}]");
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
            },
            &mut |stage, d, t| {
                let b = if stage == SearchStage::Search {
                    &search_bar
                } else {
                    &rank_bar
                };
                b.set_length(t as u64);
                b.set_position(d as u64);
            },
        )?;
        rank_bar.finish_and_clear();
        search_bar.finish_and_clear();
        chosen = result.config.clone();
    }
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
    let saved = serde_json::json!({
        "model": args.model.display().to_string(),
        "target": args.target,
        "method": args.method,
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
            "layers_int8": layers.len() - n_float - n_w4 - n_a16,
            "layers_int8_w4": n_w4,
            "layers_int16": n_a16,
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
        println!("  chosen:   {}", fmt_metric(&result.measured, confidence));
        println!(
            "  {} of {} layers int8, {} with 4-bit weights, {} with int16 activations, {} float",
            layers.len() - n_float - n_w4 - n_a16,
            layers.len(),
            n_w4,
            n_a16,
            n_float
        );
        if n_a16 > 0 {
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

#[cfg(test)]
mod tests {
    use super::held_out_batches;

    #[test]
    fn held_out_batches_are_spread_over_the_file() {
        let pick = |n, f| -> Vec<usize> {
            held_out_batches(n, f)
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
