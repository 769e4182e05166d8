//! `quantkit bench MODEL.onnx`: float vs int8 latency and throughput of one model, measured
//! side by side in one run on the same input.
//!
//! The int8 model is the one given with `--int8`, or MODEL quantized on the spot (static,
//! per-channel, min/max) — on `--calib` data when given, otherwise on 64 samples drawn
//! uniformly from [0, 1). Calibration ranges change the numbers a model computes, not how
//! long it takes, so synthetic calibration is enough for a speed figure (and keeps the
//! command usable on models without data). Both models get the same batch of inputs.

use crate::evaluate::{Backend, Runner};
use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use quantkit_data::npy::DType as NpyDType;
use quantkit_data::source::ArrayDataset;
use quantkit_data::{DataSource, OpenOptions};
use quantkit_graph::{load_model, Dim, Graph, Tensor};
use quantkit_ptq::{input_specs, open_data_for_graph, quantize_static, run_tensors, PtqConfig};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `quantkit bench MODEL.onnx`.
#[derive(ClapArgs, Debug, Default)]
pub struct ModelArgs {
    /// Float ONNX model to benchmark (instead of a subcommand).
    pub model: Option<PathBuf>,
    /// Its quantized model (QDQ, QOperator or dynamic), run on the integer engine
    /// (default: quantize MODEL now, static QDQ with min/max ranges).
    #[arg(long)]
    pub int8: Option<PathBuf>,
    /// Calibration data when quantizing MODEL now (default: synthetic uniform [0, 1)). A
    /// model with several or non-float inputs needs it: an .npz with one array per input,
    /// named after it (docs/data.md), whose first --batch samples are also the timed input.
    #[arg(long)]
    pub calib: Option<PathBuf>,
    /// Samples per run (the model's first input dimension).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Worker threads for both executors.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Minimum seconds spent timing each executor (at least 3 runs after a warm-up).
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Time only the int8 model, not the float executor (large batches: the float
    /// executor's activations take 4× the memory of the engine's codes and its runs are
    /// slow). JSON: `float` and `int8_speedup` are null.
    #[arg(long)]
    pub int8_only: bool,
    /// Also profile the integer engine on the same input: time per step and per operator
    /// kind, float islands marked (median of the profiled runs; JSON: `int8_profile`).
    #[arg(long)]
    pub profile: bool,
}

/// Latency of one executor.
struct Timing {
    best_ms: f64,
    median_ms: f64,
    runs: usize,
}

fn time_runs(runner: &dyn Runner, x: &[(String, Tensor)], seconds: f64) -> Result<Timing> {
    runner.run(x.to_vec())?; // warm-up: page faults, caches, thread start-up
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < 3 || start.elapsed().as_secs_f64() < seconds {
        let input = x.to_vec();
        let t = Instant::now();
        let y = runner.run(input)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        drop(y);
    }
    times.sort_by(f64::total_cmp);
    Ok(Timing {
        best_ms: times[0],
        median_ms: times[times.len() / 2],
        runs: times.len(),
    })
}

/// The model's input shape with the batch dimension set to `batch`; every other dimension
/// must be fixed.
fn input_shape(path: &Path, dims: &[Dim], name: &str, batch: usize) -> Result<Vec<usize>> {
    if dims.is_empty() {
        bail!("{}: input `{name}` has no shape to fill", path.display());
    }
    let mut shape = vec![batch];
    for (i, d) in dims.iter().enumerate().skip(1) {
        match d {
            Dim::Known(n) => shape.push(*n),
            other => bail!(
                "{}: input `{name}` dimension {i} is {other:?}, not fixed; \
                 `bench` needs a fixed sample shape",
                path.display()
            ),
        }
    }
    Ok(shape)
}

/// A deterministic uniform [0, 1) batch (xorshift; the values only have to be plausible).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// Quantizes `model` in memory.
fn quantize_now(model: &Path, args: &ModelArgs, sample: &[usize]) -> Result<Graph> {
    let graph = load_model(model).with_context(|| format!("loading {}", model.display()))?;
    let mut data = match &args.calib {
        Some(p) => open_data_for_graph(&graph, p, &OpenOptions::default())
            .with_context(|| format!("opening calibration data {}", p.display()))?,
        None => {
            let n = 64;
            let len: usize = sample.iter().product();
            DataSource::Samples(Box::new(ArrayDataset::new(
                "synthetic uniform [0, 1)",
                uniform(n * len, 0x5eed),
                sample.to_vec(),
                None,
            )?))
        }
    };
    let config = PtqConfig {
        calib_samples: Some(256),
        ..PtqConfig::default()
    };
    let (q, _) = quantize_static(graph, &mut data, &config, &mut |_, _| {})
        .with_context(|| format!("quantizing {}", model.display()))?;
    Ok(q)
}

/// Runs `quantkit bench MODEL.onnx`.
pub fn run(model: &Path, args: &ModelArgs, json: bool) -> Result<()> {
    if args.batch == 0 || args.threads == 0 {
        bail!("--batch and --threads must be at least 1");
    }
    let graph = load_model(model).with_context(|| format!("loading {}", model.display()))?;
    let specs = input_specs(&graph)?;
    let float = Backend::Float.wrap(model, graph.clone())?;
    let vi = float.input().clone();
    // One float input: a synthetic batch. Several inputs, or integer ones (token ids,
    // bytes: random values would not be valid ids): the first run of --calib's named arrays.
    let synthetic = specs.len() == 1 && matches!(specs[0].dtype, None | Some(NpyDType::F32));
    let (x, sample): (Vec<(String, Tensor)>, Vec<usize>) = if synthetic {
        let dims = vi.shape.clone().unwrap_or_default();
        let shape = input_shape(model, &dims, &vi.name, args.batch)?;
        let n: usize = shape.iter().product();
        let x = Tensor::from_f32(&shape, uniform(n, 7));
        (vec![(vi.name.clone(), x)], shape[1..].to_vec())
    } else {
        let names = specs
            .iter()
            .map(|s| format!("`{}`", s.name))
            .collect::<Vec<_>>()
            .join(", ");
        let Some(p) = &args.calib else {
            bail!(
                "{}: inputs {names}: a model with several or non-float inputs is timed on real \
                 data: give --calib FILE.npz with one array per input, named after it",
                model.display()
            );
        };
        let data = open_data_for_graph(&graph, p, &OpenOptions::default())
            .with_context(|| format!("opening {}", p.display()))?;
        let DataSource::Named(mut feeds) = data else {
            bail!(
                "{}: its arrays are not named after the model's inputs {names}",
                p.display()
            );
        };
        let run = feeds
            .runs(args.batch, None)?
            .next()
            .context("no runs")?
            .with_context(|| format!("reading {}", p.display()))?;
        (run_tensors(run)?, Vec::new())
    };
    let int8_backend = Backend::int8();
    let (int8_path, int8) = match &args.int8 {
        Some(p) => (p.clone(), int8_backend.load(p)?),
        None => {
            let label = PathBuf::from(format!("{} (quantized now)", model.display()));
            let q = quantize_now(model, args, &sample)?;
            let runner = int8_backend.wrap(&label, q)?;
            (label, runner)
        }
    };
    let shape = x[0].1.shape.clone();
    let inputs_json: Vec<_> = x
        .iter()
        .map(|(n, t)| json!({"name": n, "dtype": t.dtype.to_string(), "shape": t.shape}))
        .collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()
        .context("starting the thread pool")?;
    let (tf, ti) = pool.install(|| -> Result<(Option<Timing>, Timing)> {
        let tf = if args.int8_only {
            None
        } else {
            Some(time_runs(float.as_ref(), &x, args.seconds)?)
        };
        Ok((tf, time_runs(int8.as_ref(), &x, args.seconds)?))
    })?;
    let profile = if args.profile {
        let plan = match &args.int8 {
            Some(p) => {
                let g = load_model(p).with_context(|| format!("loading {}", p.display()))?;
                quantkit_engine::compile(&g, &quantkit_engine::EngineOptions::default())
                    .with_context(|| format!("compiling {}", p.display()))?
            }
            None => quantkit_engine::compile(
                &quantize_now(model, args, &sample)?,
                &quantkit_engine::EngineOptions::default(),
            )?,
        };
        Some(pool.install(|| {
            super::engine_profile::EngineProfile::measure(&plan, &x, 5, args.seconds)
        })?)
    } else {
        None
    };
    let tput = |t: &Timing| args.batch as f64 / (t.best_ms / 1e3);
    let speedup = tf.as_ref().map(|tf| tf.best_ms / ti.best_ms);
    if json {
        let side = |t: &Timing, runner: &str, path: &Path| {
            json!({
                "runner": runner,
                "model": path,
                "best_ms": t.best_ms,
                "median_ms": t.median_ms,
                "runs": t.runs,
                "samples_per_second": tput(t),
            })
        };
        let v = json!({
            "model": model,
            "input": x[0].0,
            "shape": shape,
            "inputs": inputs_json,
            "batch": args.batch,
            "threads": args.threads,
            "float": tf.as_ref().map(|tf| side(tf, Backend::Float.name(), model)),
            "int8": side(&ti, int8_backend.name(), &int8_path),
            "int8_speedup": speedup,
        });
        let mut v = v;
        if let Some(p) = &profile {
            v["int8_profile"] = p.to_json();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let described = x
            .iter()
            .map(|(n, t)| format!("`{n}` {} {:?}", t.dtype, t.shape))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{}: input {described}, {} thread(s)",
            model.display(),
            args.threads
        );
        println!(
            "{:<8} {:<34} {:>10} {:>10} {:>6} {:>12}",
            "model", "runner", "best ms", "median ms", "runs", "samples/s"
        );
        let rows = [
            ("float", Backend::Float.name(), tf.as_ref()),
            ("int8", int8_backend.name(), Some(&ti)),
        ];
        for (label, runner, t) in rows {
            let Some(t) = t else { continue };
            println!(
                "{label:<8} {runner:<34} {:>10.3} {:>10.3} {:>6} {:>12.1}",
                t.best_ms,
                t.median_ms,
                t.runs,
                tput(t)
            );
        }
        if let Some(speedup) = speedup {
            println!("int8 vs float: {speedup:.2}× (best latency)");
        }
        if let Some(p) = &profile {
            p.print(20);
        }
    }
    Ok(())
}
