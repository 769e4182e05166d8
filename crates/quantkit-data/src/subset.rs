//! A fixed subset of a [`Dataset`], and the seeded split of a data set into a part to train
//! on and a part held out for validation (choosing an epoch or a setting on data the model
//! never trained on, and never on the test set).

use std::path::Path;

use crate::dataset::{sample_order, Dataset};
use crate::error::{DataError, Result};
use crate::source::DataSource;

/// The samples `indices` of `inner`, in that order: sample `i` of the subset is sample
/// `indices[i]` of `inner`.
pub struct Subset {
    inner: Box<dyn Dataset>,
    indices: Vec<usize>,
}

impl Subset {
    /// The subset `indices` of `inner`; an index beyond `inner` is an error naming the source.
    pub fn new(inner: Box<dyn Dataset>, indices: Vec<usize>) -> Result<Subset> {
        let n = inner.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= n) {
            return Err(DataError::InvalidArgument(format!(
                "{}: subset index {bad} is beyond its {n} samples",
                inner.source().display()
            )));
        }
        Ok(Subset { inner, indices })
    }

    /// The indices of the underlying data set, in subset order.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

impl Dataset for Subset {
    fn len(&self) -> usize {
        self.indices.len()
    }
    fn sample_shape(&self) -> &[usize] {
        self.inner.sample_shape()
    }
    fn has_labels(&self) -> bool {
        self.inner.has_labels()
    }
    fn source(&self) -> &Path {
        self.inner.source()
    }
    fn read_sample(&mut self, index: usize, out: &mut Vec<f32>) -> Result<Option<i64>> {
        let i = *self.indices.get(index).ok_or_else(|| {
            DataError::InvalidArgument(format!(
                "{}: sample {index} of a subset of {}",
                self.inner.source().display(),
                self.indices.len()
            ))
        })?;
        self.inner.read_sample(i, out)
    }
}

/// Splits `0..n` into `(train, holdout)`: `holdout` is `n_holdout` indices drawn by a
/// seeded permutation, `train` the others; both sorted, disjoint, together `0..n`.
/// At least one sample must remain on each side.
pub fn holdout_split(n: usize, n_holdout: usize, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    if n_holdout == 0 || n_holdout >= n {
        return Err(DataError::InvalidArgument(format!(
            "a validation split of {n_holdout} samples out of {n}: expected 1 to {}",
            n.saturating_sub(1)
        )));
    }
    let order = sample_order(n, Some(seed), None);
    let mut holdout = order[..n_holdout].to_vec();
    let mut train = order[n_holdout..].to_vec();
    holdout.sort_unstable();
    train.sort_unstable();
    Ok((train, holdout))
}

/// The validation split that `--validation N --validation-seed S` names in `quantkit
/// train` and `quantkit qat`: [`holdout_split`] of `0..n` with the seed `S` mixed by one
/// fixed constant, so that a model trained with `--validation N --validation-seed S` and
/// fine-tuned with the same two options never sees the `N` held-out samples in either run.
pub fn validation_split(n: usize, n_holdout: usize, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
    holdout_split(n, n_holdout, seed ^ 0x005E_ED0F_0A11)
}

impl DataSource {
    /// The samples `indices` of this source, as a new source. Only for sources of equally
    /// shaped samples (an `.npz` of arrays is an error).
    pub fn subset(self, indices: Vec<usize>) -> Result<DataSource> {
        match self {
            DataSource::Samples(d) => Ok(DataSource::Samples(Box::new(Subset::new(d, indices)?))),
            other => Err(DataError::InvalidArgument(format!(
                "{other:?}: a subset needs a source of equally shaped samples"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holdout_split_is_disjoint_complete_and_seeded() {
        let (tr, ho) = holdout_split(1000, 100, 7).unwrap();
        assert_eq!((tr.len(), ho.len()), (900, 100));
        let mut all: Vec<usize> = tr.iter().chain(&ho).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..1000).collect::<Vec<_>>());
        assert!(ho.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            holdout_split(1000, 100, 7).unwrap(),
            (tr.clone(), ho.clone())
        );
        assert_ne!(holdout_split(1000, 100, 8).unwrap().1, ho);
        // Not simply the first or last samples.
        assert!(ho[0] < 900 && *ho.last().unwrap() >= 100);
        for (n, k) in [(10, 0), (10, 10), (10, 11), (0, 0)] {
            assert!(holdout_split(n, k, 0).is_err(), "{n} {k}");
        }
    }
}
