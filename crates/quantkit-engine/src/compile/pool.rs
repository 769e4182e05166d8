//! MaxPool patterns → [`MaxPoolStep`] (`steps/pool.rs`): `DQ(x) → MaxPool → Q` (the pool on
//! the codes, then a table when the parameters change), and a MaxPool reading codes another
//! step wrote (QOperator models).

use super::helpers::{Matcher, Why};
use super::Matched;
use crate::steps::MaxPoolStep;
use quantkit_graph::{DType, Node};
use quantkit_kernels::conv::ConvParams;

impl<'g> Matcher<'g> {
    /// `DQ(x) → MaxPool → Q` anchored at the MaxPool `ni`: the pool on the codes, then a
    /// table when the output's parameters differ.
    pub(super) fn max_pool(&self, ni: usize) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let params = pool_params(n)?;
        let k = params.kernel;
        let (dqx, xq, qx, qi, qy) = self.sandwich(n)?;
        let table = self.table(&self.g.nodes[dqx], None, &self.g.nodes[qi])?;
        let desc = format!("max_pool {}→{} {}x{}", qx.dtype, qy.dtype, k[0], k[1]);
        Ok(Matched {
            kernel: Box::new(MaxPoolStep {
                params,
                x_dtype: qx.dtype,
                table,
            }),
            inputs: vec![xq],
            output: self.g.nodes[qi].outputs[0].clone(),
            absorbed: vec![qi],
            through: vec![dqx],
            kernel_desc: desc,
        })
    }

    /// MaxPool on codes another step produced (QOperator models keep MaxPool on the
    /// quantized tensor): the integer max pool, no requantization.
    pub(super) fn max_pool_codes(&self, ni: usize, dtype: DType) -> Why<Matched> {
        let n = &self.g.nodes[ni];
        let params = pool_params(n)?;
        let x = Self::codes_input(n)?;
        let output = n
            .outputs
            .first()
            .filter(|o| !o.is_empty())
            .cloned()
            .ok_or("no output")?;
        let desc = format!(
            "max_pool {dtype} {}x{} on codes",
            params.kernel[0], params.kernel[1]
        );
        Ok(Matched {
            kernel: Box::new(MaxPoolStep {
                params,
                x_dtype: dtype,
                table: None,
            }),
            inputs: vec![x],
            output,
            absorbed: Vec::new(),
            through: Vec::new(),
            kernel_desc: desc,
        })
    }
}

/// The 2-D parameters of a MaxPool node the NHWC pooling steps run: floor output size, no
/// Indices output, explicit pads (or VALID).
pub(super) fn pool_params(n: &Node) -> Why<ConvParams> {
    let attr = |e: quantkit_graph::OpError| e.to_string();
    if n.outputs.len() > 1 && !n.outputs[1].is_empty() {
        return Err("the Indices output is used".into());
    }
    if n.attr_int("ceil_mode", 0).map_err(attr)? != 0 {
        return Err("ceil_mode = 1".into());
    }
    let auto_pad = n.attr_string("auto_pad", "NOTSET").map_err(attr)?;
    if !matches!(auto_pad.as_str(), "NOTSET" | "VALID" | "") {
        return Err(format!("auto_pad {auto_pad} needs the input size"));
    }
    let k = n
        .attr_ints("kernel_shape")
        .map_err(attr)?
        .unwrap_or_default();
    if k.len() != 2 || k.iter().any(|&v| v < 1) {
        return Err(format!("kernel_shape {k:?}: the kernel is 2-D"));
    }
    let two = |name: &str| -> Why<[usize; 2]> {
        match n.attr_ints(name).map_err(attr)? {
            None => Ok([1; 2]),
            Some(v) if v.len() == 2 && v.iter().all(|&x| x >= 1) => {
                Ok([v[0] as usize, v[1] as usize])
            }
            Some(v) => Err(format!("{name} {v:?} not supported")),
        }
    };
    let pads = match n.attr_ints("pads").map_err(attr)? {
        Some(p) if auto_pad != "VALID" => {
            if p.len() != 4 || p.iter().any(|&x| x < 0) {
                return Err(format!("pads {p:?} not supported"));
            }
            [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
        }
        _ => [0; 4],
    };
    let params = ConvParams {
        kernel: [k[0] as usize, k[1] as usize],
        stride: two("strides")?,
        dilation: two("dilations")?,
        pads,
        groups: 1,
    };
    Ok(params)
}
