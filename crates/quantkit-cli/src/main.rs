//! `quantkit`: linear quantization of neural networks.
//!
//! Each subcommand lives in its own module under `cmd/`.

mod cmd;

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
    /// Run the built-in demonstration on the default example.
    Demo(cmd::demo::Args),
    /// Quantize numbers (or a .npy file) and show parameters, values and error.
    Tensor(Box<cmd::tensor::Args>),
    /// Measure kernel speed on this machine (`bench gemm`, `bench --isa`).
    Bench(cmd::bench::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Tensor(args) => cmd::tensor::run(*args),
        Command::Bench(args) => cmd::bench::run(args),
    }
}
