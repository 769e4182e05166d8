//! What `RNN`, `GRU` and `LSTM` share (not an operator): the attributes (`direction`,
//! `hidden_size`, `activations` with `activation_alpha`/`activation_beta`, `clip`,
//! `layout`), the checked common inputs (`X`, `W`, `R`, `B`, `sequence_lens`, initial
//! states), the time order of each batch entry and the output layouts.
//!
//! Every gate matrix is `gates · hidden_size` rows in the ONNX order of the operator, one
//! block per direction. Products run on [`crate::linalg::sgemm`]: the input projection
//! `X · Wᵀ` once for the whole sequence, the recurrent `H · Rᵀ` once per step for the whole
//! batch. Values are computed in f32 whatever the float type, and cast back.

use super::{input, make, opt_input, OpCtx};
use crate::error::OpError;
use crate::ir::AttrValue;
use crate::linalg::{sgemm, MatRef};
use crate::tensor::{DType, Data, Tensor};

/// Which way the sequence is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// First to last step.
    Forward,
    /// Last to first step.
    Reverse,
    /// Both, the forward pass as direction 0 and the reverse pass as direction 1.
    Bidirectional,
}

impl Direction {
    /// Number of directions (1 or 2).
    pub fn count(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }
    /// Whether direction `d` (0 or 1) reads the sequence backwards.
    pub fn reversed(self, d: usize) -> bool {
        self == Direction::Reverse || (self == Direction::Bidirectional && d == 1)
    }
}

/// One activation function of the `activations` list with its alpha and beta.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// `max(x, 0)`.
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^−x)`.
    Sigmoid,
    /// `alpha · x + beta`.
    Affine(f32, f32),
    /// `x` if `x ≥ 0`, else `alpha · x`.
    LeakyRelu(f32),
    /// `x` if `x > alpha`, else 0.
    ThresholdedRelu(f32),
    /// `alpha · tanh(beta · x)`.
    ScaledTanh(f32, f32),
    /// `clamp(alpha · x + beta, 0, 1)`.
    HardSigmoid(f32, f32),
    /// `x` if `x ≥ 0`, else `alpha · (e^x − 1)`.
    Elu(f32),
    /// `x / (1 + |x|)`.
    Softsign,
    /// `ln(1 + e^x)`.
    Softplus,
}

impl Act {
    /// Applies the function.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Act::Relu => x.max(0.0),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x >= 0.0 {
                    x
                } else {
                    a * (x.exp() - 1.0)
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => {
                // ln(1 + e^x) without overflow for large x.
                if x > 20.0 {
                    x + (-x).exp().ln_1p()
                } else {
                    x.exp().ln_1p()
                }
            }
        }
    }

    /// The function called `name` (case-insensitive, as ONNX Runtime reads it), taking its
    /// alpha and beta from the front of `alphas` / `betas` when it uses them (the lists are
    /// consumed in the order of the activations) or ONNX Runtime's defaults when they run
    /// out.
    fn parse(
        name: &str,
        alphas: &mut std::slice::Iter<f32>,
        betas: &mut std::slice::Iter<f32>,
    ) -> Result<Act, OpError> {
        let mut a = |d: f32| alphas.next().copied().unwrap_or(d);
        Ok(match name.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "affine" => Act::Affine(a(1.0), betas.next().copied().unwrap_or(0.0)),
            "leakyrelu" => Act::LeakyRelu(a(0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(a(1.0)),
            "scaledtanh" => Act::ScaledTanh(a(1.0), betas.next().copied().unwrap_or(1.0)),
            "hardsigmoid" => Act::HardSigmoid(a(0.2), betas.next().copied().unwrap_or(0.5)),
            "elu" => Act::Elu(a(1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            other => {
                return Err(OpError::attr(
                    "activations",
                    format!("unknown activation function {other:?}"),
                ))
            }
        })
    }
}

/// The attributes every recurrent operator has, parsed once.
#[derive(Clone, Debug, PartialEq)]
pub struct RecurrentAttrs {
    /// `direction` (default forward).
    pub direction: Direction,
    /// `hidden_size`, when given (it must then agree with `R`).
    pub hidden_size: Option<usize>,
    /// `activations`, `per_dir` per direction, direction 0 first.
    pub acts: Vec<Act>,
    /// `clip`: the inputs of every activation are clamped to `[−clip, clip]`.
    pub clip: Option<f32>,
    /// `layout` 1: batch first (`X` is `[batch, seq, input]`, `Y` `[batch, seq, dirs,
    /// hidden]`, states `[batch, dirs, hidden]`).
    pub batch_first: bool,
}

impl RecurrentAttrs {
    /// Parses the attributes; `defaults` are the operator's activations for one direction
    /// (`Sigmoid, Tanh, Tanh` for LSTM...).
    pub fn parse(ctx: &OpCtx, defaults: &[&str]) -> Result<RecurrentAttrs, OpError> {
        let node = ctx.node;
        let direction = match node.attr_string("direction", "forward")?.as_str() {
            "forward" => Direction::Forward,
            "reverse" => Direction::Reverse,
            "bidirectional" => Direction::Bidirectional,
            other => {
                return Err(OpError::attr(
                    "direction",
                    format!("expected forward, reverse or bidirectional, got {other:?}"),
                ))
            }
        };
        let hidden_size = match node.attr("hidden_size") {
            None => None,
            Some(_) => match node.attr_int("hidden_size", 0)? {
                h if h > 0 => Some(h as usize),
                h => {
                    return Err(OpError::attr(
                        "hidden_size",
                        format!("must be positive, got {h}"),
                    ))
                }
            },
        };
        let dirs = direction.count();
        let names: Vec<String> = match node.attr("activations") {
            None => (0..dirs)
                .flat_map(|_| defaults.iter().map(|s| s.to_string()))
                .collect(),
            Some(AttrValue::Strings(v)) => v
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect(),
            Some(other) => {
                return Err(OpError::attr(
                    "activations",
                    format!("expected strings, got {other:?}"),
                ))
            }
        };
        if names.len() != defaults.len() * dirs {
            return Err(OpError::attr(
                "activations",
                format!(
                    "expected {} functions ({} per direction), got {}",
                    defaults.len() * dirs,
                    defaults.len(),
                    names.len()
                ),
            ));
        }
        let alphas = node.attr_floats("activation_alpha")?.unwrap_or_default();
        let betas = node.attr_floats("activation_beta")?.unwrap_or_default();
        let (mut ai, mut bi) = (alphas.iter(), betas.iter());
        let acts = names
            .iter()
            .map(|n| Act::parse(n, &mut ai, &mut bi))
            .collect::<Result<Vec<_>, _>>()?;
        let clip = match node.attr("clip") {
            None => None,
            Some(_) => match node.attr_float("clip", 0.0)? {
                c if c > 0.0 => Some(c),
                c => return Err(OpError::attr("clip", format!("must be positive, got {c}"))),
            },
        };
        let batch_first = match node.attr_int("layout", 0)? {
            0 => false,
            1 => true,
            l => return Err(OpError::attr("layout", format!("expected 0 or 1, got {l}"))),
        };
        Ok(RecurrentAttrs {
            direction,
            hidden_size,
            acts,
            clip,
            batch_first,
        })
    }

    /// Activation `k` of direction `d`, with the clip applied to its input.
    pub fn act(&self, d: usize, k: usize, per_dir: usize) -> impl Fn(f32) -> f32 {
        let f = self.acts[d * per_dir + k];
        let clip = self.clip;
        move |x| f.apply(clip.map_or(x, |c| x.clamp(-c, c)))
    }
}

/// Sizes of one recurrent evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Sequence length.
    pub seq: usize,
    /// Batch size.
    pub batch: usize,
    /// Input size.
    pub input: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Number of directions.
    pub dirs: usize,
}

/// The checked common inputs, in f32, in layout 0.
pub struct Common {
    /// Sizes.
    pub dims: Dims,
    /// Element type of `X` (the outputs').
    pub dtype: DType,
    /// `X` as `[seq, batch, input]`.
    pub x: Vec<f32>,
    /// `W`, `[dirs, gates·hidden, input]`.
    pub w: Vec<f32>,
    /// `R`, `[dirs, gates·hidden, hidden]`.
    pub r: Vec<f32>,
    /// `B`, `[dirs, 2·gates·hidden]` (`Wb` then `Rb`; zeros when absent).
    pub b: Vec<f32>,
    /// `sequence_lens`, one per batch entry (`seq` when absent).
    pub lens: Vec<usize>,
}

fn float_input<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Result<&'a Tensor, OpError> {
    let t = input(inputs, i)?;
    if !t.dtype.is_float() {
        return Err(OpError::DType {
            index: i,
            expected: "float".into(),
            got: t.dtype.to_string(),
        });
    }
    Ok(t)
}

fn expect_shape(what: &str, t: &Tensor, want: &[usize]) -> Result<(), OpError> {
    if t.shape != want {
        return Err(OpError::shape(
            format!("{what} of shape {want:?}"),
            &t.shape,
        ));
    }
    Ok(())
}

/// Checks and reads `X, W, R, B, sequence_lens` (inputs 0–4) for an operator with `gates`
/// gate blocks.
pub fn common(
    attrs: &RecurrentAttrs,
    inputs: &[Option<&Tensor>],
    gates: usize,
) -> Result<Common, OpError> {
    let x = float_input(inputs, 0)?;
    let w = float_input(inputs, 1)?;
    let r = float_input(inputs, 2)?;
    if x.rank() != 3 || w.rank() != 3 || r.rank() != 3 {
        return Err(OpError::shape(
            "X, W and R of rank 3",
            (&x.shape, &w.shape, &r.shape),
        ));
    }
    let (seq, batch) = if attrs.batch_first {
        (x.shape[1], x.shape[0])
    } else {
        (x.shape[0], x.shape[1])
    };
    let input_size = x.shape[2];
    let dirs = attrs.direction.count();
    let hidden = r.shape[2];
    if let Some(h) = attrs.hidden_size {
        if h != hidden {
            return Err(OpError::shape(
                format!("R of shape [{dirs}, {}, {h}] (hidden_size {h})", gates * h),
                &r.shape,
            ));
        }
    }
    let gh = gates
        .checked_mul(hidden)
        .ok_or_else(|| OpError::shape("a hidden size that fits in memory", &r.shape))?;
    expect_shape("W", w, &[dirs, gh, input_size])?;
    expect_shape("R", r, &[dirs, gh, hidden])?;
    let b = match opt_input(inputs, 3) {
        Some(b) => {
            expect_shape("B", b, &[dirs, 2 * gh])?;
            b.to_f32_vec()
        }
        None => vec![0.0; dirs * 2 * gh],
    };
    let lens = match opt_input(inputs, 4) {
        Some(l) => {
            if !matches!(l.dtype, DType::I32 | DType::I64) {
                return Err(OpError::DType {
                    index: 4,
                    expected: "int32".into(),
                    got: l.dtype.to_string(),
                });
            }
            expect_shape("sequence_lens", l, &[batch])?;
            l.to_i64_vec()
                .into_iter()
                .map(|v| {
                    usize::try_from(v)
                        .ok()
                        .filter(|&v| v <= seq)
                        .ok_or_else(|| {
                            OpError::Invalid(format!(
                                "sequence_lens value {v} outside [0, {seq}] (sequence length)"
                            ))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        None => vec![seq; batch],
    };
    // Every output is a few multiples of these; X, W and R already hold seq·batch·input,
    // gates·hidden·input and gates·hidden² elements, but seq·batch·hidden is new.
    seq.checked_mul(batch)
        .and_then(|n| n.checked_mul(dirs))
        .and_then(|n| n.checked_mul(gh))
        .filter(|&n| n <= super::max_elements())
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "sequence {seq} × batch {batch} × {dirs} direction(s) × {gh} gate values is too large"
            ))
        })?;
    let xv = x.to_f32_vec();
    let xv = if attrs.batch_first {
        swap01(&xv, batch, seq, input_size)
    } else {
        xv
    };
    Ok(Common {
        dims: Dims {
            seq,
            batch,
            input: input_size,
            hidden,
            dirs,
        },
        dtype: x.dtype,
        x: xv,
        w: w.to_f32_vec(),
        r: r.to_f32_vec(),
        b,
        lens,
    })
}

/// `[a, b, inner]` → `[b, a, inner]`.
fn swap01(v: &[f32], a: usize, b: usize, inner: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(v.len());
    for j in 0..b {
        for i in 0..a {
            out.extend_from_slice(&v[(i * b + j) * inner..(i * b + j + 1) * inner]);
        }
    }
    out
}

/// An initial state (`initial_h`, `initial_c`) at input `index`, as `[dirs, batch, hidden]`
/// (zeros when absent).
pub fn initial_state(
    attrs: &RecurrentAttrs,
    dims: &Dims,
    inputs: &[Option<&Tensor>],
    index: usize,
    name: &str,
) -> Result<Vec<f32>, OpError> {
    let Dims {
        batch,
        hidden,
        dirs,
        ..
    } = *dims;
    match opt_input(inputs, index) {
        None => Ok(vec![0.0; dirs * batch * hidden]),
        Some(t) => {
            if !t.dtype.is_float() {
                return Err(OpError::DType {
                    index,
                    expected: "float".into(),
                    got: t.dtype.to_string(),
                });
            }
            if attrs.batch_first {
                expect_shape(name, t, &[batch, dirs, hidden])?;
                Ok(swap01(&t.to_f32_vec(), batch, dirs, hidden))
            } else {
                expect_shape(name, t, &[dirs, batch, hidden])?;
                Ok(t.to_f32_vec())
            }
        }
    }
}

/// The input projection of direction `d`: `X · W[d]ᵀ + Wb[d]` as `[seq·batch, gh]`.
pub fn project_input(c: &Common, d: usize, gh: usize) -> Vec<f32> {
    let Dims {
        seq, batch, input, ..
    } = c.dims;
    let rows = seq * batch;
    let mut out = vec![0f32; rows * gh];
    let w = &c.w[d * gh * input..(d + 1) * gh * input];
    sgemm(
        rows,
        gh,
        input,
        MatRef::row_major(&c.x, input, false),
        MatRef::row_major(w, input, true),
        &mut out,
        false,
        true,
    );
    let wb = &c.b[d * 2 * gh..d * 2 * gh + gh];
    for row in out.chunks_mut(gh.max(1)) {
        for (v, b) in row.iter_mut().zip(wb) {
            *v += b;
        }
    }
    out
}

/// `Rb[d]`, the recurrence bias of direction `d`.
pub fn recurrence_bias(c: &Common, d: usize, gh: usize) -> &[f32] {
    &c.b[d * 2 * gh + gh..(d + 1) * 2 * gh]
}

/// `out[batch, n] = h[batch, k] · m[rows, k]ᵀ` where `m` is `n` rows of length `k` (a slice
/// of `R[d]`).
pub fn times_transposed(h: &[f32], batch: usize, k: usize, m: &[f32], n: usize) -> Vec<f32> {
    let mut out = vec![0f32; batch * n];
    sgemm(
        batch,
        n,
        k,
        MatRef::row_major(h, k, false),
        MatRef::row_major(m, k, true),
        &mut out,
        false,
        false,
    );
    out
}

/// The time index that step `s` of a direction reads for a batch entry of length `len`
/// (`None` once the entry has ended).
pub fn time_index(reversed: bool, s: usize, len: usize) -> Option<usize> {
    (s < len).then(|| if reversed { len - 1 - s } else { s })
}

/// The outputs `Y` (from `y`, `[seq, dirs, batch, hidden]`, zero past each entry's length)
/// and one final state per entry of `states` (each `[dirs, batch, hidden]`), in the
/// attribute's layout and the input's element type.
pub fn outputs(
    attrs: &RecurrentAttrs,
    dims: &Dims,
    dtype: DType,
    y: Vec<f32>,
    states: Vec<Vec<f32>>,
) -> Result<Vec<Tensor>, OpError> {
    let Dims {
        seq,
        batch,
        hidden,
        dirs,
        ..
    } = *dims;
    let f = |shape: Vec<usize>, v: Vec<f32>| -> Result<Tensor, OpError> {
        Ok(make(DType::F32, shape, Data::F32(v))?.cast(dtype))
    };
    let mut out = Vec::with_capacity(1 + states.len());
    if attrs.batch_first {
        // [seq, dirs·batch...] → [batch, seq, dirs, hidden]
        let mut yb = Vec::with_capacity(y.len());
        for b in 0..batch {
            for t in 0..seq {
                for d in 0..dirs {
                    let at = ((t * dirs + d) * batch + b) * hidden;
                    yb.extend_from_slice(&y[at..at + hidden]);
                }
            }
        }
        out.push(f(vec![batch, seq, dirs, hidden], yb)?);
        for s in states {
            out.push(f(
                vec![batch, dirs, hidden],
                swap01(&s, dirs, batch, hidden),
            )?);
        }
    } else {
        out.push(f(vec![seq, dirs, batch, hidden], y)?);
        for s in states {
            out.push(f(vec![dirs, batch, hidden], s)?);
        }
    }
    Ok(out)
}

/// The shape rule of the recurrent operators: `Y` and `n_states` final states from the
/// shapes of `X` and `R` (and `hidden_size`).
pub fn infer(ctx: &OpCtx, inp: &super::InferIn, n_states: usize) -> Option<Vec<super::Info>> {
    let x = inp.get(0)?;
    if x.1.len() != 3 {
        return None;
    }
    let batch_first = ctx.node.attr_int("layout", 0).ok()? == 1;
    let dirs = match ctx.node.attr_string("direction", "forward").ok()?.as_str() {
        "bidirectional" => 2,
        _ => 1,
    };
    let hidden = match ctx.node.attr_int("hidden_size", 0).ok()? {
        h if h > 0 => h as usize,
        _ => *inp.get(2)?.1.get(2)?,
    };
    let (seq, batch) = if batch_first {
        (x.1[1], x.1[0])
    } else {
        (x.1[0], x.1[1])
    };
    let (y, s) = if batch_first {
        (vec![batch, seq, dirs, hidden], vec![batch, dirs, hidden])
    } else {
        (vec![seq, dirs, batch, hidden], vec![dirs, batch, hidden])
    };
    let mut out = vec![(x.0, y)];
    out.extend((0..n_states).map(|_| (x.0, s.clone())));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    fn t(shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32(shape, (0..n).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect())
    }

    fn run(op: &str, node: Node, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        let ctx = OpCtx {
            node: &node,
            opset: 22,
        };
        match op {
            "RNN" => super::super::rnn::eval(&ctx, inputs),
            "GRU" => super::super::gru::eval(&ctx, inputs),
            _ => super::super::lstm::eval(&ctx, inputs),
        }
    }

    #[test]
    fn bad_attributes_and_shapes_are_errors() {
        let (x, w, r) = (t(&[2, 1, 3]), t(&[1, 8, 3]), t(&[1, 8, 2]));
        let ins = [Some(&x), Some(&w), Some(&r)];
        let node = || Node::new("lstm", "LSTM", &["x", "w", "r"], &["y"]);
        assert!(run("LSTM", node(), &ins).is_ok());
        // hidden_size disagreeing with W/R
        let e = run(
            "LSTM",
            node().with_attr("hidden_size", AttrValue::Int(3)),
            &ins,
        );
        assert!(matches!(e, Err(OpError::ShapeMismatch { .. })), "{e:?}");
        let e = run(
            "LSTM",
            node().with_attr("hidden_size", AttrValue::Int(0)),
            &ins,
        );
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        // direction
        let d = AttrValue::String(b"sideways".to_vec());
        let e = run("LSTM", node().with_attr("direction", d), &ins);
        assert!(matches!(e, Err(OpError::Attribute { ref name, .. }) if name == "direction"));
        // bidirectional needs two blocks of weights
        let d = AttrValue::String(b"bidirectional".to_vec());
        let e = run("LSTM", node().with_attr("direction", d), &ins);
        assert!(matches!(e, Err(OpError::ShapeMismatch { .. })), "{e:?}");
        // activations: count and names
        let acts =
            |v: &[&str]| AttrValue::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect());
        let e = run(
            "LSTM",
            node().with_attr("activations", acts(&["Tanh"])),
            &ins,
        );
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        let e = run(
            "LSTM",
            node().with_attr("activations", acts(&["Tanh", "Nope", "Tanh"])),
            &ins,
        );
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        // layout, clip
        let e = run("LSTM", node().with_attr("layout", AttrValue::Int(2)), &ins);
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        let e = run(
            "LSTM",
            node().with_attr("clip", AttrValue::Float(-1.0)),
            &ins,
        );
        assert!(matches!(e, Err(OpError::Attribute { .. })), "{e:?}");
        // wrong ranks
        let x2 = t(&[2, 3]);
        let e = run("LSTM", node(), &[Some(&x2), Some(&w), Some(&r)]);
        assert!(matches!(e, Err(OpError::ShapeMismatch { .. })), "{e:?}");
        // W of the wrong input size, B, sequence_lens and initial_h of the wrong shapes
        let w2 = t(&[1, 8, 4]);
        assert!(run("LSTM", node(), &[Some(&x), Some(&w2), Some(&r)]).is_err());
        let b = t(&[1, 8]);
        assert!(run("LSTM", node(), &[Some(&x), Some(&w), Some(&r), Some(&b)]).is_err());
        let lens = Tensor::from_i64(&[1], vec![3]).cast(DType::I32);
        let e = run(
            "LSTM",
            node(),
            &[Some(&x), Some(&w), Some(&r), None, Some(&lens)],
        );
        assert!(matches!(e, Err(OpError::Invalid(_))), "{e:?}");
        let h0 = t(&[1, 2, 2]);
        let e = run(
            "LSTM",
            node(),
            &[Some(&x), Some(&w), Some(&r), None, None, Some(&h0)],
        );
        assert!(matches!(e, Err(OpError::ShapeMismatch { .. })), "{e:?}");
        let p = t(&[1, 5]);
        let full = [
            Some(&x),
            Some(&w),
            Some(&r),
            None,
            None,
            None,
            None,
            Some(&p),
        ];
        assert!(run("LSTM", node(), &full).is_err());
        // GRU's linear_before_reset, an integer X
        let (wg, rg) = (t(&[1, 6, 3]), t(&[1, 6, 2]));
        let g = Node::new("gru", "GRU", &["x", "w", "r"], &["y"])
            .with_attr("linear_before_reset", AttrValue::Int(2));
        assert!(run("GRU", g, &[Some(&x), Some(&wg), Some(&rg)]).is_err());
        let xi = x.cast(DType::I32);
        let g = Node::new("gru", "GRU", &["x", "w", "r"], &["y"]);
        let e = run("GRU", g, &[Some(&xi), Some(&wg), Some(&rg)]);
        assert!(matches!(e, Err(OpError::DType { index: 0, .. })), "{e:?}");
    }

    /// A bidirectional layer is a forward and a reverse layer side by side, each with its
    /// own weights, and entries past their length are zero in `Y`.
    #[test]
    fn bidirectional_is_forward_and_reverse_with_lengths() {
        for op in ["RNN", "GRU", "LSTM"] {
            let g = match op {
                "RNN" => 1,
                "GRU" => 3,
                _ => 4,
            };
            let (seq, batch, inp, h) = (4, 2, 3, 2);
            let x = t(&[seq, batch, inp]);
            let w = t(&[2, g * h, inp]);
            let r = Tensor::from_f32(
                &[2, g * h, h],
                (0..2 * g * h * h)
                    .map(|i| (i % 5) as f32 * 0.2 - 0.4)
                    .collect(),
            );
            let lens = Tensor::from_i64(&[batch], vec![4, 2]).cast(DType::I32);
            let half = |v: &Tensor, d: usize| {
                let n = v.len() / 2;
                Tensor::from_f32(
                    &[1, v.shape[1], v.shape[2]],
                    v.to_f32_vec()[d * n..(d + 1) * n].to_vec(),
                )
            };
            let ins =
                |w: &Tensor, r: &Tensor| -> Vec<Tensor> { vec![x.clone(), w.clone(), r.clone()] };
            let dir = |s: &str| AttrValue::String(s.as_bytes().to_vec());
            let call = |d: &str, w: &Tensor, r: &Tensor| {
                let n = Node::new("n", op, &["x", "w", "r", "", "l"], &["y", "h"])
                    .with_attr("direction", dir(d));
                let v = ins(w, r);
                run(
                    op,
                    n,
                    &[Some(&v[0]), Some(&v[1]), Some(&v[2]), None, Some(&lens)],
                )
                .unwrap()
            };
            let both = call("bidirectional", &w, &r);
            let fw = call("forward", &half(&w, 0), &half(&r, 0));
            let rv = call("reverse", &half(&w, 1), &half(&r, 1));
            assert_eq!(both[0].shape, vec![seq, 2, batch, h]);
            let (yb, yf, yr) = (both[0].to_f32_vec(), fw[0].to_f32_vec(), rv[0].to_f32_vec());
            for ti in 0..seq {
                for b in 0..batch {
                    for j in 0..h {
                        let f = yf[(ti * batch + b) * h + j];
                        let rr = yr[(ti * batch + b) * h + j];
                        assert_eq!(yb[((ti * 2) * batch + b) * h + j], f, "{op}");
                        assert_eq!(yb[((ti * 2 + 1) * batch + b) * h + j], rr, "{op}");
                        if ti >= [4, 2][b] {
                            assert_eq!((f, rr), (0.0, 0.0), "{op}: padded step");
                        }
                    }
                }
            }
            // The reverse pass of a short entry starts at its own last step: its final
            // state is its output at t = 0.
            let hr = rv[1].to_f32_vec();
            assert_eq!(&hr[h..2 * h], &yr[h..2 * h], "{op}");
            // The forward pass ends at its last valid step.
            let hf = fw[1].to_f32_vec();
            assert_eq!(&hf[h..2 * h], &yf[(batch + 1) * h..(batch + 2) * h], "{op}");
        }
    }
}
