//! A fixed-size streaming histogram whose bins sit on a power-of-two grid anchored at 0.
//!
//! Bin width is `w = 2^e`; bin `j` covers `[(k0 + j)·w, (k0 + j + 1)·w)`. When the observed
//! range grows, `e` increases and bins merge pairwise — every old bin lies entirely inside
//! one new bin, so re-binning never splits or interpolates counts. The state (`e`, `k0`,
//! counts) is therefore a function of the multiset of values seen, whatever the batch
//! order: two histograms merge *exactly* (same result as observing all the data at once).

/// Default number of bins per slot.
pub const DEFAULT_BINS: usize = 2048;

/// Streaming histogram of one slot (tensor or channel).
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    nbins: usize,
    counts: Vec<u64>,
    exp: i32,
    k0: i64,
    min: f32,
    max: f32,
    total: u64,
}

fn floor_div_pow2(x: f32, e: i32) -> i64 {
    // x / 2^e is exact in f64 for the exponents used here (see `required_exp`).
    (f64::from(x) * 2f64.powi(-e)).floor() as i64
}

impl Histogram {
    /// An empty histogram with `nbins` bins (at least 16).
    pub fn new(nbins: usize) -> Histogram {
        Histogram {
            nbins: nbins.max(16),
            counts: Vec::new(),
            exp: i32::MIN,
            k0: 0,
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            total: 0,
        }
    }

    /// Number of values seen.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Smallest value seen (`+∞` if empty).
    pub fn min(&self) -> f32 {
        self.min
    }

    /// Largest value seen (`−∞` if empty).
    pub fn max(&self) -> f32 {
        self.max
    }

    /// Bin width `2^e`.
    pub fn bin_width(&self) -> f64 {
        2f64.powi(self.exp)
    }

    /// The smallest exponent whose grid holds `[min, max]` in `nbins` bins, floored so that
    /// `|x| / 2^e < 2^41` (bin indices stay small and exact) and at `−160`.
    fn required_exp(&self, min: f32, max: f32) -> i32 {
        let amax = min.abs().max(max.abs());
        let floor = if amax > 0.0 {
            (exponent(amax) - 41).max(-160)
        } else {
            -160
        };
        let mut e = floor;
        if max > min {
            let width = f64::from(max) - f64::from(min);
            let guess = (width / self.nbins as f64).log2().floor() as i32 - 1;
            e = e.max(guess);
        }
        while floor_div_pow2(max, e) - floor_div_pow2(min, e) >= self.nbins as i64 {
            e += 1;
        }
        e
    }

    /// Moves the grid to hold `[min, max]` (which must contain the old range).
    fn regrid(&mut self, min: f32, max: f32) {
        let e = self.required_exp(min, max).max(if self.counts.is_empty() {
            i32::MIN
        } else {
            self.exp
        });
        let k0 = floor_div_pow2(min, e);
        if !self.counts.is_empty() && (e != self.exp || k0 != self.k0) {
            let mut counts = vec![0u64; self.nbins];
            let d = (e - self.exp).min(63) as u32;
            for (j, &c) in self.counts.iter().enumerate() {
                if c != 0 {
                    let k = (self.k0 + j as i64) >> d; // floor division by 2^d
                    counts[(k - k0) as usize] += c;
                }
            }
            self.counts = counts;
        } else if self.counts.is_empty() {
            self.counts = vec![0u64; self.nbins];
        }
        self.exp = e;
        self.k0 = k0;
        self.min = min;
        self.max = max;
    }

    /// Adds finite values (the caller has checked finiteness).
    pub fn add(&mut self, values: impl Iterator<Item = f32> + Clone) {
        let (mut lo, mut hi) = (self.min, self.max);
        let mut any = false;
        for v in values.clone() {
            lo = lo.min(v);
            hi = hi.max(v);
            any = true;
        }
        if !any {
            return;
        }
        if lo < self.min || hi > self.max || self.counts.is_empty() {
            self.regrid(lo, hi);
        }
        for v in values {
            let j = (floor_div_pow2(v, self.exp) - self.k0) as usize;
            self.counts[j] += 1;
            self.total += 1;
        }
    }

    /// Number of bins.
    pub fn nbins(&self) -> usize {
        self.nbins
    }

    /// Merges `other` into `self` exactly. Errors if the bin counts differ (the grids would
    /// not line up).
    pub fn merge(&mut self, other: &Histogram) -> crate::Result<()> {
        if other.nbins != self.nbins {
            return Err(crate::CoreError::InvalidScheme(format!(
                "cannot merge histograms with {} and {} bins",
                self.nbins, other.nbins
            )));
        }
        if other.total == 0 {
            return Ok(());
        }
        let lo = self.min.min(other.min);
        let hi = self.max.max(other.max);
        self.regrid(lo, hi);
        // The exponent is a monotone function of the range, so the union's is ≥ other's.
        debug_assert!(self.exp >= other.exp);
        let d = (self.exp - other.exp).min(63) as u32;
        for (j, &c) in other.counts.iter().enumerate() {
            if c != 0 {
                let k = (other.k0 + j as i64) >> d;
                self.counts[(k - self.k0) as usize] += c;
            }
        }
        self.total += other.total;
        Ok(())
    }

    /// Non-empty bins as `(lo, hi, count)` with edges clipped to `[min, max]`.
    pub fn bins(&self) -> impl Iterator<Item = (f64, f64, u64)> + '_ {
        let w = self.bin_width();
        let (mn, mx) = (f64::from(self.min), f64::from(self.max));
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(move |(j, &c)| {
                let lo = (self.k0 + j as i64) as f64 * w;
                (lo.max(mn), (lo + w).min(mx), c)
            })
    }

    /// The `q`-quantile (`0 ≤ q ≤ 1`), linearly interpolated inside its bin.
    pub fn quantile(&self, q: f64) -> f32 {
        if self.total == 0 {
            return 0.0;
        }
        let target = q.clamp(0.0, 1.0) * self.total as f64;
        let mut cum = 0f64;
        for (lo, hi, c) in self.bins() {
            let next = cum + c as f64;
            if next >= target {
                let frac = ((target - cum) / c as f64).clamp(0.0, 1.0);
                return (lo + frac * (hi - lo)) as f32;
            }
            cum = next;
        }
        self.max
    }

    /// The histogram of `|x|` and its bin width `w'`: bin `i` covers `[i·w', (i+1)·w')`,
    /// at most `nbins` bins. (Bin `k < 0` of the signed grid, `[k·w, (k+1)·w)`, folds onto
    /// `|x|` bin `−k−1`.) `w' = w` when the signed grid's range reaches zero; for data of
    /// one sign far from zero (a constant 5 sits on a grid of width 2^-38) the `|x|` bins
    /// are merged by powers of two, exactly, until `[0, max|x|]` fits in `nbins` — sizing
    /// the result from the grid's index alone asked for terabytes.
    pub fn abs_counts(&self) -> (Vec<u64>, f64) {
        self.folded(|_| true)
    }

    /// The histogram of `|x|` for the values of one sign only (`positive`: `x ≥ 0`, else
    /// `x < 0`), on the grid of [`Histogram::abs_counts`]. Empty when no value has that
    /// sign. Entropy calibration of an affine range searches each side on its own.
    pub fn side_counts(&self, positive: bool) -> (Vec<u64>, f64) {
        self.folded(|k| (k >= 0) == positive)
    }

    /// `|x|` counts of the signed bins `k` that `keep` accepts.
    fn folded(&self, keep: impl Fn(i64) -> bool) -> (Vec<u64>, f64) {
        let fold = |j: usize| {
            let k = self.k0 + j as i64;
            (if k >= 0 { k } else { -k - 1 }) as u64
        };
        let kept = |j: usize| self.counts[j] != 0 && keep(self.k0 + j as i64);
        let top = (0..self.counts.len()).filter(|&j| kept(j)).map(fold).max();
        let Some(top) = top else {
            return (Vec::new(), self.bin_width());
        };
        let mut d = 0u32;
        while d < 63 && (top >> d) >= self.nbins as u64 {
            d += 1;
        }
        let mut out = vec![0u64; (top >> d) as usize + 1];
        for (j, &c) in self.counts.iter().enumerate() {
            if kept(j) {
                out[(fold(j) >> d) as usize] += c;
            }
        }
        (out, self.bin_width() * 2f64.powi(d as i32))
    }
}

/// `e` with `x = m·2^e`, `m ∈ [0.5, 1)` (C `frexp`), for positive finite `x` (f32
/// subnormals are normal in f64).
fn exponent(x: f32) -> i32 {
    ((f64::from(x).to_bits() >> 52) & 0x7ff) as i32 - 1022
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_exact_and_order_free() {
        let data: Vec<f32> = (0..5000)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.013 - 4.0)
            .collect();
        let mut whole = Histogram::new(64);
        whole.add(data.iter().copied());
        let mut a = Histogram::new(64);
        let mut b = Histogram::new(64);
        a.add(data[..1000].iter().copied());
        b.add(data[1000..].iter().copied());
        a.merge(&b).unwrap();
        assert_eq!(a, whole);
        assert!(a.merge(&Histogram::new(32)).is_err());
        // Streaming in small batches in reverse order gives the same state too.
        let mut s = Histogram::new(64);
        for chunk in data.rchunks(37) {
            s.add(chunk.iter().copied());
        }
        assert_eq!(s, whole);
        assert_eq!(whole.total(), 5000);
        let med = whole.quantile(0.5);
        assert!((med - 2.5).abs() < 0.3, "{med}");
    }

    #[test]
    fn single_value_and_zero() {
        let mut h = Histogram::new(16);
        h.add([0.0f32, 0.0].into_iter());
        assert_eq!(h.total(), 2);
        h.add([3e38f32].into_iter());
        h.add([-3e38f32].into_iter());
        assert_eq!(h.total(), 4);
        assert_eq!(h.abs_counts().0.iter().sum::<u64>(), 4);
    }

    #[test]
    fn side_counts_split_abs_counts_by_sign() {
        let mut h = Histogram::new(64);
        h.add([-3.0f32, -1.0, -1.0, 0.0, 0.5, 2.0, 2.0, 2.0].into_iter());
        let (all, w) = h.abs_counts();
        let (pos, wp) = h.side_counts(true);
        let (neg, wn) = h.side_counts(false);
        assert_eq!((w, wp, wn), (w, w, w));
        assert_eq!(pos.iter().sum::<u64>(), 5);
        assert_eq!(neg.iter().sum::<u64>(), 3);
        for (i, &c) in all.iter().enumerate() {
            assert_eq!(
                c,
                pos.get(i).copied().unwrap_or(0) + neg.get(i).copied().unwrap_or(0)
            );
        }
        let mut p = Histogram::new(64);
        p.add([1.0f32, 2.0].into_iter());
        assert!(p.side_counts(false).0.is_empty());
    }

    /// Regression: a constant far from zero sits on a grid of width 2^-38; its `|x|`
    /// histogram was sized from the bin index (5·2^38 bins, terabytes).
    #[test]
    fn abs_counts_of_a_constant_is_small_and_exact() {
        for v in [5.0f32, -5.0, -3.3, 1e30, 3e-30] {
            let mut h = Histogram::new(DEFAULT_BINS);
            h.add([v; 10].into_iter());
            let (counts, w) = h.abs_counts();
            assert!(counts.len() <= DEFAULT_BINS, "{v}: {} bins", counts.len());
            assert_eq!(counts.iter().sum::<u64>(), 10);
            let last = counts.len() - 1;
            assert_eq!(counts[last], 10);
            // A negative value's signed bin `[k·w, (k+1)·w)` folds onto `|x|` bin `−k−1`, which
            // holds it at its closed upper edge: `-5` is in `(4.996, 5]`.
            let a = f64::from(v.abs());
            let (lo, hi) = (last as f64 * w, (last + 1) as f64 * w);
            let inside = if v < 0.0 {
                lo < a && a <= hi
            } else {
                lo <= a && a < hi
            };
            assert!(inside, "{v}: bin {last} of width {w}");
        }
    }
}
