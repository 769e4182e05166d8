//! Feeding every input of a model from one `.npz` whose array names are the model's input
//! names ([`NamedFeeds`]).
//!
//! Two layouts, chosen by the names (documented for users in `docs/data.md`):
//!
//! - **Stacked** — an array `NAME` per input holds all samples stacked on the input's batch
//!   axis (the first dimension the model does not fix; axis 0 when the model declares no
//!   shape). The runs are cut from it `batch_size` samples at a time, read from disk per run
//!   (a member is streamed once into a temporary `.npy` file, deflated or not, and read by
//!   offset from there, so memory holds one run, never the archive). Every stacked array
//!   must hold the same number of samples.
//! - **Per run** — arrays `NAME__0`, `NAME__1`, ... hold exactly the feed of run K, so runs
//!   may differ in shape (token sequences of different lengths). Every per-run input has the
//!   same number of runs, numbered from 0 without gaps.
//!
//! In both layouts an array whose shape has no batch axis to split — every dimension fixed
//! by the model (a fixed-batch state) or a scalar (a sample rate) — is fed unchanged to
//! every run, and in the per-run layout so is any plain `NAME` array.
//!
//! Types: an input the model declares float32 takes any numeric array, converted to f32
//! and scaled as a single-input `.npz` is ([`crate::source::default_scale`]: u8 → 1/255,
//! or the caller's scale); every other declared type (int64 token ids, int32 bytes, bool
//! masks, ...) takes exactly that dtype and is passed through unchanged, never converted
//! or scaled. A missing input, an unknown array name (a typo would silently calibrate on
//! nothing), a wrong dtype, rank or dimension, and arrays that disagree on the number of
//! samples or runs are errors naming the input and the archive member.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{DataError, Result};
use crate::npy::zip_err;
use crate::npy::{read_npy_bytes, DType, NpyArray, NpyData, NpyFile};
use crate::source::{apply_scale, default_scale};

/// What a model declares about one input, as far as feeding it is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// The input's name (the array name in the `.npz`).
    pub name: String,
    /// Declared element type; `None` when the model does not say (the array's type is fed).
    pub dtype: Option<DType>,
    /// Declared dimensions, `Some(n)` fixed and `None` symbolic or unknown; `None` for an
    /// unknown rank.
    pub dims: Option<Vec<Option<usize>>>,
}

impl InputSpec {
    fn describe(&self) -> String {
        let t = self.dtype.map_or("?", dtype_name);
        match &self.dims {
            None => format!("{t}[?]"),
            Some(d) => format!(
                "{t}[{}]",
                d.iter()
                    .map(|x| x.map_or("?".to_string(), |n| n.to_string()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// NumPy's name of a dtype (`int64`, `float32`, ...), for messages.
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::U16 => "uint16",
        DType::I16 => "int16",
        DType::U32 => "uint32",
        DType::I32 => "int32",
        DType::U64 => "uint64",
        DType::I64 => "int64",
        DType::F16 => "float16",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// One executor call's inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// One array per model input, in the order of the [`InputSpec`]s.
    pub arrays: Vec<(String, NpyArray)>,
    /// Samples in this run (the batch-axis extent of the batched inputs; 1 when every input
    /// is fed unchanged).
    pub samples: usize,
}

/// How an array of a given shape fits an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// Fed unchanged to every run.
    Whole,
    /// `n` samples on `axis`; `chunk` is the model's fixed batch size when the model fixes
    /// every dimension and the array stacks several of its batches on axis 0.
    Batched {
        axis: usize,
        n: usize,
        chunk: Option<usize>,
    },
}

/// A temporary file removed when dropped.
#[derive(Debug)]
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A stacked array read per run from its extracted copy.
#[derive(Debug)]
struct Stacked {
    file: NpyFile,
    _tmp: TempFile,
    shape: Vec<usize>,
    axis: usize,
}

#[derive(Debug)]
enum Source {
    /// Read once, fed to every run.
    Whole(NpyArray),
    /// Cut into runs on its batch axis.
    Stacked(Stacked),
    /// One archive member per run (zip indices).
    PerRun(Vec<usize>),
}

#[derive(Debug)]
struct Slot {
    spec: InputSpec,
    source: Source,
}

/// The layout found in the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `NAME` arrays stacking `samples` samples (0 when every input is fed unchanged:
    /// then there is one run); `chunk` is a batch size the model fixes.
    Stacked {
        /// Samples on the batch axis of every stacked array.
        samples: usize,
        /// The model's fixed batch size, which overrides the caller's.
        chunk: Option<usize>,
    },
    /// `NAME__K` arrays, one feed per run.
    PerRun {
        /// Number of runs.
        runs: usize,
    },
}

/// An `.npz` feeding every model input by name (see the module docs for the layouts).
#[derive(Debug)]
pub struct NamedFeeds {
    path: PathBuf,
    archive: zip::ZipArchive<File>,
    slots: Vec<Slot>,
    layout: Layout,
    scale: Option<f32>,
}

fn member_path(path: &Path, name: &str) -> PathBuf {
    PathBuf::from(format!("{}:{name}.npy", path.display()))
}

/// Splits `NAME__K` into `(NAME, K)`.
fn per_run_name(name: &str) -> Option<(&str, usize)> {
    let (base, k) = name.rsplit_once("__")?;
    if base.is_empty() || k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if k.len() > 1 && k.starts_with('0') {
        return None;
    }
    Some((base, k.parse().ok()?))
}

/// Checks an array's dtype against the input.
fn check_dtype(spec: &InputSpec, member: &Path, got: DType) -> Result<()> {
    match spec.dtype {
        None | Some(DType::F32) => Ok(()),
        Some(want) if want == got => Ok(()),
        Some(want) => Err(DataError::Shape {
            path: member.to_path_buf(),
            got: vec![],
            reason: format!(
                "input `{}` is {}, the array is {} (integer and bool inputs are fed with \
                 their own dtype, never converted: write the array as {})",
                spec.name,
                dtype_name(want),
                dtype_name(got),
                dtype_name(want)
            ),
        }),
    }
}

/// How an array of `shape` fits the input, or why it does not.
fn fit(spec: &InputSpec, member: &Path, shape: &[usize], allow_chunks: bool) -> Result<Fit> {
    let bad = |why: String| DataError::Shape {
        path: member.to_path_buf(),
        got: shape.to_vec(),
        reason: format!("input `{}` is {}: {why}", spec.name, spec.describe()),
    };
    let Some(dims) = &spec.dims else {
        return Ok(match shape.first() {
            None => Fit::Whole,
            Some(&n) => Fit::Batched {
                axis: 0,
                n,
                chunk: None,
            },
        });
    };
    if dims.len() != shape.len() {
        return Err(bad(format!(
            "rank {} against the model's rank {}",
            shape.len(),
            dims.len()
        )));
    }
    let axis = dims.iter().position(|d| d.is_none());
    for (i, (d, &n)) in dims.iter().zip(shape).enumerate() {
        if let Some(k) = d {
            if *k != n && !(axis.is_none() && i == 0) {
                return Err(bad(format!("axis {i} is {n}, the model fixes it to {k}")));
            }
        }
    }
    match axis {
        Some(axis) => Ok(Fit::Batched {
            axis,
            n: shape[axis],
            chunk: None,
        }),
        // Every dimension fixed (a scalar has none): fed whole when axis 0 matches too.
        None if shape.first() == dims.first().and_then(|d| d.as_ref()) => Ok(Fit::Whole),
        None => {
            // Every dimension fixed, axis 0 differs: several of the model's batches stacked.
            let m = dims[0].unwrap_or(0);
            if allow_chunks && m > 0 && shape[0].is_multiple_of(m) {
                Ok(Fit::Batched {
                    axis: 0,
                    n: shape[0],
                    chunk: Some(m),
                })
            } else {
                Err(bad(format!(
                    "axis 0 is {}, the model fixes it to {m}{}",
                    shape[0],
                    if allow_chunks {
                        " (stacked batches must be a multiple of it)"
                    } else {
                        ""
                    }
                )))
            }
        }
    }
}

/// Makes the array what the input is fed: f32 (scaled) for a float32 input, unchanged
/// otherwise (its dtype was checked).
fn admit(spec: &InputSpec, a: NpyArray, scale: Option<f32>) -> Result<NpyArray> {
    if spec.dtype != Some(DType::F32) {
        return Ok(a);
    }
    let s = scale.unwrap_or_else(|| default_scale(a.dtype()));
    if a.dtype() == DType::F32 && s == 1.0 {
        return Ok(a);
    }
    let mut v = a.data.to_f32();
    apply_scale(&mut v, s);
    NpyArray::new(a.shape, NpyData::F32(v))
}

/// Where extracted members go: the system temporary folder, a name nobody else uses.
fn temp_path() -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    std::env::temp_dir().join(format!(
        "quantkit-feed-{}-{nanos}-{}.npy",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

impl NamedFeeds {
    /// Opens `path` for the model inputs `specs` when the archive names them: `Ok(None)`
    /// when no array is named after an input (the caller then reads the archive as before,
    /// one batch per array or an `images`/`labels` pair). `scale` multiplies the values of
    /// float32 inputs (`None`: 1/255 for u8 arrays, else 1).
    pub fn open(
        path: impl AsRef<Path>,
        specs: &[InputSpec],
        scale: Option<f32>,
    ) -> Result<Option<Self>> {
        let path = path.as_ref().to_path_buf();
        // Member names (without `.npy`) and zip indices.
        let (mut archive, members) = crate::npy::open_npz(&path)?;
        let known: HashMap<&str, usize> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut plain: HashMap<usize, usize> = HashMap::new();
        let mut runs: HashMap<usize, BTreeMap<usize, usize>> = HashMap::new();
        let mut unknown = Vec::new();
        for (name, zi) in &members {
            if let Some(&i) = known.get(name.as_str()) {
                plain.insert(i, *zi);
            } else if let Some(i) =
                per_run_name(name).and_then(|(base, k)| known.get(base).map(|&i| (i, k)))
            {
                runs.entry(i.0).or_default().insert(i.1, *zi);
            } else {
                unknown.push(name.clone());
            }
        }
        if plain.is_empty() && runs.is_empty() {
            return Ok(None);
        }
        let inputs = || {
            specs
                .iter()
                .map(|s| format!("`{}` {}", s.name, s.describe()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !unknown.is_empty() {
            return Err(DataError::format(
                &path,
                format!(
                    "array(s) {} name no model input; the model's inputs are {} (arrays are \
                     named NAME, or NAME__0, NAME__1... for one feed per run)",
                    unknown
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    inputs()
                ),
            ));
        }
        let mut n_runs: Option<(usize, &str)> = None;
        for (i, spec) in specs.iter().enumerate() {
            match (plain.contains_key(&i), runs.get(&i)) {
                (false, None) => {
                    return Err(DataError::format(
                        &path,
                        format!(
                            "no array for input `{}` {}; the model's inputs are {}",
                            spec.name,
                            spec.describe(),
                            inputs()
                        ),
                    ))
                }
                (true, Some(_)) => {
                    return Err(DataError::format(
                        &path,
                        format!(
                            "input `{0}` has both an array `{0}` and per-run arrays `{0}__K`; \
                             give one or the other",
                            spec.name
                        ),
                    ))
                }
                (false, Some(ks)) => {
                    let r = ks.len();
                    if ks.keys().next_back() != Some(&(r - 1)) {
                        let missing = (0..r).find(|k| !ks.contains_key(k)).unwrap_or(r);
                        return Err(DataError::format(
                            &path,
                            format!(
                                "per-run arrays of input `{}` skip `{}__{missing}` (runs are \
                                 numbered 0, 1, ... without gaps)",
                                spec.name, spec.name
                            ),
                        ));
                    }
                    match n_runs {
                        Some((m, other)) if m != r => {
                            return Err(DataError::format(
                                &path,
                                format!(
                                    "inputs disagree on the number of runs: `{other}` has {m} \
                                     per-run arrays, `{}` has {r}",
                                    spec.name
                                ),
                            ))
                        }
                        _ => n_runs = Some((r, spec.name.as_str())),
                    }
                }
                (true, None) => {}
            }
        }
        let mut slots = Vec::with_capacity(specs.len());
        let mut stacked_n: Option<(usize, String)> = None;
        let mut chunk: Option<(usize, String)> = None;
        for (i, spec) in specs.iter().enumerate() {
            if let Some(ks) = runs.get(&i) {
                slots.push(Slot {
                    spec: spec.clone(),
                    source: Source::PerRun(ks.values().copied().collect()),
                });
                continue;
            }
            let zi = plain[&i];
            let member = member_path(&path, &spec.name);
            let source = if n_runs.is_some() {
                // Per-run layout: a plain array is fed unchanged to every run.
                let a = read_member(&mut archive, zi, &member)?;
                check_dtype(spec, &member, a.dtype())?;
                fit(spec, &member, &a.shape, false)?;
                Source::Whole(admit(spec, a, scale)?)
            } else {
                let (file, tmp) = extract(&mut archive, zi, &member)?;
                let h = file.header().clone();
                check_dtype(spec, &member, h.dtype)?;
                match fit(spec, &member, &h.shape, true)? {
                    Fit::Whole => {
                        let mut file = file;
                        let data = file.read_elements(0, h.numel())?;
                        drop(tmp);
                        Source::Whole(admit(spec, NpyArray::new(h.shape, data)?, scale)?)
                    }
                    Fit::Batched { axis, n, chunk: c } => {
                        if n == 0 {
                            return Err(DataError::Empty {
                                path: member,
                                reason: format!("input `{}`: no samples", spec.name),
                            });
                        }
                        match &stacked_n {
                            Some((m, other)) if *m != n => {
                                return Err(DataError::format(
                                    &path,
                                    format!(
                                        "arrays disagree on the number of samples: `{other}` \
                                         stacks {m}, `{}` stacks {n}",
                                        spec.name
                                    ),
                                ))
                            }
                            _ => stacked_n = Some((n, spec.name.clone())),
                        }
                        if let Some(c) = c {
                            match &chunk {
                                Some((m, other)) if *m != c => {
                                    return Err(DataError::format(
                                        &path,
                                        format!(
                                            "inputs fix different batch sizes: `{other}` {m}, \
                                             `{}` {c}",
                                            spec.name
                                        ),
                                    ))
                                }
                                _ => chunk = Some((c, spec.name.clone())),
                            }
                        }
                        Source::Stacked(Stacked {
                            file,
                            _tmp: tmp,
                            shape: h.shape,
                            axis,
                        })
                    }
                }
            };
            slots.push(Slot {
                spec: spec.clone(),
                source,
            });
        }
        let layout = match n_runs {
            Some((runs, _)) => Layout::PerRun { runs },
            None => Layout::Stacked {
                samples: stacked_n.map_or(0, |(n, _)| n),
                chunk: chunk.map(|(c, _)| c),
            },
        };
        Ok(Some(NamedFeeds {
            path,
            archive,
            slots,
            layout,
            scale,
        }))
    }

    /// The archive.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The layout found.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Samples (stacked layout; 1 when every input is fed unchanged) or runs (per-run
    /// layout) — what `limit` counts in [`NamedFeeds::runs`].
    pub fn len(&self) -> usize {
        match self.layout {
            Layout::Stacked { samples, .. } => samples.max(1),
            Layout::PerRun { runs } => runs,
        }
    }

    /// Never true after a successful open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The runs: `(first, count)` sample ranges for the stacked layout (`batch_size`
    /// samples each unless the model fixes its batch size), run indices for the per-run
    /// layout. `limit` counts samples (stacked) or runs (per run).
    fn plan(&self, batch_size: usize, limit: Option<usize>) -> Result<Vec<(usize, usize)>> {
        if batch_size == 0 {
            return Err(DataError::InvalidArgument("batch size 0".into()));
        }
        Ok(match self.layout {
            Layout::PerRun { runs } => (0..limit.map_or(runs, |l| l.min(runs)))
                .map(|k| (k, 1))
                .collect(),
            Layout::Stacked { samples: 0, .. } => vec![(0, 0)],
            Layout::Stacked { samples, chunk } => {
                let total = limit.map_or(samples, |l| l.min(samples));
                let b = chunk.unwrap_or(batch_size);
                // A fixed batch size takes whole batches only.
                let total = if chunk.is_some() {
                    total - total % b
                } else {
                    total
                };
                (0..total.div_ceil(b))
                    .map(|k| (k * b, b.min(total - k * b)))
                    .collect()
            }
        })
    }

    /// Number of runs [`NamedFeeds::runs`] yields with these options.
    pub fn run_count(&self, batch_size: usize, limit: Option<usize>) -> Result<usize> {
        Ok(self.plan(batch_size, limit)?.len())
    }

    /// One pass over the runs, each read when it is reached.
    pub fn runs(
        &mut self,
        batch_size: usize,
        limit: Option<usize>,
    ) -> Result<impl Iterator<Item = Result<Run>> + '_> {
        let plan = self.plan(batch_size, limit)?;
        Ok(plan.into_iter().map(move |(a, b)| self.read_run(a, b)))
    }

    /// One run per group of sample indices (stacked layout): the samples of a group, in
    /// the order given, on the batch axis of every stacked array (inputs fed unchanged are
    /// fed to every run). Lets a caller split samples of one file into interleaved sets
    /// (`quantize --target` holds out every k-th sample). Errors on the per-run layout, on
    /// an index beyond the samples, and on a group whose size is not the batch size the
    /// model fixes.
    pub fn runs_of(
        &mut self,
        groups: Vec<Vec<usize>>,
    ) -> Result<impl Iterator<Item = Result<Run>> + '_> {
        let (samples, chunk) = match self.layout {
            Layout::Stacked { samples, chunk } if samples > 0 => (samples, chunk),
            _ => {
                return Err(DataError::InvalidArgument(format!(
                    "{}: samples can be picked one by one only from arrays stacking them on a \
                     batch axis",
                    self.path.display()
                )))
            }
        };
        for g in &groups {
            if let Some(&i) = g.iter().find(|&&i| i >= samples) {
                return Err(DataError::InvalidArgument(format!(
                    "{}: sample {i} of {samples}",
                    self.path.display()
                )));
            }
            if g.is_empty() || chunk.is_some_and(|c| c != g.len()) {
                return Err(DataError::InvalidArgument(format!(
                    "{}: a run of {} samples (the model takes batches of {})",
                    self.path.display(),
                    g.len(),
                    chunk.map_or("at least 1".into(), |c| c.to_string())
                )));
            }
        }
        Ok(groups.into_iter().map(move |g| self.read_rows(&g)))
    }

    /// Reads the samples `rows` (stacked layout).
    fn read_rows(&mut self, rows: &[usize]) -> Result<Run> {
        let mut arrays = Vec::with_capacity(self.slots.len());
        for slot in &mut self.slots {
            let a = match &mut slot.source {
                Source::Whole(a) => a.clone(),
                Source::Stacked(s) => admit(&slot.spec, read_stacked_rows(s, rows)?, self.scale)?,
                Source::PerRun(_) => {
                    return Err(DataError::InvalidArgument(
                        "per-run arrays have no samples to pick".into(),
                    ))
                }
            };
            arrays.push((slot.spec.name.clone(), a));
        }
        Ok(Run {
            arrays,
            samples: rows.len(),
        })
    }

    /// Reads run `(first, count)` of the plan.
    fn read_run(&mut self, first: usize, count: usize) -> Result<Run> {
        let mut arrays = Vec::with_capacity(self.slots.len());
        let mut samples: Option<(usize, String)> = None;
        for slot in &mut self.slots {
            let spec = &slot.spec;
            let a = match &mut slot.source {
                Source::Whole(a) => a.clone(),
                Source::Stacked(s) => {
                    let a = read_stacked(s, first, count)?;
                    samples = Some((count, spec.name.clone()));
                    admit(spec, a, self.scale)?
                }
                Source::PerRun(zis) => {
                    let name = format!("{}__{first}", spec.name);
                    let member = member_path(&self.path, &name);
                    let a = read_member(&mut self.archive, zis[first], &member)?;
                    check_dtype(spec, &member, a.dtype())?;
                    if let Fit::Batched { n, .. } = fit(spec, &member, &a.shape, false)? {
                        match &samples {
                            Some((m, other)) if *m != n => {
                                return Err(DataError::format(
                                    &self.path,
                                    format!(
                                        "run {first}: arrays disagree on the number of \
                                         samples: `{other}` has {m}, `{name}` has {n}"
                                    ),
                                ))
                            }
                            _ => samples = Some((n, name)),
                        }
                    }
                    admit(spec, a, self.scale)?
                }
            };
            arrays.push((spec.name.clone(), a));
        }
        Ok(Run {
            arrays,
            samples: samples.map_or(1, |(n, _)| n),
        })
    }
}

/// Reads a whole member.
fn read_member(archive: &mut zip::ZipArchive<File>, zi: usize, member: &Path) -> Result<NpyArray> {
    let mut entry = archive.by_index(zi).map_err(|e| zip_err(member, e))?;
    let mut bytes = Vec::with_capacity(entry.size().min(1 << 26) as usize);
    entry
        .read_to_end(&mut bytes)
        .map_err(|e| DataError::io(member, e))?;
    read_npy_bytes(member, &bytes)
}

/// Streams a member into a temporary `.npy` file and opens it for reads by offset.
fn extract(
    archive: &mut zip::ZipArchive<File>,
    zi: usize,
    member: &Path,
) -> Result<(NpyFile, TempFile)> {
    let mut entry = archive.by_index(zi).map_err(|e| zip_err(member, e))?;
    let tmp = TempFile(temp_path());
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp.0)
        .map_err(|e| DataError::io(&tmp.0, e))?;
    std::io::copy(&mut entry, &mut out).map_err(|e| DataError::io(member, e))?;
    drop(out);
    // Errors name the archive member, not the temporary copy.
    let file = NpyFile::open(&tmp.0).map_err(|e| {
        DataError::format(
            member,
            e.to_string().replace(&tmp.0.display().to_string(), ""),
        )
    })?;
    Ok((file, tmp))
}

/// Samples `rows` (in that order) on the batch axis of a stacked array.
fn read_stacked_rows(s: &mut Stacked, rows: &[usize]) -> Result<NpyArray> {
    let outer: usize = s.shape[..s.axis].iter().product();
    let n = s.shape[s.axis];
    let inner: usize = s.shape[s.axis + 1..].iter().product();
    let mut data: Option<NpyData> = None;
    for o in 0..outer {
        for &r in rows {
            let part = s.file.read_elements((o * n + r) * inner, inner)?;
            match &mut data {
                None => data = Some(part),
                Some(d) => d.append(part)?,
            }
        }
    }
    let mut shape = s.shape.clone();
    shape[s.axis] = rows.len();
    let data = data.unwrap_or_else(|| s.file.header().dtype.empty());
    NpyArray::new(shape, data)
}

/// Samples `first..first + count` on the batch axis of a stacked array.
fn read_stacked(s: &mut Stacked, first: usize, count: usize) -> Result<NpyArray> {
    let outer: usize = s.shape[..s.axis].iter().product();
    let n = s.shape[s.axis];
    let inner: usize = s.shape[s.axis + 1..].iter().product();
    let mut data: Option<NpyData> = None;
    for o in 0..outer {
        let part = s
            .file
            .read_elements((o * n + first) * inner, count * inner)?;
        match &mut data {
            None => data = Some(part),
            Some(d) => d.append(part)?,
        }
    }
    let mut shape = s.shape.clone();
    shape[s.axis] = count;
    let data = data.unwrap_or_else(|| s.file.header().dtype.empty());
    NpyArray::new(shape, data)
}

#[cfg(test)]
mod tests;
