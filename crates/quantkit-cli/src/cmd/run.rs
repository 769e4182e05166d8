//! `quantkit run MODEL.onnx --input NAME=FILE ... --output-dir DIR [--engine int8] [--batch N] [--json]`:
//! runs a model with the float executor (or, with `--engine int8`, the integer engine);
//! inputs are `.npy` or ONNX `TensorProto` `.pb` files and each output is written as
//! `<name>.npy`.

use anyhow::{bail, Context, Result};
use clap::Parser;
use quantkit_data::npy::{read_npy, write_npy, NpyArray, NpyData};
use quantkit_graph::{execute, execute_with, load_model, load_tensor_pb, Data, Tensor};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `quantkit run`.
#[derive(Parser)]
pub struct Args {
    /// The ONNX model.
    pub model: PathBuf,
    /// An input as NAME=FILE (FILE is .npy of any dtype, or .pb); a bare FILE is accepted
    /// when the model has a single input. A bare FILE.npz feeds every input not given
    /// otherwise from arrays named after them (as `quantize --calib` reads them, see
    /// docs/data.md).
    #[arg(long = "input", short = 'i', value_name = "NAME=FILE", required = true)]
    pub inputs: Vec<String>,
    /// Folder for the outputs (created if missing).
    #[arg(long, short = 'o', default_value = ".")]
    pub output_dir: PathBuf,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also report where the time goes (with --json: a `profile` list). Float executor:
    /// time per operator type. `--engine int8`: time per step and per operator kind, float
    /// islands marked (median of --repeat runs, at least 5; with --json an `engine_profile`
    /// object).
    #[arg(long)]
    pub profile: bool,
    /// Run the model this many times and report the fastest run (the first run of a
    /// process also pays for page faults and thread start-up).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Executor: `float` (the float executor, the reference: Q/DQ simulated exactly) or
    /// `int8` (the integer engine: Q/DQ patterns compiled into integer kernels, float islands
    /// for the rest).
    #[arg(long, value_parser = ["float", "int8"], default_value = "float")]
    pub engine: String,
    /// Run the inputs in chunks of at most N rows of their first dimension and concatenate
    /// the outputs (for inputs too large for one call, e.g. thousands of samples stacked in
    /// one `.npz`). Every input and output must have the batch as its first dimension. The
    /// integer engine's outputs are those of one call bit for bit; float operators (the
    /// float executor, float islands) may add their sums in another order and differ in the
    /// last bits. Default: one call with everything.
    #[arg(long, value_name = "N")]
    pub batch: Option<usize>,
}

/// The inputs in chunks of at most `batch` rows of their common first dimension.
fn chunks(inputs: &[(String, Tensor)], batch: usize) -> Result<Vec<Vec<(String, Tensor)>>> {
    if batch == 0 {
        bail!("--batch 0: give the number of rows per call (1 or more)");
    }
    let mut n = None;
    for (name, t) in inputs {
        let Some(&b) = t.shape.first() else {
            bail!("--batch: input `{name}` is a scalar; it has no batch dimension to split");
        };
        match n {
            None => n = Some((name, b)),
            Some((first, m)) if m != b => bail!(
                "--batch: input `{name}` has {b} rows in its first dimension and `{first}` has {m}; \
                 every input must have the batch first (run without --batch)"
            ),
            _ => {}
        }
    }
    let Some((_, n)) = n else {
        return Ok(vec![inputs.to_vec()]);
    };
    Ok((0..n.div_ceil(batch).max(1))
        .map(|k| {
            let (a, b) = (k * batch, ((k + 1) * batch).min(n));
            inputs
                .iter()
                .map(|(name, t)| (name.clone(), t.slice_rows(a..b)))
                .collect()
        })
        .collect())
}

/// Concatenates the outputs of the chunks along their first dimension.
fn concat_outputs(
    parts: &[Vec<(String, Tensor)>],
    rows_in: &[usize],
) -> Result<Vec<(String, Tensor)>> {
    let Some(first) = parts.first() else {
        return Ok(Vec::new());
    };
    first
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let all: Vec<&Tensor> = parts.iter().map(|p| &p[i].1).collect();
            for (t, &r) in all.iter().zip(rows_in) {
                if t.shape.first() != Some(&r) {
                    bail!(
                        "--batch: output `{name}` has shape {:?} for a chunk of {r} rows: its \
                         first dimension is not the batch, so the chunks cannot be joined \
                         (run without --batch)",
                        t.shape
                    );
                }
            }
            let t = Tensor::stack_rows(&all)
                .with_context(|| format!("output `{name}`: chunks of different types or shapes"))?;
            Ok((name.clone(), t))
        })
        .collect()
}

/// Time per operator type, from the executor's observer calls: the time between one node's
/// output and the previous observed value is that node's run time (its inputs are ready by
/// then; the executor does nothing else in between but bookkeeping).
#[derive(Default)]
struct Profile {
    producer: std::collections::HashMap<String, String>,
    last: Option<Instant>,
    per_op: std::collections::BTreeMap<String, (f64, usize)>,
}

impl Profile {
    fn new(graph: &quantkit_graph::Graph) -> Self {
        let mut producer = std::collections::HashMap::new();
        for n in &graph.nodes {
            if let Some(o) = n.outputs.iter().find(|o| !o.is_empty()) {
                producer.insert(o.clone(), n.op_type.clone());
            }
        }
        Profile {
            producer,
            ..Default::default()
        }
    }

    fn observe(&mut self, value: &str) {
        let now = Instant::now();
        if let (Some(op), Some(last)) = (self.producer.get(value), self.last) {
            let e = self.per_op.entry(op.clone()).or_default();
            e.0 += (now - last).as_secs_f64();
            e.1 += 1;
        }
        self.last = Some(now);
    }

    /// `(op_type, seconds, nodes)`, slowest first.
    fn rows(&self) -> Vec<(String, f64, usize)> {
        let mut v: Vec<_> = self
            .per_op
            .iter()
            .map(|(k, &(s, n))| (k.clone(), s, n))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// Reads a `.npy` or `.pb` tensor file.
pub fn read_tensor(path: &Path) -> Result<Tensor> {
    if path.extension().is_some_and(|e| e == "pb") {
        return Ok(load_tensor_pb(path)?.1);
    }
    let a = read_npy(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(quantkit_ptq::to_tensor(a)?)
}

/// The inputs an `.npz` of arrays named after them feeds (`quantkit_data::feed`'s scheme,
/// the one `quantize --calib` reads), for the inputs of `graph` not in `given`. `run` makes
/// one call: stacked arrays are fed whole, and per-run arrays must hold a single run.
fn npz_inputs(
    graph: &quantkit_graph::Graph,
    path: &Path,
    given: &[(String, Tensor)],
) -> Result<Vec<(String, Tensor)>> {
    let specs: Vec<_> = quantkit_ptq::input_specs(graph)?
        .into_iter()
        .filter(|s| !given.iter().any(|(n, _)| *n == s.name))
        .collect();
    let Some(mut feeds) = quantkit_data::NamedFeeds::open(path, &specs, None)
        .with_context(|| format!("reading {}", path.display()))?
    else {
        bail!(
            "{}: no array is named after an input of the model ({})",
            path.display(),
            specs
                .iter()
                .map(|s| format!("`{}`", s.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let runs = feeds.run_count(usize::MAX, None)?;
    if runs != 1 {
        bail!(
            "{}: holds {runs} runs (per-run NAME__K arrays, or several of the model's fixed \
             batches); `run` makes one call (give one run, or use `eval`)",
            path.display()
        );
    }
    let run = feeds
        .runs(usize::MAX, None)?
        .next()
        .context("one run")?
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(quantkit_ptq::run_tensors(run)?)
}

/// Converts a tensor to a `.npy` array (4-bit types are written unpacked as int8/uint8).
pub fn to_npy(t: &Tensor) -> Result<NpyArray> {
    let data = match &t.data {
        Data::Bool(v) => NpyData::Bool(v.clone()),
        Data::U8(v) => NpyData::U8(v.clone()),
        Data::I8(v) => NpyData::I8(v.clone()),
        Data::U16(v) => NpyData::U16(v.clone()),
        Data::I16(v) => NpyData::I16(v.clone()),
        Data::U32(v) => NpyData::U32(v.clone()),
        Data::I32(v) => NpyData::I32(v.clone()),
        Data::U64(v) => NpyData::U64(v.clone()),
        Data::I64(v) => NpyData::I64(v.clone()),
        Data::F16(v) => NpyData::F16(v.clone()),
        Data::F32(v) => NpyData::F32(v.clone()),
        Data::F64(v) => NpyData::F64(v.clone()),
    };
    Ok(NpyArray::new(t.shape.clone(), data)?)
}

/// A file name for a value name (ONNX names may contain `/` or `:`).
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<()> {
    let t0 = Instant::now();
    let graph = load_model(&args.model)?;
    let load_s = t0.elapsed().as_secs_f64();
    let mut inputs = Vec::new();
    let mut archives = Vec::new();
    for spec in &args.inputs {
        let (name, file) = match spec.split_once('=') {
            Some((n, f)) => (n.to_string(), f),
            None if spec.ends_with(".npz") => {
                archives.push(PathBuf::from(spec));
                continue;
            }
            None if graph.inputs.len() == 1 => (graph.inputs[0].name.clone(), spec.as_str()),
            None => bail!(
                "--input {spec}: give NAME=FILE (the model has {} inputs)",
                graph.inputs.len()
            ),
        };
        let t = read_tensor(Path::new(file)).with_context(|| format!("input `{name}`"))?;
        inputs.push((name, t));
    }
    for a in &archives {
        let more = npz_inputs(&graph, a, &inputs)?;
        inputs.extend(more);
    }
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let plan = if args.engine == "int8" {
        Some(
            quantkit_engine::compile(&graph, &quantkit_engine::EngineOptions::default())
                .with_context(|| {
                    format!("compiling {} for the integer engine", args.model.display())
                })?,
        )
    } else {
        None
    };
    let parts = match args.batch {
        Some(b) => chunks(&inputs, b)?,
        None => vec![inputs.clone()],
    };
    if parts.len() > 1 && args.profile {
        bail!("--profile measures one call: run it without --batch (or with one chunk)");
    }
    let rows_in: Vec<usize> = parts
        .iter()
        .map(|p| {
            p.first()
                .and_then(|(_, t)| t.shape.first().copied())
                .unwrap_or(0)
        })
        .collect();
    let mut run_s = f64::INFINITY;
    let mut outputs = Vec::new();
    let mut profile_rows = Vec::new();
    for _ in 0..args.repeat {
        let mut profile = Profile::new(&graph);
        let t1 = Instant::now();
        let mut outs = Vec::with_capacity(parts.len());
        for inputs in &parts {
            let inputs = inputs.clone();
            outs.push(if let Some(plan) = &plan {
                plan.run(inputs)?
            } else if args.profile {
                execute_with(&graph, inputs, |name, _| profile.observe(name))?
            } else {
                execute(&graph, inputs)?
            });
        }
        let s = t1.elapsed().as_secs_f64();
        outputs = if outs.len() == 1 {
            outs.pop().unwrap_or_default()
        } else {
            concat_outputs(&outs, &rows_in)?
        };
        if s < run_s {
            run_s = s;
            profile_rows = profile.rows();
        }
    }
    let engine_profile = match (&plan, args.profile) {
        (Some(plan), true) => Some(super::engine_profile::EngineProfile::measure(
            plan,
            &inputs,
            args.repeat.max(5),
            0.0,
        )?),
        _ => None,
    };
    // Convert everything first so an error never leaves some outputs written.
    let arrays: Vec<(String, PathBuf, NpyArray)> = outputs
        .iter()
        .map(|(n, t)| {
            Ok((
                n.clone(),
                args.output_dir.join(format!("{}.npy", file_stem(n))),
                to_npy(t)?,
            ))
        })
        .collect::<Result<_>>()?;
    std::fs::create_dir_all(&args.output_dir)
        .with_context(|| format!("creating {}", args.output_dir.display()))?;
    for (_, path, a) in &arrays {
        write_npy(path, a).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let outs: Vec<_> = outputs
            .iter()
            .zip(&arrays)
            .map(|((n, t), (_, p, _))| json!({"name": n, "file": p, "dtype": t.dtype.to_string(), "shape": t.shape}))
            .collect();
        let mut summary = json!({"model": args.model, "load_seconds": load_s, "run_seconds": run_s, "outputs": outs});
        if let Some(p) = &engine_profile {
            summary["engine_profile"] = p.to_json();
        } else if args.profile {
            summary["profile"] = profile_rows
                .iter()
                .map(|(op, s, n)| json!({"op_type": op, "seconds": s, "nodes": n}))
                .collect();
        }
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        for ((n, t), (_, p, _)) in outputs.iter().zip(&arrays) {
            println!("{n}: {} {:?} -> {}", t.dtype, t.shape, p.display());
        }
        println!("load {:.1} ms, run {:.1} ms", load_s * 1e3, run_s * 1e3);
        if let Some(p) = &engine_profile {
            p.print(15);
        } else if args.profile {
            println!("{:<24} {:>6} {:>10} {:>6}", "op", "nodes", "ms", "%");
            for (op, s, n) in &profile_rows {
                println!(
                    "{op:<24} {n:>6} {:>10.2} {:>5.1}%",
                    s * 1e3,
                    100.0 * s / run_s.max(1e-12)
                );
            }
        }
    }
    Ok(())
}
