//! Training: a small reverse-mode autodiff tape over the float ops, optimizers, the reference model zoo, and later fake-quant for QAT.
