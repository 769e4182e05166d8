//! f32 matrix product: a thin wrapper over the `gemm` crate plus the plain scalar reference
//! it is tested against.

use gemm::Parallelism;

/// Read-only strided matrix view: element (i, j) is `data[i * rs + j * cs]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    /// Backing slice.
    pub data: &'a [f32],
    /// Row count.
    pub rows: usize,
    /// Column count.
    pub cols: usize,
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

impl<'a> MatRef<'a> {
    /// A contiguous row-major `rows × cols` matrix.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose (a view, nothing is copied).
    pub fn t(self) -> Self {
        Self {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < self.data.len()
    }

    #[inline]
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// How a product may use threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Par {
    /// Single-threaded (inside an outer parallel loop).
    Seq,
    /// Rayon's current pool.
    Rayon,
}

/// `dst = a · b` (or `dst += a · b` when `accumulate`), `dst` contiguous row-major `m × n`.
///
/// Panics when the shapes disagree or a view reaches outside its slice: those are
/// programming errors of the calling op, which validates user shapes first.
pub fn sgemm(dst: &mut [f32], a: MatRef, b: MatRef, accumulate: bool, par: Par) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "sgemm: inner dimensions differ");
    assert!(dst.len() >= m * n, "sgemm: destination too small");
    assert!(a.in_bounds() && b.in_bounds(), "sgemm: view out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return;
    }
    let parallelism = match par {
        Par::Seq => Parallelism::None,
        Par::Rayon => Parallelism::Rayon(0),
    };
    // SAFETY: `in_bounds` checked that every (i, j) of both views addresses inside its slice,
    // `dst` holds at least m*n elements addressed as row-major (rs = n, cs = 1), and the
    // slices cannot alias because `dst` is borrowed mutably.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
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
            parallelism,
        );
    }
}

/// Plain scalar reference of [`sgemm`] with f64 accumulation.
pub fn sgemm_ref(dst: &mut [f32], a: MatRef, b: MatRef, accumulate: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k);
    for i in 0..m {
        for j in 0..n {
            let mut s = if accumulate {
                dst[i * n + j] as f64
            } else {
                0.0
            };
            for p in 0..k {
                s += a.at(i, p) as f64 * b.at(p, j) as f64;
            }
            dst[i * n + j] = s as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn sgemm_matches_reference_with_transposes() {
        let mut rng = Rng::new(1);
        for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 288, 49), (2, 0, 3)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let ad: Vec<f32> = (0..m * k).map(|_| rng.normal()).collect();
                    let bd: Vec<f32> = (0..k * n).map(|_| rng.normal()).collect();
                    let a = if ta {
                        MatRef::row_major(&ad, k, m).t()
                    } else {
                        MatRef::row_major(&ad, m, k)
                    };
                    let b = if tb {
                        MatRef::row_major(&bd, n, k).t()
                    } else {
                        MatRef::row_major(&bd, k, n)
                    };
                    for acc in [false, true] {
                        let init: Vec<f32> = (0..m * n).map(|_| rng.normal()).collect();
                        let mut got = init.clone();
                        let mut want = init.clone();
                        sgemm(&mut got, a, b, acc, Par::Rayon);
                        sgemm_ref(&mut want, a, b, acc);
                        for (g, w) in got.iter().zip(&want) {
                            // f32 accumulation over k terms of unit normals: error ~ k * eps.
                            assert!((g - w).abs() <= 1e-5 * (k as f32 + 1.0) * 4.0, "{g} vs {w}");
                        }
                    }
                }
            }
        }
    }
}
