//! f32 matrix multiplication: a thin wrapper over the `gemm` crate plus the plain scalar
//! reference that tests compare it with.

/// Strided read-only matrix view: element (i, j) is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct MatRef<'a> {
    /// Backing slice.
    pub data: &'a [f32],
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major `rows × cols` matrix (`transposed` reads it as its transpose).
    pub fn row_major(data: &'a [f32], cols: usize, transposed: bool) -> MatRef<'a> {
        if transposed {
            MatRef {
                data,
                rs: 1,
                cs: cols,
            }
        } else {
            MatRef {
                data,
                rs: cols,
                cs: 1,
            }
        }
    }
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `c[m×n] (row-major) = a[m×k] · b[k×n] (+ c if accumulate)`, using the `gemm` crate
/// (multi-threaded with rayon when `parallel`).
///
/// Panics if a view is too small for the given sizes (a caller bug, not a data error).
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef,
    b: MatRef,
    c: &mut [f32],
    accumulate: bool,
    parallel: bool,
) {
    assert!(
        a.fits(m, k) && b.fits(k, n) && c.len() >= m * n,
        "sgemm: operand too small"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return;
    }
    let par = if parallel && m * n * k >= 1 << 16 {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the assertions above guarantee that every element the kernel addresses,
    // (m−1)·rs + (k−1)·cs for `a`, (k−1)·rs + (n−1)·cs for `b` and m·n for `c`, lies inside
    // the slices, and `c` is borrowed mutably so it cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// Scalar reference of [`sgemm`], accumulating in f64.
pub fn sgemm_ref(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef,
    b: MatRef,
    c: &mut [f32],
    accumulate: bool,
) {
    for i in 0..m {
        for j in 0..n {
            let mut s = if accumulate { c[i * n + j] as f64 } else { 0.0 };
            for p in 0..k {
                s += a.data[i * a.rs + p * a.cs] as f64 * b.data[p * b.rs + j * b.cs] as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
}

/// The matrix product of float16 operands as numpy computes it (`np.matmul` and `np.dot` on
/// `float16`, which the ONNX reference evaluator and the node tests' expected outputs use):
/// every product of two f16 values is formed in f32 (exactly: 11 + 11 significant bits fit
/// in f32's 24), added to an f32 accumulator that starts at +0 in ascending `k` order, and
/// the sum is rounded to f16 once. `c[m×n]` receives those f32 sums (row-major); the
/// caller rounds them to f16. Checked bit for bit against numpy in
/// `tests/f16_numpy_rules.rs`.
///
/// Each output element sees exactly the sequential chain of f32 additions (the loop runs
/// over rows, then `k`, then a row of outputs, which keeps each element's additions in `k`
/// order); a fused multiply-add would give the same bits because the products are exact.
///
/// Panics if a view is too small for the given sizes (a caller bug, not a data error).
pub fn hgemm_f32_acc(m: usize, n: usize, k: usize, a: MatRef, b: MatRef, c: &mut [f32]) {
    assert!(
        a.fits(m, k) && b.fits(k, n) && c.len() >= m * n,
        "hgemm_f32_acc: operand too small"
    );
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        row.fill(0.0);
        for p in 0..k {
            let x = a.data[i * a.rs + p * a.cs];
            if b.cs == 1 {
                let bp = &b.data[p * b.rs..p * b.rs + n];
                for (acc, &y) in row.iter_mut().zip(bp) {
                    *acc += x * y;
                }
            } else {
                for (j, acc) in row.iter_mut().enumerate() {
                    *acc += x * b.data[p * b.rs + j * b.cs];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgemm_matches_reference_on_awkward_sizes() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 5, 7),
            (17, 9, 33),
            (64, 65, 63),
            (2, 129, 255),
        ] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 17 % 19) as f32 - 9.0) / 5.0)
                .collect();
            for &(ta, tb) in &[(false, false), (true, false), (false, true), (true, true)] {
                let av = MatRef::row_major(&a, if ta { m } else { k }, ta);
                let bv = MatRef::row_major(&b, if tb { k } else { n }, tb);
                let mut c = vec![0.5f32; m * n];
                let mut r = c.clone();
                sgemm(m, n, k, av, bv, &mut c, true, true);
                sgemm_ref(m, n, k, av, bv, &mut r, true);
                for (x, y) in c.iter().zip(&r) {
                    assert!(
                        (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                        "{m}x{n}x{k}: {x} vs {y}"
                    );
                }
            }
        }
    }
}
