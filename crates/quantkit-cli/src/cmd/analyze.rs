//! `quantkit analyze`: per-layer quantization error of a model and which layer is to blame
//! (weight error, local and propagated SQNR, output sensitivity), as a ranked table or JSON.

use anyhow::Context;
use quantkit_core::CalibrationMethod;
use quantkit_data::{BatchOptions, DataSource, OpenOptions};
use quantkit_graph::{Dim, Tensor};
use quantkit_ptq::analyze::{analyze, AnalyzeOptions, Feed, Report, Setup, Stage};
use quantkit_ptq::{PtqConfig, QdqOptions};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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
the lowest local SQNR; by default as many as fit in --budget seconds), then by local SQNR. A negative `recovered` means the output got worse with the layer in float: quantization errors of different layers partly cancel.")]
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
    /// Seconds for the sensitivity passes with `--top auto` (estimated from the time of one
    /// quantized pass).
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
    /// Also write the JSON report to this file.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
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

fn bar(hidden: bool, template: &str) -> indicatif::ProgressBar {
    if hidden {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(0);
    b.set_style(indicatif::ProgressStyle::with_template(template).expect("valid template"));
    b
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
    let graph = quantkit_graph::load_model(&args.model)?;
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
    let hidden = args.json || !std::io::stderr().is_terminal();
    let b = bar(
        hidden,
        "calibrating {bar:30} {pos}/{len} batches [{elapsed_precise}]",
    );
    let setup = Setup::new(graph, &config, &calib, &mut |done, total| {
        b.set_length(total as u64);
        b.set_position(done as u64);
    })
    .with_context(|| format!("calibrating {}", args.model.display()))?;
    b.finish_and_clear();
    drop(calib);
    let passes = bar(
        hidden,
        "float + quantized passes {bar:30} {pos}/{len} batches",
    );
    let sens = bar(
        hidden,
        "sensitivity {bar:30} {pos}/{len} layers [{elapsed_precise}, eta {eta}]",
    );
    let report = analyze(
        &setup,
        &eval,
        &AnalyzeOptions {
            top_k,
            budget: (args.top == "auto")
                .then(|| std::time::Duration::from_secs_f64(args.budget.clamp(0.0, 1e9))),
        },
        &mut |stage, done, total| {
            let b = if stage == Stage::Passes {
                &passes
            } else {
                &sens
            };
            b.set_length(total as u64);
            b.set_position(done as u64);
        },
    )
    .with_context(|| format!("analyzing {}", args.model.display()))?;
    passes.finish_and_clear();
    sens.finish_and_clear();
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
        let tmp = o.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, o).with_context(|| format!("writing {}", o.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        print_table(&args, &report);
    }
    Ok(())
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
