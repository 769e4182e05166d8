//! `TfIdfVectorizer` (opset 9): counts the n-grams of an int32/int64 sequence (`[C]`, or
//! `[N, C]` with one sequence per row) that appear in a pool, into a float32 vector of
//! `max(ngram_indexes) + 1` entries per row.
//!
//! The pool (`pool_int64s`) lists the n-grams grouped by length: `ngram_counts[k]` is the
//! pool offset of the `(k+1)`-grams, each a run of `k+1` tokens. The `i`-th pool n-gram
//! (in pool order, over all lengths) is counted into output entry `ngram_indexes[i]`. An
//! n-gram of length `n` with skip `s` takes tokens `j, j+s+1, …, j+(n−1)(s+1)` of one row,
//! for every `n` in `[min_gram_length, max_gram_length]` and `s` in `[0, max_skip_count]`;
//! unigrams are counted once, not once per skip (as ONNX Runtime and the ONNX reference do).
//! `mode`: `TF` gives the counts, `IDF` gives `weights[i]` where the count is positive,
//! `TFIDF` gives `count · weights[i]` (weights default to 1). String pools are not
//! supported (quantkit has no string tensors).

use std::collections::HashMap;
use super::max_elements;

use super::{input, OpCtx};
use crate::error::OpError;
use crate::tensor::{DType, Data, Tensor};


/// The attributes, checked.
struct Spec {
    min_n: usize,
    max_n: usize,
    max_skip: usize,
    mode: Mode,
    /// Per n-gram length `n` (index `n − 1`): pool n-gram → pool ordinal `i`.
    pool: Vec<HashMap<Vec<i64>, usize>>,
    /// Output entry of pool ordinal `i`.
    index: Vec<usize>,
    /// Weight of pool ordinal `i`.
    weights: Vec<f32>,
    /// Entries per output row.
    width: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Tf,
    Idf,
    TfIdf,
}

fn spec(ctx: &OpCtx) -> Result<Spec, OpError> {
    let node = ctx.node;
    if node.attr("pool_strings").is_some() {
        return Err(OpError::Unsupported(
            "TfIdfVectorizer with pool_strings (string tensors)".into(),
        ));
    }
    let int = |name: &str| -> Result<usize, OpError> {
        let v = node.attr_int(name, -1)?;
        usize::try_from(v).map_err(|_| OpError::Invalid(format!("{name} {v} is missing or negative")))
    };
    let (min_n, max_n, max_skip) = (int("min_gram_length")?, int("max_gram_length")?, int("max_skip_count")?);
    if min_n == 0 || min_n > max_n {
        return Err(OpError::Invalid(format!(
            "gram lengths [{min_n}, {max_n}] must satisfy 1 ≤ min ≤ max"
        )));
    }
    let mode = match node.attr_string("mode", "")?.as_str() {
        "TF" => Mode::Tf,
        "IDF" => Mode::Idf,
        "TFIDF" => Mode::TfIdf,
        m => return Err(OpError::Invalid(format!("mode `{m}` (TF, IDF or TFIDF)"))),
    };
    let tokens = node
        .attr_ints("pool_int64s")?
        .ok_or_else(|| OpError::Invalid("pool_int64s is required".into()))?;
    let counts = node.attr_ints("ngram_counts")?.unwrap_or_default();
    let raw_index = node.attr_ints("ngram_indexes")?.unwrap_or_default();
    // Offsets must start the pool, rise, and stay inside it.
    let mut offsets = Vec::with_capacity(counts.len());
    for (k, &c) in counts.iter().enumerate() {
        let c = usize::try_from(c).ok().filter(|&c| c <= tokens.len());
        match c {
            Some(c) if k > 0 && c < offsets[k - 1] => None,
            Some(c) if k == 0 && c != 0 => None,
            c => c,
        }
        .map(|c| offsets.push(c))
        .ok_or_else(|| OpError::Invalid(format!("ngram_counts {counts:?} do not split the pool")))?;
    }
    let mut pool = vec![HashMap::new(); max_n];
    let mut ordinal = 0usize;
    for (k, &start) in offsets.iter().enumerate() {
        let end = offsets.get(k + 1).copied().unwrap_or(tokens.len());
        let n = k + 1;
        if (end - start) % n != 0 {
            return Err(OpError::Invalid(format!(
                "pool segment of {n}-grams has {} tokens, not a multiple of {n}",
                end - start
            )));
        }
        for gram in tokens[start..end].chunks(n) {
            if n <= max_n {
                pool[n - 1].entry(gram.to_vec()).or_insert(ordinal);
            }
            ordinal += 1;
        }
    }
    if raw_index.len() != ordinal {
        return Err(OpError::Invalid(format!(
            "{} ngram_indexes for {ordinal} pool n-grams",
            raw_index.len()
        )));
    }
    let index: Vec<usize> = raw_index
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&i| i < max_elements()))
        .collect::<Option<_>>()
        .ok_or_else(|| OpError::Invalid(format!("ngram_indexes {raw_index:?} out of range")))?;
    let width = index.iter().max().map_or(0, |m| m + 1);
    let weights = match node.attr_floats("weights")? {
        Some(w) if w.len() == ordinal => w,
        Some(w) => {
            return Err(OpError::Invalid(format!(
                "{} weights for {ordinal} pool n-grams",
                w.len()
            )))
        }
        None => vec![1.0; ordinal],
    };
    Ok(Spec { min_n, max_n, max_skip, mode, pool, index, weights, width })
}

/// The output row of one token sequence.
fn row(spec: &Spec, seq: &[i64], out: &mut [f32]) {
    let mut counts = vec![0u32; spec.index.len()];
    for n in spec.min_n..=spec.max_n.min(seq.len()) {
        let map = &spec.pool[n - 1];
        if map.is_empty() {
            continue;
        }
        // Skips past the sequence find nothing; unigrams ignore the skip.
        let skips = if n == 1 { 0 } else { spec.max_skip.min(seq.len()) };
        let mut gram = Vec::with_capacity(n);
        for s in 0..=skips {
            let span = (n - 1) * (s + 1);
            for j in 0..seq.len().saturating_sub(span) {
                gram.clear();
                gram.extend((0..n).map(|t| seq[j + t * (s + 1)]));
                if let Some(&i) = map.get(&gram) {
                    counts[i] += 1;
                }
            }
        }
    }
    for (i, &c) in counts.iter().enumerate() {
        let v = match spec.mode {
            Mode::Tf => c as f32,
            Mode::Idf => {
                if c > 0 {
                    spec.weights[i]
                } else {
                    0.0
                }
            }
            Mode::TfIdf => c as f32 * spec.weights[i],
        };
        // Pool n-grams sharing an output entry: the later one is written last.
        out[spec.index[i]] = v;
    }
}

/// Evaluates `TfIdfVectorizer`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if !matches!(x.dtype, DType::I32 | DType::I64) {
        return Err(OpError::DType {
            index: 0,
            expected: "int32 or int64 tokens".into(),
            got: x.dtype.to_string(),
        });
    }
    let (rows, len, shape) = match x.shape[..] {
        [c] => (1, c, vec![]),
        [n, c] => (n, c, vec![n]),
        _ => return Err(OpError::shape("[C] or [N, C] tokens", &x.shape)),
    };
    let spec = spec(ctx)?;
    let total = rows
        .checked_mul(spec.width)
        .filter(|&t| t <= max_elements())
        .ok_or_else(|| OpError::Invalid(format!("{rows} rows of {} entries is too large", spec.width)))?;
    let tokens = x.to_i64_vec();
    let mut out = vec![0f32; total];
    if spec.width > 0 {
        for (r, o) in out.chunks_mut(spec.width).enumerate() {
            row(&spec, &tokens[r * len..(r + 1) * len], o);
        }
    }
    let mut shape = shape;
    shape.push(spec.width);
    Ok(vec![Tensor::new(shape, Data::F32(out)).map_err(|e| OpError::Invalid(e.to_string()))?])
}

/// The shape rule: `[W]` or `[N, W]` float32, `W` from `ngram_indexes`.
pub fn infer(ctx: &OpCtx, inp: &super::InferIn) -> Option<Vec<super::Info>> {
    let (_, shape) = inp.get(0)?;
    let width = ctx.node.attr_ints("ngram_indexes").ok()??.iter().max().map_or(0, |&m| m + 1);
    let mut out = shape[..shape.len().checked_sub(1)?].to_vec();
    out.push(usize::try_from(width).ok()?);
    Some(vec![(DType::F32, out)])
}

/// `TfIdfVectorizer` in the operator registry.
pub const DEF: super::OpDef = super::OpDef::onnx("TfIdfVectorizer", 9, eval).infer(infer);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{AttrValue, Node};

    fn node(mode: &str, skip: i64, weights: Option<Vec<f32>>) -> Node {
        node_with(mode, skip, weights, vec![0, 2], vec![0, 1, 2])
    }

    fn node_with(
        mode: &str,
        skip: i64,
        weights: Option<Vec<f32>>,
        counts: Vec<i64>,
        indexes: Vec<i64>,
    ) -> Node {
        let mut n = Node::new("t", "TfIdfVectorizer", &["x"], &["y"])
            .with_attr("min_gram_length", AttrValue::Int(1))
            .with_attr("max_gram_length", AttrValue::Int(2))
            .with_attr("max_skip_count", AttrValue::Int(skip))
            .with_attr("mode", AttrValue::String(mode.as_bytes().to_vec()))
            .with_attr("ngram_counts", AttrValue::Ints(counts))
            .with_attr("ngram_indexes", AttrValue::Ints(indexes))
            .with_attr("pool_int64s", AttrValue::Ints(vec![4, 9, 4, 9]));
        if let Some(w) = weights {
            n = n.with_attr("weights", AttrValue::Floats(w));
        }
        n
    }

    #[test]
    fn counts_with_skips_and_modes() {
        // Unigrams 4 and 9, bigram (4, 9).
        let x = Tensor::from_i64(&[2, 4], vec![4, 9, 4, 1, 4, 1, 1, 9]);
        let run = |n: &Node| eval(&OpCtx { node: n, opset: 9 }, &[Some(&x)]).unwrap()[0].clone();
        let y = run(&node("TF", 0, None));
        assert_eq!(y.shape, vec![2, 3]);
        assert_eq!(y.to_f32_vec(), vec![2.0, 1.0, 1.0, 1.0, 1.0, 0.0]);
        // Skip 2 finds (4, _, _, 9) in row 1; unigrams are still counted once.
        let y = run(&node("TF", 2, None));
        assert_eq!(y.to_f32_vec(), vec![2.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
        let w = Some(vec![0.5, 2.0, 3.0]);
        assert_eq!(run(&node("IDF", 0, w.clone())).to_f32_vec(), vec![0.5, 2.0, 3.0, 0.5, 2.0, 0.0]);
        assert_eq!(run(&node("TFIDF", 0, w)).to_f32_vec(), vec![1.0, 2.0, 3.0, 0.5, 2.0, 0.0]);
    }

    #[test]
    fn bad_attributes_and_inputs_are_errors() {
        let x = Tensor::from_i64(&[3], vec![1, 2, 3]);
        let run = |n: &Node, x: &Tensor| eval(&OpCtx { node: n, opset: 9 }, &[Some(x)]);
        let bad_counts = node_with("TF", 0, None, vec![0, 3], vec![0, 1, 2]);
        assert!(run(&bad_counts, &x).is_err());
        let bad_index = node_with("TF", 0, None, vec![0, 2], vec![0, 1]);
        assert!(run(&bad_index, &x).is_err());
        let huge = node_with("TF", 0, None, vec![0, 2], vec![0, 1, 1 << 40]);
        assert!(run(&huge, &x).is_err());
        assert!(run(&node("XX", 0, None), &x).is_err());
        assert!(run(&node("TF", 0, None), &Tensor::from_f32(&[3], vec![1.0; 3])).is_err());
        assert!(run(&node("TF", 0, None), &Tensor::from_i64(&[1, 1, 3], vec![1; 3])).is_err());
    }
}
