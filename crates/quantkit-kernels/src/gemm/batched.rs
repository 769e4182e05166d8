//! MatMul of two 8-bit activation tensors (attention's `Q·Kᵀ` and `P·V`; ONNX Runtime's
//! QLinearMatMul with an activation B): `out[b] = stage(Σ_k (a[b] − za)(b[b] − zb))` for
//! every matrix `b` of the broadcast batch.
//!
//! ONNX MatMul semantics for operands of rank ≥ 2: `a` is `[.., M, K]`, `b` is `[.., K, N]`,
//! and the batch axes in front broadcast as in NumPy (right-aligned; equal, or 1). Each B
//! matrix is packed at run time into the kernels' panels ([`PackedWeights`], the same
//! packing as constant weights, per-tensor zero point, u8 codes stored as `b − 128` with
//! zero point `zb − 128`) and multiplied with the dispatched GEMM and its fused output
//! stage ([`super::gemm_quant_with`]): the same kernels, the same (K1) zero-point
//! correction and the same requantization as the constant-weight MatMul, so every ISA gives
//! the same bytes. Packing costs `O(K·N)` per B matrix against the product's `O(M·K·N)`; a
//! B matrix shared by consecutive batch entries (broadcast) is packed once.

use super::{gemm_quant_with, Activations, PackedWeights};
use crate::dispatch::{self, table_for, Isa};
use crate::error::{KernelError, Result};
use crate::output::{OutputStage, QuantType};

const OP: &str = "matmul_codes";

/// The codes of one operand: u8 or i8, row-major.
#[derive(Debug, Clone, Copy)]
pub enum Codes<'a> {
    /// u8 codes.
    U8(&'a [u8]),
    /// i8 codes.
    I8(&'a [i8]),
}

impl Codes<'_> {
    fn len(&self) -> usize {
        match self {
            Codes::U8(d) => d.len(),
            Codes::I8(d) => d.len(),
        }
    }
}

/// One operand of [`matmul_codes_quant`]: its codes, ONNX shape (rank ≥ 2) and per-tensor
/// zero point.
#[derive(Debug, Clone, Copy)]
pub struct CodeTensor<'a> {
    /// The codes, `shape.iter().product()` of them.
    pub codes: Codes<'a>,
    /// The ONNX shape, `[.., M, K]` for A and `[.., K, N]` for B.
    pub shape: &'a [usize],
    /// The zero point (in the codes' own domain).
    pub zero_point: i32,
}

/// The output shape of ONNX MatMul of `a` `[.., M, K]` and `b` `[.., K, N]`, both of rank
/// ≥ 2 with broadcastable batch axes, or why the batched kernel does not take them.
pub fn matmul_codes_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let bad = |arg, reason: String| KernelError::InvalidArgument {
        op: OP,
        arg,
        reason,
    };
    if a.len() < 2 || b.len() < 2 {
        return Err(bad(
            "a/b",
            format!("operands of rank ≥ 2 only (got {a:?} × {b:?})"),
        ));
    }
    let (ra, rb) = (a.len(), b.len());
    let (m, k, kb, n) = (a[ra - 2], a[ra - 1], b[rb - 2], b[rb - 1]);
    if k != kb {
        return Err(bad("b", format!("K differs: {a:?} × {b:?}")));
    }
    let rank = ra.max(rb);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank - 2 {
        let da = if i + ra >= rank { a[i + ra - rank] } else { 1 };
        let db = if i + rb >= rank { b[i + rb - rank] } else { 1 };
        out.push(match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(bad(
                    "a/b",
                    format!("batch axes do not broadcast: {a:?} × {b:?}"),
                ))
            }
        });
    }
    out.extend([m, n]);
    Ok(out)
}

/// For each matrix of the broadcast batch `out_batch`, the index of the matrix of an
/// operand with batch axes `batch` (right-aligned; axes of size 1 repeat).
fn batch_index(out_batch: &[usize], batch: &[usize]) -> Vec<usize> {
    let total: usize = out_batch.iter().product();
    let off = out_batch.len() - batch.len();
    (0..total)
        .map(|mut flat| {
            let (mut idx, mut stride) = (0, 1);
            for (axis, &d) in out_batch.iter().enumerate().rev() {
                let i = flat % d;
                flat /= d;
                if axis >= off {
                    let od = batch[axis - off];
                    if od != 1 {
                        idx += i * stride;
                    }
                    stride *= od;
                }
            }
            idx
        })
        .collect()
}

/// [`matmul_codes_quant_with`] on the dispatched ISA.
pub fn matmul_codes_quant<T: QuantType>(
    a: &CodeTensor<'_>,
    b: &CodeTensor<'_>,
    stage: &OutputStage,
    out: &mut [T],
) -> Result<()> {
    matmul_codes_quant_with(dispatch::isa(), a, b, stage, out)
}

/// `out = stage((a − za) · (b − zb))`, ONNX MatMul of two code tensors of rank ≥ 2 with
/// broadcast batch axes (output shape [`matmul_codes_shape`]), i32 accumulation, the output
/// stage per tensor (one multiplier; no bias), on ISA `isa`. `K` up to
/// [`super::MAX_K`]; `K` or `N` zero is rejected (`M` zero writes nothing).
pub fn matmul_codes_quant_with<T: QuantType>(
    isa: Isa,
    a: &CodeTensor<'_>,
    b: &CodeTensor<'_>,
    stage: &OutputStage,
    out: &mut [T],
) -> Result<()> {
    let shape = matmul_codes_shape(a.shape, b.shape)?;
    for (arg, t) in [("a", a), ("b", b)] {
        let want: usize = t.shape.iter().product();
        if t.codes.len() != want {
            return Err(KernelError::BufferLength {
                op: OP,
                arg,
                expected: want,
                got: t.codes.len(),
            });
        }
    }
    let total: usize = shape.iter().product();
    if out.len() != total {
        return Err(KernelError::BufferLength {
            op: OP,
            arg: "out",
            expected: total,
            got: out.len(),
        });
    }
    let (ra, rb, r) = (a.shape.len(), b.shape.len(), shape.len());
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    if m == 0 {
        return Ok(());
    }
    stage.validate(OP, 1)?;
    let out_batch = &shape[..r - 2];
    let ia = batch_index(out_batch, &a.shape[..ra - 2]);
    let ib = batch_index(out_batch, &b.shape[..rb - 2]);
    let geom = table_for(isa)?.mmm().geometry;
    let pack = |j: usize| -> Result<PackedWeights> {
        let base = j * k * n;
        match b.codes {
            Codes::I8(d) => PackedWeights::pack(geom, k, n, &[b.zero_point], 0, k * n, |kk, c| {
                d[base + kk * n + c]
            }),
            Codes::U8(d) => {
                PackedWeights::pack(geom, k, n, &[b.zero_point], -128, k * n, |kk, c| {
                    (d[base + kk * n + c] ^ 0x80) as i8
                })
            }
        }
    };
    let mut packed: Option<(usize, PackedWeights)> = None;
    for (bi, (&ja, &jb)) in ia.iter().zip(&ib).enumerate() {
        if packed.as_ref().is_none_or(|(j, _)| *j != jb) {
            packed = Some((jb, pack(jb)?));
        }
        let w = &packed.as_ref().expect("packed above").1;
        let rows = ja * m * k..(ja + 1) * m * k;
        let act = match a.codes {
            Codes::U8(d) => Activations::u8(&d[rows], m, k, a.zero_point),
            Codes::I8(d) => Activations::i8(&d[rows], m, k, a.zero_point),
        };
        gemm_quant_with(isa, &act, w, stage, &mut out[bi * m * n..(bi + 1) * m * n])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_broadcast_like_numpy() {
        assert_eq!(
            matmul_codes_shape(&[2, 3, 4, 5], &[2, 3, 5, 6]).unwrap(),
            [2, 3, 4, 6]
        );
        assert_eq!(
            matmul_codes_shape(&[4, 5], &[7, 1, 5, 6]).unwrap(),
            [7, 1, 4, 6]
        );
        assert_eq!(
            matmul_codes_shape(&[1, 3, 4, 5], &[2, 1, 5, 6]).unwrap(),
            [2, 3, 4, 6]
        );
        assert!(matmul_codes_shape(&[2, 4, 5], &[3, 5, 6]).is_err());
        assert!(matmul_codes_shape(&[4, 5], &[4, 6]).is_err());
        assert!(matmul_codes_shape(&[5], &[5, 6]).is_err());
    }

    #[test]
    fn batch_indices_repeat_axes_of_size_one() {
        // out batch [2, 3]: a is [1, 3] (repeats over axis 0), b is [2, 1].
        assert_eq!(batch_index(&[2, 3], &[1, 3]), [0, 1, 2, 0, 1, 2]);
        assert_eq!(batch_index(&[2, 3], &[2, 1]), [0, 0, 0, 1, 1, 1]);
        assert_eq!(batch_index(&[2, 3], &[3]), [0, 1, 2, 0, 1, 2]);
        assert_eq!(batch_index(&[2, 3], &[]), [0; 6]);
    }
}
