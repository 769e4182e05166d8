//! `quantkit`: linear quantization of neural networks.
//!
//! Each subcommand lives in its own module under `cmd/`.

mod cmd;
mod evaluate;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "quantkit",
    version,
    about = "Linear quantization of neural networks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Quantize the committed LeNet on the committed Fashion-MNIST sample, run it on the
    /// integer engine and compare it with the float model.
    Demo(cmd::demo::Args),
    /// Quantize numbers (or a .npy file) and show parameters, values and error.
    Tensor(Box<cmd::tensor::Args>),
    /// Measure speed on this machine: a model float vs int8 (`bench MODEL.onnx`), the int8
    /// kernels (`bench gemm`, `bench conv`), the ISA in use (`bench --isa`).
    Bench(cmd::bench::Args),
    /// Run ONNX node-test case folders and report pass/fail/unsupported.
    Conformance(cmd::conformance::Args),
    /// Run an ONNX model on .npy/.pb inputs with the float executor, or a quantized one on
    /// the integer engine (`--engine int8`).
    Run(cmd::run::Args),
    /// Show a model's opset, inputs/outputs, operators and parameters.
    Inspect(cmd::inspect::Args),
    /// Train a zoo architecture on an IDX image set (Fashion-MNIST by default) and write it
    /// as ONNX.
    Train(Box<cmd::train::Args>),
    /// Quantize an ONNX model: post-training static quantization to QDQ or QOperator ONNX
    /// (calibrated on --calib data), or dynamic quantization (--dynamic, no data).
    Quantize(Box<cmd::quantize::Args>),
    /// Accuracy or reconstruction MSE of a model on a data set, optionally against a reference.
    Eval(Box<cmd::eval::Args>),
    /// Per-layer quantization error and which layer is to blame: weight error, local and
    /// propagated SQNR, and the output with each layer left in float, ranked.
    Analyze(Box<cmd::analyze::Args>),
}

/// Tells glibc's allocator to keep large freed blocks instead of returning them to the
/// kernel. Activations and im2col buffers are megabytes each and are freed and re-allocated
/// at every layer; by default glibc serves each from a fresh `mmap` whose pages fault in
/// (and are zeroed) on first touch, about a tenth of a conv net's run time here. With the
/// blocks kept, later layers and batches reuse pages that are already mapped. 32 MiB is
/// the largest mmap threshold glibc accepts on 64-bit targets (larger values are ignored).
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator tunables; it is called before any other
    // thread exists, and both values are valid byte counts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

fn main() -> anyhow::Result<()> {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Tensor(args) => cmd::tensor::run(*args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Conformance(args) => cmd::conformance::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Train(args) => cmd::train::run(*args),
        Command::Quantize(args) => cmd::quantize::run(*args),
        Command::Eval(args) => cmd::eval::run(*args),
        Command::Analyze(args) => cmd::analyze::run(*args),
    }
}
