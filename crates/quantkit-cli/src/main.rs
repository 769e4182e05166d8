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
    /// kernels (`bench gemm`, `bench conv`), the ISA in use (`bench --isa`). The environment
    /// variables QUANTKIT_ISA (scalar, avx2, avx512vnni) and QUANTKIT_CONV_ALGO (auto,
    /// im2col, winograd, winograd4, pairs, direct) force the kernels' instruction set and the conv
    /// algorithm (default: the cost model's choice per ISA); QUANTKIT_DECONV_ALGO (auto,
    /// col2im, blocks) the transposed conv's; QUANTKIT_BATCH_CHUNK (auto, off, or images per
    /// chunk) how a batch of large images is cut into whole-image chunks spread over the
    /// threads.
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
    /// Quantization-aware training: fine-tune a float model with fake quantization at the
    /// points PTQ quantizes, then write QDQ ONNX (docs/qat.md).
    Qat(Box<cmd::qat::Args>),
    /// Quantize an ONNX model: post-training static quantization to QDQ or QOperator ONNX
    /// (calibrated on --calib data), or dynamic quantization (--dynamic, no data).
    Quantize(Box<cmd::quantize::Args>),
    /// Accuracy or reconstruction MSE of a model on a data set, optionally against a reference.
    Eval(Box<cmd::eval::Args>),
    /// Per-layer quantization error and which layer is to blame: weight error, local and
    /// propagated SQNR, and the output with each layer left in float, ranked.
    Analyze(Box<cmd::analyze::Args>),
    /// Static deployability check of a quantized model: requantization multipliers in
    /// fixed-point range, worst-case int32 accumulators, vpmaddubsw saturation risk, float
    /// islands, per target (exit status 2 when an error is found).
    Check(cmd::check::Args),
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

/// On SIGINT, SIGTERM or SIGHUP, removes the temporary files of atomic writes in progress
/// (so an interrupted `quantize -o out.onnx` leaves the old `out.onnx` or nothing, and no
/// `.out.onnx.*.tmp-quantkit`), then ends the process the way the signal would have.
/// The work is done on a thread of its own, not in the signal handler, so it may lock and
/// call the file system.
#[cfg(unix)]
fn clean_up_on_signals() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            // Keeps the registry locked: no rename may start after the cleanup.
            quantkit_core::atomic::remove_pending(true);
            let _ = signal_hook::low_level::emulate_default_handler(sig);
            std::process::exit(128 + sig);
        }
    });
    Ok(())
}

/// Prints an error and its causes the way anyhow's `Debug` does, but never a backtrace:
/// with `RUST_BACKTRACE=1` set (common on developers' machines) returning the error from
/// `main` printed a stack trace for every ordinary user error. Panics still print one.
fn report(e: &anyhow::Error) {
    eprintln!("Error: {e}");
    let causes: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
    if !causes.is_empty() {
        eprintln!("\nCaused by:");
        for (i, c) in causes.iter().enumerate() {
            if causes.len() == 1 {
                eprintln!("    {c}");
            } else {
                eprintln!("    {i}: {c}");
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    keep_freed_memory();
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            report(&e);
            std::process::ExitCode::FAILURE
        }
    }
}

/// Builds rayon's global pool with this (the main) thread as one of its workers, with
/// `threads` workers (default: `RAYON_NUM_THREADS`, else one per core).
///
/// Every command drives its models from the main thread. Were the main thread outside the
/// pool, each parallel kernel call (every operator of the float executor, every step of the
/// integer engine) would hand its work to a pool thread and sleep until it is done: a
/// wake-up and a context switch per call, which on a small model is a fifth of the run
/// (measured with `perf` on the PP-OCR classifier, 1 thread). As a worker, the main thread
/// runs that work itself and only shares it with the other workers.
fn start_thread_pool(threads: Option<usize>) -> anyhow::Result<()> {
    let mut b = rayon::ThreadPoolBuilder::new().use_current_thread();
    if let Some(t) = threads {
        b = b.num_threads(t);
    }
    anyhow::Context::context(b.build_global(), "starting the thread pool")
}

fn run() -> anyhow::Result<()> {
    // A malformed QUANTKIT_LIMITS is an error here rather than silently the defaults.
    quantkit_core::limits::Limits::install(quantkit_core::limits::Limits::from_env()?);
    #[cfg(unix)]
    clean_up_on_signals()?;
    let cli = Cli::parse();
    start_thread_pool(match &cli.command {
        Command::Train(a) => a.threads,
        _ => None,
    })?;
    match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Tensor(args) => cmd::tensor::run(*args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Conformance(args) => cmd::conformance::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Train(args) => cmd::train::run(*args),
        Command::Qat(args) => cmd::qat::run(*args),
        Command::Quantize(args) => cmd::quantize::run(*args),
        Command::Eval(args) => cmd::eval::run(*args),
        Command::Analyze(args) => cmd::analyze::run(*args),
        Command::Check(args) => cmd::check::run(args),
    }
}

#[cfg(test)]
mod tests {
    /// clap's own checks of the argument definitions (duplicate short flags such as a second
    /// `-q`, conflicting names). They are compiled only with debug assertions: this test
    /// checks in the dev profile CI runs (`analyze`'s new `-q` given `-o` fails it there) and
    /// passes vacuously under `--release`.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
