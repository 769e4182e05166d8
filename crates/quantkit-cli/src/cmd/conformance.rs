//! `quantkit conformance DIR [--json] [--markdown FILE]`: runs ONNX node-test folders.

use anyhow::{Context, Result};
use clap::Parser;
use quantkit_graph::conformance::{run_dir, Status};
use std::path::PathBuf;

/// Arguments of `quantkit conformance`.
#[derive(Parser)]
pub struct Args {
    /// Folder of cases in the ONNX node-test layout (CASE/model.onnx, CASE/test_data_set_N/).
    pub dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the report as a Markdown table (e.g. CONFORMANCE.md).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

/// Runs the subcommand; exits with status 1 when a case failed.
pub fn run(args: Args) -> Result<()> {
    let report =
        run_dir(&args.dir).with_context(|| format!("running cases in {}", args.dir.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for c in &report.cases {
            let st = match c.status {
                Status::Passed => "pass",
                Status::Failed => "FAIL",
                Status::Unsupported => "unsupported",
                Status::Excluded => "excluded",
            };
            let err = c
                .max_error
                .map(|e| format!("{e:.3e}"))
                .unwrap_or_else(|| "-".into());
            println!("{st:<11} {:<60} max_error {err:<10} {}", c.name, c.message);
        }
        println!("{}", report.summary());
    }
    if let Some(md) = &args.markdown {
        let text = report.to_markdown(&args.dir.display().to_string());
        quantkit_core::atomic::write_bytes(md, text.as_bytes())
            .with_context(|| format!("writing {}", md.display()))?;
    }
    if report.failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
