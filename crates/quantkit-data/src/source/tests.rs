use super::*;
use crate::npy::{write_npy, write_npz, NpyData};

fn collect(src: &mut DataSource, opts: &BatchOptions) -> Vec<Batch> {
    src.batches(opts).unwrap().collect::<Result<_>>().unwrap()
}

#[test]
fn npy_source_streams_batches_with_labels() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    let y = dir.path().join("y.npy");
    let values: Vec<f32> = (0..7 * 6).map(|v| v as f32).collect();
    write_npy(
        &x,
        &NpyArray::new(vec![7, 2, 3], NpyData::F32(values)).unwrap(),
    )
    .unwrap();
    write_npy(
        &y,
        &NpyArray::new(vec![7], NpyData::I32((0..7).collect())).unwrap(),
    )
    .unwrap();
    let opts = OpenOptions {
        labels: Some(y.clone()),
        ..Default::default()
    };
    let mut src = open_data(&x, &opts).unwrap();
    assert_eq!(src.len(), 7);
    let b = collect(&mut src, &BatchOptions::new(3));
    assert_eq!(b.len(), 3);
    assert_eq!(b[0].shape, vec![3, 2, 3]);
    assert_eq!(b[2].shape, vec![1, 2, 3]);
    assert_eq!(b[2].data, (36..42).map(|v| v as f32).collect::<Vec<_>>());
    assert_eq!(b[1].labels, Some(vec![3, 4, 5]));
    // Shuffled: each sample still carries its own label.
    for batch in collect(&mut src, &BatchOptions::new(2).shuffled(3)) {
        for (s, l) in batch.data.chunks(6).zip(batch.labels.unwrap()) {
            assert_eq!(s[0] as i64 / 6, l);
        }
    }
    // Float data keeps its values; u8 data is divided by 255 unless a scale is given.
    let u = dir.path().join("u.npy");
    write_npy(
        &u,
        &NpyArray::new(vec![2, 2], NpyData::U8(vec![0, 51, 255, 3])).unwrap(),
    )
    .unwrap();
    let mut src = open_data(&u, &OpenOptions::default()).unwrap();
    let b = collect(&mut src, &BatchOptions::new(2));
    assert_eq!(b[0].data, vec![0.0, 51.0 / 255.0, 1.0, 3.0 / 255.0]);
    assert!(b[0].labels.is_none());
    let opts = OpenOptions {
        scale: Some(1.0),
        ..Default::default()
    };
    let b = collect(&mut open_data(&u, &opts).unwrap(), &BatchOptions::new(2));
    assert_eq!(b[0].data, vec![0.0, 51.0, 255.0, 3.0]);
}

#[test]
fn bad_labels_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.npy");
    let y = dir.path().join("y.npy");
    write_npy(
        &x,
        &NpyArray::new(vec![3, 1], NpyData::F32(vec![1.0; 3])).unwrap(),
    )
    .unwrap();
    write_npy(
        &y,
        &NpyArray::new(vec![2], NpyData::I64(vec![0, 1])).unwrap(),
    )
    .unwrap();
    let opts = OpenOptions {
        labels: Some(y.clone()),
        ..Default::default()
    };
    let err = open_data(&x, &opts).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::CountMismatch {
                labels: 2,
                samples: 3,
                ..
            }
        ),
        "{err:?}"
    );
    write_npy(
        &y,
        &NpyArray::new(vec![3], NpyData::F32(vec![0.0; 3])).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        open_data(&x, &opts),
        Err(DataError::UnsupportedDtype { .. })
    ));
    write_npy(
        &y,
        &NpyArray::new(vec![3, 2], NpyData::I64(vec![0; 6])).unwrap(),
    )
    .unwrap();
    assert!(matches!(open_data(&x, &opts), Err(DataError::Shape { .. })));
}

#[test]
fn empty_and_scalar_npy_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("e.npy");
    write_npy(
        &x,
        &NpyArray::new(vec![0, 4], NpyData::F32(vec![])).unwrap(),
    )
    .unwrap();
    assert!(matches!(
        open_data(&x, &OpenOptions::default()),
        Err(DataError::Empty { .. })
    ));
    write_npy(&x, &NpyArray::new(vec![], NpyData::F32(vec![1.0])).unwrap()).unwrap();
    assert!(matches!(
        open_data(&x, &OpenOptions::default()),
        Err(DataError::Shape { .. })
    ));
    assert!(matches!(
        open_data(dir.path().join("missing.npy"), &OpenOptions::default()),
        Err(DataError::Io { .. })
    ));
}

#[test]
fn npz_arrays_are_batches_of_their_own_shape() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("calib.npz");
    let a = NpyArray::new(vec![1, 3, 4], NpyData::F32(vec![0.5; 12])).unwrap();
    let b = NpyArray::new(vec![2, 3, 5], NpyData::F64(vec![1.5; 30])).unwrap();
    let c = NpyArray::new(vec![1, 2], NpyData::U8(vec![255, 0])).unwrap();
    write_npz(&p, &[("a", &a), ("b", &b), ("c", &c)]).unwrap();
    let mut src = open_data(&p, &OpenOptions::default()).unwrap();
    assert!(matches!(src, DataSource::Arrays(_)));
    assert_eq!(src.len(), 3);
    let batches = collect(&mut src, &BatchOptions::new(64));
    assert_eq!(
        batches.iter().map(|b| b.shape.clone()).collect::<Vec<_>>(),
        vec![vec![1, 3, 4], vec![2, 3, 5], vec![1, 2]]
    );
    assert_eq!(batches[1].data, vec![1.5; 30]);
    assert_eq!(batches[2].data, vec![1.0, 0.0]);
    let shuffled = collect(&mut src, &BatchOptions::new(1).shuffled(5));
    assert_eq!(shuffled.len(), 3);
    let limited = collect(
        &mut src,
        &BatchOptions {
            limit: Some(2),
            ..BatchOptions::new(1)
        },
    );
    assert_eq!(limited.len(), 2);
}

#[test]
fn npz_images_and_labels_is_a_sample_set() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("set.npz");
    let x = NpyArray::new(vec![4, 2], NpyData::U8(vec![0, 255, 1, 2, 3, 4, 5, 6])).unwrap();
    let y = NpyArray::new(vec![4], NpyData::I64(vec![3, 1, 2, 0])).unwrap();
    write_npz(&p, &[("labels", &y), ("images", &x)]).unwrap();
    let mut src = open_data(&p, &OpenOptions::default()).unwrap();
    let b = collect(&mut src, &BatchOptions::new(3));
    assert_eq!(b[0].shape, vec![3, 2]);
    assert_eq!(b[0].data[1], 1.0);
    assert_eq!(b[0].labels, Some(vec![3, 1, 2]));
    assert_eq!(b[1].labels, Some(vec![0]));
    // Mismatched counts name the member.
    let y = NpyArray::new(vec![3], NpyData::I64(vec![3, 1, 2])).unwrap();
    write_npz(&p, &[("images", &x), ("labels", &y)]).unwrap();
    let err = open_data(&p, &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("set.npz:labels.npy"), "{err}");
}

#[test]
fn npy_folder_and_image_folder_are_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("imgs");
    std::fs::create_dir_all(imgs.join("a")).unwrap();
    image::GrayImage::from_fn(2, 2, |_, _| image::Luma([255]))
        .save(imgs.join("a/x.png"))
        .unwrap();
    let mut src = open_data(&imgs, &OpenOptions::default()).unwrap();
    let b = collect(&mut src, &BatchOptions::new(4));
    assert_eq!(b[0].shape, vec![1, 1, 2, 2]);
    assert_eq!(b[0].labels, Some(vec![0]));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = open_data(&empty, &OpenOptions::default()).unwrap_err();
    assert!(matches!(err, DataError::Empty { .. }), "{err:?}");
}

/// Verifies the committed `data/fashion-mnist-sample` against the installed data set:
/// the first 1,000 test images and labels, byte for byte.
#[test]
fn committed_sample_is_the_first_1000_fashion_mnist_test_images() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/fashion-mnist-sample");
    let images = read_npy(sample.join("images.npy")).unwrap();
    let labels = read_npy(sample.join("labels.npy")).unwrap();
    assert_eq!(images.shape, vec![1000, 1, 28, 28]);
    assert_eq!(labels.shape, vec![1000]);
    assert!(matches!(labels.data, crate::npy::NpyData::I64(_)));
    let crate::npy::NpyData::U8(pixels) = &images.data else {
        panic!("images.npy must be u8");
    };
    let labels = labels.data.to_i64().unwrap();
    assert!(labels.iter().all(|l| (0..10).contains(l)));
    let Some(dir) = crate::idx::tests::fashion_mnist_or_skip() else {
        return;
    };
    let test = IdxDataset::open_dir(&dir, Split::Test).unwrap();
    for i in 0..1000 {
        assert_eq!(
            &pixels[i * 784..(i + 1) * 784],
            test.raw_sample(i).unwrap(),
            "image {i}"
        );
        assert_eq!(labels[i], test.label(i).unwrap(), "label {i}");
    }
    // Loading the folder gives pixel/255, the zoo models' input.
    let mut src = open_data(&sample, &OpenOptions::default()).unwrap();
    let b = collect(&mut src, &BatchOptions::new(1000));
    assert_eq!(b.len(), 1);
    let mut want = Vec::new();
    let mut test = test;
    test.read_range(0, 1000, &mut want, &mut Vec::new())
        .unwrap();
    let diff = b[0].data.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(b[0].data.len(), want.len());
    assert_eq!(diff, 0, "values differing from pixel/255");
}

#[test]
fn scaler_divides_by_integer_reciprocals() {
    let s = Scaler::new(1.0 / 255.0);
    for p in 0..=255u8 {
        assert_eq!(s.apply(p as f32), p as f32 / 255.0);
    }
    assert_eq!(Scaler::new(0.3).apply(2.0), 2.0 * 0.3);
    assert_eq!(Scaler::new(2.0).apply(3.0), 6.0);
    assert_eq!(Scaler::new(1.0).apply(3.5), 3.5);
}

#[test]
fn idx_paths_with_split_and_npy_labels() {
    let dir = tempfile::tempdir().unwrap();
    let idx = |dims: &[u32], data: &[u8]| {
        let mut out = vec![0, 0, 0x08, dims.len() as u8];
        dims.iter().for_each(|d| out.extend(d.to_be_bytes()));
        out.extend_from_slice(data);
        out
    };
    std::fs::write(
        dir.path().join("train-images-idx3-ubyte"),
        idx(&[3, 1, 2], &[0, 255, 1, 2, 3, 4]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("train-labels-idx1-ubyte"),
        idx(&[3], &[7, 8, 9]),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("t10k-images-idx3-ubyte"),
        idx(&[1, 1, 2], &[5, 6]),
    )
    .unwrap();
    // Test split by default, without labels (no t10k label file).
    let src = open_data(dir.path(), &OpenOptions::default()).unwrap();
    assert_eq!(src.len(), 1);
    assert!(!src.has_labels());
    let opts = OpenOptions {
        split: Split::Train,
        ..Default::default()
    };
    let mut src = open_data(dir.path(), &opts).unwrap();
    let b = collect(&mut src, &BatchOptions::new(8));
    assert_eq!(b[0].shape, vec![3, 1, 1, 2]);
    assert_eq!(b[0].labels, Some(vec![7, 8, 9]));
    assert_eq!(b[0].data[1], 1.0);
    // A single IDX file with labels from .npy; a wrong count is refused.
    let y = dir.path().join("y.npy");
    write_npy(
        &y,
        &NpyArray::new(vec![3], NpyData::I64(vec![1, 2, 3])).unwrap(),
    )
    .unwrap();
    let opts = OpenOptions {
        labels: Some(y.clone()),
        ..Default::default()
    };
    let mut src = open_data(dir.path().join("train-images-idx3-ubyte"), &opts).unwrap();
    let b = collect(&mut src, &BatchOptions::new(8));
    assert_eq!(b[0].labels, Some(vec![1, 2, 3]));
    let err = open_data(dir.path().join("t10k-images-idx3-ubyte"), &opts).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::CountMismatch {
                labels: 3,
                samples: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn flat_image_folder_takes_labels_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("flat");
    std::fs::create_dir(&imgs).unwrap();
    for (i, v) in [10u8, 20, 30].iter().enumerate() {
        image::GrayImage::from_fn(2, 1, |_, _| image::Luma([*v]))
            .save(imgs.join(format!("{i}.png")))
            .unwrap();
    }
    let y = dir.path().join("y.npy");
    write_npy(
        &y,
        &NpyArray::new(vec![3], NpyData::U8(vec![2, 0, 1])).unwrap(),
    )
    .unwrap();
    let opts = OpenOptions {
        labels: Some(y.clone()),
        ..Default::default()
    };
    let mut src = open_data(&imgs, &opts).unwrap();
    let b = collect(&mut src, &BatchOptions::new(3));
    assert_eq!(b[0].labels, Some(vec![2, 0, 1]));
    assert_eq!(b[0].data[4], 30.0 / 255.0);
    write_npy(
        &y,
        &NpyArray::new(vec![2], NpyData::U8(vec![2, 0])).unwrap(),
    )
    .unwrap();
    let err = open_data(&imgs, &opts).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::CountMismatch {
                labels: 2,
                samples: 3,
                ..
            }
        ),
        "{err:?}"
    );
}
