//! Integer kernels: int8 GEMM/GEMV, convolution, pooling, lookup tables and output stages, with run-time SIMD dispatch.
