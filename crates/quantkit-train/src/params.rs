//! The parameter store: every trainable tensor and buffer of a model, with its gradient.

use crate::tensor::Tensor;

/// One named tensor of a model.
#[derive(Clone, Debug)]
pub struct Param {
    /// ONNX initializer name, e.g. `conv1.weight`.
    pub name: String,
    /// Current value.
    pub value: Tensor,
    /// Accumulated gradient (same shape; zero when not trainable).
    pub grad: Tensor,
    /// Updated by the optimizer (false for BatchNorm running statistics).
    pub trainable: bool,
    /// Receives weight decay (conv/linear weights; not biases or BatchNorm parameters).
    pub decay: bool,
}

/// Index of a [`Param`] in its [`ParamStore`].
pub type ParamId = usize;

/// All parameters of a model, in creation order.
#[derive(Clone, Debug, Default)]
pub struct ParamStore {
    params: Vec<Param>,
}

impl ParamStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tensor and returns its id.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        value: Tensor,
        trainable: bool,
        decay: bool,
    ) -> ParamId {
        let grad = Tensor::zeros(value.shape());
        self.params.push(Param {
            name: name.into(),
            value,
            grad,
            trainable,
            decay,
        });
        self.params.len() - 1
    }

    /// Parameter `id`.
    pub fn get(&self, id: ParamId) -> &Param {
        &self.params[id]
    }

    /// Parameter `id`, mutable.
    pub fn get_mut(&mut self, id: ParamId) -> &mut Param {
        &mut self.params[id]
    }

    /// All parameters.
    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.params.iter()
    }

    /// All parameters, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Param> {
        self.params.iter_mut()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Number of trainable scalars.
    pub fn num_trainable(&self) -> usize {
        self.params
            .iter()
            .filter(|p| p.trainable)
            .map(|p| p.value.len())
            .sum()
    }

    /// Sets every gradient to zero.
    pub fn zero_grad(&mut self) {
        for p in &mut self.params {
            p.grad.data_mut().fill(0.0);
        }
    }
}
