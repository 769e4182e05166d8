//! `TreeEnsemble` (ai.onnx.ml, version 5): a forest of decision trees over the rows of
//! `X [N, F]`, giving `[N, n_targets]` in `X`'s float type.
//!
//! Interior node `i` tests feature `nodes_featureids[i]` of the row against
//! `nodes_splits[i]` by `nodes_modes[i]` (0 `<=`, 1 `<`, 2 `>=`, 3 `>`, 4 `==`, 5 `!=`,
//! 6 membership in a set); a NaN feature takes the true branch where
//! `nodes_missing_value_tracks_true[i]` is set. The true branch goes to leaf
//! `nodes_truenodeids[i]` if `nodes_trueleafs[i]`, else to that interior node (likewise
//! for false). The sets of the membership nodes are `membership_values`, in the order of
//! those nodes, each ended by a NaN. Each tree (rooted at `tree_roots`; a root whose both
//! branches are the same leaf is that leaf) adds `leaf_weights[l]` to target
//! `leaf_targetids[l]`, aggregated by `aggregate_function` (0 average, 1 sum, 2 min,
//! 3 max; targets no tree reaches keep 0, or the largest/smallest finite value for min/
//! max, as the ONNX reference does). Only `post_transform` 0 (none) is supported.
//! Walks are bounded by the node count, so a cyclic forest is an error, not a hang.

use super::{input, OpCtx};
use super::max_elements;
use crate::error::OpError;
use crate::ir::AttrValue;
use crate::tensor::{DType, Data, Tensor};


/// A tensor attribute as f64 values (missing: `None`).
fn tensor_attr(ctx: &OpCtx, name: &str) -> Result<Option<Vec<f64>>, OpError> {
    match ctx.node.attr(name) {
        None => Ok(None),
        Some(AttrValue::Tensor(t)) => Ok(Some(t.to_f64_vec())),
        Some(_) => Err(OpError::Invalid(format!("{name} must be a tensor attribute"))),
    }
}

fn ints(ctx: &OpCtx, name: &str) -> Result<Vec<i64>, OpError> {
    ctx.node
        .attr_ints(name)?
        .ok_or_else(|| OpError::Invalid(format!("{name} is required")))
}

/// Where a branch leads.
#[derive(Clone, Copy)]
enum Next {
    Node(usize),
    Leaf(usize),
}

/// One interior node.
struct Split {
    mode: u8,
    value: f64,
    /// Members of a set-membership node.
    members: Vec<f64>,
    feature: usize,
    missing_true: bool,
    yes: Next,
    no: Next,
}

impl Split {
    fn test(&self, x: f64) -> bool {
        if x.is_nan() {
            return self.missing_true;
        }
        match self.mode {
            0 => x <= self.value,
            1 => x < self.value,
            2 => x >= self.value,
            3 => x > self.value,
            4 => x == self.value,
            5 => x != self.value,
            _ => self.members.contains(&x),
        }
    }
}

/// The forest, checked.
struct Forest {
    nodes: Vec<Split>,
    roots: Vec<Next>,
    weights: Vec<f64>,
    targets: Vec<usize>,
    n_targets: usize,
    aggregate: i64,
}

fn forest(ctx: &OpCtx, features: usize) -> Result<Forest, OpError> {
    let post = ctx.node.attr_int("post_transform", 0)?;
    if post != 0 {
        return Err(OpError::Unsupported(format!(
            "TreeEnsemble post_transform {post} (only 0, none)"
        )));
    }
    let aggregate = ctx.node.attr_int("aggregate_function", 1)?;
    if !(0..=3).contains(&aggregate) {
        return Err(OpError::Invalid(format!("aggregate_function {aggregate}")));
    }
    let n_targets = usize::try_from(ctx.node.attr_int("n_targets", -1)?)
        .map_err(|_| OpError::Invalid("n_targets is required".into()))?;
    let splits = tensor_attr(ctx, "nodes_splits")?
        .ok_or_else(|| OpError::Invalid("nodes_splits is required".into()))?;
    let modes = tensor_attr(ctx, "nodes_modes")?
        .ok_or_else(|| OpError::Invalid("nodes_modes is required".into()))?;
    let feats = ints(ctx, "nodes_featureids")?;
    let (ty, ny) = (ints(ctx, "nodes_truenodeids")?, ints(ctx, "nodes_falsenodeids")?);
    let (tl, nl) = (ints(ctx, "nodes_trueleafs")?, ints(ctx, "nodes_falseleafs")?);
    let missing = ctx
        .node
        .attr_ints("nodes_missing_value_tracks_true")?
        .unwrap_or_else(|| vec![0; splits.len()]);
    let weights = tensor_attr(ctx, "leaf_weights")?
        .ok_or_else(|| OpError::Invalid("leaf_weights is required".into()))?;
    let raw_targets = ints(ctx, "leaf_targetids")?;
    let n = splits.len();
    let lens = [modes.len(), feats.len(), ty.len(), ny.len(), tl.len(), nl.len(), missing.len()];
    if lens.iter().any(|&l| l != n) || raw_targets.len() != weights.len() {
        return Err(OpError::Invalid(format!(
            "node attributes of lengths {lens:?} for {n} splits, {} leaf targets for {} weights",
            raw_targets.len(),
            weights.len()
        )));
    }
    let targets: Vec<usize> = raw_targets
        .iter()
        .map(|&t| usize::try_from(t).ok().filter(|&t| t < n_targets))
        .collect::<Option<_>>()
        .ok_or_else(|| OpError::Invalid(format!("leaf_targetids outside [0, {n_targets})")))?;
    let next = |id: i64, leaf: i64| -> Result<Next, OpError> {
        let i = usize::try_from(id).ok();
        match (leaf != 0, i) {
            (true, Some(i)) if i < weights.len() => Ok(Next::Leaf(i)),
            (false, Some(i)) if i < n => Ok(Next::Node(i)),
            _ => Err(OpError::Invalid(format!("branch to {} {id} out of range", if leaf != 0 { "leaf" } else { "node" }))),
        }
    };
    let mut sets = tensor_attr(ctx, "membership_values")?.unwrap_or_default().into_iter();
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mode = modes[i];
        if !(0.0..=6.0).contains(&mode) || mode.fract() != 0.0 {
            return Err(OpError::Invalid(format!("node {i}: mode {mode}")));
        }
        let mode = mode as u8;
        let members = if mode == 6 {
            let set: Vec<f64> = sets.by_ref().take_while(|v| !v.is_nan()).collect();
            if set.is_empty() {
                return Err(OpError::Invalid(format!(
                    "node {i}: a set-membership node without members in membership_values"
                )));
            }
            set
        } else {
            Vec::new()
        };
        let feature = usize::try_from(feats[i])
            .ok()
            .filter(|&f| f < features)
            .ok_or_else(|| OpError::Invalid(format!("node {i}: feature {} of {features}", feats[i])))?;
        nodes.push(Split {
            mode,
            value: splits[i],
            members,
            feature,
            missing_true: missing[i] != 0,
            yes: next(ty[i], tl[i])?,
            no: next(ny[i], nl[i])?,
        });
    }
    let roots = ints(ctx, "tree_roots")?
        .into_iter()
        .map(|r| {
            let i = usize::try_from(r).ok().filter(|&i| i < n);
            let i = i.ok_or_else(|| OpError::Invalid(format!("tree root {r} out of range")))?;
            let s = &nodes[i];
            Ok(match (s.yes, s.no) {
                (Next::Leaf(a), Next::Leaf(b)) if a == b => Next::Leaf(a),
                _ => Next::Node(i),
            })
        })
        .collect::<Result<_, OpError>>()?;
    Ok(Forest { nodes, roots, weights, targets, n_targets, aggregate })
}

/// The leaf a row reaches from `start`.
fn walk(f: &Forest, row: &[f64], start: Next) -> Result<usize, OpError> {
    let mut at = start;
    for _ in 0..=f.nodes.len() {
        match at {
            Next::Leaf(l) => return Ok(l),
            Next::Node(i) => {
                let s = &f.nodes[i];
                at = if s.test(row[s.feature]) { s.yes } else { s.no };
            }
        }
    }
    Err(OpError::Invalid("the trees have a cycle".into()))
}

/// Evaluates `TreeEnsemble`.
pub fn eval(ctx: &OpCtx, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
    let x = input(inputs, 0)?;
    if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16) {
        return Err(OpError::DType {
            index: 0,
            expected: "float, double or float16".into(),
            got: x.dtype.to_string(),
        });
    }
    let [rows, features] = x.shape[..] else {
        return Err(OpError::shape("[N, F]", &x.shape));
    };
    let f = forest(ctx, features)?;
    let total = rows
        .checked_mul(f.n_targets)
        .filter(|&t| t <= max_elements())
        .ok_or_else(|| OpError::Invalid(format!("{rows} × {} targets is too large", f.n_targets)))?;
    let start = match f.aggregate {
        2 => f64::MAX,
        3 => f64::MIN,
        _ => 0.0,
    };
    let mut out = vec![start; total];
    let xv = x.to_f64_vec();
    let trees = f.roots.len() as f64;
    for (r, acc) in out.chunks_mut(f.n_targets.max(1)).enumerate().take(rows) {
        let row = &xv[r * features..(r + 1) * features];
        for &root in &f.roots {
            let l = walk(&f, row, root)?;
            let (w, t) = (f.weights[l], f.targets[l]);
            acc[t] = match f.aggregate {
                0 => acc[t] + w / trees,
                2 => acc[t].min(w),
                3 => acc[t].max(w),
                _ => acc[t] + w,
            };
        }
    }
    // The untouched min/max entries hold the largest/smallest finite value of X's type.
    let (lo, hi) = match x.dtype {
        DType::F32 => (f32::MIN as f64, f32::MAX as f64),
        DType::F16 => (-65504.0, 65504.0),
        _ => (f64::MIN, f64::MAX),
    };
    for v in &mut out {
        *v = v.clamp(lo, hi);
    }
    let y = Tensor::new(vec![rows, f.n_targets], Data::F64(out))
        .map_err(|e| OpError::Invalid(e.to_string()))?;
    Ok(vec![y.cast(x.dtype)])
}

/// `TreeEnsemble` in the operator registry (domain `ai.onnx.ml`).
pub const DEF: super::OpDef = super::OpDef::onnx("TreeEnsemble", 5, eval).domain(super::ML_DOMAIN);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Node;

    fn t64(v: Vec<f64>) -> AttrValue {
        AttrValue::Tensor(Tensor::new(vec![v.len()], Data::F64(v)).unwrap())
    }

    /// One tree: x0 <= 1 → leaf 0 (target 0, weight 2); else x0 in {5, 7} → leaf 1
    /// (target 1, weight 3), else leaf 2 (target 1, weight −1).
    fn node(true_ids: Vec<i64>) -> Node {
        Node::new("t", "TreeEnsemble", &["x"], &["y"])
            .with_attr("n_targets", AttrValue::Int(2))
            .with_attr("nodes_splits", t64(vec![1.0, 0.0]))
            .with_attr("nodes_modes", t64(vec![0.0, 6.0]))
            .with_attr("membership_values", t64(vec![5.0, 7.0, f64::NAN]))
            .with_attr("nodes_featureids", AttrValue::Ints(vec![0, 0]))
            .with_attr("nodes_truenodeids", AttrValue::Ints(true_ids))
            .with_attr("nodes_trueleafs", AttrValue::Ints(vec![1, 1]))
            .with_attr("nodes_falsenodeids", AttrValue::Ints(vec![1, 2]))
            .with_attr("nodes_falseleafs", AttrValue::Ints(vec![0, 1]))
            .with_attr("leaf_weights", t64(vec![2.0, 3.0, -1.0]))
            .with_attr("leaf_targetids", AttrValue::Ints(vec![0, 1, 1]))
            .with_attr("tree_roots", AttrValue::Ints(vec![0]))
    }

    #[test]
    fn walks_splits_and_sets() {
        let n = node(vec![0, 1]);
        let x = Tensor::from_f32(&[3, 1], vec![0.5, 7.0, 6.0]);
        let y = eval(&OpCtx { node: &n, opset: 5 }, &[Some(&x)]).unwrap();
        assert_eq!(y[0].shape, vec![3, 2]);
        assert_eq!(y[0].to_f32_vec(), vec![2.0, 0.0, 0.0, 3.0, 0.0, -1.0]);
        let bad = node(vec![0, 9]);
        assert!(eval(&OpCtx { node: &bad, opset: 5 }, &[Some(&x)]).is_err());
        let wide = Tensor::from_f32(&[1, 3], vec![0.0; 3]);
        assert!(eval(&OpCtx { node: &n, opset: 5 }, &[Some(&wide)]).is_ok());
        let rank3 = Tensor::from_f32(&[1, 1, 1], vec![0.0]);
        assert!(eval(&OpCtx { node: &n, opset: 5 }, &[Some(&rank3)]).is_err());
    }
}
