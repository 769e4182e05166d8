//! Folders of PNG/JPEG images, labelled by sub-folder or unlabeled.
//!
//! Layout (as torchvision's `ImageFolder`): either one sub-folder per class, whose sorted
//! names give the class ids 0, 1, 2, ..., with the images directly inside; or a flat folder
//! of images without labels. Files are taken in sorted name order; hidden files and files
//! whose extension is not `.png`, `.jpg` or `.jpeg` (any case) are skipped. Images are
//! decoded only when their batch is read.
//!
//! Each image is converted to gray (the `image` crate's sRGB/Rec. 709 luma, 0.2126 R +
//! 0.7152 G + 0.0722 B) or RGB, resized with a triangle (bilinear) filter when a size is
//! given, and each value becomes `(pixel * scale - mean[c]) / std[c]`.

use std::path::{Path, PathBuf};

use crate::dataset::Dataset;
use crate::error::{DataError, Result};

/// Memory layout of one image sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `[C, H, W]` (ONNX's layout; the zoo models take NCHW).
    #[default]
    Nchw,
    /// `[H, W, C]`.
    Nhwc,
}

impl std::str::FromStr for Layout {
    type Err = DataError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "nchw" | "chw" => Ok(Layout::Nchw),
            "nhwc" | "hwc" => Ok(Layout::Nhwc),
            _ => Err(DataError::InvalidArgument(format!(
                "unknown layout {s:?} (expected nchw or nhwc)"
            ))),
        }
    }
}

/// Number of channels images are converted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ColorMode {
    /// One channel (luma).
    #[default]
    Gray,
    /// Three channels, red, green, blue.
    Rgb,
}

impl ColorMode {
    /// Channels per pixel.
    pub fn channels(self) -> usize {
        match self {
            ColorMode::Gray => 1,
            ColorMode::Rgb => 3,
        }
    }
}

impl std::str::FromStr for ColorMode {
    type Err = DataError;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "gray" | "grey" | "l" | "1" => Ok(ColorMode::Gray),
            "rgb" | "3" => Ok(ColorMode::Rgb),
            _ => Err(DataError::InvalidArgument(format!(
                "unknown color mode {s:?} (expected gray or rgb)"
            ))),
        }
    }
}

/// How images become tensors. The default matches the zoo models: gray, NCHW,
/// `pixel / 255`, no mean or std, size of the images themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageOptions {
    /// Resize every image to (height, width); `None`: all images must share one size.
    pub size: Option<(u32, u32)>,
    /// Sample layout.
    pub layout: Layout,
    /// Gray or RGB.
    pub color: ColorMode,
    /// Factor applied to the 0..=255 pixel first.
    pub scale: f32,
    /// Subtracted after scaling: one value for all channels or one per channel.
    pub mean: Vec<f32>,
    /// Divides after subtracting the mean: one value or one per channel.
    pub std: Vec<f32>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            size: None,
            layout: Layout::Nchw,
            color: ColorMode::Gray,
            scale: 1.0 / 255.0,
            mean: vec![0.0],
            std: vec![1.0],
        }
    }
}

impl ImageOptions {
    fn per_channel(&self, v: &[f32], what: &str) -> Result<Vec<f32>> {
        let c = self.color.channels();
        match v.len() {
            1 => Ok(vec![v[0]; c]),
            n if n == c => Ok(v.to_vec()),
            n => Err(DataError::InvalidArgument(format!(
                "{what} has {n} values; expected 1 or {c} (one per channel)"
            ))),
        }
    }
}

/// Parses an image size for the command line: `"28"` (square), `"32x24"` or `"32,24"`
/// (height first, as in NCHW).
pub fn parse_size(s: &str) -> Result<(u32, u32)> {
    let bad = || {
        DataError::InvalidArgument(format!(
            "bad image size {s:?} (expected H, HxW or H,W with positive integers)"
        ))
    };
    let parts: Vec<&str> = s.split(['x', 'X', ',']).map(str::trim).collect();
    let nums: Vec<u32> = parts
        .iter()
        .map(|p| p.parse::<u32>().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    match nums.as_slice() {
        [n] if *n > 0 => Ok((*n, *n)),
        [h, w] if *h > 0 && *w > 0 => Ok((*h, *w)),
        _ => Err(bad()),
    }
}

/// Parses per-channel values for the command line (`"0.485,0.456,0.406"` or `"0.5"`).
pub fn parse_channel_values(s: &str) -> Result<Vec<f32>> {
    s.split(',')
        .map(|v| {
            v.trim()
                .parse::<f32>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| {
                    DataError::InvalidArgument(format!(
                        "bad value {v:?} in {s:?} (expected comma-separated numbers)"
                    ))
                })
        })
        .collect()
}

fn is_image_file(p: &Path) -> bool {
    let hidden = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    !hidden
        && p.is_file()
        && p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg"))
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| DataError::io(dir, e))? {
        v.push(e.map_err(|e| DataError::io(dir, e))?.path());
    }
    v.sort();
    Ok(v)
}

/// An image folder as a data set.
#[derive(Debug, Clone)]
pub struct ImageFolder {
    root: PathBuf,
    files: Vec<PathBuf>,
    labels: Option<Vec<i64>>,
    classes: Vec<String>,
    opts: ImageOptions,
    mean: Vec<f32>,
    std: Vec<f32>,
    size: (u32, u32),
    sample_shape: Vec<usize>,
}

impl ImageFolder {
    /// Lists the folder (no image is decoded except the first, for its size when no size is
    /// given). An empty folder, an empty class folder, or image files mixed with class
    /// folders are errors.
    pub fn open(root: impl AsRef<Path>, opts: &ImageOptions) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let entries = sorted_entries(&root)?;
        let class_dirs: Vec<&PathBuf> = entries
            .iter()
            .filter(|p| {
                p.is_dir()
                    && !p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_none_or(|n| n.starts_with('.'))
            })
            .collect();
        let loose: Vec<PathBuf> = entries
            .iter()
            .filter(|p| is_image_file(p))
            .cloned()
            .collect();
        let (files, labels, classes) = if class_dirs.is_empty() {
            (loose, None, Vec::new())
        } else {
            if !loose.is_empty() {
                return Err(DataError::format(
                    &root,
                    format!(
                        "mixes class sub-folders with {} loose images (e.g. {}); use one or the other",
                        loose.len(),
                        loose[0].display()
                    ),
                ));
            }
            let mut files = Vec::new();
            let mut labels = Vec::new();
            let mut classes = Vec::new();
            for (id, dir) in class_dirs.iter().enumerate() {
                let imgs: Vec<PathBuf> = sorted_entries(dir)?
                    .into_iter()
                    .filter(|p| is_image_file(p))
                    .collect();
                if imgs.is_empty() {
                    return Err(DataError::Empty {
                        path: dir.to_path_buf(),
                        reason: "class folder holds no .png/.jpg/.jpeg images".into(),
                    });
                }
                labels.extend(std::iter::repeat_n(id as i64, imgs.len()));
                files.extend(imgs);
                classes.push(
                    dir.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
            (files, Some(labels), classes)
        };
        if files.is_empty() {
            return Err(DataError::Empty {
                path: root,
                reason: "no .png/.jpg/.jpeg images and no class sub-folders".into(),
            });
        }
        let mean = opts.per_channel(&opts.mean, "mean")?;
        let std = opts.per_channel(&opts.std, "std")?;
        if let Some(i) = std.iter().position(|&s| s == 0.0 || !s.is_finite()) {
            return Err(DataError::InvalidArgument(format!(
                "std[{i}] = {} (must be finite and non-zero)",
                std[i]
            )));
        }
        let size = match opts.size {
            Some((h, w)) if h > 0 && w > 0 => (h, w),
            Some(s) => {
                return Err(DataError::InvalidArgument(format!(
                    "image size {s:?} must be positive"
                )))
            }
            None => {
                let img = decode(&files[0])?;
                (img.height(), img.width())
            }
        };
        let (h, w, c) = (size.0 as usize, size.1 as usize, opts.color.channels());
        let sample_shape = match opts.layout {
            Layout::Nchw => vec![c, h, w],
            Layout::Nhwc => vec![h, w, c],
        };
        Ok(ImageFolder {
            root,
            files,
            labels,
            classes,
            opts: opts.clone(),
            mean,
            std,
            size,
            sample_shape,
        })
    }

    /// Class names (sub-folder names) in id order; empty for an unlabeled folder.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The image files in sample order.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Replaces the labels (e.g. from a label file for a flat folder); one per image, in
    /// [`ImageFolder::files`] order. `labels_path` names their origin in the error.
    pub fn set_labels(&mut self, labels: Vec<i64>, labels_path: &Path) -> Result<()> {
        if labels.len() != self.files.len() {
            return Err(DataError::CountMismatch {
                path: labels_path.to_path_buf(),
                labels: labels.len(),
                samples: self.files.len(),
            });
        }
        self.labels = Some(labels);
        Ok(())
    }
}

/// Decodes an image after checking its dimensions, read from the header, against
/// `Limits::image_pixels` (a 389 KB PNG can declare 20000 × 20000 pixels).
fn decode(path: &Path) -> Result<image::DynamicImage> {
    let open = || {
        image::ImageReader::open(path)
            .map_err(|e| DataError::io(path, e))?
            .with_guessed_format()
            .map_err(|e| DataError::io(path, e))
    };
    let bad = |e: image::ImageError| DataError::format(path, format!("cannot decode image: {e}"));
    check_png_palette(path)?;
    let (w, h) = open()?.into_dimensions().map_err(bad)?;
    let limits = quantkit_core::limits::Limits::current();
    quantkit_core::limits::Limits::check(
        &format!("{} ({w} × {h})", path.display()),
        u64::from(w) * u64::from(h),
        limits.image_pixels,
        "image_pixels",
        "pixels",
    )?;
    let mut reader = open()?;
    // The decoder's own allocation cap as a second line (4 channels of 16 bits).
    let mut caps = image::Limits::default();
    caps.max_alloc = Some(limits.image_pixels.saturating_mul(8));
    reader.limits(caps);
    reader.decode().map_err(bad)
}

/// Refuses a PNG whose `PLTE` chunk is not 1–256 RGB triples, as the PNG specification
/// requires: the `png` crate (0.18.1) indexes past the palette and panics on a length
/// that is not a multiple of 3 (found by the `image` fuzz target). Walks the chunk headers
/// before the first `IDAT` (where `PLTE` must be); other files pass through untouched.
fn check_png_palette(path: &Path) -> Result<()> {
    use std::io::{BufReader, Read};
    const SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";
    let file = std::fs::File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut r = BufReader::new(file);
    let mut head = [0u8; 8];
    if r.read_exact(&mut head).is_err() || &head != SIGNATURE {
        return Ok(()); // not a PNG (or too short to be one): the decoder reports it
    }
    loop {
        if r.read_exact(&mut head).is_err() {
            return Ok(()); // truncated: the decoder reports it
        }
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        match &head[4..8] {
            b"PLTE" if len == 0 || len % 3 != 0 || len > 768 => {
                return Err(DataError::format(
                    path,
                    format!(
                        "cannot decode image: PNG palette (PLTE) of {len} bytes; \
                         it must hold 1 to 256 RGB triples"
                    ),
                ));
            }
            b"IDAT" | b"IEND" => return Ok(()),
            _ => {
                // Skip the chunk's data and its CRC.
                if r.seek_relative(i64::from(len) + 4).is_err() {
                    return Ok(());
                }
            }
        }
    }
}

impl Dataset for ImageFolder {
    fn len(&self) -> usize {
        self.files.len()
    }
    fn sample_shape(&self) -> &[usize] {
        &self.sample_shape
    }
    fn has_labels(&self) -> bool {
        self.labels.is_some()
    }
    fn source(&self) -> &Path {
        &self.root
    }
    fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
        let path = self.files.get(index).ok_or_else(|| {
            DataError::InvalidArgument(format!(
                "{}: sample {index} out of range (len {})",
                self.root.display(),
                self.files.len()
            ))
        })?;
        let img = decode(path)?;
        let (h, w) = self.size;
        if self.opts.size.is_none() && (img.height(), img.width()) != (h, w) {
            return Err(DataError::Shape {
                path: path.clone(),
                got: vec![img.height() as usize, img.width() as usize],
                reason: format!(
                    "images differ in size (the first is {h}x{w}); give a size to resize them"
                ),
            });
        }
        let c = self.opts.color.channels();
        let raw: Vec<u8> = match self.opts.color {
            ColorMode::Gray => {
                let g = img.to_luma8();
                if (g.height(), g.width()) == (h, w) {
                    g.into_raw()
                } else {
                    image::imageops::resize(&g, w, h, image::imageops::FilterType::Triangle)
                        .into_raw()
                }
            }
            ColorMode::Rgb => {
                let g = img.to_rgb8();
                if (g.height(), g.width()) == (h, w) {
                    g.into_raw()
                } else {
                    image::imageops::resize(&g, w, h, image::imageops::FilterType::Triangle)
                        .into_raw()
                }
            }
        };
        let (h, w) = (h as usize, w as usize);
        let scaler = crate::source::Scaler::new(self.opts.scale);
        let norm = |v: u8, ch: usize| (scaler.apply(v as f32) - self.mean[ch]) / self.std[ch];
        // `raw` is HWC, row-major.
        match self.opts.layout {
            Layout::Nhwc => out.extend(raw.iter().enumerate().map(|(i, &v)| norm(v, i % c))),
            Layout::Nchw => {
                for ch in 0..c {
                    out.extend((0..h * w).map(|p| norm(raw[p * c + ch], ch)));
                }
            }
        }
        Ok(self.labels.as_ref().and_then(|l| l.get(index).copied()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_gray(path: &Path, w: u32, h: u32, f: impl Fn(u32, u32) -> u8) {
        image::GrayImage::from_fn(w, h, |x, y| image::Luma([f(x, y)]))
            .save(path)
            .unwrap();
    }

    #[test]
    fn class_folders_give_sorted_ids() {
        let dir = tempfile::tempdir().unwrap();
        for (class, n) in [("cat", 2), ("ant", 1), ("bee", 3)] {
            let d = dir.path().join(class);
            std::fs::create_dir(&d).unwrap();
            for i in 0..n {
                png_gray(&d.join(format!("{i}.png")), 4, 3, |x, y| {
                    (x + 10 * y + i) as u8
                });
            }
            std::fs::write(d.join("notes.txt"), "not an image").unwrap();
        }
        let mut f = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap();
        assert_eq!(f.classes(), &["ant", "bee", "cat"]);
        assert_eq!(f.len(), 6);
        assert_eq!(f.sample_shape(), &[1, 3, 4]);
        let mut out = Vec::new();
        let mut labels = Vec::new();
        f.read_range(0, 6, &mut out, &mut labels).unwrap();
        assert_eq!(labels, vec![0, 1, 1, 1, 2, 2]);
        // bee/2.png: pixel (x=3, y=2) = 3 + 20 + 2.
        let s = &out[3 * 12..4 * 12];
        assert_eq!(s[2 * 4 + 3], 25.0 / 255.0);
    }

    #[test]
    fn flat_folder_rgb_nhwc_normalised_and_resized() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.png");
        image::RgbImage::from_fn(2, 2, |x, y| image::Rgb([10 * x as u8, 100, 200 + y as u8]))
            .save(&p)
            .unwrap();
        let opts = ImageOptions {
            color: ColorMode::Rgb,
            layout: Layout::Nhwc,
            scale: 1.0,
            mean: vec![1.0, 2.0, 3.0],
            std: vec![2.0],
            ..Default::default()
        };
        let mut f = ImageFolder::open(dir.path(), &opts).unwrap();
        assert!(!f.has_labels());
        assert_eq!(f.sample_shape(), &[2, 2, 3]);
        let mut out = Vec::new();
        assert_eq!(f.read_sample(0, &mut out).unwrap(), None);
        // pixel (x=1, y=1) is at HWC offset (1*2+1)*3.
        assert_eq!(
            &out[9..12],
            &[(10.0 - 1.0) / 2.0, (100.0 - 2.0) / 2.0, (201.0 - 3.0) / 2.0]
        );
        // NCHW of the same image: channel planes.
        let opts = ImageOptions {
            layout: Layout::Nchw,
            ..opts
        };
        let mut f = ImageFolder::open(dir.path(), &opts).unwrap();
        let mut chw = Vec::new();
        f.read_sample(0, &mut chw).unwrap();
        assert_eq!(chw[3], (10.0 - 1.0) / 2.0);
        assert_eq!(chw[4 + 3], (100.0 - 2.0) / 2.0);
        assert_eq!(chw[8 + 3], (201.0 - 3.0) / 2.0);
        // Resizing a constant image keeps it constant.
        png_gray(&dir.path().join("b.png"), 5, 7, |_, _| 128);
        let opts = ImageOptions {
            size: Some((3, 2)),
            ..Default::default()
        };
        let mut f = ImageFolder::open(dir.path(), &opts).unwrap();
        assert_eq!(f.sample_shape(), &[1, 3, 2]);
        let mut out = Vec::new();
        f.read_sample(1, &mut out).unwrap();
        assert_eq!(out, vec![128.0 / 255.0; 6]);
    }

    #[test]
    fn command_line_parsers() {
        assert_eq!(parse_size("28").unwrap(), (28, 28));
        assert_eq!(parse_size("32x24").unwrap(), (32, 24));
        assert_eq!(parse_size("32, 24").unwrap(), (32, 24));
        for bad in ["", "0", "3x", "x4", "1x2x3", "-1", "ax2"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_channel_values("0.5").unwrap(), vec![0.5]);
        assert_eq!(parse_channel_values("1, 2,3").unwrap(), vec![1.0, 2.0, 3.0]);
        assert!(parse_channel_values("1,,2").is_err());
        assert!(parse_channel_values("nan").is_err());
        assert_eq!("NHWC".parse::<Layout>().unwrap(), Layout::Nhwc);
        assert_eq!("rgb".parse::<ColorMode>().unwrap(), ColorMode::Rgb);
        assert!("nwhc".parse::<Layout>().is_err());
    }

    #[test]
    fn jpeg_is_read() {
        let dir = tempfile::tempdir().unwrap();
        image::GrayImage::from_fn(8, 8, |_, _| image::Luma([77]))
            .save(dir.path().join("x.JPG"))
            .unwrap();
        let mut f = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap();
        let mut out = Vec::new();
        f.read_sample(0, &mut out).unwrap();
        // JPEG is lossy, but a flat block survives within a level or two.
        assert!(
            out.iter().all(|&v| (v * 255.0 - 77.0).abs() <= 2.0),
            "{out:?}"
        );
    }

    #[test]
    fn empty_and_bad_folders_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap_err();
        assert!(matches!(err, DataError::Empty { .. }), "{err:?}");
        assert!(err.to_string().contains(&dir.path().display().to_string()));
        // Only non-image files.
        std::fs::write(dir.path().join("readme.txt"), "x").unwrap();
        assert!(matches!(
            ImageFolder::open(dir.path(), &ImageOptions::default()),
            Err(DataError::Empty { .. })
        ));
        // An empty class folder is named.
        std::fs::create_dir(dir.path().join("zebra")).unwrap();
        let err = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap_err();
        assert!(err.to_string().contains("zebra"), "{err}");
        // Loose images next to class folders.
        png_gray(&dir.path().join("zebra/1.png"), 2, 2, |_, _| 0);
        png_gray(&dir.path().join("loose.png"), 2, 2, |_, _| 0);
        let err = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap_err();
        assert!(err.to_string().contains("loose"), "{err}");
        // Missing folder.
        assert!(matches!(
            ImageFolder::open(dir.path().join("nope"), &ImageOptions::default()),
            Err(DataError::Io { .. })
        ));
    }

    #[test]
    fn png_with_a_ragged_palette_is_an_error_not_a_panic() {
        // The `image` fuzz target's crash (fuzz/seeds/image/regress-plte-53.png, CRCs
        // re-sealed: fuzz builds of `png` skip the CRC check): a 5 × 4 4-bit palette PNG
        // whose PLTE holds 53 bytes (17 triples and 2 bytes).
        let dir = tempfile::tempdir().unwrap();
        let bytes = include_bytes!("../../../fuzz/seeds/image/regress-plte-53.png");
        std::fs::write(dir.path().join("a.png"), bytes).unwrap();
        // `open` probes the first image's size, so the error comes from there.
        let err = ImageFolder::open(dir.path(), &ImageOptions::default())
            .and_then(|mut f| f.read_sample(0, &mut Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("a.png") && err.contains("PLTE"), "{err}");
        // The same picture with its palette cut to 51 bytes decodes.
        let mut fixed = bytes.to_vec();
        fixed[33..37].copy_from_slice(&51u32.to_be_bytes());
        fixed.drain(41 + 51..41 + 53);
        let crc = crc32(&fixed[37..41 + 51]);
        fixed[41 + 51..41 + 55].copy_from_slice(&crc.to_be_bytes());
        std::fs::write(dir.path().join("a.png"), &fixed).unwrap();
        let mut folder = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap();
        let mut out = Vec::new();
        folder.read_sample(0, &mut out).unwrap();
        assert_eq!(out.len(), 5 * 4);
    }

    /// CRC-32 (PNG's polynomial), bit by bit: for re-sealing an edited test chunk.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn corrupt_and_mismatched_images_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        png_gray(&dir.path().join("a.png"), 2, 2, |_, _| 0);
        png_gray(&dir.path().join("b.png"), 3, 2, |_, _| 0);
        std::fs::write(dir.path().join("c.png"), b"\x89PNG\r\n\x1a\ntruncated").unwrap();
        let mut f = ImageFolder::open(dir.path(), &ImageOptions::default()).unwrap();
        let mut out = Vec::new();
        f.read_sample(0, &mut out).unwrap();
        let err = f.read_sample(1, &mut out).unwrap_err();
        assert!(
            err.to_string().contains("b.png") && err.to_string().contains("size"),
            "{err}"
        );
        let err = f.read_sample(2, &mut out).unwrap_err();
        assert!(err.to_string().contains("c.png"), "{err}");
        let bad = ImageOptions {
            color: ColorMode::Rgb,
            mean: vec![0.0, 0.0],
            ..Default::default()
        };
        assert!(matches!(
            ImageFolder::open(dir.path(), &bad),
            Err(DataError::InvalidArgument(_))
        ));
        let bad = ImageOptions {
            std: vec![0.0],
            ..Default::default()
        };
        assert!(ImageFolder::open(dir.path(), &bad).is_err());
    }
}
