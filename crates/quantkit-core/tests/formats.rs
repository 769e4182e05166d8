//! The narrow float formats against ONNX 1.23's reference conversions (ml_dtypes and
//! onnx.numpy_helper), recorded by `tests/data/gen_format_vectors.py` in
//! `tests/data/format_vectors.txt`: every finite code of every format, the exact midpoints
//! between neighbouring codes and one f32 ulp either side, the overflow region, powers of
//! two (and their midpoints) over the whole f32 range for E8M0, specials and random values.

use quantkit_core::formats::{bf16_encode, e8m0_encode, E8M0Rounding, MiniFloat};

fn same(f: MiniFloat, got: u8, want: u8) -> bool {
    // Any NaN code matches any NaN code of the same format (the reference is not
    // consistent about NaN signs across paths); everything else bit for bit.
    got == want || (f.decode(got).is_nan() && f.decode(want).is_nan())
}

#[test]
fn conversions_match_the_onnx_reference() {
    let text = include_str!("data/format_vectors.txt");
    let mut rows = 0;
    let mut bad = Vec::new();
    for line in text.lines() {
        let v: Vec<u32> = line
            .split_whitespace()
            .map(|h| u32::from_str_radix(h, 16).expect("hex"))
            .collect();
        assert_eq!(v.len(), 18, "{line}");
        let x = f32::from_bits(v[0]);
        for (k, f) in MiniFloat::ALL.iter().enumerate() {
            for (j, sat) in [true, false].into_iter().enumerate() {
                let want = v[1 + 2 * k + j] as u8;
                let got = f.encode(x, sat);
                if !same(*f, got, want) {
                    bad.push(format!(
                        "{f:?} sat={sat} x={x:e} ({:#010x}): {got:#04x} vs {want:#04x}",
                        v[0]
                    ));
                }
            }
        }
        let modes = [E8M0Rounding::Up, E8M0Rounding::Down, E8M0Rounding::Nearest];
        for (k, mode) in modes.into_iter().enumerate() {
            for (j, sat) in [true, false].into_iter().enumerate() {
                let want = v[11 + 2 * k + j] as u8;
                let got = e8m0_encode(x, sat, mode);
                if got != want {
                    bad.push(format!(
                        "e8m0 {mode:?} sat={sat} x={x:e}: {got:#04x} vs {want:#04x}"
                    ));
                }
            }
        }
        let (got, want) = (bf16_encode(x), v[17] as u16);
        let nan = |b: u16| f32::from_bits(u32::from(b) << 16).is_nan();
        if got != want && !(nan(got) && nan(want)) {
            bad.push(format!("bf16 x={x:e}: {got:#06x} vs {want:#06x}"));
        }
        rows += 1;
    }
    assert!(rows > 2000, "{rows} rows");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad[..bad.len().min(40)].join("\n")
    );
}
