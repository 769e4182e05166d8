//! IDX files (the format of MNIST and Fashion-MNIST), plain or gzip-compressed.
//!
//! Format (<http://yann.lecun.com/exdb/mnist/>, "FILE FORMATS"): a 4-byte magic `00 00 TT NN`
//! where `TT` is the element type (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64)
//! and `NN` the number of dimensions, then `NN` big-endian u32 sizes, then the elements,
//! big-endian, row-major. A file starting with the gzip magic `1f 8b` is decompressed first
//! (whatever its name), so `train-images-idx3-ubyte` and `train-images-idx3-ubyte.gz` both work.
//!
//! [`IdxDataset`] pairs an image file with a label file; [`find_fashion_mnist`] finds the
//! Fashion-MNIST folder (explicit path, `$QUANTKIT_FASHION_MNIST`, then
//! `/usr/share/datasets/fashion-mnist`).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::dataset::Dataset;
use crate::error::{DataError, Result};
use crate::fsutil::read_all;
use crate::npy::{NpyArray, NpyData};

/// Environment variable naming the Fashion-MNIST folder.
pub const FASHION_MNIST_ENV: &str = "QUANTKIT_FASHION_MNIST";
/// Where Debian's `dataset-fashion-mnist` package installs it.
pub const FASHION_MNIST_DEFAULT: &str = "/usr/share/datasets/fashion-mnist";

/// Returns the bytes of an IDX file, gunzipped when they start with the gzip magic.
///
/// A gzip stream is inflated header first: the IDX header's dims are checked against the
/// resource limits (elements, bytes after decompression, expansion ratio), then exactly the
/// bytes it declares are inflated, then one byte more to detect trailing data — a 16 MB
/// file that inflates to 8 GiB, or a valid file followed by a gigabyte of zeros, stops at
/// the header's size with an error instead of filling memory.
pub(crate) fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = read_all(path)?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw);
    }
    let corrupt = |e: std::io::Error| {
        DataError::format(path, format!("gzip stream is corrupt or truncated: {e}"))
    };
    let mut dec = flate2::read::MultiGzDecoder::new(&raw[..]);
    let mut out = Vec::with_capacity(16);
    (&mut dec).take(4).read_to_end(&mut out).map_err(corrupt)?;
    if out.len() < 4 || out[0] != 0 || out[1] != 0 {
        // Not an IDX header: the parser reports what is wrong with these bytes.
        return Ok(out);
    }
    let ndims = out[3] as u64;
    (&mut dec)
        .take(4 * ndims)
        .read_to_end(&mut out)
        .map_err(corrupt)?;
    if (out.len() as u64) < 4 + 4 * ndims {
        return Ok(out);
    }
    let dims: Vec<usize> = out[4..]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let size = match out[2] {
        0x0B => 2,
        0x0C | 0x0D => 4,
        0x0E => 8,
        _ => 1,
    };
    let what = path.display().to_string();
    let limits = quantkit_core::limits::Limits::current();
    let n = limits.check_shape(&what, &dims)? as u64;
    let total = out.len() as u64 + n * size;
    limits.check_inflated(&what, total, raw.len() as u64)?;
    out.reserve_exact(total as usize - out.len());
    (&mut dec)
        .take(total - out.len() as u64)
        .read_to_end(&mut out)
        .map_err(corrupt)?;
    let mut probe = [0u8; 1];
    if out.len() as u64 == total && dec.read(&mut probe).map_err(corrupt)? != 0 {
        return Err(DataError::format(
            path,
            format!(
                "trailing data: the gzip stream holds more than the {total} bytes its IDX header \
                 declares"
            ),
        ));
    }
    Ok(out)
}

/// Parses an IDX file held in memory (already decompressed). `path` names it in errors.
pub fn read_idx_bytes(path: &Path, bytes: &[u8]) -> Result<NpyArray> {
    if bytes.len() < 4 {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "header",
            expected: 4,
            found: bytes.len() as u64,
        });
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(DataError::format(
            path,
            format!(
                "not an IDX file: bad magic {:02x?} (expected 00 00 <type> <ndims>)",
                &bytes[..4]
            ),
        ));
    }
    let (type_code, ndims) = (bytes[2], bytes[3] as usize);
    let size = match type_code {
        0x08 | 0x09 => 1,
        0x0B => 2,
        0x0C | 0x0D => 4,
        0x0E => 8,
        other => {
            return Err(DataError::UnsupportedDtype {
                path: path.to_path_buf(),
                dtype: format!("IDX type 0x{other:02x}"),
                hint: "IDX types are 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64",
            })
        }
    };
    if ndims == 0 {
        return Err(DataError::format(path, "IDX header declares 0 dimensions"));
    }
    let header_len = 4 + 4 * ndims;
    if bytes.len() < header_len {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "header",
            expected: header_len as u64,
            found: bytes.len() as u64,
        });
    }
    let shape: Vec<usize> = bytes[4..header_len]
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let expected = shape
        .iter()
        .try_fold(size, |a: usize, &d| a.checked_mul(d))
        .ok_or_else(|| DataError::format(path, format!("shape {shape:?} is too large")))?;
    let data = &bytes[header_len..];
    if data.len() < expected {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            what: "data",
            expected: expected as u64,
            found: data.len() as u64,
        });
    }
    if data.len() > expected {
        return Err(DataError::format(
            path,
            format!(
                "{} trailing bytes after the {expected} data bytes of shape {shape:?}",
                data.len() - expected
            ),
        ));
    }
    macro_rules! be {
        ($t:ty, $n:expr) => {
            data.chunks_exact($n)
                .map(|c| <$t>::from_be_bytes(c.try_into().expect("chunk of $n bytes")))
                .collect()
        };
    }
    let data = match type_code {
        0x08 => NpyData::U8(data.to_vec()),
        0x09 => NpyData::I8(data.iter().map(|&b| b as i8).collect()),
        0x0B => NpyData::I16(be!(i16, 2)),
        0x0C => NpyData::I32(be!(i32, 4)),
        0x0D => NpyData::F32(be!(f32, 4)),
        _ => NpyData::F64(be!(f64, 8)),
    };
    Ok(NpyArray { shape, data })
}

/// Reads an IDX file (gzip-compressed or not).
pub fn read_idx(path: impl AsRef<Path>) -> Result<NpyArray> {
    let path = path.as_ref();
    read_idx_bytes(path, &read_maybe_gz(path)?)
}

/// Which half of a data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// The training set (`train-*`).
    Train,
    /// The test set (`t10k-*`); the default, since quantkit evaluates and calibrates.
    #[default]
    Test,
}

impl Split {
    /// The file-name prefix MNIST uses for this split.
    pub fn prefix(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "t10k",
        }
    }
}

impl std::str::FromStr for Split {
    type Err = DataError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "train" => Ok(Split::Train),
            "test" | "t10k" => Ok(Split::Test),
            other => Err(DataError::InvalidArgument(format!(
                "unknown split {other:?} (expected train or test)"
            ))),
        }
    }
}

/// Finds the image and label files of `split` in an MNIST-style folder. Accepts the usual
/// spellings: `t10k-images-idx3-ubyte`, `t10k-images.idx3-ubyte`, each optionally `.gz`.
/// Returns `None` for a kind that is missing.
pub fn find_idx_files(dir: &Path, split: Split) -> (Option<PathBuf>, Option<PathBuf>) {
    let p = split.prefix();
    let pick = |kind: &str, idx: &str| {
        [
            format!("{p}-{kind}-{idx}-ubyte"),
            format!("{p}-{kind}.{idx}-ubyte"),
        ]
        .into_iter()
        .flat_map(|stem| [format!("{stem}.gz"), stem])
        .map(|name| dir.join(name))
        .find(|c| c.is_file())
    };
    (pick("images", "idx3"), pick("labels", "idx1"))
}

/// True when `dir` holds IDX image files of either split.
pub fn is_idx_dir(dir: &Path) -> bool {
    dir.is_dir()
        && [Split::Test, Split::Train]
            .into_iter()
            .any(|s| find_idx_files(dir, s).0.is_some())
}

/// Finds the Fashion-MNIST folder: `explicit` if given, else `$QUANTKIT_FASHION_MNIST`, else
/// `/usr/share/datasets/fashion-mnist`. A folder counts when it holds the test images.
/// An explicit path or environment variable that does not hold the files is an error, not
/// a fall-through: the user asked for that folder.
pub fn find_fashion_mnist(explicit: Option<&Path>) -> Result<PathBuf> {
    let candidate = match explicit {
        Some(p) => p.to_path_buf(),
        None => std::env::var_os(FASHION_MNIST_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(FASHION_MNIST_DEFAULT)),
    };
    if find_idx_files(&candidate, Split::Test).0.is_some() {
        return Ok(candidate);
    }
    Err(DataError::NotFound {
        what: format!(
            "Fashion-MNIST (t10k-images-idx3-ubyte[.gz]; set {FASHION_MNIST_ENV} or install the Debian package dataset-fashion-mnist)"
        ),
        tried: vec![candidate],
    })
}

/// Images with optional labels from IDX files, held in memory as u8 (60,000 × 784 bytes is
/// 47 MB; the gzip stream has to be decoded once anyway). Samples come out as f32
/// `pixel / 255` with shape `[1, H, W]` (NCHW, one channel) for 3-D image files, or the
/// file's trailing dimensions for other ranks.
#[derive(Debug, Clone)]
pub struct IdxDataset {
    path: PathBuf,
    pixels: Vec<u8>,
    labels: Option<Vec<i64>>,
    len: usize,
    sample_shape: Vec<usize>,
    sample_size: usize,
}

impl IdxDataset {
    /// Opens an image file and, if given, its label file. The images must be u8 with at
    /// least 2 dimensions; the labels u8 with one dimension and as many entries as images.
    pub fn open(images: impl AsRef<Path>, labels: Option<&Path>) -> Result<Self> {
        let path = images.as_ref().to_path_buf();
        let arr = read_idx(&path)?;
        let NpyData::U8(pixels) = arr.data else {
            return Err(DataError::UnsupportedDtype {
                path,
                dtype: format!("{:?}", arr.data.dtype()),
                hint: "IDX images must be unsigned bytes (type 0x08)",
            });
        };
        if arr.shape.len() < 2 {
            return Err(DataError::Shape {
                path,
                got: arr.shape,
                reason: "images need a sample dimension and at least one more".into(),
            });
        }
        let len = arr.shape[0];
        let sample_shape: Vec<usize> = if arr.shape.len() == 3 {
            vec![1, arr.shape[1], arr.shape[2]]
        } else {
            arr.shape[1..].to_vec()
        };
        let sample_size = arr.shape[1..].iter().product();
        let labels = match labels {
            None => None,
            Some(lp) => {
                let l = read_idx(lp)?;
                let NpyData::U8(values) = l.data else {
                    return Err(DataError::UnsupportedDtype {
                        path: lp.to_path_buf(),
                        dtype: format!("{:?}", l.data.dtype()),
                        hint: "IDX labels must be unsigned bytes (type 0x08)",
                    });
                };
                if l.shape.len() != 1 {
                    return Err(DataError::Shape {
                        path: lp.to_path_buf(),
                        got: l.shape,
                        reason: "labels must be one-dimensional".into(),
                    });
                }
                if values.len() != len {
                    return Err(DataError::CountMismatch {
                        path: lp.to_path_buf(),
                        labels: values.len(),
                        samples: len,
                    });
                }
                Some(values.into_iter().map(i64::from).collect())
            }
        };
        Ok(IdxDataset {
            path,
            pixels,
            labels,
            len,
            sample_shape,
            sample_size,
        })
    }

    /// Opens `split` of an MNIST-style folder (images and labels; labels are optional).
    pub fn open_dir(dir: impl AsRef<Path>, split: Split) -> Result<Self> {
        let dir = dir.as_ref();
        let (images, labels) = find_idx_files(dir, split);
        let images = images.ok_or_else(|| DataError::NotFound {
            what: format!(
                "IDX images {0}-images-idx3-ubyte[.gz] for the {split:?} split",
                split.prefix()
            ),
            tried: vec![dir.to_path_buf()],
        })?;
        Self::open(images, labels.as_deref())
    }

    /// The raw u8 pixels of sample `index`.
    pub fn raw_sample(&self, index: usize) -> Option<&[u8]> {
        (index < self.len)
            .then(|| &self.pixels[index * self.sample_size..(index + 1) * self.sample_size])
    }

    /// The label of sample `index`, if the data set has labels.
    pub fn label(&self, index: usize) -> Option<i64> {
        self.labels.as_ref().and_then(|l| l.get(index).copied())
    }

    /// Replaces the labels (e.g. with labels from a `.npy` file); their count must match.
    pub fn with_labels(mut self, labels: Vec<i64>, labels_path: &Path) -> Result<Self> {
        if labels.len() != self.len {
            return Err(DataError::CountMismatch {
                path: labels_path.to_path_buf(),
                labels: labels.len(),
                samples: self.len,
            });
        }
        self.labels = Some(labels);
        Ok(self)
    }
}

impl Dataset for IdxDataset {
    fn len(&self) -> usize {
        self.len
    }

    fn sample_shape(&self) -> &[usize] {
        &self.sample_shape
    }

    fn has_labels(&self) -> bool {
        self.labels.is_some()
    }

    fn source(&self) -> &Path {
        &self.path
    }

    fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
        let raw = self.raw_sample(index).ok_or_else(|| {
            DataError::InvalidArgument(format!(
                "{}: sample {index} out of range (len {})",
                self.path.display(),
                self.len
            ))
        })?;
        out.extend(raw.iter().map(|&p| p as f32 / 255.0));
        Ok(self.label(index))
    }
}

#[cfg(test)]
pub(crate) mod tests;
