//! The reference model zoo for 1×28×28 inputs holding `pixel / 255`. Each model normalises
//! its input itself (Fashion-MNIST mean and standard deviation), so any tool can feed it raw
//! `pixel / 255` values.

use crate::error::{Result, TrainError};
use crate::model::{ConvAttrs, ConvTransposeAttrs, Layer, Model, Node, PoolAttrs, Task};
use crate::params::{ParamId, ParamStore};
use crate::rng::Rng;
use crate::tensor::Tensor;

/// Fashion-MNIST training-set pixel mean (of `pixel / 255`).
pub const FASHION_MEAN: f32 = 0.2860;
/// Fashion-MNIST training-set pixel standard deviation (of `pixel / 255`).
pub const FASHION_STD: f32 = 0.3530;

/// The architectures [`build`] knows.
pub const ARCHS: [&str; 5] = ["lenet", "resnet8", "mobilenet", "mlp", "autoencoder"];

/// Builds architecture `arch` with weights initialised from `seed`.
pub fn build(arch: &str, seed: u64) -> Result<Model> {
    match arch {
        "lenet" => Ok(lenet(seed)),
        "resnet8" => Ok(resnet8(seed)),
        "mobilenet" => Ok(mobilenet(seed)),
        "mlp" => Ok(mlp(seed)),
        "autoencoder" => Ok(autoencoder(seed)),
        other => Err(TrainError::UnknownArch(other.to_string())),
    }
}

/// Appends nodes and parameters with He-uniform initialisation (He et al., 2015:
/// `U(−√(6/fan_in), √(6/fan_in))` for layers followed by ReLU-like activations).
struct Builder {
    params: ParamStore,
    nodes: Vec<Node>,
    rng: Rng,
}

impl Builder {
    fn new(seed: u64) -> Self {
        Self {
            params: ParamStore::new(),
            nodes: Vec::new(),
            rng: Rng::new(seed),
        }
    }

    fn node(&mut self, name: &str, layer: Layer, inputs: &[usize]) -> usize {
        self.nodes.push(Node {
            name: name.to_string(),
            layer,
            inputs: inputs.to_vec(),
        });
        self.nodes.len()
    }

    fn weight(&mut self, name: &str, shape: &[usize], fan_in: usize) -> ParamId {
        let bound = (6.0 / fan_in as f32).sqrt();
        let n = shape.iter().product();
        let data = (0..n).map(|_| self.rng.uniform_in(-bound, bound)).collect();
        self.params.add(
            format!("{name}.weight"),
            Tensor::new(shape, data).expect("sizes agree"),
            true,
            true,
        )
    }

    fn bias(&mut self, name: &str, n: usize) -> ParamId {
        self.params
            .add(format!("{name}.bias"), Tensor::zeros(&[n]), true, false)
    }

    fn normalize(&mut self, x: usize) -> usize {
        self.node(
            "normalize",
            Layer::Normalize {
                mean: FASHION_MEAN,
                std: FASHION_STD,
            },
            &[x],
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        name: &str,
        x: usize,
        cin: usize,
        cout: usize,
        k: usize,
        stride: usize,
        group: usize,
        bias: bool,
    ) -> usize {
        let weight = self.weight(name, &[cout, cin / group, k, k], cin / group * k * k);
        let bias = bias.then(|| self.bias(name, cout));
        let attrs = ConvAttrs::new(stride, k / 2).with_group(group);
        self.node(
            name,
            Layer::Conv {
                attrs,
                weight,
                bias,
            },
            &[x],
        )
    }

    fn bn(&mut self, name: &str, x: usize, c: usize) -> usize {
        let scale = self.params.add(
            format!("{name}.scale"),
            Tensor::full(&[c], 1.0),
            true,
            false,
        );
        let bias = self
            .params
            .add(format!("{name}.bias"), Tensor::zeros(&[c]), true, false);
        let mean = self.params.add(
            format!("{name}.running_mean"),
            Tensor::zeros(&[c]),
            false,
            false,
        );
        let var = self.params.add(
            format!("{name}.running_var"),
            Tensor::full(&[c], 1.0),
            false,
            false,
        );
        self.node(
            name,
            Layer::BatchNorm {
                scale,
                bias,
                mean,
                var,
                eps: 1e-5,
                momentum: 0.1,
            },
            &[x],
        )
    }

    fn act(&mut self, name: &str, layer: Layer, x: usize) -> usize {
        self.node(name, layer, &[x])
    }

    fn linear(&mut self, name: &str, x: usize, fin: usize, fout: usize) -> usize {
        let weight = self.weight(name, &[fout, fin], fin);
        let bias = Some(self.bias(name, fout));
        self.node(name, Layer::Linear { weight, bias }, &[x])
    }

    fn finish(self, arch: &str, task: Task) -> Model {
        Model {
            arch: arch.to_string(),
            task,
            input_shape: [1, 28, 28],
            params: self.params,
            nodes: self.nodes,
        }
    }
}

/// LeNet-style CNN: conv3×3(32) → ReLU → maxpool2 → conv3×3(64) → ReLU → maxpool2 →
/// 3136 → 128 → ReLU → 10. About 420k parameters, ~4.2 M multiply-adds per image.
pub fn lenet(seed: u64) -> Model {
    let mut b = Builder::new(seed);
    let x = b.normalize(0);
    let x = b.conv("conv1", x, 1, 32, 3, 1, 1, true);
    let x = b.act("relu1", Layer::Relu, x);
    let x = b.act("pool1", Layer::MaxPool(PoolAttrs::new(2, 2)), x);
    let x = b.conv("conv2", x, 32, 64, 3, 1, 1, true);
    let x = b.act("relu2", Layer::Relu, x);
    let x = b.act("pool2", Layer::MaxPool(PoolAttrs::new(2, 2)), x);
    let x = b.act("flatten", Layer::Flatten, x);
    let x = b.linear("fc1", x, 64 * 7 * 7, 128);
    let x = b.act("relu3", Layer::Relu, x);
    b.linear("fc2", x, 128, 10);
    b.finish("lenet", Task::Classify { classes: 10 })
}

/// ResNet-8 (He et al., 2016, CIFAR-style): a 3×3 stem (16) and three basic blocks of
/// 16, 32 (stride 2) and 64 (stride 2) channels with BatchNorm, residual `Add` and 1×1
/// projection shortcuts where the shape changes, then global average pooling and 64 → 10.
pub fn resnet8(seed: u64) -> Model {
    let mut b = Builder::new(seed);
    let x = b.normalize(0);
    let x = b.conv("stem.conv", x, 1, 16, 3, 1, 1, false);
    let x = b.bn("stem.bn", x, 16);
    let mut x = b.act("stem.relu", Layer::Relu, x);
    let mut cin = 16;
    for (i, (cout, stride)) in [(16, 1), (32, 2), (64, 2)].into_iter().enumerate() {
        let n = format!("block{}", i + 1);
        let h = b.conv(&format!("{n}.conv1"), x, cin, cout, 3, stride, 1, false);
        let h = b.bn(&format!("{n}.bn1"), h, cout);
        let h = b.act(&format!("{n}.relu1"), Layer::Relu, h);
        let h = b.conv(&format!("{n}.conv2"), h, cout, cout, 3, 1, 1, false);
        let h = b.bn(&format!("{n}.bn2"), h, cout);
        let short = if stride != 1 || cin != cout {
            let s = b.conv(
                &format!("{n}.shortcut.conv"),
                x,
                cin,
                cout,
                1,
                stride,
                1,
                false,
            );
            b.bn(&format!("{n}.shortcut.bn"), s, cout)
        } else {
            x
        };
        let s = b.node(&format!("{n}.add"), Layer::Add, &[h, short]);
        x = b.act(&format!("{n}.relu2"), Layer::Relu, s);
        cin = cout;
    }
    let x = b.act("gap", Layer::GlobalAvgPool, x);
    let x = b.act("flatten", Layer::Flatten, x);
    b.linear("fc", x, 64, 10);
    b.finish("resnet8", Task::Classify { classes: 10 })
}

/// MobileNet-style network (Howard et al., 2017/2019): a 3×3 stem (16) then depthwise 3×3 +
/// pointwise 1×1 blocks, each conv followed by BatchNorm and HardSwish, channels
/// 16 → 32 → 64 (stride 2) → 64 → 128 (stride 2) → 128, global average pooling, 128 → 10.
pub fn mobilenet(seed: u64) -> Model {
    let mut b = Builder::new(seed);
    let x = b.normalize(0);
    let x = b.conv("stem.conv", x, 1, 16, 3, 1, 1, false);
    let x = b.bn("stem.bn", x, 16);
    let mut x = b.act("stem.hswish", Layer::HardSwish, x);
    let mut cin = 16;
    for (i, (cout, stride)) in [(32, 1), (64, 2), (64, 1), (128, 2), (128, 1)]
        .into_iter()
        .enumerate()
    {
        let n = format!("block{}", i + 1);
        let h = b.conv(&format!("{n}.dw"), x, cin, cin, 3, stride, cin, false);
        let h = b.bn(&format!("{n}.dw_bn"), h, cin);
        let h = b.act(&format!("{n}.dw_hswish"), Layer::HardSwish, h);
        let h = b.conv(&format!("{n}.pw"), h, cin, cout, 1, 1, 1, false);
        let h = b.bn(&format!("{n}.pw_bn"), h, cout);
        x = b.act(&format!("{n}.pw_hswish"), Layer::HardSwish, h);
        cin = cout;
    }
    let x = b.act("gap", Layer::GlobalAvgPool, x);
    let x = b.act("flatten", Layer::Flatten, x);
    b.linear("fc", x, 128, 10);
    b.finish("mobilenet", Task::Classify { classes: 10 })
}

/// Multi-layer perceptron 784 → 256 → 128 → 10 with ReLU.
pub fn mlp(seed: u64) -> Model {
    let mut b = Builder::new(seed);
    let x = b.normalize(0);
    let x = b.act("flatten", Layer::Flatten, x);
    let x = b.linear("fc1", x, 784, 256);
    let x = b.act("relu1", Layer::Relu, x);
    let x = b.linear("fc2", x, 256, 128);
    let x = b.act("relu2", Layer::Relu, x);
    b.linear("fc3", x, 128, 10);
    b.finish("mlp", Task::Classify { classes: 10 })
}

/// Convolutional autoencoder: conv3×3(16) → ReLU → maxpool2 → conv3×3(32) → ReLU → maxpool2
/// (32×7×7 code), then ConvTranspose 2×2 stride 2 (16) → ReLU → ConvTranspose 2×2 stride 2
/// (1) → Sigmoid, reconstructing `pixel / 255` in [0, 1].
pub fn autoencoder(seed: u64) -> Model {
    let mut b = Builder::new(seed);
    let x = b.normalize(0);
    let x = b.conv("enc1", x, 1, 16, 3, 1, 1, true);
    let x = b.act("enc1_relu", Layer::Relu, x);
    let x = b.act("enc1_pool", Layer::MaxPool(PoolAttrs::new(2, 2)), x);
    let x = b.conv("enc2", x, 16, 32, 3, 1, 1, true);
    let x = b.act("enc2_relu", Layer::Relu, x);
    let x = b.act("enc2_pool", Layer::MaxPool(PoolAttrs::new(2, 2)), x);
    let deconv = |b: &mut Builder, name: &str, x: usize, cin: usize, cout: usize| {
        // ConvTranspose weight is [C_in, C_out, kh, kw]; each output pixel sees one tap per input channel.
        let weight = b.weight(name, &[cin, cout, 2, 2], cin);
        let bias = Some(b.bias(name, cout));
        b.node(
            name,
            Layer::ConvTranspose {
                attrs: ConvTransposeAttrs::new(2),
                weight,
                bias,
            },
            &[x],
        )
    };
    let x = deconv(&mut b, "dec1", x, 32, 16);
    let x = b.act("dec1_relu", Layer::Relu, x);
    let x = deconv(&mut b, "dec2", x, 16, 1);
    b.act("output", Layer::Sigmoid, x);
    b.finish("autoencoder", Task::Reconstruct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_arch_maps_a_batch_to_the_right_shape() {
        for arch in ARCHS {
            let m = build(arch, 1).unwrap();
            let x = Tensor::full(&[2, 1, 28, 28], 0.5);
            let y = m.infer(x).unwrap();
            let want: &[usize] = match m.task {
                Task::Classify { classes } => &[2, classes],
                Task::Reconstruct => &[2, 1, 28, 28],
            };
            assert_eq!(y.shape(), want, "{arch}");
            assert!(y.data().iter().all(|v| v.is_finite()), "{arch}");
        }
        assert!(matches!(build("vgg", 0), Err(TrainError::UnknownArch(_))));
    }
}
