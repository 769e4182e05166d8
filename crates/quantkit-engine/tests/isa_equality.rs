//! Every instruction set gives the integer engine bit-identical outputs on real models
//! (issue 15): the zoo models of `models/` (QDQ, QOperator and dynamic forms) and the real
//! models of `../shared/models` (MTCNN P/R/O-Net, PP-OCR classifier).
//!
//! `quantkit_kernels::dispatch::isa()` reads `QUANTKIT_ISA` once per process, so the test
//! quantizes every model once, saves the quantized models and their inputs to a temporary
//! folder, and then re-runs this test binary once per ISA (`QUANTKIT_ISA=scalar` and every
//! supported member of `Isa::ALL`), filtered to the ignored test [`isa_equality_child`].
//! Each child compiles and runs every saved model with both requantization modes and
//! writes the raw output bytes; the parent asserts they are identical to scalar's.

mod common;

use common::{repo, shared};
use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_engine::{compile, EngineOptions, RequantMode};
use quantkit_graph::{load_model, save_model, Data, Graph, Tensor};
use quantkit_kernels::dispatch::{self, Isa};
use quantkit_ptq::{quantize_dynamic, quantize_static, to_qoperator, PtqConfig, QdqOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Folder of saved models and inputs, set by the parent for its children.
const CHILD_DIR: &str = "QUANTKIT_ISA_EQUALITY_DIR";

/// The first `n` samples of a data source as one batch tensor.
fn first(path: &Path, n: usize) -> Tensor {
    let mut d = open_data(path, &OpenOptions::default()).unwrap();
    let b = d
        .batches(&BatchOptions {
            batch_size: n,
            limit: Some(n),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    Tensor::from_f32(&b.shape, b.data)
}

/// Static QDQ quantization calibrated on the first `calib` samples of `data`.
fn qdq(g: Graph, data: &Path, calib: usize, qdq: QdqOptions) -> Graph {
    let mut d = open_data(data, &OpenOptions::default()).unwrap();
    let config = PtqConfig {
        calib_samples: Some(calib),
        qdq,
        ..Default::default()
    };
    quantize_static(g, &mut d, &config, &mut |_, _| {})
        .unwrap()
        .0
}

/// Raw little-endian bytes of a tensor's elements (f32 by bit pattern).
fn element_bytes(t: &Tensor) -> Vec<u8> {
    match &t.data {
        Data::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::U8(v) => v.clone(),
        Data::I8(v) => v.iter().map(|&x| x as u8).collect(),
        Data::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Data::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => t
            .to_f64_vec()
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    }
}

/// Writes named tensors as `name \t dtype \t shape \t nbytes \n` + raw bytes each.
fn encode(tensors: &[(String, Tensor)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, t) in tensors {
        let bytes = element_bytes(t);
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        out.extend(
            format!(
                "{name}\t{:?}\t{}\t{}\n",
                t.dtype,
                shape.join(","),
                bytes.len()
            )
            .bytes(),
        );
        out.extend(bytes);
    }
    out
}

/// Reads [`encode`]'s format back as `(header, raw bytes)` pairs.
fn decode_raw(mut b: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let nl = b.iter().position(|&c| c == b'\n').unwrap();
        let header = String::from_utf8(b[..nl].to_vec()).unwrap();
        let n: usize = header.rsplit('\t').next().unwrap().parse().unwrap();
        out.push((header, b[nl + 1..nl + 1 + n].to_vec()));
        b = &b[nl + 1 + n..];
    }
    out
}

/// Reads f32 inputs written by [`encode`].
fn decode_inputs(b: &[u8]) -> Vec<(String, Tensor)> {
    decode_raw(b)
        .into_iter()
        .map(|(header, bytes)| {
            let f: Vec<&str> = header.split('\t').collect();
            assert_eq!(f[1], "F32", "{header}");
            let shape: Vec<usize> = f[2].split(',').map(|d| d.parse().unwrap()).collect();
            let v = bytes
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            (f[0].to_string(), Tensor::from_f32(&shape, v))
        })
        .collect()
}

/// Saves a quantized model and its inputs for the children.
fn save_case(dir: &Path, name: &str, g: &Graph, inputs: Vec<Tensor>) {
    save_model(g, dir.join(format!("{name}.onnx"))).unwrap();
    assert_eq!(g.inputs.len(), inputs.len(), "{name}");
    let named: Vec<(String, Tensor)> = g
        .inputs
        .iter()
        .map(|i| i.name.clone())
        .zip(inputs)
        .collect();
    std::fs::write(dir.join(format!("{name}.in")), encode(&named)).unwrap();
}

/// Quantizes every model and saves it with its inputs; returns the case names.
fn build_cases(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut add = |name: &str, g: &Graph, inputs: Vec<Tensor>| {
        save_case(dir, name, g, inputs);
        names.push(name.to_string());
    };
    // The zoo on the committed Fashion-MNIST sample: five images (an odd batch, so
    // vector tails are hit), lenet also one image (the latency path).
    let sample = repo().join("data/fashion-mnist-sample");
    let x5 = first(&sample, 5);
    for m in ["lenet", "resnet8", "mobilenet", "mlp", "autoencoder"] {
        let float = load_model(repo().join(format!("models/{m}.onnx"))).unwrap();
        let q = qdq(float.clone(), &sample, 32, QdqOptions::default());
        add(&format!("{m}.qdq"), &q, vec![x5.clone()]);
        if m == "lenet" {
            add("lenet.qdq.batch1", &q, vec![first(&sample, 1)]);
            let signed = QdqOptions {
                signed_activations: true,
                ..QdqOptions::default()
            };
            let s8 = qdq(float.clone(), &sample, 32, signed);
            add("lenet.qdq.s8", &s8, vec![x5.clone()]);
        }
        let (qop, _) = to_qoperator(q).unwrap();
        add(&format!("{m}.qoperator"), &qop, vec![x5.clone()]);
        let (dynamic, _) = quantize_dynamic(float, &PtqConfig::default()).unwrap();
        add(&format!("{m}.dynamic"), &dynamic, vec![x5.clone()]);
    }
    // The real models of ../shared/models, calibrated and run on their own inputs.
    let d = shared().join("models");
    let real = [
        ("mtcnn/pnet.onnx", "mtcnn/pnet12_input.npy", 8, "pnet12"),
        ("mtcnn/pnet.onnx", "mtcnn/pnet_input.npy", 1, "pnet.grid"),
        ("mtcnn/rnet.onnx", "mtcnn/rnet_input.npy", 8, "rnet"),
        ("mtcnn/onet.onnx", "mtcnn/onet_input.npy", 8, "onet"),
        (
            "ppocr-cls/ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "ppocr-cls/cls_input.npy",
            3,
            "ppocr-cls",
        ),
    ];
    for (model, input, n, name) in real {
        let (model, input) = (d.join(model), d.join(input));
        if !model.is_file() || !input.is_file() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but {} is missing",
                model.display()
            );
            eprintln!("skipping {name}: {} not found", model.display());
            continue;
        }
        let q = qdq(
            load_model(&model).unwrap(),
            &input,
            16,
            QdqOptions::default(),
        );
        add(name, &q, vec![first(&input, n)]);
    }
    names
}

/// Runs in a child process under the `QUANTKIT_ISA` its parent chose: compiles and runs
/// every saved model and writes `<case>.<requant>.out` and `isa.txt` to its folder.
#[test]
#[ignore = "child process of every_isa_gives_the_engine_bit_identical_outputs"]
fn isa_equality_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    let out = dir.join(dispatch::isa().name());
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("isa.txt"), dispatch::isa().name()).unwrap();
    let names = std::fs::read_to_string(dir.join("cases.txt")).unwrap();
    for name in names.lines() {
        let g = load_model(dir.join(format!("{name}.onnx"))).unwrap();
        let inputs = decode_inputs(&std::fs::read(dir.join(format!("{name}.in"))).unwrap());
        for (mode, tag) in [
            (RequantMode::Float, "float"),
            (RequantMode::FixedPoint, "fixed"),
        ] {
            let opts = EngineOptions {
                requant: mode,
                ..Default::default()
            };
            let plan = compile(&g, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            // A model run wholly as float islands would compare nothing.
            assert!(
                plan.report().iter().any(|n| n.is_integer()),
                "{name}: no node runs as an integer step"
            );
            let y = plan
                .run(inputs.clone())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            std::fs::write(out.join(format!("{name}.{tag}.out")), encode(&y)).unwrap();
        }
    }
}

/// Explains the first difference between two encoded output files.
fn first_difference(want: &[u8], got: &[u8]) -> String {
    let (w, g) = (decode_raw(want), decode_raw(got));
    for ((hw, bw), (hg, bg)) in w.iter().zip(&g) {
        if hw != hg {
            return format!("output header `{hw}` vs `{hg}`");
        }
        if bw != bg {
            let f32s = hw.split('\t').nth(1) == Some("F32");
            let size = if f32s { 4 } else { 1 };
            let differ = bw
                .chunks(size)
                .zip(bg.chunks(size))
                .filter(|(a, b)| a != b)
                .count();
            let i = bw
                .chunks(size)
                .zip(bg.chunks(size))
                .position(|(a, b)| a != b)
                .unwrap();
            let value = |b: &[u8]| -> String {
                let c = &b[i * size..(i + 1) * size];
                if f32s {
                    f32::from_le_bytes(c.try_into().unwrap()).to_string()
                } else {
                    c[0].to_string()
                }
            };
            return format!(
                "output `{hw}`: {differ} elements differ, first at {i}: scalar {} vs {}",
                value(bw),
                value(bg)
            );
        }
    }
    format!("{} outputs vs {}", w.len(), g.len())
}

/// The parent's work folder, removed when the test ends (also by a panic) unless kept.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

#[test]
fn every_isa_gives_the_engine_bit_identical_outputs() {
    let t0 = std::time::Instant::now();
    let work = WorkDir(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("isa_equality.{}", std::process::id())),
    );
    let dir = work.0.clone();
    std::fs::create_dir_all(&dir).unwrap();
    let names = build_cases(&dir);
    std::fs::write(dir.join("cases.txt"), names.join("\n")).unwrap();
    let built = t0.elapsed().as_secs_f64();
    // Scalar first: the reference every SIMD path must equal.
    let isas: Vec<Isa> = Isa::ALL
        .into_iter()
        .filter(|isa| isa.is_supported())
        .collect();
    assert_eq!(isas[0], Isa::Scalar);
    let exe = std::env::current_exe().unwrap();
    for isa in &isas {
        let out = Command::new(&exe)
            .args([
                "isa_equality_child",
                "--exact",
                "--ignored",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, &dir)
            .env("QUANTKIT_ISA", isa.name())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "child under QUANTKIT_ISA={isa} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The child really ran under that ISA (a refused QUANTKIT_ISA falls back silently
        // to the best one, which would make the comparison vacuous).
        let ran = std::fs::read_to_string(dir.join(isa.name()).join("isa.txt"))
            .unwrap_or_else(|e| panic!("child under {isa} wrote no result ({e})"));
        assert_eq!(ran, isa.name());
    }
    let mut failures = Vec::new();
    for name in &names {
        for tag in ["float", "fixed"] {
            let file = format!("{name}.{tag}.out");
            let want = std::fs::read(dir.join("scalar").join(&file)).unwrap();
            for isa in &isas[1..] {
                let got = std::fs::read(dir.join(isa.name()).join(&file)).unwrap();
                if got != want {
                    failures.push(format!(
                        "{name} ({tag} requant) under {isa}: {}",
                        first_difference(&want, &got)
                    ));
                }
            }
        }
    }
    println!(
        "{} cases x 2 requant modes under {:?}: quantized in {built:.1} s, total {:.1} s",
        names.len(),
        isas.iter().map(|i| i.name()).collect::<Vec<_>>(),
        t0.elapsed().as_secs_f64()
    );
    if !failures.is_empty() {
        // Keep the models, inputs and outputs for a look.
        std::mem::forget(work);
        panic!(
            "outputs differ from QUANTKIT_ISA=scalar (files kept in {}):\n{}",
            dir.display(),
            failures.join("\n")
        );
    }
}

/// The format round-trips, so a difference found by the parent is in the outputs.
#[test]
fn encoded_tensors_round_trip() {
    let t = vec![
        (
            "a".to_string(),
            Tensor::from_f32(&[2, 2], vec![1.0, -0.0, f32::MIN, 3.5]),
        ),
        ("b".to_string(), Tensor::from_f32(&[1], vec![7.0])),
    ];
    let e = encode(&t);
    assert_eq!(decode_inputs(&e), t);
    let mut other = t.clone();
    other[0].1 = Tensor::from_f32(&[2, 2], vec![1.0, 0.0, f32::MIN, 3.5]);
    let why = first_difference(&e, &encode(&other));
    assert!(why.contains("1 elements differ, first at 1"), "{why}");
}
