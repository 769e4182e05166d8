//! `quantkit tensor`: quantize numbers from the command line or a `.npy` file and show the
//! whole story — parameters, quantized and dequantized values, per-element error, MSE/SQNR.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use quantkit_core::{
    observer::CalibrationMethod, ErrorMetrics, Granularity, QParams, QuantScheme, RoundingMode,
};

/// Arguments of `quantkit tensor`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example: quantkit tensor --values \"-1.8,-1.0,0.0,0.5\" --dtype u8\n  \
                  gives scale 2.3/255, zero point 200 and quantized values [0, 89, 200, 255]."
)]
pub struct Args {
    /// Comma-separated real values, e.g. "191.6,-13.5,728.6".
    #[arg(
        long,
        allow_hyphen_values = true,
        conflicts_with = "npy",
        required_unless_present = "npy"
    )]
    values: Option<String>,
    /// A `.npy` file to read the values (and shape) from.
    #[arg(long)]
    npy: Option<PathBuf>,
    /// Shape, comma-separated (default: the .npy shape, or [number of values]).
    #[arg(long)]
    shape: Option<String>,
    /// Quantized type: u8, i8, u4, i4, u16, i16, … (u2..u16, i2..i16).
    #[arg(long, default_value = "u8")]
    dtype: String,
    /// Symmetric quantization (zero point fixed at 0 for signed, mid-range for unsigned).
    #[arg(long)]
    symmetric: bool,
    /// Narrow range: drop the lowest code (e.g. i8 in [-127, 127]).
    #[arg(long)]
    narrow_range: bool,
    /// Use these scale(s) instead of calibrating (comma-separated: one, or one per channel).
    #[arg(long, allow_hyphen_values = true)]
    scale: Option<String>,
    /// Zero point(s) to go with --scale (default 0).
    #[arg(long, allow_hyphen_values = true, requires = "scale")]
    zero_point: Option<String>,
    /// Quantize per channel along this axis.
    #[arg(long, value_name = "AXIS")]
    per_channel: Option<usize>,
    /// With --per-channel: blocks of this many elements along the axis share parameters
    /// (ONNX blocked quantization).
    #[arg(long, requires = "per_channel")]
    group_size: Option<usize>,
    /// How to choose the range: minmax, percentile=P, mse, entropy, ema[=M].
    #[arg(long, default_value = "minmax")]
    method: String,
    /// Rounding of x/scale: even (ONNX) or away (TFLite).
    #[arg(long, default_value = "even", value_parser = ["even", "away"])]
    rounding: String,
    /// Write an SVG plot of original vs dequantized values and the error.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_list<T: std::str::FromStr>(what: &str, s: &str) -> Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .enumerate()
        .map(|(i, t)| {
            t.parse::<T>()
                .map_err(|e| anyhow::anyhow!("{what}: item {} '{t}' is not valid: {e}", i + 1))
        })
        .collect()
}

/// One value for every slot, or exactly one per slot.
fn expand<T: Copy>(v: Vec<T>, slots: usize, what: &str) -> Result<Vec<T>> {
    match v.len() {
        1 => Ok(vec![v[0]; slots]),
        l if l == slots => Ok(v),
        l => bail!("{what}: {l} values given, expected 1 or {slots} (one per channel)"),
    }
}

/// Runs `quantkit tensor`.
pub fn run(args: Args) -> Result<()> {
    let (x, file_shape, name) = match (&args.values, &args.npy) {
        (Some(v), _) => (
            parse_list::<f32>("--values", v)?,
            None,
            "values".to_string(),
        ),
        (None, Some(p)) => {
            let a = quantkit_data::npy::read_npy(p)
                .with_context(|| format!("reading {}", p.display()))?;
            (
                a.data.to_f32(),
                Some(a.shape.clone()),
                p.display().to_string(),
            )
        }
        (None, None) => bail!("give --values or --npy"),
    };
    if x.is_empty() {
        bail!("no values to quantize");
    }
    // Also with --scale given: NaN/±Inf would otherwise quantize silently (to z / saturation).
    quantkit_core::tensor::check_finite(&name, &x)?;
    let shape: Vec<usize> = match (&args.shape, file_shape) {
        (Some(s), _) => parse_list("--shape", s)?,
        (None, Some(s)) => s,
        (None, None) => vec![x.len()],
    };
    let n: usize = shape.iter().product();
    if n != x.len() {
        bail!(
            "--shape {:?} holds {n} elements but {} values were given",
            shape,
            x.len()
        );
    }
    let granularity = match (args.per_channel, args.group_size) {
        (None, _) => Granularity::PerTensor,
        (Some(axis), None) => Granularity::PerChannel { axis },
        (Some(axis), Some(group_size)) => Granularity::PerGroup { axis, group_size },
    };
    if let Granularity::PerChannel { axis } | Granularity::PerGroup { axis, .. } = granularity {
        if axis >= shape.len() {
            bail!(
                "--per-channel {axis}: axis out of range for shape {shape:?} (rank {})",
                shape.len()
            );
        }
    }
    if args.group_size == Some(0) {
        bail!("--group-size must be at least 1");
    }
    let scheme = QuantScheme::from_dtype(&args.dtype)?
        .with_symmetric(args.symmetric)
        .with_narrow_range(args.narrow_range)
        .with_granularity(granularity);
    let mode = if args.rounding == "away" {
        RoundingMode::HalfAwayFromZero
    } else {
        RoundingMode::HalfToEven
    };
    let slots = granularity.param_count(&shape)?;

    let params = match &args.scale {
        Some(s) => {
            let scales: Vec<f32> = parse_list("--scale", s)?;
            let zps: Vec<i32> = match &args.zero_point {
                Some(z) => parse_list("--zero-point", z)?,
                None => vec![0; scales.len()],
            };
            let scales = expand(scales, slots, "--scale")?;
            let zps = expand(zps, slots, "--zero-point")?;
            for &sc in &scales {
                if !(sc.is_finite() && sc > 0.0) {
                    bail!("--scale {sc}: the scale must be a finite number > 0");
                }
            }
            for &z in &zps {
                if z < scheme.qmin() || z > scheme.qmax() {
                    bail!(
                        "--zero-point {z}: outside the range of {} [{}, {}]",
                        scheme.dtype_name(),
                        scheme.qmin(),
                        scheme.qmax()
                    );
                }
            }
            let p = QParams {
                scales,
                zero_points: zps,
                qmin: scheme.qmin(),
                qmax: scheme.qmax(),
                granularity,
            };
            p.validate(&name)?;
            p
        }
        None => {
            let method: CalibrationMethod = args.method.parse()?;
            let mut obs = method.observer(&name, granularity);
            obs.observe(&x, &shape)?;
            obs.qparams(&scheme)?
        }
    };

    let q = params.quantize(&x, &shape, mode)?;
    let dq = params.dequantize(&q, &shape)?;
    let m = ErrorMetrics::compute(&x, &dq)?;
    let err: Vec<f32> = x.iter().zip(&dq).map(|(a, b)| b - a).collect();

    if let Some(path) = &args.plot {
        write_plot(path, &x, &dq, &err).with_context(|| format!("writing {}", path.display()))?;
    }

    if args.json {
        let per_tensor = matches!(granularity, Granularity::PerTensor);
        // f32 values printed with their shortest round-trip form, not widened to f64 noise.
        let f32s = |v: &[f32]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|t| {
                    t.to_string()
                        .parse::<f64>()
                        .map(serde_json::Value::from)
                        .unwrap_or(serde_json::Value::Null)
                })
                .collect()
        };
        let finite = |v: f64| {
            if v.is_finite() {
                serde_json::json!(v)
            } else {
                serde_json::Value::Null
            }
        };
        let obj = serde_json::json!({
            "dtype": scheme.dtype_name(),
            "qmin": scheme.qmin(),
            "qmax": scheme.qmax(),
            "shape": shape,
            "scale": if per_tensor { f32s(&params.scales)[0].clone() } else { serde_json::json!(f32s(&params.scales)) },
            "zero_point": if per_tensor { serde_json::json!(params.zero_points[0]) } else { serde_json::json!(params.zero_points) },
            "quantized": q,
            "dequantized": f32s(&dq),
            "error": f32s(&err),
            "mse": m.mse,
            "sqnr_db": finite(m.sqnr_db),
            "max_abs_error": m.max_abs,
            "cosine": m.cosine,
            "rel_l2": finite(m.rel_l2),
        });
        println!("{}", serde_json::to_string_pretty(&obj)?);
        return Ok(());
    }

    println!(
        "{} {}, range [{}, {}], {:?}, shape {:?}",
        scheme.dtype_name(),
        if scheme.symmetric {
            "symmetric"
        } else {
            "affine"
        },
        scheme.qmin(),
        scheme.qmax(),
        granularity,
        shape
    );
    for (i, (s, z)) in params.scales.iter().zip(&params.zero_points).enumerate() {
        let label = if params.scales.len() == 1 {
            String::new()
        } else {
            format!("[{i}]")
        };
        println!("scale{label} = {s:e} ({s})   zero_point{label} = {z}");
    }
    println!();
    println!(
        "{:>6}  {:>14}  {:>8}  {:>14}  {:>12}",
        "index", "value", "q", "dequantized", "error"
    );
    for i in 0..x.len() {
        println!(
            "{:>6}  {:>14.6}  {:>8}  {:>14.6}  {:>12.3e}",
            i, x[i], q[i], dq[i], err[i]
        );
    }
    println!();
    println!("MSE        {:.6e}", m.mse);
    println!("SQNR       {:.2} dB", m.sqnr_db);
    println!("max |err|  {:.6e}", m.max_abs);
    println!("cosine     {:.8}", m.cosine);
    println!("rel. L2    {:.6e}", m.rel_l2);
    if let Some(p) = &args.plot {
        println!("plot written to {}", p.display());
    }
    Ok(())
}

/// Two panels: original and dequantized values by index (top), the error (bottom).
fn write_plot(path: &std::path::Path, x: &[f32], dq: &[f32], err: &[f32]) -> Result<()> {
    use plotters::prelude::*;
    // Render to memory first so a failure never leaves a half-written file.
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (top, bottom) = root.split_vertically(400);
        let n = x.len() as f64;
        let range = |v: &mut dyn Iterator<Item = f32>| {
            let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                (a.min(f64::from(t)), b.max(f64::from(t)))
            });
            let pad = ((hi - lo) * 0.05).max(1e-12);
            (lo - pad)..(hi + pad)
        };
        let yr = range(&mut x.iter().chain(dq).copied());
        let mut c = ChartBuilder::on(&top)
            .caption("original vs dequantized", ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(n - 0.5).max(0.5), yr)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        c.configure_mesh()
            .x_desc("index")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        c.draw_series(LineSeries::new(
            x.iter().enumerate().map(|(i, &v)| (i as f64, f64::from(v))),
            &BLUE,
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .label("original")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], BLUE));
        c.draw_series(LineSeries::new(
            dq.iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, f64::from(v))),
            &RED,
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .label("dequantized")
        .legend(|(a, b)| PathElement::new(vec![(a, b), (a + 20, b)], RED));
        c.configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let er = range(&mut err.iter().copied().chain([0.0]));
        let mut c = ChartBuilder::on(&bottom)
            .caption("error (dequantized − original)", ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(n - 0.5).max(0.5), er)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        c.configure_mesh()
            .x_desc("index")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        c.draw_series(LineSeries::new(
            err.iter()
                .enumerate()
                .map(|(i, &v)| (i as f64, f64::from(v))),
            &BLACK,
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    quantkit_core::atomic::write_bytes(path, svg.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
