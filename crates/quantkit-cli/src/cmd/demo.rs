//! `quantkit demo`: the main job on a built-in default.
//!
//! Takes the committed LeNet (trained by `quantkit train` on Fashion-MNIST) and the committed
//! 1,000-image Fashion-MNIST test sample, quantizes the model to int8 QDQ ONNX (post-training
//! static quantization, per-channel weights), and compares float and int8 on the sample:
//! accuracy, top-1 agreement, logit cosine/SQNR, size and time.

use anyhow::{bail, Context, Result};
use quantkit_core::ErrorMetrics;
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_graph::{execute, load_model, save_model, Graph, Tensor};
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

struct Eval {
    correct: usize,
    samples: usize,
    logits: Vec<f32>,
    predictions: Vec<usize>,
    seconds: f64,
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best
}

fn evaluate(graph: &Graph, data: &Path) -> Result<Eval> {
    let mut source = open_data(data, &OpenOptions::default())
        .with_context(|| format!("opening evaluation data {}", data.display()))?;
    if !source.has_labels() {
        bail!(
            "{} has no labels: the demo needs labelled data",
            data.display()
        );
    }
    let input = graph
        .inputs
        .first()
        .context("the model has no inputs")?
        .name
        .clone();
    let t0 = Instant::now();
    let mut e = Eval {
        correct: 0,
        samples: 0,
        logits: Vec::new(),
        predictions: Vec::new(),
        seconds: 0.0,
    };
    for batch in source.batches(&BatchOptions::new(100))? {
        let batch = batch?;
        let labels = batch.labels.clone().context("unlabelled batch")?;
        let x = Tensor::from_f32(&batch.shape, batch.data);
        let out = execute(graph, vec![(input.clone(), x)])?;
        let (name, y) = out.into_iter().next().context("the model has no outputs")?;
        let y = y
            .as_f32()
            .with_context(|| format!("output `{name}` is not float32"))?;
        let classes = y.len() / labels.len();
        for (row, label) in y.chunks(classes).zip(&labels) {
            let p = argmax(row);
            e.correct += usize::from(p as i64 == *label);
            e.predictions.push(p);
        }
        e.samples += labels.len();
        e.logits.extend_from_slice(y);
    }
    e.seconds = t0.elapsed().as_secs_f64();
    Ok(e)
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
    let float = evaluate(&float_graph, &data_path)?;

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

    let quant = evaluate(&qgraph, &data_path)?;
    let agree = float
        .predictions
        .iter()
        .zip(&quant.predictions)
        .filter(|(a, b)| a == b)
        .count();
    let err = ErrorMetrics::compute(&float.logits, &quant.logits)?;
    let acc = |e: &Eval| 100.0 * e.correct as f64 / e.samples as f64;

    if args.json {
        let j = serde_json::json!({
            "model": model_path,
            "quantized_model": q_path,
            "samples": float.samples,
            "calibration_samples": summary.calibration_samples,
            "float_accuracy": acc(&float),
            "int8_accuracy": acc(&quant),
            "agreement": agree as f64 / float.samples as f64,
            "logits_cosine": err.cosine,
            "logits_sqnr_db": err.sqnr_db,
            "float_bytes": float_bytes,
            "int8_bytes": q_bytes,
            "float_seconds": float.seconds,
            "int8_seconds": quant.seconds,
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
        acc(&float),
        float_bytes as f64 / 1024.0,
        float.seconds
    );
    println!(
        "  {:<22} {:>9.2}% {:>9.1} KB {:>10.3} s",
        "int8 QDQ (simulated)",
        acc(&quant),
        q_bytes as f64 / 1024.0,
        quant.seconds
    );
    println!();
    println!(
        "  {} samples: top-1 agreement {:.2}%, logits cosine {:.5}, SQNR {:.1} dB, size {:.0}% of float",
        float.samples,
        100.0 * agree as f64 / float.samples as f64,
        err.cosine,
        err.sqnr_db,
        100.0 * q_bytes as f64 / float_bytes as f64
    );
    println!(
        "  int8 numbers here come from the QDQ graph on the float executor (Q/DQ are exact);\n  \
         the integer-only engine that runs it on int8 kernels is the next step.\n  \
         quantized model written to {}",
        q_path.display()
    );
    Ok(())
}
