//! `quantkit quantize`: post-training static quantization of an ONNX model to QDQ or
//! QOperator ONNX, or dynamic quantization (`--dynamic`, no calibration data).

use anyhow::Context;
use quantkit_core::CalibrationMethod;
use quantkit_graph::OpKind;
use quantkit_ptq::{
    quantize_dynamic, quantize_static_staged, Format, PtqConfig, PtqStage, QdqOptions,
};
use std::path::PathBuf;

/// Arguments of `quantkit quantize`.
#[derive(clap::Args)]
pub struct Args {
    /// Float ONNX model.
    pub model: PathBuf,
    /// Calibration data: IDX folder, image folder, folder with images.npy, .npy or .npz
    /// (required unless --dynamic). A model with several inputs, or with integer inputs,
    /// takes an .npz with one array per input named after it: NAME holds all samples
    /// stacked on the input's batch axis (cut into runs of --batch-size), NAME__0,
    /// NAME__1... hold the feed of each run; an array with no batch axis to split (a
    /// scalar, a fixed-shape state) is fed unchanged to every run. Integer inputs keep
    /// their dtype (see docs/data.md).
    #[arg(long)]
    pub calib: Option<PathBuf>,
    /// Dynamic quantization as ONNX Runtime's quantize_dynamic writes it: int8 weights,
    /// activations quantized at run time (DynamicQuantizeLinear + MatMulInteger/ConvInteger).
    #[arg(long)]
    pub dynamic: bool,
    /// Output ONNX model (written atomically).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Output format of static quantization: qdq (QuantizeLinear/DequantizeLinear around
    /// float ops) or qoperator (QLinearConv, QLinearMatMul, QGemm, QLinearAdd...).
    #[arg(long, default_value = "qdq")]
    pub format: String,
    /// Calibration method: minmax, ema[=M], percentile=P, entropy, mse, or auto (per
    /// activation the one of minmax, percentile=99.99, mse and entropy that makes the
    /// quantized model's outputs closest to the float model's: KL divergence of the
    /// softmax for a classifier's scores or a Softmax output, squared error for other
    /// outputs; a greedy search from minmax on the first 512 calibration samples, checked
    /// on the next 256; per activation the two candidates with the least local error of
    /// its consumers are run in the part of the model downstream of it, and one is kept
    /// only if it beats minmax beyond noise; docs/quantization.md §6).
    /// Not used by --dynamic.
    #[arg(long, default_value = "minmax")]
    pub method: String,
    /// One weight scale per tensor instead of per output channel.
    #[arg(long)]
    pub per_tensor: bool,
    /// Activation type: u8 (default) or i8, both affine (--dynamic: u8 only).
    #[arg(long, default_value = "u8")]
    pub activations: String,
    /// Weight bit width (2 to 8, symmetric). Static QDQ models with 2–4 bits store the
    /// weight codes as ONNX int4 initializers (opset 21, two codes per byte; ONNX Runtime
    /// and quantkit's engine read them; with --target/--config, the layers given 4-bit
    /// weights), other widths and formats as int8.
    #[arg(long, default_value_t = 8)]
    pub weight_bits: u8,
    /// Keep 2–4-bit weight codes in int8 initializers (opset 13) instead of int4, for
    /// runtimes without opset-21 int4 DequantizeLinear.
    #[arg(long)]
    pub int8_weights: bool,
    /// Activation bit width: 8 (default; type from --activations) or 16: every quantized
    /// activation int16, symmetric per tensor, with int8 weights (W8A16, ONNX Runtime's
    /// QInt16 activations), an opset-21 QDQ model. ONNX Runtime and quantkit's engine run
    /// 16-bit layers as DQ → float op → Q (no int16 kernels). QDQ format only; holds the
    /// calibration data in memory like --target.
    #[arg(long, default_value_t = 8, value_name = "8|16")]
    pub activation_bits: u8,
    /// With --target: never try int16 activations, leave guilty layers in float directly.
    #[arg(long)]
    pub no_int16: bool,
    /// Keep this node in float (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Quantize the statistics of a normalisation written as primitive operators (the mean
    /// and variance of a LayerNorm / RMSNorm computed by Reduce* ops and divided by) like any
    /// other activation. By default they stay float: they are per-row scalars, and quantized
    /// a variance written as `E[x²] − E[x]²` cancels or rounds to 0 (docs/architecture.md).
    #[arg(long)]
    pub quantize_statistics: bool,
    /// Use at most N calibration samples (arrays, for an .npz of batches; runs, for NAME__K
    /// arrays).
    #[arg(long)]
    pub calib_samples: Option<usize>,
    /// Samples per executor call during calibration.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Split of an IDX calibration folder: train (default — calibration should not see the
    /// images a model is evaluated on) or test.
    #[arg(long, default_value = "train")]
    pub calib_split: quantkit_data::Split,
    /// Scale applied to .npy/.npz values (default: 1/255 for u8 data, else 1).
    #[arg(long)]
    pub scale: Option<f32>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress on stderr: neither the progress bar (a terminal) nor, with --target,
    /// --config or --activation-bits 16, the plain progress lines written when stderr is
    /// not a terminal or with --json (`search: H:MM:SS ...` for --target: each stage as it
    /// starts, one line per configuration measured, a line at most every 30 s in long
    /// passes; `quantize: H:MM:SS ...` for the others). Warnings and errors are still
    /// printed.
    #[arg(short, long)]
    pub quiet: bool,
    /// Automatic mixed precision: METRIC=VALUE with METRIC agreement (top-1 vs float,
    /// e.g. agreement=0.99), cosine (outputs vs float), sqnr (dB on the outputs) or accuracy
    /// (largest drop in points against labels, e.g. accuracy=0.5). Starting from full int8,
    /// the smallest prefix of `quantkit analyze`'s sensitivity ranking (found by doubling and
    /// bisection) gets int16 activations (opset 21); where int16 everywhere is not enough,
    /// the weighted layers 16-bit weights too (int16-w16), and float only where that is not
    /// enough either (--no-int16: float directly), then every change the target does not need is undone
    /// (tried by groups); with
    /// --weight-bits 4 the least sensitive layers get 4-bit weights where the target still
    /// holds. Measured on --data, else on --held-out of the calibration samples, every k-th
    /// sample of the file (never on samples calibrated with, unless there are too few: then
    /// a warning); the search runs on part of those samples and its choice is confirmed on
    /// the rest (--confirm), where `met` is decided. An agreement target must hold for the lower --confidence bound of the
    /// agreement, not only the share measured; a configuration that provably cannot meet it
    /// stops after the batch that shows it (same choice as running every batch). Each
    /// configuration runs only from its first node that differs from a run kept (the
    /// all-int8 one, the last ones measured), from cached values at cuts of that run: the
    /// same figures as full runs; the cache holds at most QUANTKIT_REUSE_BYTES (default 1G;
    /// 0: full runs). Holds --calib-samples (default 1000) and
    /// --eval-samples in memory. The chosen configuration is written to --save-config
    /// (default OUT.mixed.json). Progress: bars on a terminal; when stderr is not one, or
    /// with --json, plain `search: H:MM:SS ...` lines on stderr, one per configuration
    /// measured (action, figure against the target, verdict, seconds) and a summary with
    /// the mean seconds per configuration (--quiet silences them).
    #[arg(long, value_name = "METRIC=VALUE")]
    pub target: Option<String>,
    /// Re-apply a configuration written by --target (JSON: {"layers": {"LAYER": "float" |
    /// "int8" | "int8-w4" | "int16" | "int16-w16"}}; int16-w16: int16 activations and
    /// weights); layers are named by their first node as `quantkit analyze` prints them.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where --target writes the chosen configuration (atomically; default: next to the
    /// output, OUT_STEM.mixed.json).
    #[arg(long, value_name = "FILE")]
    pub save_config: Option<PathBuf>,
    /// Evaluation data for --target (IDX folder: test split).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Labels (.npy of integers, one per sample of the evaluation data; of the calibration
    /// file when the evaluation samples are its held-out part) for --target accuracy=...;
    /// an IDX folder brings its own.
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// With --target and no --data: the share of the calibration samples held out to
    /// measure the target on: every k-th sample of the file (every fourth for 0.25),
    /// interleaved with the samples calibrated on, so that a file ordered by class, source
    /// or directory gives held-out samples from all of it rather than a few clusters of
    /// alike ones (whole batches were held out before, and the confidence bound overstated
    /// what they showed). Per-run arrays (`NAME__K` in an .npz) are held out by run.
    #[arg(long, default_value_t = 0.25, value_name = "FRACTION")]
    pub held_out: f64,
    /// With --target agreement=...: accept a configuration only when the one-sided lower
    /// bound of its agreement at this confidence level (Wilson score interval over the
    /// evaluation samples) meets the target, so that it holds on fresh data and not only
    /// on the samples measured (at 0.95, 0.99 on 544 samples allows one disagreement; fewer
    /// than 268 samples cannot show 0.99 and are refused). The bound assumes independent
    /// samples: the held-out samples are interleaved through the file for that reason;
    /// near-duplicates inside the file still make it optimistic (give --data from another
    /// source then). An output with several rows per sample ([N, T, C]: the frames of a
    /// text line) is judged with the samples as clusters: the bound's sample count lies
    /// between the inputs and the rows (docs/analysis.md). The bound is per configuration:
    /// the search measures many on the same samples, so its own figure is optimistic;
    /// --confirm measures the choice on samples the search never ran, and `met` is
    /// decided there. 0: judge the share measured.
    #[arg(long, default_value_t = 0.95, value_name = "LEVEL")]
    pub confidence: f64,
    /// With --target (and --config): the share of the evaluation samples (--data, or the
    /// held-out ones) kept out of the search to confirm its choice: every k-th of them
    /// (every second for 0.5), never run by the search. The search chooses on the rest;
    /// its choice is then measured once on these samples, and the target is met only if it
    /// holds there (the search figure, chosen among hundreds of configurations measured on
    /// the same samples, is optimistic). When the choice misses there, more conservative
    /// configurations the search accepted are tried (--confirm-tests). Output and JSON
    /// show both figures. 0: no confirmation; `met` is then of the search's samples and
    /// marked optimistic.
    #[arg(long, default_value_t = 0.5, value_name = "FRACTION")]
    pub confirm: f64,
    /// With --confirm: the most configurations tested on the confirmation samples (the
    /// search's choice, then more conservative ones it accepted, back to the first it
    /// accepted), fixed before any is run; each is judged at the Bonferroni level
    /// 1 − (1 − LEVEL)/K so that the chance of confirming a configuration that misses the
    /// target stays below 1 − --confidence. Each test more raises the samples needed (at
    /// 0.95 for agreement=0.99, with every sample agreeing: 268 for K = 1, 381 for 2, 449
    /// for 3).
    #[arg(long, default_value_t = quantkit_ptq::mixed::DEFAULT_CONFIRM_TESTS, value_name = "K")]
    pub confirm_tests: usize,
    /// With --target: after the first configuration that meets the target, keep a step
    /// that gives quality back (a layer pruned back to int8, 4-bit weights) only if the
    /// output SQNR on the search samples stays within DB dB of that configuration's, as well
    /// as meeting the target. An agreement count saturates once every search sample agrees,
    /// so pruning by it alone drifts to a configuration that misses on fresh samples
    /// (Magika: SQNR 60 → 40 dB with all 340 search files agreeing; 653/660 on
    /// confirmation). Off by default (docs/analysis.md, "Pruning floor").
    #[arg(long, value_name = "DB")]
    pub prune_floor: Option<f64>,
    /// Evaluation samples for --target.
    #[arg(long, default_value_t = 1000)]
    pub eval_samples: usize,
    /// Leave at most K layers in float with --target.
    #[arg(long, value_name = "K")]
    pub max_float: Option<usize>,
    /// Seconds for --target's sensitivity ranking (as `quantkit analyze --budget`; the
    /// search's passes run on 32 evaluation samples and only with the layer left float, so
    /// more layers fit than in `analyze`'s); layers beyond it are ranked by local SQNR.
    /// The estimate rests on times measured on the run: the layers covered vary with load.
    #[arg(long, default_value_t = 60.0)]
    pub budget: f64,
}

/// Runs `quantkit quantize`.
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
    let format: Format = args.format.parse()?;
    if args.batch_size == 0 {
        anyhow::bail!("--batch-size must be at least 1");
    }
    let size_before = std::fs::metadata(&args.model)
        .with_context(|| format!("reading {}", args.model.display()))?
        .len();
    let graph = quantkit_graph::load_model(&args.model)?;
    if !matches!(args.activation_bits, 8 | 16) {
        anyhow::bail!(
            "--activation-bits {}: supported are 8 and 16",
            args.activation_bits
        );
    }
    let mixed = args.target.is_some() || args.config.is_some() || args.activation_bits == 16;
    let config = PtqConfig {
        format,
        method,
        qdq: QdqOptions {
            per_channel: !args.per_tensor,
            // With --target, --weight-bits 4 allows 4-bit weights where the target holds;
            // the other layers keep int8.
            weight_bits: if mixed { 8 } else { args.weight_bits },
            signed_activations,
        },
        exclude: args.exclude.clone(),
        calib_samples: args.calib_samples,
        batch_size: args.batch_size,
        quantize_statistics: args.quantize_statistics,
    };
    if mixed {
        if !(2..=8).contains(&args.weight_bits) {
            anyhow::bail!("--weight-bits {}: supported are 2 to 8", args.weight_bits);
        }
        return super::target::run(&args, graph, config, size_before);
    }
    if args.dynamic {
        if format != Format::Qdq {
            anyhow::bail!("--dynamic writes its own layout; --format does not apply");
        }
        if signed_activations {
            anyhow::bail!("--dynamic quantizes activations to u8 at run time; --activations i8 does not apply");
        }
        if let Some(c) = &args.calib {
            eprintln!(
                "note: --dynamic needs no calibration data; {} is not read",
                c.display()
            );
        }
        let (q, summary) = quantize_dynamic(graph, &config)
            .with_context(|| format!("quantizing {}", args.model.display()))?;
        return report(&args, &q, &summary, size_before);
    }
    let Some(calib) = &args.calib else {
        anyhow::bail!("--calib DATA is required for static quantization (or use --dynamic)");
    };
    let mut data = quantkit_ptq::open_data_for_graph(
        &graph,
        calib,
        &quantkit_data::OpenOptions {
            scale: args.scale,
            split: args.calib_split,
            ..Default::default()
        },
    )
    .with_context(|| format!("opening calibration data {}", calib.display()))?;
    let bar = if args.json || args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "calibrating {bar:30} {pos}/{len} samples [{elapsed_precise}]",
            )
            .expect("valid template"),
        );
        b
    };
    let mut stage = PtqStage::Calibrating;
    let (mut q, summary) =
        quantize_static_staged(graph, &mut data, &config, &mut |st, done, total| {
            if st != stage {
                stage = st;
                bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "auto: choosing ranges {bar:30} {pos}/{len} activations [{elapsed_precise}]",
                )
                .expect("valid template"),
            );
            }
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })
        .with_context(|| format!("quantizing {}", args.model.display()))?;
    bar.finish_and_clear();
    if format == Format::Qdq && args.weight_bits <= 4 && !args.int8_weights {
        quantkit_ptq::store_weights_int4(&mut q).context("storing the weights as int4")?;
    }
    report(&args, &q, &summary, size_before)
}

/// Writes the model (atomically) and prints the summary.
fn report(
    args: &Args,
    q: &quantkit_graph::Graph,
    summary: &quantkit_ptq::Summary,
    size_before: u64,
) -> anyhow::Result<()> {
    quantkit_graph::save_model(q, &args.output)?;
    let size_after = std::fs::metadata(&args.output)?.len();
    if args.json {
        let mut v = serde_json::to_value(summary)?;
        v["model"] = args.model.display().to_string().into();
        v["output"] = args.output.display().to_string().into();
        v["size_before"] = size_before.into();
        v["size_after"] = size_after.into();
        v["size_ratio"] = (size_after as f64 / size_before.max(1) as f64).into();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "quantized {} -> {}",
        args.model.display(),
        args.output.display()
    );
    if summary.format == "dynamic" {
        println!(
            "  format dynamic, weights {}, activations {}, no calibration",
            summary.weights, summary.activations
        );
        for (name, op) in &summary.quantized {
            let int_op = OpKind::of("", op)
                .and_then(|k| k.facts().integer)
                .map_or("?", OpKind::name);
            println!("    {name}: {op} -> DynamicQuantizeLinear + {int_op} + Cast + Mul");
        }
    } else {
        println!(
            "  format {}, weights {}, activations {} affine per-tensor, calibration {} on {} samples in {:.2} s",
            summary.format,
            summary.weights,
            summary.activations,
            summary.method,
            summary.calibration_samples,
            summary.calibration_seconds
        );
    }
    if let Some(a) = &summary.auto {
        let moved: Vec<String> = a
            .choices
            .iter()
            .filter(|c| c.method != "minmax")
            .map(|c| format!("{} {}", c.tensor, c.method))
            .collect();
        println!(
            "  auto: {} of {} activations off minmax{}; objective ({}) {:.3} of all-minmax's on {} choosing samples, {:.3} on {} checking samples; {} model runs ({} candidates screened out by local error) in {:.2} s ({:.2} s of it computing the candidates, {:.2} s screening; {:.0} % of the node evaluations of full re-runs){}",
            moved.len(),
            a.choices.len(),
            if moved.is_empty() {
                String::new()
            } else {
                format!(" ({})", moved.join(", "))
            },
            a.objectives
                .iter()
                .map(|o| format!(
                    "{}: {}",
                    o.name,
                    match o.kind {
                        quantkit_ptq::auto::OutputKind::Probabilities => "KL of probabilities",
                        quantkit_ptq::auto::OutputKind::Logits => "KL of softmax(logits)",
                        quantkit_ptq::auto::OutputKind::Values => "squared error",
                    }
                ))
                .collect::<Vec<_>>()
                .join(", "),
            a.auto_error / a.minmax_error.max(f64::MIN_POSITIVE),
            a.choose_samples,
            a.auto_check_error / a.minmax_check_error.max(f64::MIN_POSITIVE),
            a.check_samples,
            a.model_runs,
            a.screened_out,
            a.seconds,
            a.candidate_seconds,
            a.screen_seconds,
            100.0 * a.nodes_run as f64 / a.nodes_full.max(1) as f64,
            if a.reverted.is_empty() {
                String::new()
            } else {
                format!("; the check undid {}", a.reverted.join(", "))
            }
        );
    }
    if !summary.prepare.batch_norms_folded.is_empty() {
        println!(
            "  folded {} BatchNormalization node(s) into Conv/Gemm",
            summary.prepare.batch_norms_folded.len()
        );
    }
    if let Some(old) = summary.opset_upgraded_from {
        println!("  opset upgraded from {old} to 13 (per-axis QuantizeLinear)");
    }
    if summary.format == "dynamic" {
        println!(
            "  {} of {} nodes quantized, {} DynamicQuantizeLinear",
            summary.quantized.len(),
            summary.nodes,
            summary.activations_quantized
        );
    } else {
        println!(
            "  {} of {} nodes quantized, {} activations with Q/DQ, {} conv/gemm+activation fusions",
            summary.quantized.len(),
            summary.nodes,
            summary.activations_quantized,
            summary.fused.len()
        );
    }
    if !summary.left_float.is_empty() {
        println!("  left in float:");
        for f in &summary.left_float {
            println!("    {} ({}): {}", f.name, f.op_type, f.reason);
        }
    }
    if let Some(r) = &summary.qoperator {
        println!(
            "  QOperator: {} QLinear node(s), {} on quantized tensors, {} Relu/Clip in output ranges, {} QuantizeLinear and {} DequantizeLinear at float boundaries",
            r.converted.len(),
            r.direct.len(),
            r.fused_into_range.len(),
            r.quantize_nodes,
            r.dequantize_nodes
        );
        for (name, from, to) in &r.converted {
            println!("    {name}: {from} -> {to}");
        }
        for (name, op) in &r.direct {
            println!("    {name}: {op} on the quantized tensor");
        }
        for (prod, act) in &r.fused_into_range {
            println!("    {act}: absorbed into the output range of {prod}");
        }
        let no_form: Vec<_> = r
            .left_float
            .iter()
            .filter(|f| !summary.left_float.iter().any(|l| l.name == f.name))
            .collect();
        if !no_form.is_empty() {
            println!("  quantized but without a QOperator form, float between DequantizeLinear/QuantizeLinear:");
            for f in no_form {
                println!("    {} ({}): {}", f.name, f.op_type, f.reason);
            }
        }
    }
    println!(
        "  size {} -> {} bytes ({:.1}%)",
        size_before,
        size_after,
        100.0 * size_after as f64 / size_before.max(1) as f64
    );
    Ok(())
}
