//! Winograd F(2×2, 3×3) against im2col + GEMM on the 3×3 layers of the conv net of
//! `bench/int8_vs_ort.py` (and LeNet's two convs), side by side in one run: the same
//! weights packed both ways, alternating calls, best of `REPS`.
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release -p quantkit-kernels --example winograd_vs_im2col -- [REPS] [BATCH] [LAYER]
//! ```
//! Prints each layer's time on both paths, the throughput in direct-convolution MACs per
//! second (so the two are comparable), and the im2col / Winograd time ratio. Layers with
//! fewer than 8 input channels are not packed for Winograd and show `gemm` twice.
use quantkit_kernels::conv::{conv2d_quant, ConvAlgorithm, ConvParams, ConvWeights, NhwcInput};
use quantkit_kernels::output::OutputStage;
use std::time::Instant;

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let (reps, batch, only) = (arg(1, 20), arg(2, 64), arg(3, usize::MAX));
    let p = ConvParams {
        pads: [1; 4],
        ..ConvParams::new(3, 3)
    };
    let mut state = 1u64;
    let mut rnd = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    println!(
        "layer (H×W C_in→C_out)  path       time      GMAC/s   im2col     GMAC/s   im2col/path"
    );
    let layers = [
        (64, 3, 32),
        (32, 32, 64),
        (16, 64, 128),
        (8, 128, 256),
        (14, 32, 64),
        (28, 1, 32),
    ];
    for (i, &(hw, ci, co)) in layers.iter().enumerate() {
        if only != usize::MAX && only != i {
            continue;
        }
        let w: Vec<i8> = (0..co * ci * 9).map(|_| rnd() as i8).collect();
        let x: Vec<u8> = (0..batch * hw * hw * ci).map(|_| rnd() as u8).collect();
        let input = NhwcInput {
            data: &x,
            shape: [batch, hw, hw, ci],
            zero_point: 3,
        };
        let stage = OutputStage::float(vec![1e-4; co], 5).with_bias(vec![100; co]);
        let mut out = vec![0u8; batch * hw * hw * co];
        let auto = ConvWeights::new(&w, co, ci, p, &[0]).unwrap();
        let gemm = ConvWeights::with_algorithm(&w, co, ci, p, &[0], ConvAlgorithm::Im2col).unwrap();
        let mut best = [f64::MAX; 2];
        for _ in 0..reps {
            for (b, cw) in best.iter_mut().zip([&auto, &gemm]) {
                let t = Instant::now();
                conv2d_quant(&input, cw, &stage, &mut out).unwrap();
                *b = b.min(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let gmacs = |ms: f64| (batch * hw * hw * co * ci * 9) as f64 / ms / 1e6;
        println!(
            "{hw:>2}×{hw:<2} {ci:>3}→{co:<3}            {:<9} {:>7.3} ms {:>6.1}  {:>7.3} ms {:>6.1}   {:.2}×",
            auto.method(),
            best[0],
            gmacs(best[0]),
            best[1],
            gmacs(best[1]),
            best[1] / best[0]
        );
    }
}
