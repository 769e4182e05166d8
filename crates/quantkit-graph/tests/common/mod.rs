//! Locating ../shared (QUANTKIT_SHARED or the sibling folder of the workspace).
#![allow(dead_code)]

use std::path::PathBuf;

/// The shared folder if present. Under CI a missing folder is a failure; elsewhere the
/// caller skips with the printed reason.
pub fn shared(sub: &str) -> Option<PathBuf> {
    let root = std::env::var("QUANTKIT_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")));
    let p = root.join(sub);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{} is missing (required under CI)", p.display());
    }
    eprintln!("skipping: {} not found (set QUANTKIT_SHARED)", p.display());
    None
}

use quantkit_data::npy::{read_npy, NpyData};
use quantkit_graph::{Data, Tensor};

/// Reads a `.npy` file as a tensor.
pub fn npy_tensor(path: &std::path::Path) -> Tensor {
    let a = read_npy(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let data = match a.data {
        NpyData::F32(v) => Data::F32(v),
        NpyData::F64(v) => Data::F64(v),
        NpyData::I64(v) => Data::I64(v),
        NpyData::I32(v) => Data::I32(v),
        NpyData::U8(v) => Data::U8(v),
        NpyData::I8(v) => Data::I8(v),
        other => panic!(
            "{}: unexpected npy dtype {:?}",
            path.display(),
            other.dtype()
        ),
    };
    Tensor::new(a.shape, data).expect("npy shape matches data")
}

/// The first `n` items along axis 0.
pub fn take(t: &Tensor, n: usize) -> Tensor {
    let n = n.min(t.shape[0]);
    let per: usize = t.shape[1..].iter().product();
    let v = t.as_f32().expect("f32")[..n * per].to_vec();
    let mut shape = t.shape.clone();
    shape[0] = n;
    Tensor::from_f32(&shape, v)
}
