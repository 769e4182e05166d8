use super::*;
use std::io::Write;

fn idx_u8(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for d in dims {
        out.extend(d.to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Writes a 5-image 2x3 data set (pixel k of image i = 10*i + k) with labels 0..5.
fn write_set(dir: &Path, prefix: &str, compress: bool) -> (PathBuf, PathBuf) {
    let pixels: Vec<u8> = (0..5u8)
        .flat_map(|i| (0..6u8).map(move |k| 10 * i + k))
        .collect();
    let images = idx_u8(&[5, 2, 3], &pixels);
    let labels = idx_u8(&[5], &[0, 1, 2, 3, 4]);
    let ext = if compress { ".gz" } else { "" };
    let ip = dir.join(format!("{prefix}-images-idx3-ubyte{ext}"));
    let lp = dir.join(format!("{prefix}-labels-idx1-ubyte{ext}"));
    let (images, labels) = if compress {
        (gz(&images), gz(&labels))
    } else {
        (images, labels)
    };
    std::fs::write(&ip, images).unwrap();
    std::fs::write(&lp, labels).unwrap();
    (ip, lp)
}

#[test]
fn reads_plain_and_gzip() {
    let dir = tempfile::tempdir().unwrap();
    for compress in [false, true] {
        let (ip, lp) = write_set(
            dir.path(),
            if compress { "train" } else { "t10k" },
            compress,
        );
        let a = read_idx(&ip).unwrap();
        assert_eq!(a.shape, vec![5, 2, 3]);
        let NpyData::U8(v) = &a.data else {
            panic!("u8 expected")
        };
        assert_eq!(v[6 * 3 + 4], 34);
        let mut ds = IdxDataset::open(&ip, Some(&lp)).unwrap();
        assert_eq!(ds.len(), 5);
        assert_eq!(ds.sample_shape(), &[1, 2, 3]);
        let mut out = Vec::new();
        assert_eq!(ds.read_sample(3, &mut out).unwrap(), Some(3));
        let want: Vec<f32> = (30..36).map(|p| p as f32 / 255.0).collect();
        assert_eq!(out, want);
    }
    // open_dir finds both splits by their MNIST names.
    let test = IdxDataset::open_dir(dir.path(), Split::Test).unwrap();
    let train = IdxDataset::open_dir(dir.path(), Split::Train).unwrap();
    assert_eq!((test.len(), train.len()), (5, 5));
    assert!(is_idx_dir(dir.path()));
}

#[test]
fn other_element_types() {
    let p = Path::new("x.idx");
    let mut b = vec![0, 0, 0x0D, 1, 0, 0, 0, 2];
    b.extend(1.5f32.to_be_bytes());
    b.extend((-2.0f32).to_be_bytes());
    assert_eq!(
        read_idx_bytes(p, &b).unwrap().data,
        NpyData::F32(vec![1.5, -2.0])
    );
    let mut b = vec![0, 0, 0x0B, 1, 0, 0, 0, 1];
    b.extend((-300i16).to_be_bytes());
    assert_eq!(
        read_idx_bytes(p, &b).unwrap().data,
        NpyData::I16(vec![-300])
    );
    let b = vec![0, 0, 0x0A, 1, 0, 0, 0, 1, 7];
    assert!(matches!(
        read_idx_bytes(p, &b),
        Err(DataError::UnsupportedDtype { .. })
    ));
}

#[test]
fn truncated_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (ip, _) = write_set(dir.path(), "t10k", false);
    let bytes = std::fs::read(&ip).unwrap();
    let cut = dir.path().join("cut-images-idx3-ubyte");
    // Inside the data, inside the dims, inside the magic.
    for (n, what) in [(bytes.len() - 1, "data"), (10, "header"), (2, "header")] {
        std::fs::write(&cut, &bytes[..n]).unwrap();
        let err = read_idx(&cut).unwrap_err();
        match &err {
            DataError::Truncated { what: w, .. } => assert_eq!(*w, what),
            other => panic!("{n}: {other:?}"),
        }
        assert!(err.to_string().contains("cut-images-idx3-ubyte"), "{err}");
        assert!(IdxDataset::open(&cut, None).is_err());
    }
    // A truncated gzip stream.
    let gzcut = dir.path().join("cut.gz");
    let z = gz(&bytes);
    std::fs::write(&gzcut, &z[..z.len() / 2]).unwrap();
    let err = read_idx(&gzcut).unwrap_err();
    assert!(
        err.to_string().contains("cut.gz") && err.to_string().contains("gzip"),
        "{err}"
    );
    // Trailing bytes.
    let mut long = bytes.clone();
    long.push(0);
    std::fs::write(&cut, &long).unwrap();
    assert!(read_idx(&cut).unwrap_err().to_string().contains("trailing"));
}

#[test]
fn bad_magic_is_reported() {
    let p = Path::new("bad.idx");
    let err = read_idx_bytes(p, b"\x89PNG\r\n\x1a\n").unwrap_err();
    assert!(err.to_string().contains("bad magic") && err.to_string().contains("bad.idx"));
    let err = read_idx_bytes(p, &[0, 0, 8, 0]).unwrap_err();
    assert!(err.to_string().contains("0 dimensions"), "{err}");
}

#[test]
fn label_count_must_match_image_count() {
    let dir = tempfile::tempdir().unwrap();
    let (ip, lp) = write_set(dir.path(), "t10k", false);
    std::fs::write(&lp, idx_u8(&[4], &[0, 1, 2, 3])).unwrap();
    let err = IdxDataset::open(&ip, Some(&lp)).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::CountMismatch {
                labels: 4,
                samples: 5,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("t10k-labels-idx1-ubyte"), "{err}");
    // Labels with two dimensions, images that are not bytes.
    std::fs::write(&lp, idx_u8(&[5, 1], &[0, 1, 2, 3, 4])).unwrap();
    assert!(matches!(
        IdxDataset::open(&ip, Some(&lp)),
        Err(DataError::Shape { .. })
    ));
    let mut f = vec![0, 0, 0x0D, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1];
    f.extend(1f32.to_be_bytes());
    std::fs::write(&ip, f).unwrap();
    assert!(matches!(
        IdxDataset::open(&ip, None),
        Err(DataError::UnsupportedDtype { .. })
    ));
}

#[test]
fn missing_folder_names_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let err = find_fashion_mnist(Some(dir.path())).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    assert!(msg.contains(FASHION_MNIST_ENV), "{msg}");
    assert!(IdxDataset::open_dir(dir.path(), Split::Test).is_err());
}

/// The Fashion-MNIST folder, or `None` (with the reason printed) outside CI.
pub(crate) fn fashion_mnist_or_skip() -> Option<PathBuf> {
    match find_fashion_mnist(None) {
        Ok(p) => Some(p),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "Fashion-MNIST is required under CI: {e}"
            );
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn real_fashion_mnist() {
    let Some(dir) = fashion_mnist_or_skip() else {
        return;
    };
    let mut test = IdxDataset::open_dir(&dir, Split::Test).unwrap();
    assert_eq!(test.len(), 10_000);
    assert_eq!(test.sample_shape(), &[1, 28, 28]);
    let labels: Vec<i64> = (0..test.len()).map(|i| test.label(i).unwrap()).collect();
    // Fashion-MNIST's test set is balanced: 1,000 of each of the 10 classes.
    for class in 0..10i64 {
        assert_eq!(labels.iter().filter(|&&l| l == class).count(), 1000);
    }
    // The first test image is an ankle boot (class 9), as in the data set's README.
    let mut out = Vec::new();
    assert_eq!(test.read_sample(0, &mut out).unwrap(), Some(9));
    assert!(out.iter().all(|&v| (0.0..=1.0).contains(&v)));
    assert!(out.iter().any(|&v| v > 0.5));
    let train = IdxDataset::open_dir(&dir, Split::Train).unwrap();
    assert_eq!(train.len(), 60_000);
}

/// Issue 20: a gzip IDX file whose header claims 8 GiB, and a valid one followed by 256 MiB
/// of zeros, stop at the header's size with an error instead of inflating everything.
#[test]
fn gzip_claims_are_checked_before_inflating() {
    let dir = tempfile::tempdir().unwrap();
    let claims = dir.path().join("claims-images-idx3-ubyte.gz");
    let mut head = idx_u8(&[8192, 1024, 1024], &[]);
    head.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&claims, gz(&head)).unwrap();
    let err = read_idx(&claims).unwrap_err().to_string();
    assert!(
        err.contains("claims-images-idx3-ubyte.gz")
            && err.contains("8589934592")
            && err.contains("limit"),
        "{err}"
    );
    let trailing = dir.path().join("zeros-images-idx3-ubyte.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(&idx_u8(&[2, 2, 2], &[1; 8])).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..256 {
        e.write_all(&zeros).unwrap();
    }
    std::fs::write(&trailing, e.finish().unwrap()).unwrap();
    let t = std::time::Instant::now();
    let err = read_idx(&trailing).unwrap_err().to_string();
    assert!(
        err.contains("zeros-images") && err.contains("trailing"),
        "{err}"
    );
    // Stopping after the declared 8 bytes takes microseconds; inflating 256 MiB does not.
    assert!(t.elapsed().as_secs_f64() < 0.5, "{:?}", t.elapsed());
    // The reader still reads what is valid.
    let ok = dir.path().join("ok-images-idx3-ubyte.gz");
    std::fs::write(&ok, gz(&idx_u8(&[2, 2, 2], &[3; 8]))).unwrap();
    assert_eq!(read_idx(&ok).unwrap().shape, vec![2, 2, 2]);
}
