//! `Einsum` (opset 12): the Einstein summation `equation` over any number of inputs of one
//! numeric type, as numpy defines it: `"ij,jk->ik"`, an ellipsis `...` standing for the
//! leading axes (broadcast between inputs), a label repeated within one input taking its
//! diagonal (`"ii->i"`), and without `->` the implicit output (the ellipsis axes, then the
//! labels that appear once, in alphabetical order).
//!
//! Evaluation: each input first takes its diagonals and sums out the labels nobody else
//! needs; the inputs are then contracted pairwise, left to right, each pair as one batched
//! matrix product (transpose both to `[batch, free, summed]` / `[batch, summed, free]` and
//! multiply, O(batch · m · k · n)), never a loop over every combination of all labels.
//! Floats are computed in f64, integers in wrapping i64, then converted back.
//! Intermediates and the output are capped at
//! [`super::max_elements()`] elements.

use super::max_elements;
use super::{make, OpCtx};
use crate::error::OpError;
use crate::tensor::{strides, DType, Data, Tensor};
use std::num::Wrapping;
use std::ops::{Add, Mul};

/// Labels are `a-z` and `A-Z`; ellipsis axes get ids from [`ELLIPSIS`] on.
const ELLIPSIS: usize = 52;

fn label_id(c: char) -> Option<usize> {
    match c {
        'a'..='z' => Some(c as usize - 'a' as usize + 26),
        'A'..='Z' => Some(c as usize - 'A' as usize),
        _ => None,
    }
}

/// One term of the equation: its letters, and where the ellipsis sits (if any).
struct Term {
    before: Vec<usize>,
    after: Vec<usize>,
    ellipsis: bool,
}

fn parse_term(s: &str) -> Result<Term, OpError> {
    let bad = |why: String| OpError::attr("equation", why);
    let (b, a, ellipsis) = match s.find("...") {
        Some(p) => (&s[..p], &s[p + 3..], true),
        None => (s, "", false),
    };
    let letters = |part: &str| -> Result<Vec<usize>, OpError> {
        part.chars()
            .map(|c| label_id(c).ok_or_else(|| bad(format!("invalid character {c:?} in term {s:?}"))))
            .collect()
    };
    Ok(Term {
        before: letters(b)?,
        after: letters(a)?,
        ellipsis,
    })
}

/// An operand during evaluation: one label per axis.
#[derive(Clone)]
struct Operand<T> {
    labels: Vec<usize>,
    shape: Vec<usize>,
    data: Vec<T>,
}

fn checked_len(shape: &[usize]) -> Result<usize, OpError> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= max_elements())
        .ok_or_else(|| {
            OpError::Invalid(format!(
                "Einsum: an intermediate of shape {shape:?} has more than {max_elements} elements (the tensor_elements limit of QUANTKIT_LIMITS)", max_elements = max_elements()
            ))
        })
}

/// Reads `src` (of `shape`) at the position given, for each output element, by `src_strides`
/// (one stride per output axis, 0 for a broadcast axis) into a tensor of `out_shape`.
fn gather<T: Copy>(src: &[T], src_strides: &[usize], out_shape: &[usize]) -> Result<Vec<T>, OpError> {
    let n = checked_len(out_shape)?;
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return Ok(out);
    }
    let r = out_shape.len();
    let mut idx = vec![0usize; r];
    let mut off = 0usize;
    for _ in 0..n {
        out.push(src[off]);
        for ax in (0..r).rev() {
            idx[ax] += 1;
            off += src_strides[ax];
            if idx[ax] < out_shape[ax] {
                break;
            }
            off -= src_strides[ax] * idx[ax];
            idx[ax] = 0;
        }
    }
    Ok(out)
}

impl<T: Copy + Default + Add<Output = T> + Mul<Output = T>> Operand<T> {
    /// Merges repeated labels into one axis (the diagonal).
    fn diagonal(self) -> Result<Self, OpError> {
        let st = strides(&self.shape);
        let mut labels = Vec::new();
        let mut shape = Vec::new();
        let mut sst: Vec<usize> = Vec::new();
        for (ax, &l) in self.labels.iter().enumerate() {
            match labels.iter().position(|&m| m == l) {
                Some(p) => {
                    if shape[p] != self.shape[ax] {
                        return Err(OpError::shape(
                            format!("equal sizes for the repeated label of axes with size {}", shape[p]),
                            &self.shape,
                        ));
                    }
                    sst[p] += st[ax];
                }
                None => {
                    labels.push(l);
                    shape.push(self.shape[ax]);
                    sst.push(st[ax]);
                }
            }
        }
        if labels.len() == self.labels.len() {
            return Ok(self);
        }
        let data = gather(&self.data, &sst, &shape)?;
        Ok(Operand { labels, shape, data })
    }

    /// Puts the axes in the order of `labels` (a permutation of its own).
    fn permuted(self, labels: &[usize]) -> Result<Self, OpError> {
        if labels == self.labels.as_slice() {
            return Ok(self);
        }
        let st = strides(&self.shape);
        let pos: Vec<usize> = labels
            .iter()
            .map(|l| self.labels.iter().position(|m| m == l).unwrap_or(0))
            .collect();
        let shape: Vec<usize> = pos.iter().map(|&p| self.shape[p]).collect();
        let sst: Vec<usize> = pos.iter().map(|&p| st[p]).collect();
        let data = gather(&self.data, &sst, &shape)?;
        Ok(Operand {
            labels: labels.to_vec(),
            shape,
            data,
        })
    }

    /// Sums out every axis whose label `keep` rejects.
    fn reduce(self, keep: impl Fn(usize) -> bool) -> Result<Self, OpError> {
        let (kept, gone): (Vec<usize>, Vec<usize>) = self.labels.iter().partition(|&&l| keep(l));
        if gone.is_empty() {
            return Ok(self);
        }
        let size = |ls: &[usize]| -> usize {
            ls.iter()
                .map(|l| self.shape[self.labels.iter().position(|m| m == l).unwrap_or(0)])
                .product()
        };
        let (nk, ng) = (size(&kept), size(&gone));
        let order: Vec<usize> = kept.iter().chain(&gone).copied().collect();
        let p = self.permuted(&order)?;
        let data = (0..nk)
            .map(|i| {
                p.data[i * ng..(i + 1) * ng]
                    .iter()
                    .fold(T::default(), |s, &v| s + v)
            })
            .collect();
        let shape = p.shape[..kept.len()].to_vec();
        Ok(Operand {
            labels: kept,
            shape,
            data,
        })
    }

    /// Broadcasts the axes of size 1 whose label has a larger size in `sizes`.
    fn expanded(self, sizes: &[usize; 64]) -> Result<Self, OpError> {
        if self.labels.iter().zip(&self.shape).all(|(&l, &d)| sizes[l] == d) {
            return Ok(self);
        }
        let st = strides(&self.shape);
        let shape: Vec<usize> = self.labels.iter().map(|&l| sizes[l]).collect();
        let sst: Vec<usize> = (0..shape.len())
            .map(|a| if self.shape[a] == 1 { 0 } else { st[a] })
            .collect();
        let data = gather(&self.data, &sst, &shape)?;
        Ok(Operand {
            labels: self.labels,
            shape,
            data,
        })
    }
}

/// Contracts `a` and `b`, keeping the labels `keep` accepts, as one batched matrix product.
fn contract<T: Copy + Default + Add<Output = T> + Mul<Output = T>>(
    a: Operand<T>,
    b: Operand<T>,
    sizes: &[usize; 64],
    keep: impl Fn(usize) -> bool,
) -> Result<Operand<T>, OpError> {
    let in_b = |l: &usize| b.labels.contains(l);
    let in_a = |l: &usize| a.labels.contains(l);
    let batch: Vec<usize> = a.labels.iter().copied().filter(|l| in_b(l) && keep(*l)).collect();
    let summed: Vec<usize> = a.labels.iter().copied().filter(|l| in_b(l) && !keep(*l)).collect();
    let a_free: Vec<usize> = a.labels.iter().copied().filter(|l| !in_b(l)).collect();
    let b_free: Vec<usize> = b.labels.iter().copied().filter(|l| !in_a(l)).collect();
    let size = |ls: &[usize]| -> Result<usize, OpError> { checked_len(&ls.iter().map(|&l| sizes[l]).collect::<Vec<_>>()) };
    let (nb, m, k, n) = (size(&batch)?, size(&a_free)?, size(&summed)?, size(&b_free)?);
    let a_order: Vec<usize> = batch.iter().chain(&a_free).chain(&summed).copied().collect();
    let b_order: Vec<usize> = batch.iter().chain(&summed).chain(&b_free).copied().collect();
    let a = a.expanded(sizes)?.permuted(&a_order)?;
    let b = b.expanded(sizes)?.permuted(&b_order)?;
    let labels: Vec<usize> = batch.iter().chain(&a_free).chain(&b_free).copied().collect();
    let shape: Vec<usize> = labels.iter().map(|&l| sizes[l]).collect();
    let total = checked_len(&shape)?;
    let mut out = vec![T::default(); total];
    if total > 0 {
        for (bi, c) in out.chunks_mut(m * n).enumerate() {
            let ab = &a.data[bi * m * k..(bi + 1) * m * k];
            let bb = &b.data[bi * k * n..(bi + 1) * k * n];
            // i-p-j order: the inner loop runs over contiguous rows of b and c.
            for i in 0..m {
                let crow = &mut c[i * n..(i + 1) * n];
                for p in 0..k {
                    let x = ab[i * k + p];
                    for (cv, &bv) in crow.iter_mut().zip(&bb[p * n..(p + 1) * n]) {
                        *cv = *cv + x * bv;
                    }
                }
            }
        }
    }
    debug_assert_eq!(nb * m * n, total);
    Ok(Operand { labels, shape, data: out })
}

/// The parsed equation resolved against the input shapes.
struct Plan {
    /// Labels of each input, one per axis (ellipsis axes as `ELLIPSIS + i`).
    inputs: Vec<Vec<usize>>,
    /// Output labels.
    output: Vec<usize>,
    /// Size of every label.
    sizes: [usize; 64],
}

fn plan(equation: &str, shapes: &[&[usize]]) -> Result<Plan, OpError> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let bad = |why: String| OpError::attr("equation", why);
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<Term> = lhs.split(',').map(parse_term).collect::<Result<_, _>>()?;
    if terms.len() != shapes.len() {
        return Err(bad(format!(
            "{equation:?} has {} input terms for {} inputs",
            terms.len(),
            shapes.len()
        )));
    }
    // Rank of the ellipsis: the most axes it covers in any input.
    let mut ell_rank = 0;
    for (t, s) in terms.iter().zip(shapes) {
        let named = t.before.len() + t.after.len();
        if s.len() < named || (!t.ellipsis && s.len() != named) {
            return Err(OpError::shape(
                format!("an input of rank {named}{} for term of {equation:?}", if t.ellipsis { " or more" } else { "" }),
                s,
            ));
        }
        ell_rank = ell_rank.max(s.len() - named);
    }
    if ell_rank > 64 - ELLIPSIS {
        return Err(bad(format!("the ellipsis covers {ell_rank} axes, more than {}", 64 - ELLIPSIS)));
    }
    let mut sizes = [0usize; 64];
    let mut seen = [false; 64];
    let mut inputs = Vec::new();
    for (t, s) in terms.iter().zip(shapes) {
        let e = s.len() - t.before.len() - t.after.len();
        let mut labels = t.before.clone();
        // Right-aligned, as numpy broadcasts.
        labels.extend((ell_rank - e..ell_rank).map(|i| ELLIPSIS + i));
        labels.extend(&t.after);
        for (&l, &d) in labels.iter().zip(s.iter()) {
            if !seen[l] || sizes[l] == 1 {
                sizes[l] = d;
            } else if d != sizes[l] && !(l >= ELLIPSIS && d == 1) {
                return Err(OpError::shape(
                    format!("size {} for every axis of one label in {equation:?}", sizes[l]),
                    s,
                ));
            }
            seen[l] = true;
        }
        inputs.push(labels);
    }
    let ell_labels: Vec<usize> = (0..ell_rank).map(|i| ELLIPSIS + i).collect();
    let output = match rhs {
        Some(r) => {
            let t = parse_term(r)?;
            let mut out = t.before.clone();
            if t.ellipsis {
                out.extend(&ell_labels);
            }
            out.extend(&t.after);
            for (i, &l) in out.iter().enumerate() {
                if l < ELLIPSIS && !seen[l] {
                    return Err(bad(format!("output label {} of {equation:?} is in no input", r)));
                }
                if out[..i].contains(&l) {
                    return Err(bad(format!("output {r:?} repeats a label")));
                }
            }
            out
        }
        None => {
            let mut count = [0usize; ELLIPSIS];
            for t in &terms {
                for &l in t.before.iter().chain(&t.after) {
                    count[l] += 1;
                }
            }
            // Ellipsis axes first, then the labels used once in ASCII order (upper case
            // first, as numpy sorts them).
            let mut out = ell_labels;
            out.extend((0..ELLIPSIS).filter(|&l| count[l] == 1));
            out
        }
    };
    Ok(Plan { inputs, output, sizes })
}

fn run<T: Copy + Default + Add<Output = T> + Mul<Output = T>>(
    plan: &Plan,
    data: Vec<Vec<T>>,
    shapes: &[&[usize]],
) -> Result<Vec<T>, OpError> {
    // Labels needed by the output or by inputs from `i` on.
    let needed_after = |i: usize, l: usize| plan.output.contains(&l) || plan.inputs[i..].iter().any(|ls| ls.contains(&l));
    let mut acc: Option<Operand<T>> = None;
    for (i, (d, s)) in data.into_iter().zip(shapes).enumerate() {
        let op = Operand {
            labels: plan.inputs[i].clone(),
            shape: s.to_vec(),
            data: d,
        }
        .diagonal()?;
        let op = match &acc {
            // Sum out what neither the output, the running product nor a later input needs.
            Some(a) => op.reduce(|l| a.labels.contains(&l) || needed_after(i + 1, l))?,
            None => op.reduce(|l| needed_after(i + 1, l))?,
        };
        acc = Some(match acc {
            None => op,
            Some(a) => {
                let a = a.reduce(|l| op.labels.contains(&l) || needed_after(i + 1, l))?;
                contract(a, op, &plan.sizes, |l| needed_after(i + 1, l))?
            }
        });
    }
    let acc = acc.ok_or_else(|| OpError::Invalid("Einsum needs at least one input".into()))?;
    let acc = acc.reduce(|l| plan.output.contains(&l))?;
    Ok(acc.expanded(&plan.sizes)?.permuted(&plan.output)?.data)
}

/// Evaluates `Einsum`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let equation = ctx.node.attr_string("equation", "")?;
    let ts: Vec<&Tensor> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| t.ok_or(OpError::MissingInput { index: i }))
        .collect::<Result<_, _>>()?;
    let dtype = ts.first().map(|t| t.dtype).ok_or(OpError::MissingInput { index: 0 })?;
    for (i, t) in ts.iter().enumerate() {
        if t.dtype != dtype {
            return Err(OpError::DType {
                index: i,
                expected: dtype.to_string(),
                got: t.dtype.to_string(),
            });
        }
    }
    if matches!(dtype, DType::Bool | DType::I4 | DType::U4) {
        return Err(OpError::DType {
            index: 0,
            expected: "a numeric type".into(),
            got: dtype.to_string(),
        });
    }
    let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape.as_slice()).collect();
    let p = plan(&equation, &shapes)?;
    let out_shape: Vec<usize> = p.output.iter().map(|&l| p.sizes[l]).collect();
    let t = if dtype.is_float() {
        let y = run(&p, ts.iter().map(|t| t.to_f64_vec()).collect(), &shapes)?;
        make(DType::F64, out_shape, Data::F64(y))?
    } else {
        let y = run(
            &p,
            ts.iter()
                .map(|t| t.to_i64_vec().into_iter().map(Wrapping).collect())
                .collect(),
            &shapes,
        )?;
        make(DType::I64, out_shape, Data::I64(y.into_iter().map(|w| w.0).collect()))?
    };
    Ok(vec![t.cast(dtype)])
}

/// Static shape rule: the output labels' sizes.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let equation = ctx.node.attr_string("equation", "").ok()?;
    let infos: Vec<&super::Info> = (0..ctx.node.inputs.len()).map(|i| inp.get(i)).collect::<Option<_>>()?;
    let shapes: Vec<&[usize]> = infos.iter().map(|i| i.1.as_slice()).collect();
    let p = plan(&equation, &shapes).ok()?;
    Some(vec![(infos.first()?.0, p.output.iter().map(|&l| p.sizes[l]).collect())])
}

/// `Einsum` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("Einsum", 12, eval).infer(infer)
    .bf16_widen();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn einsum(eq: &str, xs: &[&Tensor]) -> Result<Tensor, OpError> {
        let names: Vec<String> = (0..xs.len()).map(|i| format!("x{i}")).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        let n = Node::new("e", "Einsum", &refs, &["y"])
            .with_attr("equation", AttrValue::String(eq.as_bytes().to_vec()));
        let inputs: Vec<Option<&Tensor>> = xs.iter().map(|&t| Some(t)).collect();
        Ok(eval(&OpCtx { node: &n, opset: 12 }, &inputs)?.remove(0))
    }

    fn seq(shape: &[usize]) -> Tensor {
        Tensor::from_f32(shape, (0..shape.iter().product::<usize>()).map(|v| v as f32).collect())
    }

    /// Naive reference: sum over every combination of all labels (test only).
    fn naive(eq: &str, xs: &[&Tensor]) -> Tensor {
        let (lhs, rhs) = eq.split_once("->").unwrap();
        let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
        let out: Vec<char> = rhs.chars().collect();
        let mut all: Vec<char> = terms.iter().flatten().copied().collect();
        all.sort();
        all.dedup();
        let mut size = std::collections::HashMap::new();
        for (t, x) in terms.iter().zip(xs) {
            for (c, &d) in t.iter().zip(&x.shape) {
                size.insert(*c, d);
            }
        }
        let oshape: Vec<usize> = out.iter().map(|c| size[c]).collect();
        let mut y = vec![0f32; oshape.iter().product()];
        let total: usize = all.iter().map(|c| size[c]).product();
        for mut flat in 0..total {
            let mut val = std::collections::HashMap::new();
            for c in all.iter().rev() {
                val.insert(*c, flat % size[c]);
                flat /= size[c];
            }
            let at = |t: &[char], shape: &[usize]| {
                t.iter().zip(shape).fold(0, |a, (c, &d)| a * d + val[c])
            };
            let p: f32 = terms
                .iter()
                .zip(xs)
                .map(|(t, x)| x.as_f32().unwrap()[at(t, &x.shape)])
                .product();
            y[at(&out, &oshape)] += p;
        }
        Tensor::from_f32(&oshape, y)
    }

    #[test]
    fn agrees_with_the_naive_sum_on_assorted_equations() {
        let (a, b, c) = (seq(&[2, 3, 4]), seq(&[4, 3, 5]), seq(&[5, 2]));
        for eq in [
            "ijk,kjl->il",
            "ijk,kjl,lm->mi",
            "ijk,kjl->ijkl",
            "ijk,kjl,li->",
            "ijk->kji",
            "ijk,kjl->j",
        ] {
            let xs: Vec<&Tensor> = match eq.split_once("->").unwrap().0.split(',').count() {
                1 => vec![&a],
                2 => vec![&a, &b],
                _ => vec![&a, &b, &c],
            };
            assert_eq!(einsum(eq, &xs).unwrap(), naive(eq, &xs), "{eq}");
        }
    }

    #[test]
    fn diagonals_implicit_output_and_ellipsis() {
        let m = seq(&[3, 3]);
        assert_eq!(einsum("ii->i", &[&m]).unwrap(), Tensor::from_f32(&[3], vec![0.0, 4.0, 8.0]));
        assert_eq!(einsum("ii", &[&m]).unwrap(), Tensor::from_f32(&[], vec![12.0]));
        // Implicit output: labels used once, alphabetically ("ba" → "ab" is a transpose).
        assert_eq!(einsum("ba", &[&m]).unwrap(), einsum("ba->ab", &[&m]).unwrap());
        assert_eq!(einsum("ij,jk", &[&m, &m]).unwrap(), naive("ij,jk->ik", &[&m, &m]));
        // Ellipsis batch axes broadcast: [2, 1, 2, 3] with [4, 3, 2].
        let a = seq(&[2, 1, 2, 3]);
        let b = seq(&[4, 3, 2]);
        let y = einsum("...ij,...jk->...ik", &[&a, &b]).unwrap();
        assert_eq!(y.shape, vec![2, 4, 2, 2]);
        let av = a.as_f32().unwrap();
        let bv = b.as_f32().unwrap();
        // y[1, 3, 0, 1] = Σ_j a[1, 0, 0, j] · b[3, j, 1]
        let want: f32 = (0..3).map(|j| av[6 + j] * bv[3 * 6 + j * 2 + 1]).sum();
        assert_eq!(y.as_f32().unwrap()[(4 + 3) * 4 + 1], want);
        // Batch diagonal with an ellipsis.
        let d = seq(&[2, 3, 3]);
        let y = einsum("...ii->...i", &[&d]).unwrap();
        assert_eq!(y, Tensor::from_f32(&[2, 3], vec![0.0, 4.0, 8.0, 9.0, 13.0, 17.0]));
        // Integers stay integers.
        let i = Tensor::from_i64(&[2, 2], vec![1, 2, 3, 4]);
        assert_eq!(einsum("ij,jk->ik", &[&i, &i]).unwrap(), Tensor::from_i64(&[2, 2], vec![7, 10, 15, 22]));
    }

    #[test]
    fn bad_equations_and_shapes_are_errors() {
        let m = seq(&[2, 3]);
        let attr = |r: Result<Tensor, OpError>| matches!(r, Err(OpError::Attribute { .. }));
        let shape = |r: Result<Tensor, OpError>| matches!(r, Err(OpError::ShapeMismatch { .. }));
        assert!(attr(einsum("ij,jk->ik", &[&m])));
        assert!(attr(einsum("i1->i", &[&m])));
        assert!(attr(einsum("ij->iz", &[&m])));
        assert!(attr(einsum("ij->ii", &[&m])));
        assert!(shape(einsum("ijk->i", &[&m])));
        assert!(shape(einsum("ii->i", &[&m])));
        assert!(shape(einsum("ij,ij->i", &[&m, &seq(&[2, 4])])));
        let i = Tensor::from_i64(&[2, 3], vec![0; 6]);
        assert!(matches!(einsum("ij,ij->i", &[&m, &i]), Err(OpError::DType { .. })));
        // An outer product past the element cap fails before allocating.
        let big = Tensor::zeros(DType::F32, &[1 << 15]);
        assert!(matches!(
            einsum("i,j,k->ijk", &[&big, &big, &big]),
            Err(OpError::Invalid(_))
        ));
    }
}
