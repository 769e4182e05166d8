//! Measures data loading: opening a data set and one shuffled pass in batches of 64.
//!
//! ```sh
//! cargo run --release -p quantkit-data --example bench_batches -- [PATH] [--split train|test]
//! ```
//! PATH defaults to the installed Fashion-MNIST folder; anything `open_data` accepts works.

use std::time::Instant;

use quantkit_data::{open_data, BatchOptions, OpenOptions, Split};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut path = None;
    let mut split = Split::Train;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--split" => split = args.next().ok_or("--split needs a value")?.parse()?,
            _ => path = Some(std::path::PathBuf::from(a)),
        }
    }
    let path = match path {
        Some(p) => p,
        None => quantkit_data::idx::find_fashion_mnist(None)?,
    };
    let opts = OpenOptions {
        split,
        ..Default::default()
    };
    let t = Instant::now();
    let mut source = open_data(&path, &opts)?;
    let open_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut samples = 0usize;
    let mut checksum = 0f64;
    for batch in source.batches(&BatchOptions::new(64).shuffled(1))? {
        let batch = batch?;
        samples += batch.shape[0];
        checksum += batch.data.iter().map(|&v| v as f64).sum::<f64>();
    }
    let pass_s = t.elapsed().as_secs_f64();
    println!(
        "{}: open {:.3} s; one shuffled pass of {samples} samples in batches of 64: {:.3} s = {:.0} samples/s (checksum {checksum:.3})",
        path.display(),
        open_s,
        pass_s,
        samples as f64 / pass_s
    );
    Ok(())
}
