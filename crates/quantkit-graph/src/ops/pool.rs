//! Shared sliding-window machinery of MaxPool and AveragePool (not an operator itself).

use super::{resolve_pads, window_out, OpCtx};
use crate::error::OpError;

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
        if shape.len() < 3 {
            return Err(OpError::shape("input [N, C, D...]", shape));
        }
        let nd = shape.len() - 2;
        let node = ctx.node;
        let k: Vec<usize> = node
            .attr_ints("kernel_shape")?
            .ok_or_else(|| OpError::attr("kernel_shape", "required"))?
            .iter()
            .map(|&v| v.max(0) as usize)
            .collect();
        let get = |name: &str| -> Result<Vec<usize>, OpError> {
            Ok(node
                .attr_ints(name)?
                .map(|v| v.iter().map(|&x| x.max(1) as usize).collect())
                .unwrap_or_else(|| vec![1; nd]))
        };
        let strides = get("strides")?;
        let dilations = get("dilations")?;
        if k.len() != nd || strides.len() != nd || dilations.len() != nd {
            return Err(OpError::attr(
                "kernel_shape",
                format!("expected {nd} spatial values"),
            ));
        }
        let ceil = node.attr_int("ceil_mode", 0)? != 0;
        let in_sp = shape[2..].to_vec();
        let (pb, pe) = resolve_pads(node, &in_sp, &k, &strides, &dilations)?;
        let out_sp = (0..nd)
            .map(|i| window_out(in_sp[i], k[i], strides[i], dilations[i], pb[i], pe[i], ceil))
            .collect::<Result<Vec<_>, _>>()?;
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
