//! 4-bit weight storage: weights quantized to 2–4 bits are written as ONNX `int4`
//! initializers (opset 21, two codes per byte) under their DequantizeLinear, so a W4 file
//! is about half the size of the same model with int8 codes.
//!
//! The codes do not change: an int8 initializer whose every code lies in `[-8, 7]` is
//! re-tagged `int4` (the graph IR keeps 4-bit values unpacked in an `i8` buffer; only the
//! ONNX writer packs them). ONNX Runtime 1.32 runs `DequantizeLinear` of `int4` per tensor
//! and per axis on the CPU provider; quantkit's engine reads `int4` weights as the same
//! i8 codes. 3- and 2-bit codes go in `int4` too (ONNX's `int2` needs opset 25).

use std::collections::HashMap;

use quantkit_graph::{DType, Data, Graph, OpKind};

use crate::error::Result;

fn fits_int4(t: &quantkit_graph::Tensor) -> bool {
    t.dtype == DType::I8
        && matches!(&t.data, Data::I8(v) if v.iter().all(|&c| (-8..=7).contains(&c)))
}

/// Re-tags as `int4` every int8 initializer that only DequantizeLinear nodes read as their
/// input 0 and whose codes all fit in `[-8, 7]`, with the zero points of those nodes (a
/// zero point shared with a node left in int8 is copied under a new name). Raises the
/// graph to opset 21 (the first with `int4`) when anything changed. Returns the number of
/// initializers stored in 4 bits.
pub fn store_weights_int4(g: &mut Graph) -> Result<usize> {
    // Readers of each initializer: (node, input index).
    let mut readers: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (ni, n) in g.nodes.iter().enumerate() {
        for (ii, v) in n.inputs.iter().enumerate() {
            if g.initializers.contains_key(v) {
                readers.entry(v.as_str()).or_default().push((ni, ii));
            }
        }
    }
    for o in &g.outputs {
        if let Some(r) = readers.get_mut(o.name.as_str()) {
            // A graph output keeps its type: mark it as read by "nothing convertible".
            r.push((usize::MAX, 0));
        }
    }
    let mut weights: Vec<String> = Vec::new();
    let mut dqs: Vec<usize> = Vec::new();
    for (name, rs) in &readers {
        let t = &g.initializers[*name];
        if !fits_int4(t) {
            continue;
        }
        let ok = rs.iter().all(|&(ni, ii)| {
            ni != usize::MAX && ii == 0 && g.nodes[ni].is(OpKind::DequantizeLinear) && {
                // The zero point, when there is one, must fit too.
                let n = &g.nodes[ni];
                match n.inputs.get(2).filter(|z| !z.is_empty()) {
                    None => true,
                    Some(z) => g.initializers.get(z).is_some_and(fits_int4),
                }
            }
        });
        if ok {
            weights.push((*name).to_string());
            dqs.extend(rs.iter().map(|&(ni, _)| ni));
        }
    }
    if weights.is_empty() {
        return Ok(0);
    }
    weights.sort();
    dqs.sort_unstable();
    dqs.dedup();
    // Zero points: re-tag when every reader is a converted DequantizeLinear's input 2,
    // otherwise give the converted nodes an int4 copy.
    let mut zp_new: HashMap<String, String> = HashMap::new();
    for &ni in &dqs {
        let Some(z) = g.nodes[ni].inputs.get(2).filter(|z| !z.is_empty()).cloned() else {
            continue;
        };
        if zp_new.contains_key(&z) {
            continue;
        }
        let shared = readers[z.as_str()]
            .iter()
            .any(|&(r, ii)| r == usize::MAX || ii != 2 || dqs.binary_search(&r).is_err());
        let name = if shared {
            let mut k = 0;
            let mut n = format!("{z}_int4");
            while g.initializers.contains_key(&n) {
                k += 1;
                n = format!("{z}_int4_{k}");
            }
            n
        } else {
            z.clone()
        };
        zp_new.insert(z, name);
    }
    for (old, new) in &zp_new {
        let t = g.initializers[old].clone().with_dtype(DType::I4);
        g.initializers.insert(new.clone(), t);
    }
    for &ni in &dqs {
        if let Some(z) = g.nodes[ni].inputs.get_mut(2) {
            if let Some(n) = zp_new.get(z) {
                *z = n.clone();
            }
        }
    }
    for w in &weights {
        let t = g.initializers.remove(w).expect("collected above");
        g.initializers.insert(w.clone(), t.with_dtype(DType::I4));
    }
    crate::prepare::upgrade_opset_21(g)?;
    Ok(weights.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantkit_graph::{Node, Tensor, ValueInfo};

    fn dq_graph(codes: Vec<i8>, shared_zp: bool) -> Graph {
        let mut g = Graph::default();
        g.opset_imports.push((String::new(), 13));
        g.inputs.push(ValueInfo::new("x", DType::F32, &[1, 2]));
        g.outputs.push(ValueInfo::new("y", DType::F32, &[1, 2]));
        g.initializers.insert(
            "w".into(),
            Tensor::new(vec![2, 2], Data::I8(codes)).unwrap(),
        );
        g.initializers
            .insert("s".into(), Tensor::from_f32(&[1], vec![0.5]));
        g.initializers
            .insert("z".into(), Tensor::new(vec![1], Data::I8(vec![0])).unwrap());
        g.nodes.push(Node::new(
            "dq",
            "DequantizeLinear",
            &["w", "s", "z"],
            &["wf"],
        ));
        g.nodes
            .push(Node::new("mm", "MatMul", &["x", "wf"], &["m"]));
        if shared_zp {
            g.initializers.insert(
                "big".into(),
                Tensor::new(vec![2], Data::I8(vec![100, -100])).unwrap(),
            );
            g.nodes.push(Node::new(
                "dq2",
                "DequantizeLinear",
                &["big", "s", "z"],
                &["bf"],
            ));
            g.nodes.push(Node::new("add", "Add", &["m", "bf"], &["y"]));
        } else {
            g.nodes.push(Node::new("id", "Identity", &["m"], &["y"]));
        }
        g
    }

    #[test]
    fn narrow_codes_become_int4_and_wide_ones_stay() {
        let mut g = dq_graph(vec![-8, 7, 0, 3], false);
        assert_eq!(store_weights_int4(&mut g).unwrap(), 1);
        assert_eq!(g.initializers["w"].dtype, DType::I4);
        assert_eq!(g.initializers["z"].dtype, DType::I4);
        assert_eq!(g.opset(), 21);
        assert_eq!(g.initializers["w"].to_i64_vec(), vec![-8, 7, 0, 3]);

        // A code outside [-8, 7]: nothing changes, opset included.
        let mut g = dq_graph(vec![-9, 7, 0, 3], false);
        assert_eq!(store_weights_int4(&mut g).unwrap(), 0);
        assert_eq!(g.initializers["w"].dtype, DType::I8);
        assert_eq!(g.opset(), 13);

        // A zero point shared with an int8 DequantizeLinear: the int4 one gets a copy.
        let mut g = dq_graph(vec![1, 2, 3, 4], true);
        assert_eq!(store_weights_int4(&mut g).unwrap(), 1);
        assert_eq!(g.initializers["z"].dtype, DType::I8);
        assert_eq!(g.initializers["big"].dtype, DType::I8);
        let dq = g.nodes.iter().find(|n| n.name == "dq").unwrap();
        assert_eq!(g.initializers[&dq.inputs[2]].dtype, DType::I4);
    }
}
