//! PRelu on u8 codes computed per channel (`prelu::PreluCodes`): the portable loop equals
//! the per-code reference (`code`, quantkit-core's DequantizeLinear and QuantizeLinear with
//! ONNX PRelu between) on every code of every channel, every ISA's copy equals the portable
//! one byte for byte, and the result is within half an output step of the f64 value.

use quantkit_kernels::dispatch::Isa;
use quantkit_kernels::prelu::PreluCodes;

fn supported() -> Vec<Isa> {
    Isa::ALL
        .iter()
        .copied()
        .filter(|i| i.is_supported())
        .collect()
}

/// Parameter sets: slopes of both signs, zero, > 1; zero points at both ends; a scale
/// ratio that makes many outputs saturate and one that rounds at exact halves.
fn cases() -> Vec<PreluCodes> {
    let slopes = |c: usize, f: &dyn Fn(usize) -> f32| (0..c).map(f).collect::<Vec<f32>>();
    vec![
        PreluCodes::new(
            slopes(32, &|c| 0.01 + 0.03 * c as f32),
            0.037,
            131,
            0.021,
            40,
        )
        .unwrap(),
        PreluCodes::new(slopes(64, &|c| -0.5 + c as f32 / 40.0), 0.1, 0, 0.05, 255).unwrap(),
        PreluCodes::new(slopes(3, &|c| [0.0, 1.0, 2.5][c]), 0.5, 255, 0.25, 0).unwrap(),
        PreluCodes::new(slopes(17, &|c| 0.25 * c as f32), 1.0, 128, 2.0, 128).unwrap(),
        PreluCodes::new(slopes(128, &|c| (c as f32 * 0.37).sin()), 0.004, 77, 0.9, 3).unwrap(),
    ]
}

#[test]
fn every_isa_equals_the_per_code_reference() {
    for (n, p) in cases().into_iter().enumerate() {
        let c = p.channels();
        // Every code in every channel, shifted per pixel so codes meet every lane.
        let pixels = 256 + 3;
        let data: Vec<u8> = (0..pixels * c)
            .map(|i| ((i / c) as u8).wrapping_add(((i % c) as u8).wrapping_mul(7)))
            .collect();
        let want: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, &x)| p.code(x, i % c))
            .collect();
        for isa in supported() {
            let mut got = data.clone();
            p.apply_with(isa, &mut got).unwrap();
            assert_eq!(got, want, "case {n}, {isa}");
        }
    }
}

#[test]
fn the_reference_is_within_half_a_step_of_f64() {
    // The first case's parameters in f64.
    let (s_in, z_in, s_out, z_out) = (0.037f32 as f64, 131, 0.021f32 as f64, 40);
    let p = &cases()[0];
    for c in 0..32 {
        let k = (0.01f32 + 0.03 * c as f32) as f64;
        for x in 0..=255u8 {
            let v = (x as i32 - z_in) as f64 * s_in;
            let v = if v < 0.0 { k * v } else { v };
            let y = (v / s_out + z_out as f64).clamp(0.0, 255.0);
            let got = p.code(x, c) as f64;
            assert!(
                (got - y).abs() <= 0.5 + 1e-4,
                "channel {c}, code {x}: {got} vs {y}"
            );
        }
    }
}

#[test]
fn bad_parameters_and_partial_pixels_are_refused() {
    assert!(PreluCodes::new(vec![f32::NAN], 0.1, 0, 0.1, 0).is_none());
    assert!(PreluCodes::new(vec![0.1], 0.0, 0, 0.1, 0).is_none());
    assert!(PreluCodes::new(vec![0.1], 0.1, 0, 0.1, 256).is_none());
    assert!(PreluCodes::new(vec![], 0.1, 0, 0.1, 0).is_none());
    let p = PreluCodes::new(vec![0.1, 0.2], 0.1, 0, 0.1, 0).unwrap();
    assert!(p.apply(&mut [1u8, 2, 3]).is_err());
}
