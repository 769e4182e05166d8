//! The [`Dataset`] trait and the streaming, seed-shuffled [`BatchIter`].
//!
//! A data set is a number of samples of one shape, each optionally labelled. Batches are
//! assembled on demand: only the samples of the current batch are decoded (a `.npy` source
//! reads them from disk per batch, an image folder decodes only those files), so iterating
//! never needs the whole data set in memory beyond what its source already holds.

use std::path::Path;

use crate::error::{DataError, Result};

/// A source of equally shaped samples, read by index.
pub trait Dataset: Send {
    /// Number of samples.
    fn len(&self) -> usize;

    /// True when there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shape of one sample, without the batch dimension (e.g. `[1, 28, 28]`).
    fn sample_shape(&self) -> &[usize];

    /// True when every sample has a label.
    fn has_labels(&self) -> bool;

    /// The file or folder the samples come from (for messages).
    fn source(&self) -> &Path;

    /// Appends sample `index` (f32, C order, [`Dataset::sample_shape`]) to `out` and returns
    /// its label when the data set is labelled.
    fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>>;

    /// Appends samples `start..start + count` to `out` and their labels to `labels`.
    /// Sources that can read a contiguous range faster than sample by sample override this.
    fn read_range(
        &mut self,
        start: usize,
        count: usize,
        out: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) -> Result<()> {
        for i in start..start + count {
            if let Some(l) = self.read_sample(i, out)? {
                labels.push(l);
            }
        }
        Ok(())
    }
}

impl<D: Dataset + ?Sized> Dataset for Box<D> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn sample_shape(&self) -> &[usize] {
        (**self).sample_shape()
    }
    fn has_labels(&self) -> bool {
        (**self).has_labels()
    }
    fn source(&self) -> &Path {
        (**self).source()
    }
    fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
        (**self).read_sample(index, out)
    }
    fn read_range(
        &mut self,
        start: usize,
        count: usize,
        out: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) -> Result<()> {
        (**self).read_range(start, count, out, labels)
    }
}

/// One batch: `shape[0]` samples of shape `shape[1..]`, f32, C order.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The samples, `shape.iter().product()` values.
    pub data: Vec<f32>,
    /// `[B, ...sample shape]`.
    pub shape: Vec<usize>,
    /// One label per sample, when the source is labelled.
    pub labels: Option<Vec<i64>>,
}

/// How to cut a data set into batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOptions {
    /// Samples per batch (the last batch may be smaller unless `drop_last`).
    pub batch_size: usize,
    /// Shuffle the sample order with this seed; `None` keeps file order.
    pub shuffle_seed: Option<u64>,
    /// Drop a last batch smaller than `batch_size`.
    pub drop_last: bool,
    /// Use only this many samples (the first ones, or a seeded random subset when shuffled).
    pub limit: Option<usize>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            batch_size: 64,
            shuffle_seed: None,
            drop_last: false,
            limit: None,
        }
    }
}

impl BatchOptions {
    /// `batch_size` samples per batch, file order, nothing dropped.
    pub fn new(batch_size: usize) -> Self {
        BatchOptions {
            batch_size,
            ..Default::default()
        }
    }

    /// The same options, shuffled with `seed`.
    pub fn shuffled(mut self, seed: u64) -> Self {
        self.shuffle_seed = Some(seed);
        self
    }
}

/// SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): tiny, fast, and a fixed sequence per seed on every platform, which is all
/// shuffling needs. Not for cryptography.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias (Lemire, "Fast random
    /// integer generation in an interval", 2019: multiply-shift with rejection).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// The sample order for one pass: `0..n` or a seeded permutation, cut to `limit`.
pub fn sample_order(n: usize, seed: Option<u64>, limit: Option<usize>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if let Some(seed) = seed {
        SplitMix64::new(seed).shuffle(&mut order);
    }
    order.truncate(limit.unwrap_or(n).min(n));
    order
}

/// Iterates over a [`Dataset`] in batches. Without shuffling it reads contiguous ranges
/// ([`Dataset::read_range`]); with shuffling it gathers samples by index.
pub struct BatchIter<'a, D: Dataset + ?Sized> {
    dataset: &'a mut D,
    /// `None`: file order over `0..count`.
    order: Option<Vec<usize>>,
    count: usize,
    pos: usize,
    opts: BatchOptions,
    failed: bool,
}

impl<'a, D: Dataset + ?Sized> BatchIter<'a, D> {
    /// Starts one pass over `dataset`.
    pub fn new(dataset: &'a mut D, opts: &BatchOptions) -> Result<Self> {
        if opts.batch_size == 0 {
            return Err(DataError::InvalidArgument(
                "batch size must be at least 1".into(),
            ));
        }
        let n = dataset.len();
        let count = opts.limit.unwrap_or(n).min(n);
        let order = opts
            .shuffle_seed
            .map(|seed| sample_order(n, Some(seed), Some(count)));
        Ok(BatchIter {
            dataset,
            order,
            count,
            pos: 0,
            opts: opts.clone(),
            failed: false,
        })
    }

    /// Number of batches this pass yields.
    pub fn num_batches(&self) -> usize {
        let b = self.opts.batch_size;
        if self.opts.drop_last {
            self.count / b
        } else {
            self.count.div_ceil(b)
        }
    }

    /// Number of samples this pass yields.
    pub fn num_samples(&self) -> usize {
        if self.opts.drop_last {
            self.count / self.opts.batch_size * self.opts.batch_size
        } else {
            self.count
        }
    }
}

impl<D: Dataset + ?Sized> Iterator for BatchIter<'_, D> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let remaining = self.count - self.pos;
        let b = remaining.min(self.opts.batch_size);
        if b == 0 || (self.opts.drop_last && b < self.opts.batch_size) {
            return None;
        }
        let sample_shape = self.dataset.sample_shape().to_vec();
        let sample_size: usize = sample_shape.iter().product();
        let mut data = Vec::with_capacity(b * sample_size);
        let mut labels = Vec::with_capacity(b);
        let result = match &self.order {
            None => self.dataset.read_range(self.pos, b, &mut data, &mut labels),
            Some(order) => order[self.pos..self.pos + b].iter().try_for_each(|&i| {
                if let Some(l) = self.dataset.read_sample(i, &mut data)? {
                    labels.push(l);
                }
                Ok(())
            }),
        };
        self.pos += b;
        if let Err(e) = result {
            self.failed = true;
            return Some(Err(e));
        }
        if data.len() != b * sample_size {
            self.failed = true;
            return Some(Err(DataError::Shape {
                path: self.dataset.source().to_path_buf(),
                got: sample_shape,
                reason: format!(
                    "a batch of {b} samples produced {} values, not {}",
                    data.len(),
                    b * sample_size
                ),
            }));
        }
        let has_labels = self.dataset.has_labels();
        if has_labels && labels.len() != b {
            self.failed = true;
            return Some(Err(DataError::CountMismatch {
                path: self.dataset.source().to_path_buf(),
                labels: labels.len(),
                samples: b,
            }));
        }
        let mut shape = Vec::with_capacity(sample_shape.len() + 1);
        shape.push(b);
        shape.extend(sample_shape);
        let labels = has_labels.then_some(labels);
        Some(Ok(Batch {
            data,
            shape,
            labels,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Sample i is [i, i + 0.5], label i % 3.
    struct Counting {
        n: usize,
        path: PathBuf,
        reads: usize,
    }

    impl Dataset for Counting {
        fn len(&self) -> usize {
            self.n
        }
        fn sample_shape(&self) -> &[usize] {
            &[2]
        }
        fn has_labels(&self) -> bool {
            true
        }
        fn source(&self) -> &Path {
            &self.path
        }
        fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
            if index >= self.n {
                return Err(DataError::InvalidArgument("out of range".into()));
            }
            self.reads += 1;
            out.extend([index as f32, index as f32 + 0.5]);
            Ok(Some(index as i64 % 3))
        }
    }

    fn counting(n: usize) -> Counting {
        Counting {
            n,
            path: PathBuf::from("counting"),
            reads: 0,
        }
    }

    fn firsts(batches: &[Batch]) -> Vec<usize> {
        batches
            .iter()
            .flat_map(|b| b.data.chunks(2).map(|c| c[0] as usize))
            .collect()
    }

    #[test]
    fn file_order_batches_with_a_short_last_one() {
        let mut ds = counting(10);
        let it = BatchIter::new(&mut ds, &BatchOptions::new(4)).unwrap();
        assert_eq!(it.num_batches(), 3);
        let batches: Vec<Batch> = it.collect::<Result<_>>().unwrap();
        assert_eq!(
            batches.iter().map(|b| b.shape.clone()).collect::<Vec<_>>(),
            vec![vec![4, 2], vec![4, 2], vec![2, 2]]
        );
        assert_eq!(firsts(&batches), (0..10).collect::<Vec<_>>());
        assert_eq!(batches[2].labels, Some(vec![8 % 3, 9 % 3]));
        assert_eq!(batches[0].data[..4], [0.0, 0.5, 1.0, 1.5]);
    }

    #[test]
    fn drop_last_and_limit() {
        let mut ds = counting(10);
        let opts = BatchOptions {
            drop_last: true,
            ..BatchOptions::new(4)
        };
        let batches: Vec<Batch> = BatchIter::new(&mut ds, &opts)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(firsts(&batches), (0..8).collect::<Vec<_>>());
        let opts = BatchOptions {
            limit: Some(5),
            ..BatchOptions::new(3)
        };
        let it = BatchIter::new(&mut ds, &opts).unwrap();
        assert_eq!(it.num_samples(), 5);
        let batches: Vec<Batch> = it.collect::<Result<_>>().unwrap();
        assert_eq!(firsts(&batches), (0..5).collect::<Vec<_>>());
        // Only the samples asked for were read.
        assert_eq!(ds.reads, 8 + 5);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut ds = counting(100);
        let run = |ds: &mut Counting, seed| {
            let opts = BatchOptions::new(7).shuffled(seed);
            let b: Vec<Batch> = BatchIter::new(ds, &opts)
                .unwrap()
                .collect::<Result<_>>()
                .unwrap();
            // Labels travel with their samples.
            for batch in &b {
                for (s, l) in batch.data.chunks(2).zip(batch.labels.as_ref().unwrap()) {
                    assert_eq!(s[0] as i64 % 3, *l);
                }
            }
            firsts(&b)
        };
        let a = run(&mut ds, 1);
        assert_eq!(a, run(&mut ds, 1), "same seed, same order");
        let c = run(&mut ds, 2);
        assert_ne!(a, c, "another seed, another order");
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "a permutation");
    }

    #[test]
    fn shuffle_is_roughly_uniform() {
        // Where element 0 lands over many seeds: each of 5 slots about 1/5 of the time.
        let mut counts = [0usize; 5];
        for seed in 0..5000 {
            let order = sample_order(5, Some(seed), None);
            counts[order.iter().position(|&x| x == 0).unwrap()] += 1;
        }
        for c in counts {
            assert!((850..1150).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn splitmix_reference_values() {
        // First outputs for seed 1234567 from the reference C implementation
        // (Vigna, splitmix64.c).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn zero_batch_size_is_refused() {
        let mut ds = counting(3);
        assert!(matches!(
            BatchIter::new(&mut ds, &BatchOptions::new(0)),
            Err(DataError::InvalidArgument(_))
        ));
    }

    #[test]
    fn an_error_ends_the_pass() {
        struct Failing(PathBuf);
        impl Dataset for Failing {
            fn len(&self) -> usize {
                4
            }
            fn sample_shape(&self) -> &[usize] {
                &[1]
            }
            fn has_labels(&self) -> bool {
                false
            }
            fn source(&self) -> &Path {
                &self.0
            }
            fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
                if index == 2 {
                    return Err(DataError::format(&self.0, "broken sample"));
                }
                out.push(index as f32);
                Ok(None)
            }
        }
        let mut ds = Failing(PathBuf::from("f"));
        let items: Vec<_> = BatchIter::new(&mut ds, &BatchOptions::new(2))
            .unwrap()
            .collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].as_ref().unwrap().labels.is_none());
        assert!(items[1].is_err());
    }
}
