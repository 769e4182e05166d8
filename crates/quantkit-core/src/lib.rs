//! Quantization math: schemes, parameters, quantize/dequantize, fixed-point multipliers, error metrics and calibration observers.
