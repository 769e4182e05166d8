//! `quantkit bench`: speed of the integer kernels on this machine.
//!
//! `quantkit bench gemm` measures, in one run and on the same shapes, the int8 GEMM
//! (u8×i8 and i8×i8 activations, fused float-scale output stage to u8), an f32 GEMM
//! baseline (the `gemm` crate) and the machine's int8 peak from a register-only
//! multiply-accumulate loop, and prints the ratios. `quantkit bench --isa` prints the
//! instruction set the kernels dispatch to. `quantkit bench MODEL.onnx`
//! (in `bench_model`) times a model on the float executor and as int8.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use quantkit_kernels::dispatch::{self, Isa};
use quantkit_kernels::gemm::{gemm_quant_with, Activations, PackedWeights, WeightLayout};
use quantkit_kernels::output::OutputStage;
use serde::Serialize;

/// Arguments of `quantkit bench`.
#[derive(ClapArgs)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// Print the instruction set the kernels use and the CPU features detected.
    #[arg(long)]
    isa: bool,
    /// `quantkit bench MODEL.onnx`: float vs int8 latency of a model.
    #[command(flatten)]
    model: super::bench_model::ModelArgs,
    /// Print JSON (with MODEL.onnx).
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// int8 GEMM vs f32 GEMM vs the int8 peak.
    Gemm(GemmArgs),
    /// int8 conv/deconv on real layer shapes (ResNet 3×3 and 1×1, depthwise, 2×2 deconv,
    /// and the layers of bench/'s LeNet and conv net), with the algorithm each one ran.
    Conv(ConvArgs),
}

/// Arguments of `quantkit bench conv`.
#[derive(ClapArgs)]
struct ConvArgs {
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print a JSON list instead of a table.
    #[arg(long)]
    json: bool,
    /// Force an instruction set instead of the dispatched one.
    #[arg(long)]
    isa: Option<String>,
    /// Minimum seconds spent timing each layer.
    #[arg(long, default_value_t = 0.3)]
    seconds: f64,
    /// Images per call (the batch dimension of every layer).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Force the algorithm of every conv that can use it: auto (the cost model),
    /// winograd (F(2×2, 3×3)), winograd4 (F(4×4, 3×3)), im2col, pairs or direct (overrides
    /// QUANTKIT_CONV_ALGO).
    #[arg(long)]
    algo: Option<String>,
    /// Only layers whose name contains this text.
    #[arg(long)]
    only: Option<String>,
}

/// Arguments of `quantkit bench gemm`.
#[derive(ClapArgs)]
struct GemmArgs {
    /// Rows of A (with --n and --k: one shape instead of the default list).
    #[arg(long)]
    m: Option<usize>,
    /// Columns of the output.
    #[arg(long)]
    n: Option<usize>,
    /// Reduction length.
    #[arg(long)]
    k: Option<usize>,
    /// Worker threads (int8, f32 and peak alike).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print a JSON list instead of a table.
    #[arg(long)]
    json: bool,
    /// Force an instruction set (scalar, avx2, ...) instead of the dispatched one.
    #[arg(long)]
    isa: Option<String>,
    /// Minimum seconds spent timing each kernel on each shape.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
}

/// Runs `quantkit bench`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        Some(BenchCommand::Gemm(g)) => run_gemm(g),
        Some(BenchCommand::Conv(c)) => run_conv(c),
        None if args.isa => {
            print_isa();
            Ok(())
        }
        None => match &args.model.model {
            Some(m) => super::bench_model::run(m, &args.model, args.json),
            None => bail!(
                "nothing to benchmark: use `quantkit bench MODEL.onnx`, `quantkit bench gemm|conv` \
                 or `quantkit bench --isa`"
            ),
        },
    }
}

fn print_isa() {
    println!("dispatched ISA: {}", dispatch::isa());
    println!("best detected:  {}", dispatch::detect_best());
    let feats: Vec<String> = dispatch::cpu_features()
        .into_iter()
        .map(|(n, on)| format!("{n}{}", if on { "+" } else { "-" }))
        .collect();
    println!("CPU features:   {}", feats.join(" "));
}

/// One row of the report (`--json` prints a list of these).
#[derive(Serialize)]
struct Row {
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    /// u8×i8 GEMM with fused requantization to u8, 10^9 int ops/s (1 MAC = 2 ops).
    int8_gops: f64,
    /// i8×i8 (i8 activations) on the same shape.
    i8i8_gops: f64,
    f32_gflops: f64,
    peak_gops: f64,
    int8_vs_f32: f64,
    int8_vs_peak: f64,
    i8i8_vs_u8i8: f64,
    isa: String,
}

/// Best (shortest) time of `f` over repetitions filling at least `seconds`.
fn time_best(seconds: f64, mut f: impl FnMut()) -> f64 {
    f(); // warm-up: page faults, caches, thread start-up
    let start = Instant::now();
    let mut best = f64::INFINITY;
    let mut reps = 0;
    while reps < 3 || start.elapsed().as_secs_f64() < seconds {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        reps += 1;
    }
    best
}

/// f32 baseline: `C = A·B` with the `gemm` crate (row-major, no accumulation).
fn f32_gemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32], threads: usize) {
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n);
    // SAFETY: the asserted lengths cover every element addressed with these row-major
    // strides (row stride = number of columns, column stride 1).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    };
}

fn run_gemm(args: GemmArgs) -> Result<()> {
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let isa = match &args.isa {
        Some(name) => Isa::parse(name).with_context(|| format!("--isa {name}"))?,
        None => dispatch::isa(),
    };
    let shapes: Vec<(usize, usize, usize)> = match (args.m, args.n, args.k) {
        (None, None, None) => vec![
            (256, 256, 256),
            (512, 512, 512),
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (1, 4096, 4096),
        ],
        (m, n, k) => {
            let d = m.or(n).or(k).unwrap_or(512);
            vec![(m.unwrap_or(d), n.unwrap_or(d), k.unwrap_or(d))]
        }
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()
        .context("building the thread pool")?;

    // Peak: every worker thread runs the register-only loop at once.
    let per_thread: Vec<Vec<quantkit_kernels::peak::Peak>> =
        pool.broadcast(|_| quantkit_kernels::peak::measure(0.3));
    let mut peak_gops = 0.0f64;
    let mut peak_lines = Vec::new();
    if let Some(first) = per_thread.first() {
        for (i, p) in first.iter().enumerate() {
            let total: f64 = per_thread.iter().map(|v| v[i].gops).sum();
            peak_lines.push(format!("{}: {:.1} GOP/s", p.sequence, total));
            peak_gops = peak_gops.max(total);
        }
    }
    if !args.json {
        println!(
            "quantkit bench gemm: ISA {isa}, {} thread(s); int8 = u8×i8→u8 with fused requantization; best of repeated runs",
            args.threads
        );
        for l in &peak_lines {
            println!("  int8 peak, {l}");
        }
        println!(
            "{:>5} {:>5} {:>5} | {:>9} {:>9} {:>9} {:>9} | {:>8} {:>8} {:>8}",
            "m",
            "n",
            "k",
            "u8i8 GOPs",
            "i8i8 GOPs",
            "f32 GFLOP",
            "peak",
            "vs f32",
            "vs peak",
            "i8/u8"
        );
    }
    let mut rows = Vec::new();
    let mut seed = 0x1234_5678u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for (m, n, k) in shapes {
        let a_u8: Vec<u8> = (0..m * k).map(|_| rnd() as u8).collect();
        let a_i8: Vec<i8> = a_u8.iter().map(|&x| x as i8).collect();
        let w: Vec<i8> = (0..k * n).map(|_| rnd() as i8).collect();
        let packed = PackedWeights::from_i8_for(isa, &w, k, n, WeightLayout::KxN, &[0])?;
        let stage = OutputStage::float(vec![1.0 / (k as f32 * 64.0)], 128).with_bias(vec![7; n]);
        let mut out = vec![0u8; m * n];
        let ops = 2.0 * (m * n * k) as f64;
        let t_u8 = pool.install(|| {
            time_best(args.seconds, || {
                gemm_quant_with(
                    isa,
                    &Activations::u8(&a_u8, m, k, 128),
                    &packed,
                    &stage,
                    &mut out,
                )
                .expect("shapes checked")
            })
        });
        let t_i8 = pool.install(|| {
            time_best(args.seconds, || {
                gemm_quant_with(
                    isa,
                    &Activations::i8(&a_i8, m, k, 0),
                    &packed,
                    &stage,
                    &mut out,
                )
                .expect("shapes checked")
            })
        });
        let af: Vec<f32> = a_u8.iter().map(|&x| x as f32).collect();
        let bf: Vec<f32> = w.iter().map(|&x| x as f32).collect();
        let mut cf = vec![0f32; m * n];
        let t_f32 = pool.install(|| {
            time_best(args.seconds, || {
                f32_gemm(m, n, k, &af, &bf, &mut cf, args.threads)
            })
        });
        let int8 = ops / t_u8 / 1e9;
        let i8i8 = ops / t_i8 / 1e9;
        let f32g = ops / t_f32 / 1e9;
        let row = Row {
            m,
            n,
            k,
            threads: args.threads,
            int8_gops: int8,
            i8i8_gops: i8i8,
            f32_gflops: f32g,
            peak_gops,
            int8_vs_f32: int8 / f32g,
            int8_vs_peak: if peak_gops > 0.0 {
                int8 / peak_gops
            } else {
                f64::NAN
            },
            i8i8_vs_u8i8: i8i8 / int8,
            isa: isa.name().to_string(),
        };
        if !args.json {
            println!(
                "{:>5} {:>5} {:>5} | {:>9.1} {:>9.1} {:>9.1} {:>9.1} | {:>7.2}x {:>7.1}% {:>8.2}",
                m,
                n,
                k,
                row.int8_gops,
                row.i8i8_gops,
                row.f32_gflops,
                row.peak_gops,
                row.int8_vs_f32,
                100.0 * row.int8_vs_peak,
                row.i8i8_vs_u8i8
            );
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}

/// One row of `quantkit bench conv`.
#[derive(Serialize)]
struct ConvRow {
    layer: String,
    /// Input `[n, h, w, c]`.
    input: [usize; 4],
    c_out: usize,
    threads: usize,
    /// The algorithm that ran (`ConvWeights::method`).
    method: &'static str,
    ms: f64,
    /// 2·MACs / time, 10^9 ops/s.
    int8_gops: f64,
    /// The f32 GEMM of the same (im2col) GEMM shape, im2col excluded; none for depthwise.
    f32_gemm_gflops: Option<f64>,
    isa: String,
}

fn run_conv(args: ConvArgs) -> Result<()> {
    use quantkit_kernels::conv::{
        conv2d_quant_with, ConvAlgorithm, ConvParams, ConvWeights, NhwcInput,
    };
    use quantkit_kernels::deconv::{deconv2d_quant_with, DeconvWeights};
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let isa = match &args.isa {
        Some(name) => Isa::parse(name).with_context(|| format!("--isa {name}"))?,
        None => dispatch::isa(),
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()
        .context("building the thread pool")?;
    let k3 = |g: usize| ConvParams {
        pads: [1; 4],
        groups: g,
        ..ConvParams::new(3, 3)
    };
    // (name, input NHWC, c_out, params, deconv?)
    let b = args.batch;
    if b == 0 {
        bail!("--batch must be at least 1");
    }
    let algo = match &args.algo {
        Some(name) => ConvAlgorithm::parse(name).with_context(|| format!("--algo {name}"))?,
        None => ConvAlgorithm::from_env(),
    };
    let layers: Vec<(&str, [usize; 4], usize, ConvParams, bool)> = vec![
        // bench/int8_vs_ort.py's models: LeNet and the 4-stage conv net.
        ("lenet conv1 1->32", [b, 28, 28, 1], 32, k3(1), false),
        ("lenet conv2 32->64", [b, 14, 14, 32], 64, k3(1), false),
        ("convnet conv0 3->32", [b, 64, 64, 3], 32, k3(1), false),
        ("convnet conv1 32->64", [b, 32, 32, 32], 64, k3(1), false),
        ("convnet conv2 64->128", [b, 16, 16, 64], 128, k3(1), false),
        ("convnet conv3 128->256", [b, 8, 8, 128], 256, k3(1), false),
        ("resnet conv2_x 3x3", [1, 56, 56, 64], 64, k3(1), false),
        ("resnet conv3_x 3x3", [1, 28, 28, 128], 128, k3(1), false),
        ("resnet conv4_x 3x3", [1, 14, 14, 256], 256, k3(1), false),
        ("resnet conv5_x 3x3", [1, 7, 7, 512], 512, k3(1), false),
        (
            "resnet 1x1 expand",
            [1, 56, 56, 64],
            256,
            ConvParams::new(1, 1),
            false,
        ),
        (
            "resnet 3x3 stride 2",
            [1, 56, 56, 64],
            128,
            ConvParams {
                stride: [2, 2],
                ..k3(1)
            },
            false,
        ),
        ("mobilenet dw 3x3", [1, 112, 112, 32], 32, k3(32), false),
        ("mobilenet dw 3x3", [1, 28, 28, 256], 256, k3(256), false),
        (
            "unet deconv 2x2 s2",
            [1, 28, 28, 128],
            64,
            ConvParams {
                stride: [2, 2],
                ..ConvParams::new(2, 2)
            },
            true,
        ),
    ];
    let mut seed = 0x9876_5432u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    let mut rows = Vec::new();
    if !args.json {
        println!("quantkit bench conv: ISA {isa}, {} thread(s), algorithm {}; u8 NHWC in/out, per-channel float requantization; best of repeated runs", args.threads, algo.name());
        println!(
            "{:<23} {:>18} {:>5} {:>13} | {:>9} {:>9} {:>11}",
            "layer", "input", "c_out", "method", "ms", "int8 GOPs", "f32 GEMM GF"
        );
    }
    let layers: Vec<_> = match &args.only {
        Some(only) => layers
            .into_iter()
            .filter(|l| l.0.contains(only.as_str()))
            .collect(),
        None => layers,
    };
    for (name, shape, c_out, p, deconv) in layers {
        let [n, h, w, c] = shape;
        let x: Vec<u8> = (0..n * h * w * c).map(|_| rnd() as u8).collect();
        let input = NhwcInput {
            data: &x,
            shape,
            zero_point: 120,
        };
        let cin_g = c / p.groups;
        let wt: Vec<i8> = (0..c_out * cin_g * p.kernel[0] * p.kernel[1])
            .map(|_| rnd() as i8)
            .collect();
        let stage = OutputStage::float(
            (0..c_out)
                .map(|i| 1e-4 * (1.0 + i as f32 / c_out as f32))
                .collect(),
            128,
        )
        .with_bias(vec![5; c_out]);
        let method;
        let (secs, macs, gemm_shape) = if deconv {
            let dw = DeconvWeights::new(&wt, c, c_out, p, [0, 0], &[0])?;
            method = dw.method();
            let os = dw.output_shape(shape)?;
            let mut out = vec![0u8; os.iter().product()];
            let t = pool.install(|| {
                time_best(args.seconds, || {
                    deconv2d_quant_with(isa, &input, &dw, &stage, &mut out)
                        .expect("checked shapes");
                })
            });
            let macs = n * h * w * c * c_out * p.kernel[0] * p.kernel[1];
            (
                t,
                macs,
                Some((n * h * w, c_out * p.kernel[0] * p.kernel[1], c)),
            )
        } else {
            let cw = ConvWeights::for_isa(&wt, c_out, c, p, &[0], algo, isa)?;
            method = cw.method();
            let os = quantkit_kernels::conv::conv2d_output_shape(shape, &cw)?;
            let mut out = vec![0u8; os.iter().product()];
            let t = pool.install(|| {
                time_best(args.seconds, || {
                    conv2d_quant_with(isa, &input, &cw, &stage, &mut out).expect("checked shapes");
                })
            });
            let m = os[0] * os[1] * os[2];
            let k = cin_g * p.kernel[0] * p.kernel[1];
            let gs = if cw.is_depthwise() {
                None
            } else {
                Some((m, c_out, k))
            };
            (t, m * c_out * k, gs)
        };
        let f32g = gemm_shape.map(|(m, nn, k)| {
            let af = vec![0.5f32; m * k];
            let bf = vec![0.25f32; k * nn];
            let mut cf = vec![0f32; m * nn];
            let t = pool.install(|| {
                time_best(args.seconds, || {
                    f32_gemm(m, nn, k, &af, &bf, &mut cf, args.threads)
                })
            });
            2.0 * (m * nn * k) as f64 / t / 1e9
        });
        let row = ConvRow {
            layer: name.to_string(),
            input: shape,
            c_out,
            threads: args.threads,
            method,
            ms: secs * 1e3,
            int8_gops: 2.0 * macs as f64 / secs / 1e9,
            f32_gemm_gflops: f32g,
            isa: isa.name().to_string(),
        };
        if !args.json {
            println!(
                "{:<23} {:>18} {:>5} {:>13} | {:>9.3} {:>9.1} {:>11}",
                row.layer,
                format!("{:?}", row.input),
                c_out,
                row.method,
                row.ms,
                row.int8_gops,
                row.f32_gemm_gflops
                    .map_or("-".to_string(), |g| format!("{g:.1}"))
            );
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}
