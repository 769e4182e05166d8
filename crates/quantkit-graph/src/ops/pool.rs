//! Shared sliding-window machinery of MaxPool and AveragePool (not an operator itself).

use super::{per_axis, positive_ints, window_out, OpCtx, PadSpec};
use crate::error::OpError;
use crate::ir::Node;

/// The attributes of MaxPool, AveragePool and QLinearAveragePool, parsed once and without
/// input shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAttrs {
    /// `kernel_shape` (required, positive).
    pub kernel_shape: Vec<usize>,
    /// `strides` (positive), default 1 on every axis.
    pub strides: Option<Vec<usize>>,
    /// `dilations` (positive), default 1 on every axis.
    pub dilations: Option<Vec<usize>>,
    /// `pads` / `auto_pad`.
    pub pads: PadSpec,
    /// `ceil_mode`: output size rounded up.
    pub ceil_mode: bool,
}

impl PoolAttrs {
    /// Reads the attributes of `node`.
    pub fn parse(node: &Node) -> Result<PoolAttrs, OpError> {
        Ok(PoolAttrs {
            kernel_shape: positive_ints(node, "kernel_shape")?
                .ok_or_else(|| OpError::attr("kernel_shape", "required"))?,
            strides: positive_ints(node, "strides")?,
            dilations: positive_ints(node, "dilations")?,
            pads: PadSpec::parse(node)?,
            ceil_mode: node.attr_int("ceil_mode", 0)? != 0,
        })
    }
}

/// Pooling geometry over the spatial axes of an `[N, C, D...]` input.
#[derive(Clone, Debug)]
pub struct PoolGeom {
    /// N·C planes.
    pub planes: usize,
    /// Input spatial sizes.
    pub in_sp: Vec<usize>,
    /// Kernel.
    pub k: Vec<usize>,
    /// Strides.
    pub strides: Vec<usize>,
    /// Dilations.
    pub dilations: Vec<usize>,
    /// Padding before each axis.
    pub pad_begin: Vec<usize>,
    /// Padding after each axis.
    pub pad_end: Vec<usize>,
    /// Output spatial sizes.
    pub out_sp: Vec<usize>,
}

impl PoolGeom {
    /// Reads `kernel_shape`, `strides`, `dilations`, `pads`/`auto_pad` and `ceil_mode`.
    pub fn new(ctx: &OpCtx, shape: &[usize]) -> Result<PoolGeom, OpError> {
        PoolGeom::with(&PoolAttrs::parse(ctx.node)?, shape)
    }

    /// The geometry of parsed attributes `a` over an input of shape `shape`.
    pub fn with(a: &PoolAttrs, shape: &[usize]) -> Result<PoolGeom, OpError> {
        if shape.len() < 3 {
            return Err(OpError::shape("input [N, C, D...]", shape));
        }
        let nd = shape.len() - 2;
        let k = a.kernel_shape.clone();
        if k.len() != nd {
            return Err(OpError::attr(
                "kernel_shape",
                format!("expected {nd} spatial values"),
            ));
        }
        let strides = per_axis("strides", &a.strides, nd)?;
        let dilations = per_axis("dilations", &a.dilations, nd)?;
        let ceil = a.ceil_mode;
        let in_sp = shape[2..].to_vec();
        let (pb, pe) = a.pads.resolve(&in_sp, &k, &strides, &dilations)?;
        let out_sp = (0..nd)
            .map(|i| window_out(in_sp[i], k[i], strides[i], dilations[i], pb[i], pe[i], ceil))
            .collect::<Result<Vec<_>, _>>()?;
        let mut y_shape = shape[..2].to_vec();
        y_shape.extend_from_slice(&out_sp);
        super::alloc_len("pool output", &y_shape)?;
        // `taps` holds one entry per output position and kernel tap.
        let mut taps = out_sp.clone();
        taps.extend_from_slice(&k);
        super::alloc_len("pool window table", &taps)?;
        Ok(PoolGeom {
            planes: shape[0] * shape[1],
            in_sp,
            k,
            strides,
            dilations,
            pad_begin: pb,
            pad_end: pe,
            out_sp,
        })
    }

    /// For every output position (within one plane) and kernel tap, in that order:
    /// `(flat input index within the plane, or None on padding; whether the tap lies
    /// inside the padded input)`. Computed once and shared by all N·C planes.
    pub fn taps(&self) -> Vec<(Option<usize>, bool)> {
        let nd = self.k.len();
        let out_len: usize = self.out_sp.iter().product();
        let klen: usize = self.k.iter().product();
        let mut taps = Vec::with_capacity(out_len * klen);
        let mut oidx = vec![0usize; nd];
        let mut kidx = vec![0usize; nd];
        for o in 0..out_len {
            let mut rem = o;
            for a in (0..nd).rev() {
                oidx[a] = rem % self.out_sp[a];
                rem /= self.out_sp[a];
            }
            for t in 0..klen {
                let mut rem = t;
                for a in (0..nd).rev() {
                    kidx[a] = rem % self.k[a];
                    rem /= self.k[a];
                }
                let mut off = Some(0usize);
                let mut in_padded = true;
                for a in 0..nd {
                    let i = (oidx[a] * self.strides[a] + kidx[a] * self.dilations[a]) as isize
                        - self.pad_begin[a] as isize;
                    if i < -(self.pad_begin[a] as isize)
                        || i >= (self.in_sp[a] + self.pad_end[a]) as isize
                    {
                        in_padded = false;
                    }
                    if i < 0 || i >= self.in_sp[a] as isize {
                        off = None;
                    } else if let Some(v) = off.as_mut() {
                        *v = *v * self.in_sp[a] + i as usize;
                    }
                }
                taps.push((off, in_padded));
            }
        }
        taps
    }

    /// Runs `f(input_plane, window_taps) -> value` for every output element, planes in
    /// parallel; returns the `[planes × out_len]` results.
    pub fn map_windows<T: Copy + Default + Send + Sync>(
        &self,
        x: &[T],
        f: impl Fn(&[T], &[(Option<usize>, bool)]) -> T + Sync,
    ) -> Vec<T> {
        use rayon::prelude::*;
        let in_len: usize = self.in_sp.iter().product();
        let out_len: usize = self.out_sp.iter().product();
        let klen: usize = self.k.iter().product::<usize>().max(1);
        let taps = self.taps();
        let mut y = vec![T::default(); self.planes * out_len];
        if y.is_empty() {
            return y;
        }
        y.par_chunks_mut(out_len).enumerate().for_each(|(p, yp)| {
            let xp = &x[p * in_len..(p + 1) * in_len];
            for (o, v) in yp.iter_mut().enumerate() {
                *v = f(xp, &taps[o * klen..(o + 1) * klen]);
            }
        });
        y
    }
}
