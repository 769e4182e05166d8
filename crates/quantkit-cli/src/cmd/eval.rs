//! `quantkit eval MODEL.onnx --data PATH [--reference FLOAT.onnx]`: top-1 accuracy of a
//! classifier or reconstruction MSE of an autoencoder on a data set, and, with a reference,
//! how far the model's outputs are from the reference's on the same batches.

use super::progress::{Mode, Progress};
use crate::evaluate::{evaluate, Backend, EvalOptions, Metric, Outcome};
use anyhow::{bail, Context, Result};
use quantkit_data::{open_data_for, OpenOptions, Split};
use serde_json::json;
use std::path::PathBuf;

/// Arguments of `quantkit eval`.
#[derive(clap::Args)]
pub struct Args {
    /// The ONNX model: float, or quantized (QDQ, QOperator or dynamic).
    pub model: PathBuf,
    /// Data: IDX folder (e.g. Fashion-MNIST), folder with images.npy, .npy, .npz or an
    /// image folder. u8 data is fed as pixel/255. A model with several inputs, or with
    /// integer inputs, takes an .npz with one array per input named after it (NAME stacks
    /// the samples on the batch axis, NAME__K is run K's feed; see docs/data.md).
    #[arg(long)]
    pub data: PathBuf,
    /// Labels for a .npy/IDX/image-folder source (integer .npy or IDX label file).
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// Split of an IDX folder: test (default) or train.
    #[arg(long)]
    pub split: Option<Split>,
    /// Evaluate only the first N samples (runs, for an .npz of NAME__K arrays).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Samples per batch (a model input with a fixed batch size overrides it).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// A float model to compare against on the same batches: its metric, top-1 agreement,
    /// output cosine and SQNR of the model's outputs against its outputs.
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Print one JSON object (`sqnr_db` is null when the outputs are identical).
    #[arg(long)]
    pub json: bool,
    /// No progress on stderr: neither the bar (a terminal) nor the plain lines written
    /// when stderr is not a terminal or with --json (`eval: H:MM:SS evaluating: N/M
    /// samples`, at most every 30 s, and one at the end).
    #[arg(short, long)]
    pub quiet: bool,
    /// Executor of MODEL: `int8` (the integer engine; default for a quantized model: Q/DQ,
    /// QLinearConv/QLinearMatMul/QGemm or dynamic-quantization nodes) or `float` (the float executor, which simulates Q/DQ exactly). The reference always
    /// runs on the float executor.
    #[arg(long, value_parser = ["int8", "float"])]
    pub engine: Option<String>,
}

/// Runs `quantkit eval`.
pub fn run(args: Args) -> Result<()> {
    if let Some(split) = args.split {
        if !quantkit_data::idx::is_idx_dir(&args.data) {
            bail!(
                "--split {}: {} is not an IDX folder (only those have splits)",
                split.prefix(),
                args.data.display()
            );
        }
    }
    let graph = quantkit_graph::load_model(&args.model)
        .with_context(|| format!("loading the model {}", args.model.display()))?;
    let backend = match args.engine.as_deref() {
        Some("int8") => Backend::Engine,
        Some(_) => Backend::Float,
        None => Backend::for_graph(&graph),
    };
    let specs = quantkit_ptq::input_specs(&graph)
        .with_context(|| format!("the inputs of {}", args.model.display()))?;
    let model = backend.wrap(&args.model, graph)?;
    let reference = args
        .reference
        .as_deref()
        .map(|p| Backend::Float.load(p))
        .transpose()?;
    let mut data = open_data_for(
        &args.data,
        &specs,
        &OpenOptions {
            split: args.split.unwrap_or_default(),
            labels: args.labels.clone(),
            ..OpenOptions::default()
        },
    )
    .with_context(|| format!("opening the data {}", args.data.display()))?;
    // A single-tensor source feeds one float32 input; say what else to give.
    let one_float =
        specs.len() == 1 && matches!(specs[0].dtype, None | Some(quantkit_data::npy::DType::F32));
    if !matches!(data, quantkit_data::DataSource::Named(_)) && !one_float {
        bail!(
            "{}: the model's inputs are {}: {} feeds one float32 input; give an .npz with \
             one array per input, named after it (see docs/data.md)",
            args.model.display(),
            specs
                .iter()
                .map(|s| format!(
                    "`{}` {}",
                    s.name,
                    s.dtype.map_or("?", quantkit_data::feed::dtype_name)
                ))
                .collect::<Vec<_>>()
                .join(", "),
            args.data.display()
        );
    }

    let progress = Progress::new("eval", Mode::of(args.json, args.quiet));
    let bar =
        progress.bar("evaluating {bar:30} {pos}/{len} samples [{elapsed_precise}, eta {eta}]");
    let outcome = evaluate(
        model.as_ref(),
        reference.as_deref(),
        &mut data,
        &args.data,
        &EvalOptions {
            batch: args.batch,
            limit: args.limit,
            labels: args.labels.clone(),
        },
        |done, total| {
            if let Some(t) = total {
                bar.set_length(t as u64);
            }
            bar.set_position(done as u64);
            if progress.due() {
                match total {
                    Some(t) => progress.line(format_args!("evaluating: {done}/{t} samples")),
                    None => progress.line(format_args!("evaluating: {done} samples")),
                }
            }
        },
    )?;
    bar.finish_and_clear();
    progress.line(format_args!(
        "evaluated {} samples in {:.1} s",
        outcome.samples,
        progress.elapsed()
    ));

    if args.json {
        print_json(&args, backend, &outcome)
    } else {
        print_text(&args, backend, &outcome);
        Ok(())
    }
}

/// JSON has no infinity; an infinite SQNR (identical outputs) becomes null.
fn finite(v: f64) -> serde_json::Value {
    if v.is_finite() {
        json!(v)
    } else {
        serde_json::Value::Null
    }
}

fn print_json(args: &Args, backend: Backend, o: &Outcome) -> Result<()> {
    let mut v = json!({
        "model": args.model,
        "data": args.data,
        "runner": backend.name(),
        "metric": o.metric.name(),
        "value": o.value,
        "samples": o.samples,
        "seconds": o.seconds,
    });
    if let Some(c) = o.correct {
        v["correct"] = json!(c);
    }
    if let Some(r) = &o.reference {
        v["reference"] = json!(args.reference);
        v["reference_value"] = json!(r.value);
        v["agreement"] = r.agreement.map_or(serde_json::Value::Null, |a| json!(a));
        v["cosine"] = json!(r.error.cosine);
        v["sqnr_db"] = finite(r.error.sqnr_db);
        v["max_abs_diff"] = json!(r.error.max_abs);
        v["reference_seconds"] = json!(r.seconds);
    }
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn show(metric: Metric, v: f64) -> String {
    match metric {
        Metric::Accuracy => format!("accuracy {:.2} %", 100.0 * v),
        Metric::Mse => format!("reconstruction MSE {v:.6}"),
    }
}

fn print_text(args: &Args, backend: Backend, o: &Outcome) {
    println!(
        "{} on {} ({} samples, {})",
        args.model.display(),
        args.data.display(),
        o.samples,
        backend.name()
    );
    let correct = o
        .correct
        .map(|c| format!(" ({c} / {})", o.samples))
        .unwrap_or_default();
    println!(
        "  {}{correct}, {:.2} s ({:.0} samples/s)",
        show(o.metric, o.value),
        o.seconds,
        o.samples as f64 / o.seconds.max(1e-9)
    );
    if let (Some(r), Some(path)) = (&o.reference, &args.reference) {
        println!(
            "  reference {}: {}",
            path.display(),
            show(o.metric, r.value)
        );
        let agreement = r
            .agreement
            .map(|a| format!("top-1 agreement {:.2} %, ", 100.0 * a))
            .unwrap_or_default();
        println!(
            "  {agreement}output cosine {:.6}, SQNR {:.1} dB, max |diff| {:.3e}",
            r.error.cosine, r.error.sqnr_db, r.error.max_abs
        );
    }
}
