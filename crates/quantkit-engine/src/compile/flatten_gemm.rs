//! A `Flatten(axis = 1)` of codes in front of a GEMM step, absorbed into it: the step then
//! reads the pre-Flatten codes itself through [`FlatInput`] (`steps/flatten_gemm.rs`). Not
//! an anchor of its own; `gemm.rs` asks these matchers.

use super::helpers::Matcher;
use super::quant::QWeight;
use crate::steps::FlatInput;
use quantkit_graph::DType;
use quantkit_graph::OpKind;
use quantkit_kernels::gemm::WeightLayout;

/// The kernel description's note on a GEMM step that reads a Flatten's input.
pub(super) const FLAT_DESC: &str = " + flatten (NHWC read in place, weights permuted)";

/// Where a GEMM step that absorbs a Flatten reads: [`Matcher::flatten_before`].
pub(super) struct FlatSource {
    /// The pre-Flatten codes.
    pub(super) codes: String,
    /// The Flatten and the QuantizeLinear after it.
    pub(super) absorbed: Vec<usize>,
    /// The DequantizeLinear before the Flatten.
    pub(super) through: usize,
}

impl<'g> Matcher<'g> {
    /// `codes → DQ → Flatten(axis = 1) → Q → DQ → ` the GEMM `ni` (whose activation DQ is
    /// `dqx`), where Q∘DQ around the Flatten maps every code to itself ([`Matcher::table`]
    /// is `None`) and the Flatten, Q and `dqx` outputs have no other reader: the GEMM step
    /// can read the pre-Flatten codes itself ([`FlatInput`]), saving the Flatten step and,
    /// for an NHWC tensor, its transpose to ONNX order. `None` when the pattern is not there.
    pub(super) fn flatten_before(&self, ni: usize, dqx: usize) -> Option<FlatSource> {
        let nodes = &self.g.nodes;
        let dq = &nodes[dqx];
        if self.sole_reader(dq.outputs.first()?).ok()? != ni
            || self.sole_reader(&dq.inputs[0]).ok()? != dqx
        {
            return None;
        }
        let qi = self.uses.producer(dq.inputs[0].as_str())?;
        let q = &nodes[qi];
        if !q.is(OpKind::QuantizeLinear) {
            return None;
        }
        let fi = self.uses.producer(q.inputs.first()?.as_str())?;
        let f = &nodes[fi];
        let flat_ok = f.is(OpKind::Flatten)
            && f.inputs.len() == 1
            && f.outputs.len() == 1
            && f.attr_int("axis", 1).ok()? == 1
            && !self.opts.keep_float.iter().any(|k| k == &f.name);
        if !flat_ok || self.sole_reader(&f.outputs[0]).ok()? != qi {
            return None;
        }
        let pdq = self.dq_of(&f.inputs[0]).ok()?;
        if self.table(&nodes[pdq], None, q).ok()?.is_some() {
            return None;
        }
        Some(FlatSource {
            codes: nodes[pdq].inputs[0].clone(),
            absorbed: vec![fi, qi],
            through: pdq,
        })
    }

    /// The GEMM `ni`'s activation `a`, or, when `a` is a `Flatten(axis = 1)` of codes of
    /// type `dtype` read by nothing else, the Flatten's input, which the step then reads
    /// itself ([`FlatInput`]); with the absorbed Flatten node.
    pub(super) fn flattened(
        &self,
        ni: usize,
        a: String,
        dtype: DType,
        w: &QWeight,
        layout: WeightLayout,
    ) -> (String, Option<FlatInput>, Vec<usize>) {
        let flatten = self.uses.producer(a.as_str()).filter(|&fi| {
            let f = &self.g.nodes[fi];
            f.is(OpKind::Flatten)
                && f.inputs.len() == 1
                && f.outputs.len() == 1
                && f.attr_int("axis", 1).ok() == Some(1)
                && !self.opts.keep_float.iter().any(|k| k == &f.name)
                && self.sole_reader(&a).ok() == Some(ni)
                && self.code_dtype(&f.inputs[0]) == Some(dtype)
        });
        match flatten {
            Some(fi) => (
                self.g.nodes[fi].inputs[0].clone(),
                Some(FlatInput::new(
                    w.values.clone(),
                    layout,
                    w.zero_points.clone(),
                )),
                vec![fi],
            ),
            None => (a, None, Vec::new()),
        }
    }
}
