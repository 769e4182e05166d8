//! MatMul of two code tensors (`gemm::matmul_codes_quant_with`): scalar against the i64
//! reference (every batch matrix, broadcast batch axes, u8/i8 operands and outputs, extreme
//! values and zero points), every SIMD ISA the CPU has equal to scalar byte for byte.

use quantkit_kernels::gemm::{matmul_codes_quant_with, matmul_codes_shape, CodeTensor, Codes};
use quantkit_kernels::output::{OutputStage, QuantType};
use quantkit_kernels::{reference, Isa};

mod common;
use common::{supported, Rng};

/// Values of one operand: plain integers and the typed codes.
struct Operand {
    shape: Vec<usize>,
    vals: Vec<i32>,
    u8s: Vec<u8>,
    i8s: Vec<i8>,
    signed: bool,
    zp: i32,
}

impl Operand {
    fn new(rng: &mut Rng, shape: &[usize], signed: bool, extreme: bool) -> Operand {
        let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
        let pick = |rng: &mut Rng| {
            if extreme {
                if rng.next().is_multiple_of(2) {
                    lo
                } else {
                    hi
                }
            } else {
                rng.range(lo, hi)
            }
        };
        let len = shape.iter().product();
        let vals: Vec<i32> = (0..len).map(|_| pick(rng)).collect();
        // Extreme: the zero point at the other end maximises |v − z|.
        let zp = if extreme {
            if vals.first() == Some(&lo) {
                hi
            } else {
                lo
            }
        } else {
            // Off-centre but not so far that every product has one sign.
            rng.range(lo + 64, hi - 64)
        };
        Operand {
            shape: shape.to_vec(),
            u8s: vals.iter().map(|&v| v as u8).collect(),
            i8s: vals.iter().map(|&v| v as i8).collect(),
            vals,
            signed,
            zp,
        }
    }
    fn tensor(&self) -> CodeTensor<'_> {
        CodeTensor {
            codes: if self.signed {
                Codes::I8(&self.i8s)
            } else {
                Codes::U8(&self.u8s)
            },
            shape: &self.shape,
            zero_point: self.zp,
        }
    }
    /// The row-major matrix `j` of the batch.
    fn matrix(&self, j: usize) -> &[i32] {
        let r = self.shape.len();
        let len = self.shape[r - 2] * self.shape[r - 1];
        &self.vals[j * len..(j + 1) * len]
    }
    /// The matrix index for broadcast batch position `pos` (axes of the output batch).
    fn index(&self, out_batch: &[usize], pos: &[usize]) -> usize {
        let batch = &self.shape[..self.shape.len() - 2];
        let off = out_batch.len() - batch.len();
        batch.iter().enumerate().fold(0, |acc, (i, &d)| {
            acc * d + if d == 1 { 0 } else { pos[off + i] }
        })
    }
}

/// The i64 reference: every output matrix from the broadcast batch, (K1) in i64, then the
/// float output stage (K3a).
fn reference(a: &Operand, b: &Operand, scale: f32, z: i32, clamp: (i32, i32)) -> Vec<i32> {
    let shape = matmul_codes_shape(&a.shape, &b.shape).unwrap();
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let k = a.shape[a.shape.len() - 1];
    let out_batch = &shape[..r - 2];
    let total: usize = out_batch.iter().product();
    let mut out = Vec::with_capacity(total * m * n);
    for flat in 0..total {
        let mut pos = vec![0; out_batch.len()];
        let mut f = flat;
        for (p, &d) in pos.iter_mut().zip(out_batch).rev() {
            *p = f % d;
            f /= d;
        }
        let am = a.matrix(a.index(out_batch, &pos));
        let bm = b.matrix(b.index(out_batch, &pos));
        let acc = reference::gemm_i64(am, m, k, a.zp, bm, n, &vec![b.zp; n]);
        out.extend(
            acc.iter()
                .map(|&v| reference::float_output_i64(v, 0, scale, z, clamp.0, clamp.1)),
        );
    }
    out
}

fn run<T: QuantType>(isa: Isa, a: &Operand, b: &Operand, stage: &OutputStage) -> Vec<i32> {
    let shape = matmul_codes_shape(&a.shape, &b.shape).unwrap();
    let mut out = vec![T::default(); shape.iter().product()];
    matmul_codes_quant_with(isa, &a.tensor(), &b.tensor(), stage, &mut out).unwrap();
    out.into_iter().map(QuantType::to_i32).collect()
}

fn check<T: QuantType>(
    rng: &mut Rng,
    sa: &[usize],
    sb: &[usize],
    signs: (bool, bool),
    extreme: bool,
    isas: &[Isa],
) {
    let a = Operand::new(rng, sa, signs.0, extreme);
    let b = Operand::new(rng, sb, signs.1, extreme);
    let k = sa[sa.len() - 1] as f32;
    // A scale that spreads the accumulators over the output range (extreme products are
    // 0 or ±255²).
    // 0 or ±255², all of one sign: ≈ K/4 of them, spread ≈ 0.4·√K of them).
    let spread = if extreme {
        100.0 / (65025.0 * k)
    } else {
        1.0 / (600.0 * k.sqrt())
    };
    let scale = spread * (1.0 + rng.range(0, 100) as f32 / 100.0);
    let (lo, hi) = (T::MIN, T::MAX);
    let z = rng.range(lo + 64, hi - 64);
    let clamp = if !extreme && rng.next().is_multiple_of(3) {
        (z, hi)
    } else {
        (lo, hi)
    };
    let stage = OutputStage::float(vec![scale], z).with_clamp(clamp.0, clamp.1);
    let what = format!("a {sa:?} b {sb:?} signed {signs:?} extreme {extreme}");
    let want = reference(&a, &b, scale, z, clamp);
    let scalar = run::<T>(Isa::Scalar, &a, &b, &stage);
    assert_eq!(scalar, want, "scalar vs i64 reference: {what}");
    assert!(
        want.len() < 4 || want.iter().any(|&v| v != want[0]),
        "degenerate case (one code everywhere): {what} scale {scale} z {z} clamp {clamp:?} {:?}",
        &want[..want.len().min(12)]
    );
    for &isa in isas {
        assert_eq!(
            run::<T>(isa, &a, &b, &stage),
            scalar,
            "{} vs scalar: {what}",
            isa.name()
        );
    }
}

#[test]
fn batched_matmul_of_codes_equals_the_reference_on_every_isa() {
    let isas = supported();
    let mut rng = Rng(7);
    let shapes: &[(&[usize], &[usize])] = &[
        // Attention: [N, heads, T, d] × [N, heads, d, T] and P·V.
        (&[2, 3, 9, 8], &[2, 3, 8, 9]),
        (&[2, 3, 9, 9], &[2, 3, 9, 8]),
        // Broadcast batch axes, a plain 2-D B, a 2-D A, ranks that differ.
        (&[2, 1, 5, 37], &[1, 3, 37, 17]),
        (&[3, 7, 19], &[19, 33]),
        (&[7, 19], &[2, 19, 40]),
        (&[1, 1, 1], &[1, 1, 1]),
        (&[4, 40, 70], &[4, 70, 5]),
    ];
    for (i, &(sa, sb)) in shapes.iter().enumerate() {
        for signs in [(false, false), (true, true), (false, true), (true, false)] {
            for extreme in [false, true] {
                if (i + usize::from(signs.0)) % 2 == 0 {
                    check::<u8>(&mut rng, sa, sb, signs, extreme, &isas);
                } else {
                    check::<i8>(&mut rng, sa, sb, signs, extreme, &isas);
                }
            }
        }
    }
}

#[test]
fn unsupported_layouts_are_errors_not_wrong_answers() {
    let (a, b) = ([1u8; 12], [1u8; 12]);
    let t = |d: &'static [usize], v: &'static [u8]| CodeTensor {
        codes: Codes::U8(v),
        shape: d,
        zero_point: 0,
    };
    let stage = OutputStage::float(vec![1.0], 0);
    let mut out = [0u8; 16];
    let a: &'static [u8] = Box::leak(Box::new(a));
    let b: &'static [u8] = Box::leak(Box::new(b));
    for (sa, sb) in [
        (&[12][..], &[12, 1][..]),        // 1-D A
        (&[3, 4][..], &[3, 4][..]),       // K mismatch
        (&[2, 2, 3][..], &[3, 2, 2][..]), // batch 2 vs 3
    ] {
        let r = matmul_codes_quant_with(Isa::Scalar, &t(sa, a), &t(sb, b), &stage, &mut out);
        assert!(r.is_err(), "{sa:?} × {sb:?} accepted");
    }
}
