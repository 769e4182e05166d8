//! Float executor vs integer engine latency on a QDQ model:
//! `cargo run --release -p quantkit-engine --example latency -- MODEL.qdq.onnx [BATCH...]`.
//! Inputs are random values in [0, 1) shaped like the model's input with the batch axis set.

use quantkit_engine::{compile, EngineOptions};
use quantkit_graph::{execute, load_model, Tensor};
use std::time::Instant;

fn median_ms(mut f: impl FnMut(), reps: usize) -> f64 {
    f(); // warm-up
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().ok_or("usage: latency MODEL.onnx [BATCH...]")?;
    let batches: Vec<usize> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|b| b.parse())
            .collect::<Result<_, _>>()?
    } else {
        vec![1, 64]
    };
    let g = load_model(path)?;
    let plan = compile(&g, &EngineOptions::default())?;
    let vi = &g.inputs[0];
    let dims: Vec<usize> = vi
        .shape
        .as_ref()
        .ok_or("input without a shape")?
        .iter()
        .map(|d| d.known().unwrap_or(1))
        .collect();
    println!("{path}: {} threads", rayon::current_num_threads());
    for n in plan.report() {
        if let quantkit_engine::Placement::Float { reason } = &n.placement {
            println!("  float island {} ({}): {reason}", n.node, n.op_type);
        }
    }
    for b in batches {
        let mut shape = dims.clone();
        shape[0] = b;
        let n: usize = shape.iter().product();
        let mut s = 12345u64;
        let x: Vec<f32> = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect();
        let x = Tensor::from_f32(&shape, x);
        let reps = if b == 1 { 200 } else { 20 };
        let f = median_ms(
            || {
                execute(&g, vec![(vi.name.clone(), x.clone())]).unwrap();
            },
            reps,
        );
        let e = median_ms(
            || {
                plan.run(vec![(vi.name.as_str(), x.clone())]).unwrap();
            },
            reps,
        );
        if std::env::var_os("PROFILE").is_some() {
            let (_, times) = plan.run_profiled(vec![(vi.name.as_str(), x.clone())])?;
            for (node, kernel, secs) in times {
                println!("    {:>9.3} ms  {node}: {kernel}", secs * 1e3);
            }
        }
        println!(
            "  batch {b:>3}: float executor (QDQ graph) {f:8.3} ms, integer engine {e:8.3} ms ({:.2}x)",
            f / e
        );
    }
    Ok(())
}
