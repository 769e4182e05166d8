//! `quantkit demo`: the main job on a built-in default.
//!
//! Takes the committed LeNet (trained by `quantkit train` on Fashion-MNIST) and the committed
//! 1,000-image Fashion-MNIST test sample, quantizes the model to int8 QDQ ONNX (post-training
//! static quantization, per-channel weights), compiles it for the integer engine and
//! compares float and int8 (engine) on the sample: accuracy, top-1 agreement, logit
//! cosine/SQNR, size and time; and checks the engine against the QDQ graph run on the float
//! executor (the reference semantics of the int8 model).

use crate::evaluate::{evaluate, EngineRunner, EvalOptions, FloatExecutor};
use anyhow::{bail, Context, Result};
use quantkit_data::{open_data, OpenOptions};
use quantkit_graph::{load_model, save_model};
use quantkit_ptq::{quantize_static, PtqConfig};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `quantkit demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Float ONNX model (default: the committed `models/lenet.onnx`).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Labelled evaluation data (default: the committed `data/fashion-mnist-sample`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Calibration samples, taken from the start of the data.
    #[arg(long, default_value_t = 256)]
    calib_samples: usize,
    /// Where to write the quantized model (default: `target/demo/`).
    #[arg(long)]
    out_dir: Option<PathBuf>,
    /// Print the results as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Finds a committed file: relative to the working directory first (a fresh clone run with
/// `cargo run` from its root), then relative to the workspace this binary was built from.
fn committed(rel: &str) -> PathBuf {
    let here = PathBuf::from(rel);
    if here.exists() {
        return here;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root).join(rel)
}

/// Runs the demo.
pub fn run(args: Args) -> Result<()> {
    let model_path = args.model.unwrap_or_else(|| committed("models/lenet.onnx"));
    let data_path = args
        .data
        .unwrap_or_else(|| committed("data/fashion-mnist-sample"));
    let out_dir = args
        .out_dir
        .unwrap_or_else(|| committed("target").join("demo"));
    let float_graph = load_model(&model_path)
        .with_context(|| format!("loading the float model {}", model_path.display()))?;
    let float_bytes = std::fs::metadata(&model_path)?.len();

    if !args.json {
        println!(
            "quantkit demo: post-training int8 quantization of {} on {}",
            model_path.display(),
            data_path.display()
        );
    }
    let float = FloatExecutor::new(&model_path, float_graph.clone())?;

    let t0 = Instant::now();
    let mut calib = open_data(&data_path, &OpenOptions::default())?;
    let config = PtqConfig {
        calib_samples: Some(args.calib_samples),
        ..PtqConfig::default()
    };
    let (qgraph, summary) = quantize_static(float_graph, &mut calib, &config, &mut |_, _| {})?;
    let quantize_seconds = t0.elapsed().as_secs_f64();
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let stem = model_path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model");
    let q_path = out_dir.join(format!("{stem}.int8.qdq.onnx"));
    save_model(&qgraph, &q_path).with_context(|| format!("writing {}", q_path.display()))?;
    let q_bytes = std::fs::metadata(&q_path)?.len();

    // The int8 model runs on the integer engine and is scored with the float model as its
    // reference, on the same batches: both accuracies, top-1 agreement and the logits'
    // cosine/SQNR in one pass.
    let t0 = Instant::now();
    let engine = EngineRunner::new(&q_path, &qgraph)?;
    let compile_seconds = t0.elapsed().as_secs_f64();
    let report = engine.plan().report().to_vec();
    let eval_opts = EvalOptions {
        batch: 100,
        limit: None,
        labels: None,
    };
    let open = || {
        open_data(&data_path, &OpenOptions::default())
            .with_context(|| format!("opening evaluation data {}", data_path.display()))
    };
    let eval = evaluate(
        &engine,
        Some(&float),
        &mut open()?,
        &data_path,
        &eval_opts,
        |_, _| {},
    )?;
    // The engine against the QDQ graph on the float executor: how far integer arithmetic
    // (int32 accumulation, one requantization per conv/GEMM) is from the simulated model.
    let qdq = FloatExecutor::new(&q_path, qgraph)?;
    let vs_qdq = evaluate(
        &qdq,
        Some(&engine),
        &mut open()?,
        &data_path,
        &eval_opts,
        |_, _| {},
    )?;
    let qdq_cmp = vs_qdq
        .reference
        .as_ref()
        .context("evaluate returns a comparison when given a reference")?;
    let cmp = eval
        .reference
        .as_ref()
        .context("evaluate returns a comparison when given a reference")?;
    let Some(agreement) = cmp.agreement else {
        bail!(
            "{}: the demo scores classifiers, this model's output is shaped like its input",
            model_path.display()
        );
    };
    let qdq_agreement = qdq_cmp.agreement.unwrap_or(0.0);
    let integer_nodes = report.iter().filter(|n| n.is_integer()).count();
    let float_islands: Vec<_> = report
        .iter()
        .filter_map(|n| match &n.placement {
            quantkit_engine::Placement::Float { reason } => Some((n, reason)),
            _ => None,
        })
        .collect();
    let err = cmp.error;
    let (float_acc, int8_acc) = (100.0 * cmp.value, 100.0 * eval.value);
    let (float_seconds, int8_seconds) = (cmp.seconds, eval.seconds);

    if args.json {
        let j = serde_json::json!({
            "model": model_path,
            "quantized_model": q_path,
            "samples": eval.samples,
            "calibration_samples": summary.calibration_samples,
            "float_accuracy": float_acc,
            "int8_accuracy": int8_acc,
            "agreement": agreement,
            "logits_cosine": err.cosine,
            "logits_sqnr_db": err.sqnr_db,
            "float_bytes": float_bytes,
            "int8_bytes": q_bytes,
            "float_seconds": float_seconds,
            "int8_seconds": int8_seconds,
            "int8_runner": "integer engine",
            "engine_compile_seconds": compile_seconds,
            "engine_vs_qdq_agreement": qdq_agreement,
            "engine_vs_qdq_cosine": qdq_cmp.error.cosine,
            "qdq_simulated_accuracy": 100.0 * vs_qdq.value,
            "qdq_simulated_seconds": vs_qdq.seconds,
            "engine_integer_nodes": integer_nodes,
            "engine_float_islands": float_islands.len(),
            "quantize_seconds": quantize_seconds,
            "nodes_quantized": summary.quantized.len(),
            "nodes_left_float": summary.left_float.len(),
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(());
    }
    println!(
        "  prepared: {} BatchNorm folded, {} activation(s) fused; {} of {} nodes quantized ({}), {} left float",
        summary.prepare.batch_norms_folded.len(),
        summary.fused.len(),
        summary.quantized.len(),
        summary.nodes,
        summary.weights,
        summary.left_float.len()
    );
    for f in &summary.left_float {
        println!("    float: {} ({}) — {}", f.name, f.op_type, f.reason);
    }
    println!(
        "  calibrated {} activations ({}, {} activations) on the first {} samples in {:.2} s",
        summary.activations_quantized,
        summary.method,
        summary.activations,
        summary.calibration_samples,
        summary.calibration_seconds
    );
    println!();
    println!(
        "  {:<22} {:>10} {:>12} {:>12}",
        "", "accuracy", "model size", "eval time"
    );
    println!(
        "  {:<22} {:>9.2}% {:>9.1} KB {:>10.3} s",
        "float32",
        float_acc,
        float_bytes as f64 / 1024.0,
        float_seconds
    );
    println!(
        "  {:<22} {:>9.2}% {:>9.1} KB {:>10.3} s",
        "int8 (integer engine)",
        int8_acc,
        q_bytes as f64 / 1024.0,
        int8_seconds
    );
    println!();
    println!(
        "  {} samples: top-1 agreement {:.2}%, logits cosine {:.5}, SQNR {:.1} dB, size {:.0}% of float",
        eval.samples,
        100.0 * agreement,
        err.cosine,
        err.sqnr_db,
        100.0 * q_bytes as f64 / float_bytes as f64
    );
    println!(
        "  engine: {} of {} nodes in integer steps, compiled in {:.3} s; float islands: {}",
        integer_nodes,
        report.len(),
        compile_seconds,
        if float_islands.is_empty() {
            "none".to_string()
        } else {
            float_islands
                .iter()
                .map(|(n, why)| format!("{} ({}: {why})", n.node, n.op_type))
                .collect::<Vec<_>>()
                .join("; ")
        }
    );
    println!(
        "  engine vs QDQ graph on the float executor ({:.2}% accuracy, {:.3} s): top-1 agreement {:.2}%, logits cosine {:.6}",
        100.0 * vs_qdq.value,
        vs_qdq.seconds,
        100.0 * qdq_agreement,
        qdq_cmp.error.cosine
    );
    println!(
        "  time: float executor {:.3} s, integer engine {:.3} s ({:.2}x)",
        float_seconds,
        int8_seconds,
        float_seconds / int8_seconds.max(1e-9)
    );
    println!("  quantized model written to {}", q_path.display());
    Ok(())
}
