//! `quantkit analyze`: per-layer quantization error of a model and which layer is to blame
//! (weight error, local and propagated SQNR, output sensitivity), as a ranked table or JSON.

use super::progress::{Mode, Progress};
use anyhow::Context;
use quantkit_core::CalibrationMethod;
use quantkit_data::{BatchOptions, DataSource, OpenOptions};
use quantkit_graph::{Dim, Tensor};
use quantkit_ptq::analyze::{analyze, AnalyzeOptions, Feed, Report, Setup, Stage};
use quantkit_ptq::{PtqConfig, QdqOptions};
use std::path::{Path, PathBuf};

mod html;

/// Arguments of `quantkit analyze`.
#[derive(clap::Args)]
#[command(after_help = "\
What the numbers mean (SQNR = 10·log10(Σ float² / Σ (float − quantized)²) in dB; higher is \
better, +20 dB is 10× less error amplitude):
  weight SQNR   the layer's dequantized int8 weights against its float weights (whole tensor; \
the JSON has every output channel and the worst one)
  local SQNR    the layer alone quantized (its input Q/DQ, weights, output Q/DQ), fed the float \
model's values: the error this layer adds by itself
  prop SQNR     the same tensor in the fully quantized model: the error accumulated up to here; \
a big drop from the previous layers' prop to this layer's, with a low local, marks the culprit
  float→ SQNR   model-output SQNR with this layer left in float, all others quantized
  recovered     share of the quantized model's output error (squared) that goes away when this \
layer is left in float; the ranking's key
Layers are ranked most-to-blame first: by `recovered` where sensitivity ran (--top K layers with \
the lowest local SQNR; by default as many as fit in --budget seconds), then by local SQNR. Sensitivity graphs run only from their first node that differs from the \
float or the fully quantized run, from cached values (at most QUANTKIT_REUSE_BYTES, default 1G; \
0: full runs). A negative `recovered` means the output got worse with the layer in float: quantization errors of different layers partly cancel.")]
pub struct Args {
    /// Float ONNX model.
    pub model: PathBuf,
    /// Calibration data: IDX folder, image folder, folder with images.npy, .npy or .npz.
    #[arg(long)]
    pub calib: PathBuf,
    /// Evaluation data the errors are measured on (default: the calibration data, test
    /// split of an IDX folder).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Evaluation samples (arrays for an .npz of batches).
    #[arg(long, default_value_t = 64)]
    pub samples: usize,
    /// Calibration samples (arrays for an .npz of batches).
    #[arg(long, default_value_t = 256)]
    pub calib_samples: usize,
    /// Samples per executor call.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Run the sensitivity passes (two model passes per layer, the expensive part) on the K
    /// layers with the lowest local SQNR (tensor or worst channel) only; 0: none, `all`:
    /// every layer, `auto`: as many as fit in --budget.
    #[arg(long, default_value = "auto")]
    pub top: String,
    /// Seconds for the sensitivity passes with `--top auto`: layers are taken by local SQNR
    /// while their estimated cost fits, each estimated as two passes from the layer's first
    /// node on (the time of writing one QDQ graph plus the quantized pass's time times the
    /// share of the graph's nodes from the layer on). The estimate rests on times measured
    /// on this run, so the number of layers covered varies with the machine's load. With
    /// `-o DIR` the report's own passes, which run first, count against it.
    #[arg(long, default_value_t = 30.0)]
    pub budget: f64,
    /// Calibration method: minmax, ema[=M], percentile=P, entropy, mse, auto.
    #[arg(long, default_value = "minmax")]
    pub method: String,
    /// One weight scale per tensor instead of per output channel.
    #[arg(long)]
    pub per_tensor: bool,
    /// Activation type: u8 (default) or i8, both affine.
    #[arg(long, default_value = "u8")]
    pub activations: String,
    /// Weight bit width (2 to 8, symmetric, stored as int8).
    #[arg(long, default_value_t = 8)]
    pub weight_bits: u8,
    /// Keep this node in float (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Scale applied to .npy/.npz values (default: 1/255 for u8 data, else 1).
    #[arg(long)]
    pub scale: Option<f32>,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress on stderr: neither the progress bars (a terminal) nor the plain lines
    /// written when stderr is not a terminal or with --json (`analyze: H:MM:SS ...`: each
    /// stage as it starts, a line at most every 30 s within one). Warnings and errors are
    /// still printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// Write the report into this folder (created if absent): `report.html`, a
    /// self-contained page of charts (per-layer SQNR, sensitivity ranking, activation
    /// histograms with clip range and grid, error vs bit width, one weight's error picture),
    /// and `report.json`, the same figures as numbers. A path ending in `.json` writes only
    /// the JSON report to that file.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Histogram bins per activation in the HTML report.
    #[arg(long, default_value_t = 64)]
    pub bins: usize,
    /// Evaluation samples the report's weight bit-width sweep (seven quantized passes)
    /// runs on: the first batches holding at least this many.
    #[arg(long, default_value_t = 16)]
    pub sweep_samples: usize,
}

fn parse_top(s: &str) -> anyhow::Result<Option<usize>> {
    if s == "all" || s == "auto" {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| anyhow::anyhow!("--top {s}: expected a number of layers or `all`"))
}

/// Reads up to `limit` samples of `path` as feeds of the model input `input`, in chunks
/// that fit its batch dimension.
fn load_feeds(
    graph: &quantkit_graph::Graph,
    path: &Path,
    opts: &OpenOptions,
    limit: usize,
    batch: usize,
) -> anyhow::Result<Vec<Feed>> {
    let mut data: DataSource = quantkit_ptq::open_data_for_graph(graph, path, opts)
        .with_context(|| format!("opening data {}", path.display()))?;
    // An .npz named after the model's inputs feeds every input, of any type, run by run.
    if let DataSource::Named(named) = &mut data {
        let mut feeds = Vec::new();
        for run in named.runs(batch.max(1), Some(limit))? {
            let run = run.with_context(|| format!("reading {}", path.display()))?;
            let tensors = quantkit_ptq::run_tensors(run)?;
            let bad = tensors
                .iter()
                .any(|(_, t)| t.dtype.is_float() && t.to_f64_vec().iter().any(|v| !v.is_finite()));
            if bad {
                anyhow::bail!("{}: non-finite input value", path.display());
            }
            feeds.push(tensors);
        }
        if feeds.is_empty() {
            anyhow::bail!("{}: no samples", path.display());
        }
        return Ok(feeds);
    }
    let (input, declared) = quantkit_ptq::calibrate::calibration_input(graph)?;
    let fixed = match declared.as_ref().and_then(|d| d.first()) {
        Some(Dim::Known(m)) if *m > 0 => Some(*m),
        _ => None,
    };
    let bopts = BatchOptions {
        batch_size: fixed.unwrap_or(batch).max(1),
        limit: Some(limit),
        ..BatchOptions::default()
    };
    let mut feeds = Vec::new();
    for b in data.batches(&bopts)? {
        let b = b.with_context(|| format!("reading {}", path.display()))?;
        if b.data.iter().any(|v| !v.is_finite()) {
            anyhow::bail!("{}: non-finite input value", path.display());
        }
        if fixed.is_some_and(|m| b.shape.first() != Some(&m)) {
            continue; // a short last batch of a model with a fixed batch size
        }
        feeds.push(vec![(input.clone(), Tensor::from_f32(&b.shape, b.data))]);
    }
    if feeds.is_empty() {
        anyhow::bail!("{}: no samples", path.display());
    }
    Ok(feeds)
}

/// Runs `quantkit analyze`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let method: CalibrationMethod = args
        .method
        .parse()
        .with_context(|| format!("--method {}", args.method))?;
    let signed_activations = match args.activations.as_str() {
        "u8" | "uint8" => false,
        "i8" | "int8" => true,
        other => anyhow::bail!("--activations {other}: expected u8 or i8"),
    };
    let top_k = parse_top(&args.top)?;
    let log = Progress::new("analyze", Mode::of(args.json, args.quiet));
    let graph = quantkit_graph::load_model(&args.model)?;
    log.line(format_args!(
        "loading {} (up to {} calibration samples) and {} (up to {} evaluation samples)",
        args.calib.display(),
        args.calib_samples,
        args.data.as_deref().unwrap_or(&args.calib).display(),
        args.samples
    ));
    let calib = load_feeds(
        &graph,
        &args.calib,
        &OpenOptions {
            scale: args.scale,
            split: quantkit_data::Split::Train,
            ..Default::default()
        },
        args.calib_samples,
        args.batch,
    )?;
    let eval = load_feeds(
        &graph,
        args.data.as_deref().unwrap_or(&args.calib),
        &OpenOptions {
            scale: args.scale,
            split: quantkit_data::Split::Test,
            ..Default::default()
        },
        args.samples,
        args.batch,
    )?;
    let config = PtqConfig {
        method,
        qdq: QdqOptions {
            per_channel: !args.per_tensor,
            weight_bits: args.weight_bits,
            signed_activations,
        },
        exclude: args.exclude.clone(),
        ..Default::default()
    };
    let b = log.bar("calibrating {bar:30} {pos}/{len} batches [{elapsed_precise}]");
    log.line(format_args!(
        "calibrating ({}) on {} batches",
        args.method,
        calib.len()
    ));
    let setup = Setup::new(graph, &config, &calib, &mut |done, total| {
        b.set_length(total as u64);
        b.set_position(done as u64);
        log.tick("calibrating", done, total, "batches");
    })
    .with_context(|| format!("calibrating {}", args.model.display()))?;
    b.finish_and_clear();
    drop(calib);
    // The report's own passes (histograms, bit widths) run first and count against the
    // sensitivity budget, so `--budget` bounds the whole run.
    let report_dir = args
        .output
        .as_ref()
        .filter(|o| o.extension().is_none_or(|e| e != "json"));
    let t0 = std::time::Instant::now();
    let details = match report_dir {
        Some(_) => {
            let b = log.bar(
                "histograms and bit-width sweep {bar:30} {pos}/{len} passes [{elapsed_precise}]",
            );
            log.line("report: histograms and bit-width sweep");
            let d = quantkit_ptq::analyze::details(
                &setup,
                &eval,
                args.bins,
                args.sweep_samples,
                &mut |done, total| {
                    b.set_length(total as u64);
                    b.set_position(done as u64);
                    log.tick(
                        "report: histograms and bit-width sweep",
                        done,
                        total,
                        "passes",
                    );
                },
            )
            .with_context(|| {
                format!(
                    "measuring histograms and bit widths of {}",
                    args.model.display()
                )
            })?;
            b.finish_and_clear();
            Some(d)
        }
        None => None,
    };
    let budget_left = (args.budget - t0.elapsed().as_secs_f64()).max(0.0);
    let passes = log.bar("float + quantized passes {bar:30} {pos}/{len} batches");
    let sens = log.bar("sensitivity {bar:30} {pos}/{len} layers [{elapsed_precise}, eta {eta}]");
    log.line(format_args!(
        "float and quantized passes over {} batches",
        eval.len()
    ));
    let report = analyze(
        &setup,
        &eval,
        &AnalyzeOptions {
            top_k,
            budget: (args.top == "auto")
                .then(|| std::time::Duration::from_secs_f64(budget_left.clamp(0.0, 1e9))),
            ..Default::default()
        },
        &mut |stage, done, total| {
            let b = if stage == Stage::Passes {
                &passes
            } else {
                &sens
            };
            b.set_length(total as u64);
            b.set_position(done as u64);
            match stage {
                Stage::Passes => log.tick("passes", done, total, "batches"),
                Stage::Sensitivity if done == 0 => log.line(format_args!(
                    "sensitivity passes on {total} layers (--top {}{})",
                    args.top,
                    if args.top == "auto" {
                        format!(", {budget_left:.0} s of --budget left")
                    } else {
                        String::new()
                    }
                )),
                Stage::Sensitivity => log.tick("sensitivity", done, total, "layers"),
            }
        },
    )
    .with_context(|| format!("analyzing {}", args.model.display()))?;
    passes.finish_and_clear();
    sens.finish_and_clear();
    log.line(format_args!(
        "done: {} layers, sensitivity on {}",
        report.layers.len(),
        report
            .layers
            .iter()
            .filter(|l| l.sensitivity.is_some())
            .count()
    ));
    let mut json = serde_json::to_value(&report)?;
    json["model"] = args.model.display().to_string().into();
    json["method"] = args.method.clone().into();
    json["weights"] = format!(
        "i{} symmetric {}",
        args.weight_bits,
        if args.per_tensor {
            "per-tensor"
        } else {
            "per-channel"
        }
    )
    .into();
    json["activations"] = args.activations.clone().into();
    if let Some(o) = &args.output {
        match &details {
            Some(d) => write_report_dir(o, &args, &setup, d, &report, json.clone())?,
            None => write_file(o, serde_json::to_string_pretty(&json)?.as_bytes())?,
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print_table(&args, &report);
    }
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    quantkit_core::atomic::write_bytes(path, bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// `-o DIR`: the HTML page and the JSON report with the report's extra measurements.
fn write_report_dir(
    dir: &Path,
    args: &Args,
    setup: &Setup,
    d: &quantkit_ptq::analyze::Details,
    report: &Report,
    mut json: serde_json::Value,
) -> anyhow::Result<()> {
    use quantkit_ptq::analyze::weight_picture;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // The error picture: the weight of the most-to-blame layer that has one.
    let mut picture = None;
    for l in report.layers.iter().filter(|l| !l.weights.is_empty()) {
        if let Some(p) = weight_picture(setup, &l.name, 256)? {
            picture = Some(p);
            break;
        }
    }
    json["details"] = serde_json::to_value(d)?;
    json["weight_picture"] = serde_json::to_value(&picture)?;
    let html = render_html(args, setup, report, d, picture.as_ref())?;
    write_file(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    write_file(&dir.join("report.html"), html.as_bytes())?;
    if !args.json {
        println!(
            "report written to {} and {}",
            dir.join("report.html").display(),
            dir.join("report.json").display()
        );
    }
    Ok(())
}

fn render_html(
    args: &Args,
    setup: &Setup,
    report: &Report,
    d: &quantkit_ptq::analyze::Details,
    picture: Option<&quantkit_ptq::analyze::WeightPicture>,
) -> anyhow::Result<String> {
    use html::{esc, Figure, Row};
    let chart = |r: Result<String, String>| r.map_err(|e| anyhow::anyhow!("drawing a chart: {e}"));
    // Graph order of the layers.
    let pos: std::collections::HashMap<&str, usize> = setup
        .float
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let mut by_graph: Vec<_> = report.layers.iter().collect();
    by_graph.sort_by_key(|l| pos.get(l.name.as_str()).copied().unwrap_or(usize::MAX));
    let rows: Vec<Row> = by_graph
        .iter()
        .map(|l| Row {
            name: &l.name,
            op: &l.op,
            local: l.local.map(|s| s.sqnr_db),
            propagated: l.propagated.map(|s| s.sqnr_db),
        })
        .collect();
    // The five most-to-blame layers drawn in colour: among those with a weight for the
    // weight chart, among those with an output activation for the activation chart.
    let top_of = |keep: &dyn Fn(&quantkit_ptq::analyze::LayerReport) -> bool| -> Vec<String> {
        report
            .layers
            .iter()
            .filter(|l| keep(l))
            .take(5)
            .map(|l| l.name.clone())
            .collect()
    };
    let top_weighted = top_of(&|l| !l.weights.is_empty());
    let top_output = top_of(&|l| l.output.is_some());
    let mut figs = vec![Figure {
        id: "sqnr".into(),
        caption: "Local SQNR: the layer alone quantized, fed float values (the error it adds). \
Propagated: the same tensor in the fully quantized model (the error accumulated up to here). \
A low local bar marks a layer that adds error; a low propagated bar with a high local one only \
inherits it."
            .into(),
        svg: chart(html::sqnr_bars(&rows))?,
    }];
    if let Some(svg) =
        html::ranking_bars(report, 40).map_err(|e| anyhow::anyhow!("drawing a chart: {e}"))?
    {
        figs.push(Figure {
            id: "ranking".into(),
            caption: "Share of the quantized model's output error (squared) that goes away when \
the layer is left in float, most to blame first (layers the sensitivity passes ran on)."
                .into(),
            svg,
        });
    }
    figs.push(Figure {
        id: "bits-weights".into(),
        caption: "Every weight quantized to 2–8 bits (activations as calibrated, 8 bits): the \
worst weight SQNR of each layer (grey; the five most-to-blame layers with a weight in colour) \
and the model output SQNR (black)."
            .into(),
        svg: chart(html::weight_bits_chart(d, &top_weighted))?,
    });
    figs.push(Figure {
        id: "bits-activations".into(),
        caption: "Each layer's output activation alone quantized to 2–8 bits over its calibrated \
clip range, on the evaluation data: about 6 dB per bit while rounding dominates, flatter where \
clipping does."
            .into(),
        svg: chart(html::activation_bits_chart(d, &top_output))?,
    });
    if let Some(p) = picture {
        figs.push(Figure {
            id: "picture".into(),
            caption: format!(
                "The weight of `{}`, the most-to-blame layer with a weight: float vs \
dequantized values in storage order (the first 256) and the error of each element (within ± \
half a step of its channel's scale).",
                p.layer
            ),
            svg: chart(html::weight_picture_chart(p))?,
        });
    }
    for (i, a) in d.activations.iter().enumerate() {
        figs.push(Figure {
            id: format!("hist-{i}"),
            caption: format!(
                "{}{}: observed {:.4}..{:.4}, clip range {:.4}..{:.4} (scale {:.3e}, zero point \
{}), {} of {} values clipped ({:.3}%)",
                a.tensor,
                a.layer
                    .as_deref()
                    .map(|l| format!(" (output of {l})"))
                    .unwrap_or_default(),
                a.observed.0,
                a.observed.1,
                a.clip.0,
                a.clip.1,
                a.scale,
                a.zero_point,
                a.clipped_below + a.clipped_above,
                a.elements,
                100.0 * a.clipped_fraction
            ),
            svg: chart(html::histogram(a))?,
        });
    }
    let top1 = report.output.top1_agreement.map_or(String::new(), |t| {
        format!(", top-1 agreement {:.1}%", 100.0 * t)
    });
    let summary =
        vec![
            format!(
            "{}: {} layers, {} evaluation / {} calibration samples, --method {}, weights i{} {}, \
activations {}.",
            args.model.display(),
            report.layers.len(),
            report.samples,
            report.calibration_samples,
            args.method,
            args.weight_bits,
            if args.per_tensor { "per-tensor" } else { "per-channel" },
            args.activations
        ),
            format!(
                "Quantized model output: SQNR {} dB{top1}. SQNR = 10·log10(Σ float² / Σ (float − \
quantized)²); higher is better, 6 dB is one bit. docs/analysis.md explains every figure.",
                db(Some(report.output.sqnr_db))
            ),
        ];
    let mut table = String::from(
        "<h2>Layers, most to blame first</h2>\n<table data-table=\"ranking\"><tr><th>rank</th>\
<th>layer</th><th>op</th><th>weight dB</th><th>local dB</th><th>prop dB</th><th>float→ dB</th>\
<th>top-1</th><th>recovered</th></tr>\n",
    );
    for (i, l) in report.layers.iter().enumerate() {
        let weight = l
            .weights
            .iter()
            .map(|w| w.total.sqnr_db)
            .min_by(f64::total_cmp);
        let (lf, t1, rec) = match &l.sensitivity {
            Some(s) => (
                db(Some(s.left_float.sqnr_db)),
                s.left_float
                    .top1_agreement
                    .map_or("-".into(), |t| format!("{:.1}%", 100.0 * t)),
                format!("{:.1}%", 100.0 * s.recovered),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        table.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
<td>{}</td><td>{}</td></tr>\n",
            i + 1,
            esc(&l.name),
            esc(&l.op),
            db(weight),
            db(l.local.map(|s| s.sqnr_db)),
            db(l.propagated.map(|s| s.sqnr_db)),
            lf,
            t1,
            rec
        ));
    }
    table.push_str("</table>\n<h2>Charts</h2>\n");
    Ok(html::page(
        &format!("quantkit analyze: {}", args.model.display()),
        &summary,
        &table,
        &figs,
    ))
}

fn db(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_infinite() && x > 0.0 => "exact".into(),
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    }
}

fn print_table(args: &Args, r: &Report) {
    let top1 = r.output.top1_agreement.map_or(String::new(), |t| {
        format!(", top-1 agreement {:.1}%", 100.0 * t)
    });
    println!(
        "{}: {} layers, {} evaluation / {} calibration samples; quantized output SQNR {} dB{top1}",
        args.model.display(),
        r.layers.len(),
        r.samples,
        r.calibration_samples,
        db(Some(r.output.sqnr_db))
    );
    let w = r
        .layers
        .iter()
        .map(|l| l.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let o = r
        .layers
        .iter()
        .map(|l| l.op.len())
        .max()
        .unwrap_or(2)
        .max(2);
    println!(
        "{:>4}  {:w$}  {:o$}  {:>8}  {:>8}  {:>8}  {:>9}  {:>9}  {:>7}",
        "rank", "layer", "op", "weight", "local", "prop", "float→", "top-1", "recov."
    );
    for (i, l) in r.layers.iter().enumerate() {
        let weight = l
            .weights
            .iter()
            .map(|w| w.total.sqnr_db)
            .min_by(f64::total_cmp);
        let (lf, t1, rec) = match &l.sensitivity {
            Some(s) => (
                db(Some(s.left_float.sqnr_db)),
                s.left_float
                    .top1_agreement
                    .map_or("-".into(), |t| format!("{:.1}%", 100.0 * t)),
                format!("{:.1}%", 100.0 * s.recovered),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "{:>4}  {:w$}  {:o$}  {:>8}  {:>8}  {:>8}  {:>9}  {:>9}  {:>7}",
            i + 1,
            l.name,
            l.op,
            db(weight),
            db(l.local.map(|s| s.sqnr_db)),
            db(l.propagated.map(|s| s.sqnr_db)),
            lf,
            t1,
            rec
        );
    }
    println!("(SQNR in dB; `quantkit analyze --help` says what each column means)");
}
