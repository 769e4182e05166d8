//! `quantkit demo`: the main job on a built-in default.

/// Arguments of `quantkit demo`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the demo.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("the demo is not built yet")
}
