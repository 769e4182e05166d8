//! Reverse-mode automatic differentiation on a tape.
//!
//! Every operation applied through [`Tape::apply`] is recorded with its inputs and output;
//! [`Tape::backward`] walks the records in reverse and asks each [`Op`] for the gradients of
//! its inputs. An op is any type implementing [`Op`], so new nodes (fake-quant with a
//! straight-through estimator for QAT, observers) plug in without touching the tape.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::error::{Result, TrainError};
use crate::tensor::Tensor;

/// A differentiable operation.
///
/// `forward` may keep what `backward` needs (argmax indices, batch statistics); the tape owns
/// the op until the step ends. `backward` receives the same inputs, the output it produced and
/// the gradient of the loss with respect to that output, and returns one entry per input:
/// `Some(grad)` (same shape as the input) where `needs[i]` is true, `None` elsewhere.
pub trait Op: Send + Any {
    /// Short name for error messages (ONNX op type where there is one).
    fn name(&self) -> &'static str;
    /// Computes the output.
    fn forward(&mut self, inputs: &[&Tensor]) -> Result<Tensor>;
    /// Gradients of the inputs given the gradient of the output.
    fn backward(
        &self,
        inputs: &[&Tensor],
        output: &Tensor,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>>;
    /// Upcast for [`Tape::op`] (read back state such as batch statistics).
    fn as_any(&self) -> &dyn Any;
}

pub(crate) static PROFILE_ON: AtomicBool = AtomicBool::new(false);
static PROFILE: Mutex<BTreeMap<&'static str, [f64; 3]>> = Mutex::new(BTreeMap::new());

/// Turns per-op timing on or off (off by default; costs two clock reads per op when on).
pub fn set_profiling(on: bool) {
    PROFILE_ON.store(on, Ordering::Relaxed);
}

/// Accumulated `(op name, forward seconds, backward seconds, calls)` since the last call,
/// then resets the counters.
pub fn take_profile() -> Vec<(&'static str, f64, f64, usize)> {
    let mut p = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let out = p
        .iter()
        .map(|(k, v)| (*k, v[0], v[1], v[2] as usize))
        .collect();
    p.clear();
    out
}

pub(crate) fn record(name: &'static str, slot: usize, t: Instant) {
    let dt = t.elapsed().as_secs_f64();
    let mut p = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let e = p.entry(name).or_insert([0.0; 3]);
    e[slot] += dt;
    if slot == 0 {
        e[2] += 1.0;
    }
}

/// Handle to a value recorded on a [`Tape`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Var(usize);

impl Var {
    /// Position on the tape.
    pub fn index(self) -> usize {
        self.0
    }
}

struct Node {
    value: Tensor,
    op: Option<Box<dyn Op>>,
    inputs: Vec<usize>,
    requires_grad: bool,
    param: Option<usize>,
}

/// The record of one forward pass.
pub struct Tape {
    nodes: Vec<Node>,
    record: bool,
}

impl Default for Tape {
    fn default() -> Self {
        Self::new()
    }
}

impl Tape {
    /// A tape that records for [`Tape::backward`].
    pub fn new() -> Self {
        Self {
            nodes: Vec::new(),
            record: true,
        }
    }

    /// A tape for inference: ops are dropped after their forward and nothing needs a gradient.
    pub fn inference() -> Self {
        Self {
            nodes: Vec::new(),
            record: false,
        }
    }

    fn push(&mut self, value: Tensor, requires_grad: bool, param: Option<usize>) -> Var {
        self.nodes.push(Node {
            value,
            op: None,
            inputs: Vec::new(),
            requires_grad: requires_grad && self.record,
            param,
        });
        Var(self.nodes.len() - 1)
    }

    /// A value that needs no gradient (data, labels, constants).
    pub fn constant(&mut self, value: Tensor) -> Var {
        self.push(value, false, None)
    }

    /// A leaf that needs a gradient (read it back from [`Gradients::get`]).
    pub fn variable(&mut self, value: Tensor) -> Var {
        self.push(value, true, None)
    }

    /// A trainable parameter with its index in the caller's parameter store; its gradient is
    /// listed by [`Gradients::params`].
    pub fn param(&mut self, value: Tensor, id: usize) -> Var {
        self.push(value, true, Some(id))
    }

    /// Runs `op` on `inputs` and records it.
    pub fn apply<O: Op>(&mut self, mut op: O, inputs: &[Var]) -> Result<Var> {
        let value = {
            let ins: Vec<&Tensor> = inputs.iter().map(|v| &self.nodes[v.0].value).collect();
            let t = Instant::now();
            let y = op.forward(&ins)?;
            if PROFILE_ON.load(Ordering::Relaxed) {
                record(op.name(), 0, t);
            }
            y
        };
        let requires_grad = self.record && inputs.iter().any(|v| self.nodes[v.0].requires_grad);
        self.nodes.push(Node {
            value,
            op: if self.record {
                Some(Box::new(op))
            } else {
                None
            },
            inputs: inputs.iter().map(|v| v.0).collect(),
            requires_grad,
            param: None,
        });
        Ok(Var(self.nodes.len() - 1))
    }

    /// The value of `v`.
    pub fn value(&self, v: Var) -> &Tensor {
        &self.nodes[v.0].value
    }

    /// Takes the value of `v` out of the tape (leaving an empty tensor).
    pub fn take_value(&mut self, v: Var) -> Tensor {
        std::mem::take(&mut self.nodes[v.0].value)
    }

    /// The op that produced `v`, if it is of type `O` (and the tape records).
    pub fn op<O: Op>(&self, v: Var) -> Option<&O> {
        self.nodes[v.0]
            .op
            .as_ref()
            .and_then(|o| o.as_any().downcast_ref::<O>())
    }

    /// Number of recorded values.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Back-propagates from `loss` (seeded with ones of its shape) and returns the gradients
    /// of every value that requires one. Gradients of intermediate values are freed as soon as
    /// they have been propagated; leaves keep theirs.
    pub fn backward(&self, loss: Var) -> Result<Gradients> {
        if !self.record {
            return Err(TrainError::Backward(
                "the tape was made for inference".into(),
            ));
        }
        let root = &self.nodes[loss.0];
        if !root.requires_grad {
            return Err(TrainError::Backward(
                "the loss does not depend on anything that requires a gradient".into(),
            ));
        }
        let mut grads: Vec<Option<Tensor>> = (0..self.nodes.len()).map(|_| None).collect();
        grads[loss.0] = Some(Tensor::full(root.value.shape(), 1.0));
        for i in (0..=loss.0).rev() {
            let node = &self.nodes[i];
            let Some(op) = node.op.as_ref() else { continue };
            let Some(g) = grads[i].take() else { continue };
            let ins: Vec<&Tensor> = node.inputs.iter().map(|&j| &self.nodes[j].value).collect();
            let needs: Vec<bool> = node
                .inputs
                .iter()
                .map(|&j| self.nodes[j].requires_grad)
                .collect();
            let t = Instant::now();
            let gin = op.backward(&ins, &node.value, &g, &needs)?;
            if PROFILE_ON.load(Ordering::Relaxed) {
                record(op.name(), 1, t);
            }
            for ((&j, gi), &need) in node.inputs.iter().zip(gin).zip(&needs) {
                let Some(gi) = gi else { continue };
                if !need {
                    continue;
                }
                if gi.shape() != self.nodes[j].value.shape() {
                    return Err(TrainError::Backward(format!(
                        "{} returned a gradient of shape {:?} for an input of shape {:?}",
                        op.name(),
                        gi.shape(),
                        self.nodes[j].value.shape()
                    )));
                }
                match &mut grads[j] {
                    Some(acc) => acc.add_assign(&gi),
                    slot @ None => *slot = Some(gi),
                }
            }
        }
        let params = self
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.param.map(|p| (p, i)))
            .collect();
        Ok(Gradients { grads, params })
    }
}

/// Gradients returned by [`Tape::backward`].
pub struct Gradients {
    grads: Vec<Option<Tensor>>,
    params: Vec<(usize, usize)>,
}

impl Gradients {
    /// Gradient of a leaf (or `None` when it does not influence the loss).
    pub fn get(&self, v: Var) -> Option<&Tensor> {
        self.grads[v.0].as_ref()
    }

    /// `(parameter id, gradient)` for every parameter leaf that received a gradient.
    pub fn params(&self) -> impl Iterator<Item = (usize, &Tensor)> {
        self.params
            .iter()
            .filter_map(|&(p, i)| self.grads[i].as_ref().map(|g| (p, g)))
    }
}
