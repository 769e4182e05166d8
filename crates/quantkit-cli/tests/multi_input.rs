//! Models with several inputs and non-float inputs (issue 16), end to end through the
//! `quantkit` binary: calibration data that feeds every input from one `.npz` (arrays named
//! after the inputs), static QDQ and `--dynamic` quantization, and the quantized model run
//! by quantkit (float executor and integer engine) and by ONNX Runtime, against the float
//! model. The three models are written by `tests/data/multi_input/gen_models.py`:
//! - `vad.onnx`: audio f32 [batch, 64], state f32 [2, batch, 16], sample rate int64 [];
//! - `text.onnx`: token ids and attention mask, int64 [batch, seq], Gather of an embedding;
//! - `bytes.onnx`: int32 bytes [batch, 32], one-hot by Equal/Cast, Conv, Gemm.
//!
//! Agreement criterion: output cosine ≥ 0.99 between the int8 model and the float model,
//! and ≥ 0.999 between two runners of the same int8 model (quantkit's float executor, its
//! integer engine, ONNX Runtime). Why these: int8 activations (per-tensor u8) and weights
//! (per-channel i8) of these small layers carry a relative error of about 1 % per layer,
//! which keeps cosine well above 0.99 on outputs of a few layers; two runners of the same
//! quantized graph differ only where a requantization rounds the other way (one code of
//! one activation), far below that.

use quantkit_data::npy::{read_npy, write_npz, NpyArray, NpyData};
use quantkit_graph::Tensor;
use std::path::{Path, PathBuf};
use std::process::Command;

fn models() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/multi_input"
    ))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quantkit-multi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn quantkit(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .args(args)
        .output()
        .expect("run quantkit");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A fixed pseudo-random sequence in [0, 1) (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    fn f32s(&mut self, shape: &[usize], lo: f32, hi: f32) -> NpyArray {
        let n: usize = shape.iter().product();
        let v = (0..n).map(|_| lo + (hi - lo) * self.next()).collect();
        NpyArray::new(shape.to_vec(), NpyData::F32(v)).unwrap()
    }
    fn below(&mut self, k: usize) -> usize {
        ((self.next() * k as f32) as usize).min(k - 1)
    }
}

fn vad_arrays(rng: &mut Rng, n: usize, rate: i64) -> Vec<(String, NpyArray)> {
    vec![
        ("audio".into(), rng.f32s(&[n, 64], -1.0, 1.0)),
        ("state".into(), rng.f32s(&[2, n, 16], -0.5, 0.5)),
        (
            "sr".into(),
            NpyArray::new(vec![], NpyData::I64(vec![rate])).unwrap(),
        ),
    ]
}

/// Token ids and a mask of `n` sequences of `seq` tokens, each with 1..=seq real tokens.
fn text_arrays(rng: &mut Rng, n: usize, seq: usize, suffix: &str) -> Vec<(String, NpyArray)> {
    let mut ids = Vec::with_capacity(n * seq);
    let mut mask = Vec::with_capacity(n * seq);
    for _ in 0..n {
        let len = 1 + rng.below(seq);
        for t in 0..seq {
            ids.push(if t < len { rng.below(100) as i64 } else { 0 });
            mask.push(i64::from(t < len));
        }
    }
    vec![
        (
            format!("ids{suffix}"),
            NpyArray::new(vec![n, seq], NpyData::I64(ids)).unwrap(),
        ),
        (
            format!("mask{suffix}"),
            NpyArray::new(vec![n, seq], NpyData::I64(mask)).unwrap(),
        ),
    ]
}

fn bytes_arrays(rng: &mut Rng, n: usize) -> Vec<(String, NpyArray)> {
    let v = (0..n * 32).map(|_| rng.below(256) as i32).collect();
    vec![(
        "bytes".into(),
        NpyArray::new(vec![n, 32], NpyData::I32(v)).unwrap(),
    )]
}

fn save(path: &Path, arrays: &[(String, NpyArray)]) {
    let refs: Vec<(&str, &NpyArray)> = arrays.iter().map(|(n, a)| (n.as_str(), a)).collect();
    write_npz(path, &refs).unwrap();
}

fn tensors(arrays: &[(String, NpyArray)]) -> Vec<(String, Tensor)> {
    arrays
        .iter()
        .map(|(n, a)| (n.clone(), quantkit_ptq::to_tensor(a.clone()).unwrap()))
        .collect()
}

/// Every output of `model` on the float executor, as f32, in output order.
fn run_float(model: &Path, feeds: &[(String, Tensor)]) -> Vec<Vec<f32>> {
    let g = quantkit_graph::load_model(model).unwrap();
    let out = quantkit_graph::execute(&g, feeds.to_vec()).unwrap();
    out.iter().map(|(_, t)| t.to_f32_vec()).collect()
}

/// Every output of `model` on the integer engine.
fn run_engine(model: &Path, feeds: &[(String, Tensor)]) -> Vec<Vec<f32>> {
    let g = quantkit_graph::load_model(model).unwrap();
    let plan = quantkit_engine::compile(&g, &quantkit_engine::EngineOptions::default()).unwrap();
    let out = plan.run(feeds.to_vec()).unwrap();
    let names: Vec<_> = g.outputs.iter().map(|o| o.name.clone()).collect();
    names
        .iter()
        .map(|n| out.iter().find(|(m, _)| m == n).unwrap().1.to_f32_vec())
        .collect()
}

fn have_ort() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import onnxruntime, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "CI=true but python3 with onnxruntime+numpy is not available"
        );
        eprintln!("skipping the ONNX Runtime check: python3 with onnxruntime+numpy not found");
    }
    ok
}

/// Every output of `model` in ONNX Runtime (all optimisations: QDQ groups fused into its
/// int8 kernels) on the arrays of `npz`.
fn run_ort(model: &Path, npz: &Path, dir: &Path) -> Vec<Vec<f32>> {
    let out = dir.join(format!(
        "{}.ort",
        model.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::create_dir_all(&out).unwrap();
    let script = format!(
        "import numpy as np, onnxruntime as ort\n\
         o = ort.SessionOptions(); o.intra_op_num_threads = 1\n\
         s = ort.InferenceSession(r'{}', o, providers=['CPUExecutionProvider'])\n\
         feeds = dict(np.load(r'{}'))\n\
         for i, y in enumerate(s.run(None, feeds)):\n\
         \x20   np.save(r'{}/%d.npy' % i, y.astype(np.float32))\n",
        model.display(),
        npz.display(),
        out.display()
    );
    let o = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "onnxruntime failed on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut outs = Vec::new();
    for i in 0.. {
        let p = out.join(format!("{i}.npy"));
        if !p.exists() {
            break;
        }
        outs.push(read_npy(&p).unwrap().data.to_f32());
    }
    outs
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += f64::from(x) * f64::from(y);
        aa += f64::from(x) * f64::from(x);
        bb += f64::from(y) * f64::from(y);
    }
    ab / (aa.sqrt() * bb.sqrt()).max(1e-30)
}

fn assert_close(what: &str, a: &[Vec<f32>], b: &[Vec<f32>], min_cos: f64) {
    assert_eq!(a.len(), b.len(), "{what}: number of outputs");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        let c = cosine(x, y);
        assert!(c >= min_cos, "{what}: output {k} cosine {c:.6} < {min_cos}");
    }
}

/// Quantizes `model` (static QDQ on `calib`, and `--dynamic`), then checks every runner
/// against the float model on `eval` (an `.npz` of stacked arrays named after the inputs).
/// Returns the static summary.
fn quantize_and_compare(
    name: &str,
    calib: &Path,
    eval_arrays: &[(String, NpyArray)],
    dir: &Path,
) -> serde_json::Value {
    let model = models().join(format!("{name}.onnx"));
    let eval = dir.join(format!("{name}.eval.npz"));
    save(&eval, eval_arrays);
    let feeds = tensors(eval_arrays);
    let float = run_float(&model, &feeds);
    let ort = have_ort();
    if ort {
        // The float model itself: ONNX Runtime and quantkit read the inputs alike.
        assert_close(
            &format!("{name}: float, ORT vs quantkit"),
            &run_ort(&model, &eval, dir),
            &float,
            0.999_999,
        );
    }
    let q = dir.join(format!("{name}.qdq.onnx"));
    let (ok, stdout, err) = quantkit(&[
        "quantize",
        s(&model),
        "--calib",
        s(calib),
        "--batch-size",
        "16",
        "-o",
        s(&q),
        "--json",
    ]);
    assert!(ok, "{name}: quantize failed: {err}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let dq = dir.join(format!("{name}.dyn.onnx"));
    let (ok, _, err) = quantkit(&["quantize", s(&model), "--dynamic", "-o", s(&dq)]);
    assert!(ok, "{name}: quantize --dynamic failed: {err}");
    for (label, qm) in [("static", &q), ("dynamic", &dq)] {
        let qf = run_float(qm, &feeds);
        let qe = run_engine(qm, &feeds);
        assert_close(&format!("{name} {label}: int8 vs float"), &qf, &float, 0.99);
        assert_close(
            &format!("{name} {label}: engine vs float executor"),
            &qe,
            &qf,
            0.999,
        );
        if ort {
            let qo = run_ort(qm, &eval, dir);
            assert_close(&format!("{name} {label}: ORT vs quantkit"), &qo, &qf, 0.999);
        }
    }
    summary
}

fn quantized_names(summary: &serde_json::Value) -> Vec<String> {
    summary["quantized"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn three_inputs_float_audio_float_state_int64_rate() {
    let dir = scratch("vad");
    let mut rng = Rng(0x16_0001);
    let calib = dir.join("calib.npz");
    save(&calib, &vad_arrays(&mut rng, 48, 16000));
    let summary = quantize_and_compare("vad", &calib, &vad_arrays(&mut rng, 32, 16000), &dir);
    assert_eq!(summary["calibration_samples"], 48);
    let q = quantized_names(&summary);
    for n in ["in_matmul", "rec_matmul", "out_gemm"] {
        assert!(q.contains(&n.to_string()), "{n} not quantized: {q:?}");
    }
    // The 8 kHz branch of the Equal/Where select, on the same models.
    let model = models().join("vad.onnx");
    let feeds = tensors(&vad_arrays(&mut rng, 8, 8000));
    let float = run_float(&model, &feeds);
    let q16 = run_float(&dir.join("vad.qdq.onnx"), &feeds);
    assert_close("vad at 8 kHz: int8 vs float", &q16, &float, 0.99);

    // `run` feeds every input from one .npz, on both executors.
    let out = dir.join("run");
    let eval = dir.join("vad.eval.npz");
    for engine in ["float", "int8"] {
        let (ok, _, err) = quantkit(&[
            "run",
            s(&dir.join("vad.qdq.onnx")),
            "--input",
            s(&eval),
            "--engine",
            engine,
            "-o",
            s(&out),
        ]);
        assert!(ok, "run --engine {engine}: {err}");
        let prob = read_npy(out.join("prob.npy")).unwrap();
        assert_eq!(prob.shape, vec![32, 2]);
    }
    // ...and NAME=FILE with an int64 .npy next to the .npz for the other inputs.
    let sr = dir.join("sr.npy");
    quantkit_data::npy::write_npy(
        &sr,
        &NpyArray::new(vec![], NpyData::I64(vec![8000])).unwrap(),
    )
    .unwrap();
    let av = dir.join("av.npz");
    let arrays = vad_arrays(&mut rng, 3, 0);
    save(&av, &arrays[..2]);
    let (ok, _, err) = quantkit(&[
        "run",
        s(&model),
        "--input",
        &format!("sr={}", s(&sr)),
        "--input",
        s(&av),
        "-o",
        s(&out),
    ]);
    assert!(ok, "run with sr=FILE and an .npz: {err}");
    let mut feeds = tensors(&arrays[..2]);
    feeds.push((
        "sr".into(),
        Tensor::new(vec![], quantkit_graph::Data::I64(vec![8000])).unwrap(),
    ));
    let want = run_float(&model, &feeds);
    assert_eq!(
        read_npy(out.join("prob.npy")).unwrap().data.to_f32(),
        want[0]
    );

    // `bench` times the model on the first --batch samples of the named arrays.
    let (ok, stdout, err) = quantkit(&[
        "bench",
        s(&model),
        "--calib",
        s(&calib),
        "--batch",
        "4",
        "--seconds",
        "0.01",
        "--json",
    ]);
    assert!(ok, "bench: {err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["inputs"].as_array().unwrap().len(), 3);
    assert_eq!(v["inputs"][1]["shape"], serde_json::json!([2, 4, 16]));
    assert_eq!(v["inputs"][2]["dtype"], "int64");
}

#[test]
fn int64_token_ids_through_an_embedding_gather() {
    let dir = scratch("text");
    let mut rng = Rng(0x16_0002);
    // Calibration in the per-run layout: three runs of different sequence lengths.
    let mut calib_arrays = Vec::new();
    for (k, (n, seq)) in [(16, 8), (16, 12), (8, 5)].into_iter().enumerate() {
        calib_arrays.extend(text_arrays(&mut rng, n, seq, &format!("__{k}")));
    }
    let calib = dir.join("calib.npz");
    save(&calib, &calib_arrays);
    let eval = text_arrays(&mut rng, 40, 10, "");
    let summary = quantize_and_compare("text", &calib, &eval, &dir);
    // `run` makes one call: three per-run feeds are refused, not silently cut to one.
    let (ok, _, e) = quantkit(&[
        "run",
        s(&models().join("text.onnx")),
        "--input",
        s(&calib),
        "-o",
        s(&dir),
    ]);
    assert!(!ok && e.contains("holds 3 runs"), "run: {e}");
    assert_eq!(summary["calibration_samples"], 40);
    let q = quantized_names(&summary);
    assert!(
        q.contains(&"fc1".to_string()) && q.contains(&"fc2".to_string()),
        "{q:?}"
    );
    // The embedding Gather is not quantized (Gather is not a quantized operator): the ids
    // stay int64, the table float.
    assert!(!q.contains(&"embed".to_string()), "{q:?}");
    let g = quantkit_graph::load_model(dir.join("text.qdq.onnx")).unwrap();
    let embed = g.nodes.iter().find(|n| n.name == "embed").unwrap();
    assert_eq!(embed.inputs[1], "ids", "the ids reach the Gather unchanged");

    // `eval` scores the classifier against labels (here the float model's own top-1).
    let feeds = tensors(&eval);
    let float = &run_float(&models().join("text.onnx"), &feeds)[0];
    let labels: Vec<i64> = float
        .chunks(4)
        .map(|r| (0..4).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap() as i64)
        .collect();
    let lp = dir.join("labels.npy");
    quantkit_data::npy::write_npy(&lp, &NpyArray::new(vec![40], NpyData::I64(labels)).unwrap())
        .unwrap();
    let (ok, stdout, err) = quantkit(&[
        "eval",
        s(&dir.join("text.qdq.onnx")),
        "--data",
        s(&dir.join("text.eval.npz")),
        "--labels",
        s(&lp),
        "--batch",
        "16",
        "--reference",
        s(&models().join("text.onnx")),
        "--json",
    ]);
    assert!(ok, "eval: {err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["samples"], 40);
    assert_eq!(
        v["reference_value"], 1.0,
        "the labels are the float model's top-1"
    );
    assert!(v["cosine"].as_f64().unwrap() >= 0.99, "{v}");

    // `analyze` takes the same named feeds: per-run calibration, stacked evaluation.
    let (ok, stdout, err) = quantkit(&[
        "analyze",
        s(&models().join("text.onnx")),
        "--calib",
        s(&calib),
        "--data",
        s(&dir.join("text.eval.npz")),
        "--top",
        "all",
        "--json",
    ]);
    assert!(ok, "analyze: {err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["samples"], 40);
    let layers: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert!(
        layers.contains(&"fc1") && layers.contains(&"fc2"),
        "{layers:?}"
    );
    // Every propagated error is measured: exact (an infinite SQNR, null in JSON) or above
    // 15 dB (the whole model's output is at about 22 dB on these random weights).
    for l in v["layers"].as_array().unwrap() {
        let db = &l["propagated"]["sqnr_db"];
        assert!(
            db.is_null() || db.as_f64().is_some_and(|d| d > 15.0),
            "{}: {db} dB",
            l["name"]
        );
    }
    assert!(
        v["layers"][0]["propagated"]["sqnr_db"].as_f64().is_some(),
        "{v}"
    );
}

#[test]
fn int32_bytes_classifier_with_an_integer_one_hot() {
    let dir = scratch("bytes");
    let mut rng = Rng(0x16_0003);
    let calib = dir.join("calib.npz");
    save(&calib, &bytes_arrays(&mut rng, 64));
    let summary = quantize_and_compare("bytes", &calib, &bytes_arrays(&mut rng, 32), &dir);
    let q = quantized_names(&summary);
    assert!(
        q.contains(&"conv".to_string()) && q.contains(&"fc".to_string()),
        "{q:?}"
    );
    // Nothing on the integer one-hot path is quantized.
    for n in ["byte_range", "bytes_unsq", "onehot_eq", "onehot_cast"] {
        assert!(!q.contains(&n.to_string()), "{n} quantized: {q:?}");
    }
    // The Unsqueeze of the int32 bytes has an integer form but no float tensor: the summary
    // lists it as left alone, and the quantized graph reads the bytes unchanged.
    let left = summary["left_float"].as_array().unwrap();
    assert!(
        left.iter()
            .any(|f| f["name"] == "bytes_unsq"
                && f["reason"].as_str().unwrap().contains("integer path")),
        "{left:?}"
    );
    let g = quantkit_graph::load_model(dir.join("bytes.qdq.onnx")).unwrap();
    let unsq = g.nodes.iter().find(|n| n.name == "bytes_unsq").unwrap();
    assert_eq!(unsq.inputs[0], "bytes");
    assert!(
        !g.nodes
            .iter()
            .any(|n| n.op_type == "QuantizeLinear" && n.inputs[0].starts_with("bytes")),
        "an integer tensor got a QuantizeLinear"
    );
}

#[test]
fn feeding_errors_name_the_input() {
    let dir = scratch("errors");
    let mut rng = Rng(0x16_0004);
    let model = models().join("vad.onnx");
    let out = dir.join("q.onnx");
    let try_calib = |arrays: &[(String, NpyArray)]| -> String {
        let calib = dir.join("bad.npz");
        save(&calib, arrays);
        let (ok, _, err) = quantkit(&["quantize", s(&model), "--calib", s(&calib), "-o", s(&out)]);
        assert!(!ok, "quantize accepted bad calibration data");
        assert!(!out.exists(), "a failed quantize wrote its output");
        err
    };
    let good = vad_arrays(&mut rng, 8, 16000);
    let e = try_calib(&good[..2]);
    assert!(e.contains("no array for input `sr`"), "missing input: {e}");
    let mut wrong_type = good.clone();
    wrong_type[2].1 = NpyArray::new(vec![], NpyData::F32(vec![16000.0])).unwrap();
    let e = try_calib(&wrong_type);
    assert!(
        e.contains("input `sr` is int64, the array is float32"),
        "dtype: {e}"
    );
    let mut wrong_rank = good.clone();
    wrong_rank[1].1 = rng.f32s(&[8, 16], 0.0, 1.0);
    let e = try_calib(&wrong_rank);
    assert!(
        e.contains("input `state`") && e.contains("rank 2"),
        "rank: {e}"
    );
    let mut unknown = good.clone();
    unknown.push(("audoi".into(), rng.f32s(&[8, 64], 0.0, 1.0)));
    let e = try_calib(&unknown);
    assert!(
        e.contains("`audoi`") && e.contains("name no model input"),
        "unknown: {e}"
    );
    let mut counts = good.clone();
    counts[1].1 = rng.f32s(&[2, 7, 16], 0.0, 1.0);
    let e = try_calib(&counts);
    assert!(
        e.contains("disagree on the number of samples"),
        "counts: {e}"
    );

    // A single-tensor source for a three-input model says what to give instead.
    let npy = dir.join("audio.npy");
    quantkit_data::npy::write_npy(&npy, &good[0].1).unwrap();
    let (ok, _, e) = quantkit(&["quantize", s(&model), "--calib", s(&npy), "-o", s(&out)]);
    assert!(!ok && e.contains("one array per input"), "{e}");
    // A token-id model fed a float .npy.
    let (ok, _, e) = quantkit(&[
        "quantize",
        s(&models().join("bytes.onnx")),
        "--calib",
        s(&npy),
        "-o",
        s(&out),
    ]);
    assert!(
        !ok && e.contains("type int32") && e.contains("`bytes`"),
        "{e}"
    );
    // `eval` and `run` check the same way.
    let (ok, _, e) = quantkit(&["eval", s(&model), "--data", s(&npy)]);
    assert!(
        !ok && e.contains("one array per input") && e.contains("`sr` int64"),
        "eval: {e}"
    );
    let bad = wrong_type_npz(&dir, &good);
    let (ok, _, e) = quantkit(&["run", s(&model), "--input", s(&bad), "-o", s(&dir)]);
    assert!(
        !ok && e.contains("input `sr` is int64, the array is float32"),
        "run: {e}"
    );
}

/// `good` with the sample rate written as float32, in its own archive.
fn wrong_type_npz(dir: &Path, good: &[(String, NpyArray)]) -> PathBuf {
    let mut arrays = good.to_vec();
    arrays[2].1 = NpyArray::new(vec![], NpyData::F32(vec![16000.0])).unwrap();
    let p = dir.join("wrong_type.npz");
    save(&p, &arrays);
    p
}
