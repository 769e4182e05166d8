//! Element-wise quantization passes over whole slices, outside the GEMM/conv kernels:
//!
//! - [`quantize`]: f32 → 8- or 16-bit codes, ONNX `QuantizeLinear` per tensor, equation (1) of
//!   `docs/quantization.md`;
//! - [`dequantize`]: 8- or 16-bit codes → f32, ONNX `DequantizeLinear` per tensor, equation (2);
//! - [`chain_quantize`]: a chain of f32 operations with constants, then (1) — the input
//!   normalisation `(x − mean) / std → QuantizeLinear` the integer engine runs in one pass;
//! - [`binary_codes`]: `Q(DQ(a) ∘ b)` on 8-bit codes with a clamp — the integer engine's
//!   element-wise Add/Sub/Mul/Div of two quantized tensors (QLinearAdd, QLinearMul, the
//!   squeeze-and-excite scale).
//!
//! The per-element arithmetic is quantkit-core's ([`quantkit_core::quantize_code`],
//! [`quantkit_core::dequantize_code`]), so the graph executor, the engine and these loops
//! compute the same codes by construction. Each AVX2 version is the scalar loop body compiled
//! again with AVX2 enabled: the same IEEE operations element by element (no reassociation,
//! no reciprocal), so the same bits — tested below on awkward lengths, zero points at both
//! ends of the range and NaN/±∞.
//!
//! Each entry point picks its implementation from the kernel table of the dispatched ISA
//! (its `elementwise` entry), so `QUANTKIT_ISA=scalar` makes these loops scalar too.

use quantkit_core::{dequantize_code, quantize_code, CodeType, QuantType};

use crate::dispatch::{isa, Isa, VectorBody};

/// Whether the AVX2 bodies run for `isa`: the table of `isa` (an ISA the CPU lacks runs
/// scalar) has an AVX2 copy of the element-wise passes, which its AVX2 plug installs only
/// after detecting AVX2 (higher ISAs keep that entry). Reading the entry counts it in
/// [`crate::dispatch::simd_calls`].
#[inline]
fn use_avx2(isa: Isa) -> bool {
    match crate::dispatch::table_for(isa) {
        Ok(k) => matches!(k.elementwise(), VectorBody::Avx2(_)),
        Err(_) => false,
    }
}

/// Equation (1) per tensor: `out[i] = clamp(round_half_even(x[i] / scale) + zero_point,
/// T::MIN, T::MAX)`, NaN → `zero_point` ([`quantkit_core::quantize_code`]; `x / scale` is
/// a true f32 division), to 8- or 16-bit codes ([`CodeType`]). `zero_point` must lie in
/// `T`'s range (a zero point of `T`).
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn quantize<T: CodeType>(x: &[f32], scale: f32, zero_point: i32, out: &mut [T]) {
    quantize_with(isa(), x, scale, zero_point, out)
}

/// [`quantize`] on `isa` (an ISA the CPU lacks runs the scalar loop).
pub fn quantize_with<T: CodeType>(isa: Isa, x: &[f32], scale: f32, zero_point: i32, out: &mut [T]) {
    assert_eq!(x.len(), out.len(), "quantize: input and output lengths");
    #[cfg(target_arch = "x86_64")]
    if use_avx2(isa) {
        // SAFETY: `use_avx2` checked that the CPU has AVX2.
        return unsafe { avx2::quantize(x, scale, zero_point, out) };
    }
    let _ = isa;
    generic::quantize(x, scale, zero_point, out)
}

/// Equation (2) per tensor: `out[i] = (q[i] − zero_point) as f32 · scale`, the difference in
/// i32 ([`quantkit_core::dequantize_code`]), from 8- or 16-bit codes ([`CodeType`]).
/// `zero_point` must be a code of `T`.
///
/// # Panics
/// If `q` and `out` differ in length.
pub fn dequantize<T: CodeType>(q: &[T], scale: f32, zero_point: i32, out: &mut [f32]) {
    dequantize_with(isa(), q, scale, zero_point, out)
}

/// [`dequantize`] on `isa` (an ISA the CPU lacks runs the scalar loop).
pub fn dequantize_with<T: CodeType>(
    isa: Isa,
    q: &[T],
    scale: f32,
    zero_point: i32,
    out: &mut [f32],
) {
    assert_eq!(q.len(), out.len(), "dequantize: input and output lengths");
    #[cfg(target_arch = "x86_64")]
    if use_avx2(isa) {
        // SAFETY: `use_avx2` checked that the CPU has AVX2.
        return unsafe { avx2::dequantize(q, scale, zero_point, out) };
    }
    let _ = isa;
    generic::dequantize(q, scale, zero_point, out)
}

/// One f32 operation of a [`chain_quantize`] chain between the running value `v` and a
/// constant `c`; each is one IEEE operation in the order given (the order of the graph's
/// `Sub`/`Div` inputs matters; `Add` and `Mul` are commutative in IEEE arithmetic up to
/// which NaN payload survives, and every NaN quantizes to the zero point).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainOp {
    /// `v + c`.
    Add,
    /// `v − c`.
    Sub,
    /// `c − v`.
    SubFrom,
    /// `v · c`.
    Mul,
    /// `v / c`.
    Div,
    /// `c / v`.
    DivInto,
}

/// Elements per pass of [`chain_quantize`] over an L1-resident stack buffer.
const CHUNK: usize = 1024;

/// `out[i] = quantize_code(ops applied in order to x[i], scale, zero_point)`: each
/// `(op, c)` of `ops` is one f32 operation with the constant `c` ([`ChainOp`]), then
/// equation (1) exactly as [`quantize`]. Computed `CHUNK` elements at a time, one loop per
/// operation (so each vectorises).
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn chain_quantize<T: QuantType>(
    x: &[f32],
    ops: &[(ChainOp, f32)],
    scale: f32,
    zero_point: i32,
    out: &mut [T],
) {
    chain_quantize_with(isa(), x, ops, scale, zero_point, out)
}

/// [`chain_quantize`] on `isa` (an ISA the CPU lacks runs the scalar loop).
pub fn chain_quantize_with<T: QuantType>(
    isa: Isa,
    x: &[f32],
    ops: &[(ChainOp, f32)],
    scale: f32,
    zero_point: i32,
    out: &mut [T],
) {
    assert_eq!(
        x.len(),
        out.len(),
        "chain_quantize: input and output lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if use_avx2(isa) {
        // SAFETY: `use_avx2` checked that the CPU has AVX2.
        return unsafe { avx2::chain_quantize(x, ops, scale, zero_point, out) };
    }
    let _ = isa;
    generic::chain_quantize(x, ops, scale, zero_point, out)
}

/// The second operand of [`binary_codes`].
#[derive(Debug, Clone, Copy)]
pub enum Operand<'a> {
    /// 8-bit codes (as bytes) and the f32 value of each code (the graph's DequantizeLinear
    /// of that code, indexed by the byte); as long as the first operand.
    Codes(&'a [f32; 256], &'a [u8]),
    /// f32 values, as many as the first operand has codes.
    Values(&'a [f32]),
}

/// `out[i] = clamp(quantize_code::<T>(op(da[a[i]], b[i]), scale, zero_point), lo, hi)` as
/// the code's byte (an i8 code as its two's complement), where `b[i]` is the second
/// operand's f32 value ([`Operand`]) and `op(v, c)` is one f32 operation ([`ChainOp`]:
/// `Add` is `v + c`, `SubFrom` is `c − v`, so an operand order is kept whichever operand is
/// `a`). Per element this is exactly `quantize_code(v ∘ c)` of quantkit-core, the graph's
/// QuantizeLinear after its f32 Add/Sub/Mul/Div, so the codes equal the float executor's
/// bit for bit; `[lo, hi]` is a fused Relu/Clip as a clamp on codes (within `T`'s range).
///
/// # Panics
/// If `a`, the second operand and `out` differ in length.
#[allow(clippy::too_many_arguments)]
pub fn binary_codes<T: QuantType>(
    op: ChainOp,
    da: &[f32; 256],
    a: &[u8],
    b: Operand<'_>,
    scale: f32,
    zero_point: i32,
    (lo, hi): (i32, i32),
    out: &mut [u8],
) {
    binary_codes_with::<T>(isa(), op, da, a, b, scale, zero_point, (lo, hi), out)
}

/// [`binary_codes`] on `isa` (an ISA the CPU lacks runs the scalar loop).
#[allow(clippy::too_many_arguments)]
pub fn binary_codes_with<T: QuantType>(
    isa: Isa,
    op: ChainOp,
    da: &[f32; 256],
    a: &[u8],
    b: Operand<'_>,
    scale: f32,
    zero_point: i32,
    clamp: (i32, i32),
    out: &mut [u8],
) {
    let nb = match b {
        Operand::Codes(_, c) => c.len(),
        Operand::Values(v) => v.len(),
    };
    assert!(
        a.len() == out.len() && nb == out.len(),
        "binary_codes: operand and output lengths"
    );
    #[cfg(target_arch = "x86_64")]
    if use_avx2(isa) {
        // SAFETY: `use_avx2` checked that the CPU has AVX2.
        return unsafe { avx2::binary_codes::<T>(op, da, a, b, scale, zero_point, clamp, out) };
    }
    let _ = isa;
    generic::binary_codes::<T>(op, da, a, b, scale, zero_point, clamp, out)
}

/// The portable loops; `#[inline(always)]` so that each AVX2 wrapper compiles them again
/// with AVX2 enabled.
mod generic {
    use super::*;

    #[inline(always)]
    pub(super) fn quantize<T: CodeType>(x: &[f32], scale: f32, zero_point: i32, out: &mut [T]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = quantize_code(v, scale, zero_point);
        }
    }

    #[inline(always)]
    pub(super) fn dequantize<T: CodeType>(q: &[T], scale: f32, zero_point: i32, out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(q) {
            *o = dequantize_code(v, scale, zero_point);
        }
    }

    /// `out = clamp(Q(op(v, c)))` over equal-length value buffers, one loop per operation
    /// (each vectorises).
    #[inline(always)]
    fn op_quantize<T: QuantType>(
        op: ChainOp,
        v: &mut [f32],
        c: &[f32],
        scale: f32,
        zero_point: i32,
        (lo, hi): (i32, i32),
        out: &mut [u8],
    ) {
        let pairs = v.iter_mut().zip(c);
        match op {
            ChainOp::Add => pairs.for_each(|(v, &c)| *v += c),
            ChainOp::Sub => pairs.for_each(|(v, &c)| *v -= c),
            ChainOp::SubFrom => pairs.for_each(|(v, &c)| *v = c - *v),
            ChainOp::Mul => pairs.for_each(|(v, &c)| *v *= c),
            ChainOp::Div => pairs.for_each(|(v, &c)| *v /= c),
            ChainOp::DivInto => pairs.for_each(|(v, &c)| *v = c / *v),
        }
        for (o, &v) in out.iter_mut().zip(v.iter()) {
            let q = quantize_code::<T>(v, scale, zero_point).to_i32();
            *o = q.max(lo).min(hi) as u8;
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn binary_codes<T: QuantType>(
        op: ChainOp,
        da: &[f32; 256],
        a: &[u8],
        b: Operand<'_>,
        scale: f32,
        zero_point: i32,
        clamp: (i32, i32),
        out: &mut [u8],
    ) {
        let mut va = [0f32; CHUNK];
        let mut vb = [0f32; CHUNK];
        for (k, (ac, oc)) in a.chunks(CHUNK).zip(out.chunks_mut(CHUNK)).enumerate() {
            let n = ac.len();
            let va = &mut va[..n];
            for (v, &x) in va.iter_mut().zip(ac) {
                *v = da[x as usize];
            }
            let c: &[f32] = match b {
                Operand::Codes(db, bc) => {
                    for (v, &x) in vb[..n].iter_mut().zip(&bc[k * CHUNK..][..n]) {
                        *v = db[x as usize];
                    }
                    &vb[..n]
                }
                Operand::Values(bv) => &bv[k * CHUNK..][..n],
            };
            op_quantize::<T>(op, va, c, scale, zero_point, clamp, oc);
        }
    }

    #[inline(always)]
    pub(super) fn chain_quantize<T: QuantType>(
        x: &[f32],
        ops: &[(ChainOp, f32)],
        scale: f32,
        zero_point: i32,
        out: &mut [T],
    ) {
        let mut buf = [0f32; CHUNK];
        for (xc, oc) in x.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let b = &mut buf[..xc.len()];
            b.copy_from_slice(xc);
            for &(op, c) in ops {
                match op {
                    ChainOp::Add => b.iter_mut().for_each(|v| *v += c),
                    ChainOp::Sub => b.iter_mut().for_each(|v| *v -= c),
                    ChainOp::SubFrom => b.iter_mut().for_each(|v| *v = c - *v),
                    ChainOp::Mul => b.iter_mut().for_each(|v| *v *= c),
                    ChainOp::Div => b.iter_mut().for_each(|v| *v /= c),
                    ChainOp::DivInto => b.iter_mut().for_each(|v| *v = c / *v),
                }
            }
            quantize(b, scale, zero_point, oc);
        }
    }
}

/// The same loops compiled with AVX2 (the compiler vectorises them 8 lanes wide).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize<T: CodeType>(
        x: &[f32],
        scale: f32,
        zero_point: i32,
        out: &mut [T],
    ) {
        generic::quantize(x, scale, zero_point, out)
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dequantize<T: CodeType>(
        q: &[T],
        scale: f32,
        zero_point: i32,
        out: &mut [f32],
    ) {
        generic::dequantize(q, scale, zero_point, out)
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn chain_quantize<T: QuantType>(
        x: &[f32],
        ops: &[(ChainOp, f32)],
        scale: f32,
        zero_point: i32,
        out: &mut [T],
    ) {
        generic::chain_quantize(x, ops, scale, zero_point, out)
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn binary_codes<T: QuantType>(
        op: ChainOp,
        da: &[f32; 256],
        a: &[u8],
        b: Operand<'_>,
        scale: f32,
        zero_point: i32,
        clamp: (i32, i32),
        out: &mut [u8],
    ) {
        generic::binary_codes::<T>(op, da, a, b, scale, zero_point, clamp, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantkit_core::{dequantize_value, quantize_value, RoundingMode};

    /// Lengths around the vector widths (8 f32 lanes, 32 bytes) and the chain's chunk.
    const LENGTHS: [usize; 19] = [
        0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1023, 1024, 1025, 2049,
    ];

    fn isas() -> Vec<Isa> {
        Isa::ALL.into_iter().filter(|i| i.is_supported()).collect()
    }

    /// Random values of every magnitude with ties, NaN, ±∞, ±0 and huge values mixed in.
    fn values(n: usize) -> Vec<f32> {
        let special = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            0.0,
            0.5,
            1.5,
            -2.5,
            127.5,
            -128.5,
            255.5,
            1e30,
            -1e30,
            4_194_304.5,
            -8_388_607.0,
            f32::MIN_POSITIVE,
        ];
        let mut s = 0x2545_f491_4f6c_dd1du64;
        (0..n + 1)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                match i % 5 {
                    0 => special[(s % special.len() as u64) as usize],
                    1 => f32::from_bits(s as u32),
                    2 => (s % 2048) as f32 * 0.25 - 256.0,
                    _ => ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 600.0,
                }
            })
            .collect()
    }

    fn quantize_case<T: CodeType + PartialEq + std::fmt::Debug>() {
        let all = values(2050);
        for n in LENGTHS {
            // An unaligned start as well as an aligned one.
            for x in [&all[..n], &all[1..n + 1]] {
                for z in [T::MIN, T::MAX, (T::MIN + T::MAX) / 2, 0] {
                    for s in [0.5f32, 1.0, 0.0123, 3.7, 1e-30] {
                        let mut want = vec![T::default(); n];
                        quantize_with(Isa::Scalar, x, s, z, &mut want);
                        for (&v, &w) in x.iter().zip(&want) {
                            let r =
                                quantize_value(v, s, z, T::MIN, T::MAX, RoundingMode::HalfToEven);
                            assert_eq!(w.to_i32(), r, "scalar vs eq. (1): x {v}, s {s}, z {z}");
                        }
                        for isa in isas() {
                            let mut got = vec![T::default(); n];
                            quantize_with(isa, x, s, z, &mut got);
                            assert_eq!(got, want, "{isa}, n {n}, s {s}, z {z}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quantize_simd_equals_scalar_u8() {
        quantize_case::<u8>();
    }

    #[test]
    fn quantize_simd_equals_scalar_i8() {
        quantize_case::<i8>();
    }

    #[test]
    fn quantize_simd_equals_scalar_u16() {
        quantize_case::<u16>();
    }

    #[test]
    fn quantize_simd_equals_scalar_i16() {
        quantize_case::<i16>();
    }

    fn dequantize_case<T: CodeType>() {
        let codes: Vec<T> = (0..2050i32)
            .map(|i| T::from_clamped(T::MIN + i * 37 % (T::MAX - T::MIN + 1)))
            .collect();
        for n in LENGTHS {
            for q in [&codes[..n], &codes[1..n + 1]] {
                for z in [T::MIN, T::MAX, 0] {
                    for s in [0.037f32, 1.0, 3e-9, 7.5e5] {
                        let mut want = vec![0f32; n];
                        dequantize_with(Isa::Scalar, q, s, z, &mut want);
                        for (&c, &w) in q.iter().zip(&want) {
                            let r = dequantize_value(c.to_i32(), s, z);
                            assert_eq!(w.to_bits(), r.to_bits(), "scalar vs eq. (2)");
                        }
                        for isa in isas() {
                            let mut got = vec![0f32; n];
                            dequantize_with(isa, q, s, z, &mut got);
                            let (g, w): (Vec<u32>, Vec<u32>) = (
                                got.iter().map(|v| v.to_bits()).collect(),
                                want.iter().map(|v| v.to_bits()).collect(),
                            );
                            assert_eq!(g, w, "{isa}, n {n}, s {s}, z {z}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn dequantize_simd_equals_scalar_u8() {
        dequantize_case::<u8>();
    }

    #[test]
    fn dequantize_simd_equals_scalar_i8() {
        dequantize_case::<i8>();
    }

    #[test]
    fn dequantize_simd_equals_scalar_u16() {
        dequantize_case::<u16>();
    }

    #[test]
    fn dequantize_simd_equals_scalar_i16() {
        dequantize_case::<i16>();
    }

    /// The chain element by element, written plainly.
    fn chain_one(v: f32, ops: &[(ChainOp, f32)]) -> f32 {
        ops.iter().fold(v, |v, &(op, c)| match op {
            ChainOp::Add => v + c,
            ChainOp::Sub => v - c,
            ChainOp::SubFrom => c - v,
            ChainOp::Mul => v * c,
            ChainOp::Div => v / c,
            ChainOp::DivInto => c / v,
        })
    }

    fn chain_case<T: QuantType + PartialEq + std::fmt::Debug>() {
        use ChainOp::*;
        let chains: [&[(ChainOp, f32)]; 5] = [
            &[],
            &[(Sub, 0.1307), (Div, 0.3081)],
            &[(Mul, 255.0), (Add, -127.5), (SubFrom, 3.0)],
            &[(DivInto, 1.0), (Mul, 0.0), (Add, 0.5)],
            &[
                (Div, 0.0),
                (Sub, f32::INFINITY),
                (Mul, -2.0),
                (DivInto, -7.0),
            ],
        ];
        let all = values(2050);
        for n in LENGTHS {
            for x in [&all[..n], &all[1..n + 1]] {
                for ops in chains {
                    for z in [T::MIN, T::MAX, 0] {
                        let s = 0.0123f32;
                        let mut want = vec![T::default(); n];
                        chain_quantize_with(Isa::Scalar, x, ops, s, z, &mut want);
                        for (&v, &w) in x.iter().zip(&want) {
                            let c: T = quantize_code(chain_one(v, ops), s, z);
                            assert_eq!(w, c, "scalar vs plain: x {v}, {ops:?}");
                        }
                        for isa in isas() {
                            let mut got = vec![T::default(); n];
                            chain_quantize_with(isa, x, ops, s, z, &mut got);
                            assert_eq!(got, want, "{isa}, n {n}, {ops:?}, z {z}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn chain_quantize_simd_equals_scalar_u8() {
        chain_case::<u8>();
    }

    #[test]
    fn chain_quantize_simd_equals_scalar_i8() {
        chain_case::<i8>();
    }

    /// `binary_codes` against the plain per-element formula (f32 operation in the operand
    /// order, then quantkit-core's `quantize_code`, then the clamp) on the scalar path, and
    /// every ISA against scalar bit for bit: both operand kinds, every operation, awkward
    /// lengths, tables with NaN/±∞/ties, zero points at both ends, clamps inside the range.
    fn binary_case<T: QuantType>() {
        use ChainOp::*;
        let vals = values(600);
        let da: [f32; 256] = std::array::from_fn(|i| vals[i]);
        let db: [f32; 256] = std::array::from_fn(|i| vals[i + 300]);
        // Plain dequantization tables too (the engine's usual case).
        let qa: [f32; 256] = std::array::from_fn(|i| (i as i32 - 3) as f32 * 0.0371);
        let qb: [f32; 256] = std::array::from_fn(|i| (i as i32 - 250) as f32 * 0.5);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let codes: Vec<u8> = (0..2051)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect();
        let mid = (T::MIN + T::MAX) / 2;
        for n in LENGTHS {
            let (a, bc) = (&codes[..n], &codes[1..n + 1]);
            for (ta, tb) in [(&da, &db), (&qa, &qb)] {
                let bvals: Vec<f32> = bc.iter().map(|&x| tb[x as usize]).collect();
                for op in [Add, Sub, SubFrom, Mul, Div, DivInto] {
                    for (z, clamp) in [
                        (T::MIN, (T::MIN, T::MAX)),
                        (T::MAX, (T::MIN, T::MAX)),
                        (0, (0, T::MAX)),
                        (mid, (mid - 7, mid + 9)),
                    ] {
                        let sc = 0.0123f32;
                        for b in [Operand::Codes(tb, bc), Operand::Values(&bvals)] {
                            let mut want = vec![0u8; n];
                            binary_codes_with::<T>(
                                Isa::Scalar,
                                op,
                                ta,
                                a,
                                b,
                                sc,
                                z,
                                clamp,
                                &mut want,
                            );
                            for i in 0..n {
                                let v = chain_one(ta[a[i] as usize], &[(op, tb[bc[i] as usize])]);
                                let q = quantize_code::<T>(v, sc, z).to_i32();
                                let c = q.max(clamp.0).min(clamp.1) as u8;
                                assert_eq!(want[i], c, "scalar vs plain: {op:?} at {i}");
                            }
                            for isa in isas() {
                                let mut got = vec![0u8; n];
                                binary_codes_with::<T>(isa, op, ta, a, b, sc, z, clamp, &mut got);
                                assert_eq!(got, want, "{isa}, n {n}, {op:?}, z {z}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn binary_codes_simd_equals_scalar_u8() {
        binary_case::<u8>();
    }

    #[test]
    fn binary_codes_simd_equals_scalar_i8() {
        binary_case::<i8>();
    }

    #[test]
    #[should_panic(expected = "operand and output lengths")]
    fn binary_codes_rejects_a_short_operand() {
        let t = [0f32; 256];
        binary_codes_with::<u8>(
            Isa::Scalar,
            ChainOp::Add,
            &t,
            &[1, 2],
            Operand::Values(&[1.0]),
            1.0,
            0,
            (0, 255),
            &mut [0u8; 2],
        );
    }

    #[test]
    #[should_panic(expected = "input and output lengths")]
    fn quantize_rejects_a_short_output() {
        quantize_with::<u8>(Isa::Scalar, &[1.0, 2.0], 1.0, 0, &mut [0u8; 1]);
    }
}
