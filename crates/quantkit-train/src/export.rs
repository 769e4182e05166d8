//! ONNX export of zoo models through `quantkit-graph` (opset 17; BatchNorm as
//! `BatchNormalization` in inference mode, the input normalisation as `Sub` + `Div`).

use std::path::Path;

use quantkit_graph::ir::{AttrValue, Dim, Graph, ModelMeta, Node as GNode, ValueInfo};
use quantkit_graph::tensor::{DType, Tensor as GTensor};

use crate::error::{Result, TrainError};
use crate::model::{Layer, Model, Task};

/// ONNX operator set the export targets (HardSwish needs ≥ 14).
pub const OPSET: i64 = 17;

fn ints(v: &[usize]) -> AttrValue {
    AttrValue::Ints(v.iter().map(|&x| x as i64).collect())
}

/// The model as a `quantkit-graph` [`Graph`]: input `input` `[N, C, H, W]`, output `output`
/// (`[N, classes]` logits or the `[N, C, H, W]` reconstruction), every parameter and
/// BatchNorm running statistic as an initializer under its parameter name.
pub fn to_graph(model: &Model) -> Graph {
    let mut g = Graph {
        name: model.arch.clone(),
        opset_imports: vec![(String::new(), OPSET)],
        meta: ModelMeta {
            ir_version: 8,
            producer_name: "quantkit".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            doc_string: format!(
                "quantkit zoo model `{}`; input is pixel/255, NCHW",
                model.arch
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    for p in model.params.iter() {
        g.initializers.insert(
            p.name.clone(),
            GTensor::from_f32(p.value.shape(), p.value.data().to_vec()),
        );
    }
    let pname = |id: usize| model.params.get(id).name.clone();
    let mut value_names = vec!["input".to_string()];
    let last = model.nodes.len().saturating_sub(1);
    for (i, node) in model.nodes.iter().enumerate() {
        let out = if i == last {
            "output".to_string()
        } else {
            node.name.clone()
        };
        let ins: Vec<String> = node
            .inputs
            .iter()
            .map(|&v| value_names[v].clone())
            .collect();
        let mk = |op: &str, inputs: Vec<String>| {
            let mut n = GNode::new(&node.name, op, &[], &[&out]);
            n.inputs = inputs;
            n
        };
        let with_params = |mut v: Vec<String>, w: usize, b: Option<usize>| {
            v.push(pname(w));
            if let Some(b) = b {
                v.push(pname(b));
            }
            v
        };
        match &node.layer {
            Layer::Normalize { mean, std } => {
                let (mn, sn, mid) = (
                    format!("{}.mean", node.name),
                    format!("{}.std", node.name),
                    format!("{}.centered", node.name),
                );
                g.initializers
                    .insert(mn.clone(), GTensor::scalar_f32(*mean));
                g.initializers.insert(sn.clone(), GTensor::scalar_f32(*std));
                let mut sub = GNode::new(&format!("{}.sub", node.name), "Sub", &[], &[&mid]);
                sub.inputs = vec![ins[0].clone(), mn];
                let mut div = GNode::new(&node.name, "Div", &[], &[&out]);
                div.inputs = vec![mid, sn];
                g.nodes.push(sub);
                g.nodes.push(div);
            }
            Layer::Conv {
                attrs,
                weight,
                bias,
            } => {
                let ws = model.params.get(*weight).value.shape();
                g.nodes.push(
                    mk("Conv", with_params(ins, *weight, *bias))
                        .with_attr("kernel_shape", ints(&ws[2..]))
                        .with_attr("strides", ints(&attrs.stride))
                        .with_attr("pads", ints(&attrs.pads))
                        .with_attr("dilations", ints(&attrs.dilation))
                        .with_attr("group", AttrValue::Int(attrs.group as i64)),
                );
            }
            Layer::ConvTranspose {
                attrs,
                weight,
                bias,
            } => {
                let ws = model.params.get(*weight).value.shape();
                g.nodes.push(
                    mk("ConvTranspose", with_params(ins, *weight, *bias))
                        .with_attr("kernel_shape", ints(&ws[2..]))
                        .with_attr("strides", ints(&attrs.stride))
                        .with_attr("pads", ints(&attrs.pads))
                        .with_attr("dilations", ints(&attrs.dilation))
                        .with_attr("output_padding", ints(&attrs.output_padding))
                        .with_attr("group", AttrValue::Int(1)),
                );
            }
            Layer::Linear { weight, bias } => {
                g.nodes.push(
                    mk("Gemm", with_params(ins, *weight, *bias))
                        .with_attr("transB", AttrValue::Int(1)),
                );
            }
            Layer::BatchNorm {
                scale,
                bias,
                mean,
                var,
                eps,
                momentum,
            } => {
                let inputs = vec![
                    ins[0].clone(),
                    pname(*scale),
                    pname(*bias),
                    pname(*mean),
                    pname(*var),
                ];
                // ONNX's momentum weighs the running value: running·m + batch·(1 − m).
                g.nodes.push(
                    mk("BatchNormalization", inputs)
                        .with_attr("epsilon", AttrValue::Float(*eps))
                        .with_attr("momentum", AttrValue::Float(1.0 - momentum)),
                );
            }
            Layer::Relu => g.nodes.push(mk("Relu", ins)),
            Layer::HardSwish => g.nodes.push(mk("HardSwish", ins)),
            Layer::Sigmoid => g.nodes.push(mk("Sigmoid", ins)),
            Layer::MaxPool(a) => g.nodes.push(
                mk("MaxPool", ins)
                    .with_attr("kernel_shape", ints(&a.kernel))
                    .with_attr("strides", ints(&a.stride))
                    .with_attr("pads", ints(&a.pads)),
            ),
            Layer::GlobalAvgPool => g.nodes.push(mk("GlobalAveragePool", ins)),
            Layer::Flatten => g
                .nodes
                .push(mk("Flatten", ins).with_attr("axis", AttrValue::Int(1))),
            Layer::Add => g.nodes.push(mk("Add", ins)),
        }
        value_names.push(out);
    }
    let [c, h, w] = model.input_shape;
    let batch = || Dim::Symbolic("N".into());
    let known = |d: usize| Dim::Known(d);
    let mut input = ValueInfo::new("input", DType::F32, &[1, c, h, w]);
    input.shape = Some(vec![batch(), known(c), known(h), known(w)]);
    let mut output = ValueInfo::new("output", DType::F32, &[1]);
    output.shape = Some(match model.task {
        Task::Classify { classes } => vec![batch(), known(classes)],
        Task::Reconstruct => vec![batch(), known(c), known(h), known(w)],
    });
    g.inputs.push(input);
    g.outputs.push(output);
    g
}

/// Serialised ONNX `ModelProto` bytes of the model.
pub fn export_onnx(model: &Model) -> Vec<u8> {
    use prost::Message;
    quantkit_graph::export_model(&to_graph(model)).encode_to_vec()
}

/// Writes the model as ONNX to `path` (atomically: a failure leaves no partial file).
pub fn save_onnx(model: &Model, path: &Path) -> Result<()> {
    quantkit_graph::save_model(&to_graph(model), path).map_err(|e| TrainError::Export {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::tensor::Tensor;
    use crate::zoo;

    /// The exported graph and its ONNX bytes read back give the same outputs, bit for bit,
    /// on quantkit-graph's float executor (with non-trivial BatchNorm running statistics);
    /// ONNX Runtime is the independent reference (`exported_models_match_onnx_runtime`).
    #[test]
    fn exported_graphs_survive_the_onnx_round_trip() {
        let mut rng = Rng::new(5);
        for arch in zoo::ARCHS {
            let mut model = zoo::build(arch, 3).unwrap();
            for p in model.params.iter_mut() {
                if p.name.ends_with("running_mean") || p.name.ends_with("running_var") {
                    for v in p.value.data_mut() {
                        *v = 0.5 + rng.uniform();
                    }
                }
            }
            let x: Vec<f32> = (0..3 * 784).map(|_| rng.uniform()).collect();
            let want = model
                .infer(Tensor::new(&[3, 1, 28, 28], x.clone()).unwrap())
                .unwrap();
            let graph = to_graph(&model);
            let out = quantkit_graph::execute(
                &graph,
                vec![(
                    "input".into(),
                    GTensor::from_f32(&[3, 1, 28, 28], x.clone()),
                )],
            )
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
            let got = out[0].1.to_f32_vec();
            assert!(got.iter().all(|v| v.is_finite()), "{arch}");
            assert_eq!(out[0].1.shape, want.shape(), "{arch}");
            let scale = want
                .data()
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()))
                .max(1e-6);
            for (g, w) in got.iter().zip(want.data()) {
                assert!(
                    (g - w).abs() <= 1e-5 * scale.max(1.0) * 10.0,
                    "{arch}: {g} vs {w}"
                );
            }
            let bytes = export_onnx(&model);
            let back = quantkit_graph::import_model(
                &quantkit_graph::onnx::decode_model(&bytes, arch).unwrap(),
                arch,
            )
            .unwrap();
            assert_eq!(back.nodes.len(), graph.nodes.len());
            let again = quantkit_graph::execute(
                &back,
                vec![(
                    "input".into(),
                    GTensor::from_f32(&[3, 1, 28, 28], x.clone()),
                )],
            )
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert_eq!(again[0].1.to_f32_vec(), got, "{arch}");
        }
    }

    /// Every exported zoo model runs in ONNX Runtime (Python package) with outputs equal to
    /// `Model::infer` (quantkit-graph's float executor) within 1e-5 of the output's largest magnitude. Skipped with a message
    /// when python3/onnxruntime are missing, except under CI (CI=true), where that fails.
    #[test]
    fn exported_models_match_onnx_runtime() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let have_ort = std::process::Command::new("python3")
            .args(["-c", "import onnxruntime, numpy"])
            .status()
            .is_ok_and(|s| s.success());
        if !have_ort {
            assert!(!ci, "CI needs python3 with onnxruntime and numpy");
            eprintln!("skipped: python3 with onnxruntime and numpy is not available");
            return;
        }
        let dir = std::env::temp_dir().join(format!("quantkit-train-ort-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = Rng::new(11);
        for arch in zoo::ARCHS {
            let mut model = zoo::build(arch, 4).unwrap();
            for p in model.params.iter_mut() {
                if p.name.ends_with("running_mean") || p.name.ends_with("running_var") {
                    for v in p.value.data_mut() {
                        *v = 0.5 + rng.uniform();
                    }
                }
            }
            let x: Vec<f32> = (0..4 * 784).map(|_| rng.uniform()).collect();
            let want = model
                .infer(Tensor::new(&[4, 1, 28, 28], x.clone()).unwrap())
                .unwrap();
            let onnx = dir.join(format!("{arch}.onnx"));
            save_onnx(&model, &onnx).unwrap();
            let xin = dir.join(format!("{arch}.in"));
            let yout = dir.join(format!("{arch}.out"));
            std::fs::write(
                &xin,
                x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
            )
            .unwrap();
            let script = format!(
                "import numpy as np, onnxruntime as ort\n\
                 s = ort.InferenceSession({:?}, providers=['CPUExecutionProvider'])\n\
                 x = np.fromfile({:?}, dtype='<f4').reshape(4, 1, 28, 28)\n\
                 s.run(None, {{'input': x}})[0].astype('<f4').tofile({:?})\n",
                onnx.display().to_string(),
                xin.display().to_string(),
                yout.display().to_string()
            );
            let st = std::process::Command::new("python3")
                .args(["-c", &script])
                .status()
                .unwrap();
            assert!(st.success(), "{arch}: onnxruntime failed");
            let got: Vec<f32> = std::fs::read(&yout)
                .unwrap()
                .chunks(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_eq!(got.len(), want.len(), "{arch}");
            let scale = want.data().iter().fold(0f32, |m, v| m.max(v.abs()));
            let err = got
                .iter()
                .zip(want.data())
                .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
            assert!(
                err <= 1e-5 * scale,
                "{arch}: max |ort - quantkit| = {err}, output scale {scale}"
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
