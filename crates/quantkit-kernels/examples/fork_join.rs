//! What one rayon fork/join costs a kernel call, the figure behind `par::MIN_TASK_NS`
//! (docs/kernels.md, "Threads at batch 1").
//!
//! In a pool of `--threads` workers (default 2), from inside the pool as the engine calls
//! its kernels, it times `tasks` tasks of `work` ns of spinning each, split by the same
//! `into_par_iter().for_each` the kernels use, against the same work run serially, and
//! prints the overhead per fork/join: `t_par − t_serial·(1/threads)` for balanced tasks.
//! Two regimes: back to back (the workers are spinning, hot) and after `gap` µs of serial
//! work on the calling thread (as between two engine steps: the workers may have gone to
//! sleep and must be woken). Best and median of `reps` repetitions.
//!
//! ```text
//! cargo run --release -p quantkit-kernels --example fork_join [-- THREADS]
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use rayon::prelude::*;

/// Spins for about `ns` nanoseconds (calibrated: no syscall, no sleep).
fn spin(ns: u64) {
    let end = Instant::now() + Duration::from_nanos(ns);
    while Instant::now() < end {
        black_box(0);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    println!(
        "rayon fork/join overhead, {threads} worker(s); per call: tasks × work ns; \
         overhead = t_parallel − t_serial/threads (µs), best / median of 200"
    );
    println!(
        "{:>6} {:>9} {:>8} | {:>13} {:>13} | {:>13} {:>13}",
        "tasks", "work ns", "gap µs", "hot best", "hot median", "woken best", "woken median"
    );
    pool.install(|| {
        for &tasks in &[2usize, 8] {
            for &work in &[0u64, 1_000, 5_000, 20_000] {
                for &gap in &[0u64, 50, 500] {
                    let reps = 200;
                    let (mut hot, mut woken) = (Vec::new(), Vec::new());
                    for _ in 0..reps {
                        // Back to back: fork right after the previous join.
                        let t = Instant::now();
                        (0..tasks).into_par_iter().for_each(|_| spin(work));
                        hot.push(t.elapsed().as_secs_f64() * 1e6);
                        // After a serial stretch of `gap` µs on this thread alone.
                        spin(gap * 1000);
                        let t = Instant::now();
                        (0..tasks).into_par_iter().for_each(|_| spin(work));
                        woken.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                    let ideal = (tasks as f64 * work as f64 / 1e3) / threads.min(tasks) as f64;
                    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
                    println!(
                        "{tasks:>6} {work:>9} {gap:>8} | {:>13.2} {:>13.2} | {:>13.2} {:>13.2}",
                        best(&hot) - ideal,
                        median(&mut hot) - ideal,
                        best(&woken) - ideal,
                        median(&mut woken) - ideal,
                    );
                }
            }
        }
    });
}
