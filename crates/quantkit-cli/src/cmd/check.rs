//! `quantkit check QUANT.onnx [--json]`: static deployability check of a quantized model
//! (`quantkit_ptq::check`) plus the float islands of quantkit's engine (its compile report).
//! Exit status 0: no error found; 2: at least one error (an accumulator that can overflow
//! int32, a multiplier with no fixed-point form); 1: the check itself failed (unreadable
//! model...).

use anyhow::Context;
use quantkit_engine::{compile, EngineOptions, Placement};
use quantkit_ptq::check::{check, Finding, Severity, Target};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `quantkit check`.
#[derive(clap::Args)]
#[command(after_help = "\
Checks, per integer layer (QDQ Conv/ConvTranspose/Gemm/MatMul, QLinearConv, QLinearMatMul, \
QGemm, ConvInteger, MatMulInteger):
  multiplier  s_x·s_w/s_y per channel and its fixed-point form M0·2^(shift−31), M0 in \
[2^30, 2^31): error when it has none (M >= 2^30), warning when it flushes to 0 (M < 2^-32), \
note when M >= 1 (left shift)
  accumulator worst-case |Σ (x−z_x)(w−z_w) + bias| for the actual K, weights and zero points \
over the input type's whole range: error above 2^31 − 1
  vpmaddubsw  u8·s8 weight pairs along K that can saturate int16 on x86 without VNNI \
(ONNX Runtime): warning
  float       ops quantkit's engine runs as float islands: note
Exit status: 0 no error, 2 errors found, 1 the check could not run.")]
pub struct Args {
    /// A quantized ONNX model (QDQ, QOperator or dynamic).
    pub model: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn target_name(t: Target) -> &'static str {
    match t {
        Target::All => "all targets",
        Target::OnnxRuntime => "ONNX Runtime",
        Target::FixedPoint => "fixed point",
        Target::Quantkit => "quantkit engine",
    }
}

/// Runs `quantkit check`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let graph = quantkit_graph::load_model(&args.model)?;
    let mut report = check(&graph).with_context(|| format!("checking {}", args.model.display()))?;
    // Float islands: what the engine's compile report says.
    let plan = compile(&graph, &EngineOptions::default())
        .with_context(|| format!("compiling {} for the engine", args.model.display()))?;
    let mut islands = Vec::new();
    for n in plan.report() {
        if let Placement::Float { reason } = &n.placement {
            islands.push((n.node.clone(), n.op_type.clone(), reason.clone()));
        }
    }
    for (node, op, reason) in &islands {
        report.findings.push(Finding {
            severity: Severity::Note,
            target: Target::Quantkit,
            node: Some(node.clone()),
            message: format!("{op} runs as a float island: {reason}"),
        });
    }
    let errors = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let integer = plan.report().iter().filter(|n| n.is_integer()).count();
    if args.json {
        let mut v = serde_json::to_value(&report)?;
        v["model"] = args.model.display().to_string().into();
        v["errors"] = errors.into();
        v["warnings"] = warnings.into();
        v["engine"] = serde_json::json!({
            "integer_nodes": integer,
            "float_islands": islands
                .iter()
                .map(|(n, o, r)| serde_json::json!({"node": n, "op": o, "reason": r}))
                .collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{}: {} integer layers checked; engine: {} nodes in integer steps, {} float islands",
            args.model.display(),
            report.layers.len(),
            integer,
            islands.len()
        );
        let w = report
            .layers
            .iter()
            .map(|l| l.node.len())
            .max()
            .unwrap_or(4)
            .max(5);
        println!(
            "{:w$}  {:16}  {:>6}  {:>7}  {:>9}  {:>8}  {:>21}  {:>8}  {:>11}",
            "layer",
            "op",
            "K",
            "types",
            "worst acc",
            "headroom",
            "multiplier",
            "shift",
            "sat. pairs"
        );
        for l in &report.layers {
            let m = l
                .multiplier
                .map_or("-".into(), |(a, b)| format!("{a:.2e}..{b:.2e}"));
            let s = l.shift.map_or("-".into(), |(a, b)| format!("{a}..{b}"));
            let p = l
                .maddubs_pairs_at_risk
                .map_or("-".into(), |(r, p)| format!("{r}/{p}"));
            println!(
                "{:w$}  {:16}  {:>6}  {:>7}  {:>9.2e}  {:>7.1}b  {:>21}  {:>8}  {:>11}",
                l.node,
                l.op,
                l.k,
                format!("{}·{}", l.input_type, l.weight_type),
                l.worst_accumulator,
                l.headroom_bits,
                m,
                s,
                p
            );
        }
        if report.findings.is_empty() {
            println!("no findings");
        }
        for f in &report.findings {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            println!(
                "{sev:7} [{}] {}: {}",
                target_name(f.target),
                f.node.as_deref().unwrap_or("-"),
                f.message
            );
        }
        println!(
            "{errors} errors, {warnings} warnings; ONNX Runtime requantizes with a float \
             multiplier (any M > 0 is fine there); `quantkit check --help` explains each check"
        );
    }
    if errors > 0 {
        std::io::stdout().flush().ok();
        eprintln!(
            "{}: {errors} deployability error(s) found",
            args.model.display()
        );
        std::process::exit(2);
    }
    Ok(())
}
