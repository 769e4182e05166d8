//! `quantkit inspect MODEL.onnx [--json]`: opset, inputs/outputs, op counts, parameters by
//! dtype and which nodes are integer (QDQ / QOperator) operators.

use anyhow::Result;
use clap::Parser;
use quantkit_graph::load_model;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Arguments of `quantkit inspect`.
#[derive(Parser)]
pub struct Args {
    /// The ONNX model.
    pub model: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<()> {
    let g = load_model(&args.model)?;
    let mut ops_count: BTreeMap<String, usize> = BTreeMap::new();
    for n in &g.nodes {
        let key = if n.domain.is_empty() {
            n.op_type.clone()
        } else {
            format!("{}::{}", n.domain, n.op_type)
        };
        *ops_count.entry(key).or_default() += 1;
    }
    let mut params: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in g.initializers.values() {
        let e = params.entry(t.dtype.to_string()).or_default();
        e.0 += t.len();
        e.1 += t.nbytes();
    }
    let integer: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| n.facts().quantized)
        .map(|n| (n.name.clone(), n.op_type.clone()))
        .collect();
    let unsupported: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| n.kind().is_none())
        .map(|n| (n.name.clone(), n.op_type.clone()))
        .collect();
    if args.json {
        let vi = |v: &quantkit_graph::ValueInfo| json!({"name": v.name, "type": v.describe()});
        let out = json!({
            "model": args.model,
            "ir_version": g.meta.ir_version,
            "producer": format!("{} {}", g.meta.producer_name, g.meta.producer_version).trim(),
            "opset_imports": g.opset_imports.iter().map(|(d, v)| json!({"domain": d, "version": v})).collect::<Vec<_>>(),
            "inputs": g.inputs.iter().map(vi).collect::<Vec<_>>(),
            "outputs": g.outputs.iter().map(vi).collect::<Vec<_>>(),
            "nodes": g.nodes.len(),
            "op_counts": ops_count,
            "parameters": g.parameter_count(),
            "parameters_by_dtype": params.iter().map(|(k, (n, b))| (k.clone(), json!({"count": n, "bytes": b}))).collect::<BTreeMap<_, _>>(),
            "integer_nodes": integer.iter().map(|(n, o)| json!({"name": n, "op_type": o})).collect::<Vec<_>>(),
            "unsupported_nodes": unsupported.iter().map(|(n, o)| json!({"name": n, "op_type": o})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("model     {}", args.model.display());
    println!(
        "producer  {} {} (IR {})",
        g.meta.producer_name, g.meta.producer_version, g.meta.ir_version
    );
    let opsets: Vec<String> = g
        .opset_imports
        .iter()
        .map(|(d, v)| format!("{}:{v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    println!("opset     {}", opsets.join(", "));
    for v in &g.inputs {
        println!("input     {} {}", v.name, v.describe());
    }
    for v in &g.outputs {
        println!("output    {} {}", v.name, v.describe());
    }
    println!("nodes     {}", g.nodes.len());
    for (op, n) in &ops_count {
        println!("  {op:<28} {n}");
    }
    println!("parameters {}", g.parameter_count());
    for (dt, (n, b)) in &params {
        println!("  {dt:<10} {n:>12} values {b:>12} bytes");
    }
    println!("integer nodes (QDQ / QOperator): {}", integer.len());
    for (n, o) in &integer {
        println!("  {n} ({o})");
    }
    if !unsupported.is_empty() {
        println!("nodes without an implementation: {}", unsupported.len());
        for (n, o) in &unsupported {
            println!("  {n} ({o})");
        }
    }
    Ok(())
}
