use super::*;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/npy")
        .join(name)
}

fn arange() -> Vec<f32> {
    (0..24).map(|i| i as f32).collect()
}

#[test]
fn reads_every_dtype_in_both_byte_orders() {
    for code in [
        "f2", "f4", "f8", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8",
    ] {
        for order in ["le", "be"] {
            if code.ends_with('1') && order == "be" {
                continue;
            }
            let name = format!("arange_{order}_{code}.npy");
            let a = read_npy(fixture(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(a.shape, vec![2, 3, 4], "{name}");
            assert_eq!(a.dtype().code(), code, "{name}");
            assert_eq!(a.data.to_f32(), arange(), "{name}");
            if !code.starts_with('f') {
                let want: Vec<i64> = (0..24).collect();
                assert_eq!(a.data.to_i64().unwrap(), want, "{name}");
            } else {
                assert!(a.data.to_i64().is_none());
            }
        }
    }
}

#[test]
fn reads_bool() {
    let a = read_npy(fixture("arange_b1.npy")).unwrap();
    let want: Vec<bool> = (0..24).map(|i| i % 2 == 1).collect();
    assert_eq!(a.data, NpyData::Bool(want));
}

#[test]
fn fortran_order_is_transposed_into_c_order() {
    for name in ["fortran_f4.npy", "fortran_be_i2.npy"] {
        let a = read_npy(fixture(name)).unwrap();
        assert_eq!(a.shape, vec![2, 3, 4]);
        assert_eq!(a.data.to_f32(), arange(), "{name}");
        // The streaming reader gives the same C-order elements.
        let mut f = NpyFile::open(fixture(name)).unwrap();
        assert!(f.header().fortran_order);
        assert_eq!(
            f.read_elements(5, 7).unwrap().to_f32(),
            arange()[5..12].to_vec()
        );
    }
}

#[test]
fn fortran_to_c_matches_index_formula() {
    // shape (2, 3): F-order memory holds a[0,0] a[1,0] a[0,1] a[1,1] a[0,2] a[1,2].
    let f = [0, 10, 1, 11, 2, 12];
    assert_eq!(fortran_to_c(&f, &[2, 3]), vec![0, 1, 2, 10, 11, 12]);
}

#[test]
fn header_versions_2_and_3() {
    for name in ["v2_f4.npy", "v3_f4.npy"] {
        let mut f = NpyFile::open(fixture(name)).unwrap();
        assert_eq!(f.header().version.1, 0);
        let a = read_npy(fixture(name)).unwrap();
        assert_eq!(a.data.to_f32(), arange());
        assert_eq!(f.read_elements(0, 24).unwrap().to_f32(), arange());
    }
    assert_eq!(read_npy_header_version("v2_f4.npy"), (2, 0));
    assert_eq!(read_npy_header_version("v3_f4.npy"), (3, 0));
}

fn read_npy_header_version(name: &str) -> (u8, u8) {
    let bytes = std::fs::read(fixture(name)).unwrap();
    parse_header(&fixture(name), &bytes).unwrap().version
}

#[test]
fn scalar_and_empty() {
    let s = read_npy(fixture("scalar_f8.npy")).unwrap();
    assert_eq!(s.shape, Vec::<usize>::new());
    assert_eq!(s.data, NpyData::F64(vec![2.5]));
    let e = read_npy(fixture("empty_f4.npy")).unwrap();
    assert_eq!(e.shape, vec![0, 3]);
    assert!(e.data.is_empty());
}

#[test]
fn unsupported_dtypes_are_named() {
    for (name, dtype) in [
        ("object.npy", "|O"),
        ("complex64.npy", "<c8"),
        ("unicode.npy", "<U2"),
        ("datetime.npy", "<M8[s]"),
        ("structured.npy", "[('x', '<f4'), ('y', '<i4')]"),
    ] {
        let err = read_npy(fixture(name)).unwrap_err();
        match &err {
            DataError::UnsupportedDtype { path, dtype: d, .. } => {
                assert_eq!(d, dtype, "{name}");
                assert!(path.ends_with(name));
            }
            other => panic!("{name}: expected UnsupportedDtype, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains(name) && msg.contains("unsupported dtype"),
            "{msg}"
        );
        // The streaming reader refuses them too.
        assert!(matches!(
            NpyFile::open(fixture(name)),
            Err(DataError::UnsupportedDtype { .. })
        ));
    }
}

#[test]
fn truncated_data_and_header() {
    let bytes = std::fs::read(fixture("arange_le_f4.npy")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Cut inside the data.
    let p = dir.path().join("cut.npy");
    std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
    let err = read_npy(&p).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::Truncated {
                what: "data",
                expected: 96,
                found: 93,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("cut.npy"), "{err}");
    assert!(matches!(
        NpyFile::open(&p),
        Err(DataError::Truncated { .. })
    ));
    // Cut inside the header and inside the preamble.
    for cut in [60, 9, 3] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let err = read_npy(&p).unwrap_err();
        assert!(
            matches!(err, DataError::Truncated { what: "header", .. }),
            "cut {cut}: {err:?}"
        );
        assert!(matches!(
            NpyFile::open(&p),
            Err(DataError::Truncated { what: "header", .. })
        ));
    }
    // Empty file.
    std::fs::write(&p, b"").unwrap();
    assert!(matches!(read_npy(&p), Err(DataError::Truncated { .. })));
    // Trailing garbage is an error too.
    let mut long = bytes.clone();
    long.extend_from_slice(&[0, 0, 0, 0]);
    std::fs::write(&p, &long).unwrap();
    let err = read_npy(&p).unwrap_err();
    assert!(err.to_string().contains("trailing"), "{err}");
    assert!(NpyFile::open(&p).is_err());
}

#[test]
fn bad_magic_and_version() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("not.npy");
    std::fs::write(&p, b"PK\x03\x04 this is a zip, not npy").unwrap();
    let err = read_npy(&p).unwrap_err();
    assert!(matches!(err, DataError::Format { .. }), "{err:?}");
    assert!(err.to_string().contains("bad magic") && err.to_string().contains("not.npy"));
    let mut bytes = std::fs::read(fixture("arange_le_f4.npy")).unwrap();
    bytes[6] = 4;
    std::fs::write(&p, &bytes).unwrap();
    let err = read_npy(&p).unwrap_err();
    assert!(err.to_string().contains("version 4.0"), "{err}");
    let err = read_npy(dir.path().join("missing.npy")).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }) && err.to_string().contains("missing.npy"));
}

fn with_header(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn malformed_headers() {
    let p = Path::new("h.npy");
    let cases = [
        (
            "{'descr': '<f4', 'fortran_order': False}\n",
            "lacks key \"shape\"",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}\n",
            "expected a string",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 'y'}\n",
            "unexpected key",
        ),
        (
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n",
            "repeats key",
        ),
        (
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}\n",
            "expected a string",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}\n",
            "non-negative",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': 'x'}\n",
            "tuple",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} extra\n",
            "after the dict",
        ),
        (
            "{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}\n",
            "multi-byte",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)\n",
            "expected ',' or '}'",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}\n",
            "does not fit",
        ),
        (
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4)}\n",
            "too large",
        ),
    ];
    for (dict, want) in cases {
        let bytes = with_header(dict, &[0; 4]);
        let err = read_npy_bytes(p, &bytes).unwrap_err();
        assert!(err.to_string().contains(want), "{dict}: {err}");
    }
    // Python 2 long integers and double quotes are accepted.
    let bytes = with_header(
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1L,), }\n",
        &1.5f32.to_le_bytes(),
    );
    assert_eq!(
        read_npy_bytes(p, &bytes).unwrap().data,
        NpyData::F32(vec![1.5])
    );
    // Bool bytes other than 0/1 are refused.
    let bytes = with_header(
        "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }\n",
        &[1, 2],
    );
    assert!(read_npy_bytes(p, &bytes)
        .unwrap_err()
        .to_string()
        .contains("byte value 2"));
}

fn all_dtypes() -> Vec<NpyData> {
    vec![
        NpyData::Bool(vec![true, false, true, true, false, false]),
        NpyData::U8(vec![0, 1, 2, 254, 255, 7]),
        NpyData::I8(vec![-128, -1, 0, 1, 127, 5]),
        NpyData::U16(vec![0, 1, 65535, 300, 4, 5]),
        NpyData::I16(vec![-32768, -1, 0, 32767, 4, 5]),
        NpyData::U32(vec![0, 1, u32::MAX, 3, 4, 5]),
        NpyData::I32(vec![i32::MIN, -1, 0, i32::MAX, 4, 5]),
        NpyData::U64(vec![0, 1, u64::MAX, 3, 4, 5]),
        NpyData::I64(vec![i64::MIN, -1, 0, i64::MAX, 4, 5]),
        NpyData::F16(
            [0.0f32, -1.5, 65504.0, 1e-7, f32::INFINITY, 2.0]
                .iter()
                .map(|&x| f16::from_f32(x))
                .collect(),
        ),
        NpyData::F32(vec![
            0.0,
            -1.5,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::NEG_INFINITY,
            1e-45,
        ]),
        NpyData::F64(vec![0.0, -1.5, f64::MAX, 1e-300, f64::INFINITY, 3.25]),
    ]
}

#[test]
fn write_read_round_trip_every_dtype() {
    let dir = tempfile::tempdir().unwrap();
    for data in all_dtypes() {
        for shape in [vec![6], vec![2, 3], vec![1, 2, 3, 1]] {
            let a = NpyArray::new(shape.clone(), data.clone()).unwrap();
            let p = dir.path().join(format!("{}.npy", data.dtype().code()));
            write_npy(&p, &a).unwrap();
            assert_eq!(read_npy(&p).unwrap(), a);
            let bytes = std::fs::read(&p).unwrap();
            let h = parse_header(&p, &bytes).unwrap();
            assert_eq!(h.data_offset % 64, 0, "data must be 64-byte aligned");
            assert_eq!(h.version, (1, 0));
        }
    }
    // Only the final files remain: no temporary files left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

#[test]
fn huge_header_uses_version_2() {
    // 30,000 dimensions of size 1 do not fit a 64 KiB header.
    let shape = vec![1usize; 30_000];
    let a = NpyArray::new(shape, NpyData::U8(vec![9])).unwrap();
    let bytes = npy_bytes(&a).unwrap();
    assert_eq!(bytes[6], 2);
    assert_eq!(read_npy_bytes(Path::new("big.npy"), &bytes).unwrap(), a);
}

#[test]
fn shape_mismatch_is_refused() {
    let err = NpyArray::new(vec![2, 2], NpyData::F32(vec![1.0; 3])).unwrap_err();
    assert!(matches!(err, DataError::InvalidArgument(_)));
    let bad = NpyArray {
        shape: vec![5],
        data: NpyData::U8(vec![1]),
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.npy");
    assert!(write_npy(&p, &bad).is_err());
    assert!(!p.exists(), "a failed write leaves no file");
}

#[test]
fn write_into_missing_folder_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("no/such/dir/x.npy");
    let a = NpyArray::new(vec![1], NpyData::U8(vec![1])).unwrap();
    let err = write_npy(&p, &a).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }) && err.to_string().contains("x.npy"));
}

#[test]
fn npz_from_numpy() {
    let arrays = read_npz(fixture("two.npz")).unwrap();
    assert_eq!(arrays.len(), 2);
    assert_eq!(arrays[0].0, "images");
    assert_eq!(arrays[0].1.shape, vec![2, 3, 4]);
    assert_eq!(arrays[0].1.data.to_f32(), arange());
    assert_eq!(arrays[1].0, "labels");
    assert_eq!(arrays[1].1.data, NpyData::I64(vec![0, 1]));
    let c = read_npz(fixture("compressed.npz")).unwrap();
    assert_eq!(c[0].0, "arr_0");
    assert_eq!(c[0].1.data.to_f32(), arange());
    assert_eq!(c[1].0, "arr_1");
    assert_eq!(c[1].1.shape, vec![5, 7]);
    assert_eq!(c[1].1.data.to_f32(), vec![1.0; 35]);
}

#[test]
fn npz_round_trip_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("out.npz");
    let a = NpyArray::new(vec![3], NpyData::F32(vec![1.0, 2.0, 3.0])).unwrap();
    let b = NpyArray::new(vec![2, 2], NpyData::I64(vec![1, 2, 3, 4])).unwrap();
    write_npz(&p, &[("a", &a), ("b", &b)]).unwrap();
    let back = read_npz(&p).unwrap();
    assert_eq!(back, vec![("a".to_owned(), a), ("b".to_owned(), b)]);

    // Not a zip at all.
    std::fs::write(&p, b"garbage").unwrap();
    let err = read_npz(&p).unwrap_err();
    assert!(err.to_string().contains("out.npz"), "{err}");
    // A truncated archive.
    let bytes = std::fs::read(fixture("two.npz")).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    assert!(read_npz(&p).is_err());
    // An archive whose member is an unsupported .npy names the member.
    let obj = std::fs::read(fixture("object.npy")).unwrap();
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut zw = zip::ZipWriter::new(&mut buf);
        zw.start_file("weird.npy", zip::write::SimpleFileOptions::default())
            .unwrap();
        zw.write_all(&obj).unwrap();
        zw.finish().unwrap();
    }
    std::fs::write(&p, buf.into_inner()).unwrap();
    let err = read_npz(&p).unwrap_err();
    assert!(matches!(err, DataError::UnsupportedDtype { .. }), "{err:?}");
    assert!(err.to_string().contains("out.npz:weird.npy"), "{err}");
}

#[test]
fn streaming_reads_match_whole_reads() {
    let a = read_npy(fixture("arange_be_f8.npy")).unwrap();
    let mut f = NpyFile::open(fixture("arange_be_f8.npy")).unwrap();
    for (start, count) in [(0, 24), (0, 1), (23, 1), (7, 10), (12, 0)] {
        assert_eq!(
            f.read_elements(start, count).unwrap().to_f32(),
            a.data.to_f32()[start..start + count].to_vec()
        );
    }
    assert!(matches!(
        f.read_elements(20, 5),
        Err(DataError::InvalidArgument(_))
    ));
}

/// Files we write load in NumPy (required under CI, where numpy is installed).
#[test]
fn numpy_reads_what_we_write() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 with numpy is required under CI"
        );
        eprintln!("skipped: python3 with numpy not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut script = String::from("import numpy as np\n");
    for (i, data) in all_dtypes().into_iter().enumerate() {
        let a = NpyArray::new(vec![2, 3], data.clone()).unwrap();
        let p = dir.path().join(format!("{i}.npy"));
        write_npy(&p, &a).unwrap();
        let values: Vec<String> = a
            .data
            .to_f32()
            .iter()
            .map(|v| format!("{v:?}").replace("inf", "float('inf')"))
            .collect();
        script.push_str(&format!(
            "a = np.load({:?})\nassert a.shape == (2, 3) and a.dtype.str.endswith({:?}), (a.shape, a.dtype)\n\
             assert np.array_equal(a.astype(np.float32).ravel(), np.array([{}], dtype=np.float32)), a\n",
            p.display().to_string(),
            data.dtype().code(),
            values.join(", ")
        ));
    }
    let npz = dir.path().join("x.npz");
    let a = NpyArray::new(vec![2], NpyData::F32(vec![1.0, 2.0])).unwrap();
    write_npz(&npz, &[("first", &a)]).unwrap();
    script.push_str(&format!(
        "z = np.load({:?})\nassert list(z.keys()) == ['first'] and z['first'].tolist() == [1.0, 2.0]\n",
        npz.display().to_string()
    ));
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "numpy refused our files:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Reference for Fortran → C order: element at C index (i0, ..., in-1) is the F-order
    /// element at offset sum_k i_k * prod_{j<k} shape[j].
    fn reference_f_to_c(src: &[u32], shape: &[usize]) -> Vec<u32> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|c| {
                let mut rem = c;
                let mut idx = vec![0; shape.len()];
                for k in (0..shape.len()).rev() {
                    idx[k] = rem % shape[k];
                    rem /= shape[k];
                }
                let mut off = 0;
                let mut stride = 1;
                for k in 0..shape.len() {
                    off += idx[k] * stride;
                    stride *= shape[k];
                }
                src[off]
            })
            .collect()
    }

    proptest! {
        #[test]
        fn fortran_to_c_matches_reference(shape in proptest::collection::vec(1usize..5, 0..5)) {
            let n: usize = shape.iter().product();
            let src: Vec<u32> = (0..n as u32).collect();
            prop_assert_eq!(fortran_to_c(&src, &shape), reference_f_to_c(&src, &shape));
        }

        #[test]
        fn write_then_read_is_identity(
            shape in proptest::collection::vec(0usize..4, 0..4),
            which in 0usize..12,
            seed in any::<u64>(),
        ) {
            let n: usize = shape.iter().product();
            let mut rng = crate::dataset::SplitMix64::new(seed);
            let mut bits = || rng.next_u64();
            let data = match which {
                0 => NpyData::Bool((0..n).map(|_| bits() & 1 == 1).collect()),
                1 => NpyData::U8((0..n).map(|_| bits() as u8).collect()),
                2 => NpyData::I8((0..n).map(|_| bits() as i8).collect()),
                3 => NpyData::U16((0..n).map(|_| bits() as u16).collect()),
                4 => NpyData::I16((0..n).map(|_| bits() as i16).collect()),
                5 => NpyData::U32((0..n).map(|_| bits() as u32).collect()),
                6 => NpyData::I32((0..n).map(|_| bits() as i32).collect()),
                7 => NpyData::U64((0..n).map(|_| bits()).collect()),
                8 => NpyData::I64((0..n).map(|_| bits() as i64).collect()),
                9 => NpyData::F16((0..n).map(|_| f16::from_bits(bits() as u16 & 0x7bff)).collect()),
                10 => NpyData::F32((0..n).map(|_| f32::from_bits(bits() as u32 & 0x7f7f_ffff)).collect()),
                _ => NpyData::F64((0..n).map(|_| f64::from_bits(bits() & 0x7fef_ffff_ffff_ffff)).collect()),
            };
            let a = NpyArray::new(shape, data).unwrap();
            let bytes = npy_bytes(&a).unwrap();
            prop_assert_eq!(read_npy_bytes(Path::new("p.npy"), &bytes).unwrap(), a);
        }

        /// Arbitrary bytes, and valid files with arbitrary corruption, give a result or an
        /// error, never a panic.
        #[test]
        fn garbage_never_panics(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..300),
            keep_magic in any::<bool>(),
        ) {
            if keep_magic && bytes.len() >= 10 {
                bytes[..8].copy_from_slice(b"\x93NUMPY\x01\x00");
            }
            let _ = read_npy_bytes(Path::new("g.npy"), &bytes);
            let _ = crate::idx::read_idx_bytes(Path::new("g.idx"), &bytes);
            if bytes.len() >= 4 {
                let mut idx = bytes.clone();
                let ndims = idx[3] % 4;
                idx[..4].copy_from_slice(&[0, 0, 0x08, ndims]);
                let _ = crate::idx::read_idx_bytes(Path::new("g.idx"), &idx);
            }
        }

        #[test]
        fn corrupted_valid_file_never_panics(pos in 0usize..224, value in any::<u8>(), cut in 0usize..225) {
            let mut bytes = std::fs::read(fixture("arange_le_f4.npy")).unwrap();
            bytes[pos] = value;
            bytes.truncate(cut);
            let _ = read_npy_bytes(Path::new("c.npy"), &bytes);
        }
    }
}
