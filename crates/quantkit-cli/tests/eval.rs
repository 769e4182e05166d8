//! Integration tests of `quantkit eval`, running the built binary on the committed LeNet and
//! Fashion-MNIST sample. Expected numbers are computed here, independently of the command's
//! batching, limit handling and scoring: the whole sample goes through the float executor in
//! one batch and is scored with a plain argmax.

use quantkit_data::npy::{read_npy, NpyArray, NpyData};
use quantkit_graph::{execute, load_model, save_model, Graph, Node, Tensor};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn lenet() -> PathBuf {
    repo().join("models/lenet.onnx")
}

fn sample() -> PathBuf {
    repo().join("data/fashion-mnist-sample")
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quantkit-eval-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Runs `quantkit eval MODEL ARGS...`: (success, stdout, stderr).
fn eval(model: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quantkit"))
        .arg("eval")
        .arg(model)
        .args(args)
        .output()
        .expect("run quantkit eval");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn eval_json(model: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (ok, out, err) = eval(model, &a);
    assert!(ok, "eval failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("missing number {k}: {v}"))
}

/// u8 pixels as the zoo models take them: `p / 255` in f32.
fn pixels(a: NpyArray) -> (Vec<usize>, Vec<f32>) {
    let NpyData::U8(p) = a.data else {
        panic!("expected u8 pixels")
    };
    (a.shape, p.iter().map(|&v| v as f32 / 255.0).collect())
}

/// Top-1 class of every sample, from one forward pass over all of them.
fn predictions(model: &Path, shape: &[usize], x: Vec<f32>) -> Vec<i64> {
    let g = load_model(model).unwrap();
    let input = g.inputs[0].name.clone();
    let out = execute(&g, vec![(input, Tensor::from_f32(shape, x))]).unwrap();
    let y = out[0].1.as_f32().unwrap();
    y.chunks(y.len() / shape[0])
        .map(|row| {
            let mut best = 0;
            for (i, v) in row.iter().enumerate() {
                if *v > row[best] {
                    best = i;
                }
            }
            best as i64
        })
        .collect()
}

fn correct(pred: &[i64], labels: &[i64], n: usize) -> usize {
    pred[..n]
        .iter()
        .zip(&labels[..n])
        .filter(|(p, l)| p == l)
        .count()
}

fn sample_predictions() -> (Vec<i64>, Vec<i64>) {
    let (shape, x) = pixels(read_npy(sample().join("images.npy")).unwrap());
    let labels = read_npy(sample().join("labels.npy"))
        .unwrap()
        .data
        .to_i64()
        .unwrap();
    (predictions(&lenet(), &shape, x), labels)
}

#[test]
fn accuracy_matches_an_independent_count() {
    let (pred, labels) = sample_predictions();
    let data = sample();
    let data = data.to_str().unwrap();
    // Whole sample in batches of 64 (a partial last batch), and a --limit that cuts a batch.
    for (limit, batch) in [(None, "64"), (Some(300), "64"), (Some(1), "100")] {
        let mut args = vec!["--data", data, "--batch", batch];
        let l = limit.map(|l: usize| l.to_string());
        if let Some(l) = &l {
            args.extend(["--limit", l]);
        }
        let v = eval_json(&lenet(), &args);
        let n = limit.unwrap_or(labels.len());
        let expect = correct(&pred, &labels, n);
        assert_eq!(v["metric"], "accuracy", "{v}");
        assert_eq!(v["samples"], n, "{v}");
        assert_eq!(v["correct"], expect, "{v}");
        assert_eq!(f(&v, "value"), expect as f64 / n as f64, "{v}");
    }
}

#[test]
fn text_output_names_the_accuracy() {
    let (ok, out, err) = eval(&lenet(), &["--data", sample().to_str().unwrap()]);
    assert!(ok, "{err}");
    let (pred, labels) = sample_predictions();
    let c = correct(&pred, &labels, labels.len());
    assert!(
        out.contains(&format!("({c} / 1000)")),
        "expected {c} correct in: {out}"
    );
    // stderr is not a terminal here: no progress bar, plain `eval:` lines instead (the
    // last one says how many samples ran); none with -q.
    assert!(!err.contains('\r'), "{err}");
    assert!(err.lines().all(|l| l.starts_with("eval: ")), "{err}");
    assert!(err.contains("evaluated 1000 samples"), "{err}");
    let (ok, _, err) = eval(&lenet(), &["--data", sample().to_str().unwrap(), "-q"]);
    assert!(ok && err.is_empty(), "{err}");
}

#[test]
fn reference_against_itself_agrees_exactly() {
    let model = lenet();
    let v = eval_json(
        &model,
        &[
            "--data",
            sample().to_str().unwrap(),
            "--limit",
            "200",
            "--reference",
            model.to_str().unwrap(),
        ],
    );
    for k in [
        "metric",
        "value",
        "samples",
        "reference_value",
        "agreement",
        "cosine",
        "sqnr_db",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    assert_eq!(f(&v, "agreement"), 1.0, "{v}");
    assert!((f(&v, "cosine") - 1.0).abs() < 1e-12, "{v}");
    assert_eq!(f(&v, "max_abs_diff"), 0.0, "{v}");
    // Identical outputs have an infinite SQNR, which JSON writes as null.
    assert!(v["sqnr_db"].is_null(), "{v}");
    assert_eq!(v["reference_value"], v["value"], "{v}");
}

/// LeNet with its logits multiplied by `factor`: the same classes, outputs `factor` times
/// the reference's.
fn scaled_lenet(factor: f32, file: &str) -> PathBuf {
    let mut g = load_model(lenet()).unwrap();
    let out = g.outputs[0].name.clone();
    g.initializers
        .insert("factor".into(), Tensor::scalar_f32(factor));
    g.nodes
        .push(Node::new("scale", "Mul", &[&out, "factor"], &["scaled"]));
    g.outputs[0].name = "scaled".into();
    let p = tmp(file);
    save_model(&g, &p).unwrap();
    p
}

#[test]
fn reference_metrics_follow_the_definitions() {
    // Logits 1.5× the reference's: error = 0.5·ref, so SQNR = 10·log10(1/0.25) = 6.02 dB,
    // cosine 1 and the same top-1 classes.
    let model = scaled_lenet(1.5, "lenet_x1.5.onnx");
    let v = eval_json(
        &model,
        &[
            "--data",
            sample().to_str().unwrap(),
            "--limit",
            "150",
            "--batch",
            "64",
            "--reference",
            lenet().to_str().unwrap(),
        ],
    );
    assert_eq!(f(&v, "agreement"), 1.0, "{v}");
    assert!((f(&v, "cosine") - 1.0).abs() < 1e-9, "{v}");
    let sqnr = 10.0 * 4f64.log10();
    assert!((f(&v, "sqnr_db") - sqnr).abs() < 1e-4, "{v}");
    assert_eq!(v["reference_value"], v["value"], "{v}");
}

/// A one-node model `y = x · c` on `[N, 1, 28, 28]` (an "autoencoder" with a known error).
fn mul_model(c: f32, file: &str) -> PathBuf {
    let lenet = load_model(lenet()).unwrap();
    let input = lenet.inputs[0].clone();
    let mut output = input.clone();
    output.name = "reconstruction".into();
    let mut g = Graph {
        name: "mul".into(),
        opset_imports: lenet.opset_imports.clone(),
        inputs: vec![input.clone()],
        outputs: vec![output],
        ..Graph::default()
    };
    g.initializers.insert("c".into(), Tensor::scalar_f32(c));
    g.nodes.push(Node::new(
        "mul",
        "Mul",
        &[&input.name, "c"],
        &["reconstruction"],
    ));
    let p = tmp(file);
    save_model(&g, &p).unwrap();
    p
}

#[test]
fn reconstruction_mse_matches_the_definition() {
    let model = mul_model(0.5, "half.onnx");
    let v = eval_json(
        &model,
        &[
            "--data",
            sample().join("images.npy").to_str().unwrap(),
            "--limit",
            "130",
            "--batch",
            "50",
        ],
    );
    // (x − x/2)² = x²/4, over the first 130 images.
    let (shape, x) = pixels(read_npy(sample().join("images.npy")).unwrap());
    let n = 130 * shape[1..].iter().product::<usize>();
    let mse = x[..n]
        .iter()
        .map(|&v| (f64::from(v) / 2.0).powi(2))
        .sum::<f64>()
        / n as f64;
    assert_eq!(v["metric"], "mse", "{v}");
    assert_eq!(v["samples"], 130, "{v}");
    assert!(
        (f(&v, "value") - mse).abs() <= 1e-12 * mse,
        "{} vs {mse}",
        v
    );
    assert!(mse > 0.01, "the sample is not blank: {mse}");
    // The same model as reference: MSE values agree, agreement is for classifiers only.
    let r = eval_json(
        &model,
        &[
            "--data",
            sample().join("images.npy").to_str().unwrap(),
            "--limit",
            "20",
            "--reference",
            model.to_str().unwrap(),
        ],
    );
    assert!(r["agreement"].is_null(), "{r}");
    assert_eq!(r["reference_value"], r["value"], "{r}");
}

fn fails_with(model: &Path, args: &[&str], needles: &[&str]) {
    let (ok, out, err) = eval(model, args);
    assert!(!ok, "expected a failure, got: {out}");
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let images = sample().join("images.npy");
    let labels = sample().join("labels.npy");
    let (images, labels) = (images.to_str().unwrap(), labels.to_str().unwrap());
    // A classifier on unlabelled data.
    fails_with(
        &lenet(),
        &["--data", images],
        &["images.npy", "no labels", "--labels"],
    );
    // Data that does not fit the input: the labels as images.
    fails_with(
        &lenet(),
        &["--data", labels, "--labels", labels],
        &["labels.npy", "input `input`", "lenet.onnx"],
    );
    fails_with(
        &lenet(),
        &["--data", sample().to_str().unwrap(), "--limit", "0"],
        &["--limit 0"],
    );
    fails_with(
        &lenet(),
        &["--data", images, "--split", "train"],
        &["--split", "not an IDX folder"],
    );
    // A model whose output is NaN.
    let nan = mul_model(f32::NAN, "nan.onnx");
    fails_with(
        &nan,
        &["--data", images],
        &["nan.onnx", "`reconstruction`", "NaN"],
    );
    // Reference outputs that do not match the model's.
    fails_with(
        &lenet(),
        &[
            "--data",
            sample().to_str().unwrap(),
            "--reference",
            mul_model(1.0, "identity.onnx").to_str().unwrap(),
        ],
        &["reference", "identity.onnx", "shape"],
    );
}

/// The installed Fashion-MNIST IDX folder ($QUANTKIT_FASHION_MNIST, else the Debian
/// package's), or None with the reason printed; missing under CI=true is a failure.
fn fashion_mnist() -> Option<PathBuf> {
    let dir = std::env::var_os("QUANTKIT_FASHION_MNIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/datasets/fashion-mnist"));
    if dir.join("t10k-images-idx3-ubyte.gz").is_file() {
        return Some(dir);
    }
    assert!(
        !ci(),
        "CI=true but Fashion-MNIST is missing at {}",
        dir.display()
    );
    eprintln!(
        "skipping: Fashion-MNIST not found at {} (install dataset-fashion-mnist or set \
         QUANTKIT_FASHION_MNIST)",
        dir.display()
    );
    None
}

fn idx_check(limit: usize) {
    let Some(dir) = fashion_mnist() else { return };
    let images = quantkit_data::idx::read_idx(dir.join("t10k-images-idx3-ubyte.gz")).unwrap();
    let labels = quantkit_data::idx::read_idx(dir.join("t10k-labels-idx1-ubyte.gz"))
        .unwrap()
        .data
        .to_i64()
        .unwrap();
    let (shape, x) = pixels(images);
    let per: usize = shape[1..].iter().product();
    // The zoo's NCHW input: [N, 1, 28, 28].
    let pred = predictions(
        &lenet(),
        &[limit, 1, shape[1], shape[2]],
        x[..limit * per].to_vec(),
    );
    let expect = correct(&pred, &labels, limit);
    let v = eval_json(
        &lenet(),
        &[
            "--data",
            dir.to_str().unwrap(),
            "--limit",
            &limit.to_string(),
        ],
    );
    assert_eq!(v["samples"], limit, "{v}");
    assert_eq!(v["correct"], expect, "{v}");
    assert!(
        f(&v, "value") > 0.88,
        "LeNet should stay near its 91.83 %: {v}"
    );
}

#[test]
fn fashion_mnist_idx_test_split_first_2000() {
    idx_check(2000);
}

#[test]
#[ignore = "the full 10k test set takes ~30 s in the test profile; run with --ignored"]
fn fashion_mnist_idx_full_test_split() {
    idx_check(10_000);
}
