use super::*;
use crate::npy::write_npz;
use crate::source::{open_data_for, DataSource, OpenOptions};

fn spec(name: &str, dtype: DType, dims: &[Option<usize>]) -> InputSpec {
    InputSpec {
        name: name.into(),
        dtype: Some(dtype),
        dims: Some(dims.to_vec()),
    }
}

/// The voice-activity interface: audio f32 [batch, 4], state f32 [2, batch, 3], rate i64 [].
fn vad_specs() -> Vec<InputSpec> {
    vec![
        spec("audio", DType::F32, &[None, Some(4)]),
        spec("state", DType::F32, &[Some(2), None, Some(3)]),
        spec("sr", DType::I64, &[]),
    ]
}

fn f32s(shape: &[usize], from: usize) -> NpyArray {
    let n: usize = shape.iter().product();
    NpyArray::new(
        shape.to_vec(),
        NpyData::F32((from..from + n).map(|v| v as f32).collect()),
    )
    .unwrap()
}

fn i64s(shape: &[usize], v: Vec<i64>) -> NpyArray {
    NpyArray::new(shape.to_vec(), NpyData::I64(v)).unwrap()
}

fn npz(dir: &Path, arrays: &[(&str, &NpyArray)]) -> PathBuf {
    let p = dir.join("feeds.npz");
    write_npz(&p, arrays).unwrap();
    p
}

fn open(p: &Path, specs: &[InputSpec]) -> Result<NamedFeeds> {
    Ok(NamedFeeds::open(p, specs, None)?.expect("names match"))
}

fn err(p: &Path, specs: &[InputSpec]) -> String {
    open(p, specs).unwrap_err().to_string()
}

fn all_runs(f: &mut NamedFeeds, batch: usize, limit: Option<usize>) -> Vec<Run> {
    f.runs(batch, limit)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap()
}

#[test]
fn stacked_arrays_are_cut_on_each_inputs_batch_axis_and_scalars_repeat() {
    let dir = tempfile::tempdir().unwrap();
    // 5 samples: audio on axis 0, state on axis 1 (its first free dimension).
    let audio = f32s(&[5, 4], 0);
    let state = f32s(&[2, 5, 3], 100);
    let sr = i64s(&[], vec![16000]);
    let p = npz(
        dir.path(),
        &[("audio", &audio), ("state", &state), ("sr", &sr)],
    );
    let mut f = open(&p, &vad_specs()).unwrap();
    assert_eq!(
        f.layout(),
        Layout::Stacked {
            samples: 5,
            chunk: None
        }
    );
    let runs = all_runs(&mut f, 2, None);
    assert_eq!(
        runs.iter().map(|r| r.samples).collect::<Vec<_>>(),
        [2, 2, 1]
    );
    let r1 = &runs[1];
    assert_eq!(r1.arrays[0].0, "audio");
    assert_eq!(r1.arrays[0].1, f32s(&[2, 4], 8));
    // state[:, 2:4, :] of the stacked array.
    let want: Vec<f32> = [106, 107, 108, 109, 110, 111, 121, 122, 123, 124, 125, 126]
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(r1.arrays[1].1.shape, vec![2, 2, 3]);
    assert_eq!(r1.arrays[1].1.data, NpyData::F32(want));
    // The int64 scalar is passed through unchanged, with its dtype.
    assert_eq!(r1.arrays[2].1, sr);
    // A limit counts samples.
    let runs = all_runs(&mut f, 2, Some(3));
    assert_eq!(runs.iter().map(|r| r.samples).collect::<Vec<_>>(), [2, 1]);
}

#[test]
fn per_run_arrays_may_differ_in_shape_and_plain_arrays_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let specs = vec![
        spec("ids", DType::I64, &[None, None]),
        spec("mask", DType::I64, &[None, None]),
    ];
    let ids0 = i64s(&[2, 3], vec![1, 2, 3, 4, 5, 6]);
    let ids1 = i64s(&[1, 5], vec![7, 8, 9, 10, 11]);
    let mask0 = i64s(&[2, 3], vec![1; 6]);
    let mask1 = i64s(&[1, 5], vec![1, 1, 1, 0, 0]);
    let p = npz(
        dir.path(),
        &[
            ("ids__0", &ids0),
            ("ids__1", &ids1),
            ("mask__1", &mask1),
            ("mask__0", &mask0),
        ],
    );
    let mut f = open(&p, &specs).unwrap();
    assert_eq!(f.layout(), Layout::PerRun { runs: 2 });
    let runs = all_runs(&mut f, 100, None);
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].arrays[0].1, ids1);
    assert_eq!(runs[1].arrays[1].1, mask1);
    assert_eq!(runs[0].samples, 2);
    assert_eq!(runs[1].samples, 1);
    // A limit counts runs.
    assert_eq!(all_runs(&mut f, 100, Some(1)).len(), 1);

    // A plain array next to per-run arrays is fed to every run.
    let vad = vad_specs();
    let p = npz(
        dir.path(),
        &[
            ("audio__0", &f32s(&[1, 4], 0)),
            ("audio__1", &f32s(&[3, 4], 0)),
            ("state__0", &f32s(&[2, 1, 3], 0)),
            ("state__1", &f32s(&[2, 3, 3], 0)),
            ("sr", &i64s(&[], vec![8000])),
        ],
    );
    let mut f = open(&p, &vad).unwrap();
    let runs = all_runs(&mut f, 1, None);
    assert_eq!(runs[1].samples, 3);
    assert_eq!(runs[0].arrays[2].1, i64s(&[], vec![8000]));
    assert_eq!(runs[1].arrays[2].1, i64s(&[], vec![8000]));
}

#[test]
fn float_inputs_are_converted_and_scaled_integer_inputs_never() {
    let dir = tempfile::tempdir().unwrap();
    let specs = vec![
        spec("img", DType::F32, &[None, Some(2)]),
        spec("bytes", DType::U8, &[None, Some(2)]),
    ];
    let raw = NpyArray::new(vec![2, 2], NpyData::U8(vec![0, 51, 255, 1])).unwrap();
    let specs = [specs, vec![spec("keep", DType::Bool, &[None, Some(2)])]].concat();
    let keep = NpyArray::new(vec![2, 2], NpyData::Bool(vec![true, false, false, true])).unwrap();
    let p = npz(
        dir.path(),
        &[("img", &raw), ("bytes", &raw), ("keep", &keep)],
    );
    let mut f = open(&p, &specs).unwrap();
    let r = all_runs(&mut f, 8, None).remove(0);
    // bool into a bool input: unchanged.
    assert_eq!(r.arrays[2].1, keep);
    // ...and a bool input refuses u8 0/1: no silent conversion.
    let p = npz(
        dir.path(),
        &[("img", &raw), ("bytes", &raw), ("keep", &raw)],
    );
    let e = err(&p, &specs);
    assert!(
        e.contains("input `keep` is bool, the array is uint8"),
        "{e}"
    );
    // u8 into a float input: pixel/255, as a single-input .npz is read.
    assert_eq!(
        r.arrays[0].1.data,
        NpyData::F32(vec![0.0, 51.0 / 255.0, 1.0, 1.0 / 255.0])
    );
    // u8 into a uint8 input: the bytes themselves.
    assert_eq!(r.arrays[1].1, raw);
}

#[test]
fn a_fixed_batch_model_takes_whole_batches_of_a_stacked_array() {
    let dir = tempfile::tempdir().unwrap();
    let specs = vec![spec("x", DType::F32, &[Some(2), Some(3)])];
    let p = npz(dir.path(), &[("x", &f32s(&[6, 3], 0))]);
    let mut f = open(&p, &specs).unwrap();
    assert_eq!(
        f.layout(),
        Layout::Stacked {
            samples: 6,
            chunk: Some(2)
        }
    );
    // The model's batch size wins over the caller's.
    let runs = all_runs(&mut f, 100, None);
    assert_eq!(runs.len(), 3);
    assert!(runs.iter().all(|r| r.arrays[0].1.shape == [2, 3]));
    assert_eq!(runs[2].arrays[0].1, f32s(&[2, 3], 12));
    // A limit takes whole batches only: 5 samples are two runs.
    assert_eq!(all_runs(&mut f, 100, Some(5)).len(), 2);
    // 7 samples are not whole batches of 2: refused rather than silently dropping one.
    let p = npz(dir.path(), &[("x", &f32s(&[7, 3], 0))]);
    let e = err(&p, &specs);
    assert!(e.contains("input `x`") && e.contains("multiple"), "{e}");
    // An array of exactly the declared shape is one run.
    let p = npz(dir.path(), &[("x", &f32s(&[2, 3], 0))]);
    let mut f = open(&p, &specs).unwrap();
    assert_eq!(all_runs(&mut f, 100, None).len(), 1);
}

#[test]
fn errors_name_the_input_and_the_array() {
    let dir = tempfile::tempdir().unwrap();
    let vad = vad_specs();
    let audio = f32s(&[5, 4], 0);
    let state = f32s(&[2, 5, 3], 0);
    let sr = i64s(&[], vec![16000]);

    // Missing input.
    let p = npz(dir.path(), &[("audio", &audio), ("state", &state)]);
    let e = err(&p, &vad);
    assert!(e.contains("no array for input `sr`"), "{e}");

    // Unknown array name (a typo).
    let p = npz(
        dir.path(),
        &[
            ("audio", &audio),
            ("state", &state),
            ("sr", &sr),
            ("sate", &state),
        ],
    );
    let e = err(&p, &vad);
    assert!(
        e.contains("`sate`") && e.contains("name no model input"),
        "{e}"
    );

    // Wrong dtype: the rate as int32 for an int64 input.
    let sr32 = NpyArray::new(vec![], NpyData::I32(vec![16000])).unwrap();
    let p = npz(
        dir.path(),
        &[("audio", &audio), ("state", &state), ("sr", &sr32)],
    );
    let e = err(&p, &vad);
    assert!(e.contains("input `sr` is int64, the array is int32"), "{e}");
    assert!(e.contains("feeds.npz:sr.npy"), "{e}");

    // Wrong rank: the state without its leading axis.
    let p = npz(
        dir.path(),
        &[("audio", &audio), ("state", &f32s(&[5, 3], 0)), ("sr", &sr)],
    );
    let e = err(&p, &vad);
    assert!(
        e.contains("input `state`") && e.contains("rank 2 against the model's rank 3"),
        "{e}"
    );

    // Wrong fixed dimension.
    let p = npz(
        dir.path(),
        &[("audio", &f32s(&[5, 5], 0)), ("state", &state), ("sr", &sr)],
    );
    let e = err(&p, &vad);
    assert!(
        e.contains("input `audio`") && e.contains("axis 1 is 5, the model fixes it to 4"),
        "{e}"
    );

    // Disagreeing sample counts.
    let p = npz(
        dir.path(),
        &[
            ("audio", &audio),
            ("state", &f32s(&[2, 4, 3], 0)),
            ("sr", &sr),
        ],
    );
    let e = err(&p, &vad);
    assert!(
        e.contains("disagree on the number of samples") && e.contains("`audio` stacks 5"),
        "{e}"
    );

    // Disagreeing run counts, and a gap in the runs.
    let one = f32s(&[1, 4], 0);
    let st1 = f32s(&[2, 1, 3], 0);
    let p = npz(
        dir.path(),
        &[
            ("audio__0", &one),
            ("audio__1", &one),
            ("state__0", &st1),
            ("sr", &sr),
        ],
    );
    let e = err(&p, &vad);
    assert!(e.contains("disagree on the number of runs"), "{e}");
    let p = npz(
        dir.path(),
        &[
            ("audio__0", &one),
            ("audio__2", &one),
            ("state", &st1),
            ("sr", &sr),
        ],
    );
    let e = err(&p, &vad);
    assert!(e.contains("skip `audio__1`"), "{e}");

    // Per-run arrays that disagree on samples inside one run.
    let p = npz(
        dir.path(),
        &[
            ("audio__0", &f32s(&[2, 4], 0)),
            ("state__0", &st1),
            ("sr", &sr),
        ],
    );
    let mut f = open(&p, &vad).unwrap();
    let e = f
        .runs(1, None)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("run 0: arrays disagree on the number of samples"),
        "{e}"
    );
}

#[test]
fn an_archive_naming_no_input_opens_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let specs = vec![spec("input", DType::F32, &[None, Some(4)])];
    let p = npz(
        dir.path(),
        &[("batch0", &f32s(&[3, 4], 0)), ("batch1", &f32s(&[2, 4], 0))],
    );
    assert!(NamedFeeds::open(&p, &specs, None).unwrap().is_none());
    let src = open_data_for(&p, &specs, &OpenOptions::default()).unwrap();
    assert!(matches!(src, DataSource::Arrays(_)));
    // Named after the input: the named scheme.
    let p = npz(dir.path(), &[("input", &f32s(&[3, 4], 0))]);
    let src = open_data_for(&p, &specs, &OpenOptions::default()).unwrap();
    assert!(matches!(src, DataSource::Named(_)));
}

#[test]
fn extracted_copies_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let p = npz(
        dir.path(),
        &[
            ("audio", &f32s(&[5, 4], 0)),
            ("state", &f32s(&[2, 5, 3], 0)),
            ("sr", &i64s(&[], vec![1])),
        ],
    );
    let f = open(&p, &vad_specs()).unwrap();
    let copies: Vec<PathBuf> = f
        .slots
        .iter()
        .filter_map(|s| match &s.source {
            Source::Stacked(st) => Some(st._tmp.0.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(copies.len(), 2);
    assert!(copies.iter().all(|c| c.exists()));
    drop(f);
    assert!(copies.iter().all(|c| !c.exists()));
}

#[test]
fn samples_picked_one_by_one_follow_each_inputs_batch_axis() {
    let dir = tempfile::tempdir().unwrap();
    let audio = f32s(&[5, 4], 0);
    let state = f32s(&[2, 5, 3], 100);
    let sr = i64s(&[], vec![16000]);
    let p = npz(
        dir.path(),
        &[("audio", &audio), ("state", &state), ("sr", &sr)],
    );
    let mut f = open(&p, &vad_specs()).unwrap();
    // Samples 1 and 3 (every second, as `quantize --target --held-out 0.5` holds out),
    // then 4 alone.
    let runs: Vec<Run> = f
        .runs_of(vec![vec![1, 3], vec![4]])
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(runs.iter().map(|r| r.samples).collect::<Vec<_>>(), [2, 1]);
    let audio_13: Vec<f32> = [4, 5, 6, 7, 12, 13, 14, 15]
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(runs[0].arrays[0].1.data, NpyData::F32(audio_13));
    // state[:, [1, 3], :]: rows 1 and 3 of each of the two outer slices.
    let state_13: Vec<f32> = [103, 104, 105, 109, 110, 111, 118, 119, 120, 124, 125, 126]
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(runs[0].arrays[1].1.shape, vec![2, 2, 3]);
    assert_eq!(runs[0].arrays[1].1.data, NpyData::F32(state_13));
    assert_eq!(runs[0].arrays[2].1, sr);
    assert_eq!(runs[1].arrays[0].1, f32s(&[1, 4], 16));
    // A sample beyond the file is an error naming it.
    let e = f.runs_of(vec![vec![5]]).err().unwrap().to_string();
    assert!(e.contains("sample 5 of 5"), "{e}");
}
