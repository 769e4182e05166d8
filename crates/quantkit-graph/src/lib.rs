//! Graph IR, ONNX import/export, one file per operator, passes, and the float executor.
