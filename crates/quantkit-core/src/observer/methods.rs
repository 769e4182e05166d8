//! Clip-range choice from a histogram: percentile, entropy (KL), MSE.

use super::histogram::Histogram;
use super::HistogramMethod;
use crate::error::Result;
use crate::linear::{dequantize_value, quantize_value, RoundingMode};
use crate::params::choose_qparams;
use crate::scheme::QuantScheme;

/// Largest number of `|x|` bins the entropy search works on (TensorRT uses 2048); finer
/// histograms are coarsened by exact pairwise merging first, bounding the O(n²) search.
const ENTROPY_MAX_BINS: usize = 2048;

/// Number of clip candidates of the MSE search's first stage (`α = k/100 · range`), and
/// the step count of its refinement (1% of the range).
const MSE_CANDIDATES: usize = 100;

pub(super) fn clip_range(
    h: &Histogram,
    method: HistogramMethod,
    scheme: &QuantScheme,
) -> Result<(f32, f32)> {
    let (mn, mx) = (h.min(), h.max());
    if h.total() == 0 {
        return Ok((0.0, 0.0));
    }
    match method {
        HistogramMethod::Percentile(p) => {
            let q = p / 100.0;
            if scheme.symmetric {
                let t = abs_quantile(h, q);
                Ok(((-t).max(mn.min(0.0)), t.min(mx.max(0.0))))
            } else {
                Ok((h.quantile(1.0 - q).min(mx), h.quantile(q).max(mn)))
            }
        }
        HistogramMethod::Entropy => {
            let codes = (scheme.qmax() - scheme.qmin() + 1) as usize;
            if scheme.symmetric {
                // TensorRT: one threshold on |x|, 128 levels for int8 (half the codes per
                // sign), the range ±t.
                let (counts, w) = h.abs_counts();
                let t = entropy_threshold(&counts, w, (codes / 2).max(2)) as f32;
                return Ok(((-t).max(mn.min(0.0)), t.min(mx.max(0.0))));
            }
            // Affine: each sign is searched on its own histogram with the codes that side
            // of the range gets. Folding both signs onto |x| (TensorRT's symmetric recipe)
            // collapsed MobileNet: the normalised input's background spike at −0.81 sat on
            // the |x| axis amid the foreground, and the threshold landed on it, clipping
            // every pixel above 0.81 of a range reaching 2.02 (issue 18); after HardSwish
            // the negative values [−0.375, 0] piled onto the positive bulk and half the
            // codes were counted for a side that has almost no range.
            Ok(entropy_affine(h, codes))
        }
        HistogramMethod::Mse => mse_range(h, scheme),
        HistogramMethod::Auto => {
            let mut best = (f64::INFINITY, (mn.min(0.0), mx.max(0.0)));
            for (_, r) in candidates(h, scheme)? {
                let e = histogram_error(h, r, scheme)?;
                if e < best.0 {
                    best = (e, r);
                }
            }
            Ok(best.1)
        }
    }
}

/// The ranges `auto` chooses from: minmax, percentile, mse, entropy.
pub(super) fn candidates(
    h: &Histogram,
    scheme: &QuantScheme,
) -> Result<Vec<(&'static str, (f32, f32))>> {
    Ok(vec![
        ("minmax", (h.min(), h.max())),
        (
            "percentile",
            clip_range(
                h,
                HistogramMethod::Percentile(super::AUTO_PERCENTILE),
                scheme,
            )?,
        ),
        ("mse", clip_range(h, HistogramMethod::Mse, scheme)?),
        ("entropy", clip_range(h, HistogramMethod::Entropy, scheme)?),
    ])
}

/// `Σ count·(c − fq(c))²` over the bin centres `c` for the range `r`.
fn histogram_error(h: &Histogram, r: (f32, f32), scheme: &QuantScheme) -> Result<f64> {
    let (s, z) = choose_qparams("", r.0, r.1, scheme)?;
    let (qmin, qmax) = (scheme.qmin(), scheme.qmax());
    let mut err = 0f64;
    for (lo, hi, c) in h.bins() {
        let x = ((lo + hi) / 2.0) as f32;
        let q = quantize_value(x, s, z, qmin, qmax, RoundingMode::HalfToEven);
        let d = f64::from(x) - f64::from(dequantize_value(q, s, z));
        err += c as f64 * d * d;
    }
    Ok(err)
}

/// Entropy range of an affine scheme with `codes` levels: `hi` from the positive values'
/// histogram and `lo` from the negative values' (as `|x|`), each with the share of `codes`
/// its side of the range holds; the shares start from the observed range and are
/// recomputed once from the first thresholds. A side without values stays at 0.
fn entropy_affine(h: &Histogram, codes: usize) -> (f32, f32) {
    let (mn, mx) = (h.min().min(0.0), h.max().max(0.0));
    let (pos, wp) = h.side_counts(true);
    let (neg, wn) = h.side_counts(false);
    let side = |counts: &[u64], w: f64, share: f64, amax: f32| -> f32 {
        if counts.is_empty() || amax <= 0.0 {
            return 0.0;
        }
        // At most half the codes, as TensorRT's recipe (128 for 8 bits, 2048 bins): the KL
        // search starts at `levels` bins, where Q equals P and the divergence is near 0, so
        // more levels on the same bins bias it towards clipping (measured: 252 levels on
        // a HardSwish output clipped at 5.6 of 8.5, 25× the error of 128).
        let levels = ((codes as f64 * share).round() as usize).clamp(2, (codes / 2).max(2));
        (entropy_threshold(counts, w, levels) as f32).min(amax)
    };
    let (mut lo, mut hi) = (mn, mx);
    for _ in 0..2 {
        let width = f64::from(hi) - f64::from(lo);
        if width <= 0.0 {
            break;
        }
        let hs = f64::from(hi) / width;
        let new_hi = side(&pos, wp, hs, mx);
        let new_lo = -side(&neg, wn, 1.0 - hs, -mn);
        lo = new_lo;
        hi = new_hi;
    }
    (lo, hi)
}

/// `q`-quantile of `|x|`, interpolated inside its bin.
fn abs_quantile(h: &Histogram, q: f64) -> f32 {
    let (counts, w) = h.abs_counts();
    let amax = f64::from(h.min().abs().max(h.max().abs()));
    let target = q.clamp(0.0, 1.0) * h.total() as f64;
    let mut cum = 0f64;
    for (i, &c) in counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let next = cum + c as f64;
        if next >= target {
            let frac = ((target - cum) / c as f64).clamp(0.0, 1.0);
            return ((i as f64 + frac) * w).min(amax) as f32;
        }
        cum = next;
    }
    amax as f32
}

/// TensorRT's entropy calibration on a histogram of `|x|` (bin width `w`): for each
/// candidate `i ≥ levels` bins, `P` is the first `i` bins with all outliers added to bin
/// `i − 1`; `Q` quantizes the first `i` bins into `levels` groups and spreads each group's
/// count uniformly over its non-empty bins. The threshold is `i·w` for the `i` minimising
/// `KL(P‖Q)` (the largest such `i` on ties). Both distributions are normalised and smoothed
/// as in the TensorRT/MXNet reference (`_smooth_distribution`, ε = 1e−4: empty bins get ε,
/// taken proportionally from the non-empty ones) so an empty `Q` bin under `P > 0` gives a
/// finite penalty.
pub(crate) fn entropy_threshold(abs_counts: &[u64], w: f64, levels: usize) -> f64 {
    kl_threshold(abs_counts, w, levels).max(count_quantile(abs_counts, w, ENTROPY_KEEP))
}

/// The share of one side's values the entropy threshold never clips. KL's `Q` spreads a
/// group's count over its non-empty bins, so a spike (an image background through the first
/// convolution: one value for 60 % of the outputs) costs a large divergence whenever its
/// group is wider than one bin, and the search stops right at the spike, clipping all the
/// range above it (issue 18: MobileNet's first conv output cut at 1.6 of 13.5). Real tails
/// KL is meant to clip are sparse; 99.9 % bounds the search to them.
const ENTROPY_KEEP: f64 = 0.999;

/// The `q`-quantile of `|x|` counts on bins of width `w` (upper edge of its bin).
fn count_quantile(counts: &[u64], w: f64, q: f64) -> f64 {
    let total: u64 = counts.iter().sum();
    let target = q * total as f64;
    let mut cum = 0f64;
    for (i, &c) in counts.iter().enumerate() {
        cum += c as f64;
        if cum >= target && c > 0 {
            return (i + 1) as f64 * w;
        }
    }
    counts.len() as f64 * w
}

/// [`entropy_threshold`] without the [`ENTROPY_KEEP`] bound: TensorRT's search as such.
fn kl_threshold(abs_counts: &[u64], w: f64, levels: usize) -> f64 {
    let mut counts: Vec<u64> = abs_counts.to_vec();
    let mut w = w;
    while counts.len() > ENTROPY_MAX_BINS {
        counts = counts.chunks(2).map(|c| c.iter().sum()).collect();
        w *= 2.0;
    }
    let n = counts.len();
    if n <= levels {
        return n as f64 * w;
    }
    let mut best = (f64::INFINITY, n);
    let mut outliers: f64 = counts[levels..].iter().map(|&c| c as f64).sum();
    let mut q = vec![0f64; n];
    for i in levels..=n {
        if i > levels {
            outliers -= counts[i - 1] as f64;
        }
        // Q: `levels` groups over bins [0, i); group g = [g·i/levels, (g+1)·i/levels).
        for g in 0..levels {
            let (a, b) = (g * i / levels, (g + 1) * i / levels);
            let sum: f64 = counts[a..b].iter().map(|&c| c as f64).sum();
            let nz = counts[a..b].iter().filter(|&&c| c > 0).count();
            for j in a..b {
                q[j] = if counts[j] > 0 { sum / nz as f64 } else { 0.0 };
            }
        }
        let mut pd: Vec<f64> = counts[..i].iter().map(|&c| c as f64).collect();
        pd[i - 1] += outliers;
        let kl = smoothed_kl(&mut pd, &mut q[..i]);
        // Ties keep the wider threshold: equal divergence is no evidence for clipping (a
        // side that is one spike, e.g. an image background, gives KL 0 at every `i`).
        if kl <= best.0 + 1e-12 * best.0.abs().max(1e-300) || best.0.is_infinite() {
            best = (kl.min(best.0), i);
        }
    }
    best.1 as f64 * w
}

/// ε of the TensorRT/MXNet smoothing.
const SMOOTH_EPS: f64 = 1e-4;

/// Normalises and smooths `p` and `q`, then returns `Σ p·ln(p/q)`.
fn smoothed_kl(p: &mut [f64], q: &mut [f64]) -> f64 {
    for d in [&mut *p, &mut *q] {
        let sum: f64 = d.iter().sum();
        if sum > 0.0 {
            d.iter_mut().for_each(|v| *v /= sum);
        }
        let zeros = d.iter().filter(|&&v| v == 0.0).count();
        let nonzeros = d.len() - zeros;
        if zeros > 0 && nonzeros > 0 {
            let take = SMOOTH_EPS * zeros as f64 / nonzeros as f64;
            for v in d.iter_mut() {
                *v = if *v == 0.0 {
                    SMOOTH_EPS
                } else {
                    (*v - take).max(SMOOTH_EPS)
                };
            }
        }
    }
    p.iter()
        .zip(q.iter())
        .filter(|(&a, _)| a > 0.0)
        .map(|(&a, &b)| a * (a / b.max(f64::MIN_POSITIVE)).ln())
        .sum()
}

/// MSE-optimal clip range. Stage 1 tries `α·(min', max')` for `α = 1, 0.99, …, 0.01`
/// (`min' ≤ 0 ≤ max'` as in eq. 3; symmetric schemes use `α·amax`, which `choose_qparams`
/// derives from the same pair). Stage 2, for affine schemes only, refines the two ends
/// independently: repeatedly move `lo` or `hi` inwards or outwards by 1% of the full range,
/// keeping the single move that lowers the error most, until no move helps (at most 200
/// moves). The error of a candidate is `Σ count·(c − fq(c))²` over the bin centres `c`.
/// Ties keep the earlier (wider) candidate, so the result is deterministic.
fn mse_range(h: &Histogram, scheme: &QuantScheme) -> Result<(f32, f32)> {
    let (mn, mx) = (h.min().min(0.0), h.max().max(0.0));
    let bins: Vec<(f32, f64)> = h
        .bins()
        .map(|(lo, hi, c)| (((lo + hi) / 2.0) as f32, c as f64))
        .collect();
    let (qmin, qmax) = (scheme.qmin(), scheme.qmax());
    let error = |lo: f32, hi: f32| -> Result<f64> {
        let (s, z) = choose_qparams("", lo, hi, scheme)?;
        let mut err = 0f64;
        for &(c, n) in &bins {
            let q = quantize_value(c, s, z, qmin, qmax, RoundingMode::HalfToEven);
            let d = f64::from(c) - f64::from(dequantize_value(q, s, z));
            err += n * d * d;
        }
        Ok(err)
    };
    let mut best = (f64::INFINITY, (mn, mx));
    for k in (1..=MSE_CANDIDATES).rev() {
        let a = k as f32 / MSE_CANDIDATES as f32;
        let (lo, hi) = (mn * a, mx * a);
        let err = error(lo, hi)?;
        if err < best.0 {
            best = (err, (lo, hi));
        }
    }
    if scheme.symmetric {
        return Ok(best.1);
    }
    let step = (mx - mn) / MSE_CANDIDATES as f32;
    if step <= 0.0 || !step.is_finite() {
        return Ok(best.1);
    }
    for _ in 0..2 * MSE_CANDIDATES {
        let (lo, hi) = best.1;
        let mut improved = None;
        for (l, u) in [
            (lo + step, hi),
            (lo - step, hi),
            (lo, hi - step),
            (lo, hi + step),
        ] {
            let (l, u) = (l.clamp(mn, 0.0), u.clamp(0.0, mx));
            if (l, u) == (lo, hi) {
                continue;
            }
            let err = error(l, u)?;
            if err < improved.map_or(best.0, |(e, _)| e) {
                improved = Some((err, (l, u)));
            }
        }
        match improved {
            Some(b) => best = b,
            None => break,
        }
    }
    Ok(best.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observer::{HistogramObserver, Observer};
    use crate::scheme::Granularity;

    fn lcg_normalish(n: usize, seed: u64) -> Vec<f32> {
        // Sum of 4 uniforms: a bell shape, deterministic.
        let mut s = seed;
        let mut u = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        };
        (0..n)
            .map(|_| (u() + u() + u() + u() - 2.0) * 1.7)
            .collect()
    }

    #[test]
    fn percentile_clips_outliers() {
        let mut x = lcg_normalish(20000, 1);
        x.push(100.0);
        x.push(-90.0);
        let mut o = HistogramObserver::new(
            "a",
            Granularity::PerTensor,
            HistogramMethod::Percentile(99.9),
        );
        o.observe(&x, &[x.len()]).unwrap();
        let r = o.ranges(&QuantScheme::u8_affine()).unwrap()[0];
        assert!(r.1 < 5.0 && r.1 > 2.0 && r.0 > -5.0 && r.0 < -2.0, "{r:?}");
        let r = o.ranges(&QuantScheme::i8_symmetric()).unwrap()[0];
        assert!(r.1 < 5.0 && r.1 > 2.0 && (r.0 + r.1).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn entropy_and_mse_clip_long_tails() {
        let mut x = lcg_normalish(50000, 7);
        for i in 0..20 {
            x.push(30.0 + i as f32);
        }
        let x_min = x.iter().copied().fold(f32::INFINITY, f32::min);
        for method in [HistogramMethod::Entropy, HistogramMethod::Mse] {
            let mut o = HistogramObserver::new("a", Granularity::PerTensor, method);
            o.observe(&x, &[x.len()]).unwrap();
            let r = o.ranges(&QuantScheme::i8_symmetric()).unwrap()[0];
            if method == HistogramMethod::Entropy {
                // KL looks at the bulk of the distribution and clips the sparse tail.
                assert!(r.1 > 2.0 && r.1 < 25.0, "{method:?}: {r:?}");
                continue;
            }
            // MSE keeps most of the tail (clipping 20 values near 40 costs more than the
            // coarser step) but still trims the range a little.
            assert!(r.1 > 30.0 && r.1 < 49.0, "{method:?}: {r:?}");
            // The MSE search beats plain min/max on its own criterion.
            let s = QuantScheme::i8_symmetric();
            let mse_of = |lo: f32, hi: f32| {
                let p = crate::QParams::from_ranges("a", &[(lo, hi)], &s).unwrap();
                let fq = p
                    .fake_quantize(&x, &[x.len()], RoundingMode::HalfToEven)
                    .unwrap();
                crate::ErrorMetrics::compute(&x, &fq).unwrap().mse
            };
            assert!(mse_of(r.0, r.1) < mse_of(x_min, 49.0), "{method:?}");
        }
    }

    /// Regression: entropy calibration of a constant asked for terabytes
    /// (`quantkit tensor --values 5 --method entropy`); the range must hold the constant.
    #[test]
    fn entropy_of_a_constant_keeps_it_in_range() {
        for (v, scheme) in [
            (5.0f32, QuantScheme::u8_affine()),
            (5.0, QuantScheme::i8_symmetric()),
            (-2.5, QuantScheme::u8_affine()),
            (0.0, QuantScheme::u8_affine()),
        ] {
            let mut o =
                HistogramObserver::new("c", Granularity::PerTensor, HistogramMethod::Entropy);
            o.observe(&[v; 64], &[64]).unwrap();
            let r = o.ranges(&scheme).unwrap()[0];
            assert!(r.0 <= v.min(0.0) && r.1 >= v.max(0.0), "{v}: {r:?}");
            // Not a blown-up range either: within one |x| bin (2048 bins over [0, |v|]).
            assert!(r.1 - r.0 <= v.abs() * 1.01 + 1e-6, "{v}: {r:?}");
        }
    }

    /// Regression (issue 18, MobileNet's −14 pt with `--method entropy`): a normalised
    /// Fashion-MNIST input is a spike at −0.811 (the background, 60 % of the pixels) plus
    /// the foreground spread up to 2.02. Folded onto |x| the spike sat amid the foreground
    /// and the threshold landed on it: range [−0.81, 0.81], every bright pixel clipped.
    #[test]
    fn entropy_keeps_an_image_foreground_beyond_its_background_spike() {
        let n = 50_000;
        let x: Vec<f32> = (0..n)
            .map(|i| {
                if i % 5 < 3 {
                    -0.811
                } else {
                    -0.8 + 2.822 * ((i * 7919) % n) as f32 / n as f32
                }
            })
            .collect();
        let mut o = HistogramObserver::new("in", Granularity::PerTensor, HistogramMethod::Entropy);
        o.observe(&x, &[n]).unwrap();
        let r = o.ranges(&QuantScheme::u8_affine()).unwrap()[0];
        assert!(r.0 <= -0.8, "{r:?}");
        assert!(r.1 > 1.9, "the foreground is clipped: {r:?}");
    }

    /// Regression (issue 18): the first conv of an image model maps the uniform background
    /// to one value — a spike (here 60 % of the values, bin 200) inside an exponentially
    /// decaying spread that reaches bin 2047. KL alone stops right above the spike and clips
    /// everything beyond it (MobileNet's first conv output was cut at 1.6 of 13.5); the
    /// threshold keeps at least 99.9 % of the values.
    #[test]
    fn entropy_does_not_stop_at_a_spike_in_the_bulk() {
        let total = 100_000f64;
        let mut c = vec![0u64; 2048];
        c[200] = (total * 0.6) as u64;
        let decay = |i: usize| (-(i as f64) / 512.0).exp();
        let norm: f64 = (0..2048).map(decay).sum();
        for (i, v) in c.iter_mut().enumerate() {
            *v += (total * 0.4 * decay(i) / norm).round() as u64;
        }
        let kl_alone = kl_threshold(&c, 1.0, 128);
        let t = entropy_threshold(&c, 1.0, 128);
        let q = count_quantile(&c, 1.0, ENTROPY_KEEP);
        eprintln!("KL alone {kl_alone}, with the bound {t}, 99.9 % quantile {q}");
        assert!(kl_alone < 250.0, "the trap this guards against: {kl_alone}");
        assert!(t >= q && t > 1900.0, "{t}");
    }

    /// Guard for the per-side search (issue 18): after HardSwish the values are in
    /// [−0.375, ∞) with a long positive tail. The positive side must keep most of the tail
    /// and stay within 3× the MSE-optimal error; with 252 levels on 2048 bins (all the codes
    /// of that side) the search clipped at 5.6 of 8.5, 25× the error.
    #[test]
    fn entropy_after_hardswish_keeps_the_positive_tail() {
        let pre: Vec<f32> = lcg_normalish(60_000, 3).iter().map(|v| v * 2.5).collect();
        let x: Vec<f32> = pre
            .iter()
            .map(|&v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0)
            .collect();
        let mut sorted = x.clone();
        sorted.sort_by(f32::total_cmp);
        let p999 = sorted[(sorted.len() as f64 * 0.999) as usize];
        let mut o = HistogramObserver::new("hs", Granularity::PerTensor, HistogramMethod::Entropy);
        o.observe(&x, &[x.len()]).unwrap();
        let r = o.ranges(&QuantScheme::u8_affine()).unwrap()[0];
        let s = QuantScheme::u8_affine();
        let mse_of = |lo: f32, hi: f32| {
            let p = crate::QParams::from_ranges("hs", &[(lo, hi)], &s).unwrap();
            let fq = p
                .fake_quantize(&x, &[x.len()], RoundingMode::HalfToEven)
                .unwrap();
            crate::ErrorMetrics::compute(&x, &fq).unwrap().mse
        };
        // The folded recipe this replaces: one |x| threshold with half the codes.
        let (counts, w) = o.histograms()[0].abs_counts();
        let folded = entropy_threshold(&counts, w, 128) as f32;
        let mut m = HistogramObserver::new("hs", Granularity::PerTensor, HistogramMethod::Mse);
        m.observe(&x, &[x.len()]).unwrap();
        let best = m.ranges(&s).unwrap()[0];
        eprintln!(
            "entropy {r:?} mse {:.3e}; folded hi {folded} mse {:.3e}; mse-optimal {best:?} {:.3e}; p99.9 {p999}",
            mse_of(r.0, r.1),
            mse_of(-0.375, folded),
            mse_of(best.0, best.1)
        );
        assert!(r.0 < -0.3 && r.0 >= -0.376, "{r:?}");
        assert!(r.1 > 0.75 * p999, "{r:?}, 99.9th percentile {p999}");
        assert!(mse_of(r.0, r.1) < 3.0 * mse_of(best.0, best.1));
    }

    #[test]
    fn entropy_uniform_keeps_range() {
        // A uniform |x| distribution has nothing to clip: the threshold is the full range.
        let counts = vec![100u64; 1024];
        let t = entropy_threshold(&counts, 1.0, 128);
        assert!(t >= 1000.0, "{t}");
    }
}

#[cfg(test)]
mod mse_tests {
    use super::*;

    #[test]
    fn affine_refinement_clips_the_long_side_only() {
        // Uniform bulk on [-1, 1] plus an exponential tail on the positive side (quantiles
        // of Exp(1), up to ~10.6): the best affine range keeps lo ≈ −1 and clips hi. A
        // uniform shrink α·(lo, hi) cannot do that; the refinement must beat it.
        let n = 20_000;
        let mut x: Vec<f32> = (0..n)
            .map(|i| 2.0 * (i as f32 + 0.5) / n as f32 - 1.0)
            .collect();
        x.extend((0..n).map(|i| -(((i as f64 + 0.5) / n as f64).ln()) as f32));
        let mut h = Histogram::new(2048);
        h.add(x.iter().copied());
        let sch = QuantScheme::new(4, false).unwrap();
        let (lo, hi) = mse_range(&h, &sch).unwrap();
        let err = |l: f32, u: f32| {
            let (s, z) = choose_qparams("", l, u, &sch).unwrap();
            x.iter()
                .map(|&v| {
                    let q =
                        quantize_value(v, s, z, sch.qmin(), sch.qmax(), RoundingMode::HalfToEven);
                    let d = f64::from(v - dequantize_value(q, s, z));
                    d * d
                })
                .sum::<f64>()
        };
        let xmax = x.iter().copied().fold(0f32, f32::max);
        let uniform_best = (1..=100)
            .map(|k| err(-(k as f32) / 100.0, xmax * k as f32 / 100.0))
            .fold(f64::INFINITY, f64::min);
        assert!(hi < 0.8 * xmax, "hi {hi} of {xmax}");
        assert!(
            err(lo, hi) < uniform_best,
            "{} vs {}",
            err(lo, hi),
            uniform_best
        );
        assert!(err(lo, hi) < err(-1.0, xmax));
    }
}
