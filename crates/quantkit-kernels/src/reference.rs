//! Plain i64 references of the kernels, written for clarity rather than speed. The tests of
//! this crate check every kernel against them; other crates may use them in their own tests.

/// `C[i][j] = Σ_k (a[i][k] − za)·(w[k][j] − zw[j])` in i64, with `a` `[M,K]` and `w` `[K,N]`
/// given as plain integers (any 8-bit type widened), `zw` per column.
pub fn gemm_i64(
    a: &[i32],
    m: usize,
    k: usize,
    za: i32,
    w: &[i32],
    n: usize,
    zw: &[i32],
) -> Vec<i64> {
    let mut c = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0i64;
            for kk in 0..k {
                s += (a[i * k + kk] as i64 - za as i64) * (w[kk * n + j] as i64 - zw[j] as i64);
            }
            c[i * n + j] = s;
        }
    }
    c
}

/// Round half to even of an f32 by explicit comparison (independent of
/// `f32::round_ties_even`, which the kernels use).
pub fn round_half_even_f32(v: f32) -> f64 {
    let v = v as f64;
    let f = v.floor();
    let d = v - f;
    if d > 0.5 || (d == 0.5 && (f as i64) % 2 != 0) {
        f + 1.0
    } else {
        f
    }
}

/// The float-scale output stage (K2, K3a, K4) on an exact i64 accumulator:
/// `clamp(round_half_even(f32(acc + bias) · scale) + z, lo, hi)`. The accumulator must fit
/// in i32 (the kernels' documented range); the f32 conversion and product are the
/// definition of the mode (ONNX Runtime computes them in f32).
pub fn float_output_i64(acc: i64, bias: i64, scale: f32, z: i32, lo: i32, hi: i32) -> i32 {
    let t = acc + bias;
    assert!(i32::try_from(t).is_ok(), "accumulator {t} outside i32");
    let v = (t as i32 as f32) * scale;
    let r = round_half_even_f32(v) + z as f64;
    r.clamp(lo as f64, hi as f64) as i32
}
