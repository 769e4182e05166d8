//! Helpers shared by the QOperator and dynamic-quantization tests: the committed sample,
//! top-1 agreement, and running a model in ONNX Runtime through python3.

#![allow(dead_code)]

use quantkit_data::{open_data, BatchOptions, OpenOptions};
use quantkit_graph::{execute, DType, Dim, Graph, Tensor, ValueInfo};
use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

pub fn sample_data() -> quantkit_data::DataSource {
    open_data(
        repo().join("data/fashion-mnist-sample"),
        &OpenOptions::default(),
    )
    .unwrap()
}

/// First `n` samples of the committed Fashion-MNIST sample as one batch.
pub fn sample_batch(n: usize) -> Tensor {
    let mut d = sample_data();
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

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quantkit-ptq-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn run(g: &Graph, input: &str, x: &Tensor) -> Tensor {
    execute(g, vec![(input.into(), x.clone())]).unwrap()[0]
        .1
        .clone()
}

pub fn argmax_rows(v: &[f32], classes: usize) -> Vec<usize> {
    v.chunks(classes)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold((0, f32::MIN), |m, (i, &x)| if x > m.1 { (i, x) } else { m })
                .0
        })
        .collect()
}

pub fn agreement(a: &[usize], b: &[usize]) -> f64 {
    a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / a.len() as f64
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += f64::from(x) * f64::from(y);
        aa += f64::from(x) * f64::from(x);
        bb += f64::from(y) * f64::from(y);
    }
    ab / (aa.sqrt() * bb.sqrt())
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

pub fn write_npy_f32(path: &Path, shape: &[usize], v: &[f32]) {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((header.len() as u16).to_le_bytes());
    b.extend(header.as_bytes());
    for x in v {
        b.extend(x.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

/// Whether python3 with onnxruntime and numpy is available; outside CI a missing one is
/// reported and the caller skips, under CI=true it fails the test.
pub fn have_ort() -> bool {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import onnxruntime, numpy"])
        .output();
    if probe.is_ok_and(|o| o.status.success()) {
        return true;
    }
    assert!(
        !ci(),
        "CI=true but python3 with onnxruntime+numpy is not available"
    );
    eprintln!("skipping the ONNX Runtime check: python3 with onnxruntime+numpy not found");
    false
}

/// Runs `model` in ONNX Runtime (CPU, one thread, all graph optimisations) on `x` and
/// returns output 0 as f32. Call [`have_ort`] first.
pub fn run_ort(model: &Path, input: &str, x: &Tensor) -> Vec<f32> {
    run_ort_with(model, input, x, true)
}

/// [`run_ort`]; without `optimize` ORT runs every node as written (QDQ stays float-exact
/// instead of being fused into its int8 kernels).
pub fn run_ort_with(model: &Path, input: &str, x: &Tensor, optimize: bool) -> Vec<f32> {
    let dir = model.parent().unwrap();
    let stem = format!(
        "{}{}",
        model.file_stem().unwrap().to_string_lossy(),
        if optimize { "" } else { ".noopt" }
    );
    let xin = dir.join(format!("{stem}.in.npy"));
    let xout = dir.join(format!("{stem}.out.bin"));
    write_npy_f32(&xin, &x.shape, &x.to_f32_vec());
    let script = format!(
        "import numpy as np, onnxruntime as ort\n\
         o = ort.SessionOptions(); o.intra_op_num_threads = 1\n\
         o.graph_optimization_level = ort.GraphOptimizationLevel.{}\n\
         s = ort.InferenceSession(r'{}', o, providers=['CPUExecutionProvider'])\n\
         y = s.run(None, {{'{}': np.load(r'{}')}})[0]\n\
         y.astype(np.float32).tofile(r'{}')\n",
        if optimize {
            "ORT_ENABLE_ALL"
        } else {
            "ORT_DISABLE_ALL"
        },
        model.display(),
        input,
        xin.display(),
        xout.display()
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "onnxruntime failed on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read(&xout)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The operator types of `model` after ONNX Runtime's basic and extended graph
/// optimisations (the level that fuses QDQ node groups into its int8 kernels, e.g.
/// `DQ → Conv → Q` into `QLinearConv`), read back from the optimized model ORT writes, in
/// node order. Call [`have_ort`] first.
pub fn ort_optimized_ops(model: &Path) -> Vec<String> {
    let out = model.with_extension("ort-opt.onnx");
    let script = format!(
        "import onnxruntime as ort\n\
         o = ort.SessionOptions(); o.intra_op_num_threads = 1\n\
         o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED\n\
         o.optimized_model_filepath = r'{}'\n\
         ort.InferenceSession(r'{}', o, providers=['CPUExecutionProvider'])\n",
        out.display(),
        model.display(),
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "onnxruntime failed on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let g = quantkit_graph::load_model(&out).unwrap();
    g.nodes.iter().map(|n| n.op_type.clone()).collect()
}

/// An empty opset-13 graph `name` (IR 8) with one input `x` of shape `[N, 1, 28, 28]`, `N`
/// symbolic: the start of every 28×28 test model.
pub fn graph_28x28(name: &str) -> Graph {
    graph_with_input(name, &[1, 1, 28, 28])
}

/// An empty opset-13 graph `name` (IR 8) with one input `x` of shape `shape`, its first
/// axis replaced by a symbolic `N`.
pub fn graph_with_input(name: &str, shape: &[usize]) -> Graph {
    let mut g = Graph {
        name: name.into(),
        opset_imports: vec![(String::new(), 13)],
        ..Default::default()
    };
    g.meta.ir_version = 8;
    let mut vi = ValueInfo::new("x", DType::F32, shape);
    vi.shape.as_mut().unwrap()[0] = Dim::Symbolic("N".into());
    g.inputs.push(vi);
    g
}

/// [`graph_with_input`] with one f32 graph output `output` of unknown shape: the start of
/// the analysis and search test models.
pub fn graph_io(name: &str, shape: &[usize], output: &str) -> Graph {
    let mut g = graph_with_input(name, shape);
    g.outputs.push(ValueInfo {
        name: output.into(),
        dtype: Some(DType::F32),
        onnx_elem_type: DType::F32.onnx_code(),
        shape: None,
    });
    g
}

/// Deterministic pseudo-random values in [-a, a] (an LCG, so the tests need no rand crate).
pub fn rand_vec(n: usize, a: f32, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
        })
        .collect()
}

/// `mixed::search` for `target` with the default options and no progress report.
pub fn search_for(
    setup: &quantkit_ptq::analyze::Setup,
    eval: &quantkit_ptq::mixed::Evaluation,
    target: quantkit_ptq::mixed::Target,
) -> quantkit_ptq::Result<quantkit_ptq::mixed::SearchResult> {
    search_with(
        setup,
        eval,
        target,
        &quantkit_ptq::mixed::SearchOptions::default(),
    )
}

/// `mixed::search` with `opts` and no progress report.
pub fn search_with(
    setup: &quantkit_ptq::analyze::Setup,
    eval: &quantkit_ptq::mixed::Evaluation,
    target: quantkit_ptq::mixed::Target,
    opts: &quantkit_ptq::mixed::SearchOptions,
) -> quantkit_ptq::Result<quantkit_ptq::mixed::SearchResult> {
    quantkit_ptq::mixed::search(setup, eval, target, opts, &mut |_| {})
}
