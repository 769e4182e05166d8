//! Regenerates `data/fashion-mnist-sample/` from the installed Fashion-MNIST test set:
//! the first N (default 1,000) test images as u8 `images.npy` [N, 1, 28, 28] and their
//! labels as int64 `labels.npy` [N].
//!
//! ```sh
//! cargo run -p quantkit-data --example make_fashion_sample -- data/fashion-mnist-sample [N]
//! ```
//! The Fashion-MNIST folder is found as in the tests: `$QUANTKIT_FASHION_MNIST`, then
//! `/usr/share/datasets/fashion-mnist`.

use quantkit_data::idx::{find_fashion_mnist, IdxDataset, Split};
use quantkit_data::npy::{write_npy, NpyArray, NpyData};
use quantkit_data::Dataset;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(
        args.next()
            .ok_or("usage: make_fashion_sample OUT_DIR [N]")?,
    );
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let dir = find_fashion_mnist(None)?;
    let test = IdxDataset::open_dir(&dir, Split::Test)?;
    if n > test.len() {
        return Err(format!("only {} test images", test.len()).into());
    }
    let mut pixels = Vec::with_capacity(n * 784);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        pixels.extend_from_slice(test.raw_sample(i).ok_or("sample out of range")?);
        labels.push(test.label(i).ok_or("test labels missing")?);
    }
    let shape = test.sample_shape().to_vec();
    std::fs::create_dir_all(&out)?;
    write_npy(
        out.join("images.npy"),
        &NpyArray::new(vec![n, shape[0], shape[1], shape[2]], NpyData::U8(pixels))?,
    )?;
    write_npy(
        out.join("labels.npy"),
        &NpyArray::new(vec![n], NpyData::I64(labels))?,
    )?;
    println!(
        "wrote {n} samples from {} to {}",
        dir.display(),
        out.display()
    );
    Ok(())
}
