//! Seeded input augmentation for training, above all for label-free distillation.
//!
//! Distillation needs no labels — the float teacher labels whatever input it is shown — so
//! a small calibration set can be multiplied by transforming its images: mirrored, shifted
//! by a few pixels, scaled slightly, with brightness, contrast and noise jitter. Each time a
//! sample is drawn it gets a fresh transform, so every epoch sees new views of the same
//! images. The caller computes the teacher's outputs on the *augmented* batch (the student
//! and the teacher see the same input) and keeps the labels as they are (the transforms a
//! user picks must not change the class: a mirrored face is still a face; a mirrored text
//! line is not upright text).
//!
//! Every random number comes from [`crate::rng::Rng`] seeded by the batch seed and the
//! sample's position in the batch, so a run is reproducible for a seed
//! ([`batch_seed`] mixes the run's seed, the epoch and the step).
//!
//! The transform of one sample, with `u(a, b)` uniform:
//!
//! - **geometry** (images only): scale `k = u(1 − scale, 1 + scale)` about the image centre,
//!   shift `(dy, dx)`, each `u(−shift, shift)` pixels, and with probability 1/2 a mirror of
//!   the flip axis. Output pixel `(y, x)` reads the input at
//!   `((y − c_y)/k + c_y − dy, (x − c_x)/k + c_x − dx)` (mirrored: `W − 1 − x'`) by bilinear
//!   interpolation, coordinates clamped to the border (edge pixels repeat);
//! - **photometric**, in units of the sample's own mean `μ` and standard deviation `σ` (so
//!   the same numbers mean the same for inputs in `[0, 1]` and in `[−1, 1]`):
//!   `x ← μ + c·(x − μ) + b·σ + n·σ·N(0, 1)` with `c = u(1 − contrast, 1 + contrast)`,
//!   `b = u(−brightness, brightness)`, `n = noise`; then clamped to the value range of the
//!   batch it came from, so the calibrated input quantization still covers it.
//!
//! With `p < 1` a sample is left untouched with probability `1 − p`.

use quantkit_graph::Tensor;

use crate::error::{Result, TrainError};
use crate::rng::Rng;

/// Where the spatial and channel axes of an image batch are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Decided from the shape: rank 4 with a last axis of at most 4 and an axis 1 of more
    /// than 4 is NHWC, other rank 4 NCHW, rank 3 `[N, H, W]`; rank 2 has no image axes.
    Auto,
    /// `[N, C, H, W]`.
    Nchw,
    /// `[N, H, W, C]` (also MTCNN's `[N, W, H, C]`: the geometry is symmetric in the two
    /// spatial axes, and `flip=AXIS` names the axis to mirror).
    Nhwc,
}

/// What to do to each training sample (all zero: nothing).
#[derive(Clone, Debug, PartialEq)]
pub struct Augment {
    /// Mirror this axis of the batch tensor (counting the batch axis as 0) with probability
    /// 1/2; `Some(None)`: the width axis of the layout (the last spatial one).
    pub flip: Option<Option<usize>>,
    /// Largest shift in pixels along each spatial axis.
    pub shift: f32,
    /// Scale jitter: the factor is uniform in `[1 − scale, 1 + scale]`.
    pub scale: f32,
    /// Brightness offset, uniform in `±brightness` standard deviations of the sample.
    pub brightness: f32,
    /// Contrast factor, uniform in `[1 − contrast, 1 + contrast]`.
    pub contrast: f32,
    /// Standard deviation of added Gaussian noise, in standard deviations of the sample.
    pub noise: f32,
    /// Probability that a sample is transformed at all.
    pub p: f32,
    /// Axis layout of the batch.
    pub layout: Layout,
}

impl Default for Augment {
    fn default() -> Self {
        Augment {
            flip: None,
            shift: 0.0,
            scale: 0.0,
            brightness: 0.0,
            contrast: 0.0,
            noise: 0.0,
            p: 1.0,
            layout: Layout::Auto,
        }
    }
}

/// What `--augment default` means.
pub const DEFAULT: &str = "flip,shift=2,scale=0.1,brightness=0.1,contrast=0.1,noise=0.02";

fn bad(msg: String) -> TrainError {
    TrainError::Graph(msg)
}

/// The seed of one batch's transforms: the run's seed, the epoch and the step mixed by
/// SplitMix64's finaliser, so neighbouring steps get unrelated streams.
pub fn batch_seed(seed: u64, epoch: usize, step: usize) -> u64 {
    let mut z = seed
        ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (step as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The image geometry of one batch: spatial sizes and how to index a value.
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    nhwc: bool,
}

impl Geometry {
    fn index(&self, ch: usize, y: usize, x: usize) -> usize {
        if self.nhwc {
            (y * self.w + x) * self.c + ch
        } else {
            (ch * self.h + y) * self.w + x
        }
    }
}

impl Augment {
    /// Parses `flip[=AXIS],shift=PX,scale=F,brightness=F,contrast=F,noise=F,p=F,layout=nchw|nhwc`
    /// (any subset, comma-separated). `default` stands for [`DEFAULT`], and may be followed
    /// by items that override it (`default,p=0.5`).
    pub fn parse(spec: &str) -> Result<Augment> {
        // `default` may stand among other items (`default,p=0.5`); later items override.
        let spec: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .flat_map(|s| {
                if s == "default" {
                    DEFAULT.split(',').collect()
                } else {
                    vec![s]
                }
            })
            .filter(|s| !s.is_empty())
            .collect();
        let mut a = Augment::default();
        for part in spec {
            let (k, v) = match part.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (part, None),
            };
            let num = |name: &str, lo: f32, hi: f32| -> Result<f32> {
                let v = v.ok_or_else(|| bad(format!("--augment: `{name}` needs a value")))?;
                v.parse::<f32>()
                    .ok()
                    .filter(|x| x.is_finite() && (lo..=hi).contains(x))
                    .ok_or_else(|| {
                        bad(format!(
                            "--augment {name}={v}: expected a number in [{lo}, {hi}]"
                        ))
                    })
            };
            match k {
                "flip" => {
                    a.flip = Some(match v {
                        None => None,
                        Some(s) => Some(s.parse::<usize>().ok().filter(|&ax| ax >= 1).ok_or_else(
                            || bad(format!("--augment flip={s}: expected a tensor axis >= 1")),
                        )?),
                    })
                }
                "shift" => a.shift = num("shift", 0.0, 64.0)?,
                "scale" => a.scale = num("scale", 0.0, 0.5)?,
                "brightness" => a.brightness = num("brightness", 0.0, 4.0)?,
                "contrast" => a.contrast = num("contrast", 0.0, 0.9)?,
                "noise" => a.noise = num("noise", 0.0, 4.0)?,
                "p" => a.p = num("p", 0.0, 1.0)?,
                "layout" => {
                    a.layout = match v {
                        Some("nchw") => Layout::Nchw,
                        Some("nhwc") => Layout::Nhwc,
                        Some("auto") => Layout::Auto,
                        other => {
                            return Err(bad(format!(
                                "--augment layout={}: expected nchw, nhwc or auto",
                                other.unwrap_or("")
                            )))
                        }
                    }
                }
                other => {
                    return Err(bad(format!(
                        "--augment: unknown transform `{other}` (expected flip, shift, scale, \
                         brightness, contrast, noise, p, layout or `default`)"
                    )))
                }
            }
        }
        Ok(a)
    }

    /// True when some transform moves pixels (flip, shift or scale).
    fn geometric(&self) -> bool {
        self.flip.is_some() || self.shift > 0.0 || self.scale > 0.0
    }

    /// The image axes of a batch of `shape`, or an error when a geometric transform was
    /// asked of a batch that has none.
    fn geometry(&self, shape: &[usize]) -> Result<Option<(Geometry, usize)>> {
        let n = shape.first().copied().unwrap_or(0);
        let g = match (shape.len(), self.layout) {
            (3, _) => Some(Geometry {
                n,
                c: 1,
                h: shape[1],
                w: shape[2],
                nhwc: false,
            }),
            (4, l) => {
                let nhwc = match l {
                    Layout::Nhwc => true,
                    Layout::Nchw => false,
                    Layout::Auto => shape[3] <= 4 && shape[1] > 4,
                };
                Some(if nhwc {
                    Geometry {
                        n,
                        c: shape[3],
                        h: shape[1],
                        w: shape[2],
                        nhwc,
                    }
                } else {
                    Geometry {
                        n,
                        c: shape[1],
                        h: shape[2],
                        w: shape[3],
                        nhwc,
                    }
                })
            }
            _ => None,
        };
        let Some(g) = g else {
            if self.geometric() {
                return Err(bad(format!(
                    "--augment: flip, shift and scale need image batches ([N, C, H, W], \
                     [N, H, W, C] or [N, H, W]); this input is {shape:?}"
                )));
            }
            return Ok(None);
        };
        // Which of the two spatial axes is mirrored: 0 = H (tensor axis 2 in NCHW, 1 in
        // NHWC), 1 = W.
        let (h_axis, w_axis) = match (shape.len(), g.nhwc) {
            (3, _) => (1, 2),
            (_, true) => (1, 2),
            (_, false) => (2, 3),
        };
        let flip_dim = match self.flip {
            Some(Some(ax)) if ax == h_axis => 0,
            Some(Some(ax)) if ax == w_axis => 1,
            Some(Some(ax)) => {
                return Err(bad(format!(
                    "--augment flip={ax}: axis {ax} of an input of shape {shape:?} is not a \
                     spatial axis (those are {h_axis} and {w_axis})"
                )))
            }
            _ => 1,
        };
        Ok(Some((g, flip_dim)))
    }

    /// Transforms a batch (`shape[0]` samples, C order); `seed` from [`batch_seed`].
    pub fn apply(&self, shape: &[usize], data: &[f32], seed: u64) -> Result<Vec<f32>> {
        let total: usize = shape.iter().product();
        if total != data.len() || shape.is_empty() || shape[0] == 0 {
            return Err(bad(format!(
                "augment: a batch of shape {shape:?} with {} values",
                data.len()
            )));
        }
        let n = shape[0];
        let per = total / n;
        let geo = self.geometry(shape)?;
        let (lo, hi) = data
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let mut out = data.to_vec();
        for i in 0..n {
            let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xA24B_AED4_963E_E407));
            if self.p < 1.0 && rng.uniform() >= self.p {
                continue;
            }
            let src = &data[i * per..(i + 1) * per];
            let dst = &mut out[i * per..(i + 1) * per];
            if let Some((g, flip_dim)) = &geo {
                debug_assert_eq!(g.n, n);
                if self.geometric() {
                    let k = if self.scale > 0.0 {
                        rng.uniform_in(1.0 - self.scale, 1.0 + self.scale)
                    } else {
                        1.0
                    };
                    let (dy, dx) = if self.shift > 0.0 {
                        (
                            rng.uniform_in(-self.shift, self.shift),
                            rng.uniform_in(-self.shift, self.shift),
                        )
                    } else {
                        (0.0, 0.0)
                    };
                    let flip = self.flip.is_some() && rng.uniform() < 0.5;
                    warp(g, src, dst, k, dy, dx, flip.then_some(*flip_dim));
                }
            }
            if self.brightness > 0.0 || self.contrast > 0.0 || self.noise > 0.0 {
                let c = if self.contrast > 0.0 {
                    rng.uniform_in(1.0 - self.contrast, 1.0 + self.contrast)
                } else {
                    1.0
                };
                let b = if self.brightness > 0.0 {
                    rng.uniform_in(-self.brightness, self.brightness)
                } else {
                    0.0
                };
                let m = dst.iter().map(|&v| f64::from(v)).sum::<f64>() / per as f64;
                let var = dst.iter().map(|&v| (f64::from(v) - m).powi(2)).sum::<f64>() / per as f64;
                let (m, s) = (m as f32, var.sqrt() as f32);
                for v in dst.iter_mut() {
                    let mut y = m + c * (*v - m) + b * s;
                    if self.noise > 0.0 {
                        y += self.noise * s * rng.normal();
                    }
                    *v = y.clamp(lo, hi);
                }
            }
        }
        Ok(out)
    }

    /// [`Augment::apply`] on a float tensor.
    pub fn apply_tensor(&self, x: &Tensor, seed: u64) -> Result<Tensor> {
        let data = x
            .as_f32()
            .ok_or_else(|| bad(format!("augment: the input is {:?}, not float", x.dtype)))?;
        Ok(Tensor::from_f32(
            &x.shape,
            self.apply(&x.shape, data, seed)?,
        ))
    }
}

/// Bilinear resampling of one image (all channels) with scale `k` about the centre, shift
/// `(dy, dx)` and an optional mirror of spatial dimension `flip` (0 = H, 1 = W).
fn warp(g: &Geometry, src: &[f32], dst: &mut [f32], k: f32, dy: f32, dx: f32, flip: Option<usize>) {
    let (cy, cx) = ((g.h as f32 - 1.0) / 2.0, (g.w as f32 - 1.0) / 2.0);
    let clampf = |v: f32, n: usize| v.clamp(0.0, (n - 1) as f32);
    for y in 0..g.h {
        let mut sy = clampf((y as f32 - cy) / k + cy - dy, g.h);
        if flip == Some(0) {
            sy = (g.h - 1) as f32 - sy;
        }
        let y0 = sy.floor() as usize;
        let y1 = (y0 + 1).min(g.h - 1);
        let fy = sy - y0 as f32;
        for x in 0..g.w {
            let mut sx = clampf((x as f32 - cx) / k + cx - dx, g.w);
            if flip == Some(1) {
                sx = (g.w - 1) as f32 - sx;
            }
            let x0 = sx.floor() as usize;
            let x1 = (x0 + 1).min(g.w - 1);
            let fx = sx - x0 as f32;
            for ch in 0..g.c {
                let a = src[g.index(ch, y0, x0)];
                let b = src[g.index(ch, y0, x1)];
                let c = src[g.index(ch, y1, x0)];
                let d = src[g.index(ch, y1, x1)];
                let top = a + (b - a) * fx;
                let bot = c + (d - c) * fx;
                dst[g.index(ch, y, x)] = top + (bot - top) * fy;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(shape: &[usize]) -> Vec<f32> {
        let n: usize = shape.iter().product();
        (0..n).map(|i| ((i * 37) % 101) as f32 / 100.0).collect()
    }

    #[test]
    fn same_seed_same_batch_other_seed_other_batch() {
        let a = Augment::parse("default").unwrap();
        let shape = [4, 1, 9, 7];
        let x = ramp(&shape);
        let y1 = a.apply(&shape, &x, batch_seed(3, 1, 5)).unwrap();
        let y2 = a.apply(&shape, &x, batch_seed(3, 1, 5)).unwrap();
        assert_eq!(y1, y2);
        let y3 = a.apply(&shape, &x, batch_seed(3, 1, 6)).unwrap();
        assert_ne!(y1, y3);
        assert_ne!(y1, x);
        // Clamped to the batch's range.
        let (lo, hi) = (0.0, 1.0);
        assert!(y1.iter().all(|v| (lo..=hi).contains(v)));
    }

    #[test]
    fn nothing_asked_is_the_identity() {
        let a = Augment::parse("").unwrap();
        let shape = [3, 2, 5, 5];
        let x = ramp(&shape);
        assert_eq!(a.apply(&shape, &x, 1).unwrap(), x);
        // p = 0: no sample is touched.
        let a = Augment::parse("default,p=0").unwrap();
        assert_eq!(a.apply(&shape, &x, 1).unwrap(), x);
    }

    #[test]
    fn flip_mirrors_the_named_axis_exactly() {
        // NHWC [N, A, B, C] with flip=1 mirrors axis 1 (MTCNN's x axis), never axis 2.
        let shape = [16, 5, 4, 3];
        let x = ramp(&shape);
        let a = Augment::parse("flip=1").unwrap();
        let y = a.apply(&shape, &x, 11).unwrap();
        let per = 5 * 4 * 3;
        let (mut flipped, mut kept) = (0, 0);
        for i in 0..16 {
            let (s, d) = (&x[i * per..(i + 1) * per], &y[i * per..(i + 1) * per]);
            if s == d {
                kept += 1;
                continue;
            }
            for a1 in 0..5 {
                for b in 0..4 {
                    for c in 0..3 {
                        assert_eq!(d[(a1 * 4 + b) * 3 + c], s[((4 - a1) * 4 + b) * 3 + c]);
                    }
                }
            }
            flipped += 1;
        }
        assert!(flipped > 2 && kept > 2, "{flipped} flipped, {kept} kept");
        // NCHW default: the last axis.
        let shape = [8, 1, 3, 4];
        let x = ramp(&shape);
        let y = Augment::parse("flip")
            .unwrap()
            .apply(&shape, &x, 5)
            .unwrap();
        for i in 0..8 {
            let (s, d) = (&x[i * 12..i * 12 + 12], &y[i * 12..i * 12 + 12]);
            let mirrored = (0..3).all(|r| (0..4).all(|c| d[r * 4 + c] == s[r * 4 + 3 - c]));
            assert!(s == d || mirrored);
        }
    }

    #[test]
    fn integer_shift_moves_pixels() {
        // A shift of exactly one pixel (scale off): bilinear weights 0/1, so the image
        // moves by one pixel with the border repeated.
        let g = Geometry {
            n: 1,
            c: 1,
            h: 3,
            w: 4,
            nhwc: false,
        };
        let src: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let mut dst = vec![0.0; 12];
        warp(&g, &src, &mut dst, 1.0, 0.0, 1.0, None);
        assert_eq!(dst, vec![0., 0., 1., 2., 4., 4., 5., 6., 8., 8., 9., 10.]);
    }

    #[test]
    fn bad_specs_and_shapes_are_errors() {
        for s in [
            "shift",
            "scale=2",
            "noise=-1",
            "flip=0",
            "rotate=3",
            "layout=hwc",
        ] {
            assert!(Augment::parse(s).is_err(), "{s}");
        }
        let a = Augment::parse("flip").unwrap();
        let e = a.apply(&[2, 784], &vec![0.0; 1568], 0).unwrap_err();
        assert!(e.to_string().contains("[2, 784]"), "{e}");
        // Photometric transforms work on any shape.
        let a = Augment::parse("noise=0.1").unwrap();
        assert!(a.apply(&[2, 784], &ramp(&[2, 784]), 0).is_ok());
        let a = Augment::parse("flip=2").unwrap();
        assert!(a.apply(&[1, 1, 4, 4], &[0.0; 16], 0).is_ok());
        let a = Augment::parse("flip=1").unwrap();
        assert!(a.apply(&[1, 1, 4, 4], &[0.0; 16], 0).is_err());
        assert!(Augment::default().apply(&[2, 3], &[0.0; 5], 0).is_err());
    }
}
